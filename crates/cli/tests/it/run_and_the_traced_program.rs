//! Figures a user reads and must be able to trust, each from a defect seen
//! on a real program, reproduced by a small one.

use crate::common::*;
use crate::exports::{export, pprof_raw_totals};
use std::path::Path;
use std::process::Command;

fn summary(dump: &Path) -> serde_json::Value {
    json(&["summary".as_ref(), "--json".as_ref(), dump.as_os_str()])
}

fn sum(rows: &serde_json::Value, key: &str) -> u64 {
    rows.as_array().unwrap().iter().map(|r| r[key].as_u64().unwrap()).sum()
}

#[test]
fn sampled_totals_equal_the_live_bytes_in_every_view() {
    // With sampled sites, every block used to be counted twice: the
    // sampled sites at their estimated weights and the same blocks again
    // as "(no site recorded)" (1,000,000 x 24 B read 187%).
    let d = Scratch::new("sampled");
    let prog = compile(&d, "sampled.c", &["-O1"]);
    let (o, dumps) = run_traced(&d.path("s.hdump"), &prog, &[], &["--backtrace", "sampled=65536"]);
    ok(&o);
    let dump = &dumps[0];
    let s = summary(dump);
    let (live, count) = (s["bytes"].as_u64().unwrap(), s["allocations"].as_u64().unwrap());
    assert!(live >= 100_000 * 24 + 20 * 65536, "{s}");
    for by in ["site", "size", "type"] {
        let rows =
            json(&["top".as_ref(), dump.as_os_str(), "--by".as_ref(), by.as_ref(), "-n".as_ref(), "100000".as_ref(), "--json".as_ref()]);
        assert_eq!(sum(&rows, "bytes"), live, "top --by {by}: {rows}");
        assert_eq!(sum(&rows, "allocations"), count, "top --by {by}: {rows}");
        assert!(!rows.to_string().contains("(no site recorded)"), "the unsampled blocks are in the estimates: {rows}");
    }
    // The sites the program has, each with a share near its real one.
    let rows = json(&["top".as_ref(), dump.as_os_str(), "--json".as_ref()]);
    let share = |f: &str| {
        rows.as_array()
            .unwrap()
            .iter()
            .filter(|r| r["key"].as_str().unwrap().contains(f))
            .map(|r| r["bytes"].as_u64().unwrap())
            .sum::<u64>()
    };
    let (small, large) = (share("make_small"), share("make_large"));
    assert!(small + large == live, "{rows}");
    let real_small = 100_000.0 * 24.0;
    assert!((small as f64 - real_small).abs() < 0.5 * real_small, "make_small estimated at {small} for {real_small}: {rows}");
    // Folded stacks.
    let folded = d.path("s.folded");
    export(dump, "folded", &folded, &[]);
    let total: u64 = std::fs::read_to_string(&folded).unwrap().lines().map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap()).sum();
    assert_eq!(total, live, "folded");
    // pprof, as go tool pprof reads it.
    let pb = d.path("s.pb.gz");
    export(dump, "pprof", &pb, &[]);
    assert_eq!(pprof_raw_totals(&d, &pb), (count, live), "pprof (objects, bytes)");
    // The heapsnapshot: every block once, at its size (node fields: type,
    // name, id, self_size, ...; the synthetic root and groups weigh 0).
    let hs = d.path("s.heapsnapshot");
    export(dump, "heapsnapshot", &hs, &[]);
    let snap: serde_json::Value = serde_json::from_slice(&std::fs::read(&hs).unwrap()).unwrap();
    let width = snap["snapshot"]["meta"]["node_fields"].as_array().unwrap().len();
    let nodes = snap["nodes"].as_array().unwrap();
    let self_sizes: u64 = nodes.chunks(width).map(|n| n[3].as_u64().unwrap()).sum();
    assert_eq!(self_sizes, live, "heapsnapshot self sizes");
}

