//! Per-thread tracker state: the reentrancy guard and the pending stop.
//!
//! `const`-initialised thread-locals without destructors: reading them
//! never allocates, and they stay usable while the thread's other
//! thread-local destructors run (which may allocate and free).
//!
//! With `stw` this is one handshake in two files, and they name each other
//! on purpose: the stop's signal handler asks here whether its thread is
//! inside the tracker (`defer_stop`), and a thread leaving the tracker with
//! a stop pending parks through `stw::park`. Neither half means anything
//! without the other.

use core::cell::Cell;
use core::sync::atomic::{AtomicU8, Ordering::Relaxed};

const IN_TRACKER: u8 = 1;
const STOP_PENDING: u8 = 2;
const IN_LOCK: u8 = 4;
const INTERNAL: u8 = 8;
/// Updates are queued (see [`defer`]): checked with the state on leaving.
const HAS_DEFERRED: u8 = 16;
/// Signals came that want a dump on this thread (a process without the
/// runtime's helper: a forked child) while it was inside the tracker:
/// raised again as it leaves (see [`defer_signal`]).
const RESIGNAL: u8 = 32;

// Every read-modify-write of the state is one instruction: a signal
// handler running on the same thread (the suspend handler sets
// STOP_PENDING) can never fall between a read and a write. No other thread
// touches it, so the instruction needs no bus lock (`lock or` and a
// `lock cmpxchg` loop cost more than the rest of the tracker on a free).
thread_local! {
    static STATE: AtomicU8 = const { AtomicU8::new(0) };
    /// The signals [`RESIGNAL`] stands for (bit per signal).
    static RESIGNALS: core::sync::atomic::AtomicU64 = const { core::sync::atomic::AtomicU64::new(0) };
}

/// Sets `bits` in this thread's state.
#[inline(always)]
fn set(bits: u8) {
    let _ = STATE.try_with(|s| {
        // SAFETY: one `or` to this thread's own, valid state byte; flags are
        // clobbered (declared by omitting preserves_flags).
        unsafe { core::arch::asm!("or byte ptr [{p}], {b}", p = in(reg) s.as_ptr(), b = in(reg_byte) bits, options(nostack)) }
    });
}

/// Clears `bits` in this thread's state.
#[inline(always)]
fn clear(bits: u8) {
    let _ = STATE.try_with(|s| {
        // SAFETY: as in `set`, with `and`.
        unsafe { core::arch::asm!("and byte ptr [{p}], {b}", p = in(reg) s.as_ptr(), b = in(reg_byte) !bits, options(nostack)) }
    });
}

#[inline(always)]
fn get() -> Option<u8> {
    STATE.try_with(|s| s.load(Relaxed)).ok()
}

/// Whether the thread is outside the tracker with nothing set: no tracker
/// lock held, not the runtime's own call, no stop and no update waiting.
///
/// Then a call that takes no lock, maps nothing and captures no site (the
/// table's common cases) may run without an [`Enter`]: a stop arriving
/// meanwhile parks the thread in the signal handler, which is safe since
/// it holds no tracker lock, and a signal handler allocating meanwhile
/// finds the thread outside the tracker, as in the program's own code.
/// The slot being written belongs to a block no other call can see: it is
/// allocated and not yet returned, or not yet given back to the allocator.
#[inline(always)]
pub fn idle() -> bool {
    get() == Some(0)
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
        // A signal handler between the read and the `or` leaves the state
        // as it found it (its own guard drops before it returns).
        let prev = get().unwrap_or(IN_TRACKER);
        set(IN_TRACKER);
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

    /// Whether this thread held a tracker lock on entering (a signal
    /// handler interrupted the tracker).
    #[inline]
    pub fn in_lock(&self) -> bool {
        self.prev & IN_LOCK != 0
    }

    /// Whether this is the common case: the outermost entry, not internal,
    /// and no tracker lock held on this thread.
    #[inline]
    pub fn plain(&self) -> bool {
        self.prev & (IN_TRACKER | INTERNAL | IN_LOCK) == 0
    }
}

impl Enter {
    /// Leaves the tracker (parking first if a stop is pending); returns
    /// whether updates a signal handler queued on this thread wait and can
    /// be applied now (no tracker lock held further up).
    #[inline]
    pub fn leave(self) -> bool {
        let s = self.exit();
        core::mem::forget(self);
        s & HAS_DEFERRED != 0 && s & IN_LOCK == 0
    }

    /// The state after leaving.
    #[inline]
    fn exit(&self) -> u8 {
        if self.nested() {
            return get().unwrap_or(0);
        }
        // Leave first: a stop requested from here on parks in the signal
        // handler. One requested before is pending: honour it. (A second
        // stop between the read and the clear parks in the handler; the
        // park below then finds no stop under way and returns.)
        clear(IN_TRACKER);
        let s = get().unwrap_or(0);
        if s & (STOP_PENDING | RESIGNAL) != 0 {
            pending_now(s);
            return get().unwrap_or(0);
        }
        s
    }
}

