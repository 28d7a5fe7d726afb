//! What one call costs, with the tracker and without: tight loops of one
//! pattern each, the best of several repetitions (the least disturbed by
//! the machine), in nanoseconds per iteration. Built untracked and with
//! the feature `tracked`; `benches/run.py` runs both and prints the
//! difference, which is the tracker's own work on that pattern.
//!
//! - `lifo`: allocate a small box and free it at once (the allocator's
//!   per-thread cache hands the same block back each time).
//! - `seq_alloc`, `seq_free`: a million boxes allocated in order, then
//!   freed in the same order (the table's lines are read in order).
//! - `realloc`: a string of capacity 10 grown to 20 (in place) and freed:
//!   an allocation, a reallocation and a free per iteration.
//! - `random_free`: a million 24-byte boxes freed in random order (the
//!   table's line for each is cold).

#[cfg(feature = "tracked")]
#[global_allocator]
static ALLOC: heapdump::Tracked<std::alloc::System> = heapdump::Tracked::new(std::alloc::System);

use std::hint::black_box;
use std::time::Instant;

const N: usize = 1_000_000;

/// Best time of `reps` runs of `f`, in ns per iteration.
fn best(reps: usize, mut f: impl FnMut() -> f64) -> f64 {
    (0..reps).map(|_| f()).fold(f64::MAX, f64::min) * 1e9 / N as f64
}

fn timed(f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64()
}

fn main() {
    let lifo = best(15, || {
        timed(|| {
            for i in 0..N {
                black_box(Box::new(i));
            }
        })
    });
    let (mut seq_alloc, mut seq_free) = (f64::MAX, f64::MAX);
    for _ in 0..10 {
        let t = Instant::now();
        let v: Vec<Box<usize>> = (0..N).map(Box::new).collect();
        let a = t.elapsed().as_secs_f64();
        let t = Instant::now();
        drop(black_box(v));
        seq_alloc = seq_alloc.min(a);
        seq_free = seq_free.min(t.elapsed().as_secs_f64());
    }
    let realloc = best(15, || {
        timed(|| {
            for _ in 0..N {
                let mut s = String::with_capacity(10);
                s.push_str("key-123-4567");
                black_box(&s);
            }
        })
    });
    // A fixed shuffle (xorshift, Fisher-Yates).
    let mut order: Vec<usize> = (0..N).collect();
    let mut x = 88_172_645_463_325_252u64;
    for i in (1..N).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    let random_free = best(6, || {
        let mut v: Vec<Option<Box<[u64; 3]>>> = (0..N).map(|i| Some(Box::new([i as u64; 3]))).collect();
        let t = timed(|| {
            for &i in &order {
                drop(v[i].take());
            }
        });
        drop(v);
        t
    });
    let ns = |v: f64| v * 1e9 / N as f64;
    println!(
        "lifo={lifo:.2} seq_alloc={:.2} seq_free={:.2} realloc={realloc:.2} random_free={random_free:.2}",
        ns(seq_alloc),
        ns(seq_free)
    );
}