#[test]
fn stacks_start_at_the_allocation_function_the_program_called() {
    // The tracker's own frames (record, tracked_alloc, ...) were the leaf
    // of every stack: go tool pprof -top showed `record` 100% flat.
    let d = Scratch::new("leaf");
    let prog = compile(&d, "leaks.c", &["-O0", "-g"]);
    let (o, dumps) = run_traced(&d.path("l.hdump"), &prog, &[], &[]);
    ok(&o);
    let pb = d.path("l.pb.gz");
    export(&dumps[0], "pprof", &pb, &[]);
    let o = tool("go").args(["tool", "pprof", "-top", "-sample_index=inuse_space"]).arg(&pb).env("HOME", &d.0).output().unwrap();
    let top = ok(&o);
    let flat_leader = top.lines().skip_while(|l| !l.trim_start().starts_with("flat")).nth(1).unwrap_or_default().to_string();
    assert!(flat_leader.trim_end().ends_with("malloc"), "the leaf is the allocation function the program called:\n{top}");
    let folded = d.path("l.folded");
    export(&dumps[0], "folded", &folded, &[]);
    let f = std::fs::read_to_string(&folded).unwrap();
    for internal in ["record", "tracked_alloc", "allocated_planned", "heapdump::"] {
        assert!(!f.contains(internal), "{internal} in folded stacks:\n{f}");
        assert!(!top.contains(internal), "{internal} in pprof:\n{top}");
    }
}

#[test]
fn a_stripped_library_is_not_named_after_the_symbol_before_its_code() {
    // The nearest exported symbol before a static function used to take
    // its calls (sqlite3 all `sqlite3ApiExit`, git all `error`).
    let d = Scratch::new("stripped");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c");
    let lib = d.path("libstripped.so");
    let o = Command::new("gcc").args(["-O1", "-shared", "-fPIC", "-s", "-o"]).arg(&lib).arg(src.join("stripped_lib.c")).output().unwrap();
    ok(&o);
    let exe = d.path("stripped_main");
    let o = Command::new("gcc")
        .args(["-O1", "-o"])
        .arg(&exe)
        .arg(src.join("stripped_main.c"))
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", d.0.display()))
        .output()
        .unwrap();
    ok(&o);
    let (o, dumps) = run_traced(&d.path("s.hdump"), &exe, &[], &[]);
    ok(&o);
    let rows = json(&["top".as_ref(), dumps[0].as_os_str(), "--json".as_ref()]);
    let keys: Vec<&str> = rows.as_array().unwrap().iter().map(|r| r["key"].as_str().unwrap()).collect();
    assert!(!keys.iter().any(|k| k.contains("tiny_exported")), "{keys:?}");
    let size = std::fs::metadata(&lib).unwrap().len();
    let unnamed: Vec<u64> = keys
        .iter()
        .filter_map(|k| k.strip_prefix("libstripped.so+0x"))
        .map(|h| u64::from_str_radix(h.split_whitespace().next().unwrap(), 16).unwrap())
        .collect();
    assert_eq!(unnamed.len(), 2, "the two static functions are module+offset: {keys:?}");
    assert!(unnamed.iter().all(|&o| o < size), "offsets in the file ({size} bytes), not addresses: {unnamed:x?}");
}

#[test]
fn threads_and_roots_are_counted_once_and_alike() {
    let d = Scratch::new("counts");
    let prog = compile(&d, "leaks_tree.c", &["-O0"]);
    // An exit dump and a signal dump (written on the runtime's own thread).
    let (o, dumps) = run_traced(&d.path("c.hdump"), &prog, &[], &[]);
    ok(&o);
    let s = summary(&dumps[0]);
    assert_eq!(s["threads"], 1, "a single-threaded program: {s}");
    assert_eq!(s["threads_not_stopped"], 0, "{s}");
    let j = d.path("c.json");
    export(&dumps[0], "json", &j, &[]);
    let e: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&j).unwrap()).unwrap();
    let roots = e["summary"]["roots"].as_u64().or(e["roots"].as_u64()).expect("export json has roots");
    assert_eq!(roots, s["roots"].as_u64().unwrap(), "summary and export json count roots alike");
}

