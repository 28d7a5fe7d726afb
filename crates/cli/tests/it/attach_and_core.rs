//! Captures from outside (`heapdump attach`, `heapdump core`): programs
//! that know nothing of heapdump, stopped at their end (a destructor, after
//! main returned, as valgrind sees them when it checks), read through
//! ptrace or through gcore's core file. Leak classes against valgrind's on
//! the same program; block addresses against `heapdump run`'s dump of the
//! same moment; freed chunks in glibc's caches never counted live.

use crate::common::*;
use crate::valgrind::{ours, valgrind_summary};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A test program with `stop_at_end.c` linked in.
fn program(d: &Scratch, source: &str) -> PathBuf {
    let stop = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/stop_at_end.c");
    compile(d, source, &["-O0", "-g", stop.to_str().unwrap()])
}

/// `heapdump attach PID -o OUT --mode MODE`; its report line.
fn attach(pid: i32, out: &Path, mode: &str) -> String {
    let o = heapdump().args(["attach", &pid.to_string(), "--mode", mode, "-o"]).arg(out).output().unwrap();
    ok(&o)
}

/// glibc's usable size for a request (x86-64).
fn usable(req: u64) -> u64 {
    (req + 8 + 15).max(32) / 16 * 16 - 8
}

#[test]
fn attach_and_core_give_valgrinds_leak_classes() {
    for source in ["leaks.c", "leaks_tree.c", "chain.c", "threads.c", "arenas.c"] {
        let d = Scratch::new("outside-vg");
        let prog = program(&d, source);
        let expected = valgrind_summary(&prog);
        let p = Stopped::start(Command::new(&prog));
        for mode in ["compact", "full"] {
            let out = d.path(&format!("a-{mode}.hdump"));
            let line = attach(p.pid, &out, mode);
            assert!(line.contains("held"), "{line}");
            same_classes(ours(&out), expected, &format!("{source}, attach --mode {mode}"));
            let s = json(&["summary".as_ref(), "--json".as_ref(), out.as_os_str()]);
            assert_eq!((s["reason"].as_str(), s["outside"].as_bool()), (Some("attach"), Some(true)));
        }
        // gcore's core file of the same stopped process: the same blocks.
        let core = d.path("core");
        let o = Command::new("gcore").arg("-o").arg(&core).arg(p.pid.to_string()).output().expect("gcore (gdb) is installed");
        ok(&o);
        let core = PathBuf::from(format!("{}.{}", core.display(), p.pid));
        let out = d.path("c.hdump");
        let o = heapdump().arg("core").arg(&core).arg("-o").arg(&out).output().unwrap();
        ok(&o);
        same_classes(ours(&out), expected, &format!("{source}, gcore then core"));
        let attached: BTreeSet<(u64, u64)> = blocks(&d.path("a-compact.hdump")).into_iter().collect();
        let cored: BTreeSet<(u64, u64)> = blocks(&out).into_iter().collect();
        assert_eq!(attached, cored, "{source}: attach and core see the same blocks");
        let s = json(&["summary".as_ref(), "--json".as_ref(), out.as_os_str()]);
        assert_eq!(s["reason"], "core");
        // The same core cut short: refused in one line that says so first
        // (cut before glibc's data, it blamed the allocator: "not glibc's
        // malloc"), nothing written.
        let bytes = std::fs::read(&core).unwrap();
        let cut = d.path("cut.core");
        for len in [bytes.len() / 2, 200_000] {
            std::fs::write(&cut, &bytes[..len]).unwrap();
            let o = heapdump().arg("core").arg(&cut).arg("-o").arg(d.path("cut.hdump")).output().unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(1), "{err}");
            assert!(err.contains(&format!("cut short ({len} of")) && err.lines().count() == 1, "{source}, cut at {len}: {err}");
            assert!(!d.path("cut.hdump").exists());
        }
    }
}

