//! mimalloc's heap (2.0.9, Debian's `libmimalloc2.0`, preloaded) read from
//! outside: `attach` (both modes) and `core` of the suite's leak programs
//! give valgrind's leak classes of the same programs on glibc's malloc,
//! with bytes within mimalloc's size classes; the program goes on and
//! exits 0; a damaged heap (a free list that loops, a segment without its
//! cookie) is refused in one line, nothing written. The same of the Rust
//! `mimalloc` crate's static copy: its `v2` build (mimalloc 2.3.2) and its
//! default build (mimalloc 3.3.2).

use crate::common::*;
use crate::valgrind::{ours, valgrind_summary, valgrind_summary_args};
use std::path::Path;
use std::process::Command;

const LIB: &str = "libmimalloc.so.2";

/// mimalloc's rounding above the sizes asked for: a block of up to 8 words
/// is rounded to a word, a larger one to its bin (four bins per doubling:
/// less than a quarter above).
fn mimalloc_rounding(bytes: u64, blocks: u64) -> u64 {
    bytes / 4 + 8 * blocks
}

fn installed() -> bool {
    let ok = Path::new("/usr/lib/x86_64-linux-gnu/libmimalloc.so.2").exists();
    assert!(ok || std::env::var_os("CI").is_none(), "libmimalloc2.0 is not installed (scripts/test.sh installs it)");
    ok
}

#[test]
fn attach_and_core_read_a_preloaded_mimalloc_as_valgrind_reads_glibc() {
    if !installed() {
        return;
    }
    for source in ["leaks.c", "leaks_tree.c", "chain.c", "threads.c"] {
        let d = Scratch::new("mi-vg");
        let prog = stopping_program(&d, "gcc", source, &[], "prog");
        let expected = valgrind_summary(&prog);
        let mut cmd = Command::new(&prog);
        cmd.env("LD_PRELOAD", LIB);
        let mut p = Stopped::start(cmd);
        for mode in ["compact", "full"] {
            let out = d.path(&format!("a-{mode}.hdump"));
            let o = heapdump().args(["attach", &p.pid.to_string(), "--mode", mode, "-o"]).arg(&out).output().unwrap();
            let line = ok(&o);
            assert!(line.contains("of mimalloc 2.0.9") && line.contains("free blocks in its lists left out"), "{line}");
            same_classes_within(ours(&out), expected, &format!("{source}, attach --mode {mode}"), mimalloc_rounding);
            let s = json(&["summary".as_ref(), "--json".as_ref(), out.as_os_str()]);
            assert_eq!(s["allocator"], "mimalloc 2.0.9", "{source}");
        }
        let core = gcore(&d, p.pid);
        let out = d.path("c.hdump");
        ok(&heapdump().arg("core").arg(&core).arg("-o").arg(&out).output().unwrap());
        same_classes_within(ours(&out), expected, &format!("{source}, gcore then core"), mimalloc_rounding);
        assert_eq!(blocks(&d.path("a-compact.hdump")), blocks(&out), "{source}: attach and core see the same blocks");
        let _ = Command::new("kill").args(["-CONT", &p.pid.to_string()]).status();
        let status = p.child.wait().unwrap();
        assert_eq!(status.code(), Some(0), "{source}");
    }
}

#[test]
fn a_damaged_mimalloc_heap_is_refused_in_one_line() {
    if !installed() {
        return;
    }
    let d = Scratch::new("mi-damaged");
    let prog = stopping_program(&d, "gcc", "mimalloc_damage.c", &[], "prog");
    // Undamaged: the 63 small blocks and the huge one (its own segment,
    // whose one span runs past the segment's slices).
    let mut cmd = Command::new(&prog);
    cmd.arg("none").env("LD_PRELOAD", LIB);
    let mut p = Stopped::start(cmd);
    let out = d.path("none.hdump");
    ok(&heapdump().args(["attach", &p.pid.to_string(), "-o"]).arg(&out).output().unwrap());
    let b = blocks(&out);
    assert_eq!(b.iter().filter(|&&(_, s)| s == 48).count(), 63, "{b:?}");
    assert_eq!(b.iter().filter(|&&(_, s)| s >= 40 << 20).count(), 1, "{b:?}");
    let _ = Command::new("kill").args(["-CONT", &p.pid.to_string()]).status();
    assert_eq!(p.child.wait().unwrap().code(), Some(0));
    for (how, says) in [("loop", "free list loops"), ("cookie", "does not carry its cookie")] {
        let mut cmd = Command::new(&prog);
        cmd.arg(how).env("LD_PRELOAD", LIB);
        let p = Stopped::start(cmd);
        let err = attach_refused(&d, &p, how);
        assert!(err.contains("mimalloc") && err.contains(says), "{how}: {err}");
        // (Not resumed: its heap is damaged. Dropping it kills it.)
        let _ = Command::new("kill").args(["-KILL", &p.pid.to_string()]).status();
    }
}

