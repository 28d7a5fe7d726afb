//! When the runtime dumps by itself and where it writes: on the dump
//! signal while the program is busy (two dumps, the second numbered), at
//! each threshold step, at the first allocation failure and at exit (each
//! reported with its reason), and dump files that never overwrite, never
//! follow a symlink and are private (mode 0600).
//!
//! No libtest harness (`harness = false`: the reason is in Cargo.toml): `main`
//! lists the tests and runs them one at a time on the main thread; a test
//! missing from that list never runs.
// The test plays the host program: its own calls into the C library.
#![allow(clippy::disallowed_methods)]

mod common;

use common::{Failing, FAIL_SIZE};
use std::alloc::Layout;

#[global_allocator]
static ALLOC: heapdump::Tracked<Failing> = heapdump::Tracked::new(Failing);

fn main() {
    common::run(&[
        ("signal_trigger_under_a_busy_program", signal_trigger_under_a_busy_program),
        ("child_signal", child_signal),
        ("exit_threshold_and_allocation_failure_triggers", exit_threshold_and_allocation_failure_triggers),
        ("child_triggers", child_triggers),
        ("files_are_never_overwritten", files_are_never_overwritten),
    ]);
}

fn signal_trigger_under_a_busy_program() {
    let dir = common::scratch("signal");
    let report = dir.join("report.tsv");
    let exe = std::env::current_exe().unwrap();
    let child = std::process::Command::new(exe)
        .env("HEAPDUMP_TEST_CHILD", "child_signal")
        .env("HEAPDUMP_OUTPUT", dir.join("sig.hdump"))
        .env("HEAPDUMP_REPORT", &report)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    for _ in 0..2 {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGUSR2) };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let before = std::fs::read_to_string(&report).unwrap_or_default().lines().count();
        while std::fs::read_to_string(&report).unwrap_or_default().lines().count() == before {
            assert!(std::time::Instant::now() < deadline, "no dump after SIGUSR2");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    std::fs::write(dir.join("stop"), b"").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines = wrote(&report);
    assert_eq!(lines.len(), 2);
    // First dump at the configured path, the second numbered.
    assert_eq!(lines[0][3], dir.join("sig.hdump").to_str().unwrap());
    assert!(lines[1][3].ends_with(&format!("sig.{}.1.hdump", lines[1][1])), "{:?}", lines[1]);
    for l in &lines {
        let d = common::parse(&std::fs::read(&l[3]).unwrap());
        assert_eq!(d.reason, "signal");
        assert!(d.complete);
        let n: usize = l[4].parse().unwrap();
        assert_eq!(n, d.allocs.len(), "report line matches the file");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// The `wrote` lines of a report file, split at tabs: `wrote PID EXE PATH
/// ALLOCS BYTES FILE_BYTES REASON`; each follows a `started` line.
fn wrote(report: &std::path::Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(report).unwrap();
    let started = text.lines().filter(|l| l.starts_with("started\t")).count();
    let lines: Vec<Vec<String>> =
        text.lines().filter(|l| l.starts_with("wrote\t")).map(|l| l.split('\t').map(String::from).collect()).collect();
    assert_eq!(started, lines.len(), "every dump started is reported: {text}");
    lines
}

fn child_signal() {
    let stop = std::path::PathBuf::from(std::env::var("HEAPDUMP_OUTPUT").unwrap()).with_file_name("stop");
    let c = common::start_churn(2);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !stop.exists() && std::time::Instant::now() < deadline {
        let v: Vec<String> = (0..1000).map(|i| i.to_string()).collect();
        drop(v);
    }
    c.finish();
}

fn exit_threshold_and_allocation_failure_triggers() {
    let dir = common::scratch("triggers");
    let report = dir.join("report.tsv");
    let o = common::child(
        "child_triggers",
        &[
            ("HEAPDUMP_OUTPUT", dir.join("t.hdump").to_str().unwrap()),
            ("HEAPDUMP_REPORT", report.to_str().unwrap()),
            ("HEAPDUMP_THRESHOLD", "8M"),
            ("HEAPDUMP_AT_EXIT", "1"),
            ("HEAPDUMP_MODE", "compact"),
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let lines = wrote(&report);
    let reasons: Vec<String> = lines.iter().map(|l| common::parse(&std::fs::read(&l[3]).unwrap()).reason).collect();
    // 20 MiB in 1 MiB steps crosses 8 and 16 MiB; then the failure; then exit.
    assert_eq!(reasons, ["threshold", "threshold", "alloc_failure", "exit"]);
    let reported: Vec<&str> = lines.iter().map(|l| l[7].as_str()).collect();
    assert_eq!(reported, reasons, "the report names each dump's reason");
    std::fs::remove_dir_all(dir).unwrap();
}

fn child_triggers() {
    let v: Vec<Vec<u8>> = (0..20).map(|_| vec![0u8; 1 << 20]).collect();
    let l = Layout::from_size_align(FAIL_SIZE, 8).unwrap();
    // black_box: an optimised build may otherwise drop an allocation whose
    // result is only compared with null, and assume it succeeded.
    // SAFETY: valid layout; null is expected.
    assert!(std::hint::black_box(unsafe { std::alloc::alloc(l) }).is_null());
    // A second failure does not dump again.
    // SAFETY: a valid, non-zero-size layout.
    assert!(std::hint::black_box(unsafe { std::alloc::alloc(l) }).is_null());
    std::hint::black_box(v);
}

fn files_are_never_overwritten() {
    let dir = common::scratch("excl");
    let p = dir.join("x.hdump");
    std::fs::write(&p, b"precious").unwrap();
    let e = heapdump::dump(&p, heapdump::Mode::Compact).unwrap_err();
    assert_eq!(e, heapdump::DumpError::Os { what: "creating the dump file", errno: libc::EEXIST });
    assert_eq!(std::fs::read(&p).unwrap(), b"precious");
    // A symlink is not followed.
    let l = dir.join("link.hdump");
    std::os::unix::fs::symlink(dir.join("target"), &l).unwrap();
    assert!(heapdump::dump(&l, heapdump::Mode::Compact).is_err());
    assert!(!dir.join("target").exists());
    // Mode 0600.
    let q = dir.join("new.hdump");
    heapdump::dump(&q, heapdump::Mode::Compact).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&q).unwrap().permissions().mode() & 0o777, 0o600);
    // dump_numbered never fails because the file exists (the README's
    // example panicked on its second run): the name, then .<pid>.<n>.
    let pid = std::process::id();
    let (a, _) = heapdump::dump_numbered(&p, heapdump::Mode::Compact).unwrap();
    let (b, _) = heapdump::dump_numbered(&p, heapdump::Mode::Compact).unwrap();
    assert_eq!((a.clone(), b.clone()), (dir.join(format!("x.{pid}.1.hdump")), dir.join(format!("x.{pid}.2.hdump"))));
    assert_eq!(std::fs::read(&p).unwrap(), b"precious");
    let (c, info) = heapdump::dump_numbered(dir.join("fresh.hdump"), heapdump::Mode::Compact).unwrap();
    assert_eq!(c, dir.join("fresh.hdump"));
    for f in [&a, &b, &c] {
        let d = common::parse(&std::fs::read(f).unwrap());
        assert!(d.complete, "{}", f.display());
    }
    assert!(info.allocations > 0);
    std::fs::remove_dir_all(dir).unwrap();
}
