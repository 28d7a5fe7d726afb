//! Dumps at the moments programs die: a server stopped with SIGTERM, a
//! program interrupted with Ctrl-C at a terminal, crashes (a segfault, an
//! abort, a stack overflow). Each leaves a dump naming the signal, and the
//! program still ends as it would have (its status, its own handler).

use crate::common::*;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn summary(dump: &Path) -> serde_json::Value {
    json(&["summary".as_ref(), "--json".as_ref(), dump.as_os_str()])
}

fn leaks(dump: &Path) -> serde_json::Value {
    json(&["leaks".as_ref(), "--json".as_ref(), dump.as_os_str()])
}

/// What `heapdump run` of a program said and did.
struct Ran {
    code: Option<i32>,
    stdout: String,
    dumps: Vec<PathBuf>,
    stderr: String,
}

/// Runs `fatal_term MODE` under `heapdump run` (with `extra` options),
/// waits for its "ready PID", sends `sig` to the program (or, with
/// `to_run`, to `heapdump run`, which forwards it), and waits for the end.
fn stop_server(d: &Scratch, mode: &str, sig: &str, to_run: bool, extra: &[&str]) -> Ran {
    ensure_preload();
    let prog = compile(d, "fatal_term.c", &["-O0", "-g"]);
    let out = d.path(&format!("{mode}.hdump"));
    let mut child = heapdump()
        .arg("run")
        .args(extra)
        .arg("-o")
        .arg(&out)
        .arg("--")
        .arg(&prog)
        .arg(mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    let pid: i32 = first.strip_prefix("ready ").and_then(|p| p.trim().parse().ok()).unwrap_or_else(|| panic!("no ready line: {first:?}"));
    let target = if to_run { child.id().to_string() } else { pid.to_string() };
    assert!(Command::new("kill").arg(format!("-{sig}")).arg(&target).status().unwrap().success());
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let o = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    let dumps =
        stderr.lines().filter_map(|l| l.strip_prefix("heapdump: wrote ")).map(|l| PathBuf::from(l.split(" (").next().unwrap())).collect();
    Ran { code: o.status.code(), stdout: first + &rest, dumps, stderr }
}

#[test]
fn sigterm_dumps_a_server_and_ends_it_as_before() {
    // The failure guarded: "no dump was written", and 143 passed on.
    for (mode, to_run) in [("plain", false), ("plain", true), ("own", false)] {
        let d = Scratch::new("term");
        let r = stop_server(&d, mode, "TERM", to_run, &[]);
        assert_eq!(r.code, Some(143), "{mode}: ended by SIGTERM as without heapdump: {}", r.stderr);
        assert_eq!(r.dumps.len(), 1, "{mode}: one dump: {}", r.stderr);
        let s = summary(&r.dumps[0]);
        assert_eq!(s["reason"], "signal", "{s}");
        assert_eq!(s["signal"]["name"], "SIGTERM", "{s}");
        assert!(s["signal"]["sender"].as_u64().is_some(), "sent by a process: {s}");
        // The program's own handler (installed in main, after the
        // runtime's) ran once, after the dump.
        let handled = r.stdout.matches("handler").count();
        assert_eq!(handled, usize::from(mode == "own"), "{mode}: {}", r.stdout);
        // The heap as it was: 100 nodes held from a global, 10 lost blocks.
        let l = leaks(&r.dumps[0]);
        assert_eq!(l["definitely_lost"]["blocks"], 10, "{l}");
        assert!(l["still_reachable"]["blocks"].as_u64().unwrap() >= 100, "{l}");
    }
}

/// A signal sent to `heapdump run` the moment its program starts is
/// passed on like any other: were `heapdump run`'s handlers installed only
/// after starting the program, a SIGTERM in between would end it alone
/// and leave the program running without it (seen once in CI, the
/// machine loaded: the test reading the program's output hung). The
/// program signals its parent from a constructor, before its main.
#[test]
fn a_signal_right_after_the_start_is_passed_on() {
    ensure_preload();
    let d = Scratch::new("early");
    let prog = compile(&d, "fatal_term.c", &["-O0", "-g"]);
    for round in 0..20 {
        let out = d.path(&format!("early{round}.hdump"));
        let child = heapdump()
            .args(["run", "-o"])
            .arg(&out)
            .arg("--")
            .arg(&prog)
            .arg("parent")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Read to the end on a thread: a program left behind holds its
        // output open, and the wait below must not hang on it.
        let (tx, rx) = std::sync::mpsc::channel();
        let id = child.id();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        let o = rx.recv_timeout(std::time::Duration::from_secs(60)).unwrap_or_else(|_| {
            let _ = Command::new("kill").arg(id.to_string()).status();
            panic!("round {round}: heapdump run did not end: the program runs on without it")
        });
        let o = o.unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(143), "round {round}: the program ended by the SIGTERM passed on: {stderr}");
        assert_eq!(summary(&out)["signal"]["name"], "SIGTERM", "round {round}: {stderr}");
    }
}

