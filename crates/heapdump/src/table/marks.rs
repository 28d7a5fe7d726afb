//! A mark's log: the blocks one thread allocated since it set a mark, and
//! has not freed since (the runtime's half of `heapdump::testing`).
//!
//! Why a log of the thread's own, rather than a tag in the live table:
//! the table's entry has no room left (address, size, alignment, a 24-bit
//! site), and a wider entry would cost every program memory per live
//! allocation (issue 41 keeps that unchanged). So a thread with a mark
//! keeps, beside the table, a hash set of the blocks it allocated while
//! the mark is active, in memory mapped from the kernel (never the
//! tracked heap; registered as the runtime's own, so never a root of a
//! dump). Only its own thread ever reads or writes it: no lock, nothing
//! held across a fork (a child keeps its copy, as it keeps the thread).
//!
//! Cost: the mark is a bit of the thread's guard state
//! ([`crate::stop::guard::set_marked`]) which makes the thread never
//! `idle`, so its allocations and frees take the tracker's guarded path,
//! where the guard already read the state: a thread without a mark pays
//! no instruction more on the common path, and one bit test on the
//! guarded path.
//!
//! What it cannot see: a block of the marked thread freed on another
//! thread stays in the log; if another thread gets the same address back
//! before the check, with the same size and the same site (a site is the
//! whole stack, so in practice the same code on the same thread), the
//! check counts it as the marked thread's. An update from a signal
//! handler interrupting the tracker on the marked thread is left out
//! (the log may be half updated under it).
// What only `heapdump::testing` calls (a mark's start, end and reading)
// is unused without that feature; the allocation path's notes are not.
#![cfg_attr(not(feature = "testing"), allow(dead_code))]

use crate::entry::Entry;
use core::cell::Cell;

/// One logged block: its address (0: an empty slot), requested size and
/// site (0: none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Logged {
    /// Its address.
    pub addr: u64,
    /// Its requested size.
    pub size: u64,
    /// Its site (0: none or sampled out).
    pub site: u32,
    _pad: u32,
}

/// Slots of a new log: 96 KiB of address space, touched as it fills.
const FIRST: usize = 4096;

/// The thread's log: an open-addressed table of `cap` slots (a power of
/// two, linear probing, at most half full), `len` of them in use.
struct Log {
    slots: Cell<*mut Logged>,
    cap: Cell<usize>,
    len: Cell<usize>,
    /// Blocks not logged for want of memory: the log is incomplete.
    lost: Cell<u64>,
}

thread_local! {
    static LOG: Log = const { Log { slots: Cell::new(core::ptr::null_mut()), cap: Cell::new(0), len: Cell::new(0), lost: Cell::new(0) } };
}

/// Why a mark could not be set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkError {
    /// This thread already has one.
    Active,
    /// No memory could be mapped for its log (the errno), or the thread
    /// has no thread-local storage left.
    NoMemory(i32),
}

fn bytes(cap: usize) -> usize {
    cap * core::mem::size_of::<Logged>()
}

/// The slot where `addr`'s search starts in a table of `cap` slots.
#[inline]
fn home(addr: u64, cap: usize) -> usize {
    ((addr >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - cap.trailing_zeros())) as usize
}

impl Log {
    /// The slots as a slice.
    ///
    /// # Safety
    /// No other reference to the slots may be alive (only this thread
    /// touches them, and no signal handler: see the module's note).
    #[allow(clippy::mut_from_ref)]
    unsafe fn table(&self) -> &mut [Logged] {
        let p = self.slots.get();
        if p.is_null() {
            return &mut [];
        }
        // SAFETY: `p` is this thread's mapping of `cap` zero-filled (or
        // written) slots, alive until `end`; the caller guarantees no other
        // reference.
        unsafe { core::slice::from_raw_parts_mut(p, self.cap.get()) }
    }

    fn put(t: &mut [Logged], e: Logged) -> bool {
        let mask = t.len() - 1;
        let mut i = home(e.addr, t.len());
        loop {
            if t[i].addr == e.addr {
                t[i] = e;
                return false;
            }
            if t[i].addr == 0 {
                t[i] = e;
                return true;
            }
            i = (i + 1) & mask;
        }
    }

    fn insert(&self, e: Logged) {
        if (self.len.get() + 1) * 2 > self.cap.get() && !self.grow() && self.len.get() + 1 >= self.cap.get() {
            self.lost.set(self.lost.get() + 1);
            return;
        }
        // SAFETY: the one reference, for this call (see `table`).
        let t = unsafe { self.table() };
        if Log::put(t, e) {
            self.len.set(self.len.get() + 1);
        }
    }

    /// Doubles the table; false when no memory could be mapped.
    fn grow(&self) -> bool {
        let cap = self.cap.get() * 2;
        let Ok(p) = crate::sys::mmap_anon(bytes(cap)) else { return false };
        let p: *mut Logged = p.cast();
        // SAFETY: a fresh mapping of `cap` zero-filled slots (a zero slot is
        // an empty one), not yet known to anything else.
        let new = unsafe { core::slice::from_raw_parts_mut(p, cap) };
        // SAFETY: the one reference to the old table (see `table`).
        for e in unsafe { self.table() }.iter().filter(|e| e.addr != 0) {
            Log::put(new, *e);
        }
        let (old, old_cap) = (self.slots.replace(p), self.cap.replace(cap));
        // SAFETY: the old table's mapping, copied and no longer referenced.
        unsafe { crate::sys::munmap(old.cast(), bytes(old_cap)) };
        true
    }

