//! The live table is exact: churn from many threads, realloc in every
//! direction, fork while other threads allocate, thread-local destructors,
//! and an inner allocator that fails.
//!
//! No libtest harness (`harness = false`: the reason is in Cargo.toml): `main`
//! lists the tests and runs them one at a time on the main thread; a test
//! missing from that list never runs.
// The test plays the host program: its own calls into the C library.
#![allow(clippy::disallowed_methods)]

mod common;

use common::{Failing, Rng, FAIL_SIZE};
use std::alloc::Layout;
use std::sync::atomic::{AtomicBool, Ordering};

#[global_allocator]
static ALLOC: heapdump::Tracked<Failing> = heapdump::Tracked::new(Failing);

fn main() {
    common::run(&[
        ("churn_from_four_threads_is_exact", churn_from_four_threads_is_exact),
        ("blocks_freed_by_other_threads_at_once_are_exact", blocks_freed_by_other_threads_at_once_are_exact),
        ("realloc_in_every_direction", realloc_in_every_direction),
        ("fork_while_threads_allocate", fork_while_threads_allocate),
        ("child_fork", child_fork),
        ("thread_local_destructors_allocate_at_exit", thread_local_destructors_allocate_at_exit),
        ("null_from_the_inner_allocator", null_from_the_inner_allocator),
        ("child_null", child_null),
        ("an_address_space_limit_is_survived", an_address_space_limit_is_survived),
        ("child_limited", child_limited),
        ("both_table_layouts_are_exact", both_table_layouts_are_exact),
        ("the_shadow_stays_out_of_core_dumps", the_shadow_stays_out_of_core_dumps),
        ("child_sparse", child_sparse),
        ("dense_shadow_chunks_get_huge_pages", dense_shadow_chunks_get_huge_pages),
        ("child_dense", child_dense),
        ("ended_threads_give_their_stripes_back", ended_threads_give_their_stripes_back),
        ("zero_size_and_over_aligned", zero_size_and_over_aligned),
        ("sites_are_captured_and_deduplicated", sites_are_captured_and_deduplicated),
        ("the_cached_unwinder_agrees_with_libgcc", the_cached_unwinder_agrees_with_libgcc),
        ("unloading_code_empties_the_rule_cache", unloading_code_empties_the_rule_cache),
        ("bad_configuration_is_reported_once", bad_configuration_is_reported_once),
        ("child_bad_config", child_bad_config),
    ]);
}

/// Random alloc/realloc/free; returns the blocks still live (addr, size).
fn churn(seed: u64, ops: usize, keep: usize) -> Vec<(usize, usize)> {
    let mut rng = Rng(seed);
    let mut live: Vec<(usize, usize)> = Vec::with_capacity(4096);
    for _ in 0..ops {
        let r = rng.next();
        match r % 4 {
            0 | 1 if live.len() < 4000 => {
                let size = 1 + (r >> 8) as usize % 3000;
                let l = Layout::from_size_align(size, 8).unwrap();
                // SAFETY: non-zero size.
                let p = unsafe { std::alloc::alloc(l) };
                assert!(!p.is_null());
                live.push((p as usize, size));
            }
            2 if !live.is_empty() => {
                let i = (r >> 8) as usize % live.len();
                let (p, size) = live[i];
                let new = 1 + (r >> 20) as usize % 6000;
                // SAFETY: p was allocated with (size, 8).
                let q = unsafe { std::alloc::realloc(p as *mut u8, Layout::from_size_align(size, 8).unwrap(), new) };
                assert!(!q.is_null());
                live[i] = (q as usize, new);
            }
            _ if !live.is_empty() => {
                let i = (r >> 8) as usize % live.len();
                let (p, size) = live.swap_remove(i);
                // SAFETY: p was allocated with (size, 8).
                unsafe { std::alloc::dealloc(p as *mut u8, Layout::from_size_align(size, 8).unwrap()) };
            }
            _ => {}
        }
    }
    while live.len() > keep {
        let (p, size) = live.pop().unwrap();
        // SAFETY: a block allocated with this size and alignment, freed once.
        unsafe { std::alloc::dealloc(p as *mut u8, Layout::from_size_align(size, 8).unwrap()) };
    }
    live
}

