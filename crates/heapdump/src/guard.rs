//! Per-thread tracker state: the reentrancy guard and the pending stop.
//!
//! `const`-initialised thread-locals without destructors: reading them
//! never allocates, and they stay usable while the thread's other
//! thread-local destructors run (which may allocate and free).

use core::cell::Cell;
use core::sync::atomic::{AtomicU8, Ordering::Relaxed};

const IN_TRACKER: u8 = 1;
const STOP_PENDING: u8 = 2;
const IN_LOCK: u8 = 4;
const INTERNAL: u8 = 8;

// Every read-modify-write of the state is one atomic instruction: a signal
// handler running on the same thread (the suspend handler sets
// STOP_PENDING) can never fall between a read and a write.
thread_local! {
    static STATE: AtomicU8 = const { AtomicU8::new(0) };
}

/// Marks the thread as inside the tracker for the guard's life. A stop
/// requested meanwhile is honoured when the outermost guard drops.
pub struct Enter {
    /// The thread's state before entering.
    prev: u8,
}

impl Enter {
    /// Enters the tracker.
    #[inline]
    pub fn new() -> Enter {
        // Without thread-local storage (very late in thread teardown) treat
        // the call as nested: record, but capture no backtrace.
        let prev = STATE.try_with(|s| s.fetch_or(IN_TRACKER, Relaxed)).unwrap_or(IN_TRACKER);
        Enter { prev }
    }

    /// Whether the tracker was already active on this thread (an
    /// allocation made by the unwinder, a signal handler, or a dump).
    #[inline]
    pub fn nested(&self) -> bool {
        self.prev & IN_TRACKER != 0
    }

    /// Whether the call comes from the runtime itself (see [`Internal`]).
    #[inline]
    pub fn internal(&self) -> bool {
        self.prev & INTERNAL != 0
    }
}

impl Drop for Enter {
    #[inline]
    fn drop(&mut self) {
        if self.nested() {
            return;
        }
        let pending = STATE.try_with(|s| s.fetch_and(IN_LOCK | INTERNAL, Relaxed) & STOP_PENDING != 0);
        if pending == Ok(true) {
            crate::stw::park(&crate::stw::current_regs());
        }
    }
}

/// Called by the suspend handler: if the thread is inside the tracker,
/// notes the stop as pending and returns true (the thread parks later).
pub fn defer_stop() -> bool {
    STATE
        .try_with(|s| {
            if s.load(Relaxed) & IN_TRACKER != 0 {
                s.fetch_or(STOP_PENDING, Relaxed);
                true
            } else {
                false
            }
        })
        .unwrap_or(false)
}

/// Marks the thread as holding a tracker lock for the guard's life, so a
/// signal handler that allocates on this thread defers its table update
/// instead of spinning on a lock its own thread holds.
pub struct Locked(());

impl Locked {
    /// Enters a locked section.
    #[inline]
    pub fn new() -> Locked {
        let _ = STATE.try_with(|s| s.fetch_or(IN_LOCK, Relaxed));
        Locked(())
    }
}

impl Drop for Locked {
    #[inline]
    fn drop(&mut self) {
        let _ = STATE.try_with(|s| s.fetch_and(!IN_LOCK, Relaxed));
    }
}

/// Whether this thread holds a tracker lock (so the caller, a nested
/// allocation from a signal handler, must not take one).
#[inline]
pub fn in_lock() -> bool {
    STATE.try_with(|s| s.load(Relaxed) & IN_LOCK != 0).unwrap_or(false)
}

/// A table update deferred by [`in_lock`].
#[derive(Clone, Copy, Debug)]
pub enum Deferred {
    /// No operation.
    None,
    /// Insert this allocation.
    Insert(crate::table::Entry),
    /// Remove this address, then free it with this size and alignment.
    Free(u64, usize, usize),
}

const QUEUE: usize = 32;

struct Queue {
    ops: [Cell<Deferred>; QUEUE],
    len: core::sync::atomic::AtomicUsize,
}

thread_local! {
    static DEFERRED: Queue = const { Queue { ops: [const { Cell::new(Deferred::None) }; QUEUE], len: core::sync::atomic::AtomicUsize::new(0) } };
}

/// Queues an update; false when the queue is full.
pub fn defer(op: Deferred) -> bool {
    use core::sync::atomic::Ordering;
    DEFERRED
        .try_with(|q| {
            let n = q.len.load(Ordering::Relaxed);
            if n >= QUEUE {
                return false;
            }
            q.ops[n].set(op);
            q.len.store(n + 1, Ordering::Release);
            true
        })
        .unwrap_or(false)
}

/// Cancels a queued insert of `addr` (an allocation freed before its
/// deferred insert was applied); returns whether there was one.
pub fn cancel_insert(addr: u64) -> bool {
    use core::sync::atomic::Ordering;
    DEFERRED
        .try_with(|q| {
            let n = q.len.load(Ordering::Acquire);
            for op in &q.ops[..n.min(QUEUE)] {
                if let Deferred::Insert(e) = op.get() {
                    if e.addr == addr {
                        op.set(Deferred::None);
                        return true;
                    }
                }
            }
            false
        })
        .unwrap_or(false)
}

/// Takes one queued update. Safe against a signal handler pushing
/// meanwhile: the pop only succeeds if the length did not change.
pub fn pop_deferred() -> Option<Deferred> {
    use core::sync::atomic::Ordering;
    DEFERRED
        .try_with(|q| loop {
            let n = q.len.load(Ordering::Acquire);
            if n == 0 {
                return None;
            }
            let op = q.ops[n - 1].get();
            if q.len.compare_exchange(n, n - 1, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                return Some(op);
            }
        })
        .ok()
        .flatten()
}

/// Whether updates are queued (fast check).
#[inline]
pub fn has_deferred() -> bool {
    DEFERRED.try_with(|q| q.len.load(core::sync::atomic::Ordering::Relaxed) != 0).unwrap_or(false)
}

/// Marks the runtime's own calls into libc (thread creation, `setenv`,
/// `atexit` at start-up) so that the allocations libc makes for them are
/// not recorded: they belong to the tracker, not to the program.
pub struct Internal(bool);

impl Internal {
    /// Enters an internal section.
    pub fn new() -> Internal {
        let was = STATE.try_with(|s| s.fetch_or(INTERNAL, Relaxed) & INTERNAL != 0);
        Internal(was.unwrap_or(true))
    }
}

impl Drop for Internal {
    fn drop(&mut self) {
        if !self.0 {
            let _ = STATE.try_with(|s| s.fetch_and(!INTERNAL, Relaxed));
        }
    }
}