#[test]
fn a_thread_that_blocks_every_signal_is_not_waited_for() {
    let d = Scratch::new("blocked");
    let prog = compile(&d, "blocks_signals.c", &["-O0", "-pthread"]);
    let (o, dumps) = run_traced(&d.path("b.hdump"), &prog, &[], &["--no-at-exit"]);
    ok(&o);
    assert_eq!(dumps.len(), 1, "{}", String::from_utf8_lossy(&o.stderr));
    let s = summary(&dumps[0]);
    assert_eq!((s["threads"].as_u64(), s["threads_not_stopped"].as_u64()), (Some(2), Some(1)), "{s}");
    // Not waited for: the program was held for less than the 2 s stop timeout.
    assert!(s["pause_us"].as_u64().unwrap() < 2_000_000, "{s}");
    let text = ok(&heapdump().arg("summary").arg(&dumps[0]).output().unwrap());
    assert!(text.contains("1 not stopped"), "{text}");
}

#[test]
fn the_first_static_step_of_a_path_is_relative_to_its_symbol() {
    let d = Scratch::new("path");
    let prog = compile(&d, "leaks_tree.c", &["-O0", "-g"]);
    let (o, dumps) = run_traced(&d.path("p.hdump"), &prog, &[], &[]);
    ok(&o);
    // The root of the kept tree: the block `kept` points to.
    let rows = json(&["retained".as_ref(), dumps[0].as_os_str(), "--json".as_ref()]);
    let mut found = false;
    for r in rows.as_array().unwrap() {
        let addr = r["address"].as_str().unwrap();
        let steps = json(&["path".as_ref(), dumps[0].as_os_str(), addr.as_ref(), "--json".as_ref()]);
        if let Some(first) = steps.as_array().unwrap().first() {
            if first["from"].as_str().unwrap().contains("static kept") {
                assert_eq!(first["offset"], 0, "{steps}");
                found = true;
            }
        }
    }
    assert!(found, "no path starts at `kept`: {rows}");
}

#[test]
fn leaks_says_how_many_groups_it_leaves_out() {
    let d = Scratch::new("groups");
    let prog = compile(&d, "many_groups.c", &["-O0"]);
    let (o, dumps) = run_traced(&d.path("g.hdump"), &prog, &[], &[]);
    ok(&o);
    let text = ok(&heapdump().arg("leaks").arg(&dumps[0]).output().unwrap());
    assert!(text.contains("and 5 more groups"), "{text}");
    let all = ok(&heapdump().arg("leaks").arg(&dumps[0]).args(["-n", "15"]).output().unwrap());
    assert!(!all.contains("more groups"), "{all}");
    assert_eq!(all.matches("definitely lost, e.g.").count() + all.matches("definitely lost (+").count(), 15, "{all}");
}

#[test]
fn a_dump_cut_before_its_roots_gives_no_leak_verdict() {
    let d = Scratch::new("cut");
    let prog = compile(&d, "leaks.c", &["-O0"]);
    let (o, dumps) = run_traced(&d.path("c.hdump"), &prog, &[], &[]);
    ok(&o);
    let bytes = std::fs::read(&dumps[0]).unwrap();
    // Cut in the middle of the first STATIC record (tag 4).
    let mut off = 32usize;
    let cut = loop {
        let tag = u32::from_le_bytes(bytes[off..off + 4].try_into().unwrap());
        let len = u64::from_le_bytes(bytes[off + 4..off + 12].try_into().unwrap()) as usize;
        if tag == 4 {
            break off + 12 + len / 2;
        }
        off += 12 + len;
    };
    let cutp = d.path("cut.hdump");
    std::fs::write(&cutp, &bytes[..cut]).unwrap();
    let o = heapdump().arg("leaks").arg(&cutp).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "no verdict without the roots: {}", String::from_utf8_lossy(&o.stdout));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.lines().last().unwrap().contains("no leak verdict"), "{err}");
    // The other views still show what was read.
    ok(&heapdump().arg("summary").arg(&cutp).output().unwrap());
}

