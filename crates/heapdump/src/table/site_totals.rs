//! Per-site totals since start (allocations, bytes, temporaries)
//! and each site's live bytes at the heap's last recorded peak.
//!
//! Threads must not share a cache line per allocation (a hot site
//! allocated from many threads would bounce it): each owned stripe of
//! [`crate::table::counters`] has a small direct-mapped cache of
//! (site, counts) that only its thread writes, flushed into one global
//! per-site array on eviction (atomic adds, rare) and summed at dump time
//! with the world stopped. Both are memory mapped from the kernel (sparse:
//! only the pages of site ids in use are ever touched), never the tracked
//! heap. Threads on the shared stripe add to the global array directly.
//!
//! The peak (on by default with every site; `HEAPDUMP_PEAK=0` turns it
//! off: [`SiteTotals::keep_sites_at_peak`]): each site's live blocks and
//! bytes at the moment the whole heap was last near its highest. Nothing
//! is paid for it on the hot path: a free does not read its block's site
//! (that read, another cache line per free, cost 3-10% on the tracker
//! workloads). Instead the table itself is walked once, summing its
//! entries by site, when the peak is about to be lost: when a free
//! brings the live bytes (as the counters flush them) a step (1/64 of the
//! peak) below a peak that exceeds the last recorded one by a step (and
//! [`FLOOR`]); the block being freed is added back. A heap that only
//! grows is never walked (the dump walks it, with the world stopped or
//! in its forked child, when the heap is within a step of an unrecorded
//! peak); a heap that rises and falls is walked once per step of new
//! peak at most, and never more often than its allocations pay for: a
//! walk needs as many allocations since the last one as there are live
//! blocks, so it costs at most one entry visited per allocation (a
//! refused walk leaves the last recorded peak). The walk is one thread's,
//! in the free that triggered it, while the others go on: an entry freed
//! or made during it may be counted or not, or (a slot reused between
//! reading it and its site word) to the wrong site, so the rows are the
//! heap within a step (and the counters' flush granularity) of its peak,
//! as the recorded bytes are. It writes the rows of one of two buffers
//! and then makes it the one a dump reads, so that a dump stopping the
//! walker halfway reads the previous peak whole.
//!
//! Signal handlers: a handler that allocates or frees on a thread in the
//! middle of one of these updates (see `stop::guard`: a handler nested in
//! the tracker gets no site, so only a free can do it) may move a count
//! to the wrong site or lose one: every update is a single instruction on
//! this thread's own words, or an atomic move of a whole counter on
//! eviction, so nothing is ever corrupted beyond that count.

use crate::sys;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Site ids below this are counted (ids are `local * 16 + shard + 1`: 262
/// 144 sites per shard).
pub const SITE_CAP: usize = 1 << 22;
/// Sites per chunk of the global arrays, each chunk mapped when a site of
/// its range is first counted: a program's few thousand sites take one
/// chunk (2.5 MiB of counts, 1 MiB of peak rows, sparse), not address
/// space for every possible id (a limit on address space is the
/// program's, not the tracker's).
const CHUNK_SHIFT: u32 = 16;
const CHUNK: usize = 1 << CHUNK_SHIFT;
const CHUNKS: usize = SITE_CAP / CHUNK;
/// Cache entries per stripe (a power of two).
const WAYS: usize = 64;
/// No peak is recorded below this many live bytes.
pub const FLOOR: u64 = 1 << 20;

/// One site's counts (a cache entry's, or the global array's).
#[repr(C)]
pub struct Counts {
    /// Allocations.
    pub allocs: AtomicU64,
    /// Bytes allocated.
    pub bytes: AtomicU64,
    /// Temporaries: allocations freed before their thread's next one.
    pub temps: AtomicU64,
}

/// A cache entry: the site whose counts it holds (0: none).
#[repr(C)]
struct Cached {
    site: AtomicU64,
    c: Counts,
}

/// A site at the peak: live blocks and bytes.
#[repr(C)]
struct PeakRow {
    count: AtomicU64,
    bytes: AtomicU64,
}

/// One site's row as the dump writes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiteRow {
    /// The site.
    pub site: u32,
    /// Allocations since start.
    pub allocs: u64,
    /// Bytes allocated since start.
    pub bytes: u64,
    /// Temporaries since start.
    pub temps: u64,
    /// Live blocks at the recorded peak.
    pub peak_count: u64,
    /// Live bytes at the recorded peak.
    pub peak_bytes: u64,
}

