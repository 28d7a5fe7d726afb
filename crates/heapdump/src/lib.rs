//! Track every live heap allocation of a Rust program and dump the heap.
//!
//! `heapdump` is the part of the heapdump toolkit that lives inside the
//! traced process. Declare it as the global allocator, wrapping the
//! allocator you already use:
//!
//! ```no_run
//! #[global_allocator]
//! static ALLOC: heapdump::Tracked<std::alloc::System> = heapdump::Tracked::new(std::alloc::System);
//!
//! fn main() {
//!     let v: Vec<u64> = (0..1000).collect();
//!     heapdump::dump("app.hdump", heapdump::Mode::Full).unwrap();
//!     let s = heapdump::stats();
//!     assert!(s.live_bytes >= 8000);
//!     drop(v);
//! }
//! ```
//!
//! The dump is read offline by `heapdump-analyze` and the `heapdump`
//! command. Configuration comes from `HEAPDUMP_*` environment variables
//! (see the README), the same ones the `LD_PRELOAD` library reads.
//!
//! Design constraints, because this code runs inside someone else's
//! process, often inside its allocator:
//! - it never allocates through the tracked heap: every table is memory
//!   mapped from the kernel, and the dump path uses raw system calls;
//! - it never panics or unwinds into the host program;
//! - its locks are taken by `pthread_atfork` handlers around `fork`, and a
//!   thread never stops (for a dump) while holding one.
#![deny(missing_docs)]

mod config;
mod dump;
mod fatal;
mod guard;
mod index;
mod limit;
mod lock;
mod modules;
mod pipe;
mod report;
mod shadow;
mod sites;
mod stw;
mod sys;
mod table;
mod unwind;

use core::alloc::{GlobalAlloc, Layout};
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::os::unix::ffi::OsStrExt;

pub use config::{parse_backtrace, parse_bytes, parse_signal, Backtrace, Config};
pub use dump::{DumpError, DumpInfo};
pub use heapdump_format::{Mode, Reason};
use table::Entry;

/// The runtime's global state: one per process.
pub struct State {
    table: table::Table,
    sites: sites::Sites,
    config: core::cell::UnsafeCell<Config>,
    init: AtomicU8,
    /// What the allocation path compares the live bytes with: the lower of
    /// `user_mark` and `check_mark`.
    next_threshold: AtomicU64,
    /// The next step of `HEAPDUMP_THRESHOLD`.
    user_mark: AtomicU64,
    /// Live bytes at which the helper looks at the memory limits again.
    check_mark: AtomicU64,
    oom_dumped: AtomicBool,
    dump_count: AtomicU64,
}

// SAFETY: `config` is written once during initialisation (init == 1, by the
// one thread that won the race) and only read after init == 2.
unsafe impl Sync for State {}

static STATE: State = State {
    table: table::Table::new(),
    sites: sites::Sites::new(),
    config: core::cell::UnsafeCell::new(Config::default()),
    init: AtomicU8::new(0),
    next_threshold: AtomicU64::new(u64::MAX),
    user_mark: AtomicU64::new(u64::MAX),
    check_mark: AtomicU64::new(u64::MAX),
    oom_dumped: AtomicBool::new(false),
    dump_count: AtomicU64::new(0),
};

impl State {
    fn config(&self) -> &Config {
        // SAFETY: see the Sync impl: read only after initialisation.
        unsafe { &*self.config.get() }
    }
}

#[inline]
fn state() -> &'static State {
    if STATE.init.load(Ordering::Acquire) != 2 {
        init_slow();
    }
    &STATE
}

#[cold]
fn init_slow() {
    match STATE.init.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            let c = Config::from_env();
            // SAFETY: we won the race to 1; nobody reads config before 2.
            unsafe { *STATE.config.get() = c };
            if c.threshold > 0 {
                STATE.user_mark.store(c.threshold, Ordering::Relaxed);
                STATE.next_threshold.store(c.threshold, Ordering::Relaxed);
            }
            if !c.shadow {
                STATE.table.use_buckets();
            }
            if !c.thp {
                STATE.table.no_huge_pages();
            }
            STATE.table.give_back_stripes();
            let _ = stw::init();
            STATE.init.store(2, Ordering::Release);
        }
        Err(_) => {
            // Another thread is initialising (a few microseconds): wait.
            // The initialising thread never allocates, so this cannot be
            // our own thread re-entering.
            while STATE.init.load(Ordering::Acquire) != 2 {
                core::hint::spin_loop();
            }
        }
    }
}

// --- per-thread sampling state ---------------------------------------------

thread_local! {
    static SAMPLE: core::cell::Cell<(i64, u64)> = const { core::cell::Cell::new((0, 0)) };
}

