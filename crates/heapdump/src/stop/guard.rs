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
/// A mark is active on this thread (`crate::table::marks`): its
/// allocations and frees also go to the mark's log. Set, the thread is
/// never [`idle`], so that the tracker's common cases (which have no
/// guard to ask) never skip the log; threads without a mark pay nothing
/// more than the test of `idle` they already make.
const MARKED: u8 = 64;

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

    /// Whether a mark was active on this thread on entering and the call
    /// is the outermost one (a nested call, the unwinder's or a signal
    /// handler's inside the tracker, may find the mark's log half
    /// updated: it leaves it alone).
    #[inline]
    pub fn marked(&self) -> bool {
        self.prev & (MARKED | IN_TRACKER) == MARKED
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

/// A table update deferred by [`in_lock`]. `repr(u8)`: `None` is tag 0,
/// so a zero-filled mapping holds only `None`s.
#[derive(Clone, Copy, Debug)]
#[repr(u8)]
pub enum Deferred {
    /// No operation.
    None,
    /// Insert this allocation.
    Insert(crate::entry::Entry),
    /// Remove this address, then free it with this size and alignment.
    Free(u64, usize, usize),
}

/// Updates queued in the thread-local array before any mapping is needed.
const INLINE: usize = 32;
/// Entries of the first mapped segment; segment `k` holds `SEGMENT << k`.
const SEGMENT: usize = 1024;
/// Mapped segments at most: with the inline part, about 67 million
/// updates (a handler allocating for minutes while its thread waits for a
/// lock). Only when a mapping fails is an update dropped (and counted).
const SEGMENTS: usize = 16;

/// A thread's deferred updates: a stack whose first [`INLINE`] entries are
/// thread-local and the rest in segments mapped on demand (never the
/// tracked heap: a handler may be queueing). Pushed by the thread and by
/// signal handlers interrupting it; popped, and its segments unmapped, only
/// with signals blocked (`apply_deferred`).
struct Queue {
    ops: [Cell<Deferred>; INLINE],
    segments: [core::sync::atomic::AtomicPtr<Cell<Deferred>>; SEGMENTS],
    len: core::sync::atomic::AtomicUsize,
}

thread_local! {
    static DEFERRED: Queue = const {
        Queue {
            ops: [const { Cell::new(Deferred::None) }; INLINE],
            segments: [const { core::sync::atomic::AtomicPtr::new(core::ptr::null_mut()) }; SEGMENTS],
            len: core::sync::atomic::AtomicUsize::new(0),
        }
    };
}

/// Where entry `i` of the mapped part lies: (segment, index in it).
fn segment_of(i: usize) -> (usize, usize) {
    let j = i - INLINE + SEGMENT;
    let k = (j.ilog2() - SEGMENT.ilog2()) as usize;
    (k, j - (SEGMENT << k))
}

/// Bytes of segment `k`'s mapping.
fn segment_bytes(k: usize) -> usize {
    (SEGMENT << k) * core::mem::size_of::<Cell<Deferred>>()
}

impl Queue {
    /// Entry `i`, mapping its segment first when `map` (else `None` when
    /// it is not mapped).
    fn slot(&self, i: usize, map: bool) -> Option<&Cell<Deferred>> {
        if i < INLINE {
            return Some(&self.ops[i]);
        }
        let (k, at) = segment_of(i);
        let seg = self.segments.get(k)?;
        let mut p = seg.load(core::sync::atomic::Ordering::Acquire);
        if p.is_null() {
            if !map {
                return None;
            }
            // Zero-filled: every entry reads as `Deferred::None` (tag 0).
            let mine: *mut Cell<Deferred> = crate::sys::mmap_anon(segment_bytes(k)).ok()?.cast();
            p = match seg.compare_exchange(p, mine, core::sync::atomic::Ordering::AcqRel, core::sync::atomic::Ordering::Acquire) {
                Ok(_) => mine,
                Err(theirs) => {
                    // A signal handler mapped it meanwhile: keep theirs.
                    // SAFETY: `mine` was mapped just above and never shared.
                    unsafe { crate::sys::munmap(mine.cast(), segment_bytes(k)) };
                    theirs
                }
            };
        }
        // SAFETY: `p` is segment k's live mapping of `SEGMENT << k` entries
        // (unmapped only when the queue is empty, with signals blocked)
        // and `at` is below that; a zeroed `Cell<Deferred>` is `None`.
        Some(unsafe { &*p.add(at) })
    }
}

/// Queues an update; false only when the memory for it could not be mapped.
pub fn defer(op: Deferred) -> bool {
    use core::sync::atomic::Ordering;
    DEFERRED
        .try_with(|q| loop {
            // The entry is claimed before it is written: a handler queueing
            // in between takes the next one. (Until written it reads as
            // `None`: pops clear what they take.)
            let n = q.len.load(Ordering::Acquire);
            let Some(slot) = q.slot(n, true) else { return false };
            if q.len.compare_exchange(n, n + 1, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                slot.set(op);
                set(HAS_DEFERRED);
                return true;
            }
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
            // Newest first: a handler frees what it allocated lately.
            (0..n).rev().filter_map(|i| q.slot(i, false)).any(|op| match op.get() {
                Deferred::Insert(e) if e.addr == addr => {
                    op.set(Deferred::None);
                    true
                }
                _ => false,
            })
        })
        .unwrap_or(false)
}

/// Takes one queued update. Safe against a signal handler pushing
/// meanwhile: the pop only succeeds if the length did not change. The
/// entry is cleared, so that a later push's slot never shows a stale update.
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
            let slot = q.slot(n - 1, false)?;
            let op = slot.get();
            if q.len.compare_exchange(n, n - 1, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                slot.set(Deferred::None);
                return Some(op);
            }
        })
        .ok()
        .flatten()
}

