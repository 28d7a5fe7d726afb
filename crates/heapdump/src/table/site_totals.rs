//! Per-site totals since start (allocations, bytes, frees, temporaries)
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
//! The peak (with `HEAPDUMP_PEAK=1` only: [`SiteTotals::keep_sites_at_peak`]):
//! each site's live bytes are its allocated bytes less its freed bytes (a
//! free reads its block's site: small blocks keep it in the shadow's site
//! word, large ones in the overflow entry). That read is another cache
//! line per free, which cost about 6% on the Rust workload against 2% or
//! less for the totals, so it is not on by default (BENCHMARKS.md). They are summed
//! into the peak array only when the whole heap's live bytes (as the
//! counters flush them) exceed the last recorded peak by a step (1/64 of
//! it) and [`FLOOR`]: a steady heap pays nothing, a growing one pays one
//! pass over the sites per 1.6% of growth. The recorded peak is therefore
//! within that step (and the counters' flush granularity) of the true one.
//!
//! Signal handlers: a handler that allocates or frees on a thread in the
//! middle of one of these updates (see `stop::guard`: a handler nested in
//! the tracker gets no site, so only a free can do it) may move a count
//! to the wrong site or lose one: every update is a single instruction on
//! this thread's own words, or an atomic move of a whole counter on
//! eviction, so nothing is ever corrupted beyond that count.