fn free_all(v: Vec<(usize, usize)>) {
    for (p, size) in v {
        // SAFETY: allocated by `churn` with (size, 8).
        unsafe { std::alloc::dealloc(p as *mut u8, Layout::from_size_align(size, 8).unwrap()) };
    }
}

fn churn_from_four_threads_is_exact() {
    let before = heapdump::stats();
    let handles: Vec<_> = (0..4).map(|t| std::thread::spawn(move || churn(0x9e37 + t, 200_000, 500))).collect();
    let kept: Vec<Vec<(usize, usize)>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let mid = heapdump::stats();
    // Ground truth against a full dump: every kept block is in it with its size.
    let dir = common::scratch("churn");
    let cleanup = Cleanup(dir.clone());
    let path = dir.join("churn.hdump");
    heapdump::dump(&path, heapdump::Mode::Compact).unwrap();
    let d = common::parse(&std::fs::read(&path).unwrap());
    assert!(d.complete);
    for (p, size) in kept.iter().flatten() {
        assert_eq!(d.allocs.get(&(*p as u64)).map(|a| a.0), Some(*size as u64), "block {p:#x} of {size} bytes missing or wrong");
    }
    drop(d);
    let n_kept: usize = kept.iter().map(|v| v.len()).sum();
    let bytes_kept: usize = kept.iter().flatten().map(|b| b.1).sum();
    // The kept blocks plus the four Vecs holding them and the outer Vec.
    assert_eq!(mid.live_count, before.live_count + n_kept as u64 + 5, "live count after churn");
    assert!(mid.live_bytes >= before.live_bytes + bytes_kept as u64);
    for v in kept {
        free_all(v);
    }
    drop((path, dir, cleanup));
    let after = heapdump::stats();
    assert_eq!(after.live_count, before.live_count, "every block freed leaves the table");
    assert_eq!(after.live_bytes, before.live_bytes);
    assert!(after.total_allocs >= before.total_allocs + 4 * 50_000);
    assert!(after.peak_bytes >= mid.live_bytes);
}

fn realloc_in_every_direction() {
    let base = heapdump::stats();
    let l = Layout::from_size_align(100, 16).unwrap();
    // SAFETY: a sequence of valid alloc/realloc/dealloc calls on one block.
    unsafe {
        let p = std::alloc::alloc(l);
        for (i, b) in std::slice::from_raw_parts_mut(p, 100).iter_mut().enumerate() {
            *b = i as u8;
        }
        let mut cur = (p, 100usize);
        for new in [1 << 20, 50, 60, 4096, 8, 1 << 16, 100] {
            let q = std::alloc::realloc(cur.0, Layout::from_size_align(cur.1, 16).unwrap(), new);
            assert!(!q.is_null());
            assert_eq!(q as usize % 16, 0, "alignment kept");
            let s = heapdump::stats();
            assert_eq!(s.live_count, base.live_count + 1, "one block after realloc to {new}");
            assert_eq!(s.live_bytes, base.live_bytes + new as u64, "size follows realloc to {new}");
            // Contents survive: the first 8 bytes were never shrunk away.
            assert_eq!(std::slice::from_raw_parts(q, 8), &[0, 1, 2, 3, 4, 5, 6, 7]);
            cur = (q, new);
        }
        std::alloc::dealloc(cur.0, Layout::from_size_align(cur.1, 16).unwrap());
    }
    assert_eq!(heapdump::stats().live_count, base.live_count);
}