/// Unmaps the queue's segments once it is empty.
///
/// # Safety
/// Signals must be blocked on this thread (no handler may be queueing or
/// cancelling) and nothing may hold an entry of the queue.
pub unsafe fn release_deferred() {
    use core::sync::atomic::Ordering;
    let _ = DEFERRED.try_with(|q| {
        if q.len.load(Ordering::Acquire) != 0 {
            return;
        }
        for (k, seg) in q.segments.iter().enumerate() {
            let p = seg.swap(core::ptr::null_mut(), Ordering::AcqRel);
            if !p.is_null() {
                // SAFETY: segment k's mapping from `Queue::slot`, with no
                // entry in use (the queue is empty and, as the caller
                // guarantees, no handler can run on this thread).
                unsafe { crate::sys::munmap(p.cast(), segment_bytes(k)) };
            }
        }
    });
}

/// Sets or clears this thread's mark bit (see [`MARKED`]); false when the
/// thread has no thread-local storage left (very late in its teardown).
/// Only `heapdump::testing`'s marks set it.
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
pub fn set_marked(on: bool) -> bool {
    if get().is_none() {
        return false;
    }
    if on {
        set(MARKED)
    } else {
        clear(MARKED)
    }
    true
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

#[cfg(test)]
mod tests {
    use super::*;

    fn insert(addr: u64) -> Deferred {
        Deferred::Insert(crate::entry::Entry::new(addr as *mut u8, 16, 16, 0, false))
    }

    /// A handler that allocates thousands of times while its thread waits
    /// for a tracker lock (a lock another thread holds, under load) loses
    /// no update: the queue goes on into mapped segments, gives every
    /// update back newest first, and unmaps them once drained.
    #[test]
    fn the_queue_keeps_every_update_beyond_its_inline_part() {
        let n = INLINE + SEGMENT + 2 * SEGMENT + 77;
        for i in 0..n as u64 {
            assert!(defer(insert(0x1000 + 16 * i)));
        }
        assert!(has_deferred());
        // A handler freeing blocks whose inserts are queued, in every part.
        for i in [0u64, 5, INLINE as u64 + 3, (INLINE + SEGMENT) as u64 + 9, n as u64 - 1] {
            assert!(cancel_insert(0x1000 + 16 * i), "insert {i} found");
            assert!(!cancel_insert(0x1000 + 16 * i), "insert {i} cancelled once");
        }
        let mut seen = 0;
        let mut expect = n as u64;
        while let Some(op) = pop_deferred() {
            expect -= 1;
            match op {
                Deferred::Insert(e) => {
                    assert_eq!(e.addr, 0x1000 + 16 * expect);
                    seen += 1;
                }
                Deferred::None => {}
                Deferred::Free(..) => panic!("no free was queued"),
            }
        }
        assert_eq!((expect, seen), (0, n - 5));
        assert!(!has_deferred());
        let mapped = DEFERRED.with(|q| q.segments.iter().filter(|s| !s.load(core::sync::atomic::Ordering::Relaxed).is_null()).count());
        assert_eq!(mapped, 3, "the entries beyond the inline part took segments 0, 1 and 2");
        // SAFETY: no handler runs in this test thread, the queue is empty.
        unsafe { release_deferred() };
        let mapped = DEFERRED.with(|q| q.segments.iter().filter(|s| !s.load(core::sync::atomic::Ordering::Relaxed).is_null()).count());
        assert_eq!(mapped, 0);
        // Reused after release: a fresh segment, no stale entry.
        for i in 0..(INLINE + 10) as u64 {
            assert!(defer(Deferred::Free(0x9000 + i, 8, 8)));
        }
        assert!(!cancel_insert(0x1000 + 16 * (INLINE as u64 + 4)));
        let mut left = 0;
        while pop_deferred().is_some() {
            left += 1;
        }
        assert_eq!(left, INLINE + 10);
        // SAFETY: as above.
        unsafe { release_deferred() };
    }

    #[test]
    fn segments_cover_the_indices_in_order() {
        assert_eq!(segment_of(INLINE), (0, 0));
        assert_eq!(segment_of(INLINE + SEGMENT - 1), (0, SEGMENT - 1));
        assert_eq!(segment_of(INLINE + SEGMENT), (1, 0));
        assert_eq!(segment_of(INLINE + 3 * SEGMENT), (2, 0));
        let last = INLINE + (SEGMENT << SEGMENTS) - SEGMENT - 1;
        assert_eq!(segment_of(last), (SEGMENTS - 1, (SEGMENT << (SEGMENTS - 1)) - 1));
    }
}
