//! The command line's contract: JSON keys, exit codes, damaged input.

use crate::common::*;
use std::path::Path;
use std::process::Command;

#[test]
fn json_documents_have_the_documented_keys() {
    let d = Scratch::new("json");
    let p = demo_dump(&d);
    let s = json(&["summary".as_ref(), "--json".as_ref(), p.as_os_str()]);
    for k in [
        "allocations",
        "bytes",
        "mode",
        "pid",
        "threads",
        "threads_not_stopped",
        "roots",
        "reason",
        "pause_us",
        "peak_bytes",
        "total_allocations",
        "total_bytes",
    ] {
        assert!(!s[k].is_null(), "summary lacks {k}");
    }
    // Present, null unless the dump was taken for a signal or a limit.
    for k in ["signal", "limit"] {
        assert!(s.as_object().unwrap().contains_key(k), "summary lacks {k}");
    }
    assert!(s["peak_bytes"].as_u64() >= s["bytes"].as_u64() && s["total_bytes"].as_u64() >= s["peak_bytes"].as_u64(), "{s}");
    assert_eq!(s["mode"], "full");
    assert_eq!(s["reason"], "api");
    let l = json(&["leaks".as_ref(), "--json".as_ref(), p.as_os_str()]);
    for k in ["definitely_lost", "indirectly_lost", "possibly_lost", "still_reachable"] {
        assert!(l[k]["bytes"].is_u64() && l[k]["blocks"].is_u64(), "leaks lacks {k}");
    }
    // The demo leaks 50 forgotten 4 KiB buffers and 500 sessions' cycles
    // (a few may stay reachable through stale words on the stack).
    assert!(l["definitely_lost"]["blocks"].as_u64().unwrap() >= 540, "{}", l["definitely_lost"]);
    let total: u64 =
        ["definitely_lost", "indirectly_lost", "possibly_lost", "still_reachable"].iter().map(|k| l[k]["bytes"].as_u64().unwrap()).sum();
    assert_eq!(total, s["bytes"].as_u64().unwrap(), "the classes partition the heap");
    let r = json(&["retained".as_ref(), "--json".as_ref(), "-n".as_ref(), "5".as_ref(), p.as_os_str()]);
    let rows = r.as_array().unwrap();
    assert_eq!(rows.len(), 5);
    for w in rows.windows(2) {
        assert!(w[0]["retained"].as_u64() >= w[1]["retained"].as_u64(), "ordered by retained");
    }
    for row in rows {
        assert!(row["address"].as_str().unwrap().starts_with("0x"));
        assert!(row["size"].is_u64() && row["site"].is_string());
    }
    // The catalogue's table retains most of the heap.
    assert!(rows[0]["retained"].as_u64().unwrap() > s["bytes"].as_u64().unwrap() / 2);
    assert!(rows[0]["site"].as_str().unwrap().contains("build_catalogue"), "{}", rows[0]["site"]);
    let t = json(&["top".as_ref(), "--json".as_ref(), p.as_os_str()]);
    let rows = t.as_array().unwrap();
    assert!(rows.iter().all(|r| r["key"].is_string() && r["allocations"].is_u64() && r["bytes"].is_u64()));
    for w in rows.windows(2) {
        assert!(w[0]["bytes"].as_u64() >= w[1]["bytes"].as_u64());
    }
    let addr = r[0]["address"].as_str().unwrap().to_string();
    let path = json(&["path".as_ref(), p.as_os_str(), addr.as_ref(), "--json".as_ref()]);
    let steps = path.as_array().unwrap();
    assert!(!steps.is_empty());
    assert_eq!(steps.last().unwrap()["to"], addr.as_str());
    assert!(steps[0]["from"].as_str().unwrap().contains("thread") || steps[0]["from"].as_str().unwrap().contains("static"));
    let diff = json(&["diff".as_ref(), p.as_os_str(), p.as_os_str(), "--json".as_ref()]);
    assert_eq!(diff["new"]["blocks"], 0);
    assert_eq!(diff["gone"]["blocks"], 0);
}

