//! Every export checked by a real consumer: `go tool pprof`, memlab,
//! graphviz, headless Chromium; and by the analysis's own numbers.

use crate::common::*;
use std::path::Path;
use std::process::Command;

pub fn export(dump: &Path, format: &str, out: &Path, extra: &[&str]) {
    let o = heapdump().arg("export").arg(dump).args(["--format", format, "-o"]).arg(out).args(extra).output().unwrap();
    ok(&o);
    assert!(out.exists());
}

fn total_bytes(dump: &Path) -> u64 {
    json(&["summary".as_ref(), "--json".as_ref(), dump.as_os_str()])["bytes"].as_u64().unwrap()
}

/// (in-use objects, in-use bytes) summed over the samples `go tool pprof
/// -raw` reads from `out`.
pub fn pprof_raw_totals(d: &Scratch, out: &Path) -> (u64, u64) {
    let o = tool("go").args(["tool", "pprof", "-raw"]).arg(out).env("HOME", &d.0).output().unwrap();
    let raw = ok(&o);
    // Samples: "   v1   v2 ...: loc loc ..." after the header line naming the
    // types (alloc_objects and alloc_space first when the dump has totals,
    // as Go's heap profiles): the in-use columns found by name.
    let mut columns: Option<(usize, usize, usize)> = None;
    let (mut count, mut bytes) = (0u64, 0u64);
    for line in raw.lines() {
        if line.contains("inuse_objects/count") {
            let names: Vec<&str> = line.split_whitespace().collect();
            let at = |n: &str| names.iter().position(|x| x.starts_with(n)).unwrap_or_else(|| panic!("no {n} in {line}"));
            columns = Some((at("inuse_objects/count"), at("inuse_space/bytes"), names.len()));
            continue;
        }
        if let Some((c, b, n)) = columns {
            let Some((vals, _)) = line.split_once(':') else {
                if line.trim().is_empty() || line.starts_with("Locations") {
                    columns = None;
                }
                continue;
            };
            let v: Vec<u64> = vals.split_whitespace().filter_map(|x| x.parse().ok()).collect();
            if v.len() == n {
                count += v[c];
                bytes += v[b];
            }
        }
    }
    (count, bytes)
}

#[test]
fn pprof_is_read_by_go_tool_pprof_with_our_totals() {
    let d = Scratch::new("pprof");
    let dump = demo_dump(&d);
    let out = d.path("heap.pb.gz");
    export(&dump, "pprof", &out, &[]);
    let (count, bytes) = pprof_raw_totals(&d, &out);
    let s = json(&["summary".as_ref(), "--json".as_ref(), dump.as_os_str()]);
    assert_eq!(bytes, s["bytes"].as_u64().unwrap(), "in-use bytes");
    assert_eq!(count, s["allocations"].as_u64().unwrap(), "in-use objects");
    let o = tool("go").args(["tool", "pprof", "-top", "-sample_index=inuse_space"]).arg(&out).env("HOME", &d.0).output().unwrap();
    let top = ok(&o);
    assert!(top.contains("build_catalogue"), "symbolized functions in -top:\n{top}");
    let o = tool("go").args(["tool", "pprof", "-traces"]).arg(&out).env("HOME", &d.0).output().unwrap();
    assert!(ok(&o).contains("open_session"));
}