#[test]
fn attach_sees_the_blocks_heapdump_run_tracks() {
    // The same moment of the same process: the runtime's dump, then the
    // walk of glibc's heap from outside. Every block the runtime tracks is
    // a live chunk of the same address, its size rounded up to the usable
    // size; single-threaded and with four threads in arenas of their own.
    for source in ["leaks.c", "arenas.c"] {
        let d = Scratch::new("outside-run");
        let prog = program(&d, source);
        ensure_preload();
        let first = d.path("run.hdump");
        let mut cmd = heapdump();
        cmd.args(["run", "--no-at-exit", "--mode", "compact", "-o"]).arg(&first).arg("--").arg(&prog).env("DUMP_FIRST", &first);
        let p = Stopped::start(cmd);
        let out = d.path("attach.hdump");
        let line = attach(p.pid, &out, "compact");
        let tracked = blocks(&first);
        assert!(!tracked.is_empty());
        // Sizes: the usable size of the request, or up to 16 bytes more
        // when glibc gave the whole of a chunk whose rest would have been
        // too small to split off.
        let walked_sizes: std::collections::BTreeMap<u64, u64> = blocks(&out).into_iter().collect();
        let walked: BTreeSet<u64> = walked_sizes.keys().copied().collect();
        let want: BTreeSet<u64> = tracked.iter().map(|&(a, _)| a).collect();
        let missing: Vec<_> = want.difference(&walked).collect();
        assert!(missing.is_empty(), "{source}: tracked blocks the walk did not find: {missing:x?} ({line})");
        for &(a, s) in &tracked {
            let got = walked_sizes[&a];
            assert!(got >= usable(s) && got <= usable(s) + 16, "{source}: {a:#x} asked {s} bytes, the walk says {got} usable");
        }
        // The walk also sees what the runtime's own thread holds: its
        // thread vector (DTV), which pthread_create allocated for it
        // while the tracker was busy starting it (valgrind, with no
        // runtime, has no such thread). Nothing else.
        let extra: Vec<_> = walked.difference(&want).collect();
        assert!(extra.len() <= 1, "{source}: blocks the runtime did not track: {extra:x?}");
        for &&a in &extra {
            let holders = json(&["path".as_ref(), out.as_os_str(), format!("{a:#x}").as_ref(), "--all".as_ref(), "--json".as_ref()]);
            let from: Vec<&str> = holders.as_array().unwrap().iter().map(|h| h["from"].as_str().unwrap()).collect();
            assert!(!from.is_empty() && from.iter().all(|f| f.contains("(heapdump)")), "{source}: {a:#x} is held by {from:?}");
        }
        if source == "arenas.c" {
            assert!(line.contains(" 5 arenas"), "four threads, each in an arena of its own: {line}");
        }
    }
}

#[test]
fn freed_chunks_in_the_caches_and_fastbins_are_not_live() {
    let d = Scratch::new("outside-freed");
    let prog = program(&d, "freed.c");
    let list = d.path("freed.txt");
    let p = Stopped::start({
        let mut c = Command::new(&prog);
        c.arg(&list);
        c
    });
    let out = d.path("f.hdump");
    let line = attach(p.pid, &out, "full");
    let freed: BTreeSet<u64> =
        std::fs::read_to_string(&list).unwrap().lines().map(|l| u64::from_str_radix(l.trim_start_matches("0x"), 16).unwrap()).collect();
    assert_eq!(freed.len(), 71);
    let b = blocks(&out);
    assert!(b.iter().all(|(a, _)| !freed.contains(a)), "a freed block counted live: {line}");
    assert_eq!((count_size(&b, usable(40)), count_size(&b, usable(200)), count_size(&b, usable(24))), (30, 5, 1), "{b:?}");
    assert_eq!(b.len(), 36, "{b:?}");
    // 70 small blocks and the FILE freed into the caches and fastbins.
    let cached: u64 = line.split(" freed chunks").next().unwrap().rsplit(' ').next().unwrap().parse().unwrap();
    assert!(cached >= 70, "{line}");
}

#[test]
fn what_cannot_be_attached_is_refused_in_one_line() {
    let d = Scratch::new("outside-refused");
    // No such process.
    let o = heapdump().args(["attach", "999999999", "-o"]).arg(d.path("x.hdump")).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no process 999999999") && err.lines().count() == 1, "{err}");
    // A static glibc program that never asks glibc its version (no banner)
    // is read, its version inferred from its strings, which it says.
    let src = d.path("s.c");
    std::fs::write(&src, "#include <stdlib.h>\n#include <signal.h>\nint main(void){ malloc(10); raise(SIGSTOP); return 0; }\n").unwrap();
    let bin = d.path("s");
    let o = Command::new("gcc").arg("-static").arg("-o").arg(&bin).arg(&src).output().unwrap();
    if o.status.success() {
        let mut child = Command::new(&bin).spawn().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        let o = heapdump().args(["attach", &child.id().to_string(), "-o"]).arg(d.path("s.hdump")).output().unwrap();
        let _ = Command::new("kill").args(["-CONT", &child.id().to_string()]).status();
        let _ = child.wait();
        let line = ok(&o);
        assert!(line.contains(" arenas of glibc 2."), "{line}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("glibc's version inferred from its strings: 2.") && err.lines().count() == 1, "{err}");
    }
    // A process a debugger holds.
    let prog = program(&d, "leaks.c");
    let p = Stopped::start(Command::new(&prog));
    let mut gdb = Command::new("gdb")
        .args(["-p", &p.pid.to_string(), "-batch", "-ex", "shell sleep 20"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("gdb is installed");
    let traced = (0..500).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::read_to_string(format!("/proc/{}/status", p.pid))
            .is_ok_and(|s| s.lines().any(|l| l.starts_with("TracerPid:") && l.trim_end() != "TracerPid:\t0"))
    });
    assert!(traced, "gdb did not attach");
    let o = heapdump().args(["attach", &p.pid.to_string(), "-o"]).arg(d.path("t.hdump")).output().unwrap();
    let _ = gdb.kill();
    let _ = gdb.wait();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("already traced by process") && err.lines().count() == 1, "{err}");
    assert!(!d.path("t.hdump").exists(), "no dump left behind");
    drop(p);
    // Not a core file.
    let o = heapdump().arg("core").arg(&src).arg("-o").arg(d.path("c.hdump")).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("not an x86-64 ELF core file") && err.lines().count() == 1, "{err}");
    assert!(!d.path("c.hdump").exists(), "no dump left behind");
}