#[test]
fn bad_input_gets_one_line_and_exit_1() {
    let d = Scratch::new("bad");
    let p = demo_dump(&d);
    let bytes = std::fs::read(&p).unwrap();
    let garbage = d.path("garbage.hdump");
    std::fs::write(&garbage, b"this is not a heap dump at all").unwrap();
    let empty = d.path("empty.hdump");
    std::fs::write(&empty, b"").unwrap();
    let corrupt = d.path("corrupt.hdump");
    let mut c = bytes.clone();
    let mid = c.len() / 2;
    c[mid] ^= 0x40;
    std::fs::write(&corrupt, &c).unwrap();
    for f in [&garbage, &empty, &corrupt, &d.path("missing.hdump")] {
        for sub in ["summary", "leaks", "top", "retained"] {
            let o = heapdump().arg(sub).arg(f).output().unwrap();
            assert_eq!(o.status.code(), Some(1), "{sub} {}", f.display());
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(err.lines().count(), 1, "one line: {err}");
            assert!(err.starts_with("heapdump: error: ") && !err.contains("panicked"), "{err}");
        }
    }
    // A truncated dump is analysed up to the cut, with a warning.
    let cut = d.path("cut.hdump");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let o = heapdump().args(["leaks", "--json"]).arg(&cut).output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stderr).contains("incomplete dump"));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["still_reachable"]["blocks"].as_u64().unwrap() > 0);
    // Usage errors exit 2.
    assert_eq!(heapdump().args(["top", "--by", "colour"]).arg(&p).output().unwrap().status.code(), Some(2));
    assert_eq!(heapdump().args(["frobnicate"]).output().unwrap().status.code(), Some(2));
    assert_eq!(heapdump().args(["path"]).arg(&p).arg("0xnothex").output().unwrap().status.code(), Some(1));
}