fn fork_while_threads_allocate() {
    static STOP: AtomicBool = AtomicBool::new(false);
    STOP.store(false, Ordering::SeqCst);
    let threads: Vec<_> = (0..3)
        .map(|t| {
            std::thread::spawn(move || {
                let mut n = 0;
                while !STOP.load(Ordering::Relaxed) {
                    free_all(churn(t * 77 + n, 2_000, 10));
                    n += 1;
                }
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(50));
    for round in 0..20 {
        // SAFETY: fork; the child only runs `child_fork`'s body, then _exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let ok = std::panic::catch_unwind(child_fork).is_ok();
            // SAFETY: leave the child at once.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        assert!(pid > 0);
        let status = wait_with_timeout(pid, 20);
        assert_eq!(status, Some(0), "fork round {round}: child deadlocked or failed");
        // The parent still allocates normally.
        free_all(churn(round, 1_000, 0));
    }
    STOP.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
}

/// In a forked child: the table and locks work and stay exact.
fn child_fork() {
    let before = heapdump::stats();
    let v: Vec<Box<[u8; 100]>> = (0..10_000).map(|_| Box::new([7u8; 100])).collect();
    let mid = heapdump::stats();
    assert_eq!(mid.live_count, before.live_count + 10_001);
    drop(v);
    assert_eq!(heapdump::stats().live_count, before.live_count);
}

fn wait_with_timeout(pid: i32, secs: u64) -> Option<i32> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        let mut status = 0;
        // SAFETY: WNOHANG wait on our child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            return Some(if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 128 + libc::WTERMSIG(status) });
        }
        if std::time::Instant::now() > deadline {
            // SAFETY: killing our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

fn thread_local_destructors_allocate_at_exit() {
    struct AllocOnDrop(Vec<String>);
    impl Drop for AllocOnDrop {
        fn drop(&mut self) {
            // Allocate and free while the thread's TLS is being torn down.
            let mut v: Vec<String> = (0..100).map(|i| format!("late {i}")).collect();
            v.append(&mut self.0);
            drop(v);
        }
    }
    thread_local! {
        static T: std::cell::RefCell<Option<AllocOnDrop>> = const { std::cell::RefCell::new(None) };
    }
    let before = heapdump::stats();
    let hs: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(|| {
                T.with(|t| *t.borrow_mut() = Some(AllocOnDrop((0..50).map(|i| i.to_string()).collect())));
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    // Thread exit frees glibc's per-thread state lazily; wait for it to settle.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let after = heapdump::stats();
    assert_eq!(after.live_count, before.live_count, "allocations of TLS destructors are all accounted");
}

fn null_from_the_inner_allocator() {
    let dir = common::scratch("null");
    let out = dir.join("oom.hdump");
    let o = common::child("child_null", &[("HEAPDUMP_OUTPUT", out.to_str().unwrap()), ("HEAPDUMP_SIGNAL", "0")]);
    assert!(o.status.success(), "child failed: {}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("heapdump: wrote") && err.contains("alloc_failure"), "stderr: {err}");
    let d = common::parse(&std::fs::read(&out).unwrap());
    assert_eq!(d.reason, "alloc_failure");
    assert!(d.complete);
    std::fs::remove_dir_all(dir).unwrap();
}

/// Under a 1 GiB limit on address space the table cannot reserve its
/// shadow (48 TiB) nor its bucket pools at their full size (over a hundred
/// GiB): it falls back to buckets, asks for their pools at halving sizes,
/// and the accounting stays exact.
fn an_address_space_limit_is_survived() {
    use std::os::unix::process::CommandExt;
    let mut c = std::process::Command::new(std::env::current_exe().unwrap());
    c.env("HEAPDUMP_TEST_CHILD", "child_limited").env("HEAPDUMP_SIGNAL", "0");
    // SAFETY: setrlimit is async-signal-safe and touches only the child.
    unsafe {
        c.pre_exec(|| {
            let lim = libc::rlimit { rlim_cur: 1 << 30, rlim_max: 1 << 30 };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "child failed: {}", String::from_utf8_lossy(&o.stderr));
}

fn child_limited() {
    let before = heapdump::stats();
    let n = 100_000;
    let mut v: Vec<Box<[u8]>> = Vec::with_capacity(n);
    let mut bytes = (n * std::mem::size_of::<Box<[u8]>>()) as u64;
    for i in 0..n {
        let len = 1 + (i * 7919) % 700;
        v.push(vec![i as u8; len].into_boxed_slice());
        bytes += len as u64;
    }
    let mid = heapdump::stats();
    assert_eq!(mid.live_count, before.live_count + n as u64 + 1, "live count under the limit");
    assert_eq!(mid.live_bytes, before.live_bytes + bytes, "live bytes under the limit");
    assert_eq!(mid.untracked, 0, "nothing left untracked");
    drop(std::hint::black_box(v));
    let after = heapdump::stats();
    assert_eq!((after.live_count, after.live_bytes), (before.live_count, before.live_bytes));
}

/// Small blocks scattered among large ones, in each layout of the table
/// (`HEAPDUMP_TABLE`): both count exactly, and the buckets take less
/// memory there than the shadow, as the README says.
fn both_table_layouts_are_exact() {
    let mut bytes = Vec::new();
    for layout in ["shadow", "buckets"] {
        let o = common::child("child_sparse", &[("HEAPDUMP_TABLE", layout), ("HEAPDUMP_SIGNAL", "0"), ("HEAPDUMP_BACKTRACE", "off")]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{layout}: {}", String::from_utf8_lossy(&o.stderr));
        let b: u64 = out.trim().strip_prefix("tracker_bytes=").and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{layout}: {out}"));
        bytes.push(b);
    }
    assert!(bytes[1] < bytes[0], "buckets ({}) take less than the shadow ({}) on a sparse heap", bytes[1], bytes[0]);
}

/// One mapping as /proc/self/smaps describes it.
struct Vma {
    start: u64,
    end: u64,
    rss_kib: u64,
    huge_kib: u64,
    dont_dump: bool,
}

fn vmas() -> Vec<Vma> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut out: Vec<Vma> = Vec::new();
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        let kib = |l: &str| l.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()).unwrap();
        if let Some((a, b)) = first.split_once('-').filter(|_| !first.ends_with(':')) {
            let (start, end) = (u64::from_str_radix(a, 16).unwrap(), u64::from_str_radix(b, 16).unwrap());
            out.push(Vma { start, end, rss_kib: 0, huge_kib: 0, dont_dump: false });
        } else if let Some(v) = out.last_mut() {
            if line.starts_with("Rss:") {
                v.rss_kib = kib(line);
            } else if line.starts_with("AnonHugePages:") {
                v.huge_kib = kib(line);
            } else if let Some(flags) = line.strip_prefix("VmFlags:") {
                v.dont_dump = flags.split_whitespace().any(|f| f == "dd");
            }
        }
    }
    out
}

/// The mappings that make up the table's shadow: the one run of adjacent
/// mappings 16 TiB or longer (parts of its reservation given huge pages
/// are mappings of their own).
fn shadow_vmas() -> Vec<Vma> {
    let mut runs: Vec<Vec<Vma>> = Vec::new();
    for v in vmas() {
        match runs.last_mut() {
            Some(r) if r.last().unwrap().end == v.start => r.push(v),
            _ => runs.push(vec![v]),
        }
    }
    let mut long: Vec<Vec<Vma>> = runs.into_iter().filter(|r| r.last().unwrap().end - r[0].start >= 16 << 40).collect();
    assert_eq!(long.len(), 1, "one run of mappings of 16 TiB or more (the shadow)");
    long.pop().unwrap()
}

/// The table's shadow (48 TiB of address space) is marked to stay out of
/// core dumps: the kernel would walk it page by page, for hours.
fn the_shadow_stays_out_of_core_dumps() {
    let keep = Box::new([7u64; 4]);
    let shadow = shadow_vmas();
    assert!(shadow.iter().all(|v| v.dont_dump), "every part of the shadow is marked dd");
    drop(std::hint::black_box(keep));
}

/// A dense heap of small blocks: the parts of the shadow it fills get huge
/// pages (where the system gives them on request), the sparse start of it
/// does not, and the tracker's count of its memory is what the kernel
/// says the shadow holds.
fn dense_shadow_chunks_get_huge_pages() {
    let o = common::child("child_dense", &[("HEAPDUMP_SIGNAL", "0"), ("HEAPDUMP_BACKTRACE", "off")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    let field = |k: &str| -> u64 {
        out.split_whitespace().find_map(|f| f.strip_prefix(k)?.strip_prefix('=')?.parse().ok()).unwrap_or_else(|| panic!("{k} in {out}"))
    };
    let (rss, huge, tracker) = (field("shadow_rss") << 10, field("shadow_huge") << 10, field("tracker_bytes"));
    let enabled = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if enabled.contains("[never]") || enabled.is_empty() {
        assert_eq!(huge, 0, "no huge pages asked for where the system gives none");
    } else {
        // 64 MiB of 32-byte chunks: 8 MiB of slots, four 2 MiB chunks; the
        // first has no dense neighbour yet, and the kernel may lack huge
        // pages for some (fragmentation): at least one is expected.
        assert!(huge >= 2 << 20, "some of the shadow on huge pages: {huge} bytes of {rss}");
        assert!(huge < rss, "the sparse start of the heap keeps 4 KiB pages");
    }
    // The tracker's memory is the shadow plus its small tables elsewhere.
    assert!(tracker >= rss && tracker - rss < 4 << 20, "tracker_bytes {tracker} counts the shadow's {rss} bytes");
    // HEAPDUMP_THP=0 keeps the whole shadow on 4 KiB pages.
    let o = common::child("child_dense", &[("HEAPDUMP_SIGNAL", "0"), ("HEAPDUMP_BACKTRACE", "off"), ("HEAPDUMP_THP", "0")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains(" shadow_huge=0 "), "HEAPDUMP_THP=0: {out}");
}

/// Threads that end give their stripe of counters back: the 600th thread
/// started one after another still owns one (without this, every thread
/// after the 255th shares the last stripe, whose counts take a bus lock),
/// few distinct stripes serve them all, and the counts stay exact.
fn ended_threads_give_their_stripes_back() {
    let work = |i: usize| {
        let v: Vec<Box<[u8]>> = (0..50).map(|j| vec![j as u8; 1 + (i + j) % 300].into_boxed_slice()).collect();
        let k = heapdump::testing::stripe();
        drop(std::hint::black_box(v));
        k
    };
    // The standard library's first spawn leaves some state allocated.
    std::thread::spawn(move || work(0)).join().unwrap();
    let before = heapdump::stats();
    let mut seen = [false; 256];
    for i in 0..600 {
        let k = std::thread::spawn(move || work(i)).join().unwrap();
        assert!(k < 255, "thread {i} counts on the shared stripe");
        seen[k] = true;
    }
    let after = heapdump::stats();
    let distinct = seen.iter().filter(|&&b| b).count();
    assert!(distinct < 100, "ended threads' stripes are reused ({distinct} distinct for 600 threads)");
    assert_eq!(
        (after.live_count, after.live_bytes),
        (before.live_count, before.live_bytes),
        "counts exact across threads that came and went"
    );
}

fn child_dense() {
    let n = 2 << 20;
    let v: Vec<Box<[u64; 2]>> = (0..n as u64).map(|i| Box::new([i, i])).collect();
    let s = heapdump::stats();
    let shadow = shadow_vmas();
    let rss: u64 = shadow.iter().map(|v| v.rss_kib).sum();
    let huge: u64 = shadow.iter().map(|v| v.huge_kib).sum();
    assert!(s.live_count > n as u64, "the boxes are live");
    println!("shadow_rss={rss} shadow_huge={huge} tracker_bytes={}", s.tracker_bytes);
    drop(std::hint::black_box(v));
}

fn child_sparse() {
    let before = heapdump::stats();
    let n = 20_000;
    let mut v: Vec<(Box<[u64; 6]>, Vec<u8>)> = Vec::with_capacity(n);
    let mut bytes = (n * std::mem::size_of::<(Box<[u64; 6]>, Vec<u8>)>()) as u64;
    for i in 0..n {
        let big = vec![i as u8; 2048 + i % 4096];
        bytes += 48 + big.len() as u64;
        v.push((Box::new([i as u64; 6]), big));
    }
    let mid = heapdump::stats();
    assert_eq!(mid.live_count, before.live_count + 2 * n as u64 + 1, "live count");
    assert_eq!(mid.live_bytes, before.live_bytes + bytes, "live bytes");
    assert_eq!(mid.untracked, 0, "nothing left untracked");
    drop(std::hint::black_box(v));
    let after = heapdump::stats();
    assert_eq!((after.live_count, after.live_bytes), (before.live_count, before.live_bytes));
    println!("tracker_bytes={}", mid.tracker_bytes);
}

fn child_null() {
    let before = heapdump::stats();
    let l = Layout::from_size_align(FAIL_SIZE, 8).unwrap();
    // SAFETY: a valid layout; null is an allowed answer. (black_box: an
    // optimised build may drop allocations it can see are unused.)
    let p = std::hint::black_box(unsafe { std::alloc::alloc(l) });
    assert!(p.is_null());
    // A failing realloc keeps the old block live and tracked.
    // SAFETY: valid alloc/realloc/dealloc sequence.
    unsafe {
        let q = std::hint::black_box(std::alloc::alloc(Layout::from_size_align(64, 8).unwrap()));
        let r = std::hint::black_box(std::alloc::realloc(q, Layout::from_size_align(64, 8).unwrap(), FAIL_SIZE));
        assert!(r.is_null());
        assert_eq!(heapdump::stats().live_count, before.live_count + 1);
        std::alloc::dealloc(q, Layout::from_size_align(64, 8).unwrap());
    }
    assert_eq!(heapdump::stats().live_count, before.live_count);
}

fn zero_size_and_over_aligned() {
    let base = heapdump::stats();
    for align in [1usize, 64, 4096, 1 << 16] {
        let l = Layout::from_size_align(24, align).unwrap();
        // SAFETY: valid layout. (black_box: kept even by an optimised build.)
        let p = std::hint::black_box(unsafe { std::alloc::alloc(l) });
        assert_eq!(p as usize % align, 0);
        let s = heapdump::stats();
        assert_eq!(s.live_bytes, base.live_bytes + 24);
        // SAFETY: same layout.
        unsafe { std::alloc::dealloc(p, l) };
    }
    // Zero-sized types never reach the allocator, and Vec::new does not allocate.
    let v: Vec<()> = vec![(); 1000];
    let e: Vec<u64> = Vec::new();
    assert_eq!(heapdump::stats().live_count, base.live_count);
    drop((v, e));
}

#[inline(never)]
fn alloc_here() -> Box<[u64; 3]> {
    Box::new([1, 2, 3])
}

fn sites_are_captured_and_deduplicated() {
    let boxes: Vec<_> = (0..100).map(|_| alloc_here()).collect();
    let dir = common::scratch("sites");
    let path = dir.join("s.hdump");
    heapdump::dump(&path, heapdump::Mode::Compact).unwrap();
    let d = common::parse(&std::fs::read(&path).unwrap());
    let ids: std::collections::BTreeSet<u32> = boxes.iter().map(|b| d.allocs[&(b.as_ptr() as u64)].1).collect();
    assert_eq!(ids.len(), 1, "one site for 100 allocations from one call site");
    let id = *ids.iter().next().unwrap();
    assert_ne!(id, 0);
    let frames = &d.sites[&id];
    assert!(frames.len() >= 3, "a real stack: {frames:x?}");
    // One of the frames lies inside alloc_here.
    let f = alloc_here as *const () as u64;
    assert!(frames.iter().any(|&ip| ip > f && ip < f + 4096), "alloc_here ({f:#x}) among {frames:x?}");
    std::fs::remove_dir_all(dir).unwrap();
}

fn bad_configuration_is_reported_once() {
    let o = common::child("child_bad_config", &[("HEAPDUMP_MODE", "sideways"), ("HEAPDUMP_THRESHOLD", "lots"), ("HEAPDUMP_THP", "maybe")]);
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.matches("ignoring HEAPDUMP_MODE=sideways: expected full or compact").count(), 1, "{err}");
    assert_eq!(err.matches("ignoring HEAPDUMP_THP=maybe: expected 1 or 0").count(), 1, "{err}");
    assert_eq!(err.matches("ignoring HEAPDUMP_THRESHOLD=lots").count(), 1, "{err}");
}

fn child_bad_config() {
    let c = heapdump::config();
    assert_eq!(c.mode, heapdump::Mode::Compact);
    assert_eq!(c.threshold, 0);
}

struct Cleanup(std::path::PathBuf);
impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// (cached unwinder's frames if it walked, libgcc's frames)
type Pair = (Option<Vec<u64>>, Vec<u64>);

/// Both unwinders from the same frame: the frames above it must be equal
/// (the first differs: it is the return address into this function).
#[inline(never)]
fn both_unwinders() -> Pair {
    let mut a = [0u64; 64];
    let mut b = [0u64; 64];
    let n = heapdump::testing::backtrace_cached(&mut a);
    let m = heapdump::testing::backtrace_libgcc(&mut b);
    (n.map(|n| a[1..n].to_vec()), b[1..m].to_vec())
}

#[inline(never)]
fn recurse(depth: usize, out: &mut Vec<Pair>) -> usize {
    if depth == 0 {
        out.push(both_unwinders());
        return 1;
    }
    // Different frame sizes on the way down (an array that must be kept).
    let pad = [depth as u8; 200];
    let r = if depth % 3 == 0 { recurse(depth - 1, out) } else { std::hint::black_box(|| recurse(depth - 1, out))() };
    r + std::hint::black_box(pad)[depth % 200] as usize
}

/// Like `recurse`, but bit `depth % 8` of `path` picks how each level calls
/// the next: the stacks of two paths share their outer frames and differ
/// somewhere below, in frames at the same stack addresses (the cached
/// unwinder's per-thread memo must notice the difference).
#[inline(never)]
fn recurse_path(depth: usize, path: u8, out: &mut Vec<Pair>) -> usize {
    if depth == 0 {
        out.push(both_unwinders());
        return 1;
    }
    let pad = [depth as u8; 64];
    let r = if path >> (depth % 8) & 1 == 0 {
        recurse_path(depth - 1, path, out)
    } else {
        std::hint::black_box(|| recurse_path(depth - 1, path, out))()
    };
    r + std::hint::black_box(pad)[depth % 64] as usize
}

extern "C" fn compare(a: *const std::ffi::c_void, b: *const std::ffi::c_void) -> i32 {
    SORTED.with(|v| v.borrow_mut().push(both_unwinders()));
    // SAFETY: qsort passes pointers to elements of the u32 array below.
    unsafe { (*(a as *const u32)).cmp(&*(b as *const u32)) as i32 }
}

thread_local! {
    static SORTED: std::cell::RefCell<Vec<Pair>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn the_cached_unwinder_agrees_with_libgcc() {
    let mut got = Vec::new();
    for depth in [0, 1, 5, 17, 40, 80] {
        recurse(depth, &mut got);
    }
    // The same stack again and again, then stacks that differ at one level.
    for path in [0u8, 0, 0, 1, 0, 0x80, 0x80, 0x10, 0x11, 0xff, 0, 0xfe] {
        recurse_path(12, path, &mut got);
    }
    // Through a thread's start and through glibc (qsort calls back into us).
    got.extend(
        std::thread::spawn(|| {
            let mut v = Vec::new();
            recurse(9, &mut v);
            let mut xs = [5u32, 3, 9, 1];
            // SAFETY: qsort over a live array of four u32 with a matching comparator.
            unsafe { libc::qsort(xs.as_mut_ptr().cast(), 4, 4, Some(compare)) };
            v.extend(SORTED.with(|s| s.take()));
            v
        })
        .join()
        .unwrap(),
    );
    assert!(got.len() >= 8);
    for (cached, libgcc) in &got {
        let cached = cached.as_ref().expect("the cached unwinder declined an ordinary stack");
        assert!(libgcc.len() >= 2, "{libgcc:x?}");
        assert_eq!(cached, libgcc, "frames differ");
    }
}

/// Spins a little, then yields: three threads hand blocks to each other on
/// two cores, and pure spinning could keep the one that must move off them.
fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// A producer hands each block to one of two consumers through 4-deep
/// rings, so most are freed by another thread within a few allocations of
/// being made (while their insert may still be pending in the producer's
/// lane); every tenth block is kept. The table ends up exact: the kept
/// blocks are in a dump, no freed one is, and the live count adds up.
fn blocks_freed_by_other_threads_at_once_are_exact() {
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    const RING: usize = 4;
    // An odd size nothing else here allocates: a freed address that comes
    // back in the dump at this size can only be a kept block.
    const SIZE: usize = 777;
    const N: usize = 120_000;
    let before = heapdump::stats();
    let rings: Arc<Vec<Vec<AtomicUsize>>> = Arc::new((0..2).map(|_| (0..RING).map(|_| AtomicUsize::new(0)).collect()).collect());
    let consumers: Vec<_> = (0..2)
        .map(|c| {
            let rings = rings.clone();
            std::thread::spawn(move || {
                let mut freed = Vec::with_capacity(N / 2);
                let mut i = 0;
                let mut spins = 0u32;
                loop {
                    let slot = &rings[c][i % RING];
                    let v = slot.swap(0, Ordering::Acquire);
                    if v == usize::MAX {
                        break;
                    }
                    if v == 0 {
                        backoff(&mut spins);
                        continue;
                    }
                    spins = 0;
                    // SAFETY: the producer allocated it with (SIZE, 8) and handed it over.
                    unsafe { std::alloc::dealloc(v as *mut u8, Layout::from_size_align(SIZE, 8).unwrap()) };
                    freed.push(v);
                    i += 1;
                }
                freed
            })
        })
        .collect();
    let mut kept = Vec::with_capacity(N / 10);
    let mut next = [0usize; 2];
    for k in 0..N {
        // SAFETY: non-zero size.
        let p = unsafe { std::alloc::alloc(Layout::from_size_align(SIZE, 8).unwrap()) } as usize;
        assert_ne!(p, 0);
        if k % 10 == 0 {
            kept.push(p);
            continue;
        }
        let c = k % 2;
        let slot = &rings[c][next[c] % RING];
        let mut spins = 0u32;
        while slot.compare_exchange(0, p, Ordering::Release, Ordering::Relaxed).is_err() {
            backoff(&mut spins);
        }
        next[c] += 1;
    }
    for c in 0..2 {
        let slot = &rings[c][next[c] % RING];
        let mut spins = 0u32;
        while slot.compare_exchange(0, usize::MAX, Ordering::Release, Ordering::Relaxed).is_err() {
            backoff(&mut spins);
        }
    }
    let freed: Vec<Vec<usize>> = consumers.into_iter().map(|h| h.join().unwrap()).collect();
    let freed_n: usize = freed.iter().map(|f| f.len()).sum();
    assert_eq!(freed_n + kept.len(), N);
    // Live now: the kept blocks, the Vec holding them, the freed-address
    // Vecs (two and the one of them), and the rings (the Arc and three Vecs).
    let mid = heapdump::stats();
    assert_eq!(mid.live_count, before.live_count + kept.len() as u64 + 1 + 3 + 4, "live count");
    let dir = common::scratch("handoff");
    let cleanup = Cleanup(dir.clone());
    let path = dir.join("handoff.hdump");
    heapdump::dump(&path, heapdump::Mode::Compact).unwrap();
    let d = common::parse(&std::fs::read(&path).unwrap());
    for p in &kept {
        assert_eq!(d.allocs.get(&(*p as u64)).map(|a| a.0), Some(SIZE as u64), "kept block {p:#x} missing");
    }
    let kept_set: std::collections::HashSet<usize> = kept.iter().copied().collect();
    for p in freed.iter().flatten() {
        if !kept_set.contains(p) {
            assert!(d.allocs.get(&(*p as u64)).is_none_or(|a| a.0 != SIZE as u64), "freed block {p:#x} still in the dump");
        }
    }
    drop(d);
    for p in kept {
        // SAFETY: allocated above with (SIZE, 8).
        unsafe { std::alloc::dealloc(p as *mut u8, Layout::from_size_align(SIZE, 8).unwrap()) };
    }
    drop((freed, path, dir, cleanup));
}

/// What the preload library's `dlclose` calls: every cached unwind rule
/// goes (code may be reloaded at the same addresses), and walks refill it.
fn unloading_code_empties_the_rule_cache() {
    let mut frames = [0u64; 64];
    assert!(heapdump::testing::backtrace_cached(&mut frames).is_some());
    assert!(heapdump::testing::cached_rules() > 0, "a walk caches the rules it used");
    heapdump::hooks::code_unloaded();
    assert_eq!(heapdump::testing::cached_rules(), 0);
    let n = heapdump::testing::backtrace_cached(&mut frames);
    assert!(n.is_some_and(|n| n > 1) && heapdump::testing::cached_rules() > 0);
}