use crate::sys;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};

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
    /// Frees.
    pub frees: AtomicU64,
    /// Bytes freed.
    pub freed: AtomicU64,
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
    /// `SITE_CAP` peak rows, likewise.
    peak: [AtomicPtr<PeakRow>; CHUNKS],
    /// Set once mapping failed: nothing is counted.
    failed: AtomicBool,
    /// The highest site id counted.
    max_site: AtomicU32,
    /// The live bytes of the last recorded peak (0: none yet).
    recorded: AtomicU64,
    /// When it was recorded (ns since the epoch).
    recorded_ns: AtomicU64,
    /// Held while the peak is recorded (tried, never waited for).
    recording: AtomicBool,
    /// Whether frees are counted per site and the peak recorded
    /// (`HEAPDUMP_PEAK=1`).
    peak_on: AtomicBool,
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
            peak: [const { AtomicPtr::new(core::ptr::null_mut()) }; CHUNKS],
            failed: AtomicBool::new(false),
            max_site: AtomicU32::new(0),
            recorded: AtomicU64::new(0),
            recorded_ns: AtomicU64::new(0),
            recording: AtomicBool::new(false),
            peak_on: AtomicBool::new(false),
        }
    }

    /// Whether frees count per site, for the peak.
    #[inline(always)]
    pub fn peak_on(&self) -> bool {
        self.peak_on.load(Ordering::Relaxed)
    }

    /// Counts frees per site and records the peak from now on (before the
    /// first block is recorded: every live block's free is then counted).
    pub fn keep_sites_at_peak(&self) {
        self.peak_on.store(true, Ordering::Relaxed);
    }

    /// Maps the caches and arrays (sparse) the first time; false when
    /// they cannot be had.
    #[cold]
    #[inline(never)]
    fn map(&self, stripes: usize) -> bool {
        if self.failed.load(Ordering::Relaxed) {
            return false;
        }
        if !self.recording.swap(true, Ordering::Acquire) {
            if self.caches.load(Ordering::Acquire).is_null() {
                match sys::mmap_sparse(stripes * WAYS * core::mem::size_of::<Cached>()) {
                    Ok(c) => self.caches.store(c.cast(), Ordering::Release),
                    Err(_) => self.failed.store(true, Ordering::Relaxed),
                }
            }
            self.recording.store(false, Ordering::Release);
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

    /// The peak row of `site`, likewise.
    fn peak_at(&self, site: u32, map: bool) -> Option<&PeakRow> {
        let slot = self.peak.get(site as usize >> CHUNK_SHIFT)?;
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
        for (from, to) in [
            (&c.allocs, g.map(|g| &g.allocs)),
            (&c.bytes, g.map(|g| &g.bytes)),
            (&c.frees, g.map(|g| &g.frees)),
            (&c.freed, g.map(|g| &g.freed)),
            (&c.temps, g.map(|g| &g.temps)),
        ] {
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

    /// Counts a free of `size` bytes allocated at `site` (not 0).
    #[inline(always)]
    pub fn free(&self, k: usize, shared: bool, stripes: usize, site: u32, size: u64) {
        if let Some((c, atomic)) = self.counts(k, shared, stripes, site) {
            if atomic {
                c.frees.fetch_add(1, Ordering::Relaxed);
                c.freed.fetch_add(size, Ordering::Relaxed);
            } else {
                add_own(&c.frees, 1);
                add_own(&c.freed, size);
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

    /// The live heap reached `live` bytes (as flushed): records each
    /// site's live blocks and bytes when that is a step above the last
    /// recorded peak. `stripes`: how many stripes have caches in use.
    #[inline]
    pub fn maybe_peak(&self, live: u64, stripes: usize, now_ns: impl FnOnce() -> u64) {
        let last = self.recorded.load(Ordering::Relaxed);
        if live < FLOOR || live <= last + last / 64 || !self.peak_on() {
            return;
        }
        self.record_peak(live, stripes, now_ns());
    }

    #[cold]
    #[inline(never)]
    fn record_peak(&self, live: u64, stripes: usize, now_ns: u64) {
        let c = self.caches.load(Ordering::Acquire);
        if c.is_null() {
            return;
        }
        // Another thread (or a handler on this one) is recording: this
        // step is theirs.
        if self.recording.swap(true, Ordering::Acquire) {
            return;
        }
        let max = (self.max_site.load(Ordering::Relaxed) as usize).min(SITE_CAP - 1);
        // Only this (locked) pass writes the peak rows.
        for s in 1..=max as u32 {
            let (count, bytes) = match self.global_at(s, false) {
                Some(gc) => (
                    gc.allocs.load(Ordering::Relaxed).wrapping_sub(gc.frees.load(Ordering::Relaxed)),
                    gc.bytes.load(Ordering::Relaxed).wrapping_sub(gc.freed.load(Ordering::Relaxed)),
                ),
                None => (0, 0),
            };
            if let Some(pr) = self.peak_at(s, count != 0 || bytes != 0) {
                pr.count.store(count, Ordering::Relaxed);
                pr.bytes.store(bytes, Ordering::Relaxed);
            }
        }
        for i in 0..stripes * WAYS {
            // SAFETY: i < stripes * WAYS entries of the caches' mapping.
            let e = unsafe { &*c.add(i) };
            let s = e.site.load(Ordering::Relaxed) as usize;
            if s == 0 || s > max {
                continue;
            }
            let Some(pr) = self.peak_at(s as u32, true) else { continue };
            let count = e.c.allocs.load(Ordering::Relaxed).wrapping_sub(e.c.frees.load(Ordering::Relaxed));
            let bytes = e.c.bytes.load(Ordering::Relaxed).wrapping_sub(e.c.freed.load(Ordering::Relaxed));
            pr.count.store(pr.count.load(Ordering::Relaxed).wrapping_add(count), Ordering::Relaxed);
            pr.bytes.store(pr.bytes.load(Ordering::Relaxed).wrapping_add(bytes), Ordering::Relaxed);
        }
        self.recorded.store(live, Ordering::Relaxed);
        self.recorded_ns.store(now_ns, Ordering::Relaxed);
        self.recording.store(false, Ordering::Release);
    }

    /// The recorded peak's live bytes and time (ns since the epoch), or
    /// `None` when none was recorded or nothing was counted.
    pub fn recorded_peak(&self) -> Option<(u64, u64)> {
        let b = self.recorded.load(Ordering::Relaxed);
        (!self.caches.load(Ordering::Acquire).is_null()).then_some((b, self.recorded_ns.load(Ordering::Relaxed)))
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
        let max = (self.max_site.load(Ordering::Relaxed) as usize).min(SITE_CAP - 1);
        for s in 1..=max as u32 {
            let (gc, pr) = (self.global_at(s, false), self.peak_at(s, false));
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