#[test]
fn cxx_objects_are_named_by_their_vtables_without_sites() {
    // A capture from outside has no sites: a polymorphic object's first
    // word, its vtable pointer, names its class; so it does for a plain
    // `new` under `heapdump run`, whose site names no type.
    let d = Scratch::new("outside-vptr");
    let prog = program(&d, "shapes.cpp");
    let types = |dump: &Path| {
        let rows = json(&["top".as_ref(), dump.as_os_str(), "--by".as_ref(), "type".as_ref(), "--json".as_ref()]);
        let get = |k: &str| rows.as_array().unwrap().iter().find(|r| r["key"] == k).map(|r| r["allocations"].as_u64().unwrap());
        (get("Circle"), get("Square"))
    };
    let p = Stopped::start(Command::new(&prog));
    for mode in ["compact", "full"] {
        let out = d.path(&format!("s-{mode}.hdump"));
        attach(p.pid, &out, mode);
        assert_eq!(types(&out), (Some(201), Some(100)), "attach --mode {mode}");
    }
    drop(p);
    let (o, dumps) = run_traced(&d.path("run.hdump"), &prog, &[], &[]);
    ok(&o);
    assert_eq!(types(&dumps[0]), (Some(201), Some(100)), "heapdump run");
}

#[test]
fn attach_to_a_program_allocating_in_four_threads() {
    // Threads stopped inside malloc would leave an arena half updated: the
    // capture lets the program run a moment and stops it again until no
    // arena is locked. Every capture has the same blocks' count, and the
    // program goes on undamaged.
    let d = Scratch::new("outside-churn");
    let prog = compile(&d, "churn.c", &["-O2"]);
    struct Running(Child);
    impl Drop for Running {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Running(Command::new(&prog).stdout(Stdio::piped()).spawn().unwrap());
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let pid: i32 = line.trim().strip_prefix("ready ").unwrap().parse().unwrap();
    for i in 0..6 {
        let out = d.path(&format!("c{i}.hdump"));
        let o = heapdump().args(["attach", &pid.to_string(), "-o"]).arg(&out).output().unwrap();
        let report = ok(&o);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("locked"), "capture {i}: {err}");
        // 4000 ring blocks, stdout's buffer, the four threads' DTVs, less
        // a ring block per thread stopped between a free and its malloc.
        let n = blocks(&out).len();
        assert!((4001..=4005).contains(&n) && report.contains(&format!(": {n} allocations,")), "capture {i}: {report}");
        // Each thread's ring is on its stack, stdout's buffer in libc's
        // data: reachable. Each DTV is held by its thread's descriptor
        // through a pointer to its second entry: possibly lost, as
        // valgrind reports a running thread's DTV.
        let leaks = crate::valgrind::ours(&out);
        assert_eq!((leaks[0].1, leaks[1].1, leaks[2].1, leaks[3].1), (0, 0, 4, n as u64 - 4), "capture {i}: {leaks:?}");
    }
    Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap();
    assert_eq!(child.0.wait().unwrap().code(), Some(0), "the program's blocks are intact and it ended as asked");
}

