//! The tracker: what every allocation, free and realloc does, for
//! [`Tracked`] (a `GlobalAlloc`) and for the preload library's C
//! functions alike (through `hooks`).

use crate::config::{self, Config};
use crate::entry::Entry;
use crate::sites::sampling::sample;
use crate::state::{state, State};
use crate::stop::guard;
use crate::stop::stw;
use crate::table::marks;
use crate::trigger::output::{auto_dump, Why};
use crate::trigger::threshold_crossed;
use crate::{sites, Reason};
use core::alloc::{GlobalAlloc, Layout};
use core::sync::atomic::Ordering;

// --- the sequences every entry point follows -------------------------------------

/// What an allocator gives the tracker's sequences for the block at hand:
/// the (size, alignment) the program freed it with when it says (Rust's
/// `Layout`), else nothing (C's `free`).
type Known = Option<Layout>;

/// An allocation, for `Tracked` and the preload library alike: `alloc`
/// makes the block (null when the allocator fails); `free` releases a
/// block whose free a signal handler postponed. Inlined into each entry
/// point, so that a site's frames start at the function the program called.
#[inline(always)]
pub(crate) fn allocate(size: usize, align: usize, alloc: impl FnOnce() -> *mut u8, free: &dyn Fn(*mut u8, usize, usize)) -> *mut u8 {
    let st = state();
    let site = wants_site(st.config(), size);
    if !site && guard::idle() {
        // The common case without the guard (see `guard::idle`): a small
        // block whose slot's page is already in use. Anything else enters,
        // after the allocation (and gets no site).
        let p = alloc();
        if !p.is_null() {
            if let Some(live) = st.table.try_insert(&Entry::new(p, size, align, 0, false)) {
                if live >= st.next_threshold.load(Ordering::Relaxed) {
                    threshold_entered(st, live, free);
                }
                return p;
            }
        }
        return allocated_rest(st, p, size, align, free);
    }
    let g = guard::Enter::new();
    let p = alloc();
    allocated(st, g, p, size, align, site, free)
}

/// Records `p` (null: the allocator failed) inside the tracker, and leaves.
#[inline(always)]
fn allocated(
    st: &State,
    g: guard::Enter,
    p: *mut u8,
    size: usize,
    align: usize,
    site: bool,
    free: &dyn Fn(*mut u8, usize, usize),
) -> *mut u8 {
    if p.is_null() {
        drop(g);
        alloc_failed(st);
        return p;
    }
    record(st, p, size, align, &g, site);
    leave(st, g, free);
    p
}

/// The rest of an allocation the common case could not record: `p` is the
/// block (null: the allocator failed), which gets no site.
#[cold]
#[inline(never)]
fn allocated_rest(st: &State, p: *mut u8, size: usize, align: usize, free: &dyn Fn(*mut u8, usize, usize)) -> *mut u8 {
    allocated(st, guard::Enter::new(), p, size, align, false, free)
}

/// A free: `dealloc` gives `p` back to the allocator, now or (from a
/// signal handler inside the tracker) once its entry is gone.
#[inline(always)]
pub(crate) fn deallocate(p: *mut u8, known: Known, dealloc: impl FnOnce(), free: &dyn Fn(*mut u8, usize, usize)) {
    let st = state();
    // The common case without the guard (see `guard::idle`): a small block
    // found in its slot. Its address is reused only after the free below,
    // when its slot is empty.
    if guard::idle() {
        let taken = match known {
            Some(l) => st.table.try_forget(p as u64, table_layout(l)),
            None => st.table.try_take(p as u64),
        };
        if taken {
            dealloc();
            return;
        }
    }
    let g = guard::Enter::new();
    if release(st, p, known) {
        dealloc();
    }
    if g.marked() {
        marks::note_free(p as u64);
    }
    leave(st, g, free);
}