#[test]
fn the_named_path_survives_a_shell() {
    // `run -o w.hdump -- sh -c ./app` used to write only w.<pid>.1.hdump.
    let d = Scratch::new("shell");
    let prog = compile(&d, "leaks.c", &["-O0"]);
    let (o, dumps) = run_traced(&d.path("w.hdump"), Path::new("/bin/sh"), &["-c", &format!("{}; true", prog.display())], &[]);
    ok(&o);
    assert!(dumps.contains(&d.path("w.hdump")), "{dumps:?}");
    assert!(d.path("w.hdump").exists());
}

#[test]
fn the_heapdump_command_never_dumps_itself() {
    // The command used to link the runtime (for a few parsers and the
    // demo): HEAPDUMP_AT_EXIT=1 or SIGUSR2 made it write a dump of itself.
    let d = Scratch::new("self");
    let prog = compile(&d, "leaks.c", &["-O0"]);
    let (o, dumps) = run_traced(&d.path("x.hdump"), &prog, &[], &[]);
    ok(&o);
    let cwd = d.path("cwd");
    std::fs::create_dir(&cwd).unwrap();
    let o = heapdump().arg("summary").arg(&dumps[0]).current_dir(&cwd).env("HEAPDUMP_AT_EXIT", "1").output().unwrap();
    ok(&o);
    let written: Vec<_> = std::fs::read_dir(&cwd).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(written.is_empty(), "heapdump summary wrote {written:?}");
    // The runtime's code is not linked in: none of its symbols (the
    // executable carries the preload library as data, to write it out for
    // `run`, but never runs it). The demo program, which links it, has them.
    let runtime_symbols = |exe: &std::path::Path| -> usize {
        use object::{Object, ObjectSymbol};
        let bytes = std::fs::read(exe).unwrap();
        let f = object::File::parse(&*bytes).unwrap();
        f.symbols().filter(|s| s.name().is_ok_and(|n| n.starts_with("heapdump_rt_") || n.contains("6config6Config8from_env"))).count()
    };
    assert!(runtime_symbols(&sibling_bin("heapdump-demo")) > 0, "the check's marker is the runtime's");
    assert_eq!(runtime_symbols(std::path::Path::new(env!("CARGO_BIN_EXE_heapdump"))), 0, "the heapdump binary links the runtime");
}

#[test]
fn an_output_directory_that_does_not_exist_is_found_before_the_program_starts() {
    // It used to be found at exit ("creating the dump file (errno 2)",
    // exit 0) after the whole run.
    let d = Scratch::new("nodir");
    let marker = d.path("ran");
    let o = heapdump()
        .args(["run", "-o", "/nonexistent/dir/a.hdump", "--", "/bin/sh", "-c"])
        .arg(format!("touch {}", marker.display()))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("/nonexistent/dir") && err.contains("No such file or directory") && err.lines().count() == 1, "{err}");
    assert!(!marker.exists(), "the program was started");
}

#[test]
fn run_waits_for_the_dump_a_program_started_before_ending() {
    // The signal dump is answered by the runtime's helper thread (and with
    // --fork by a forked writer) while main returns; `run` used to say "no
    // dump was written" and exit before the file was complete.
    let d = Scratch::new("waits");
    let prog = compile(&d, "dump_then_exit.c", &["-O1"]);
    for (i, extra) in [&["--fork"][..], &[][..], &["--fork"][..], &[][..]].iter().enumerate() {
        let mut args = vec!["--no-at-exit", "--mode", "compact"];
        args.extend_from_slice(extra);
        let (o, dumps) = run_traced(&d.path(&format!("w{i}.hdump")), &prog, &["300000"], &args);
        let err = ok(&o);
        let err = err + &String::from_utf8_lossy(&o.stderr);
        assert_eq!(dumps.len(), 1, "run {i} {extra:?}: {err}");
        assert!(err.contains("(signal, by dump_then_exit["), "the program that wrote it is named: {err}");
        let s = summary(&dumps[0]);
        assert!(s["allocations"].as_u64().unwrap() >= 300_000, "complete when run exits: {s}");
    }
}