/// The per-site totals of one table.
pub struct SiteTotals {
    /// `stripes * WAYS` cache entries.
    caches: AtomicPtr<Cached>,
    /// `SITE_CAP` counts, in chunks of `CHUNK` mapped on first use.
    global: [AtomicPtr<Counts>; CHUNKS],
    /// Two buffers of `SITE_CAP` peak rows, likewise: a walk writes the
    /// one that is not `active`.
    peak: [[AtomicPtr<PeakRow>; CHUNKS]; 2],
    /// Set once mapping failed: nothing is counted.
    failed: AtomicBool,
    /// The highest site id counted.
    max_site: AtomicU32,
    /// The buffer of the recorded peak.
    active: AtomicUsize,
    /// Per buffer: the live bytes of its peak (0: none yet) and when it
    /// was reached (ns since the epoch).
    recorded: [AtomicU64; 2],
    recorded_ns: [AtomicU64; 2],
    /// When the heap's peak (the counters') was last raised (ns since the
    /// epoch), while the peak is kept.
    high_ns: AtomicU64,
    /// Allocations (all threads) when the last walk began.
    walked_at: AtomicU64,
    /// Held while the caches are mapped (tried, never waited for).
    mapping: AtomicBool,
    /// Held while the peak rows are written (tried, never waited for).
    walking: AtomicBool,
    /// Whether the peak is kept (`HEAPDUMP_PEAK`, on by default).
    peak_on: AtomicBool,
}

/// A walk of the table in progress (see [`SiteTotals::begin_walk`]): it
/// holds `walking`, and writes buffer `buf`.
pub struct Walk<'a> {
    t: &'a SiteTotals,
    buf: usize,
}

impl Walk<'_> {
    /// Counts a live block of `size` bytes at `site` (0: none, not counted).
    #[inline]
    pub fn add(&self, site: u32, size: u64) {
        if site == 0 || site as usize >= SITE_CAP {
            return;
        }
        if let Some(pr) = self.t.peak_at(self.buf, site, true) {
            // Only the walk (holding `walking`) writes this buffer.
            pr.count.store(pr.count.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
            pr.bytes.store(pr.bytes.load(Ordering::Relaxed).wrapping_add(size), Ordering::Relaxed);
        }
    }
}

/// Mixes a site id into a cache index (ids differ in their low bits by
/// shard and above by local index).
#[inline(always)]
fn way(site: u32) -> usize {
    (site.wrapping_mul(0x9E37_79B1) >> (32 - WAYS.trailing_zeros())) as usize
}

/// Adds `v` to a counter only its own thread writes (see `counters::bump`).
#[inline(always)]
fn add_own(c: &AtomicU64, v: u64) {
    // SAFETY: `c` is a valid, aligned u64; a single `add` to memory is not
    // torn by a signal handler on this thread, and no other thread writes it.
    unsafe { core::arch::asm!("add qword ptr [{p}], {v}", p = in(reg) c.as_ptr(), v = in(reg) v, options(nostack)) };
}

impl SiteTotals {
    /// Nothing counted; memory is mapped at the first count.
    pub const fn new() -> SiteTotals {
        SiteTotals {
            caches: AtomicPtr::new(core::ptr::null_mut()),
            global: [const { AtomicPtr::new(core::ptr::null_mut()) }; CHUNKS],
            peak: [const { [const { AtomicPtr::new(core::ptr::null_mut()) }; CHUNKS] }; 2],
            failed: AtomicBool::new(false),
            max_site: AtomicU32::new(0),
            active: AtomicUsize::new(0),
            recorded: [const { AtomicU64::new(0) }; 2],
            recorded_ns: [const { AtomicU64::new(0) }; 2],
            high_ns: AtomicU64::new(0),
            walked_at: AtomicU64::new(0),
            mapping: AtomicBool::new(false),
            walking: AtomicBool::new(false),
            peak_on: AtomicBool::new(false),
        }
    }