#[test]
fn attach_reads_a_mimalloc_heap_that_threads_are_changing() {
    // churn.c's four threads allocate and free without pause: a thread
    // stopped inside mimalloc's code may have a page half updated, so
    // attach lets the process run and stops it again until none is. Every
    // capture is read (never refused as damaged), with about churn.c's
    // 4000 ring blocks, and the program goes on undamaged.
    if !installed() {
        return;
    }
    use std::io::{BufRead, BufReader};
    use std::process::{Child, Stdio};
    let d = Scratch::new("mi-churn");
    let prog = compile(&d, "churn.c", &["-O2", "-lpthread"]);
    struct Running(Child);
    impl Drop for Running {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Running(Command::new(&prog).env("LD_PRELOAD", LIB).stdout(Stdio::piped()).spawn().unwrap());
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let pid: i32 = line.trim().strip_prefix("ready ").unwrap().parse().unwrap();
    for i in 0..6 {
        let out = d.path(&format!("c{i}.hdump"));
        let report = ok(&heapdump().args(["attach", &pid.to_string(), "-o"]).arg(&out).output().unwrap());
        assert!(report.contains("of mimalloc 2.0.9"), "capture {i}: {report}");
        let n = blocks(&out).len();
        assert!((3996..=4010).contains(&n), "capture {i}: {n} blocks: {report}");
    }
    Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap();
    assert_eq!(child.0.wait().unwrap().code(), Some(0), "the program's blocks are intact and it ended as asked");
}

/// The static mimalloc program `prog` with `args` and `env`, reserving arenas of
/// 64 MiB rather than 1 GiB (gcore writes every byte of the reservation:
/// a 1 GiB core), stopped at its end; with how many blocks mimalloc itself
/// counted in use then (the line it says before it stops).
fn start_counting(prog: &Path, args: &[&str], env: &[(&str, &str)]) -> (Stopped, Option<usize>) {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(prog)
        .args(args)
        .env("MIMALLOC_ARENA_RESERVE", "64M")
        .env("STOP_AT_END", "1")
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let (mut count, mut pid, mut seen) = (None, 0, String::new());
    for _ in 0..20 {
        let mut line = String::new();
        if err.read_line(&mut line).unwrap() == 0 {
            break;
        }
        if let Some(n) = line.trim().strip_prefix("mimalloc counts ") {
            count = n.parse().ok();
        }
        if let Some(p) = line.trim().strip_prefix("stopped ") {
            pid = p.parse().unwrap();
            break;
        }
        seen += &line;
    }
    assert!(pid > 0, "the program did not stop: {seen}");
    wait_stopped(pid);
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    (Stopped { child, pid }, count)
}

/// `heapdump run` of the static mimalloc program `prog`: run says its
/// allocations never reach malloc (before, it showed a nearly empty heap
/// as the program's), and the program ends well.
fn run_names_the_static_copy(d: &Scratch, prog: &Path) {
    ensure_preload();
    let mut r = heapdump()
        .arg("run")
        .arg("-o")
        .arg(d.path("r.hdump"))
        .arg("--")
        .arg(prog)
        .env("STOP_AT_END", "1")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = String::new();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(r.stderr.take().unwrap()));
    for line in lines.by_ref() {
        let line = line.unwrap();
        err += &line;
        err.push('\n');
        if let Some(pid) = line.strip_prefix("stopped ") {
            // Continued once stopped: a SIGCONT before the stop is lost.
            wait_stopped(pid.trim().parse().unwrap());
            let _ = Command::new("kill").args(["-CONT", pid.trim()]).status();
            break;
        }
    }
    err.extend(lines.map(|l| l.unwrap() + "\n"));
    assert!(r.wait().unwrap().success(), "{err}");
    assert!(err.contains("allocates through its own mimalloc: what is shown is only what went through malloc"), "{err}");
}

