//! The allocation counters: per thread (a stripe of counters each thread
//! picks at its first allocation) so that threads do not share a
//! counter's cache line; each thread adds its change of live bytes to one
//! global counter, for the peak and the threshold trigger, every [`FLUSH`]
//! bytes.

use crate::sys;
use crate::table::site_totals::{SiteRow, SiteTotals, Walk};
use core::sync::atomic::{AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// One thread's counters, on a cache line of their own. Live bytes are
/// `bytes_in - bytes_out`; `flushed` is what the global `live` already has
/// of them.
#[repr(align(64))]
struct Stripe {
    allocs: AtomicU64,
    frees: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    flushed: AtomicU64,
    /// The thread's last allocation (address, site), and the address of
    /// the free that took it before the next allocation (0: none): a
    /// temporary (heaptrack's definition). On the same line as the counts.
    last_addr: AtomicU64,
    last_site: AtomicU64,
    last_freed: AtomicU64,
}

impl Stripe {
    const fn new() -> Stripe {
        Stripe {
            allocs: AtomicU64::new(0),
            frees: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            flushed: AtomicU64::new(0),
            last_addr: AtomicU64::new(0),
            last_site: AtomicU64::new(0),
            last_freed: AtomicU64::new(0),
        }
    }
}

/// Stripes: the first 255 are owned by one thread each; threads after
/// those share the last one.
const STRIPES: usize = 256;
const SHARED: usize = STRIPES - 1;
/// A thread's change of live bytes is added to the global `live` once it
/// reaches this much either way, so that threads do not contend on one
/// cache line at every allocation. The peak and the threshold trigger are
/// therefore exact to within this much per thread.
pub const FLUSH: u64 = 64 << 10;

thread_local! {
    /// This thread's stripe (`u16::MAX` until its first allocation).
    static STRIPE: core::cell::Cell<u16> = const { core::cell::Cell::new(u16::MAX) };
}

/// The counters whose stripes threads give back, and the pthread key (plus
/// one; 0 before it is made) whose destructor does it.
static EXIT_COUNTERS: AtomicPtr<Counters> = AtomicPtr::new(core::ptr::null_mut());
static STRIPE_KEY: AtomicU32 = AtomicU32::new(0);

/// A thread that owned stripe `v - 1` ends: from now on it counts on the
/// shared stripe (other destructors may still allocate), and its stripe is
/// free for the next thread. Its counts stay in the stripe, which goes on
/// adding up.
extern "C" fn stripe_exit(v: *mut libc::c_void) {
    let k = (v as usize).wrapping_sub(1);
    let t = EXIT_COUNTERS.load(Ordering::Acquire);
    if k >= SHARED || t.is_null() {
        return;
    }
    let _ = STRIPE.try_with(|c| c.set(SHARED as u16));
    // SAFETY: the process's counters, in a static.
    let t = unsafe { &*t };
    // Release: the next owner's plain adds see this thread's.
    t.free_stripes[k / 64].fetch_or(1 << (k % 64), Ordering::Release);
}

/// Adds `v` to a counter of stripe `k`.
#[inline(always)]
fn bump(k: usize, c: &AtomicU64, v: u64) {
    if k == SHARED {
        c.fetch_add(v, Ordering::Relaxed);
    } else {
        // A single `add` to memory, without a bus lock: only this thread
        // writes its own stripe, and a signal handler that interrupts it
        // runs between two instructions, never inside one, so no update
        // is lost. Other threads only read (stats, dumps).
        // SAFETY: `c` is a valid, aligned u64 for the duration; the
        // instruction touches nothing else (flags are clobbered, declared).
        unsafe { core::arch::asm!("add qword ptr [{p}], {v}", p = in(reg) c.as_ptr(), v = in(reg) v, options(nostack)) };
    }
}

/// The counters of one table.
pub struct Counters {
    stripes: [Stripe; STRIPES],
    next_stripe: AtomicUsize,
    /// Owned stripes given back by threads that ended, a bit each.
    free_stripes: [AtomicU64; STRIPES / 64],
    /// Live bytes over all threads as flushed from the stripes (see
    /// [`FLUSH`]), for the peak and the threshold; may dip below zero when
    /// one thread frees what another allocated before either flushed.
    live: AtomicI64,
    /// Highest `live` seen.
    peak: AtomicU64,
    /// Per-site totals and the sites at the peak.
    sites: SiteTotals,
}

impl Counters {
    /// No counts.
    pub const fn new() -> Counters {
        Counters {
            stripes: [const { Stripe::new() }; STRIPES],
            next_stripe: AtomicUsize::new(0),
            free_stripes: [const { AtomicU64::new(0) }; STRIPES / 64],
            live: AtomicI64::new(0),
            peak: AtomicU64::new(0),
            sites: SiteTotals::new(),
        }
    }

    /// The highest live bytes seen (as flushed, or as `note_peak` was told).
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    /// The live bytes as flushed from the stripes (within [`FLUSH`] per
    /// thread of the true count).
    #[cfg(test)]
    pub fn flushed_live(&self) -> i64 {
        self.live.load(Ordering::Relaxed)
    }

    /// Raises the peak to `live` bytes if it is below.
    pub fn note_peak(&self, live: u64) {
        self.peak.fetch_max(live, Ordering::Relaxed);
    }

    /// This thread's stripe (a `u8`, so that indexing needs no bounds check).
    #[inline]
    fn stripe(&self) -> u8 {
        STRIPE
            .try_with(|c| {
                let k = c.get();
                if k != u16::MAX {
                    return k as u8;
                }
                self.first_stripe(c)
            })
            .unwrap_or(SHARED as u8)
    }
    /// A thread's first count: a stripe given back by a thread that ended,
    /// else a new one, else the shared one. A thread that owns one gives it
    /// back when it ends (see [`Counters::give_back_stripes`]).
    #[cold]
    #[inline(never)]
    fn first_stripe(&self, c: &core::cell::Cell<u16>) -> u8 {
        let k = self.take_free_stripe().unwrap_or_else(|| self.next_stripe.fetch_add(1, Ordering::Relaxed).min(SHARED) as u8);
        // Set before registering: registering may allocate (a pthread key
        // past the first 32), and that allocation counts on this stripe.
        c.set(k.into());
        if usize::from(k) != SHARED && core::ptr::eq(EXIT_COUNTERS.load(Ordering::Acquire), self) {
            let key = STRIPE_KEY.load(Ordering::Acquire);
            if key != 0 {
                // The value is only a number (the stripe plus one).
                sys::set_thread_key(key - 1, usize::from(k) + 1);
            }
        }
        k
    }
    fn take_free_stripe(&self) -> Option<u8> {
        for (i, w) in self.free_stripes.iter().enumerate() {
            let mut v = w.load(Ordering::Acquire);
            while v != 0 {
                let b = v.trailing_zeros();
                match w.compare_exchange_weak(v, v & !(1 << b), Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => return Some((i * 64 + b as usize) as u8),
                    Err(now) => v = now,
                }
            }
        }
        None
    }
    /// Has threads give their stripes back when they end (through a
    /// pthread key's destructor, which runs after the thread's own
    /// thread-local destructors), so that a program that starts threads
    /// without end keeps owning a stripe per thread instead of sharing the
    /// last one (whose counts need a bus lock) after 255 of them. For the
    /// process's table only: there is one key.
    pub fn give_back_stripes(&'static self) {
        // glibc keeps keys in a static array (no allocation).
        if let Some(key) = sys::thread_key(stripe_exit) {
            EXIT_COUNTERS.store(self as *const Counters as *mut Counters, Ordering::Release);
            STRIPE_KEY.store(key + 1, Ordering::Release);
        }
    }
    /// In a child after `fork`: the threads that owned the other stripes
    /// are gone; their stripes are free.
    pub fn free_stripes_after_fork(&self) {
        self.sites.after_fork();
        let mine = STRIPE.try_with(|c| usize::from(c.get())).unwrap_or(SHARED);
        let used = self.next_stripe.load(Ordering::Relaxed).min(SHARED);
        for k in (0..used).filter(|&k| k != mine) {
            self.free_stripes[k / 64].fetch_or(1 << (k % 64), Ordering::Release);
        }
    }
    /// This thread's stripe, given one if it has none yet (tests).
    pub fn current_stripe(&self) -> usize {
        usize::from(self.stripe())
    }
    /// Counts an allocation of `size` bytes at `addr` (and at `site`, 0
    /// for none); returns the global live bytes when this thread's share
    /// was just added to them, else 0.
    #[inline]
    pub fn count_alloc(&self, size: u64, site: u32, addr: u64) -> u64 {
        let k = self.stripe() as usize;
        let s = &self.stripes[k];
        bump(k, &s.allocs, 1);
        bump(k, &s.bytes_in, size);
        if k != SHARED {
            // The last allocation was freed before this one: a temporary.
            // (A handler allocating between these stores and the free's
            // makes the free's address disagree: no count, never a wrong one.)
            let last = s.last_addr.load(Ordering::Relaxed);
            if s.last_freed.load(Ordering::Relaxed) == last && last != 0 {
                let ls = s.last_site.load(Ordering::Relaxed) as u32;
                if ls != 0 {
                    self.sites.temporary(k, SHARED, ls);
                }
            }
            s.last_addr.store(addr, Ordering::Relaxed);
            s.last_site.store(u64::from(site), Ordering::Relaxed);
            s.last_freed.store(0, Ordering::Relaxed);
        }
        if site != 0 {
            self.sites.alloc(k, k == SHARED, SHARED, site, size);
        }
        self.maybe_flush(s)
    }
    /// Counts a free of `size` bytes at `addr`; true when the table
    /// should now be walked for the peak (see
    /// [`crate::table::site_totals`]), the freed block added back.
    #[inline]
    #[must_use]
    pub fn count_free(&self, size: u64, addr: u64) -> bool {
        let k = self.stripe() as usize;
        let s = &self.stripes[k];
        bump(k, &s.frees, 1);
        bump(k, &s.bytes_out, size);
        if s.last_addr.load(Ordering::Relaxed) == addr && k != SHARED {
            s.last_freed.store(addr, Ordering::Relaxed);
        }
        let live = self.maybe_flush(s);
        live != 0 && self.sites.walk_due(live, self.peak.load(Ordering::Relaxed))
    }
    #[inline]
    fn maybe_flush(&self, s: &Stripe) -> u64 {
        let cur = s.bytes_in.load(Ordering::Relaxed).wrapping_sub(s.bytes_out.load(Ordering::Relaxed));
        let old = s.flushed.load(Ordering::Relaxed);
        if cur.wrapping_sub(old).wrapping_add(FLUSH) <= 2 * FLUSH {
            return 0;
        }
        self.flush(s, old, cur)
    }
    #[cold]
    fn flush(&self, s: &Stripe, old: u64, cur: u64) -> u64 {
        // A signal handler on this thread may flush in between: then this
        // one gives way rather than add the same bytes twice.
        if s.flushed.compare_exchange(old, cur, Ordering::Relaxed, Ordering::Relaxed).is_err() {
            return 0;
        }
        let d = cur.wrapping_sub(old) as i64;
        let live = self.live.fetch_add(d, Ordering::Relaxed).wrapping_add(d).max(0) as u64;
        if live > self.peak.load(Ordering::Relaxed) {
            self.peak.fetch_max(live, Ordering::Relaxed);
            self.sites.rose(sys::realtime_ns);
        }
        live
    }
    /// Keeps each site's live bytes for the peak.
    pub fn keep_sites_at_peak(&self) {
        self.sites.keep_sites_at_peak();
    }
    /// Starts a walk of the table for the peak (see
    /// [`SiteTotals::begin_walk`]); `paid`: only when the allocations since
    /// the last walk are at least the live blocks.
    #[cold]
    pub fn begin_walk(&self, paid: bool) -> Option<Walk<'_>> {
        let allocs_live = paid.then(|| {
            let [allocs, frees, _, _] = self.sums();
            (allocs, allocs.wrapping_sub(frees))
        });
        self.sites.begin_walk(allocs_live)
    }
    /// Ends a walk: its rows are the heap's peak.
    pub fn end_walk(&self, w: Walk<'_>) {
        self.sites.end_walk(w, self.peak());
    }
    /// Whether the heap's peak is a step above the recorded one, and the
    /// live bytes `live` within a step of it: the heap is at a peak not
    /// yet recorded (for a dump to walk).
    pub fn at_unrecorded_peak(&self, live: u64) -> bool {
        let high = self.peak().max(live);
        self.sites.unrecorded(high) && live.saturating_add(high / 64) >= high
    }
    /// How many owned stripes were ever handed out (their caches are the
    /// ones in use).
    fn stripes_used(&self) -> usize {
        self.next_stripe.load(Ordering::Relaxed).min(SHARED)
    }
    /// The recorded peak (live bytes, ns since the epoch), when sites were counted.
    pub fn recorded_peak(&self) -> Option<(u64, u64)> {
        self.sites.recorded_peak()
    }
    /// Calls `f` with each site's totals and peak row; temporaries whose
    /// thread has not allocated since are counted first.
    ///
    /// # Safety
    /// Only with the world stopped or in a forked child.
    pub unsafe fn for_each_site_row(&self, f: impl FnMut(SiteRow)) {
        if !self.sites.counted() {
            return;
        }
        let used = self.stripes_used();
        for (k, s) in self.stripes[..used].iter().enumerate() {
            let last = s.last_addr.load(Ordering::Relaxed);
            if last != 0 && s.last_freed.load(Ordering::Relaxed) == last {
                let ls = s.last_site.load(Ordering::Relaxed) as u32;
                if ls != 0 {
                    self.sites.temporary(k, SHARED, ls);
                }
                // Counted once: the thread's next allocation finds no match.
                s.last_freed.store(u64::MAX, Ordering::Relaxed);
            }
        }
        // SAFETY: the caller's guarantee, passed on.
        unsafe { self.sites.for_each_row(used, f) }
    }
    pub fn sums(&self) -> [u64; 4] {
        let mut t = [0u64; 4];
        for s in &self.stripes {
            for (x, c) in t.iter_mut().zip([&s.allocs, &s.frees, &s.bytes_in, &s.bytes_out]) {
                *x = x.wrapping_add(c.load(Ordering::Relaxed));
            }
        }
        t
    }
}

/// This thread's stripe (address, size): never a root.
pub(crate) fn tls_stripe() -> (u64, u64) {
    STRIPE.try_with(|v| (v as *const _ as u64, core::mem::size_of_val(v) as u64)).unwrap_or((0, 0))
}