    /// Whether the peak is kept.
    #[inline(always)]
    pub fn peak_on(&self) -> bool {
        self.peak_on.load(Ordering::Relaxed)
    }

    /// Keeps each site's live bytes at the peak from now on.
    pub fn keep_sites_at_peak(&self) {
        self.peak_on.store(true, Ordering::Relaxed);
    }

    /// In a child after `fork`: a walk or a mapping another thread had
    /// under way will never end there.
    pub fn after_fork(&self) {
        self.walking.store(false, Ordering::Release);
        self.mapping.store(false, Ordering::Release);
    }

    /// Maps the caches and arrays (sparse) the first time; false when
    /// they cannot be had.
    #[cold]
    #[inline(never)]
    fn map(&self, stripes: usize) -> bool {
        if self.failed.load(Ordering::Relaxed) {
            return false;
        }
        if !self.mapping.swap(true, Ordering::Acquire) {
            if self.caches.load(Ordering::Acquire).is_null() {
                match sys::mmap_sparse(stripes * WAYS * core::mem::size_of::<Cached>()) {
                    Ok(c) => self.caches.store(c.cast(), Ordering::Release),
                    Err(_) => self.failed.store(true, Ordering::Relaxed),
                }
            }
            self.mapping.store(false, Ordering::Release);
        }
        !self.caches.load(Ordering::Acquire).is_null()
    }

    /// The cache entry of `site` in stripe `k`, or `None` before mapping.
    #[inline(always)]
    fn cached(&self, k: usize, site: u32) -> Option<&Cached> {
        let c = self.caches.load(Ordering::Acquire);
        if c.is_null() {
            return None;
        }
        // SAFETY: the caches hold `stripes * WAYS` entries, k < stripes and
        // way() < WAYS; the mapping is never unmapped; zeros are valid atomics.
        Some(unsafe { &*c.add(k * WAYS + way(site)) })
    }

    /// The global counts of `site` (< SITE_CAP), its chunk mapped first
    /// when `map` (else `None` while it is not).
    #[inline(always)]
    fn global_at(&self, site: u32, map: bool) -> Option<&Counts> {
        let slot = self.global.get(site as usize >> CHUNK_SHIFT)?;
        let g = chunk(slot, map)?;
        // SAFETY: the chunk holds CHUNK entries, mapped for good, and the
        // index is below CHUNK; zeros are valid atomics.
        Some(unsafe { &*g.add(site as usize & (CHUNK - 1)) })
    }

    /// [`SiteTotals::global_at`], mapping.
    #[inline(always)]
    fn global(&self, site: u32) -> Option<&Counts> {
        self.global_at(site, true)
    }

    /// The peak row of `site` in buffer `buf` (0 or 1), likewise.
    fn peak_at(&self, buf: usize, site: u32, map: bool) -> Option<&PeakRow> {
        let slot = self.peak.get(buf)?.get(site as usize >> CHUNK_SHIFT)?;
        let p = chunk(slot, map)?;
        // SAFETY: as in `global_at`.
        Some(unsafe { &*p.add(site as usize & (CHUNK - 1)) })
    }

    /// The counts of `site` to add to from stripe `k`: its cache entry
    /// (evicting another site's counts into the global array), or, on the
    /// shared stripe, the global counts (`true`: add atomically).
    #[inline(always)]
    fn counts(&self, k: usize, shared: bool, stripes: usize, site: u32) -> Option<(&Counts, bool)> {
        if site as usize >= SITE_CAP {
            return None;
        }
        if shared {
            if self.caches.load(Ordering::Relaxed).is_null() && !self.map(stripes) {
                return None;
            }
            self.max_site.fetch_max(site, Ordering::Relaxed);
            return self.global(site).map(|g| (g, true));
        }
        let e = match self.cached(k, site) {
            Some(e) => e,
            None if self.map(stripes) => self.cached(k, site)?,
            None => return None,
        };
        if e.site.load(Ordering::Relaxed) != u64::from(site) {
            self.evict(e, site);
        }
        Some((&e.c, false))
    }