/// The Rust `mimalloc` crate's static copy (crates/cli/tests/static_mimalloc,
/// named `service`), built with `features`, leaking as leaks.c does:
/// `attach` (both modes) and `core` give the classes valgrind gives of the
/// same program built on glibc's malloc (its `system` feature: valgrind
/// cannot see a static allocator), bytes within mimalloc's size classes,
/// and as many blocks as mimalloc itself counts in use; the dump names the
/// copy (`allocator`); the program goes on and exits 0; the same of it
/// stripped (found by shape), and with threads; `run` says it sees none
/// of it.
fn static_copy_reads_as_valgrind(features: &[&str], allocator: &str, unit: &str) {
    let sd = Scratch::new("mimalloc-system");
    let system = rust_fixture(&sd, "static_mimalloc", "static-mimalloc", &["system"]);
    let expected = valgrind_summary(&system);
    let d = Scratch::new("mimalloc-static");
    let prog = rust_fixture(&d, "static_mimalloc", "static-mimalloc", features);
    let (mut p, count) = start_counting(&prog, &[], &[]);
    let count = count.expect("the program says how many blocks mimalloc counts");
    for mode in ["compact", "full"] {
        let out = d.path(&format!("a-{mode}.hdump"));
        let line = ok(&heapdump().args(["attach", &p.pid.to_string(), "--mode", mode, "-o"]).arg(&out).output().unwrap());
        assert!(line.contains(&format!("{unit} of {allocator},")) && line.contains("free blocks in its lists left out"), "{line}");
        same_classes_within(ours(&out), expected, &format!("{allocator}: attach --mode {mode}"), mimalloc_rounding);
        let s = json(&["summary".as_ref(), "--json".as_ref(), out.as_os_str()]);
        assert_eq!(s["allocator"], allocator, "no glibc block beside it");
        assert_eq!(blocks(&out).len(), count, "{allocator}: the blocks mimalloc counts in use");
    }
    let core = gcore(&d, p.pid);
    let out = d.path("c.hdump");
    ok(&heapdump().arg("core").arg(&core).arg("--exe").arg(&prog).arg("-o").arg(&out).output().unwrap());
    let _ = std::fs::remove_file(&core);
    same_classes_within(ours(&out), expected, &format!("{allocator}: gcore then core"), mimalloc_rounding);
    assert_eq!(blocks(&d.path("a-compact.hdump")), blocks(&out), "{allocator}: attach and core see the same blocks");
    let _ = Command::new("kill").args(["-CONT", &p.pid.to_string()]).status();
    assert_eq!(p.child.wait().unwrap().code(), Some(0), "{allocator}");
    // Stripped (no symbol table): its structures found by their shapes.
    let stripped = d.path("stripped");
    std::fs::copy(&prog, &stripped).unwrap();
    ok(&Command::new("strip").arg(&stripped).output().expect("strip (binutils) is installed"));
    let (p, _) = start_counting(&stripped, &[], &[]);
    let out = d.path("s.hdump");
    ok(&heapdump().args(["attach", &p.pid.to_string(), "-o"]).arg(&out).output().unwrap());
    same_classes_within(ours(&out), expected, &format!("{allocator}: attach, stripped"), mimalloc_rounding);
    assert_eq!(json(&["summary".as_ref(), "--json".as_ref(), out.as_os_str()])["allocator"], allocator, "stripped");
    drop(p);
    // With threads that keep, lose and free the main thread's blocks and
    // end (their pages abandoned): valgrind's classes still, beside glibc's
    // blocks (the threads' own, which glibc allocates).
    let expected = valgrind_summary_args(&system, &["threads"]);
    let (p, _) = start_counting(&prog, &["threads"], &[]);
    let out = d.path("t.hdump");
    ok(&heapdump().args(["attach", &p.pid.to_string(), "-o"]).arg(&out).output().unwrap());
    same_classes_within(ours(&out), expected, &format!("{allocator}: attach, threads"), mimalloc_rounding);
    let core = gcore(&d, p.pid);
    let out = d.path("tc.hdump");
    ok(&heapdump().arg("core").arg(&core).arg("--exe").arg(&prog).arg("-o").arg(&out).output().unwrap());
    let _ = std::fs::remove_file(&core);
    same_classes_within(ours(&out), expected, &format!("{allocator}: core, threads"), mimalloc_rounding);
    assert!(ok(&heapdump().arg("summary").arg(&out).output().unwrap()).contains(&format!("{allocator} and glibc")));
    drop(p);
    run_names_the_static_copy(&d, &prog);
}

/// Its `v2` build: mimalloc 2.3.2, segments as 2.0's with other offsets.
#[test]
fn a_static_mimalloc_2_is_read_as_valgrind_reads_the_same_program_on_glibc() {
    static_copy_reads_as_valgrind(&["v2"], "mimalloc 2.3.2 (static)", "1 segments");
}

/// Its default build: mimalloc 3.3.2, pages of arenas found through its
/// page map.
#[test]
fn a_static_mimalloc_3_is_read_as_valgrind_reads_the_same_program_on_glibc() {
    static_copy_reads_as_valgrind(&[], "mimalloc 3.3.2 (static)", "pages");
}

/// The static copy's heap damaged, in both builds (a free list made a
/// loop, a page claiming more blocks than its memory holds): refused in
/// one line saying where, at once, nothing written.
#[test]
fn a_damaged_static_mimalloc_heap_is_refused_in_one_line() {
    for features in [&["v2"][..], &[]] {
        let d = Scratch::new("mimalloc-static-damaged");
        let prog = rust_fixture(&d, "static_mimalloc", "static-mimalloc", features);
        for (how, says) in [("loop", "free list loops"), ("capacity", "its capacity does not fit")] {
            let (p, _) = start_counting(&prog, &[], &[("DAMAGE", how)]);
            let err = attach_refused(&d, &p, how);
            assert!(err.contains("mimalloc page") && err.contains(says), "{features:?} {how}: {err}");
            // (Not resumed: its heap is damaged. Dropping it kills it.)
            let _ = Command::new("kill").args(["-KILL", &p.pid.to_string()]).status();
        }
    }
}
