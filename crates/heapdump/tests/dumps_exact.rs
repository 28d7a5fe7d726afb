//! What a dump holds, exactly: the live blocks while threads churn (also
//! written by a forked writer, after a collapse), roots found in a blocked
//! stack and a static, full and compact dumps of one moment agreeing, the
//! compact pointers of a dense heap; and how it is taken: no allocation
//! while dumping, a clean failure on a full disk with the program going
//! on. (When the runtime dumps by itself: dump_triggers_and_files.rs.)
//!
//! No libtest harness (`harness = false`: the reason is in Cargo.toml): `main`
//! lists the tests and runs them one at a time on the main thread; a test
//! missing from that list never runs.
// The test plays the host program: its own calls into the C library.
#![allow(clippy::disallowed_methods)]

mod common;

use common::{start_churn, Churn};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

/// System, but aborts on any call while FORBID is set.
struct Guarded;
static FORBID: AtomicBool = AtomicBool::new(false);

fn forbidden() -> ! {
    let msg = b"allocation during a dump\n";
    // SAFETY: one write to stderr, then abort.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::abort()
    }
}

// SAFETY: forwards to System.
unsafe impl GlobalAlloc for Guarded {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if FORBID.load(Ordering::Relaxed) {
            forbidden();
        }
        // SAFETY: the caller's arguments, under GlobalAlloc's contract, to the
        // system allocator that made the block.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        if FORBID.load(Ordering::Relaxed) {
            forbidden();
        }
        // SAFETY: the caller's arguments, under GlobalAlloc's contract, to the
        // system allocator that made the block.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if FORBID.load(Ordering::Relaxed) {
            forbidden();
        }
        // SAFETY: the caller's arguments, under GlobalAlloc's contract, to the
        // system allocator that made the block.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static ALLOC: heapdump::Tracked<Guarded> = heapdump::Tracked::new(Guarded);

fn main() {
    common::run(&[
        ("dumps_while_threads_churn_hold_exactly_the_live_blocks", dumps_while_threads_churn_hold_exactly_the_live_blocks),
        ("fork_mode_dump_while_threads_churn", fork_mode_dump_while_threads_churn),
        ("child_fork_mode", child_fork_mode),
        ("collapse_mode_dump_while_threads_churn", collapse_mode_dump_while_threads_churn),
        ("child_collapse_mode", child_collapse_mode),
        ("roots_in_a_blocked_stack_and_a_static", roots_in_a_blocked_stack_and_a_static),
        ("no_allocation_while_dumping", no_allocation_while_dumping),
        ("child_no_alloc", child_no_alloc),
        ("the_no_allocation_check_can_fail", the_no_allocation_check_can_fail),
        ("full_disk_fails_cleanly_and_the_program_goes_on", full_disk_fails_cleanly_and_the_program_goes_on),
        ("full_and_compact_agree", full_and_compact_agree),
        ("compact_pointers_of_a_dense_heap_are_exact", compact_pointers_of_a_dense_heap_are_exact),
    ]);
}

/// Checks a full dump against the churn threads' own slot tables, as they
/// were when the world stopped (their contents are in the dump): every
/// block a table lists is in the dump with its size, and each thread has at
/// most one block in the dump that its table does not list (the one it was
/// between allocating and recording, or between clearing and freeing).
fn check_against_slots(d: &common::Parsed, tables: &[(u64, usize)]) {
    let mut listed = std::collections::BTreeSet::new();
    for &(addr, n) in tables {
        let bytes = d.contents.get(&addr).expect("slot table in the dump");
        assert_eq!(bytes.len(), n * 8);
        for w in bytes.chunks_exact(8) {
            let v = u64::from_le_bytes(w.try_into().unwrap());
            if v != 0 {
                let a = v & 0xffff_ffff_ffff;
                let size = 3000 + (v >> 48);
                assert_eq!(d.allocs.get(&a).map(|x| x.0), Some(size), "listed block {a:#x} missing from the dump");
                listed.insert(a);
            }
        }
    }
    let churn_blocks = d.allocs.iter().filter(|(_, (s, _))| (3000..4000).contains(s)).count();
    let extra = churn_blocks - listed.len();
    assert!(extra <= tables.len(), "{extra} unlisted churn blocks for {} threads", tables.len());
}