    /// Moves a cache entry's counts to the global array and gives it to `site`.
    #[cold]
    #[inline(never)]
    fn evict(&self, e: &Cached, site: u32) {
        let old = e.site.swap(u64::from(site), Ordering::Relaxed) as u32;
        self.max_site.fetch_max(site, Ordering::Relaxed);
        self.move_counts(&e.c, old);
    }

    fn move_counts(&self, c: &Counts, site: u32) {
        let g = self.global(site);
        for (from, to) in [(&c.allocs, g.map(|g| &g.allocs)), (&c.bytes, g.map(|g| &g.bytes)), (&c.temps, g.map(|g| &g.temps))] {
            let v = from.swap(0, Ordering::Relaxed);
            if let (Some(to), true) = (to, v != 0 && site != 0) {
                to.fetch_add(v, Ordering::Relaxed);
            }
        }
    }

    /// Counts an allocation of `size` bytes at `site` (not 0) from stripe `k`.
    #[inline(always)]
    pub fn alloc(&self, k: usize, shared: bool, stripes: usize, site: u32, size: u64) {
        if let Some((c, atomic)) = self.counts(k, shared, stripes, site) {
            if atomic {
                c.allocs.fetch_add(1, Ordering::Relaxed);
                c.bytes.fetch_add(size, Ordering::Relaxed);
            } else {
                add_own(&c.allocs, 1);
                add_own(&c.bytes, size);
            }
        }
    }

    /// Counts a temporary of `site` (not 0), from an owned stripe `k`.
    #[inline]
    pub fn temporary(&self, k: usize, stripes: usize, site: u32) {
        if let Some((c, _)) = self.counts(k, false, stripes, site) {
            add_own(&c.temps, 1);
        }
    }

    /// The heap's peak was just raised: notes when.
    #[inline]
    pub fn rose(&self, now_ns: impl FnOnce() -> u64) {
        if self.peak_on() {
            self.high_ns.store(now_ns(), Ordering::Relaxed);
        }
    }

    /// Whether the heap's peak, `high` live bytes, is a step above the
    /// recorded one (and at least [`FLOOR`]): a new peak to record.
    #[inline]
    pub fn unrecorded(&self, high: u64) -> bool {
        let last = self.recorded[self.active.load(Ordering::Acquire) & 1].load(Ordering::Relaxed);
        self.peak_on() && high >= FLOOR && high > last + last / 64
    }

    /// A free brought the live bytes (as flushed) to `live`: whether the
    /// table should be walked now for the peak of `high` bytes, before the
    /// heap leaves it (a step below an unrecorded peak).
    #[inline(always)]
    pub fn walk_due(&self, live: u64, high: u64) -> bool {
        live.saturating_add(high / 64) < high && self.unrecorded(high)
    }

