//! A cache hint for the graph walks, whose time is mostly cache misses on
//! arrays of tens of millions of entries visited in an order known a few
//! steps ahead.

/// Starts loading the cache line holding `slice[i]` (nothing when `i` is
/// out of bounds), so that a later read of it does not wait.
#[inline(always)]
pub(crate) fn prefetch<T>(slice: &[T], i: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(x) = slice.get(i) {
        #[allow(unsafe_code)]
        // SAFETY: a prefetch reads nothing the program observes and never
        // faults; the address is that of an element of a live slice.
        unsafe {
            core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>((x as *const T).cast())
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (slice, i);
}
