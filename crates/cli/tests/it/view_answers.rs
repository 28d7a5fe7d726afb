//! What each view answers, on small programs whose answer is known:
//! `diff` by site, `retained --by site|type` counting each byte once, a
//! chain of blocks as one row of `retained`, `path --all`'s holders and
//! how each is reached, `top --tree`'s callers past allocation wrappers.

use crate::common::*;

#[test]
fn diff_shows_growth_by_site_between_two_dumps_of_one_process() {
    let d = Scratch::new("diff");
    let prog = compile(&d, "grows.c", &["-O1", "-g"]);
    let first = d.path("g.hdump");
    let (o, dumps) = run_traced(&first, &prog, &[first.to_str().unwrap()], &[]);
    ok(&o);
    assert_eq!(dumps.len(), 2, "the signal dump and the exit dump: {dumps:?}");
    assert_eq!(dumps[0], first);
    let v = json(&["diff".as_ref(), dumps[0].as_os_str(), dumps[1].as_os_str(), "--json".as_ref()]);
    assert_eq!(v["same_process"], true);
    assert_eq!(v["new"]["blocks"], 300);
    assert_eq!(v["new"]["bytes"], 300 * 256);
    assert_eq!(v["gone"]["blocks"], 0);
    let top = &v["by_site"][0];
    assert_eq!(top["delta_allocations"], 300);
    assert_eq!(top["delta_bytes"], 300 * 256);
    assert!(top["key"].as_str().unwrap().contains("growing"), "{top}");
    let s1 = json(&["summary".as_ref(), "--json".as_ref(), dumps[0].as_os_str()]);
    assert_eq!(s1["reason"], "signal");
    // The report shows the same growth.
    let html = d.path("r.html");
    let o = heapdump().arg("report").arg(&dumps[1]).arg("--baseline").arg(&dumps[0]).arg("-o").arg(&html).output().unwrap();
    ok(&o);
    let h = std::fs::read_to_string(&html).unwrap();
    assert!(h.contains("Growth since the baseline") && h.contains("300 new blocks (76800 bytes)"), "growth section");
    assert!(h.contains("<td class=\"n\">+76800</td><td class=\"n\">+300</td>"), "growth by site");
}

#[test]
fn retained_by_site_and_type_count_each_byte_once() {
    // leaks_tree.c: a tree of 31 nodes kept, one of 63 lost, all from the
    // site `tree`. Block by block the nested nodes repeat their subtrees'
    // bytes (63, 31, 31, … blocks); grouped, the site retains each byte once.
    let d = Scratch::new("retained-by");
    let prog = compile(&d, "leaks_tree.c", &["-O0", "-g"]);
    let (o, dumps) = run_traced(&d.path("t.hdump"), &prog, &[], &[]);
    ok(&o);
    let dump = dumps[0].as_os_str();
    let rows = json(&["retained".as_ref(), "--by".as_ref(), "site".as_ref(), "--json".as_ref(), dump]);
    let tree =
        rows.as_array().unwrap().iter().find(|r| r["key"].as_str().unwrap().starts_with("tree ")).unwrap_or_else(|| panic!("{rows}"));
    assert_eq!(
        (tree["blocks"].as_u64(), tree["bytes"].as_u64(), tree["retained"].as_u64()),
        (Some(94), Some(94 * 24), Some(94 * 24)),
        "{rows}"
    );
    for r in rows.as_array().unwrap() {
        for k in ["key", "blocks", "bytes", "retained"] {
            assert!(!r[k].is_null(), "{k}: {r}");
        }
    }
    let blocks = json(&["retained".as_ref(), "-n".as_ref(), "1000".as_ref(), "--json".as_ref(), dump]);
    let nested: u64 = blocks
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["site"].as_str().unwrap_or("").starts_with("tree "))
        .map(|r| r["retained"].as_u64().unwrap())
        .sum();
    assert!(nested > 3 * 94 * 24, "block by block the site's nodes count their subtrees again: {nested}");
    // By type: the groups partition the heap, and none retains more than it.
    let s = json(&["summary".as_ref(), "--json".as_ref(), dump]);
    let total = s["bytes"].as_u64().unwrap();
    let types = json(&["retained".as_ref(), "--by".as_ref(), "type".as_ref(), "-n".as_ref(), "1000".as_ref(), "--json".as_ref(), dump]);
    let rows = types.as_array().unwrap();
    assert_eq!(rows.iter().map(|r| r["bytes"].as_u64().unwrap()).sum::<u64>(), total, "{types}");
    assert!(rows.iter().all(|r| r["retained"].as_u64().unwrap() <= total && r["retained"].as_u64() >= r["bytes"].as_u64()), "{types}");
    assert_eq!(heapdump().args(["retained", "--by", "colour"]).arg(dump).output().unwrap().status.code(), Some(2));
}