/// Takes `p`'s entry out before it is freed: true when the caller frees it
/// now. A signal handler freeing while its thread holds a tracker lock
/// cannot touch the table: a block whose own insert is still queued was
/// never in it (the insert is cancelled, the block freed at once);
/// otherwise the free itself is postponed too, so that the address is not
/// reused before its entry is gone (false). Only when no memory can be
/// mapped for the queue is the block freed now, its entry staying until an
/// allocation at that address replaces it.
#[inline]
fn release(st: &State, p: *mut u8, known: Known) -> bool {
    if guard::in_lock() {
        let (size, align) = known.map_or((0, 1), |l| (l.size(), l.align()));
        return guard::cancel_insert(p as u64) || !guard::defer(guard::Deferred::Free(p as u64, size, align));
    }
    // A block a signal handler allocated while this thread held a lock,
    // freed before its queued insert was applied: the insert goes, the
    // block was never in the table. (Applied later, it put a freed block
    // back in the table: one too many live.)
    if guard::has_deferred() && guard::cancel_insert(p as u64) {
        return true;
    }
    match known {
        Some(l) => st.table.forget(p as u64, table_layout(l)),
        None => {
            st.table.remove(p as u64, None);
        }
    }
    true
}

/// How a realloc reaches the allocator.
pub struct Realloc<N, R, D> {
    /// A new block of the new size (for a move made by hand).
    pub new: N,
    /// The allocator's own realloc.
    pub realloc: R,
    /// Frees the old block (after a move made by hand).
    pub free_old: D,
}

/// A realloc of `p` to `new_size` bytes. `old_size` says how many bytes
/// `p` holds; `by_hand` when the allocator's realloc cannot take `p` (the
/// preload library's start-up arena). From a signal handler inside the
/// tracker the move is made by hand too, the old block's free postponed.
#[inline(always)]
pub(crate) fn reallocate<N, R, D>(
    p: *mut u8,
    known: Known,
    old_size: impl FnOnce() -> usize,
    new_size: usize,
    by_hand: bool,
    with: Realloc<N, R, D>,
    free: &dyn Fn(*mut u8, usize, usize),
) -> *mut u8
where
    N: FnOnce() -> *mut u8,
    R: FnOnce() -> *mut u8,
    D: FnOnce(),
{
    let st = state();
    let g = guard::Enter::new();
    if by_hand || g.in_lock() {
        let q = (with.new)();
        if q.is_null() {
            drop(g);
            alloc_failed(st);
            return q;
        }
        // SAFETY: `p` holds `old_size` bytes and `q` `new_size` (the
        // allocators' contracts); two live blocks are distinct.
        unsafe { core::ptr::copy_nonoverlapping(p, q, old_size().min(new_size)) };
        let align = known.map_or(1, |l| l.align());
        record(st, q, new_size, align, &g, wants_site(st.config(), new_size));
        if release(st, p, known) {
            (with.free_old)();
        }
        if g.marked() {
            marks::note_free(p as u64);
        }
        leave(st, g, free);
        return q;
    }
    let old = realloc_begin(st, p, known);
    let q = (with.realloc)();
    let align = known.map_or_else(|| old.as_ref().map_or(16, |o| 1usize << o.align_log2), |l| l.align());
    realloc_end(st, &g, old, p, q, new_size, align);
    // A block that moved is gone from its old address (one that stayed was
    // logged again with its new size; a failed realloc leaves the log).
    if g.marked() && !q.is_null() && q != p {
        marks::note_free(p as u64);
    }
    if q.is_null() {
        drop(g);
        alloc_failed(st);
        return q;
    }
    leave(st, g, free);
    q
}

/// A `GlobalAlloc` that tracks every live allocation of the allocator it wraps.
///
/// Only one `Tracked` should be the global allocator of a process: the
/// tables are process-wide.
pub struct Tracked<A> {
    inner: A,
}

impl<A> Tracked<A> {
    /// Wraps `inner`.
    pub const fn new(inner: A) -> Self {
        Tracked { inner }
    }

    /// The wrapped allocator.
    pub fn inner(&self) -> &A {
        &self.inner
    }
}