/// A full dump to `p` while `c` churns: complete, its counts equal to the
/// trailer's, and exact against the churn's slot tables.
fn full_dump_of_churn(p: &std::path::Path, c: &Churn) -> (heapdump::DumpInfo, common::Parsed) {
    let info = heapdump::dump(p, heapdump::Mode::Full).unwrap();
    let d = common::parse(&std::fs::read(p).unwrap());
    assert!(d.complete);
    assert_eq!(d.allocs.len() as u64, info.allocations, "returned counts equal the trailer's");
    check_against_slots(&d, &c.tables);
    (info, d)
}

fn dumps_while_threads_churn_hold_exactly_the_live_blocks() {
    let c = start_churn(3);
    let dir = common::scratch("churn");
    std::thread::sleep(std::time::Duration::from_millis(30));
    for i in 0..15 {
        let p = dir.join(format!("d{i}.hdump"));
        let (info, d) = full_dump_of_churn(&p, &c);
        assert_eq!(info.not_stopped, 0, "threads (tid -> flags): {:?}, pause {} us", d.thread_flags, info.pause_ns / 1000);
        std::fs::remove_file(&p).unwrap();
    }
    c.finish();
    std::fs::remove_dir_all(dir).unwrap();
}

fn fork_mode_dump_while_threads_churn() {
    let dir = common::scratch("fork");
    let o = common::child("child_fork_mode", &[("HEAPDUMP_FORK", "1"), ("HEAPDUMP_OUT_DIR", dir.to_str().unwrap())]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::remove_dir_all(dir).unwrap();
}

fn child_fork_mode() {
    assert!(heapdump::config().fork);
    let dir = std::path::PathBuf::from(std::env::var("HEAPDUMP_OUT_DIR").unwrap());
    let c = start_churn(2);
    std::thread::sleep(std::time::Duration::from_millis(20));
    for i in 0..5 {
        let (info, d) = full_dump_of_churn(&dir.join(format!("f{i}.hdump")), &c);
        assert!(info.pause_ns > 0 && d.pause_ns > 0);
        // The forked writer cannot see the parent's threads in its own
        // /proc: their names were read before the fork.
        assert!(d.thread_names.len() >= 3 && d.thread_names.values().all(|n| !n.is_empty()), "{:?}", d.thread_names);
    }
    c.finish();
}

/// `HEAPDUMP_FORK=collapse`: the heap is collapsed into huge pages before
/// the fork, and the dumps are as exact as plain fork-mode ones.
fn collapse_mode_dump_while_threads_churn() {
    let dir = common::scratch("collapse");
    let o = common::child("child_collapse_mode", &[("HEAPDUMP_FORK", "collapse"), ("HEAPDUMP_OUT_DIR", dir.to_str().unwrap())]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::remove_dir_all(dir).unwrap();
}

/// Kilobytes of anonymous memory on huge pages in this process.
fn anon_huge_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap();
    s.lines().find_map(|l| l.strip_prefix("AnonHugePages:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok()).unwrap()
}

fn child_collapse_mode() {
    let c = heapdump::config();
    assert!(c.fork && c.collapse, "HEAPDUMP_FORK=collapse parsed");
    let dir = std::path::PathBuf::from(std::env::var("HEAPDUMP_OUT_DIR").unwrap());
    // 64 MiB of small blocks, densely packed: whole 2 MiB ranges in memory.
    let held: Vec<Box<[u64; 6]>> = (0..1_300_000u64).map(|i| Box::new([i; 6])).collect();
    let before = anon_huge_kib();
    let churn = start_churn(2);
    std::thread::sleep(std::time::Duration::from_millis(20));
    for i in 0..3 {
        let (info, d) = full_dump_of_churn(&dir.join(format!("c{i}.hdump")), &churn);
        assert!(info.collapse_ns > 0 && info.pause_ns > 0);
        let b = &held[(i * 400_000) as usize];
        assert_eq!(d.contents.get(&(b.as_ptr() as u64)).map(|c| c.len()), Some(48), "a held block is in the dump");
    }
    churn.finish();
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if thp.is_empty() || thp.contains("[never]") {
        eprintln!("no transparent huge pages here ({thp:?}): collapse not checked");
    } else {
        let after = anon_huge_kib();
        assert!(after >= before + 32 * 1024, "the heap was collapsed: {before} kB -> {after} kB on huge pages");
    }
    drop(std::hint::black_box(held));
}

static HELD: AtomicPtr<[u64; 8]> = AtomicPtr::new(std::ptr::null_mut());

fn roots_in_a_blocked_stack_and_a_static() {
    // A block referenced only from a static.
    let s = Box::into_raw(Box::new([0x5717_1c00u64; 8]));
    HELD.store(s, Ordering::SeqCst);
    // A block referenced only from a blocked thread's stack.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let h = std::thread::spawn(move || {
        let b = std::hint::black_box(Box::new([0x57ac_0000u64; 8]));
        let addr = &*b as *const _ as u64;
        ready_tx.send((addr, heapdump_tid())).unwrap();
        go_rx.recv().unwrap();
        std::hint::black_box(&b);
    });
    let (addr, tid) = ready_rx.recv().unwrap();
    let dir = common::scratch("roots");
    let p = dir.join("r.hdump");
    heapdump::dump(&p, heapdump::Mode::Compact).unwrap();
    let d = common::parse(&std::fs::read(&p).unwrap());
    assert!(d.thread_ptrs.get(&tid).expect("blocked thread recorded").contains(&addr), "stack pointer to the block found");
    assert!(d.static_ptrs.contains(&(s as u64)), "static pointer to the block found");
    assert!(d.allocs.contains_key(&addr) && d.allocs.contains_key(&(s as u64)));
    go_tx.send(()).unwrap();
    h.join().unwrap();
    // SAFETY: s came from Box::into_raw.
    drop(unsafe { Box::from_raw(HELD.swap(std::ptr::null_mut(), Ordering::SeqCst)) });
    std::fs::remove_dir_all(dir).unwrap();
}

fn heapdump_tid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

fn no_allocation_while_dumping() {
    let dir = common::scratch("noalloc");
    let o = common::child("child_no_alloc", &[("HEAPDUMP_OUT_DIR", dir.to_str().unwrap())]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::remove_dir_all(dir).unwrap();
}

/// Control: the same child with one deliberate allocation under FORBID dies.
fn the_no_allocation_check_can_fail() {
    let dir = common::scratch("control");
    let o = common::child("child_no_alloc", &[("HEAPDUMP_OUT_DIR", dir.to_str().unwrap()), ("HEAPDUMP_CONTROL", "1")]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("allocation during a dump"));
    std::fs::remove_dir_all(dir).unwrap();
}

/// Any call into the allocator between FORBID's set and clear aborts the
/// process; a sleeping thread makes sure the stop-the-world path runs.
fn child_no_alloc() {
    let dir = std::path::PathBuf::from(std::env::var("HEAPDUMP_OUT_DIR").unwrap());
    // The other thread must be parked before anything is forbidden: a
    // thread still starting, or blocking on a channel for the first time,
    // allocates (std's per-thread wait context), which would abort a
    // correct dump. `park` allocates nothing.
    static H_READY: AtomicBool = AtomicBool::new(false);
    static H_GO: AtomicBool = AtomicBool::new(false);
    let h = std::thread::spawn(|| {
        H_READY.store(true, Ordering::SeqCst);
        while !H_GO.load(Ordering::SeqCst) {
            std::thread::park();
        }
    });
    while !H_READY.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
    let keep: Vec<Box<u64>> = (0..1000).map(Box::new).collect();
    let paths: Vec<_> = ["c", "f"].iter().map(|m| dir.join(format!("{m}.hdump"))).collect();
    // Warm up once (the first dump maps its buffers), then forbid.
    heapdump::dump(dir.join("warm.hdump"), heapdump::Mode::Compact).unwrap();
    for (p, mode) in paths.iter().zip([heapdump::Mode::Compact, heapdump::Mode::Full]) {
        FORBID.store(true, Ordering::SeqCst);
        let r = heapdump::dump(p, mode);
        FORBID.store(false, Ordering::SeqCst);
        r.unwrap();
    }
    let file = std::fs::File::create(dir.join("fd.hdump")).unwrap();
    FORBID.store(true, Ordering::SeqCst);
    let r = heapdump::dump_to_fd(std::os::fd::AsRawFd::as_raw_fd(&file), heapdump::Mode::Compact);
    FORBID.store(false, Ordering::SeqCst);
    r.unwrap();
    // The test allocator is live: a real allocation now aborts (control).
    assert!(
        std::env::var_os("HEAPDUMP_CONTROL").is_none() || {
            FORBID.store(true, Ordering::SeqCst);
            drop(Box::new(1));
            false
        }
    );
    H_GO.store(true, Ordering::SeqCst);
    h.thread().unpark();
    h.join().unwrap();
    for p in &paths {
        let d = common::parse(&std::fs::read(p).unwrap());
        assert!(d.complete && d.allocs.len() >= 1000);
    }
    drop(keep);
}

/// This process's threads (the dump's writer thread lives only while a
/// dump is written).
fn threads_now() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// The thread count once it is back to `n` (an exited thread leaves
/// /proc/self/task a moment after its last instruction), or as it is
/// after two seconds.
fn threads_back_to(n: usize) -> usize {
    for _ in 0..200 {
        if threads_now() == n {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    threads_now()
}

fn full_disk_fails_cleanly_and_the_program_goes_on() {
    // 40 MiB: enough for the dump to take a writer thread (32 MiB), and
    // over its four 512 KiB slots, so that the error comes while the
    // dumping thread still has pieces to hand over.
    let keep: Vec<Box<[u8; 4096]>> = (0..10_000).map(|_| Box::new([1; 4096])).collect();
    let threads = threads_now();
    let f = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let r = heapdump::dump_to_fd(std::os::fd::AsRawFd::as_raw_fd(&f), heapdump::Mode::Full);
    match r {
        Err(heapdump::DumpError::Write(e)) => assert_eq!(e.to_string(), "write failed: no space left on device (errno 28)"),
        other => panic!("expected ENOSPC, got {other:?}"),
    }
    assert_eq!(threads_back_to(threads), threads, "the writer thread is gone after a failed dump");
    // The program, its threads and the tracker go on.
    let more: Vec<Box<u64>> = (0..1000).map(Box::new).collect();
    let dir = common::scratch("full");
    let info = heapdump::dump(dir.join("ok.hdump"), heapdump::Mode::Compact).unwrap();
    assert!(info.allocations >= 11_000);
    assert_eq!(threads_back_to(threads), threads, "and after a good one");
    drop((keep, more));
    std::fs::remove_dir_all(dir).unwrap();
}

fn compact_pointers_of_a_dense_heap_are_exact() {
    // 100 K blocks of 48 bytes, each with two pointers to random earlier
    // blocks, one into the middle of another and a payload: the compact
    // scan (the address directory) must find every pointer word, interior
    // ones too, and nothing else, as a scan of the full dump of the same
    // moment does.
    let mut rng = common::Rng(0x2545_f491_4f6c_dd1d);
    // (The vector of them is over 1 MiB: its pointers are measured
    // ahead by the helper, see `assist`.)
    let mut nodes: Vec<Box<[u64; 6]>> = Vec::with_capacity(140_000);
    for i in 0..100_000usize {
        let mut n = Box::new([0u64; 6]);
        if i > 0 {
            n[0] = &*nodes[rng.next() as usize % i] as *const [u64; 6] as u64;
            n[1] = &*nodes[rng.next() as usize % i] as *const [u64; 6] as u64;
            n[2] = &*nodes[rng.next() as usize % i] as *const [u64; 6] as u64 + 8 * (1 + rng.next() % 5);
        }
        n[3] = rng.next();
        n[4] = i as u64;
        n[5] = rng.next() >> 1;
        nodes.push(n);
    }
    // And 4 KiB blocks of nothing but pointers, among the nodes: more
    // pointers than a chunk's slot of the compact dump's scanning helper
    // holds (see `assist`), so that chunks are split between the helper
    // and the dumping thread inside them too.
    let mut wide: Vec<Box<[u64; 512]>> = Vec::with_capacity(300);
    for _ in 0..300 {
        let mut w = Box::new([0u64; 512]);
        for x in w.iter_mut() {
            *x = &*nodes[rng.next() as usize % nodes.len()] as *const [u64; 6] as u64;
        }
        wide.push(w);
        nodes.push(Box::new([0u64; 6]));
    }
    let dir = common::scratch("dense");
    let (pc, pf) = (dir.join("c.hdump"), dir.join("f.hdump"));
    heapdump::dump(&pc, heapdump::Mode::Compact).unwrap();
    heapdump::dump(&pf, heapdump::Mode::Full).unwrap();
    let c = common::parse(&std::fs::read(&pc).unwrap());
    let f = common::parse(&std::fs::read(&pf).unwrap());
    assert_eq!(c.allocs, f.allocs, "the same blocks");
    let hits = |v: u64| match f.allocs.range(..=v).next_back() {
        Some((&a, &(size, _))) => v == a || v < a + size,
        None => false,
    };
    let mut pointers = 0;
    for (&a, bytes) in &f.contents {
        let want: Vec<(u64, u64)> = bytes
            .chunks_exact(8)
            .enumerate()
            .filter(|_| a % 8 == 0)
            .map(|(k, w)| (8 * k as u64, u64::from_le_bytes(w.try_into().unwrap())))
            .filter(|&(_, v)| hits(v))
            .collect();
        let got = c.pointers.get(&a).cloned().unwrap_or_default();
        assert_eq!(got, want, "block {a:#x}");
        pointers += got.len();
    }
    assert!(pointers >= 3 * 99_999 + 300 * 512, "{pointers}");
    drop(wide);
    drop(nodes);
    std::fs::remove_dir_all(dir).unwrap();
}

fn full_and_compact_agree() {
    // A little linked structure: compact pointer lists equal the pointers
    // found by scanning the full contents.
    struct Node {
        next: Option<Box<Node>>,
        _pad: [u64; 3],
    }
    let mut head = None;
    for _ in 0..50 {
        head = Some(Box::new(Node { next: head, _pad: [7; 3] }));
    }
    let dir = common::scratch("agree");
    let (pc, pf) = (dir.join("c.hdump"), dir.join("f.hdump"));
    heapdump::dump(&pc, heapdump::Mode::Compact).unwrap();
    heapdump::dump(&pf, heapdump::Mode::Full).unwrap();
    let c = common::parse(&std::fs::read(&pc).unwrap());
    let f = common::parse(&std::fs::read(&pf).unwrap());
    let mut n = head.as_deref();
    let mut checked = 0;
    while let Some(node) = n {
        let a = node as *const Node as u64;
        assert_eq!(c.allocs.get(&a), f.allocs.get(&a));
        if let Some(next) = node.next.as_deref() {
            let bytes = &f.contents[&a];
            assert_eq!(u64::from_le_bytes(bytes[..8].try_into().unwrap()), next as *const Node as u64);
        }
        checked += 1;
        n = node.next.as_deref();
    }
    assert_eq!(checked, 50);
    drop(head);
    std::fs::remove_dir_all(dir).unwrap();
}