#[test]
fn path_all_lists_every_holder_and_how_each_is_reached() {
    // leaks.c: a list of three kept from the static `kept_list`, a lost
    // list of three, a lost cycle of two: all 48-byte nodes.
    let (d, dump) = traced("path-all", "leaks.c", &["-O0", "-g"]);
    let dump = &dump;
    let nodes: Vec<u64> = blocks(dump).into_iter().filter(|b| b.1 == 48).map(|b| b.0).collect();
    assert_eq!(nodes.len(), 8, "{nodes:x?}");
    let mut by_static = 0;
    let mut through_a_block = 0;
    let mut from_a_lost_head = 0;
    for a in &nodes {
        let addr = format!("{a:#x}");
        let v = json(&["path".as_ref(), "--all".as_ref(), "--json".as_ref(), dump.as_os_str(), addr.as_ref()]);
        for h in v.as_array().unwrap() {
            let from = h["from"].as_str().unwrap();
            if from.starts_with("static kept_list") {
                by_static += 1;
                assert!(h["path"].as_array().unwrap().is_empty() && h["size"].is_null(), "a root has no path: {h}");
                continue;
            }
            // A block: one of the nodes, and its path leads to it.
            let holder = u64::from_str_radix(from.trim_start_matches("0x"), 16).unwrap();
            assert!(nodes.contains(&holder), "{from} holds {addr}");
            assert_eq!(h["offset"], 0, "the next pointer is the node's first word: {h}");
            let path = h["path"].as_array().unwrap();
            match h["class"].as_str().unwrap() {
                "still_reachable" => {
                    through_a_block += 1;
                    assert_eq!(path.last().unwrap()["to"], from, "the path reaches the holder: {h}");
                    assert!(path[0]["from"].as_str().unwrap().starts_with("static kept_list"), "{h}");
                }
                "definitely_lost" => from_a_lost_head += usize::from(path.is_empty()),
                _ => {}
            }
        }
    }
    assert_eq!(by_static, 1, "the list's head is held by the static");
    assert_eq!(through_a_block, 2, "the other two kept nodes are held by the node before");
    assert!(from_a_lost_head >= 2, "nodes held by a lost head, which nothing reaches");
    // The text names the holder and the chain.
    let o = heapdump().args(["path", "--all"]).arg(dump).arg(format!("{:#x}", nodes[0])).output().unwrap();
    let text = ok(&o);
    assert!(text.contains("is held by"), "{text}");
    // The DOT and mermaid pictures around a kept node show its retainers up
    // to the root (the static), which graphviz draws.
    for a in &nodes {
        let dot = d.path("around.dot");
        let o = heapdump()
            .args(["export", "--format", "dot", "--depth", "1", "--address"])
            .arg(format!("{a:#x}"))
            .arg("-o")
            .arg(&dot)
            .arg(dump)
            .output()
            .unwrap();
        ok(&o);
        let text = std::fs::read_to_string(&dot).unwrap();
        if text.contains("static kept_list") {
            assert!(text.contains("r0 -> n"), "the root points into the chain: {text}");
            let g = std::process::Command::new("dot").arg("-Tsvg").arg(&dot).output().unwrap();
            assert!(g.status.success(), "graphviz: {}", String::from_utf8_lossy(&g.stderr));
            let mmd = d.path("around.mmd");
            let o = heapdump()
                .args(["export", "--format", "mermaid", "--address"])
                .arg(format!("{a:#x}"))
                .arg("-o")
                .arg(&mmd)
                .arg(dump)
                .output()
                .unwrap();
            ok(&o);
            assert!(std::fs::read_to_string(&mmd).unwrap().contains("r0([\"static kept_list"), "mermaid names the root");
            return;
        }
    }
    panic!("no picture around a kept node showed the static root");
}

