//! mimalloc's heap (2.0.9, Debian's `libmimalloc2.0`, preloaded) read from
//! outside: `attach` (both modes) and `core` of the suite's leak programs
//! give valgrind's leak classes of the same programs on glibc's malloc,
//! with bytes within mimalloc's size classes; the program goes on and
//! exits 0; a damaged heap (a free list that loops, a segment without its
//! cookie) is refused in one line, nothing written.

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

#[test]
fn a_static_mimalloc_of_another_layout_is_refused_by_name_and_version() {
    let d = Scratch::new("mimalloc-static");
    for (v2, generation) in [(false, "mimalloc 3.x"), (true, "mimalloc 2.x")] {
        // The Rust `mimalloc` crate's program, built with its default
        // mimalloc (3.x) or its `v2` feature, named `service` (a name that
        // says nothing of its allocator).
        let prog = rust_fixture(&d, "static_mimalloc", "static-mimalloc", if v2 { &["v2"] } else { &[] });
        let mut p = Stopped::start(Command::new(&prog));
        let refused = |o: std::process::Output, what: &str| {
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(1), "{what}: {err}");
            assert_eq!(err.lines().count(), 1, "{what}: {err}");
            assert!(err.contains("service links its own mimalloc (") && err.contains(generation), "{what}: {err}");
            assert!(err.contains("attach and core read only Debian's libmimalloc2.0"), "{what}: {err}");
        };
        let out = d.path("a.hdump");
        refused(heapdump().args(["attach", &p.pid.to_string(), "-o"]).arg(&out).output().unwrap(), "attach");
        assert!(!out.exists(), "nothing written");
        let core = gcore(&d, p.pid);
        refused(heapdump().arg("core").arg(&core).arg("--exe").arg(&prog).arg("-o").arg(&out).output().unwrap(), "core");
        let _ = std::fs::remove_file(&core);
        // The program goes on and ends well.
        let _ = Command::new("kill").args(["-CONT", &p.pid.to_string()]).status();
        assert!(p.child.wait().unwrap().success());
        // Under run its allocations never reach malloc: run says so
        // (before, it showed a nearly empty heap as the program's).
        ensure_preload();
        let mut r = heapdump()
            .arg("run")
            .arg("-o")
            .arg(d.path("r.hdump"))
            .arg("--")
            .arg(&prog)
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
}