    fn remove(&self, addr: u64) {
        // SAFETY: the one reference, for this call (see `table`).
        let t = unsafe { self.table() };
        if t.is_empty() {
            return;
        }
        let mask = t.len() - 1;
        let mut i = home(addr, t.len());
        while t[i].addr != addr {
            if t[i].addr == 0 {
                return;
            }
            i = (i + 1) & mask;
        }
        // Backward-shift deletion: every entry after the hole that may
        // move into it (its home not cyclically in (i, j]) moves.
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            if t[j].addr == 0 {
                break;
            }
            let k = home(t[j].addr, t.len());
            let stays = if i <= j { i < k && k <= j } else { i < k || k <= j };
            if !stays {
                t[i] = t[j];
                i = j;
            }
        }
        t[i] = Logged::default();
        self.len.set(self.len.get() - 1);
    }
}

/// Sets a mark on the calling thread: from now on its allocations are
/// logged until [`end`].
pub fn begin() -> Result<(), MarkError> {
    LOG.try_with(|l| {
        if !l.slots.get().is_null() {
            return Err(MarkError::Active);
        }
        let p = crate::sys::mmap_anon(bytes(FIRST)).map_err(MarkError::NoMemory)?;
        l.slots.set(p.cast());
        l.cap.set(FIRST);
        l.len.set(0);
        l.lost.set(0);
        // The log is ready before the bit says so.
        if crate::stop::guard::set_marked(true) {
            Ok(())
        } else {
            // SAFETY: the mapping just made, never used.
            unsafe { crate::sys::munmap(p, bytes(FIRST)) };
            l.slots.set(core::ptr::null_mut());
            l.cap.set(0);
            Err(MarkError::NoMemory(0))
        }
    })
    .unwrap_or(Err(MarkError::NoMemory(0)))
}

/// Ends the calling thread's mark (nothing when it has none) and gives
/// its log back.
pub fn end() {
    crate::stop::guard::set_marked(false);
    let _ = LOG.try_with(|l| {
        let p = l.slots.replace(core::ptr::null_mut());
        let cap = l.cap.replace(0);
        l.len.set(0);
        if !p.is_null() {
            // SAFETY: the log's mapping; the bit is clear, so no call of
            // this thread reaches the log any more.
            unsafe { crate::sys::munmap(p.cast(), bytes(cap)) };
        }
    });
}

/// Logs a block the marked thread allocated (or reallocated).
///
/// # Signal safety
/// Does not allocate (maps memory when the log grows); called only by the
/// outermost tracker call on the marked thread.
#[cold]
#[inline(never)]
pub fn note_alloc(e: &Entry) {
    let _ = LOG.try_with(|l| {
        if !l.slots.get().is_null() {
            let site = if e.sampled { 0 } else { e.site };
            l.insert(Logged { addr: e.addr, size: e.size, site, _pad: 0 });
        }
    });
}

/// Forgets a block the marked thread freed (or moved).
///
/// # Signal safety
/// As for [`note_alloc`]; maps nothing.
#[cold]
#[inline(never)]
pub fn note_free(addr: u64) {
    let _ = LOG.try_with(|l| l.remove(addr));
}

/// Blocks in the calling thread's log.
pub fn len() -> usize {
    LOG.try_with(|l| l.len.get()).unwrap_or(0)
}

/// Calls `f` with each block in the calling thread's log, in no order, and
/// returns how many blocks could not be logged for want of memory. Signals
/// are blocked meanwhile (a handler's free would change the table under
/// the walk); `f` must not allocate or free through the tracker on this
/// thread while the mark is active unless the thread is internal.
pub fn for_each(mut f: impl FnMut(Logged)) -> u64 {
    let _blocked = crate::sys::AsyncSignalsBlocked::new();
    LOG.try_with(|l| {
        // SAFETY: signals are blocked and the caller does not reach the log
        // from `f`: this is the one reference.
        let t = unsafe { l.table() };
        for e in t.iter().filter(|e| e.addr != 0) {
            f(*e);
        }
        l.lost.get()
    })
    .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random inserts and removals against a set, through two growths and
    /// the wrap-around at the table's end: the log holds exactly the
    /// set's blocks.
    #[test]
    fn the_log_matches_a_model() {
        std::thread::spawn(|| {
            begin().unwrap();
            assert_eq!(begin(), Err(MarkError::Active));
            let mut model = std::collections::BTreeMap::new();
            let mut x = 0x2545_f491_4f6c_dd1du64;
            for step in 0..60_000u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let addr = 0x5555_0000_0000 + (x % 20_000) * 16;
                if model.contains_key(&addr) && step % 3 != 0 {
                    note_free(addr);
                    model.remove(&addr);
                } else {
                    let e = Entry { addr, size: x % 500, align_log2: 4, site: (x >> 40) as u32 & 0xff, sampled: false };
                    note_alloc(&e);
                    model.insert(addr, (e.size, e.site));
                }
            }
            // Removing what is not there changes nothing.
            note_free(0x10);
            let mut seen = std::collections::BTreeMap::new();
            assert_eq!(for_each(|e| assert!(seen.insert(e.addr, (e.size, e.site)).is_none())), 0);
            assert_eq!(seen, model);
            LOG.with(|l| assert!(l.cap.get() > FIRST && l.len.get() == model.len()));
            end();
            assert_eq!(for_each(|_| panic!("no log after the end")), 0);
            begin().unwrap();
            end();
        })
        .join()
        .unwrap();
    }
}
