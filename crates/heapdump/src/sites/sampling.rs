//! Poisson sampling of allocation sites (`HEAPDUMP_BACKTRACE=sampled`).
#![forbid(unsafe_code)]

use crate::sys;

thread_local! {
    static SAMPLE: core::cell::Cell<(i64, u64)> = const { core::cell::Cell::new((0, 0)) };
}

/// Decides whether this allocation gets a site under Poisson sampling with
/// mean `mean` bytes: a per-thread countdown drawn from an exponential
/// distribution, as jemalloc and tcmalloc do.
#[inline]
pub(crate) fn sample(size: u64, mean: u64) -> bool {
    SAMPLE
        .try_with(|c| {
            let (left, rng) = c.get();
            let left = left - size as i64;
            if left > 0 && rng != 0 {
                c.set((left, rng));
                return false;
            }
            draw(c, left, rng, mean)
        })
        .unwrap_or(false)
}

/// The countdown ran out (or was never started): draws the next one.
#[cold]
#[inline(never)]
pub(crate) fn draw(c: &core::cell::Cell<(i64, u64)>, left: i64, mut rng: u64, mean: u64) -> bool {
    if rng == 0 {
        rng = (c as *const _ as u64) ^ sys::monotonic_ns() | 1;
    }
    // xorshift64*
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    let u = ((rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
    let hit = left <= 0;
    let next = (-(u.ln()) * mean as f64) as i64 + 1;
    c.set((if hit { next } else { left }, rng));
    hit
}

/// Where this thread's countdown lives (address, size): no root.
pub(crate) fn tls_countdown() -> (u64, u64) {
    SAMPLE.try_with(|v| (v as *const _ as u64, core::mem::size_of_val(v) as u64)).unwrap_or((0, 0))
}
