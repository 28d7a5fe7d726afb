//! glibc's heap walked from outside as production processes have it
//! (issue #37): a pre-fork server's worker, whose `[heap]` the kernel
//! splits in two when it grows after the fork; every allocation API in one
//! thread and in several arenas; heaps damaged as a wild write would,
//! refused at the damage in one line (attach and core alike); and real
//! pre-fork servers (nginx, PostgreSQL) attached to their workers.

use crate::common::*;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A process stopped by itself (it says "stopped PID" on stderr: a forked
/// child may say it for its parent); continued and reaped when dropped.
struct Stopped {
    child: Child,
    pid: i32,
}

impl Stopped {
    fn start(mut cmd: Command) -> Stopped {
        let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut pid = 0;
        let mut seen = String::new();
        for _ in 0..200 {
            let mut line = String::new();
            if err.read_line(&mut line).unwrap() == 0 {
                break;
            }
            if let Some(p) = line.trim().strip_prefix("stopped ") {
                pid = p.parse().unwrap();
                break;
            }
            seen.push_str(&line);
        }
        assert!(pid > 0, "the program did not stop: {seen}");
        // Its state is T once the stop is delivered.
        for _ in 0..500 {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if stat.rsplit(')').next().is_some_and(|s| s.trim_start().starts_with('T')) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
        Stopped { child, pid }
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-CONT", &self.pid.to_string()]).status();
        let _ = self.child.wait();
    }
}

/// Runs `heapdump ARGS` with its address space bounded (a walk that does
/// not progress grows without end) and at most a minute to answer: a
/// capture that is still going then is killed, and the test fails saying
/// so rather than hanging.
fn bounded(args: &[&std::ffi::OsStr]) -> Output {
    let mut c = Command::new("sh");
    c.arg("-c").arg("ulimit -v 4000000; exec \"$0\" \"$@\"").arg(env!("CARGO_BIN_EXE_heapdump")).args(args);
    c.env("XDG_CACHE_HOME", Path::new(env!("CARGO_TARGET_TMPDIR")).join("xdg-cache"));
    let mut child = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let begun = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if begun.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!("heapdump {args:?} still walking after a minute: {}", String::from_utf8_lossy(&o.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// `heapdump attach PID -o OUT`.
fn attach(pid: i32, out: &Path) -> Output {
    bounded(&["attach".as_ref(), pid.to_string().as_ref(), "-o".as_ref(), out.as_os_str()])
}

/// gcore's core file of the stopped process `pid`, then `heapdump core`.
fn core(d: &Scratch, pid: i32, out: &Path) -> Output {
    let core = d.path("core");
    let o = Command::new("gcore").arg("-o").arg(&core).arg(pid.to_string()).output().expect("gcore (gdb) is installed");
    ok(&o);
    let core = PathBuf::from(format!("{}.{pid}", core.display()));
    let o = bounded(&["core".as_ref(), core.as_os_str(), "-o".as_ref(), out.as_os_str()]);
    let _ = std::fs::remove_file(&core);
    o
}

/// "ADDRESS USABLE" lines, as the test programs write them.
fn listed(text: &str) -> BTreeMap<u64, u64> {
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(a, s)| (u64::from_str_radix(a.trim_start_matches("0x"), 16).unwrap(), s.trim().parse().unwrap()))
        .collect()
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim().trim_start_matches("0x"), 16).unwrap()
}

/// The `[heap]` mappings of `pid`.
fn heap_maps(pid: i32) -> Vec<(u64, u64)> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap()
        .lines()
        .filter(|l| l.ends_with("[heap]"))
        .map(|l| {
            let (a, b) = l.split_whitespace().next().unwrap().split_once('-').unwrap();
            (hex(a), hex(b))
        })
        .collect()
}

#[test]
fn a_forked_workers_split_heap_is_walked_whole() {
    // 1,000 blocks before the fork, 19,000 after, and the array holding
    // them: the child's [heap] is two mappings, the parent's and the
    // growth after the fork. With the boundary inside a chunk the walk
    // used to stop at a "size 0" there; with a chunk starting at it, the
    // parent's 1,000 blocks were dropped without a word.
    for boundary in ["inside", "chunk"] {
        let d = Scratch::new("split-heap");
        let prog = compile(&d, "split_heap.c", &["-O0", "-g"]);
        let told = d.path("told.txt");
        let mut cmd = Command::new(&prog);
        cmd.arg(&told).env("BOUNDARY", boundary);
        let p = Stopped::start(cmd);
        let text = std::fs::read_to_string(&told).unwrap();
        let parents = hex(text.lines().next().unwrap());
        let maps = heap_maps(p.pid);
        assert!(maps.len() >= 2 && maps[0].1 == maps[1].0, "{boundary}: the worker's heap is not split: {maps:x?}");
        let cut = maps[0].1;
        for (how, out) in [("attach", d.path("a.hdump")), ("core", d.path("c.hdump"))] {
            let o = if how == "attach" { attach(p.pid, &out) } else { core(&d, p.pid, &out) };
            ok(&o);
            let b = blocks(&out);
            assert_eq!(b.len(), 20_001, "{boundary}, {how}: every block of the split heap ({})", String::from_utf8_lossy(&o.stderr));
            // The shape is the one named: a chunk starts at the boundary,
            // or one spans it (a chunk ends 8 bytes before its usable
            // size does: the next chunk's first word is its to use).
            let at = b.iter().any(|&(a, _)| a - 16 == cut);
            let across = b.iter().any(|&(a, s)| a - 16 < cut && cut < a + s - 8);
            assert_eq!((at, across), (boundary == "chunk", boundary == "inside"), "{boundary}, {how}: the boundary {cut:#x}");
            // A block the parent made, before the fork, is found with
            // what holds it.
            let o = heapdump().arg("path").arg(&out).arg(format!("{parents:#x}")).output().unwrap();
            let said = ok(&o);
            assert!(said.contains(&format!("{parents:#x}")), "{boundary}, {how}: {said}");
        }
        assert_eq!(blocks(&d.path("a.hdump")), blocks(&d.path("c.hdump")), "{boundary}: attach and core see the same blocks");
    }
}

#[test]
fn every_allocation_api_is_walked_right() {
    // realloc chains, posix_memalign up to 4096, aligned_alloc, memalign,
    // valloc, pvalloc, calloc, reallocarray, realloc(NULL, n): in one
    // thread (where the main arena used to be found at the wrong place, a
    // field of glibc's parameters read as its `next`), and in four
    // arenas. Every block the program holds is found at its address with
    // its usable size, and nothing else but what glibc allocated for the
    // ended threads (their thread vectors, kept with their stacks).
    for threads in [0usize, 3] {
        let d = Scratch::new("apis");
        let prog = compile(&d, "alloc_apis.c", &["-O0", "-g"]);
        let told = d.path("told.txt");
        let mut cmd = Command::new(&prog);
        cmd.arg(&told).arg(threads.to_string());
        let p = Stopped::start(cmd);
        let want = listed(&std::fs::read_to_string(&told).unwrap());
        assert!(want.len() > 1000, "{}", want.len());
        for (how, out) in [("attach", d.path("a.hdump")), ("core", d.path("c.hdump"))] {
            let o = if how == "attach" { attach(p.pid, &out) } else { core(&d, p.pid, &out) };
            ok(&o);
            let got: BTreeMap<u64, u64> = blocks(&out).into_iter().collect();
            let wrong: Vec<_> = want.iter().filter(|(a, s)| got.get(a) != Some(s)).take(5).collect();
            assert!(wrong.is_empty(), "{threads} threads, {how}: blocks not found with their usable size: {wrong:x?}");
            let extra = got.keys().filter(|a| !want.contains_key(a)).count();
            assert!(extra <= threads, "{threads} threads, {how}: {extra} blocks the program does not hold");
        }
    }
}

#[test]
fn damaged_heaps_are_refused_at_the_damage() {
    // Each damage is refused in one line naming where the heap stops
    // adding up, by attach and by core, without walking on: a size
    // pointing backwards used to loop the walk until it had taken 3 GB.
    // A loop in a bin the walk does not follow leaves it right.
    for how in ["backward", "zero", "past", "tcache-loop", "fastbin-loop", "arena-next", "heap-loop", "bin-loop"] {
        let d = Scratch::new("damaged");
        let prog = compile(&d, "damaged_heap.c", &["-O0", "-g"]);
        let told = d.path("told.txt");
        let mut cmd = Command::new(&prog);
        cmd.arg(&told).arg(how);
        let p = Stopped::start(cmd);
        let text = std::fs::read_to_string(&told).unwrap();
        let (named, rest) = text.split_once('\n').unwrap();
        let named = hex(named);
        for (what, out) in [("attach", d.path("a.hdump")), ("core", d.path("c.hdump"))] {
            let o = if what == "attach" { attach(p.pid, &out) } else { core(&d, p.pid, &out) };
            let err = String::from_utf8_lossy(&o.stderr);
            if how == "bin-loop" {
                ok(&o);
                let got: BTreeMap<u64, u64> = blocks(&out).into_iter().collect();
                assert_eq!(got, listed(rest), "{how}, {what}");
                continue;
            }
            assert_eq!(o.status.code(), Some(1), "{how}, {what}: {err}");
            assert_eq!(err.lines().count(), 1, "{how}, {what}: {err}");
            assert!(err.contains(&format!("{named:#x}")) && err.contains("damaged heap"), "{how}, {what}: {err} does not name {named:#x}");
            assert!(!out.exists(), "{how}, {what}: no dump left behind");
        }
    }
}