impl Drop for Enter {
    #[inline]
    fn drop(&mut self) {
        self.exit();
    }
}

/// Honours a stop that came while the thread was inside the tracker (out
/// of line: it saves every register), then raises again the signals that
/// were deferred meanwhile.
#[cold]
#[inline(never)]
fn pending_now(s: u8) {
    if s & STOP_PENDING != 0 {
        clear(STOP_PENDING);
        crate::stop::stw::park(&crate::stop::stw::current_regs());
    }
    if s & RESIGNAL != 0 {
        clear(RESIGNAL);
        let sigs = RESIGNALS.try_with(|r| r.swap(0, Relaxed)).unwrap_or(0);
        let (me, saved) = (crate::sys::gettid(), crate::sys::errno());
        for sig in 1..64 {
            if sigs & (1 << sig) != 0 {
                // Delivered before tgkill returns (unless the program
                // blocks it now: then when it unblocks it), outside the
                // tracker: its handler dumps this time.
                let _ = crate::sys::tgkill(me, sig);
            }
        }
        // The allocation returning may have set it (ENOMEM).
        crate::sys::set_errno(saved);
    }
}

/// Called by a handler that would dump on its own thread (no helper in
/// this process): if the thread is inside the tracker (it may hold the
/// locks the dump takes, or be dumping), notes `sig` to be raised again as
/// it leaves and returns true; the handler then returns at once.
pub fn defer_signal(sig: i32) -> bool {
    if !(1..64).contains(&sig) {
        return false;
    }
    RESIGNALS
        .try_with(|r| {
            if get().unwrap_or(0) & (IN_TRACKER | IN_LOCK) == 0 {
                return false;
            }
            r.fetch_or(1 << sig, Relaxed);
            set(RESIGNAL);
            true
        })
        .unwrap_or(false)
}

/// Whether the thread is inside the tracker (or holds one of its locks).
pub fn inside() -> bool {
    get().is_some_and(|s| s & (IN_TRACKER | IN_LOCK) != 0)
}

/// Called by the suspend handler: if the thread is inside the tracker,
/// notes the stop as pending and returns true (the thread parks later).
pub fn defer_stop() -> bool {
    STATE
        .try_with(|s| {
            if s.load(Relaxed) & IN_TRACKER != 0 {
                set(STOP_PENDING);
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
        set(IN_LOCK);
        Locked(())
    }
}

impl Drop for Locked {
    #[inline]
    fn drop(&mut self) {
        clear(IN_LOCK);
    }
}

/// Whether this thread holds a tracker lock (so the caller, a nested
/// allocation from a signal handler, must not take one).
#[inline]
pub fn in_lock() -> bool {
    STATE.try_with(|s| s.load(Relaxed) & IN_LOCK != 0).unwrap_or(false)
}

/// Whether updates a signal handler deferred on this thread wait (a
/// free of a block must then first cancel its queued insert, if any).
#[inline(always)]
pub fn has_deferred() -> bool {
    get().is_some_and(|s| s & HAS_DEFERRED != 0)
}

/// A table update deferred by [`in_lock`].
#[derive(Clone, Copy, Debug)]
pub enum Deferred {
    /// No operation.
    None,
    /// Insert this allocation.
    Insert(crate::entry::Entry),
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
            set(HAS_DEFERRED);
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
                clear(HAS_DEFERRED);
                // A signal handler may have queued (and set the flag) just
                // before the clear: look again.
                if q.len.load(Ordering::Acquire) == 0 {
                    return None;
                }
                set(HAS_DEFERRED);
                continue;
            }
            let op = q.ops[n - 1].get();
            if q.len.compare_exchange(n, n - 1, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                return Some(op);
            }
        })
        .ok()
        .flatten()
}

/// Marks the runtime's own calls into libc (thread creation, `setenv`,
/// `atexit` at start-up) so that the allocations libc makes for them are
/// not recorded: they belong to the tracker, not to the program.
pub struct Internal(bool);

impl Internal {
    /// Enters an internal section.
    pub fn new() -> Internal {
        let was = get().map(|s| s & INTERNAL != 0);
        set(INTERNAL);
        Internal(was.unwrap_or(true))
    }
}

impl Drop for Internal {
    fn drop(&mut self) {
        if !self.0 {
            clear(INTERNAL);
        }
    }
}

/// This thread's guard state (address, size): never a root.
pub(crate) fn tls_state() -> (u64, u64) {
    STATE.try_with(|v| (v as *const _ as u64, core::mem::size_of_val(v) as u64)).unwrap_or((0, 0))
}

/// This thread's deferred queue (address, size): processed entries keep the addresses of blocks, freed ones too; never a root.
pub(crate) fn tls_deferred() -> (u64, u64) {
    DEFERRED.try_with(|v| (v as *const _ as u64, core::mem::size_of_val(v) as u64)).unwrap_or((0, 0))
}
