//! The tracker's entry points for allocators that are not a `GlobalAlloc`:
//! the `LD_PRELOAD` library's C functions. Not part of the Rust API.

use crate::trigger::fatal;

/// The program's `sigaction` (the preload library interposes it): a
/// fatal signal the runtime holds keeps its handler in front, the
/// program's action being recorded for after the dump.
///
/// # Safety
/// As `sigaction(2)`: `act` and `old` are null or valid.
pub unsafe fn sigaction(sig: i32, act: *const libc::sigaction, old: *mut libc::sigaction) -> i32 {
    // SAFETY: the caller's pointers.
    unsafe { fatal::program_sigaction(sig, act, old) }
}

/// The program's `signal` (and `bsd_signal`: the same BSD semantics
/// as glibc's, restarting system calls and blocking the signal in its
/// handler), through [`sigaction`].
pub fn signal(sig: i32, handler: libc::sighandler_t) -> libc::sighandler_t {
    let mut sa = crate::sys::empty_sigaction();
    sa.sa_sigaction = handler;
    sa.sa_flags = libc::SA_RESTART;
    sa.sa_mask = crate::sys::sigset(false, &[sig]);
    let mut old = crate::sys::empty_sigaction();
    // SAFETY: valid pointers to our locals.
    if unsafe { fatal::program_sigaction(sig, &sa, &mut old) } != 0 {
        return libc::SIG_ERR;
    }
    old.sa_sigaction
}

/// Code was unloaded (`dlclose`): forget the unwind rules cached for
/// addresses other code may now occupy.
pub fn code_unloaded() {
    crate::sites::unwind::forget();
}

pub use crate::tracker::Realloc;

/// An allocation: `alloc` makes the block (null when the allocator fails;
/// the caller sets `errno`); `free` releases a block whose free a signal
/// handler postponed. The sequence `Tracked` follows.
#[inline(always)]
pub fn allocate(size: usize, align: usize, alloc: impl FnOnce() -> *mut u8, free: &dyn Fn(*mut u8, usize, usize)) -> *mut u8 {
    crate::tracker::allocate(size, align, alloc, free)
}

/// A free of `p` (not null): `dealloc` gives it back to the allocator, now
/// or once its entry is gone (from a signal handler inside the tracker).
#[inline(always)]
pub fn deallocate(p: *mut u8, dealloc: impl FnOnce(), free: &dyn Fn(*mut u8, usize, usize)) {
    crate::tracker::deallocate(p, None, dealloc, free)
}

/// A realloc of `p` (not null) to `new_size` (not 0) bytes: `old_size`
/// says how many bytes `p` holds, `by_hand` when the allocator's realloc
/// cannot take it. Null when the allocator fails (the caller sets `errno`).
#[inline(always)]
pub fn reallocate(
    p: *mut u8,
    old_size: impl FnOnce() -> usize,
    new_size: usize,
    by_hand: bool,
    with: Realloc<impl FnOnce() -> *mut u8, impl FnOnce() -> *mut u8, impl FnOnce()>,
    free: &dyn Fn(*mut u8, usize, usize),
) -> *mut u8 {
    crate::tracker::reallocate(p, None, old_size, new_size, by_hand, with, free)
}