#[test]
fn run_names_the_program_of_each_dump_in_its_process_tree() {
    let d = Scratch::new("tree");
    let prog = compile(&d, "dump_then_exit.c", &["-O1"]);
    // Two processes in turn under a shell (dash leaves by _exit: no dump).
    let script = format!("{0} 1000; {0} 2000; exit 3", prog.display());
    let (o, dumps) = run_traced(&d.path("t.hdump"), Path::new("/bin/sh"), &["-c", &script], &[]);
    assert_eq!(o.status.code(), Some(3), "the shell's status is passed on");
    let err = String::from_utf8_lossy(&o.stderr);
    // Each program's signal and exit dumps, each line naming its process.
    assert_eq!(dumps.len(), 4, "{err}");
    let mut pids = std::collections::BTreeMap::<String, Vec<u64>>::new();
    for l in err.lines().filter(|l| l.starts_with("heapdump: wrote ")) {
        let by = l.split(", by ").nth(1).unwrap_or_else(|| panic!("no program named: {l}"));
        let prog = by.split(',').next().unwrap().to_string();
        let n: u64 = by.split(", ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
        pids.entry(prog).or_default().push(n);
    }
    assert_eq!(pids.len(), 2, "two processes: {err}");
    let mut counts: Vec<Vec<u64>> = pids.into_values().collect();
    counts.sort();
    assert_eq!(counts, vec![vec![1000, 1000], vec![2000, 2000]], "{err}");
    for p in &dumps {
        assert!(summary(p)["allocations"].as_u64().unwrap() >= 1000);
    }
}

#[test]
fn a_program_that_cannot_be_run_exits_as_in_a_shell() {
    ensure_preload();
    let o = heapdump().args(["run", "--", "/nonexistent/program"]).output().unwrap();
    assert_eq!(o.status.code(), Some(127), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/program"));
    let d = Scratch::new("noexec");
    let f = d.path("script.sh");
    std::fs::write(&f, "#!/bin/sh\n").unwrap();
    let o = heapdump().arg("run").arg("--").arg(&f).output().unwrap();
    assert_eq!(o.status.code(), Some(126), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn the_same_program_gets_the_same_leak_classes_in_every_run() {
    // Conservative scanning cannot tell a stale word from a live one, but
    // the dump adds none of its own (its frames, registers, thread-local
    // variables and tables are not roots): ten runs, one answer, per mode.
    // The exit dump used to run from the loader's finalisation (atexit in
    // the preload library ties the handler to it), whose frames kept a
    // stale pointer to one node: 56 B still reachable where valgrind says
    // indirectly lost.
    let d = Scratch::new("same");
    let prog = compile(&d, "stale_frame.c", &["-O1"]);
    let expected = crate::valgrind::valgrind_summary(&prog);
    for mode in ["compact", "full"] {
        let mut seen = std::collections::BTreeMap::<String, u32>::new();
        for i in 0..10 {
            let (o, dumps) = run_traced(&d.path(&format!("s-{mode}-{i}.hdump")), &prog, &[], &["--mode", mode]);
            ok(&o);
            let l = crate::valgrind::ours(&dumps[0]);
            assert_eq!(l, expected, "{mode}, run {i}: heapdump vs valgrind as [definitely, indirectly, possibly, reachable]");
            *seen.entry(format!("{l:?}")).or_default() += 1;
        }
        assert_eq!(seen.len(), 1, "{mode}: [definitely, indirectly, possibly, reachable] over ten runs: {seen:?}");
    }
}

#[test]
fn the_report_channel_is_private() {
    // run used to hand its children $TMPDIR/heapdump-run-<pid>.tsv, which
    // another local user could plant a symlink or a FIFO at; the runtime
    // appended to it without O_EXCL or O_NOFOLLOW.
    ensure_preload();
    let o = heapdump()
        .args([
            "run",
            "--no-at-exit",
            "--",
            "/bin/sh",
            "-c",
            "d=$(dirname \"$HEAPDUMP_REPORT\"); stat -c '%a %u' \"$d\"; id -u; echo \"$HEAPDUMP_REPORT\"",
        ])
        .output()
        .unwrap();
    let out = ok(&o);
    let lines: Vec<&str> = out.lines().collect();
    let (mode_uid, uid, report) = (lines[0], lines[1], lines[2]);
    assert_eq!(mode_uid, format!("700 {uid}"), "the report's directory is private: {out}");
    assert!(!Path::new(report).exists(), "removed after the run");
    assert!(!Path::new(report).parent().unwrap().exists(), "its directory too");
    // As root (CI), a second user tries what the attack did: a symlink to a
    // root-owned file and a FIFO at the report path, while the program runs.
    if uid != "0" {
        return;
    }
    let d = Scratch::new("channel");
    let victim = d.path("victim");
    std::fs::write(&victim, "root's\n").unwrap();
    let as_nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups --";
    let script = format!(
        "{as_nobody} ln -s {v} \"$HEAPDUMP_REPORT\" 2>/dev/null && echo symlink planted; \
         {as_nobody} mkfifo \"$HEAPDUMP_REPORT.fifo\" 2>/dev/null && echo fifo planted; \
         {as_nobody} ls \"$(dirname \"$HEAPDUMP_REPORT\")\" >/dev/null 2>&1 && echo listed; echo done",
        v = victim.display()
    );
    let o = heapdump().args(["run", "--no-at-exit", "--", "/bin/sh", "-c", &script]).output().unwrap();
    assert_eq!(ok(&o).trim(), "done", "user nobody reached the report channel");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's\n");
}

#[test]
fn a_program_that_owns_the_stop_signal_keeps_it() {
    let d = Scratch::new("rtsig");
    let prog = compile(&d, "owns_rt_signal.c", &["-O1", "-pthread"]);
    let out = d.path("r.hdump");
    let (o, dumps) = run_traced(&out, &prog, &[out.to_str().unwrap()], &["--no-at-exit"]);
    let stdout = ok(&o);
    assert_eq!(stdout.trim(), "0", "the program received the runtime's stop signals");
    assert_eq!(dumps.len(), 1, "{}", String::from_utf8_lossy(&o.stderr));
    let s = summary(&dumps[0]);
    assert_eq!((s["threads"].as_u64(), s["threads_not_stopped"].as_u64()), (Some(3), Some(0)), "{s}");
    assert!(s["pause_us"].as_u64().unwrap() < 2_000_000, "no stall: {s}");
}

#[test]
fn a_file_size_limit_fails_the_dump_not_the_program() {
    let d = Scratch::new("fsize");
    let prog = compile(&d, "host_files.c", &["-O1"]);
    let (o, dumps) = run_traced(&d.path("f.hdump"), &prog, &["fsize"], &["--mode", "full"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "the program's own status (SIGXFSZ is 153): {err}");
    assert!(dumps.is_empty(), "{err}");
    assert!(err.contains("File too large"), "the dump failed, saying why: {err}");
    // What fitted is kept, and reads as cut short.
    let o = heapdump().arg("summary").arg(d.path("f.hdump")).output().unwrap();
    let text = ok(&o);
    assert!(text.contains("incomplete"), "{text}");
    // With no room at all, no empty file is left to read as "not a dump".
    let (o, _) = run_traced(&d.path("z.hdump"), &prog, &["fsize", "0"], &["--mode", "full"]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!d.path("z.hdump").exists());
}

#[test]
fn the_runtime_writes_only_to_the_stderr_it_was_given() {
    let d = Scratch::new("stderr");
    let prog = compile(&d, "host_files.c", &["-O1"]);
    let data = d.path("data2.txt");
    let out = d.path("s.hdump");
    ensure_preload();
    // Not through run, so that the dump's line goes to stderr.
    let o = std::process::Command::new(&prog)
        .args(["stderr", data.to_str().unwrap()])
        .env("LD_PRELOAD", sibling_bin("libheapdump_preload.so"))
        .env("HEAPDUMP_AT_EXIT", "1")
        .env("HEAPDUMP_OUTPUT", &out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert!(out.exists(), "the dump is still written");
    assert_eq!(std::fs::read_to_string(&data).unwrap(), "data\n", "nothing of the runtime's in the program's file");
}

#[test]
fn dumps_are_files_and_never_garble_runs_lines() {
    ensure_preload();
    // run refuses at once.
    for bad in ["/dev/full", "/tmp/a\tb.hdump", "/tmp/a\nb.hdump"] {
        let o = heapdump().args(["run", "-o", bad, "--", "true"]).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", String::from_utf8_lossy(&o.stderr));
    }
    // The runtime, configured directly, creates nothing beside a device.
    let o = std::process::Command::new("/bin/true")
        .env("LD_PRELOAD", sibling_bin("libheapdump_preload.so"))
        .env("HEAPDUMP_AT_EXIT", "1")
        .env("HEAPDUMP_OUTPUT", "/dev/full")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a regular file"), "{}", String::from_utf8_lossy(&o.stderr));
    let created: Vec<_> = std::fs::read_dir("/dev")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("full."))
        .collect();
    assert!(created.is_empty(), "{created:?}");
}

#[test]
fn a_thread_that_cannot_be_stopped_still_holds_what_its_stack_holds() {
    // Its stack is read where it waits in the kernel (the stack pointer of
    // /proc/self/task/TID/syscall); it used to be no root at all, and the
    // block its frame holds was "definitely lost".
    let d = Scratch::new("mainblocks");
    let prog = compile(&d, "main_blocks_signals.c", &["-O1", "-pthread"]);
    for mode in ["compact", "full"] {
        let (o, dumps) = run_traced(&d.path(&format!("m-{mode}.hdump")), &prog, &[], &["--no-at-exit", "--mode", mode]);
        ok(&o);
        assert_eq!(dumps.len(), 1, "{}", String::from_utf8_lossy(&o.stderr));
        let s = summary(&dumps[0]);
        assert_eq!(s["threads_not_stopped"].as_u64(), Some(1), "{s}");
        let l = json(&["leaks".as_ref(), "--json".as_ref(), dumps[0].as_os_str()]);
        assert_eq!(l["definitely_lost"]["blocks"], 0, "{mode}: {l}");
        assert_eq!(l["threads_not_stopped"], 1, "{mode}: the verdict says what it depends on: {l}");
        let text = ok(&heapdump().arg("leaks").arg(&dumps[0]).output().unwrap());
        assert!(text.contains("not stopped"), "{text}");
    }
}

#[test]
fn the_programs_signals_run_on_the_programs_threads() {
    let d = Scratch::new("timer");
    let prog = compile(&d, "timer_signals.c", &["-O1"]);
    for round in 0..3 {
        let (o, _) = run_traced(&d.path(&format!("t{round}.hdump")), &prog, &[], &["--no-at-exit"]);
        let out = ok(&o);
        let v: Vec<u64> = out.split_whitespace().map(|x| x.parse().unwrap()).collect();
        assert!(v[0] > 50, "the timer ran: {out}");
        assert_eq!(v[1], 0, "handler runs on the runtime's thread, of {}", v[0]);
    }
}