#[test]
fn heapsnapshot_retained_sizes_equal_memlab() {
    let d = Scratch::new("snap");
    let dump = demo_dump(&d);
    let out = d.path("heap.heapsnapshot");
    export(&dump, "heapsnapshot", &out, &[]);
    let memlab = node_json(
        &d,
        "@memlab/heap-analysis",
        r#"const {getFullHeapFromFile} = require('@memlab/heap-analysis');
(async () => {
  const heap = await getFullHeapFromFile(process.argv[2]);
  const out = {};
  heap.nodes.forEach(n => { out[n.id] = n.retainedSize; });
  process.stdout.write(JSON.stringify(out));
})().catch(e => { console.error(e); process.exit(1); });
"#,
        &[out.as_os_str()],
    );
    let memlab = memlab.as_object().unwrap();
    // Ours: every block's retained size, by address order (= node order),
    // from the analysis itself (`retained` folds chains into one row).
    let file = heapdump_analyze::DumpFile::open(&dump).unwrap();
    let heap = heapdump_analyze::Heap::load(&file, &mut |_, _| {}).unwrap();
    let a = heapdump_analyze::Analysis::new(&file, &heap);
    let rows: Vec<(u64, u64)> = heap.blocks().zip(&a.dominators().retained).map(|(b, &r)| (b.addr, r)).collect();
    assert_eq!(memlab.len(), rows.len() + 4, "a node per block plus the root and three groups");
    let mut mismatches = 0;
    for (i, (addr, retained)) in rows.iter().enumerate() {
        let id = (2 * i + 11).to_string();
        let theirs = memlab.get(&id).and_then(|v| v.as_u64());
        if theirs != Some(*retained) {
            mismatches += 1;
            if mismatches < 5 {
                eprintln!("block {addr:#x}: ours {retained}, memlab {theirs:?}");
            }
        }
    }
    assert_eq!(mismatches, 0, "retained sizes that differ from memlab's");
    assert_eq!(memlab["1"].as_u64(), Some(total_bytes(&dump)), "the root retains the whole heap");
}

