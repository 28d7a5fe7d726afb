//! `heapdump run`'s triggers a user chooses: `--threshold BYTES` dumps
//! when the live heap first crosses each step of BYTES, once per step;
//! `--signal SIG` dumps on SIG and leaves every other signal (the default
//! SIGUSR2 too) to the program; `--signal 0` takes no signal at all.

use crate::common::*;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A dump as `run`'s line gives it: its path, reason and live bytes.
type Wrote = (PathBuf, Option<String>, u64);

/// `heapdump run`'s "wrote" lines: each dump's reason and live bytes
/// (`None` and 0 for a dump whose program ended after the file was whole
/// but before reporting it: a signal's default action may end it there).
fn wrote(stderr: &str) -> Vec<Wrote> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("heapdump: wrote "))
        .map(|l| {
            // PATH (REASON, by PROG[PID], N allocations, B bytes, file F bytes)
            // or PATH (by PROG[PID], which ended before reporting it; ...)
            let (path, rest) = l.split_once(" (").unwrap();
            if rest.starts_with("by ") && rest.contains("which ended before reporting it; the file is complete") {
                return (PathBuf::from(path), None, 0);
            }
            let fields: Vec<&str> = rest.split(", ").collect();
            let bytes = fields.iter().find_map(|f| f.strip_suffix(" bytes").filter(|f| !f.starts_with("file"))).unwrap();
            (PathBuf::from(path), Some(fields[0].to_string()), bytes.parse().unwrap_or_else(|_| panic!("bytes in {l:?}")))
        })
        .collect()
}

const MIB: u64 = 1 << 20;