/// Decides whether this allocation gets a site under Poisson sampling with
/// mean `mean` bytes: a per-thread countdown drawn from an exponential
/// distribution, as jemalloc and tcmalloc do.
#[inline]
fn sample(size: u64, mean: u64) -> bool {
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
fn draw(c: &core::cell::Cell<(i64, u64)>, left: i64, mut rng: u64, mean: u64) -> bool {
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

// --- the allocator ------------------------------------------------------------

/// A `GlobalAlloc` that tracks every live allocation of the allocator it wraps.
///
/// Only one `Tracked` should be the global allocator of a process: the
/// tables are process-wide.
pub struct Tracked<A> {
    inner: A,
}

impl<A: GlobalAlloc> Tracked<A> {
    /// The allocation path shared by `alloc` and `alloc_zeroed`.
    #[inline]
    fn tracked_alloc(&self, layout: Layout, inner: impl FnOnce(Layout) -> *mut u8) -> *mut u8 {
        let st = state();
        let site = wants_site(st.config(), layout.size());
        if !site && guard::idle() {
            // The common case without the guard (see `guard::idle`): a
            // small block whose slot's page is already in use. Anything
            // else enters, after the allocation (and gets no site).
            let p = inner(layout);
            if !p.is_null() {
                let e = Entry::new(p, layout.size(), layout.align(), 0, false);
                if let Some(live) = st.table.try_insert(&e) {
                    if live >= st.next_threshold.load(Ordering::Relaxed) {
                        threshold_entered(st, live, &free_with(&self.inner));
                    }
                    return p;
                }
            }
            return self.tracked_rest(st, p, layout);
        }
        let g = guard::Enter::new();
        let p = inner(layout);
        if p.is_null() {
            drop(g);
            alloc_failed(st);
            return p;
        }
        record(st, p, layout.size(), layout.align(), &g, site);
        leave(st, g, &free_with(&self.inner));
        p
    }

    /// The rest of an allocation the common case could not record: `p` is
    /// the block (null: the allocator failed), which gets no site.
    #[cold]
    #[inline(never)]
    fn tracked_rest(&self, st: &State, p: *mut u8, layout: Layout) -> *mut u8 {
        let g = guard::Enter::new();
        if p.is_null() {
            drop(g);
            alloc_failed(st);
            return p;
        }
        record(st, p, layout.size(), layout.align(), &g, false);
        leave(st, g, &free_with(&self.inner));
        p
    }
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
fn wants_site(c: &Config, size: usize) -> bool {
    match c.backtrace {
        config::Backtrace::Off => false,
        config::Backtrace::All => true,
        config::Backtrace::Sampled(mean) => sample(size as u64, mean),
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
    let last =
        LAST_SITE.try_with(|l| if l.n.get() == n && l.frames[..n].iter().zip(frames).all(|(a, b)| a.get() == *b) { l.id.get() } else { 0 });
    if let Ok(id @ 1..) = last {
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
        let _ = LAST_SITE.try_with(|l| {
            for (a, b) in l.frames.iter().zip(frames) {
                a.set(*b);
            }
            l.n.set(n);
            l.id.set(id);
        });
    }
    id
}

/// A thread's last site and its frames (site ids are never reused, so the
/// pair stays true).
struct LastSite {
    n: core::cell::Cell<usize>,
    frames: [core::cell::Cell<u64>; sites::MAX_FRAMES],
    id: core::cell::Cell<u32>,
}

thread_local! {
    static LAST_SITE: LastSite = const {
        LastSite { n: core::cell::Cell::new(0), frames: [const { core::cell::Cell::new(0) }; sites::MAX_FRAMES], id: core::cell::Cell::new(0) }
    };
}

/// [`threshold_crossed`] from outside the tracker: enters it first.
#[cold]
#[inline(never)]
fn threshold_entered(st: &State, live: u64, free: &dyn Fn(*mut u8, usize, usize)) {
    let g = guard::Enter::new();
    threshold_crossed(st, live);
    leave(st, g, free);
}

#[cold]
fn threshold_crossed(st: &State, live: u64) {
    // The near-limit check: the helper looks at the limits (once per mark).
    let check = st.check_mark.load(Ordering::Relaxed);
    if live >= check && st.check_mark.compare_exchange(check, u64::MAX, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
        refresh_marks(st);
        ask_helper(ASK_CHECK);
    }
    let step = st.config().threshold;
    let cur = st.user_mark.load(Ordering::Relaxed);
    if live < cur || step == 0 {
        return;
    }
    // Next step above the current live size; only the thread that moves
    // the threshold dumps.
    let next = (live / step + 1).saturating_mul(step);
    if st.user_mark.compare_exchange(cur, next, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
        refresh_marks(st);
        let regs = stw::current_regs();
        auto_dump(st, Reason::Threshold, &regs, false);
    }
}

/// The allocation path's one comparison: the lower of the two marks. (A
/// race may leave it low for a moment: one more call of the cold path.)
fn refresh_marks(st: &State) {
    let m = st.user_mark.load(Ordering::Acquire).min(st.check_mark.load(Ordering::Acquire));
    st.next_threshold.store(m, Ordering::Release);
}

/// Looks at the memory limits (on the helper thread) and dumps when one is
/// near; then sets the live size at which to look again.
fn near_limit_check() {
    let (due, step) = limit::check();
    if let Some(r) = due {
        // The dump maps memory of its own: the sorted index and its
        // directory (about 26 bytes per live allocation) and 1.5 MiB of
        // buffers. Taken from what the limit leaves, it must not be what
        // brings the program to it: skipped (and said) past half of that.
        let need = STATE.table.live_count().saturating_mul(26).saturating_add(3 << 19);
        if need > r.bytes.saturating_sub(r.used) / 2 {
            let e = DumpError::Os { what: "skipped: the dump would take more than half the memory the limit leaves", errno: libc::ENOMEM };
            report::failed(Reason::NearLimit, b"", &e);
        } else {
            let regs = stw::current_regs();
            auto_dump(&STATE, Reason::NearLimit, &regs, true);
        }
    }
    let (_, live) = STATE.table.live();
    STATE.check_mark.store(live.saturating_add(step), Ordering::Release);
    refresh_marks(&STATE);
}

/// Applies the table updates a signal handler deferred on this thread;
/// `free` releases a postponed block in the underlying allocator.
fn apply_deferred(st: &State, free: &dyn Fn(*mut u8, usize, usize)) {
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
}

/// Before a realloc of `p`: takes its entry out of the table, since once
/// the underlying realloc returns another thread may receive the address.
/// `layout` is its (size, alignment) when the caller knows it.
#[inline(always)]
fn realloc_begin(st: &State, p: *mut u8, layout: Option<Layout>) -> Option<Entry> {
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
        self.tracked_alloc(layout, |l| unsafe { self.inner.alloc(l) })
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout (GlobalAlloc contract).
        self.tracked_alloc(layout, |l| unsafe { self.inner.alloc_zeroed(l) })
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let st = state();
        // The common case without the guard (see `guard::idle`): a small
        // block found in its slot. Its address is reused only after the
        // free below, when its slot is empty.
        if guard::idle() && st.table.try_forget(ptr as u64, table_layout(layout)) {
            // SAFETY: forwarded.
            unsafe { self.inner.dealloc(ptr, layout) };
            return;
        }
        let g = guard::Enter::new();
        if g.in_lock() {
            // A signal handler freeing while its thread holds a tracker lock.
            // A block whose own insert is still queued was never in the
            // table: cancel the insert and free at once. Otherwise postpone
            // the free itself too, so the address cannot be reused before
            // its entry is gone.
            if !guard::cancel_insert(ptr as u64) && guard::defer(guard::Deferred::Free(ptr as u64, layout.size(), layout.align())) {
                return;
            }
        } else {
            st.table.forget(ptr as u64, table_layout(layout));
        }
        // SAFETY: forwarded.
        unsafe { self.inner.dealloc(ptr, layout) };
        leave(st, g, &free_with(&self.inner));
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let st = state();
        let g = guard::Enter::new();
        if g.in_lock() {
            // Nested in a locked section: allocate, copy and defer the free.
            // SAFETY: new_size with the old alignment is a valid layout
            // (GlobalAlloc::realloc's contract).
            let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
            // SAFETY: forwarded.
            let q = unsafe { self.inner.alloc(new_layout) };
            if q.is_null() {
                return q;
            }
            // SAFETY: both blocks are valid for the smaller size and distinct.
            unsafe { core::ptr::copy_nonoverlapping(ptr, q, layout.size().min(new_size)) };
            record(st, q, new_size, layout.align(), &g, wants_site(st.config(), new_size));
            if guard::cancel_insert(ptr as u64) || !guard::defer(guard::Deferred::Free(ptr as u64, layout.size(), layout.align())) {
                // SAFETY: forwarded. Either the block never reached the table
                // (its insert was still queued), or the queue is full and its
                // entry stays until a later allocation at that address replaces it.
                unsafe { self.inner.dealloc(ptr, layout) };
            }
            return q;
        }
        let old = realloc_begin(st, ptr, Some(layout));
        // SAFETY: forwarded.
        let q = unsafe { self.inner.realloc(ptr, layout, new_size) };
        realloc_end(st, &g, old, ptr, q, new_size, layout.align());
        if q.is_null() {
            drop(g);
            alloc_failed(st);
            return q;
        }
        leave(st, g, &free_with(&self.inner));
        q
    }
}

#[cold]
fn alloc_failed(st: &State) {
    if st.oom_dumped.swap(true, Ordering::AcqRel) {
        return;
    }
    let regs = stw::current_regs();
    auto_dump(st, Reason::AllocFailure, &regs, false);
}

// --- statistics ---------------------------------------------------------------

/// Live heap figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Live allocations.
    pub live_count: u64,
    /// Their requested bytes.
    pub live_bytes: u64,
    /// Highest live bytes seen. Each thread adds its allocations to the
    /// global count in steps of 64 KiB, so the peak can be short of the true
    /// one by that much per thread (never more than the true one).
    pub peak_bytes: u64,
    /// Allocations made since start.
    pub total_allocs: u64,
    /// Bytes allocated since start.
    pub total_bytes: u64,
    /// Memory the tracker itself uses (tables, sites).
    pub tracker_bytes: u64,
    /// Distinct allocation sites.
    pub sites: u64,
    /// Allocations the tracker could not record (address beyond 2^48, or
    /// its table could not grow).
    pub untracked: u64,
}

/// The live heap right now.
pub fn stats() -> Stats {
    let st = state();
    let _g = guard::Enter::new();
    let t = { st.table.totals() };
    let (sites, site_bytes) = {
        let _l = guard::Locked::new();
        st.sites.usage()
    };
    Stats {
        live_count: t.live_count,
        live_bytes: t.live_bytes,
        peak_bytes: st.table.peak.load(Ordering::Relaxed).max(t.live_bytes),
        total_allocs: t.total_allocs,
        total_bytes: t.total_bytes,
        tracker_bytes: t.table_bytes + site_bytes,
        sites,
        untracked: st.table.untracked.load(Ordering::Relaxed),
    }
}

/// The configuration in force (from the `HEAPDUMP_*` variables).
pub fn config() -> Config {
    *state().config()
}

// --- dumping ------------------------------------------------------------------

/// Writes a dump of the live heap to `path` (created with mode 0600; an
/// existing file is never overwritten).
///
/// Every other thread is stopped while the dump is written (or, with
/// `HEAPDUMP_FORK=1`, until a child process is forked to write it). The
/// calling thread's stack is scanned from the caller's frame up: nothing of
/// the runtime's own frames is a root.
#[inline(always)]
pub fn dump(path: impl AsRef<std::path::Path>, mode: Mode) -> Result<DumpInfo, DumpError> {
    let p = path.as_ref().as_os_str().as_bytes();
    stw::with_entry_regs(|regs| dump_path(p, mode, regs))
}

#[inline(never)]
fn dump_path(p: &[u8], mode: Mode, regs: &stw::Regs) -> Result<DumpInfo, DumpError> {
    let st = state();
    let mut buf = [0u8; 4096];
    if p.len() >= buf.len() || p.contains(&0) {
        return Err(DumpError::PathTooLong);
    }
    buf[..p.len()].copy_from_slice(p);
    let fd = create(&buf[..=p.len()])?;
    let r = dump_fd_inner(st, fd, mode, Reason::Api, regs, false);
    sys::close(fd);
    r
}

/// Like [`dump`], but never fails because the file exists: when `path` is
/// taken, the dump gets the first free `<stem>.<pid>.<n><ext>` beside it
/// (as automatic dumps are named). Returns where it was written.
///
/// ```no_run
/// # #[global_allocator]
/// # static ALLOC: heapdump::Tracked<std::alloc::System> = heapdump::Tracked::new(std::alloc::System);
/// let (path, info) = heapdump::dump_numbered("app.hdump", heapdump::Mode::Compact).unwrap();
/// println!("{} ({} allocations)", path.display(), info.allocations);
/// ```
pub fn dump_numbered(path: impl AsRef<std::path::Path>, mode: Mode) -> Result<(std::path::PathBuf, DumpInfo), DumpError> {
    let p = path.as_ref().as_os_str().as_bytes();
    let mut out = [0u8; 1100];
    let r = stw::with_entry_regs(|regs| {
        if p.contains(&0) {
            return Err(DumpError::PathTooLong);
        }
        let (fd, len) = open_numbered(p, true, &mut out)?;
        let r = dump_fd_inner(state(), fd, mode, Reason::Api, regs, false);
        sys::close(fd);
        r.map(|info| (len, info))
    });
    // Allocating again: the dump is over.
    r.map(|(len, info)| (std::path::PathBuf::from(std::ffi::OsStr::from_bytes(&out[..len])), info))
}

/// Writes a dump to an open file descriptor (not closed afterwards).
#[inline(always)]
pub fn dump_to_fd(fd: std::os::fd::RawFd, mode: Mode) -> Result<DumpInfo, DumpError> {
    stw::with_entry_regs(|regs| dump_fd_inner(state(), fd, mode, Reason::Api, regs, false))
}

fn dump_fd_inner(st: &State, fd: i32, mode: Mode, reason: Reason, regs: &stw::Regs, on_helper: bool) -> Result<DumpInfo, DumpError> {
    // The tracker is active on this thread while dumping: allocations made
    // meanwhile by this thread (none are expected) would be recorded without
    // sites rather than re-entering.
    let _g = guard::Enter::new();
    let _xfsz = sys::XfszBlocked::new();
    let r = dump::write_dump(st, fd, mode, reason, regs, on_helper);
    st.dump_count.fetch_add(1, Ordering::Relaxed);
    r
}

fn create(path_nul: &[u8]) -> Result<i32, DumpError> {
    let c = core::ffi::CStr::from_bytes_with_nul(path_nul).map_err(|_| DumpError::PathTooLong)?;
    sys::open(c, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW, 0o600)
        .map_err(|errno| DumpError::Os { what: "creating the dump file", errno })
}

/// Builds the path of the next automatic dump and opens it exclusively.
///
/// The configured path (`HEAPDUMP_OUTPUT`, else `heapdump.<pid>.hdump`) is
/// tried first, by every process of the tree: the file itself is the claim
/// (`O_EXCL`), so the first dump anywhere in the tree gets the name the
/// user gave and nothing is written to the host's environment to hand the
/// claim on. Every later dump, of this process or another, is numbered
/// `<stem>.<pid>.<n><ext>` (n from 1), taking the first free number.
/// Returns the descriptor and path length.
fn open_next(st: &State, out: &mut [u8; 1100]) -> Result<(i32, usize), DumpError> {
    let c = st.config();
    let default = b"heapdump.hdump";
    open_numbered(c.output().unwrap_or(default), c.output().is_some(), out)
}

/// Opens `path` exclusively when `plain_first` and it is free, else the
/// first free `<stem>.<pid>.<n><ext>` (without `.<n>` for n = 0 when not
/// `plain_first`). Returns the descriptor and the path's length in `out`.
fn open_numbered(path: &[u8], plain_first: bool, out: &mut [u8; 1100]) -> Result<(i32, usize), DumpError> {
    let pid = sys::getpid() as u64;
    if path.len() >= out.len() - 48 {
        return Err(DumpError::PathTooLong);
    }
    // Insert .<pid>.<n> before the extension of the last component.
    let slash = path.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
    let dot = path[slash..].iter().rposition(|&b| b == b'.').filter(|&i| i > 0).map(|i| slash + i);
    let (stem, ext) = match dot {
        Some(d) => (&path[..d], &path[d..]),
        None => (path, &b""[..]),
    };
    for n in 0..10_000u64 {
        let mut len = 0;
        let mut put = |s: &[u8], len: &mut usize| {
            let k = s.len().min(out.len() - 1 - *len);
            out[*len..*len + k].copy_from_slice(&s[..k]);
            *len += k;
        };
        let mut num = [0u8; 20];
        if plain_first && n == 0 {
            put(path, &mut len);
        } else {
            put(stem, &mut len);
            put(b".", &mut len);
            let k = dump::fmt_u64(pid, &mut num);
            put(&num[..k], &mut len);
            if n > 0 {
                put(b".", &mut len);
                let k = dump::fmt_u64(n, &mut num);
                put(&num[..k], &mut len);
            }
            put(ext, &mut len);
        }
        out[len] = 0;
        match create(&out[..=len]) {
            Ok(fd) => return Ok((fd, len)),
            Err(DumpError::Os { errno: libc::EEXIST, .. }) => {
                // The configured name is taken: by an earlier dump (a
                // regular file) the next gets a number; by anything else
                // (`/dev/full`, a FIFO, a directory) nothing is created
                // beside it.
                if n == 0 && !is_regular(&out[..=len]) {
                    return Err(DumpError::Os { what: "the output path is not a regular file", errno: libc::EEXIST });
                }
                continue;
            }
            Err(e) => return Err(e),
        }
    }
    Err(DumpError::Os { what: "finding a free dump file name", errno: libc::EEXIST })
}

/// Whether the NUL-terminated `path` names a regular file (not following a
/// symlink).
fn is_regular(path_nul: &[u8]) -> bool {
    // SAFETY: lstat of a NUL-terminated path into a zeroed struct we own.
    unsafe {
        let mut st: libc::stat = core::mem::zeroed();
        libc::lstat(path_nul.as_ptr().cast(), &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFREG
    }
}

/// Automatic dumps between opening their file and reporting it (the exit
/// dump waits for them).
static AUTO_DUMPS: AtomicU64 = AtomicU64::new(0);

/// A dump the runtime takes by itself (exit, signal, threshold, allocation
/// failure): named automatically, reported on stderr and to
/// `HEAPDUMP_REPORT` (a file `heapdump run` reads), never fatal.
fn auto_dump(st: &State, reason: Reason, regs: &stw::Regs, on_helper: bool) {
    AUTO_DUMPS.fetch_add(1, Ordering::AcqRel);
    auto_dump_counted(st, reason, regs, on_helper);
    AUTO_DUMPS.fetch_sub(1, Ordering::AcqRel);
}

fn auto_dump_counted(st: &State, reason: Reason, regs: &stw::Regs, on_helper: bool) {
    let mut path = [0u8; 1100];
    let (fd, len) = match open_next(st, &mut path) {
        Ok(x) => x,
        Err(e) => {
            let n = path.iter().position(|&b| b == 0).unwrap_or(0);
            report::failed(reason, &path[..n], &e);
            return;
        }
    };
    report::started(&path[..len]);
    let r = dump_fd_inner(st, fd, st.config().mode, reason, regs, on_helper);
    // SAFETY: fstat into a zeroed struct we own, on our open descriptor.
    let empty = unsafe {
        let mut sb: libc::stat = core::mem::zeroed();
        libc::fstat(fd, &mut sb) == 0 && sb.st_size == 0
    };
    sys::close(fd);
    match r {
        Ok(info) => report::wrote(&path[..len], reason, &info),
        Err(e) => {
            report::failed(reason, &path[..len], &e);
            // A partial file is kept: everything before the failure is
            // readable, and the reader says where it was cut. An empty one
            // (nothing could be written) would only read as "not a dump".
            if empty {
                // SAFETY: unlink of the NUL-terminated path we created.
                unsafe { libc::unlink(path.as_ptr().cast()) };
            }
        }
    }
}

/// The runtime's own thread-local variables in the calling thread, as
/// offsets from its thread pointer (static TLS: the same in every thread)
/// and sizes. They are cut out of the TLS roots: a deferred free's address
/// or a frame pointer the unwinder remembered is no pointer of the
/// program's, and kept blocks "still reachable" by chance.
pub(crate) fn own_tls(fs: u64) -> [(u64, u64); 7] {
    let sample = SAMPLE.try_with(|v| (v as *const _ as u64, core::mem::size_of_val(v) as u64)).unwrap_or((0, 0));
    let last = LAST_SITE.try_with(|v| (v as *const _ as u64, core::mem::size_of_val(v) as u64)).unwrap_or((0, 0));
    let all = [sample, last, unwind::tls_stack_top(), unwind::tls_memo(), guard::tls_state(), guard::tls_deferred(), table::tls_stripe()];
    all.map(|(a, n)| if a == 0 { (0, 0) } else { (a.wrapping_sub(fs), n) })
}

/// The runtime's own statics that hold heap addresses (the live table's
/// inline parts, the site table): `[start, end)`, never a root.
pub(crate) fn own_statics() -> (u64, u64) {
    let a = &STATE as *const State as u64;
    (a, a + core::mem::size_of::<State>() as u64)
}

// --- start-up: fork handlers, exit and signal triggers -----------------------------

static SIGNAL_PIPE: AtomicU64 = AtomicU64::new(u64::MAX);

/// Dump signals received that the helper has not yet answered.
static SIGNALS_PENDING: AtomicU64 = AtomicU64::new(0);

static STATIC_TLS: AtomicU64 = AtomicU64::new(64 * 1024);

/// Size of the static TLS area below each thread pointer (glibc's
/// `_dl_get_tls_static_info`, read at start-up; 64 KiB if unknown).
pub(crate) fn static_tls_size() -> u64 {
    STATIC_TLS.load(Ordering::Relaxed)
}

extern "C" fn before_fork() {
    STATE.table.lock_all();
    STATE.sites.lock_all();
}

extern "C" fn after_fork() {
    // SAFETY: taken by before_fork in this thread (parent) or inherited
    // from it (child).
    unsafe {
        STATE.sites.unlock_all();
        STATE.table.unlock_all();
    }
}

extern "C" fn after_fork_child() {
    after_fork();
    STATE.table.free_stripes_after_fork();
}

// The exit handler `atexit` calls: straight into the register capture (see
// `stw::with_entry_regs`), so that no Rust frame of the runtime's lies
// between `exit`'s frames and the stack the dump scans.
core::arch::global_asm!(
    ".text",
    ".p2align 4",
    ".globl heapdump_rt_at_exit",
    ".hidden heapdump_rt_at_exit",
    ".type heapdump_rt_at_exit,@function",
    "heapdump_rt_at_exit:",
    ".cfi_startproc",
    "xor edi, edi",
    "lea rsi, [rip + {body}]",
    "jmp heapdump_rt_with_entry_regs",
    ".cfi_endproc",
    ".size heapdump_rt_at_exit, .-heapdump_rt_at_exit",
    body = sym at_exit,
);

unsafe extern "C" {
    // Declared safe: its arguments are ignored and it is only ever called
    // by `exit` (the assembly above).
    safe fn heapdump_rt_at_exit(arg: *mut core::ffi::c_void);
    fn __cxa_atexit(f: extern "C" fn(*mut core::ffi::c_void), arg: *mut core::ffi::c_void, dso: *mut core::ffi::c_void)
        -> core::ffi::c_int;
}

/// Registered whatever `HEAPDUMP_AT_EXIT` says: a dump the signal thread
/// is writing (it resumed the program, which went on to exit; or a forked
/// writer it waits for) is finished and reported, not cut off by `exit`.
/// Then the exit dump, when configured, with the registers `exit` had.
extern "C" fn at_exit(regs: *const stw::Regs, _: *mut core::ffi::c_void) {
    // Bounded (10 minutes: a compact dump of tens of millions of blocks
    // takes minutes) so that a stuck writer cannot hold the exit forever.
    for _ in 0..600_000 {
        if AUTO_DUMPS.load(Ordering::Acquire) == 0 && SIGNALS_PENDING.load(Ordering::Acquire) == 0 {
            break;
        }
        sys::sleep_ms(1);
    }
    if STATE.config().at_exit {
        // SAFETY: the capture's array, alive for this call.
        let regs = unsafe { &*regs };
        auto_dump(&STATE, Reason::Exit, regs, false);
    }
}

/// What a byte on the helper's pipe asks for.
const ASK_DUMP: u8 = 1;
const ASK_FATAL: u8 = 2;
/// Look at the memory limits (no dump unless one is near).
const ASK_CHECK: u8 = 3;

/// Writes one byte to the helper's pipe (never blocks: its write end is
/// non-blocking; a full pipe already holds a wake-up). Async-signal-safe.
/// False when there is no helper or the byte was not written.
fn ask_helper(what: u8) -> bool {
    let fd = SIGNAL_PIPE.load(Ordering::Relaxed);
    // SAFETY: write(2) of one byte to our own pipe.
    fd != u64::MAX && unsafe { libc::write((fd & 0xffff_ffff) as i32, [what].as_ptr().cast(), 1) } == 1
}

/// [`ask_helper`] for a dump, counted in `SIGNALS_PENDING` before the
/// helper wakes, so that an exit right after (a program that raises the
/// signal and returns) waits for it. A full pipe means dumps are already
/// pending: this one merges with them.
fn ask_helper_for_dump(what: u8) -> bool {
    SIGNALS_PENDING.fetch_add(1, Ordering::AcqRel);
    if ask_helper(what) {
        return true;
    }
    SIGNALS_PENDING.fetch_sub(1, Ordering::AcqRel);
    false
}

/// Asks the helper for the dump of a fatal signal (see `fatal`); false
/// when there is no helper.
fn request_fatal_dump() -> bool {
    ask_helper_for_dump(ASK_FATAL)
}

extern "C" fn on_dump_signal(sig: i32) {
    let saved = sys::errno();
    fatal::set_cause(sig, 0, sys::gettid(), 0, 0);
    ask_helper_for_dump(ASK_DUMP);
    sys::set_errno(saved);
}

extern "C" fn helper_main(stack_end: *mut libc::c_void) -> *mut libc::c_void {
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: naming the current thread with a NUL-terminated name.
        unsafe { libc::prctl(libc::PR_SET_NAME, c"heapdump".as_ptr()) };
        stw::register_runtime_thread(stack_end as u64);
        let rfd = (SIGNAL_PIPE.load(Ordering::Relaxed) >> 32) as i32;
        let mut b = [0u8; 64];
        let near = limit::armed();
        if near {
            near_limit_check();
        }
        loop {
            // Near-limit dumps: the limits are looked at every 100 ms too
            // (memory the heap does not count grows as well).
            if near && sys::poll_in(rfd, 100) == Ok(false) {
                near_limit_check();
                continue;
            }
            match sys::read(rfd, &mut b) {
                Ok(0) | Err(_) => return,
                Ok(got) => {
                    let asked = &b[..got];
                    if asked.contains(&ASK_CHECK) {
                        near_limit_check();
                    }
                    // The dumps asked for (a check is not one).
                    let n = asked.iter().filter(|&&x| x != ASK_CHECK).count();
                    if n == 0 {
                        continue;
                    }
                    let regs = stw::current_regs();
                    let fatal = asked.contains(&ASK_FATAL);
                    let reason = if fatal && fatal::is_crash() { Reason::Crash } else { Reason::Signal };
                    auto_dump(&STATE, reason, &regs, true);
                    fatal::clear_cause();
                    if fatal {
                        fatal::dump_done();
                    }
                    // The signals read were all answered by this dump.
                    SIGNALS_PENDING.fetch_sub(n as u64, Ordering::AcqRel);
                }
            }
        }
    });
    core::ptr::null_mut()
}

/// Runs before `main` (from `.init_array`): fork handlers, the exit dump,
/// the dump signal and its helper thread.
extern "C" fn start() {
    let st = state();
    let c = *st.config();
    let _internal = guard::Internal::new();
    report::remember_stderr();
    // SAFETY: registering plain extern "C" functions.
    unsafe { libc::pthread_atfork(Some(before_fork), Some(after_fork), Some(after_fork_child)) };
    unwind::init();
    stw::find_tid_offset();
    // SAFETY: dlsym of a function with this signature in glibc's loader.
    unsafe {
        let f = libc::dlsym(libc::RTLD_DEFAULT, c"_dl_get_tls_static_info".as_ptr());
        if !f.is_null() {
            let f: extern "C" fn(*mut usize, *mut usize) = core::mem::transmute(f);
            let (mut size, mut align) = (0usize, 0usize);
            f(&mut size, &mut align);
            if size > 0 && size < (64 << 20) {
                STATIC_TLS.store(size as u64, Ordering::Relaxed);
            }
        }
    }
    if c.at_exit || c.signal != 0 || c.threshold != 0 {
        // Registered with no DSO handle: `atexit` from the preload library
        // would tie the handler to it, and glibc would run it from the
        // loader's finalisation (`_dl_fini`, `__cxa_finalize`), whose frames
        // hold stale words memcheck never sees. This way it runs from
        // `__run_exit_handlers` itself, after every destructor (the loader's
        // handler was registered after this one), with the exiting thread's
        // stack as memcheck scans it at exit. The runtime is never unloaded.
        // SAFETY: registering a function that lives as long as the process.
        unsafe { __cxa_atexit(heapdump_rt_at_exit, core::ptr::null_mut(), core::ptr::null_mut()) };
    }
    limit::init(c.near_limit);
    if c.signal != 0 || c.on_fatal || limit::armed() {
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 writes two descriptors into fds.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == 0 {
            // SAFETY: make the write end non-blocking so the handler never blocks.
            unsafe { libc::fcntl(fds[1], libc::F_SETFL, libc::O_NONBLOCK) };
            SIGNAL_PIPE.store((u64::from(fds[0] as u32) << 32) | u64::from(fds[1] as u32), Ordering::Release);
            let mut tid: libc::pthread_t = 0;
            // The helper's stack is the runtime's own mapping: never a root,
            // and glibc puts the thread descriptor at its top, which tells
            // the descriptor's size (see stw::tcb_layout).
            const HELPER_STACK: usize = 1 << 20;
            let stack = sys::mmap_anon(HELPER_STACK).unwrap_or(core::ptr::null_mut());
            // SAFETY: a zeroed attr is initialised by pthread_attr_init; the
            // stack, when given, is a fresh mapping of HELPER_STACK bytes that
            // lives as long as the process; the helper owns no Rust state
            // but the statics above.
            let ok = unsafe {
                let mut attr: libc::pthread_attr_t = core::mem::zeroed();
                libc::pthread_attr_init(&mut attr);
                let end = if stack.is_null() {
                    libc::pthread_attr_setstacksize(&mut attr, HELPER_STACK);
                    core::ptr::null_mut()
                } else {
                    libc::pthread_attr_setstack(&mut attr, stack.cast(), HELPER_STACK);
                    stack.add(HELPER_STACK).cast()
                };
                // The helper inherits a full signal mask: the program's
                // process-directed signals (SIGALRM of a timer, SIGCHLD,
                // SIGINT) must reach the program's own threads, never run
                // its handlers on the runtime's thread. (glibc keeps its
                // internal signals open.)
                let mut all: libc::sigset_t = core::mem::zeroed();
                let mut old: libc::sigset_t = core::mem::zeroed();
                libc::sigfillset(&mut all);
                libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
                let r = libc::pthread_create(&mut tid, &attr, helper_main, end);
                libc::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut());
                libc::pthread_attr_destroy(&mut attr);
                r == 0
            };
            if ok {
                // The helper is the runtime's, not the program's: wait (at
                // most 1 s) until it has said so, so that no dump counts it.
                let deadline = sys::monotonic_ns() + 1_000_000_000;
                while !stw::runtime_thread_started() && sys::monotonic_ns() < deadline {
                    // SAFETY: sched_yield has no preconditions.
                    unsafe { libc::sched_yield() };
                }
                if c.signal != 0 {
                    // SAFETY: a zeroed sigaction with a plain handler and SA_RESTART.
                    unsafe {
                        let mut sa: libc::sigaction = core::mem::zeroed();
                        sa.sa_sigaction = on_dump_signal as *const () as usize;
                        sa.sa_flags = libc::SA_RESTART;
                        libc::sigemptyset(&mut sa.sa_mask);
                        sys::sigaction_raw(c.signal, &sa, core::ptr::null_mut());
                    }
                }
                if c.on_fatal {
                    fatal::install();
                }
            }
        }
    }
}

