//! The dense heap of issue 18 as a Rust program has it: N nodes, each a
//! `Box` (48 bytes: a `Vec` header and a payload) whose `Vec` holds two
//! references to random earlier nodes (a second block of 16 bytes), all
//! held from one `Vec<Box<Node>>`. Run untracked under `heapdump run`
//! (the preload library sees Rust's allocations through malloc), it raises
//! the dump signal once built and waits for the dump to be written, as
//! `benches/c/dense.c` does. Usage: dense_rust N [DUMP_PATH_TO_WAIT_FOR]

#[allow(dead_code)] // The fields keep the graph alive; nothing reads them.
struct Node {
    links: Vec<*const Node>,
    payload: [u64; 3],
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let mut all: Vec<Box<Node>> = Vec::with_capacity(n);
    let mut x: u64 = 88172645463325252;
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut links = Vec::with_capacity(2);
        if i > 0 {
            links.push(&*all[(x % i as u64) as usize] as *const Node);
            links.push(&*all[((x >> 20) % i as u64) as usize] as *const Node);
        }
        all.push(Box::new(Node { links, payload: [x, x + 1, x + 2] }));
    }
    // SAFETY: raise(3) with a valid signal number; the runtime's handler
    // (or the default action) runs.
    unsafe { libc::raise(libc::SIGUSR2) };
    if let Some(path) = args.get(2) {
        // The signal dump is answered by the runtime's thread: wait until
        // the file stops growing.
        let mut last = 0;
        for _ in 0..60000 {
            let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
            if len > 0 && len == last {
                break;
            }
            last = len;
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    std::hint::black_box(&all);
}