/// The heapsnapshot loads in Chromium's own DevTools, Memory panel: the
/// DevTools front-end bundled in Chromium is opened headless (through
/// puppeteer-core, which memlab brings), the file is loaded with the
/// panel's "Load" action, and the snapshot DevTools built is queried: its
/// node count and total size, and per class (our node names: the blocks'
/// types) the count, self size and retained size it computed (a class's
/// retained size in DevTools sums its objects not held by another object of
/// the class, as `retained --by type` does: they must be equal).
#[test]
fn heapsnapshot_loads_in_the_devtools_memory_panel() {
    let d = Scratch::new("devtools");
    let dump = demo_dump(&d);
    let out = d.path("heap.heapsnapshot");
    export(&dump, "heapsnapshot", &out, &[]);
    let chromium = Command::new("sh").arg("-c").arg("command -v chromium").output().unwrap();
    let chromium = ok(&chromium).trim().to_string();
    let profile = d.path("profile");
    let v = node_json(
        &d,
        "puppeteer-core",
        r#"const fs = require('fs');
const puppeteer = require('puppeteer-core');
(async () => {
  const [chromium, file, profile] = process.argv.slice(2);
  const text = fs.readFileSync(file, 'utf8');
  const browser = await puppeteer.launch({executablePath: chromium, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--user-data-dir=' + profile]});
  try {
    const page = await browser.newPage();
    // DevTools registers its locale data while it starts: a panel shown
    // before that fails with "No locale data registered" (seen once in CI
    // out of several runs). Reload and try again, a bounded number of
    // times, on that error alone.
    let out;
    for (let attempt = 0; ; attempt++) {
      await page.goto('devtools://devtools/bundled/devtools_app.html', {timeout: 60000});
      try {
        out = await show(page, text);
        break;
      } catch (e) {
        if (attempt >= 4 || !String(e).includes('No locale data registered')) throw e;
        await new Promise(r => setTimeout(r, 1000));
      }
    }
    process.stdout.write(JSON.stringify(out));
  } finally {
    await browser.close();
  }
})().catch(e => { console.error(e); process.exit(1); });

async function show(page, text) {
    return await page.evaluate(async (text) => {
      const UI = await import('./ui/legacy/legacy.js');
      const Profiler = await import('./panels/profiler/profiler.js');
      await UI.ViewManager.ViewManager.instance().showView('heap-profiler');
      const panel = Profiler.HeapProfilerPanel.HeapProfilerPanel.instance();
      await panel.loadFromFile(new File([text], 'heap.heapsnapshot'));
      const type = panel.profileTypes.find(t => t.getProfiles().length > 0);
      if (!type) return {error: 'no profile loaded'};
      const header = type.getProfiles()[0];
      for (let i = 0; i < 600 && !header.snapshotProxy; i++) await new Promise(r => setTimeout(r, 100));
      const s = header.snapshotProxy;
      if (!s) return {error: 'the snapshot did not load'};
      const aggs = await s.aggregatesWithFilter({});
      const classes = {};
      for (const a of Object.values(aggs)) classes[a.name] = [a.count, a.self, a.maxRet];
      return {nodeCount: s.nodeCount, totalSize: s.totalSize, classes};
    }, text);
}
"#,
        &[chromium.as_ref(), out.as_os_str(), profile.as_os_str()],
    );
    assert!(v.get("error").is_none(), "{v}");
    let s = json(&["summary".as_ref(), "--json".as_ref(), dump.as_os_str()]);
    assert_eq!(v["nodeCount"].as_u64(), s["allocations"].as_u64().map(|n| n + 4), "a node per block, the root and three groups");
    assert_eq!(v["totalSize"], s["bytes"]);
    // Per type: DevTools' count, self size and retained size against ours.
    let top =
        json(&["top".as_ref(), "--by".as_ref(), "type".as_ref(), "-n".as_ref(), "1000".as_ref(), "--json".as_ref(), dump.as_os_str()]);
    // A class's retained size, as `retained --by type` computes it (each
    // byte once: members not dominated by another member).
    let by_type =
        json(&["retained".as_ref(), "--by".as_ref(), "type".as_ref(), "-n".as_ref(), "1000".as_ref(), "--json".as_ref(), dump.as_os_str()]);
    let ours: std::collections::HashMap<String, u64> =
        by_type.as_array().unwrap().iter().map(|r| (r["key"].as_str().unwrap().to_string(), r["retained"].as_u64().unwrap())).collect();
    let rows = top.as_array().unwrap();
    assert!(rows.len() >= 5);
    for r in rows {
        let name = r["key"].as_str().unwrap();
        if name == "unknown" {
            continue; // such blocks are named by their site instead
        }
        let c = &v["classes"][name];
        assert_eq!(c[0], r["allocations"], "{name}: count in DevTools");
        assert_eq!(c[1], r["bytes"], "{name}: self size in DevTools");
        assert_eq!(c[2].as_u64(), ours.get(name).copied(), "{name}: retained size in DevTools' Summary and in retained --by type");
    }
}

#[test]
fn folded_stacks_and_flamegraph_account_for_every_byte() {
    let d = Scratch::new("flame");
    let dump = demo_dump(&d);
    let folded = d.path("heap.folded");
    export(&dump, "folded", &folded, &[]);
    let text = std::fs::read_to_string(&folded).unwrap();
    let sum: u64 = text.lines().map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap()).sum();
    assert_eq!(sum, total_bytes(&dump));
    let rooted_at_main = |l: &&str| l.split(';').next().is_some_and(|f| f == "main" || f.ends_with("::main"));
    assert!(text.lines().all(|l| rooted_at_main(&l) || !l.contains(';')), "stacks start at main:\n{text}");
    assert!(text.lines().any(|l| rooted_at_main(&l) && l.contains("build_catalogue")), "{text}");
    assert!(!text.contains("alloc::raw_vec"), "allocator machinery left out");
    let svg = d.path("heap.svg");
    export(&dump, "svg", &svg, &[]);
    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(s.starts_with("<?xml") && s.contains("<svg") && s.contains("build_catalogue"));
}

#[test]
fn dot_renders_with_graphviz_and_mermaid_is_well_formed() {
    let d = Scratch::new("dot");
    let dump = demo_dump(&d);
    let dot = d.path("g.dot");
    export(&dump, "dot", &dot, &["--depth", "2", "--max-nodes", "40"]);
    let text = std::fs::read_to_string(&dot).unwrap();
    assert!(text.starts_with("digraph heap {") && text.trim_end().ends_with('}'));
    assert!(text.matches("[label=\"0x").count() <= 40, "size limit");
    let o = tool("dot").arg("-Tsvg").arg(&dot).output().unwrap();
    assert!(ok(&o).contains("<svg"));
    // Around a lost block: it is drawn, red, with what it points to.
    let leaks = json(&["leaks".as_ref(), "--json".as_ref(), dump.as_os_str()]);
    let lost = leaks["groups"][0]["example"].as_str().unwrap().to_string();
    let mm = d.path("g.mmd");
    export(&dump, "mermaid", &mm, &["--address", &lost]);
    let m = std::fs::read_to_string(&mm).unwrap();
    assert!(m.starts_with("flowchart LR"));
    assert!(m.contains(&lost) && m.contains("fill:#f4a6a6") && m.contains("-->|+"), "{m}");
    // An address that is no allocation is a one-line error.
    let o = heapdump().arg("export").arg(&dump).args(["--format", "dot", "--address", "0x10", "-o"]).arg(d.path("x.dot")).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(!d.path("x.dot").exists(), "no half-written file");
}

#[test]
fn json_export_agrees_with_the_subcommands() {
    let d = Scratch::new("json");
    let dump = demo_dump(&d);
    let out = d.path("a.json");
    export(&dump, "json", &out, &[]);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let leaks = json(&["leaks".as_ref(), "--json".as_ref(), dump.as_os_str()]);
    for k in ["definitely_lost", "indirectly_lost", "possibly_lost", "still_reachable"] {
        assert_eq!(v["leaks"][k], leaks[k], "{k}");
    }
    assert_eq!(v["bytes"].as_u64(), Some(total_bytes(&dump)));
    assert!(v["retainers"][0]["retained"].as_u64().unwrap() > 0);
}

#[test]
fn html_report_renders_in_headless_chromium() {
    let d = Scratch::new("html");
    let dump = demo_dump(&d);
    let out = d.path("report.html");
    let o = heapdump().arg("report").arg(&dump).arg("-o").arg(&out).output().unwrap();
    ok(&o);
    let html = std::fs::read_to_string(&out).unwrap();
    assert!(!html.contains("http://") || html.matches("http://").all(|_| html.contains("http://www.w3.org")), "no external resources");
    let profile = d.path("chrome-profile");
    let o = tool("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking"])
        .args(["--disable-component-update", "--disable-sync"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", out.display()))
        .output()
        .unwrap();
    let dom = ok(&o);
    assert!(dom.contains("data-ready=\"1\""), "the page's script ran to the end");
    assert!(dom.contains("<p id=\"status\"></p>"), "no script error reported");
    let leaks = json(&["leaks".as_ref(), "--json".as_ref(), dump.as_os_str()]);
    let dl = leaks["definitely_lost"]["bytes"].as_u64().unwrap();
    assert!(dom.contains(&format!("{dl} bytes")), "leak summary shown");
    assert!(dom.matches("<details").count() >= 3, "an expandable dominator tree");
    assert!(dom.contains("id=\"histogram\"") && dom.contains("data:image/svg+xml;base64,"));
    assert!(dom.contains("build_catalogue"));
}

#[test]
fn a_format_by_another_name_and_an_unwritable_output_are_said_plainly() {
    let d = Scratch::new("export-errors");
    let dump = demo_dump(&d);
    // The names one reaches for: the error names the format or the command.
    for (asked, named) in [("flamegraph", "--format svg"), ("html", "heapdump report"), ("report", "heapdump report")] {
        let o = heapdump().arg("export").arg(&dump).args(["--format", asked, "-o"]).arg(d.path("out")).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "--format {asked}: {err}");
        assert!(err.lines().next().is_some_and(|l| l.contains(asked) && l.contains(named)), "--format {asked}: {err}");
    }
    let o = heapdump().arg("export").arg(&dump).args(["--format", "bogus", "-o", "-"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("svg"), "the formats are listed");
    // An output where none can be written: the user's path and why, exit
    // 1, no temporary file named or left.
    let file = d.path("a-file");
    std::fs::write(&file, "x").unwrap();
    for (out, why) in [(d.path("missing/dir/x.folded"), "No such file or directory"), (file.join("x.folded"), "Not a directory")] {
        for (cmd, extra) in [("export", &["--format", "folded"][..]), ("report", &[][..])] {
            let o = heapdump().arg(cmd).arg(&dump).args(extra).arg("-o").arg(&out).output().unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(1), "{cmd} -o {}: {err}", out.display());
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(err.contains(&format!("cannot write {}: {why}", out.display())), "{cmd}: {err}");
            assert!(!err.contains(".tmp"), "an internal name: {err}");
        }
    }
    let mut left: Vec<String> = std::fs::read_dir(&d.0).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    left.sort();
    assert_eq!(left, ["a-file", "demo.hdump"], "nothing left behind");
}

/// `go tool pprof -top [extra] PROFILE`: the header, and each row's flat
/// figure and function.
fn pprof_top(d: &Scratch, profile: &Path, extra: &[&str]) -> (String, Vec<(String, String)>) {
    let o = tool("go").args(["tool", "pprof", "-top"]).args(extra).arg(profile).env("HOME", &d.0).output().unwrap();
    let text = ok(&o);
    let rows = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 6).then(|| (f[0].to_string(), f[5..].join(" ")))
        })
        .collect();
    (text, rows)
}

