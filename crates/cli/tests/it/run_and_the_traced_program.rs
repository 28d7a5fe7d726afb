//! `heapdump run` as the traced program and its user see it: the program
//! keeps its own signals, threads, stderr and exit status, a file size
//! limit fails the dump and not the program, the `heapdump` command never
//! dumps itself, and run waits for, names and lists every dump its process
//! tree wrote. Each guards a defect seen on a real program, reproduced by
//! a small one.

use crate::common::*;
use std::path::Path;

fn summary(dump: &Path) -> serde_json::Value {
    json(&["summary".as_ref(), "--json".as_ref(), dump.as_os_str()])
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
fn the_named_path_survives_a_shell() {
    // The failure guarded: `run -o w.hdump -- sh -c ./app` writing only
    // w.<pid>.1.hdump.
    let d = Scratch::new("shell");
    let prog = compile(&d, "leaks.c", &["-O0"]);
    let (o, dumps) = run_traced(&d.path("w.hdump"), Path::new("/bin/sh"), &["-c", &format!("{}; true", prog.display())], &[]);
    ok(&o);
    assert!(dumps.contains(&d.path("w.hdump")), "{dumps:?}");
    assert!(d.path("w.hdump").exists());
}

#[test]
fn the_heapdump_command_never_dumps_itself() {
    // A command linking the runtime (for a few parsers, the demo) would
    // write a dump of itself on HEAPDUMP_AT_EXIT=1 or SIGUSR2.
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
    // Found at exit instead, it costs the whole run for nothing
    // ("creating the dump file (errno 2)", exit 0).
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
    // --fork by a forked writer) while main returns; `run` must not say
    // "no dump was written" and exit before the file is complete.
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
    // /proc/self/task/TID/syscall); were it no root at all, the block its
    // frame holds would be "definitely lost".
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
