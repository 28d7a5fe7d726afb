//! mimalloc's heap (2.0.9, Debian's `libmimalloc2.0`, preloaded) read from
//! outside: `attach` (both modes) and `core` of the suite's leak programs
//! give valgrind's leak classes of the same programs on glibc's malloc,
//! with bytes within mimalloc's size classes; the program goes on and
//! exits 0; a damaged heap (a free list that loops, a segment without its
//! cookie) is refused in one line, nothing written. The same of the Rust
//! `mimalloc` crate's static copy (its `v2` build, mimalloc 2.3.2), and
//! its default build (mimalloc 3.x) refused by name.

use crate::common::*;
use crate::valgrind::{ours, valgrind_summary};
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

/// The static mimalloc program `prog`, reserving arenas of 64 MiB rather
/// than 1 GiB (gcore writes every byte of the reservation: a 1 GiB core).
fn small_arenas(prog: &Path) -> Command {
    let mut c = Command::new(prog);
    c.env("MIMALLOC_ARENA_RESERVE", "64M");
    c
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

/// The Rust `mimalloc` crate's static copy built with its `v2` feature
/// (mimalloc 2.3.2, crates/cli/tests/static_mimalloc, named `service`)
/// leaking as leaks.c does: `attach` (both modes) and `core` give the
/// classes valgrind gives of the same program built on glibc's malloc
/// (its `system` feature: valgrind cannot see a static allocator), bytes
/// within mimalloc's size classes; the dump names the copy; the program
/// goes on and exits 0; `run` says it sees none of it.
#[test]
fn a_static_mimalloc_2_is_read_as_valgrind_reads_the_same_program_on_glibc() {
    let expected = {
        let d = Scratch::new("mimalloc-system");
        valgrind_summary(&rust_fixture(&d, "static_mimalloc", "static-mimalloc", &["system"]))
    };
    let d = Scratch::new("mimalloc-static-2");
    let prog = rust_fixture(&d, "static_mimalloc", "static-mimalloc", &["v2"]);
    let mut p = Stopped::start(small_arenas(&prog));
    for mode in ["compact", "full"] {
        let out = d.path(&format!("a-{mode}.hdump"));
        let line = ok(&heapdump().args(["attach", &p.pid.to_string(), "--mode", mode, "-o"]).arg(&out).output().unwrap());
        assert!(line.contains("of mimalloc 2.3.2 (static)") && line.contains("free blocks in its lists left out"), "{line}");
        same_classes_within(ours(&out), expected, &format!("attach --mode {mode}"), mimalloc_rounding);
        let s = json(&["summary".as_ref(), "--json".as_ref(), out.as_os_str()]);
        assert_eq!(s["allocator"], "mimalloc 2.3.2 (static)");
    }
    let core = gcore(&d, p.pid);
    let out = d.path("c.hdump");
    ok(&heapdump().arg("core").arg(&core).arg("--exe").arg(&prog).arg("-o").arg(&out).output().unwrap());
    let _ = std::fs::remove_file(&core);
    same_classes_within(ours(&out), expected, "gcore then core", mimalloc_rounding);
    assert_eq!(blocks(&d.path("a-compact.hdump")), blocks(&out), "attach and core see the same blocks");
    let _ = Command::new("kill").args(["-CONT", &p.pid.to_string()]).status();
    assert_eq!(p.child.wait().unwrap().code(), Some(0));
    run_names_the_static_copy(&d, &prog);
}

/// The static copy's heap damaged (a free list made a loop, a page
/// claiming more blocks than its segment holds): refused in one line
/// saying where, at once, nothing written.
#[test]
fn a_damaged_static_mimalloc_heap_is_refused_in_one_line() {
    let d = Scratch::new("mimalloc-static-damaged");
    let prog = rust_fixture(&d, "static_mimalloc", "static-mimalloc", &["v2"]);
    for (how, says) in [("loop", "free list loops"), ("capacity", "its capacity does not fit it")] {
        let mut cmd = Command::new(&prog);
        cmd.env("DAMAGE", how);
        let p = Stopped::start(cmd);
        let err = attach_refused(&d, &p, how);
        assert!(err.contains("mimalloc page") && err.contains(says), "{how}: {err}");
        // (Not resumed: its heap is damaged. Dropping it kills it.)
        let _ = Command::new("kill").args(["-KILL", &p.pid.to_string()]).status();
    }
}

/// The crate's default build (mimalloc 3.3.2: arenas, a page map, pages'
/// metadata apart from them): refused in one line naming the copy and its
/// version; the program goes on; `run` says it sees none of it.
#[test]
fn a_static_mimalloc_3_is_refused_by_name_and_version() {
    let d = Scratch::new("mimalloc-static-3");
    let prog = rust_fixture(&d, "static_mimalloc", "static-mimalloc", &[]);
    let mut p = Stopped::start(small_arenas(&prog));
    let refused = |o: std::process::Output, what: &str| {
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{what}: {err}");
        assert_eq!(err.lines().count(), 1, "{what}: {err}");
        assert!(err.contains("service links its own mimalloc (mimalloc 3.3.2)") && err.contains("not 3.x's heap"), "{what}: {err}");
    };
    let out = d.path("a.hdump");
    refused(heapdump().args(["attach", &p.pid.to_string(), "-o"]).arg(&out).output().unwrap(), "attach");
    assert!(!out.exists(), "nothing written");
    let core = gcore(&d, p.pid);
    refused(heapdump().arg("core").arg(&core).arg("--exe").arg(&prog).arg("-o").arg(&out).output().unwrap(), "core");
    let _ = std::fs::remove_file(&core);
    let _ = Command::new("kill").args(["-CONT", &p.pid.to_string()]).status();
    assert!(p.child.wait().unwrap().success());
    run_names_the_static_copy(&d, &prog);
}