#[test]
fn a_threshold_dumps_once_per_step_as_the_heap_first_crosses_it() {
    let d = Scratch::new("threshold");
    let prog = compile(&d, "threshold_steps.c", &["-O0", "-g"]);
    // The program grows to 3.5 MiB, falls to 0.5 MiB, grows to 2.5 MiB.
    let (o, _) = run_traced(&d.path("t.hdump"), &prog, &[], &["--threshold", "1M"]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    ok(&o);
    let dumps = wrote(&err);
    let mut steps: Vec<u64> = dumps.iter().filter(|(_, r, _)| r.as_deref() == Some("threshold")).map(|(_, _, b)| *b).collect();
    steps.sort_unstable();
    // One dump at 1, 2 and 3 MiB, taken as the heap passed the step (the
    // runtime sees each thread's allocations in steps of 64 KiB): none
    // when the heap grows past 1 and 2 MiB again.
    assert_eq!(steps.len(), 3, "threshold dumps {steps:?}\n{err}");
    for (k, b) in steps.iter().enumerate() {
        let step = (k as u64 + 1) * MIB;
        assert!(*b >= step && *b < step + 256 * 1024, "the dump of step {step}: {b} live bytes\n{err}");
    }
    assert_eq!(dumps.iter().filter(|(_, r, _)| r.as_deref() == Some("exit")).count(), 1, "{err}");
    // What the line says is what the dump holds.
    for (path, reason, bytes) in &dumps {
        let s = json(&["summary".as_ref(), "--json".as_ref(), path.as_os_str()]);
        assert_eq!(
            (s["reason"].as_str().unwrap(), s["bytes"].as_u64().unwrap()),
            (reason.as_deref().unwrap_or("unreported"), *bytes),
            "{}",
            path.display()
        );
    }
    // A step the heap never reaches takes no dump.
    let (o, _) = run_traced(&d.path("u.hdump"), &prog, &[], &["--threshold", "4M"]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    ok(&o);
    let reasons: Vec<Option<String>> = wrote(&err).into_iter().map(|(_, r, _)| r).collect();
    assert_eq!(reasons, [Some("exit".to_string())], "{err}");
}

/// `awaits_signals` under `heapdump run` with `extra`: sends it `first`
/// (and waits for the dump it should take), then `then`, then closes its
/// stdin; returns run's status, its dumps and its stderr.
fn signalled(d: &Scratch, extra: &[&str], first: Option<&str>, then: &str) -> (Option<i32>, Vec<Wrote>, String) {
    ensure_preload();
    let prog = compile(d, "awaits_signals.c", &["-O0", "-g"]);
    let out = d.path("s.hdump");
    let mut child = heapdump()
        .arg("run")
        .args(extra)
        .arg("-o")
        .arg(&out)
        .arg("--")
        .arg(&prog)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let pid = line.strip_prefix("ready ").map(str::trim).unwrap_or_else(|| panic!("no ready line: {line:?}")).to_string();
    let kill = |sig: &str| Command::new("kill").arg(format!("-{sig}")).arg(&pid).status().unwrap().success();
    if let Some(sig) = first {
        assert!(kill(sig), "the program ended before {sig}");
        // The dump is written while the program goes on: its file is
        // whole once it ends with the trailer.
        let n = heapdump_format::raw::RECORD_HEADER_SIZE + heapdump_format::raw::END_SIZE;
        let whole = |p: &Path| std::fs::read(p).is_ok_and(|b| b.len() > n && heapdump_format::ends_with_trailer(&b[b.len() - n..]));
        let mut waited = 0;
        while !whole(&out) && waited < 6000 {
            std::thread::sleep(std::time::Duration::from_millis(10));
            waited += 1;
        }
    }
    // (Gone already, when `first` ended it: the status says so.)
    let _ = kill(then);
    // A program still running reads its stdin's end and exits.
    drop(child.stdin.take());
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    (o.status.code(), wrote(&err), err)
}

#[test]
fn the_chosen_signal_dumps_and_sigusr2_is_left_to_the_program() {
    let d = Scratch::new("signal-usr1");
    let (code, dumps, err) = signalled(&d, &["--signal", "USR1"], Some("USR1"), "USR2");
    // SIGUSR1 took a dump of the program's heap; SIGUSR2 then had its
    // default action: the program died of it (128 + 12), with no dump.
    assert_eq!(code, Some(140), "{err}");
    assert_eq!(dumps.len(), 1, "{err}");
    // SIGUSR2 may end the program after the dump's file is whole but
    // before its report (`run` then says so): the file says the reason.
    let (path, reason, _) = &dumps[0];
    assert!(reason.as_deref().is_none_or(|r| r == "signal"), "{err}");
    let s = json(&["summary".as_ref(), "--json".as_ref(), path.as_os_str()]);
    assert_eq!(s["reason"].as_str(), Some("signal"), "{s}");
    assert_eq!((s["signal"]["number"].as_u64(), s["signal"]["name"].as_str()), (Some(10), Some("SIGUSR1")), "{s}");
    assert_eq!(count_size(&blocks(path), 4242), 5, "the program's blocks");
}

#[test]
fn signal_0_takes_no_signal() {
    let d = Scratch::new("signal-0");
    // The default dump signal reaches the program as if untraced: its
    // default action ends it, and nothing is dumped.
    let (code, dumps, err) = signalled(&d, &["--signal", "0"], None, "USR2");
    assert_eq!(code, Some(140), "{err}");
    assert!(dumps.is_empty() && err.contains("no dump was written"), "{err}");
}

/// The dump signal's handler and the kernel's signal frame lie over the
/// program's dead stack, below its frames. The helper's stop may catch the
/// thread before the handler returns; the dump must still see the program
/// as the signal found it. `stale_under_handler` leaves a dropped block's
/// address all over its dead stack before each of 40 signals: before the
/// fix, about a third of the dumps showed it "still reachable" from the
/// thread's stack (the viewer's test of a list's payload failed one run in
/// thirty on a busy machine). A register of the program may hold the last
/// one (the program's own state, a root as valgrind counts it); the stack
/// never.
#[test]
fn a_signals_dump_never_scans_the_handlers_own_frames() {
    let d = Scratch::new("stale-under-handler");
    let prog = compile(&d, "stale_under_handler.c", &["-O0", "-g"]);
    let (o, dumps) = run_traced(&d.path("s.hdump"), &prog, &["40"], &["--mode", "full", "--no-at-exit"]);
    ok(&o);
    assert_eq!(dumps.len(), 40, "{}", String::from_utf8_lossy(&o.stderr));
    let mut held = Vec::new();
    for dump in &dumps {
        let file = heapdump_analyze::DumpFile::open(dump).unwrap();
        let heap = heapdump_analyze::Heap::load(&file, &mut |_, _| {}).unwrap();
        let a = heapdump_analyze::Analysis::new(&file, &heap);
        let dropped: Vec<u64> = heap.blocks().filter(|b| b.size == 4321).map(|b| b.addr).collect();
        assert!(!dropped.is_empty(), "{}: the dropped blocks are live", dump.display());
        // Only a block not lost can be held (the classes are cheap, the
        // holders are not).
        let kind = &a.leaks().kind;
        let not_lost = dropped.into_iter().filter(|&addr| {
            let b = heap.find_start(addr).unwrap();
            kind[b.index()] != heapdump_analyze::leaks::LeakKind::DefinitelyLost
        });
        for addr in not_lost {
            for h in a.holders(addr, 10).unwrap().1 {
                let from = match &h.from {
                    heapdump_analyze::Origin::Root { name } => name.clone(),
                    other => format!("{other:?}"),
                };
                if !from.starts_with("register ") {
                    held.push(format!("{}: {addr:#x} held by {from} at offset {}", dump.display(), h.offset));
                }
            }
        }
    }
    assert!(held.is_empty(), "dropped blocks held through the runtime's frames:\n{}", held.join("\n"));
}