#[test]
fn a_handler_that_exits_cleanly_gets_the_exit_dump_too() {
    // The signal dump first, then the program's handler, whose exit(0)
    // runs the exit dump: two dumps, status 0.
    let d = Scratch::new("cleanexit");
    let r = stop_server(&d, "exit", "TERM", false, &[]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let reasons: Vec<String> = r.dumps.iter().map(|p| summary(p)["reason"].as_str().unwrap().to_string()).collect();
    assert_eq!(reasons, ["signal", "exit"], "{}", r.stderr);
}

#[test]
fn ctrl_c_at_a_terminal_dumps_once() {
    // The terminal sends SIGINT to the whole foreground group: heapdump run
    // must not send it again, and the program's handler runs once.
    ensure_preload();
    let d = Scratch::new("ctrlc");
    let prog = compile(&d, "fatal_term.c", &["-O0"]);
    let out = d.path("i.hdump");
    let cmd = format!("{} run -o {} -- {} own", env!("CARGO_BIN_EXE_heapdump"), out.display(), prog.display());
    let mut child = Command::new("script")
        .args(["-qfec", &cmd, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script(1), from util-linux");
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    while !String::from_utf8_lossy(&seen).contains("ready") {
        let n = stdout.read(&mut buf).unwrap();
        assert!(n > 0, "ended before ready: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    use std::io::Write;
    child.stdin.as_mut().unwrap().write_all(b"\x03").unwrap();
    stdout.read_to_end(&mut seen).unwrap();
    let status = child.wait().unwrap();
    let text = String::from_utf8_lossy(&seen).into_owned();
    assert_eq!(status.code(), Some(130), "ended by SIGINT: {text}");
    assert_eq!(text.matches("handler").count(), 1, "the program's handler ran once: {text}");
    let dumps: Vec<&str> = text.lines().filter_map(|l| l.trim().strip_prefix("heapdump: wrote ")).collect();
    assert_eq!(dumps.len(), 1, "{text}");
    let s = summary(&out);
    assert_eq!((s["reason"].as_str(), s["signal"]["name"].as_str()), (Some("signal"), Some("SIGINT")), "{s}");
    assert!(s["signal"]["sender"].is_null(), "raised by the terminal, no sender: {s}");
}

#[test]
fn crashes_leave_a_dump_and_still_end_the_program() {
    ensure_preload();
    let d = Scratch::new("crash");
    let prog = compile(&d, "crash.c", &["-O0", "-g"]);
    for (how, code, name) in
        [("segv", 139, "SIGSEGV"), ("abort", 134, "SIGABRT"), ("doublefree", 134, "SIGABRT"), ("overflow", 139, "SIGSEGV")]
    {
        let (o, dumps) = run_traced(&d.path(&format!("{how}.hdump")), &prog, &[how], &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{how}: dies of the same signal: {err}");
        assert_eq!(dumps.len(), 1, "{how}: {err}");
        let s = summary(&dumps[0]);
        assert_eq!(s["reason"], "crash", "{how}: {s}");
        assert_eq!(s["signal"]["name"], name, "{how}: {s}");
        assert_eq!(s["signal"]["tid"], s["pid"], "{how}: the faulting thread is the main one: {s}");
        if how == "segv" {
            assert_eq!(s["signal"]["address"], "0x10", "the faulting address: {s}");
        }
        // A crash inside the tracker (glibc aborting in the free it
        // forwarded) must not stall the dump: the crashed thread is stopped
        // at once (it was left out, and the dump waited 2 s for it).
        assert_eq!(s["threads_not_stopped"], 0, "{how}: {s}");
        // The list is held only by the crashing frame: the thread is dumped
        // with the registers and stack of the fault (not of the handler, on
        // its alternate stack), so nothing is taken for lost.
        let l = leaks(&dumps[0]);
        assert_eq!(l["definitely_lost"]["blocks"], 0, "{how}: {l}");
        assert_eq!(l["still_reachable"]["blocks"], 100, "{how}: {l}");
    }
}

#[test]
fn no_dump_when_asked_not_to_or_when_the_program_ignores_the_signal() {
    let d = Scratch::new("nofatal");
    let r = stop_server(&d, "plain", "TERM", false, &["--no-on-fatal"]);
    assert_eq!(r.code, Some(143), "{}", r.stderr);
    assert!(r.dumps.is_empty() && r.stderr.contains("no dump was written"), "{}", r.stderr);
    // A program that ignores SIGTERM still ignores it: it goes on, and the
    // only dump is the one at its exit.
    let d = Scratch::new("ignored");
    let r = stop_server(&d, "ignore", "TERM", false, &[]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.dumps.len(), 1, "{}", r.stderr);
    assert_eq!(summary(&r.dumps[0])["reason"], "exit");
}