/// Records a new allocation.
///
/// # Signal safety
/// Does not allocate; takes only tracker locks, never from a thread that
/// holds one (those updates are deferred).
#[inline]
fn record(st: &State, ptr: *mut u8, size: usize, align: usize, g: &guard::Enter, site: bool) {
    if g.internal() {
        return;
    }
    let c = st.config();
    // A nested call (the unwinder's own allocation, a signal handler inside
    // the tracker) gets no site. `capture_site` skips one frame above it:
    // this function.
    let (site, sampled) = match c.backtrace {
        _ if g.nested() || !site => (0, false),
        config::Backtrace::All => {
            // The unwinder's work hides the table's cache miss.
            st.table.prefetch(ptr as u64);
            (capture_site(st, c.max_frames), false)
        }
        _ => (capture_site(st, c.max_frames), true),
    };
    let e = Entry::new(ptr, size, align, site, sampled);
    // The common case (the outermost call, no lock held on entry) cannot
    // hold a lock now: only the others look.
    if !g.plain() && guard::in_lock() {
        if !guard::defer(guard::Deferred::Insert(e)) {
            st.table.untracked.fetch_add(1, Ordering::Relaxed);
        }
        return;
    }
    insert(st, &e);
    if g.marked() {
        marks::note_alloc(&e);
    }
}

/// Puts an entry in the table, then dumps if the live heap crossed the
/// threshold. Inline, so that the table's common case is too.
#[inline(always)]
fn insert(st: &State, e: &Entry) {
    let live = st.table.insert(e);
    if live >= st.next_threshold.load(Ordering::Relaxed) {
        threshold_crossed(st, live);
    }
}

/// Whether a new block of `size` bytes gets a site: always, never, or as
/// the sampler draws (this counts the bytes against its countdown).
#[inline]
pub(crate) fn wants_site(c: &Config, size: usize) -> bool {
    match c.backtrace {
        config::Backtrace::Off => false,
        config::Backtrace::All => true,
        config::Backtrace::Sampled => sample(size as u64, c.sample_mean),
    }
}

#[inline(never)]
fn capture_site(st: &State, max_frames: usize) -> u32 {
    let mut frames = [core::mem::MaybeUninit::<u64>::uninit(); sites::MAX_FRAMES];
    // Skip capture_site and record (usually inlined into alloc).
    let n = sites::capture(&mut frames[..max_frames.min(sites::MAX_FRAMES)], 1, st.config().cached_unwinder);
    // SAFETY: the capture wrote n frames.
    let frames = unsafe { sites::written(&frames, n) };
    // A loop allocating from one place gets the same backtrace again and
    // again: its site is this thread's last one, without the site table's
    // hash, lock and probe.
    if let Some(id) = sites::last_site(frames) {
        return id;
    }
    if guard::in_lock() {
        return 0;
    }
    let id = {
        let _l = guard::Locked::new();
        st.sites.intern(frames)
    };
    if id != 0 {
        sites::remember_last_site(frames, id);
    }
    id
}

/// [`threshold_crossed`] from outside the tracker: enters it first.
#[cold]
#[inline(never)]
fn threshold_entered(st: &State, live: u64, free: &dyn Fn(*mut u8, usize, usize)) {
    let g = guard::Enter::new();
    threshold_crossed(st, live);
    leave(st, g, free);
}

/// Applies the table updates a signal handler deferred on this thread;
/// `free` releases a postponed block in the underlying allocator.
fn apply_deferred(st: &State, free: &dyn Fn(*mut u8, usize, usize)) {
    // No signal handler runs on this thread meanwhile: one freeing a block
    // between the pop of its insert and the insert would find it in
    // neither the queue nor the table, and the insert would then put a
    // freed block in the table. (Rare: only after a handler allocated
    // while this thread held a tracker lock.)
    let _blocked = crate::sys::AsyncSignalsBlocked::new();
    while let Some(op) = guard::pop_deferred() {
        match op {
            guard::Deferred::None => {}
            guard::Deferred::Insert(e) => {
                st.table.insert(&e);
            }
            guard::Deferred::Free(addr, size, align) => {
                {
                    // Layout unknown here: the preload library defers frees without one.
                    st.table.remove(addr, None);
                }
                free(addr as *mut u8, size, align);
            }
        }
    }
    // SAFETY: signals are blocked (`_blocked`) and every update was taken.
    unsafe { guard::release_deferred() };
}

/// Before a realloc of `p`: takes its entry out of the table, since once
/// the underlying realloc returns another thread may receive the address.
/// `layout` is its (size, alignment) when the caller knows it.
#[inline(always)]
fn realloc_begin(st: &State, p: *mut u8, layout: Option<Layout>) -> Option<Entry> {
    // As in `release`: a queued insert of `p` is cancelled (the realloc
    // records the block it returns).
    if guard::has_deferred() && guard::cancel_insert(p as u64) {
        return None;
    }
    let layout = layout.map(table_layout);
    if let Some(l) = layout {
        if let Some(e) = st.table.try_remove(p as u64, l) {
            return Some(e);
        }
    }
    st.table.remove(p as u64, layout)
}