#[used]
#[link_section = ".init_array"]
static START: extern "C" fn() = start;

/// For the runtime's own tests: one backtrace of the caller with either
/// unwinder (the cached one may decline: `None`).
#[doc(hidden)]
pub mod testing {
    /// The caller's return addresses with the caching unwinder, starting
    /// with the one into the caller's caller.
    #[inline(never)]
    pub fn backtrace_cached(frames: &mut [u64]) -> Option<usize> {
        crate::unwind::capture(crate::sites::room(frames), 1)
    }
    /// The same with libgcc's `_Unwind_Backtrace`.
    #[inline(never)]
    pub fn backtrace_libgcc(frames: &mut [u64]) -> usize {
        crate::sites::capture_libgcc(crate::sites::room(frames), 1)
    }
    /// Unwind rules in the cached unwinder's cache.
    pub fn cached_rules() -> usize {
        crate::unwind::cached_rules()
    }
    /// This thread's stripe of counters (255: the shared one).
    pub fn stripe() -> usize {
        crate::state().table.current_stripe()
    }
}

/// The tracker's entry points for allocators that are not a `GlobalAlloc`:
/// the `LD_PRELOAD` library's C functions. Not part of the Rust API.
#[doc(hidden)]
pub mod hooks {
    use super::*;

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
        // SAFETY: a zeroed sigaction, then filled.
        let mut sa: libc::sigaction = unsafe { core::mem::zeroed() };
        sa.sa_sigaction = handler;
        sa.sa_flags = libc::SA_RESTART;
        // SAFETY: an initialised sigset.
        unsafe {
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaddset(&mut sa.sa_mask, sig);
        }
        // SAFETY: as above.
        let mut old: libc::sigaction = unsafe { core::mem::zeroed() };
        // SAFETY: valid pointers to our locals.
        if unsafe { fatal::program_sigaction(sig, &sa, &mut old) } != 0 {
            return libc::SIG_ERR;
        }
        old.sa_sigaction
    }

    /// Code was unloaded (`dlclose`): forget the unwind rules cached for
    /// addresses other code may now occupy.
    pub fn code_unloaded() {
        crate::unwind::forget();
    }

    /// How an allocation is to be recorded, decided before it is made (so
    /// that the sampler counts its bytes once).
    pub enum Plan {
        /// Without entering the tracker (see `guard::idle`), if the table's
        /// common case takes the block: [`quick_record`].
        Quick,
        /// Inside the tracker ([`enter`]), with a site or not.
        Enter(bool),
    }

    /// The plan for an allocation of `size` bytes.
    #[inline]
    pub fn plan(size: usize) -> Plan {
        let st = state();
        let site = wants_site(st.config(), size);
        if !site && guard::idle() {
            Plan::Quick
        } else {
            Plan::Enter(site)
        }
    }

    /// Under [`Plan::Quick`]: records `p` if the table's common case takes
    /// it; false (nothing done) when it must be recorded inside the tracker.
    /// `free` releases a block whose free a signal handler postponed.
    #[inline]
    pub fn quick_record(p: *mut u8, size: usize, align: usize, free: &dyn Fn(*mut u8, usize, usize)) -> bool {
        let st = state();
        let Some(live) = st.table.try_insert(&Entry::new(p, size, align, 0, false)) else { return false };
        if live >= st.next_threshold.load(Ordering::Relaxed) {
            threshold_entered(st, live, free);
        }
        true
    }

    /// Before freeing `p`, without entering the tracker: true when its
    /// entry was taken out (the caller frees it now), false when the free
    /// needs [`Call::freeing`].
    #[inline]
    pub fn quick_free(p: *mut u8) -> bool {
        let st = state();
        guard::idle() && st.table.try_take(p as u64)
    }

    /// One call into the tracker, from entry to return.
    pub struct Call {
        st: &'static State,
        g: guard::Enter,
    }

    /// Enters the tracker.
    #[inline]
    pub fn enter() -> Call {
        let st = state();
        Call { st, g: guard::Enter::new() }
    }

    impl Call {
        /// Whether this thread holds a tracker lock (a signal handler
        /// interrupted the tracker): table updates must be deferred and
        /// frees postponed.
        #[inline]
        pub fn in_lock(&self) -> bool {
            guard::in_lock()
        }

        /// Records a block the underlying allocator returned.
        #[inline]
        pub fn allocated(&self, p: *mut u8, size: usize, align: usize) {
            self.allocated_planned(p, size, align, wants_site(self.st.config(), size));
        }

        /// [`Call::allocated`] with the site decided by [`plan`].
        #[inline(always)]
        pub fn allocated_planned(&self, p: *mut u8, size: usize, align: usize, site: bool) {
            record(self.st, p, size, align, &self.g, site);
        }

        /// Reports an allocation failure (dumps once if configured).
        pub fn failed(self) {
            let st = self.st;
            drop(self.g);
            alloc_failed(st);
        }

        /// Before freeing `p`: true when the caller frees it now, false
        /// when the free was postponed (a signal handler inside the tracker).
        #[inline]
        pub fn freeing(&self, p: *mut u8) -> bool {
            if guard::in_lock() {
                if guard::cancel_insert(p as u64) {
                    return true;
                }
                return !guard::defer(guard::Deferred::Free(p as u64, 0, 1));
            }
            self.st.table.remove(p as u64, None);
            true
        }

        /// Before an in-place-or-moving realloc of `p`: takes its entry out
        /// (another thread may receive the address once realloc returns).
        #[inline]
        pub fn realloc_begin(&self, p: *mut u8) -> Option<OldBlock> {
            super::realloc_begin(self.st, p, None).map(OldBlock)
        }

        /// After realloc: `q` is the result (null on failure).
        #[inline]
        pub fn realloc_end(&self, old: Option<OldBlock>, p: *mut u8, q: *mut u8, new_size: usize) {
            let align = old.as_ref().map_or(16, |o| 1usize << o.0.align_log2);
            super::realloc_end(self.st, &self.g, old.map(|o| o.0), p, q, new_size, align);
        }

        /// Leaves the tracker, applying postponed updates; `free` releases
        /// a postponed block in the underlying allocator.
        #[inline]
        pub fn finish(self, free: &dyn Fn(*mut u8, usize, usize)) {
            leave(self.st, self.g, free);
        }
    }

    /// The table entry of a block being reallocated.
    pub struct OldBlock(Entry);
}
