//! Dump costs of BENCHMARKS.md: builds a live heap of mixed objects of the
//! requested size (MiB), optionally with extra churning threads, then takes
//! a dump to tmpfs and prints wall time, stopped-world pause and bytes.
//!
//! Usage: dump_bench HEAP_MIB full|compact|write fork|nofork THREADS
//! (build with `--features tracked`). `write` is the baseline of full
//! dumps: instead of dumping, the same process, with the same heap, writes
//! as many bytes as the heap holds from a 1 MiB buffer with write(2), as
//! `dd` would, so that both meet the kernel and memory in the same state.

#[global_allocator]
static ALLOC: heapdump::Tracked<std::alloc::System> = heapdump::Tracked::new(std::alloc::System);

#[allow(dead_code)] // `next` keeps the lists alive.
struct Node {
    next: Option<Box<Node>>,
    payload: Vec<u64>,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mib: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(100);
    let mode = if args.get(2).map(String::as_str) == Some("full") { heapdump::Mode::Full } else { heapdump::Mode::Compact };
    let fork = args.get(3).map(String::as_str) == Some("fork");
    let threads: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(0);
    assert_eq!(heapdump::config().fork, fork, "set HEAPDUMP_FORK to match");
    // Mixed objects: lists of nodes whose payloads hold 1..512 words, some
    // of them pointers into other payloads.
    let target = mib << 20;
    let mut lists: Vec<Option<Box<Node>>> = (0..1024).map(|_| None).collect();
    let mut total = 0usize;
    let mut x = 0x9e3779b97f4a7c15u64;
    while total < target {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let words = 1 + (x >> 50) as usize % 512;
        let l = (x % 1024) as usize;
        let mut payload = vec![x; words];
        if let Some(prev) = lists[l].as_ref() {
            payload[0] = prev.payload.as_ptr() as u64;
        }
        total += words * 8 + 48;
        let next = lists[l].take();
        lists[l] = Some(Box::new(Node { next, payload }));
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut v: Vec<Box<[u8; 64]>> = Vec::new();
                let mut i = t;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if v.len() < 1000 {
                        v.push(Box::new([i as u8; 64]));
                    } else {
                        v.clear();
                    }
                    i += 1;
                }
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(50));
    let path = format!("/dev/shm/hdbench-{}.hdump", std::process::id());
    if args.get(2).map(String::as_str) == Some("write") {
        use std::io::Write;
        let bytes = heapdump::stats().live_bytes;
        let buf = vec![0u8; 1 << 20];
        let t0 = std::time::Instant::now();
        let mut f = std::fs::File::create(&path).expect("create");
        let mut left = bytes as usize;
        while left > 0 {
            let n = left.min(buf.len());
            f.write_all(&buf[..n]).expect("write");
            left -= n;
        }
        drop(f);
        let wall = t0.elapsed().as_secs_f64();
        let _ = std::fs::remove_file(&path);
        println!("file_bytes={bytes} wall_s={wall:.6}");
        std::hint::black_box(&lists);
        return;
    }
    let t0 = std::time::Instant::now();
    let info = heapdump::dump(&path, mode).expect("dump");
    let wall = t0.elapsed().as_secs_f64();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for h in hs {
        h.join().unwrap();
    }
    let _ = std::fs::remove_file(&path);
    println!(
        "heap_bytes={} allocations={} file_bytes={} wall_s={:.6} pause_us={} collapse_us={} threads={} tracker_bytes={}",
        info.alloc_bytes,
        info.allocations,
        info.file_bytes,
        wall,
        info.pause_ns / 1000,
        info.collapse_ns / 1000,
        info.threads,
        heapdump::stats().tracker_bytes
    );
    std::hint::black_box(&lists);
}