#[test]
fn top_tree_shows_the_callers_and_wrappers_are_seen_through() {
    let (_d, dump) = traced("tree", "wrappers.c", &["-O0", "-g"]);
    let dump = dump.as_os_str();
    let name = |k: &serde_json::Value| k.as_str().unwrap().split(" (").next().unwrap().to_string();
    let rows = |extra: &[&str]| -> Vec<(String, u64)> {
        let mut a: Vec<&std::ffi::OsStr> = vec!["top".as_ref(), "--json".as_ref()];
        a.extend(extra.iter().map(std::ffi::OsStr::new));
        a.push(dump);
        json(&a).as_array().unwrap().iter().map(|r| (name(&r["key"]), r["bytes"].as_u64().unwrap())).collect()
    };
    // xmalloc is a known wrapper: the pool function and `load` name sites.
    let by_site = rows(&[]);
    assert!(by_site.contains(&("my_pool_get".into(), 256_000)) && by_site.contains(&("load".into(), 16_000)), "{by_site:?}");
    // --skip sees through the pool too.
    let skipped = rows(&["--skip", "my_pool_.*"]);
    for want in [("render", 192_000), ("parse", 64_000), ("load", 16_000)] {
        assert!(skipped.contains(&(want.0.to_string(), want.1)), "{want:?} in {skipped:?}");
    }
    // The tree: the pool function, then who called it, then main.
    let tree = json(&["top".as_ref(), "--tree".as_ref(), "--json".as_ref(), dump]);
    let roots = tree.as_array().unwrap();
    let pool = roots.iter().find(|r| name(&r["key"]) == "my_pool_get").unwrap_or_else(|| panic!("{tree}"));
    assert_eq!(pool["bytes"], 256_000);
    let callers: Vec<(String, u64)> =
        pool["callers"].as_array().unwrap().iter().map(|c| (name(&c["key"]), c["bytes"].as_u64().unwrap())).collect();
    assert_eq!(callers, vec![("render".to_string(), 192_000), ("parse".to_string(), 64_000)], "largest first");
    for c in pool["callers"].as_array().unwrap() {
        let up: Vec<String> = c["callers"].as_array().unwrap().iter().map(|m| name(&m["key"])).collect();
        assert_eq!(up, vec!["main".to_string()], "{c}");
    }
    // The roots add up to the heap (the program's blocks and the rest).
    let total: u64 = roots.iter().map(|r| r["bytes"].as_u64().unwrap()).sum();
    assert_eq!(total, json(&["summary".as_ref(), "--json".as_ref(), dump])["bytes"].as_u64().unwrap());
    // With --skip, `render` is a root of its own.
    let tree = json(&["top".as_ref(), "--tree".as_ref(), "--skip".as_ref(), "my_pool_.*".as_ref(), "--json".as_ref(), dump]);
    assert!(tree.as_array().unwrap().iter().any(|r| name(&r["key"]) == "render" && r["bytes"] == 192_000), "{tree}");
    // The text indents callers under their function.
    let o = heapdump().args(["top", "--tree"]).arg(dump).output().unwrap();
    let text = ok(&o);
    assert!(text.lines().any(|l| l.contains("  < render")), "{text}");
}

#[test]
fn a_chain_of_blocks_is_one_row_of_retained() {
    // A list of 1000 nodes filled every row with consecutive nodes.
    let (_d, dump) = traced("chain", "chain.c", &["-O0"]);
    let rows = json(&["retained".as_ref(), "--json".as_ref(), "-n".as_ref(), "9".as_ref(), dump.as_os_str()]);
    let rows = rows.as_array().unwrap();
    let head = &rows[0];
    assert_eq!((head["retained"].as_u64(), head["chain"].as_u64()), (Some(64_000), Some(1000)), "the list's head, saying so: {head}");
    // The other rows are the buffers, not the list's next nodes.
    let sizes: Vec<u64> = rows[1..].iter().map(|r| r["size"].as_u64().unwrap()).collect();
    assert_eq!(&sizes[..8], &[8192, 7680, 7168, 6656, 6144, 5632, 5120, 4608], "{rows:?}");
    assert!(rows[1..].iter().all(|r| r["chain"] == 1));
    let o = heapdump().args(["retained", "-n", "3"]).arg(&dump).output().unwrap();
    assert!(ok(&o).contains("1000 blocks, a chain of 1000"));
}
