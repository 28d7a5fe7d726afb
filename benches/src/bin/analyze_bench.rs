//! Analysis costs of BENCHMARKS.md: writes a synthetic compact dump of N
//! allocations with about two pointers each (10% of them leaked), then
//! loads it, classifies leaks and computes dominators and retained sizes,
//! printing each phase's time and the analyser's peak heap memory.
//!
//! Usage: analyze_bench N

use heapdump_analyze::{dominators, leaks, DumpFile, Heap};
use heapdump_format::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts the analyser's heap: current and peak bytes.
struct Counting;
static CUR: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to System; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let n = CUR.fetch_add(l.size(), Ordering::Relaxed) + l.size();
        PEAK.fetch_max(n, Ordering::Relaxed);
        // SAFETY: forwarded.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        CUR.fetch_sub(l.size(), Ordering::Relaxed);
        // SAFETY: forwarded.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if n > l.size() {
            let c = CUR.fetch_add(n - l.size(), Ordering::Relaxed) + n - l.size();
            PEAK.fetch_max(c, Ordering::Relaxed);
        } else {
            CUR.fetch_sub(l.size() - n, Ordering::Relaxed);
        }
        // SAFETY: forwarded.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn write_dump(path: &str, n: u64) {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::create(path).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let mut w = Writer::new(FdSink::new(f.as_raw_fd()), &mut buf, &Header::new(Mode::Compact, Reason::Api, 4096, 1, 0)).unwrap();
    let base = 0x1000_0000u64;
    let addr = |i: u64| base + i * 64;
    let mut x = 0x2545f4914f6cdd1du64;
    let mut rnd = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    // Roots: 1000 stack words pointing at the first 90% of blocks.
    let roots: Vec<(u64, u64)> = (0..1000).map(|i| (i * 8, addr(rnd() % (n * 9 / 10)))).collect();
    let t = ThreadInfo { tid: 1, flags: raw::THREAD_CURRENT, stack_start: 0x7000_0000, stack_end: 0x7000_0000 + 8000, tls: 0, name: b"main", regs: &[0; 17] };
    w.thread(&t, Contents::Compact { count: roots.len() as u64, pointers: roots.into_iter() }).unwrap();
    for i in 0..n {
        // Two pointers: one to a nearby block (lists), one anywhere in the
        // same part (reachable or leaked) of the heap.
        let leaked_part = i >= n * 9 / 10;
        let (lo, span) = if leaked_part { (n * 9 / 10, n - n * 9 / 10) } else { (0, n * 9 / 10) };
        let a = lo + (i - lo + 1) % span;
        let b = lo + rnd() % span;
        let mut p = [(0u64, addr(a)), (8u64, addr(b))];
        p.sort();
        let info = AllocInfo { address: addr(i), size: 48, site: 0, align_log2: 4, flags: 0, first_word: addr(a) };
        w.alloc(&info, Contents::Compact { count: 2, pointers: p.into_iter() }).unwrap();
    }
    w.finish(0).unwrap();
}

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let path = format!("/dev/shm/hd-analyze-{}-{n}.hdump", std::process::id());
    write_dump(&path, n);
    let before = CUR.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let t0 = std::time::Instant::now();
    let file = DumpFile::open(&path).unwrap();
    let flen = file.bytes().len() as u64;
    let mut pass2_at = None;
    let heap = Heap::load(&file, &mut |done, _| {
        if done >= flen && pass2_at.is_none() {
            pass2_at = Some(t0.elapsed().as_secs_f64());
        }
    })
    .unwrap();
    eprintln!("pass 1 (records, sort) ended at {:.3} s", pass2_at.unwrap_or(0.0));
    let t_load = t0.elapsed().as_secs_f64();
    let (heap_bytes, load_peak) = (CUR.load(Ordering::Relaxed) - before, PEAK.load(Ordering::Relaxed) - before);
    // Leaks and dominators as the tool computes them: the leaks on a second
    // thread while the dominator walk from the roots runs.
    let t1 = std::time::Instant::now();
    let (l, d) = dominators::with_leaks(&heap, &leaks::NoContents);
    let t_both = t1.elapsed().as_secs_f64();
    let total = t0.elapsed().as_secs_f64();
    let peak = PEAK.load(Ordering::Relaxed) - before;
    let _ = std::fs::remove_file(&path);
    println!(
        "n={n} edges={} load_s={t_load:.3} loaded_heap_bytes={heap_bytes} load_peak_bytes={load_peak} leaks_dominators_s={t_both:.3} total_s={total:.3} peak_heap_bytes={peak} bytes_per_alloc={:.1} reachable={} definitely_lost={} max_retained={}",
        heap.edge_count(),
        peak as f64 / n as f64,
        l.still_reachable.blocks,
        l.definitely_lost.blocks,
        d.retained.iter().max().unwrap_or(&0)
    );
}