/// A layout as the table's removal hint: size and log2 of the alignment.
#[inline]
fn table_layout(l: Layout) -> (u64, u8) {
    (l.size() as u64, l.align().trailing_zeros() as u8)
}

/// After a realloc from `p` to `q` (null on failure): a failed realloc
/// leaves the old block valid, so its entry goes back; a block that stays
/// in place keeps its site; a moved one is a new allocation.
#[inline]
fn realloc_end(st: &State, g: &guard::Enter, old: Option<Entry>, p: *mut u8, q: *mut u8, new_size: usize, align: usize) {
    if q.is_null() {
        if let Some(e) = old {
            st.table.insert(&e);
        }
        return;
    }
    let e = match old {
        Some(mut e) if q == p => {
            e.size = new_size as u64;
            e
        }
        _ => {
            let site = wants_site(st.config(), new_size);
            if site || !g.plain() {
                return record(st, q, new_size, align, g, site);
            }
            Entry::new(q, new_size, align, 0, false)
        }
    };
    insert(st, &e);
    if g.marked() {
        marks::note_alloc(&e);
    }
}

/// Leaves the tracker: drops the guard (parking if a stop is pending), then
/// applies the updates a signal handler deferred on this thread, unless a
/// tracker lock is still held further up.
#[inline]
fn leave(st: &State, g: guard::Enter, free: &dyn Fn(*mut u8, usize, usize)) {
    if g.leave() {
        apply_deferred(st, free);
    }
}

fn free_with<A: GlobalAlloc>(inner: &A) -> impl Fn(*mut u8, usize, usize) + '_ {
    move |p, size, align| {
        // SAFETY: the pointer came from `inner` with this layout and its free
        // was postponed until its entry left the table.
        unsafe { inner.dealloc(p, Layout::from_size_align_unchecked(size, align)) }
    }
}

// SAFETY: every method forwards to the wrapped allocator with the caller's
// arguments unchanged and returns its result; tracking only observes.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Tracked<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout (GlobalAlloc contract).
        allocate(layout.size(), layout.align(), || unsafe { self.inner.alloc(layout) }, &free_with(&self.inner))
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout (GlobalAlloc contract).
        allocate(layout.size(), layout.align(), || unsafe { self.inner.alloc_zeroed(layout) }, &free_with(&self.inner))
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's block and layout.
        deallocate(ptr, Some(layout), || unsafe { self.inner.dealloc(ptr, layout) }, &free_with(&self.inner));
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let with = Realloc {
            // SAFETY: new_size with the old alignment is a valid layout
            // (GlobalAlloc::realloc's contract); forwarded.
            new: || unsafe { self.inner.alloc(Layout::from_size_align_unchecked(new_size, layout.align())) },
            // SAFETY: forwarded with the caller's arguments.
            realloc: || unsafe { self.inner.realloc(ptr, layout, new_size) },
            // SAFETY: the caller's block with its layout, moved by hand.
            free_old: || unsafe { self.inner.dealloc(ptr, layout) },
        };
        reallocate(ptr, Some(layout), || layout.size(), new_size, false, with, &free_with(&self.inner))
    }
}

/// An allocation failed: dumps once if configured. Not from inside a
/// tracker lock (a signal handler's allocation): the dump would wait for
/// this very thread to leave it.
#[cold]
pub(crate) fn alloc_failed(st: &State) {
    if guard::in_lock() || st.oom_dumped.swap(true, Ordering::AcqRel) {
        return;
    }
    let room = st.failure_room.swap(0, Ordering::AcqRel);
    if room != 0 {
        // SAFETY: the runtime's own reservation, made at start-up, never
        // referenced, and given back once (swapped out above).
        unsafe { crate::sys::munmap(room as *mut u8, crate::state::FAILURE_ROOM) };
    }
    let regs = stw::current_regs();
    auto_dump(st, &Why::plain(Reason::AllocFailure), &regs, false);
}