#[test]
fn pprof_opens_on_in_use_bytes_as_go_heap_profiles_do() {
    let (d, dump) = traced("pprof-bytes", "malloc_and_strdup.c", &["-O0", "-g"]);
    let pb = d.path("heap.pb.gz");
    export(&dump, "pprof", &pb, &[]);
    let (text, rows) = pprof_top(&d, &pb, &[]);
    assert!(text.contains("Type: inuse_space"), "{text}");
    assert!(rows[0].0.ends_with("kB") || rows[0].0.ends_with("MB"), "bytes, not counts:\n{text}");
    let (text, _) = pprof_top(&d, &pb, &["-unit=B"]);
    let bytes = json(&["summary".as_ref(), "--json".as_ref(), dump.as_os_str()])["bytes"].as_u64().unwrap();
    assert!(text.contains(&format!("100% of {bytes}B total")), "the live bytes:\n{text}");
}

#[test]
fn exports_stacks_start_at_the_programs_own_frame() {
    let (d, dump) = traced("own-frames", "malloc_and_strdup.c", &["-O0", "-g"]);
    let machinery = |f: &str| f.contains("malloc") || f.contains("strdup") || f.starts_with("__") || f.contains("libc");
    // pprof's leader is the program's function, with the bytes `top`
    // gives its site; no frame of the allocator anywhere.
    let pb = d.path("heap.pb.gz");
    export(&dump, "pprof", &pb, &[]);
    let (_, rows) = pprof_top(&d, &pb, &["-unit=B", "-sample_index=inuse_space"]);
    assert_eq!(rows[0].1, "make_buffers", "{rows:?}");
    let top = json(&["top".as_ref(), "--json".as_ref(), dump.as_os_str()]);
    let site =
        top.as_array().unwrap().iter().find(|r| r["key"].as_str().unwrap().starts_with("make_buffers")).expect("make_buffers in top");
    assert_eq!(rows[0].0, format!("{}B", site["bytes"]), "{rows:?}");
    assert!(rows.iter().any(|r| r.1 == "remember_names" && r.0 != "0"), "strdup's caller holds its bytes: {rows:?}");
    assert!(!rows.iter().any(|r| machinery(&r.1)), "allocator frames in pprof: {rows:?}");
    // Folded stacks and the flamegraph: the same stacks, from main to the
    // program's function.
    let folded = d.path("heap.folded");
    export(&dump, "folded", &folded, &[]);
    let text = std::fs::read_to_string(&folded).unwrap();
    for l in text.lines() {
        let stack = l.rsplit_once(' ').unwrap().0;
        assert!(!stack.split(';').any(machinery), "allocator frames in folded stacks: {l}");
        assert!(["main;make_buffers", "main;remember_names"].contains(&stack), "{text}");
    }
    let svg = d.path("heap.svg");
    export(&dump, "svg", &svg, &[]);
    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(s.contains("make_buffers") && s.contains("remember_names"));
    assert!(!s.contains("malloc") && !s.contains("strdup"), "allocator frames in the flamegraph");
}
