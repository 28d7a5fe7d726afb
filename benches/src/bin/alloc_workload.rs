//! The allocation-heavy workload of BENCHMARKS.md: small boxes, maps of
//! strings, vector growth, and two threads churning, with about three
//! million live allocations at the peak. Built once per allocator
//! (features `tracked`, `dhat`, `jemalloc`, or none for the untracked
//! program); prints the peak live count and, when tracked, the tracker's
//! own memory.

use std::collections::HashMap;

#[cfg(feature = "tracked")]
#[global_allocator]
static ALLOC: heapdump::Tracked<std::alloc::System> = heapdump::Tracked::new(std::alloc::System);

#[cfg(feature = "dhat")]
#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn churn(seed: u64, rounds: usize) -> u64 {
    let mut rng = Rng(seed);
    let mut slots: Vec<Option<Box<[u8]>>> = (0..4096).map(|_| None).collect();
    let mut sum = 0u64;
    for _ in 0..rounds {
        let r = rng.next();
        let i = (r % 4096) as usize;
        match slots[i].take() {
            Some(b) => sum += b.len() as u64,
            None => slots[i] = Some(vec![0u8; 16 + (r >> 40) as usize % 256].into_boxed_slice()),
        }
    }
    sum
}

fn main() {
    #[cfg(feature = "dhat")]
    let _profiler = dhat::Profiler::new_heap();
    let scale: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(1);
    let t1 = std::thread::spawn(move || churn(1, 2_000_000 * scale));
    let t2 = std::thread::spawn(move || churn(2, 2_000_000 * scale));
    // Small boxes.
    let boxes: Vec<Box<u64>> = (0..1_500_000 * scale as u64).map(Box::new).collect();
    // Maps of strings.
    let mut maps: Vec<HashMap<String, String>> = Vec::new();
    for m in 0..500 * scale {
        let mut h = HashMap::new();
        for k in 0..1000 {
            h.insert(format!("key-{m}-{k}"), format!("value {k}"));
        }
        maps.push(h);
    }
    // Vector growth.
    let mut vecs: Vec<Vec<u32>> = Vec::new();
    for i in 0..20_000 * scale {
        let mut v = Vec::new();
        for j in 0..(i % 200) as u32 {
            v.push(j);
        }
        vecs.push(v);
    }
    let live_at_peak = boxes.len() + maps.len() * 2001 + vecs.len() * 2;
    #[cfg(feature = "tracked")]
    let s = heapdump::stats();
    let c = t1.join().unwrap() + t2.join().unwrap();
    drop((boxes, maps, vecs));
    #[cfg(feature = "tracked")]
    println!(
        "live_at_peak={} tracker_bytes={} peak_live_count={} sites={} total_allocations={}",
        live_at_peak,
        s.tracker_bytes,
        s.live_count,
        s.sites,
        heapdump::stats().total_allocs
    );
    #[cfg(not(feature = "tracked"))]
    println!("live_at_peak={live_at_peak}");
    std::hint::black_box(c);
}