#[test]
fn signals_that_arrive_while_the_program_is_held_are_given_back() {
    // Real-time signals queue (none is merged): every one sent while
    // captures hold the program must reach it. A signal that stops a held
    // thread is reported to the tracer, and lost unless given back.
    let d = Scratch::new("outside-signals");
    let prog = compile(&d, "signals_while_held.c", &["-O0"]);
    let sender = d.path("sender.c");
    std::fs::write(
        &sender,
        "#include <errno.h>\n#include <signal.h>\n#include <stdlib.h>\n#include <unistd.h>\n\
         int main(int c, char **v) { union sigval x = {0}; int pid = atoi(v[1]), n = atoi(v[2]);\n\
         for (int i = 0; i < n; i++) { while (sigqueue(pid, SIGRTMIN, x)) { if (errno != EAGAIN) return 1; usleep(100); } usleep(50); }\n\
         return 0; }\n",
    )
    .unwrap();
    let sender_bin = d.path("sender");
    ok(&Command::new("gcc").arg("-o").arg(&sender_bin).arg(&sender).output().unwrap());
    let mut child = Command::new(&prog).stdout(Stdio::piped()).spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let pid: i32 = line.trim().strip_prefix("ready ").unwrap().parse().unwrap();
    let mut send = Command::new(&sender_bin).args([pid.to_string(), "20000".to_string()]).spawn().unwrap();
    let mut held = 0;
    while send.try_wait().unwrap().is_none() {
        let o = heapdump().args(["attach", &pid.to_string(), "-o"]).arg(d.path(&format!("s{held}.hdump"))).output().unwrap();
        ok(&o);
        held += 1;
    }
    assert!(send.wait().unwrap().success());
    assert!(held >= 3, "the captures overlapped the signals: {held}");
    std::thread::sleep(std::time::Duration::from_millis(200));
    Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap();
    let mut got = String::new();
    out.read_line(&mut got).unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(got.trim(), "got 20000", "{held} captures held the program while it was sent 20000 signals");
}

#[test]
fn mapped_blocks_written_only_at_their_start_are_found() {
    // glibc's header is on the block's first page; its other pages were
    // never touched. The walk looks for headers on touched pages only, but
    // a block reaches to its own end.
    let d = Scratch::new("outside-untouched");
    let prog = program(&d, "untouched.c");
    let p = Stopped::start(Command::new(&prog));
    let out = d.path("u.hdump");
    attach(p.pid, &out, "compact");
    let sizes: BTreeSet<u64> = blocks(&out).into_iter().map(|(_, s)| s).collect();
    // A mapped chunk is the request and its header rounded up to pages,
    // less the header.
    for req in [1u64 << 20, 4 << 20] {
        let usable = (req + 16).next_multiple_of(4096) - 16;
        assert!(sizes.contains(&usable), "no block of {usable} bytes for malloc({req}): {sizes:?}");
    }
}

#[test]
fn a_thread_that_cannot_stop_is_not_waited_for() {
    // A thread in vfork() cannot stop until its child ends: attach gives
    // up on it within its deadline, in one line naming the thread and
    // what it is doing, lets the rest of the process go (before, the
    // threads already stopped were held until the call returned, however
    // long: a hung NFS read holds them for good), and once the call has
    // returned the process is attached as always.
    let d = Scratch::new("vfork-thread");
    let prog = compile(&d, "vfork_thread.c", &["-O0", "-g"]);
    let mut child = Command::new(&prog).arg("4").stdout(Stdio::piped()).spawn().unwrap();
    let pid = child.id() as i32;
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let vfork_child: i32 = line.trim().strip_prefix("child ").unwrap_or_else(|| panic!("{line}")).parse().unwrap();
    let out = d.path("a.hdump");
    let o = heapdump().args(["attach", &pid.to_string(), "-o"]).arg(&out).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    let running = Path::new(&format!("/proc/{vfork_child}")).exists();
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("did not stop within") && err.contains("uninterruptible"), "{err}");
    assert!(running, "attach waited for the vfork child {vfork_child} to end: {err}");
    assert!(!out.exists());
    // Once the call returned: attached, the program still running.
    for _ in 0..1000 {
        if !Path::new(&format!("/proc/{vfork_child}")).exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
    let line = attach(pid, &out, "compact");
    assert!(line.contains("2 threads"), "{line}");
    assert!(child.try_wait().unwrap().is_none(), "the program ended");
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_process_whose_main_thread_has_ended_is_attached() {
    // The main thread called pthread_exit and another runs on (a daemon
    // that hands main over to its workers): attach said "no process", by
    // the thread's id "Operation not permitted". Read through the live
    // thread's /proc files, every block is found.
    let d = Scratch::new("zombie-leader");
    let prog = compile(&d, "main_thread_exits.c", &["-O0", "-g"]);
    let p = Stopped::start_in(Command::new(&prog), |_, pid| pid);
    let out = d.path("z.hdump");
    let line = attach(p.pid, &out, "compact");
    assert!(line.contains(", 1 threads"), "{line}");
    let b = blocks(&out);
    assert!(count_size(&b, usable(100)) >= 100, "{line}: {} blocks of 100 bytes", count_size(&b, usable(100)));
    let s = json(&["summary".as_ref(), "--json".as_ref(), out.as_os_str()]);
    assert!(s["exe"].as_str().is_some_and(|e| e.ends_with("main_thread_exits")), "{s}");
}
