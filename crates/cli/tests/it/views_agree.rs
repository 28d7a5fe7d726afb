//! Every view asked the same question gives the same answer: the totals,
//! the roots, the leak groups and the program's frames of a site, as
//! `summary`, `top`, `leaks`, the JSON, HTML, folded and pprof exports
//! show them. A view that computes a figure by its own rule drifts from
//! the others (roots counted by two rules in `summary` and `report`, the
//! JSON export's indirectly lost blocks as rows of their own): each asks
//! the one analysis.

use crate::common::*;
use crate::exports::{export, pprof_raw_totals};
use serde_json::Value;
use std::path::Path;

fn text(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

/// The text between `start` and the next `end` after it.
fn between<'a>(s: &'a str, start: &str, end: &str) -> &'a str {
    let i = s.find(start).unwrap_or_else(|| panic!("{start} not in the report")) + start.len();
    &s[i..i + s[i..].find(end).unwrap()]
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&amp;", "&")
}

#[test]
fn every_view_gives_one_answer() {
    let d = Scratch::new("one-answer");
    let prog = compile(&d, "leaks.c", &["-O0", "-g"]);
    let (o, dumps) = run_traced(&d.path("a.hdump"), &prog, &[], &["--backtrace", "all"]);
    ok(&o);
    let dump = &dumps[0];
    let summary = json(&["summary".as_ref(), "--json".as_ref(), dump.as_os_str()]);
    let top = json(&["top".as_ref(), "--json".as_ref(), "-n".as_ref(), "100000".as_ref(), dump.as_os_str()]);
    let leaks = json(&["leaks".as_ref(), "--json".as_ref(), dump.as_os_str()]);
    let doc_path = d.path("doc.json");
    export(dump, "json", &doc_path, &[]);
    let doc: Value = serde_json::from_str(&text(&doc_path)).unwrap();
    let html_path = d.path("report.html");
    let o = heapdump().arg("report").arg(dump).arg("-o").arg(&html_path).output().unwrap();
    ok(&o);
    let html = text(&html_path);
    let folded_path = d.path("heap.folded");
    export(dump, "folded", &folded_path, &[]);
    let folded = text(&folded_path);
    let pprof_path = d.path("heap.pb.gz");
    export(dump, "pprof", &pprof_path, &[]);

    // Totals.
    let (allocations, bytes) = (summary["allocations"].as_u64().unwrap(), summary["bytes"].as_u64().unwrap());
    assert!(allocations >= 10, "the program's blocks are in the dump: {summary}");
    assert_eq!((doc["allocations"].as_u64().unwrap(), doc["bytes"].as_u64().unwrap()), (allocations, bytes), "export json");
    let rows = top.as_array().unwrap();
    let sum = |k: &str| rows.iter().map(|r| r[k].as_u64().unwrap()).sum::<u64>();
    assert_eq!((sum("allocations"), sum("bytes")), (allocations, bytes), "top");
    assert_eq!(between(&html, "<td id=\"allocations\">", "<"), allocations.to_string(), "report");
    assert_eq!(between(&html, "<td id=\"bytes\">", " "), bytes.to_string(), "report");
    let folded_bytes: u64 = folded.lines().map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap()).sum();
    assert_eq!(folded_bytes, bytes, "folded");
    assert_eq!(pprof_raw_totals(&d, &pprof_path), (allocations, bytes), "pprof");

    // Roots.
    let roots = summary["roots"].as_u64().unwrap();
    assert!(roots >= 2, "a stack and static segments: {summary}");
    assert_eq!(doc["roots"].as_u64().unwrap(), roots, "export json");
    assert_eq!(between(&html, "<tr><th>roots</th><td>", "<"), roots.to_string(), "report");

    // Leak totals and groups: the definitely lost head of three nodes is
    // one group of 1 block with 2 indirectly lost, in every view.
    for class in ["definitely_lost", "indirectly_lost", "possibly_lost", "still_reachable"] {
        assert_eq!(leaks[class], doc["leaks"][class], "{class}");
    }
    let groups = leaks["groups"].as_array().unwrap();
    assert!(groups.iter().any(|g| g["indirect_blocks"] == 2 && g["blocks"] == 1), "{leaks}");
    let by_site = doc["leaks"]["by_site"].as_array().unwrap();
    assert_eq!(by_site.len(), groups.len(), "export json: one row per lost group");
    for (g, r) in groups.iter().zip(by_site) {
        for k in ["kind", "site", "blocks", "bytes", "indirect_blocks", "indirect_bytes"] {
            assert_eq!(g[k], r[k], "export json, {k}: {g} vs {r}");
        }
    }
    let table = between(&html, "<table id=\"leak-sites\">", "</table>");
    let html_rows: Vec<(String, String, String)> = table
        .split("<tr><td>")
        .skip(1)
        .map(|r| {
            let cells: Vec<&str> = r.split("</td>").collect();
            let num = |c: &str| c.rsplit('>').next().unwrap().split(' ').next().unwrap().to_string();
            (cells[0].to_string(), num(cells[1]), unescape(cells[3].trim_start_matches("<td>")))
        })
        .collect();
    assert_eq!(html_rows.len(), groups.len(), "report: one row per lost group");
    for (g, (kind, blocks, site)) in groups.iter().zip(&html_rows) {
        assert_eq!(kind.replace(' ', "_"), g["kind"].as_str().unwrap().replace(' ', "_"), "report kind");
        assert_eq!(blocks, &g["blocks"].to_string(), "report blocks");
        assert_eq!(site, g["site"].as_str().unwrap(), "report site");
    }

    // The program's frames of a site: a leak group's stack (innermost
    // first) is, reversed, the stack of a folded line.
    let stacks: Vec<&str> = folded.lines().map(|l| l.rsplit_once(' ').unwrap().0).collect();
    for g in groups {
        let frames: Vec<&str> =
            g["stack"].as_array().unwrap().iter().map(|f| f.as_str().unwrap().split(" (").next().unwrap()).rev().collect();
        assert!(frames.last() == Some(&"make") && frames.first() == Some(&"main"), "the program's frames, main outermost: {g}");
        let joined = frames.join(";");
        assert!(stacks.contains(&joined.as_str()), "{joined} is a folded stack: {stacks:?}");
    }
}
