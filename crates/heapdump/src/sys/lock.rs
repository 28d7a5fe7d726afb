//! A spin lock that never allocates, for the tracker's tables.
//!
//! Hand-written because it is taken inside the allocator: `std::sync::Mutex`
//! may not allocate today but promises nothing, and a futex-based lock would
//! need its own care around fork. Critical sections are a few dozen
//! instructions (a hash-table probe); under contention it spins with
//! `pause` and then yields. Fork safety comes from `pthread_atfork`
//! handlers (see `lib.rs`) that take every lock before `fork` and release
//! them on both sides.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};

/// A lock around `T`.
pub struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: access to `value` is serialised by `locked`.
unsafe impl<T: Send> Sync for SpinLock<T> {}
// SAFETY: the lock owns its `T` like a Mutex does: moving it to another
// thread moves the `T`, which is Send.
unsafe impl<T: Send> Send for SpinLock<T> {}

impl<T> SpinLock<T> {
    /// A new unlocked lock.
    pub const fn new(value: T) -> Self {
        SpinLock { locked: AtomicBool::new(false), value: UnsafeCell::new(value) }
    }

    /// Takes the lock, spinning.
    #[inline]
    pub fn lock(&self) -> Guard<'_, T> {
        if self.locked.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            self.lock_slow();
        }
        Guard { lock: self }
    }

    #[cold]
    fn lock_slow(&self) {
        let mut spins = 0u32;
        loop {
            while self.locked.load(Ordering::Relaxed) {
                spins += 1;
                if spins < 64 {
                    core::hint::spin_loop();
                } else {
                    crate::sys::yield_now();
                }
            }
            if self.locked.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                return;
            }
        }
    }

    /// Takes the lock for `pthread_atfork`'s prepare handler; released by
    /// [`SpinLock::force_unlock`].
    pub fn lock_for_fork(&self) {
        core::mem::forget(self.lock());
    }

    /// Releases a lock taken by [`SpinLock::lock_for_fork`].
    ///
    /// # Safety
    /// The caller must have taken the lock with `lock_for_fork` (or, in a
    /// forked child, the lock's holder must no longer exist).
    pub unsafe fn force_unlock(&self) {
        self.locked.store(false, Ordering::Release);
    }

    /// The value without locking.
    ///
    /// # Safety
    /// No other thread may be mutating it: used only with the world stopped
    /// (every other thread parked outside the tracker) or in a forked child.
    pub unsafe fn get_unlocked(&self) -> &T {
        // SAFETY: the caller guarantees no concurrent mutation.
        unsafe { &*self.value.get() }
    }
}

/// Holds the lock; releases it on drop.
pub struct Guard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> core::ops::Deref for Guard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard's existence means the lock is held.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> core::ops::DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard's existence means the lock is held, exclusively.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for Guard<'_, T> {
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}

/// Takes every lock of `locks` for `pthread_atfork`'s prepare handler.
pub fn lock_all_for_fork<T>(locks: &[SpinLock<T>]) {
    for l in locks {
        l.lock_for_fork();
    }
}

/// Releases every lock of `locks` after a fork.
///
/// # Safety
/// Only after [`lock_all_for_fork`] on the same locks by this thread (or,
/// in the child, by the thread that forked).
pub unsafe fn unlock_all_after_fork<T>(locks: &[SpinLock<T>]) {
    for l in locks {
        // SAFETY: the caller took every lock with `lock_all_for_fork` on this
        // thread (or the thread that forked this child), so each is held and
        // held by us.
        unsafe { l.force_unlock() };
    }
}