    /// Starts a walk for the peak, unless one is under way (or was stopped
    /// halfway by a dump, or nothing is counted), or, when `allocs_live`
    /// says so (allocations since start, live blocks), the allocations
    /// since the last walk are fewer than the live blocks it would visit.
    /// The new buffer's rows are zeroed.
    #[cold]
    pub fn begin_walk(&self, allocs_live: Option<(u64, u64)>) -> Option<Walk<'_>> {
        if !self.counted() || self.walking.swap(true, Ordering::Acquire) {
            return None;
        }
        if let Some((allocs, live)) = allocs_live {
            if allocs.wrapping_sub(self.walked_at.load(Ordering::Relaxed)) < live {
                self.walking.store(false, Ordering::Release);
                return None;
            }
            self.walked_at.store(allocs, Ordering::Relaxed);
        }
        let buf = (self.active.load(Ordering::Acquire) & 1) ^ 1;
        // Rows written by an earlier walk (a row never written is read
        // from the kernel's zero page, not made resident).
        let max = (self.max_site.load(Ordering::Relaxed) as usize).min(SITE_CAP - 1);
        for (c, slot) in self.peak[buf].iter().enumerate().take((max >> CHUNK_SHIFT) + 1) {
            let p = slot.load(Ordering::Acquire);
            if p.is_null() {
                continue;
            }
            for i in 0..CHUNK.min(max + 1 - (c << CHUNK_SHIFT)) {
                // SAFETY: i < CHUNK rows of a chunk mapped for good; only
                // the walk (holding `walking`) writes this buffer.
                let pr = unsafe { &*p.add(i) };
                if pr.count.load(Ordering::Relaxed) != 0 || pr.bytes.load(Ordering::Relaxed) != 0 {
                    pr.count.store(0, Ordering::Relaxed);
                    pr.bytes.store(0, Ordering::Relaxed);
                }
            }
        }
        Some(Walk { t: self, buf })
    }

    /// Ends a walk: its rows are the peak of `high` bytes, reached at
    /// `high_ns` (or, when 0, the time the heap's peak was last raised).
    pub fn end_walk(&self, w: Walk<'_>, high: u64) {
        let ns = self.high_ns.load(Ordering::Relaxed);
        self.recorded[w.buf].store(high, Ordering::Relaxed);
        self.recorded_ns[w.buf].store(if ns != 0 { ns } else { sys::realtime_ns() }, Ordering::Relaxed);
        self.active.store(w.buf, Ordering::Release);
        self.walking.store(false, Ordering::Release);
    }

    /// The recorded peak's live bytes and time (ns since the epoch), or
    /// `None` when nothing was counted (bytes 0: no peak recorded).
    pub fn recorded_peak(&self) -> Option<(u64, u64)> {
        let a = self.active.load(Ordering::Acquire) & 1;
        self.counted().then(|| (self.recorded[a].load(Ordering::Relaxed), self.recorded_ns[a].load(Ordering::Relaxed)))
    }

    /// Whether anything was counted.
    pub fn counted(&self) -> bool {
        !self.caches.load(Ordering::Acquire).is_null()
    }

    /// Calls `f` with each site's row that has anything to say, after
    /// moving every cache's counts to the global array.
    ///
    /// # Safety
    /// Only with the world stopped or in a forked child (a thread in the
    /// middle of an update could lose a count, never more).
    pub unsafe fn for_each_row(&self, stripes: usize, mut f: impl FnMut(SiteRow)) {
        let c = self.caches.load(Ordering::Acquire);
        if c.is_null() {
            return;
        }
        for i in 0..stripes * WAYS {
            // SAFETY: i < stripes * WAYS entries of the caches' mapping.
            let e = unsafe { &*c.add(i) };
            let s = e.site.load(Ordering::Relaxed) as u32;
            self.move_counts(&e.c, s);
        }
        let buf = self.active.load(Ordering::Acquire) & 1;
        let max = (self.max_site.load(Ordering::Relaxed) as usize).min(SITE_CAP - 1);
        for s in 1..=max as u32 {
            let (gc, pr) = (self.global_at(s, false), self.peak_at(buf, s, false));
            let load = |a: Option<&AtomicU64>| a.map_or(0, |a| a.load(Ordering::Relaxed));
            let r = SiteRow {
                site: s,
                allocs: load(gc.map(|g| &g.allocs)),
                bytes: load(gc.map(|g| &g.bytes)),
                temps: load(gc.map(|g| &g.temps)),
                peak_count: load(pr.map(|p| &p.count)),
                peak_bytes: load(pr.map(|p| &p.bytes)),
            };
            if r.allocs != 0 || r.peak_bytes != 0 {
                f(r);
            }
        }
    }
}

/// The chunk a slot points to, mapped (sparse, zeroed, the runtime's own)
/// when `map` and not yet; `None` when it is not (or cannot be) mapped.
#[cold]
fn map_chunk<T>(slot: &AtomicPtr<T>) -> Option<*mut T> {
    let mine: *mut T = sys::mmap_sparse(CHUNK * core::mem::size_of::<T>()).ok()?.cast();
    match slot.compare_exchange(core::ptr::null_mut(), mine, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Some(mine),
        Err(theirs) => {
            // Another thread mapped it first: keep theirs.
            // SAFETY: `mine` was mapped just above, never shared.
            unsafe { sys::munmap(mine.cast(), CHUNK * core::mem::size_of::<T>()) };
            Some(theirs)
        }
    }
}

#[inline(always)]
fn chunk<T>(slot: &AtomicPtr<T>, map: bool) -> Option<*mut T> {
    let p = slot.load(Ordering::Acquire);
    if !p.is_null() {
        return Some(p);
    }
    if map {
        map_chunk(slot)
    } else {
        None
    }
}
