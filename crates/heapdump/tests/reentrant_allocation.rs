//! Re-entering the tracker: an inner allocator that allocates through the
//! global allocator from inside its own `alloc`, and a signal handler that
//! allocates and frees while its thread is inside the tracker (possibly
//! holding a table lock). Nothing deadlocks, and the table stays exact.
//!
//! The inner allocator is a lock-free bump allocator so that allocating in
//! a signal handler is itself safe (glibc's malloc is not).
//!
//! No libtest harness (`harness = false`: the reason is in Cargo.toml): `main`
//! lists the tests and runs them one at a time on the main thread; a test
//! missing from that list never runs.
// The test plays the host program: its own calls into the C library.
#![allow(clippy::disallowed_methods)]

mod common;

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

struct Bump;
static BASE: AtomicUsize = AtomicUsize::new(0);
static NEXT: AtomicUsize = AtomicUsize::new(0);
static CALLS: AtomicU64 = AtomicU64::new(0);
const ARENA: usize = 8 << 30;

// SAFETY: hands out disjoint, aligned ranges of one mapping; never reuses.
unsafe impl GlobalAlloc for Bump {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let mut base = BASE.load(Ordering::Acquire);
        if base == 0 {
            // SAFETY: anonymous mapping; lazily committed by the kernel.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    ARENA,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            assert_ne!(p, libc::MAP_FAILED);
            match BASE.compare_exchange(0, p as usize, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => base = p as usize,
                Err(b) => {
                    // SAFETY: our losing mapping, unused.
                    unsafe { libc::munmap(p, ARENA) };
                    base = b;
                }
            }
        }
        let size = l.size().max(1);
        let mut off = NEXT.load(Ordering::Relaxed);
        loop {
            let start = (base + off).next_multiple_of(l.align()) - base;
            if start + size > ARENA {
                return std::ptr::null_mut();
            }
            match NEXT.compare_exchange_weak(off, start + size, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => {
                    // Every 64th call re-enters the global allocator from inside
                    // this one, as an unwinder or a logging allocator might.
                    if CALLS.fetch_add(1, Ordering::Relaxed) % 64 == 0 {
                        let v: Vec<u8> = Vec::with_capacity(24);
                        drop(v);
                    }
                    return (base + start) as *mut u8;
                }
                Err(o) => off = o,
            }
        }
    }
    unsafe fn dealloc(&self, _p: *mut u8, _l: Layout) {}
}

#[global_allocator]
static ALLOC: heapdump::Tracked<Bump> = heapdump::Tracked::new(Bump);

static RING: [AtomicPtr<[u64; 4]>; 16] = [const { AtomicPtr::new(std::ptr::null_mut()) }; 16];
static TICKS: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_alarm(_: i32) {
    let t = TICKS.fetch_add(1, Ordering::Relaxed);
    let b = Box::into_raw(Box::new([t; 4]));
    let old = RING[(t % 16) as usize].swap(b, Ordering::AcqRel);
    if !old.is_null() {
        // SAFETY: every ring entry came from Box::into_raw above.
        drop(unsafe { Box::from_raw(old) });
    }
}

fn main() {
    common::run(&[("signal_handlers_and_nested_allocators_stay_exact", signal_handlers_and_nested_allocators_stay_exact)]);
}

fn signal_handlers_and_nested_allocators_stay_exact() {
    let before = heapdump::stats();
    // SAFETY: installing a plain handler and a 50 µs interval timer.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_alarm as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigaction(libc::SIGALRM, &sa, std::ptr::null_mut());
        let it =
            libc::itimerval { it_interval: libc::timeval { tv_sec: 0, tv_usec: 50 }, it_value: libc::timeval { tv_sec: 0, tv_usec: 50 } };
        libc::setitimer(libc::ITIMER_REAL, &it, std::ptr::null_mut());
    }
    let mut rng = common::Rng(42);
    let mut held: Vec<Box<[u8]>> = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(1500);
    while std::time::Instant::now() < deadline {
        for _ in 0..1000 {
            let r = rng.next();
            if r % 3 == 0 && !held.is_empty() {
                let i = (r >> 8) as usize % held.len();
                held.swap_remove(i);
            } else if held.len() < 2000 {
                held.push(vec![0u8; 1 + (r >> 16) as usize % 512].into_boxed_slice());
            }
        }
    }
    // SAFETY: disarming the timer.
    unsafe {
        let it =
            libc::itimerval { it_interval: libc::timeval { tv_sec: 0, tv_usec: 0 }, it_value: libc::timeval { tv_sec: 0, tv_usec: 0 } };
        libc::setitimer(libc::ITIMER_REAL, &it, std::ptr::null_mut());
        libc::signal(libc::SIGALRM, libc::SIG_IGN);
    }
    let ticks = TICKS.load(Ordering::Relaxed);
    let ring_live = RING.iter().filter(|p| !p.load(Ordering::Relaxed).is_null()).count() as u64;
    let s = heapdump::stats();
    assert_eq!(s.untracked, 0, "no update was dropped");
    // held's boxes, held's buffer, and the ring's boxes.
    assert_eq!(s.live_count, before.live_count + held.len() as u64 + u64::from(held.capacity() > 0) + ring_live);
    assert!(ticks > 100, "the handler ran often enough to interrupt the tracker ({ticks} ticks)");
    let n = held.len() as u64;
    drop(held);
    assert_eq!(heapdump::stats().live_count, before.live_count + ring_live);
    println!("{ticks} signal-handler allocations, {n} blocks held, {} calls into the inner allocator", CALLS.load(Ordering::Relaxed));
}