#[test]
fn broken_pipe_exits_quietly() {
    // `leaks --json | head -c 10` said "Broken pipe (os error 32)", exit 1.
    let d = Scratch::new("pipe");
    let p = demo_dump(&d);
    for args in [
        &["top", "-n", "1000"][..],
        &["top", "-n", "1000", "--json"],
        &["summary", "--json"],
        &["leaks", "--json"],
        &["retained", "--json"],
        &["leaks"],
    ] {
        let mut child =
            heapdump().args(args).arg(&p).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{args:?}");
        assert!(o.stderr.is_empty(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    }
}

#[test]
fn special_files_given_as_the_dump_are_refused_at_once() {
    // A FIFO given as the dump hung `summary`; a directory said "No such
    // device (os error 19)".
    let d = Scratch::new("special");
    let fifo = d.path("f.hdump");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    for (path, says) in [(fifo.as_path(), "a FIFO"), (d.0.as_path(), "a directory"), (Path::new("/dev/zero"), "a device")] {
        let o = heapdump().arg("summary").arg(path).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{path:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(says), "{path:?}: {err}");
    }
}

#[test]
fn an_empty_debug_aranges_section_is_no_panic() {
    // `objcopy --update-section .debug_aranges=/dev/null` made 12 of 16
    // commands panic inside gimli ("assertion failed: len <= self.len").
    let d = Scratch::new("aranges");
    let prog = compile(&d, "leaks.c", &["-O0", "-g"]);
    let bad = d.path("leaks_bad");
    let o = Command::new("objcopy").arg("--update-section").arg(".debug_aranges=/dev/null").arg(&prog).arg(&bad).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (o, dumps) = run_traced(&d.path("a.hdump"), &bad, &[], &[]);
    ok(&o);
    for args in [&["leaks"][..], &["top"], &["retained"], &["summary"], &["top", "--by", "type"]] {
        let o = heapdump().args(args).arg(&dumps[0]).output().unwrap();
        let text = ok(&o);
        assert!(!String::from_utf8_lossy(&o.stderr).contains("panicked"), "{args:?}");
        if args == ["leaks"] {
            assert!(text.contains("make (") && text.contains("leaks.c:"), "sites still named, with lines: {text}");
        }
    }
}

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
fn export_writes_through_special_files_and_symlinks() {
    // Renaming a temporary file over whatever is there would turn a FIFO
    // or a symlink into a regular file (as root, `-o /dev/stdout` would
    // replace the device node): `-o` writes through them.
    let d = Scratch::new("through");
    let p = demo_dump(&d);
    let fifo = d.path("out.fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    let o = heapdump().args(["export", "--format", "folded", "-o"]).arg(&fifo).arg(&p).output().unwrap();
    ok(&o);
    let through = reader.join().unwrap();
    assert!(!through.is_empty() && String::from_utf8_lossy(&through).lines().all(|l| l.rsplit(' ').next().unwrap().parse::<u64>().is_ok()));
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo(), "the FIFO is still a FIFO");
    // A symlink is followed: the file it names is replaced, the link stays.
    let real = d.path("real.folded");
    std::fs::write(&real, "old").unwrap();
    let link = d.path("link.folded");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let o = heapdump().args(["export", "--format", "folded", "-o"]).arg(&link).arg(&p).output().unwrap();
    ok(&o);
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read(&real).unwrap(), through);
    // No temporary file is left behind.
    let left: Vec<_> =
        std::fs::read_dir(&d.0).unwrap().filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().ends_with(".tmp")).collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn export_to_standard_output_and_saying_what_was_written() {
    let d = Scratch::new("stdout");
    let p = demo_dump(&d);
    // `-o -`: the data on stdout, nothing on stderr, no file named "-".
    let o = heapdump().args(["export", "--format", "folded", "-o", "-"]).arg(&p).current_dir(&d.0).output().unwrap();
    let out = ok(&o);
    assert!(out.lines().count() > 3 && out.lines().all(|l| l.rsplit(' ').next().unwrap().parse::<u64>().is_ok()), "{out}");
    assert!(o.stderr.is_empty(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!d.path("-").exists());
    // To a file: stdout empty, one line on stderr naming it.
    let f = d.path("x.folded");
    let o = heapdump().args(["export", "--format", "folded", "-o"]).arg(&f).arg(&p).output().unwrap();
    assert!(ok(&o).is_empty());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with(&format!("heapdump: wrote {}", f.display())), "{err}");
    assert_eq!(std::fs::read_to_string(&f).unwrap(), out);
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

#[test]
fn a_second_question_is_answered_from_the_cache_and_a_bad_cache_is_rebuilt() {
    use std::os::unix::fs::PermissionsExt;
    let (d, dump) = traced("cache", "leaks_tree.c", &["-O0", "-g"]);
    let cache_home = d.path("xdg");
    let ask = |args: &[&str]| {
        let o = heapdump().env("XDG_CACHE_HOME", &cache_home).env("HEAPDUMP_CACHE_REPORT", "1").args(args).arg(&dump).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        (ok(&o), err)
    };
    // What happened to each part: "hit", "miss", "wrote", "rebuilt" and
    // the file's kind (the leak classes and dominators, the dominator
    // tree's children, the blocks vtables name).
    let parts = |err: &str| -> Vec<String> {
        err.lines()
            .filter_map(|l| l.strip_prefix("heapdump: cache: "))
            .map(|l| {
                let mut w = l.split(' ');
                let verb = w.next().unwrap();
                let path = std::path::PathBuf::from(w.next().unwrap());
                format!("{verb} {}", path.extension().unwrap().to_str().unwrap())
            })
            .collect()
    };
    let events =
        |err: &str| -> Vec<String> { parts(err).into_iter().filter_map(|p| p.strip_suffix(" hdcache").map(str::to_string)).collect() };
    let graph = |err: &str| -> Vec<String> {
        err.lines().filter_map(|l| l.strip_prefix("heapdump: graph cache: ")).map(|l| l.split(' ').next().unwrap().to_string()).collect()
    };
    let (first, err) = ask(&["retained", "--json"]);
    assert_eq!(parts(&err), ["miss hdcache", "wrote hdcache", "miss hdtree", "wrote hdtree", "miss hdnames", "wrote hdnames"], "{err}");
    assert_eq!(graph(&err), ["miss", "wrote"], "{err}");
    let (second, err) = ask(&["retained", "--json"]);
    assert_eq!(parts(&err), ["hit hdcache", "hit hdtree", "hit hdnames"], "nothing computed again: {err}");
    assert_eq!(graph(&err), ["hit"], "the loaded graph too: {err}");
    assert_eq!(first, second, "the cache gives the same answer");
    // A copy of the dump altered since (a byte of its middle: its bytes
    // no longer match its trailer's checksum, which still names the kept
    // graph) is not answered from that graph: it is read, and refused
    // (for its checksum, or for a record the byte broke, depending on
    // where the middle falls).
    let altered = d.path("altered.hdump");
    let mut bytes = std::fs::read(&dump).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    std::fs::write(&altered, &bytes).unwrap();
    let o = heapdump()
        .env("XDG_CACHE_HOME", &cache_home)
        .env("HEAPDUMP_CACHE_REPORT", "1")
        .args(["retained", "--json"])
        .arg(&altered)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success() && err.contains("heapdump: error:"), "{err}");
    assert!(!graph(&err).contains(&"hit".to_string()), "{err}");
    // Paths: the tree of what the roots reach is kept too, and every
    // holder of `path --all` is answered from it.
    let rows: serde_json::Value = serde_json::from_str(&first).unwrap();
    let addr = rows.as_array().unwrap().last().unwrap()["address"].as_str().unwrap().to_string();
    let ask_path = || {
        let o = heapdump()
            .env("XDG_CACHE_HOME", &cache_home)
            .env("HEAPDUMP_CACHE_REPORT", "1")
            .args(["path", "--all", "--json"])
            .arg(&dump)
            .arg(&addr)
            .output()
            .unwrap();
        (ok(&o), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (path_first, err) = ask_path();
    assert!(parts(&err).ends_with(&["miss hdreach".to_string(), "wrote hdreach".to_string()]), "{err}");
    let (path_second, err) = ask_path();
    assert!(parts(&err).contains(&"hit hdreach".to_string()) && !parts(&err).iter().any(|p| p.starts_with("wrote")), "{err}");
    assert_eq!(path_first, path_second);
    let o = heapdump().args(["--no-cache", "path", "--all", "--json"]).arg(&dump).arg(&addr).output().unwrap();
    assert_eq!(ok(&o), path_first, "with and without the cache");
    let (leaks_cached, err) = ask(&["leaks", "--json"]);
    assert_eq!(events(&err), ["hit"], "{err}");
    let o = heapdump().args(["--no-cache", "leaks", "--json"]).arg(&dump).env("XDG_CACHE_HOME", d.path("other")).output().unwrap();
    assert_eq!(ok(&o), leaks_cached, "with and without the cache");
    assert!(!d.path("other/heapdump/analysis").exists(), "--no-cache writes nothing");
    // Private: the directory 0700, the file 0600.
    let dir = cache_home.join("heapdump/analysis");
    assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
    let files: Vec<_> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().unwrap() == "hdcache").collect();
    assert_eq!(files.len(), 1, "{files:?}");
    // The kept graph, damaged, is refused and rebuilt too.
    let graph_file = files[0].with_extension("hdgraph");
    let mut g = std::fs::read(&graph_file).unwrap();
    let at = g.len() / 3;
    g[at] ^= 1;
    std::fs::write(&graph_file, &g).unwrap();
    let (again, err) = ask(&["retained", "--json"]);
    assert_eq!(graph(&err), ["rebuilt", "wrote"], "{err}");
    assert_eq!(again, first);
    assert_eq!(std::fs::metadata(&files[0]).unwrap().permissions().mode() & 0o777, 0o600);
    // A damaged cache is detected, rebuilt, and the answer unchanged.
    let mut bytes = std::fs::read(&files[0]).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&files[0], &bytes).unwrap();
    let (third, err) = ask(&["retained", "--json"]);
    assert_eq!(events(&err), ["rebuilt", "wrote"], "{err}");
    assert!(err.contains("checksum differs"), "{err}");
    assert_eq!(third, first);
    // Cut short, too.
    std::fs::write(&files[0], &bytes[..100]).unwrap();
    let (_, err) = ask(&["retained", "--json"]);
    assert_eq!(events(&err), ["rebuilt", "wrote"], "{err}");
    // Four analyses at once leave one good cache.
    std::fs::remove_file(&files[0]).unwrap();
    let kids: Vec<_> = (0..4)
        .map(|_| {
            heapdump()
                .env("XDG_CACHE_HOME", &cache_home)
                .args(["retained", "--json"])
                .arg(&dump)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for k in kids {
        let o = k.wait_with_output().unwrap();
        assert_eq!(ok(&o), first);
    }
    let (_, err) = ask(&["retained", "--json"]);
    assert_eq!(events(&err), ["hit"], "{err}");
    // The tree's part, damaged, is rebuilt and gives the same answer.
    let tree_file = files[0].with_extension("hdtree");
    let mut t = std::fs::read(&tree_file).unwrap();
    let at = t.len() - 9;
    t[at] ^= 4;
    std::fs::write(&tree_file, &t).unwrap();
    let (fourth, err) = ask(&["retained", "--json"]);
    assert!(parts(&err).contains(&"rebuilt hdtree".to_string()) && parts(&err).contains(&"wrote hdtree".to_string()), "{err}");
    assert_eq!(fourth, first);
    // Another dump's part is refused by its key, not trusted.
    let (other_dir, other_dump) = traced("cache-other", "leaks.c", &["-O0", "-g"]);
    let o = heapdump().env("XDG_CACHE_HOME", other_dir.path("xdg")).args(["retained", "--json"]).arg(&other_dump).output().unwrap();
    ok(&o);
    let other_tree: Vec<_> = std::fs::read_dir(other_dir.path("xdg/heapdump/analysis"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().unwrap() == "hdtree")
        .collect();
    std::fs::copy(&other_tree[0], &tree_file).unwrap();
    let (fifth, err) = ask(&["retained", "--json"]);
    assert!(err.contains("written for another dump or tool version"), "{err}");
    assert_eq!(fifth, first);
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left.len(), 5, "the analysis, the graph, the tree, the names and the paths, no temporary file left: {left:?}");
}

#[test]
fn the_demo_runs_and_every_command_it_suggests_works() {
    // The README's first command ends in `heapdump demo`: it must explain
    // its dump, and each command it tells the user to run next must work.
    let d = Scratch::new("demo");
    let o = heapdump().arg("demo").current_dir(&d.0).output().unwrap();
    let out = ok(&o);
    for part in ["== summary", "== leaks", "definitely lost:", "== top retainers", "Go on with:"] {
        assert!(out.contains(part), "{part:?} missing from the demo's output:\n{out}");
    }
    let next: Vec<&str> = out.lines().skip_while(|l| !l.contains("Go on with:")).skip(1).map(str::trim).collect();
    assert!(next.len() >= 7, "{next:?}");
    for line in next {
        let cmd = line.split('#').next().unwrap().trim();
        let args: Vec<&str> = cmd.split_whitespace().collect();
        assert_eq!(args[0], "heapdump", "{line}");
        if args[1] == "serve" {
            continue; // a server: the viewer tests run it
        }
        let o = heapdump().args(&args[1..]).current_dir(&d.0).output().unwrap();
        assert!(o.status.success(), "`{cmd}` failed: {}", String::from_utf8_lossy(&o.stderr));
        assert!(!o.stdout.is_empty(), "`{cmd}` printed nothing");
    }
}

/// The caches are written by forked children while the answer is
/// computed: a file they could not write is said so, with the system's
/// reason, the answer unchanged and the exit status a success; once the
/// way is clear, they are written and found.
#[test]
fn a_cache_that_cannot_be_written_is_said_so_and_the_answer_stands() {
    let (d, dump) = traced("cache-blocked", "leaks_tree.c", &["-O0", "-g"]);
    let cache_home = d.path("xdg");
    let ask = || {
        let o = heapdump()
            .env("XDG_CACHE_HOME", &cache_home)
            .env("HEAPDUMP_CACHE_REPORT", "1")
            .args(["retained", "--json"])
            .arg(&dump)
            .output()
            .unwrap();
        (ok(&o), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (first, err) = ask();
    let wrote: Vec<std::path::PathBuf> = err
        .lines()
        .filter_map(|l| l.strip_prefix("heapdump: cache: wrote ").or_else(|| l.strip_prefix("heapdump: graph cache: wrote ")))
        .map(std::path::PathBuf::from)
        .collect();
    assert_eq!(wrote.len(), 4, "the analysis, the tree, the names and the graph: {err}");
    // Each file's name taken by a directory holding something: the
    // writer's rename fails.
    for p in &wrote {
        std::fs::remove_file(p).unwrap();
        std::fs::create_dir(p).unwrap();
        std::fs::write(p.join("keep"), b"x").unwrap();
    }
    let (blocked, err) = ask();
    assert_eq!(blocked, first, "the same answer");
    for p in &wrote {
        let line =
            err.lines().find(|l| l.contains("not written") && l.contains(&*p.to_string_lossy())).unwrap_or_else(|| panic!("{p:?}: {err}"));
        assert!(line.contains("Is a directory"), "the reason: {line}");
    }
    let dir = wrote[0].parent().unwrap();
    let temporary: Vec<_> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name()).filter(|n| n.to_string_lossy().ends_with(".tmp")).collect();
    assert!(temporary.is_empty(), "no temporary file left: {temporary:?}");
    for p in &wrote {
        std::fs::remove_dir_all(p).unwrap();
    }
    let (_, err) = ask();
    assert_eq!(err.lines().filter(|l| l.contains(": wrote ")).count(), 4, "{err}");
    let (again, err) = ask();
    assert_eq!(again, first);
    assert_eq!(err.lines().filter(|l| l.contains(": hit ")).count(), 4, "all found: {err}");
}

/// A command leaves the cache files it is still writing to finish on
/// their own once its answer is out; a question asked meanwhile waits for
/// the writer (its temporary file, named after the cache file, locked
/// while it writes) and reads what it wrote, rather than computing it
/// again.
#[test]
fn a_question_asked_while_the_cache_is_written_waits_for_it() {
    let (d, dump) = traced("cache-wait", "leaks_tree.c", &["-O0", "-g"]);
    let cache_home = d.path("xdg");
    let ask = |report: bool| {
        let mut c = heapdump();
        c.env("XDG_CACHE_HOME", &cache_home).args(["top", "--json"]).arg(&dump);
        if report {
            c.env("HEAPDUMP_CACHE_REPORT", "1");
        }
        let o = c.output().unwrap();
        (ok(&o), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (first, err) = ask(true);
    let graph = err.lines().find_map(|l| l.strip_prefix("heapdump: graph cache: wrote ")).map(std::path::PathBuf::from).expect(&err);
    let temporary = |n: u32| graph.with_file_name(format!(".{}.{n}.0.tmp", graph.file_name().unwrap().to_string_lossy()));
    // The graph moved aside, and a writer holding the lock on its
    // temporary file that puts the graph back in half a second.
    let aside = d.path("graph.aside");
    std::fs::rename(&graph, &aside).unwrap();
    let tmp = temporary(1);
    std::fs::write(&tmp, b"").unwrap();
    let mut writer = std::process::Command::new("flock")
        .arg(&tmp)
        .args(["sh", "-c"])
        .arg(format!("sleep 0.5; mv '{}' '{}'", aside.display(), graph.display()))
        .spawn()
        .unwrap();
    // Until flock holds the lock, a question would not wait.
    while std::process::Command::new("flock").args(["-n", "-s"]).arg(&tmp).arg("true").status().unwrap().success() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let (second, err) = ask(true);
    writer.wait().unwrap();
    assert!(err.contains("graph cache: hit"), "waited for the writer: {err}");
    assert_eq!(second, first);
    // A temporary file no writer holds (one that died) is not waited for.
    std::fs::remove_file(&graph).unwrap();
    let (_, err) = ask(true);
    assert!(err.contains("graph cache: miss"), "{err}");
    std::fs::remove_file(&tmp).unwrap();
    // Without the report, the command does not wait for its writers: the
    // next question, asked at once, still finds every file.
    std::fs::remove_file(&graph).unwrap();
    let (third, err) = ask(false);
    assert!(err.is_empty(), "{err}");
    let (fourth, err) = ask(true);
    assert!(err.contains("graph cache: hit"), "{err}");
    assert_eq!((third, fourth), (first.clone(), first));
}
