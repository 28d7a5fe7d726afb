//! The live table: every live allocation, in memory mapped straight from
//! the kernel. Three parts, each in a file of its own:
//! - the small blocks (at most [`crate::table::slots::SMALL_MAX`] bytes, 16-byte aligned,
//!   alignment at most 16, below 2^47) in address-indexed slots
//!   ([`crate::table::slots`]);
//! - every other block in the overflow table ([`crate::table::overflow`]), 64
//!   shards behind spin locks taken under [`crate::stop::guard::Locked`], so
//!   that a signal handler allocating on a thread that holds one defers its
//!   update instead of spinning on it;
//! - the counts, per thread ([`crate::table::counters`]).
//!
//! The room owns those files (`slots` over `shadow` or its buckets,
//! `overflow`, `counters`) and this one, the only door: the tracker and
//! the dump ask `Table`, never a part. It may touch `entry` (the record it
//! stores and gives back), `stop::guard` (`Locked`, so that a stop waits
//! until its locks are released) and `sys` (its mappings); nothing above.
//!
//! ## One allocation, top-down
//! Everything an insert does, in the order it happens ([`Table::insert`]
//! is the only entry; each step names the file it runs in):
//! 1. `is_small` (`slots`): at most `SMALL_MAX` bytes, 16-byte aligned,
//!    below 2^47? Otherwise go to 4.
//! 2. `Slots::place` (`slots`, asking `shadow` whether the page is marked
//!    or the buckets whether the window has one): the slot exists. Then
//!    `Slots::fill` writes the site word and the slot, and
//!    `Counters::count_alloc` (`counters`) counts the block in this
//!    thread's stripe, flushing to the global live bytes every `FLUSH`
//!    bytes; the result is those live bytes (0 when not flushed). This is
//!    the inline common case ([`Table::try_insert`]): no lock, no mapping.
//! 3. `Slots::place_new`: the page is marked (or the bucket mapped) first,
//!    then as 2. Only when no slot can be had does a small block go on.
//! 4. Beyond 2^48 or a size of 2^49: counted untracked, not kept.
//! 5. A large block at an address whose small block's free was missed
//!    empties that slot; then the overflow shard of the address
//!    (`overflow`), under its spin lock inside `Locked`, takes the entry
//!    (replacing a stale one, counted freed), and the block is counted.
//!
//! A free runs the same steps backwards: [`Table::try_forget`] (the slot of
//! a small block of known layout), else [`Table::remove`] (slot, then shard).
//!
//! Why by address: a hash table scatters neighbouring blocks over the whole
//! table, so every allocation and every free missed the cache on a slot of
//! its own (that was most of the tracker's cost). Slots by address follow
//! the allocator's own locality: blocks made or freed together share a
//! line.
//!
//! Memory: both slot layouts take an eighth of the address span where
//! small blocks are dense (2 bytes per 16). Where they are scattered among
//! large blocks, the shadow takes a 4 KiB page for every 32 KiB that holds
//! one (an eighth of the span) and the buckets a 64-byte line for every
//! 512 bytes that does, plus 4 bytes per 512 bytes of span for the leaves:
//! dump_bench's heap, 48-byte nodes among payloads of up to 4 KiB, costs
//! 148 bytes per allocation with the shadow and 55 with buckets. The
//! shadow is the default for its speed (an allocation or a free touches
//! one line of the table; buckets cost three dependent loads before it).
//!
//! An address live twice means a free the tracker never saw (a path that
//! bypassed it): the newer entry replaces the older, except that a small
//! block does not look for a stale large one at its address (that would
//! cost a hash lookup per allocation); the dump keeps the small one.
//! Addresses at or above 2^48 (5-level paging only) are counted, not
//! tracked.

pub(crate) mod counters;
pub(crate) mod marks;
pub(crate) mod overflow;
pub(crate) mod shadow;
pub(crate) mod site_totals;
pub(crate) mod slots;

pub use crate::entry::Entry;
use crate::sys::lock::SpinLock;
pub(crate) use crate::table::counters::tls_stripe;
use crate::table::counters::Counters;
use crate::table::overflow::{shard_index, NoRoom, Shard, Slot, ADDR_MASK, SHARDS};
use crate::table::shadow::Shadow;

use crate::table::slots::{is_small, slot_size, Place, Slots};
use core::sync::atomic::{AtomicU64, Ordering};

/// The live table.
pub struct Table {
    slots: Slots,
    /// Small blocks put in the overflow table for want of a bucket.
    small_overflow: AtomicU64,
    overflow: [SpinLock<Shard>; SHARDS],
    counters: Counters,
    /// Allocations at addresses the table cannot hold, or lost for lack of memory.
    pub untracked: AtomicU64,
}

/// Totals of the table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Live allocations.
    pub live_count: u64,
    /// Their requested bytes.
    pub live_bytes: u64,
    /// Allocations made since start.
    pub total_allocs: u64,
    /// Bytes allocated since start.
    pub total_bytes: u64,
    /// Bytes the table itself occupies.
    pub table_bytes: u64,
}

impl Table {
    /// An empty table; memory is mapped on first use.
    pub const fn new() -> Table {
        Table {
            slots: Slots::new(),
            small_overflow: AtomicU64::new(0),
            overflow: [const { SpinLock::new(Shard::empty()) }; SHARDS],
            counters: Counters::new(),
            untracked: AtomicU64::new(0),
        }
    }

    /// Calls `f(start, end)` for each `chunk`-aligned range of the slots'
    /// shadow that holds marked pages, in address order (nothing when the
    /// slots are in buckets).
    pub fn for_each_shadow_chunk(&self, chunk: u64, f: &mut dyn FnMut(u64, u64)) {
        self.slots.for_each_shadow_chunk(chunk, f)
    }

    /// The same for the shadow's site words (see [`Slots::for_each_site_chunk`]).
    pub fn for_each_site_chunk(&self, chunk: u64, f: &mut dyn FnMut(u64, u64)) {
        self.slots.for_each_site_chunk(chunk, f)
    }

    /// Keeps the shadow on 4 KiB pages (called before the first small block
    /// is recorded).
    pub fn no_huge_pages(&self) {
        self.slots.no_huge_pages();
    }

    /// Every block will have a site (called before the first small block
    /// is recorded): the shadow's site words get huge pages where its slots
    /// do.
    pub fn every_block_has_a_site(&self) {
        self.slots.every_block_has_a_site();
    }

    /// Keeps each site's live bytes for the peak (see
    /// [`crate::table::site_totals`]).
    pub fn keep_sites_at_peak(&self) {
        self.counters.keep_sites_at_peak();
    }

    /// Keeps small blocks in buckets rather than the shadow (called before
    /// the first is recorded).
    pub fn use_buckets(&self) {
        self.slots.use_buckets();
    }

    /// Has threads give their counters' stripes back when they end (see
    /// [`Counters::give_back_stripes`]). For the process's table only.
    pub fn give_back_stripes(&'static self) {
        self.counters.give_back_stripes();
    }

    /// In a child after `fork`: the other threads' stripes are free.
    pub fn free_stripes_after_fork(&self) {
        self.counters.free_stripes_after_fork();
    }

    /// This thread's stripe, given one if it has none yet (tests).
    pub fn current_stripe(&self) -> usize {
        self.counters.current_stripe()
    }

    /// The highest live bytes seen.
    pub fn peak(&self) -> u64 {
        self.counters.peak()
    }

    /// Starts loading the cache line where `addr`'s entry will go, so that
    /// work done meanwhile (capturing its site) hides a cache miss.
    #[inline]
    pub fn prefetch(&self, addr: u64) {
        self.slots.prefetch(addr);
    }

    /// Fills a small block's slot and counts it (and the block whose free
    /// was missed, if the slot held one); the live bytes when they were
    /// brought up to date, else 0.
    #[inline(always)]
    fn fill(&self, p: Place, e: &Entry, in_use: bool) -> u64 {
        let old = self.slots.fill(p, e, in_use);
        if old != 0 {
            // A free never seen: no walk for the peak here.
            let _ = self.counters.count_free(slot_size(old), e.addr);
        }
        self.counters.count_alloc(e.size, counted_site(e), e.addr)
    }

    /// Records a new allocation. Returns the live bytes after it when they
    /// were brought up to date (at least every [`crate::table::counters::FLUSH`]
    /// bytes), else 0.
    #[inline(always)]
    pub fn insert(&self, e: &Entry) -> u64 {
        match self.try_insert(e) {
            Some(live) => live,
            None => self.insert_slow(e),
        }
    }

    /// The common case of [`Table::insert`], inline: a small block in a
    /// shadow page already marked (or a window that already has a bucket).
    /// It takes no lock and maps nothing. `None` (nothing done) when the
    /// block needs the rest of `insert`.
    #[inline(always)]
    pub fn try_insert(&self, e: &Entry) -> Option<u64> {
        if is_small(e.addr, e.size, e.align_log2) {
            if let Some(p) = self.slots.place(e.addr, true) {
                return Some(self.fill(p, e, true));
            }
        }
        None
    }

    #[inline(never)]
    fn insert_slow(&self, e: &Entry) -> u64 {
        let small = is_small(e.addr, e.size, e.align_log2);
        if small {
            if let Some(p) = self.slots.place_new(e.addr) {
                return self.fill(p, e, false);
            }
        }
        if e.addr > ADDR_MASK || e.size >> 49 != 0 {
            return self.untracked_one();
        }
        if small {
            self.small_overflow.fetch_add(1, Ordering::Relaxed);
        } else if let Some(p) = self.slots.place(e.addr, true).filter(|_| e.addr & 15 == 0 && Shadow::covers(e.addr)) {
            // A small block at this address whose free we never saw.
            self.take_counted(p, e.addr);
        }
        let r = {
            let _l = crate::stop::guard::Locked::new();
            // Bound, so that the lock is released before `_l` says so
            // (a tail expression's temporaries would outlive `_l`).
            let mut shard = self.overflow[shard_index(e.addr)].lock();
            shard.insert(e)
        };
        match r {
            Ok(None) => {}
            Ok(Some(old)) => {
                let _ = self.counters.count_free(old.size, old.addr);
            }
            Err(NoRoom) => return self.untracked_one(),
        }
        self.counters.count_alloc(e.size, counted_site(e), e.addr)
    }

    #[cold]
    fn untracked_one(&self) -> u64 {
        self.untracked.fetch_add(1, Ordering::Relaxed);
        0
    }

    /// Forgets an allocation of a known layout (size, log2 of the
    /// alignment): [`Table::remove`] without building the entry.
    #[inline(always)]
    pub fn forget(&self, addr: u64, layout: (u64, u8)) {
        if !self.try_forget(addr, layout) {
            self.remove_slow(addr, Some(layout));
        }
    }

    /// The common case of [`Table::forget`], inline: a small block found
    /// in its slot. It takes no lock. False (nothing done) when the block
    /// needs the rest of `forget`.
    #[inline(always)]
    pub fn try_forget(&self, addr: u64, layout: (u64, u8)) -> bool {
        self.take_small(addr, layout).is_some()
    }

    /// [`Table::try_forget`] that hands back the entry (a block being
    /// reallocated keeps its site when it stays in place). `None`
    /// (nothing done) when the block needs [`Table::remove`].
    #[inline(always)]
    pub fn try_remove(&self, addr: u64, layout: (u64, u8)) -> Option<Entry> {
        self.take_small(addr, layout).map(|(p, v)| self.slots.decode(p, addr, v))
    }

    /// Empties the slot of the small block at `addr` of a known layout and
    /// counts it freed; its place and what the slot held, or `None`
    /// (nothing done) when it is not small or not in its slot.
    #[inline(always)]
    fn take_small(&self, addr: u64, layout: (u64, u8)) -> Option<(Place, u16)> {
        if !is_small(addr, layout.0, layout.1) {
            return None;
        }
        // No look at the shadow page's mark: a small block being freed was
        // put in its page (or was never tracked: then the page reads as zeros).
        let p = self.slots.place(addr, false)?;
        let v = self.slots.take(p, addr);
        if v == 0 {
            return None;
        }
        // The size the caller gives, not the slot's: the count then does
        // not wait for the slot's line to arrive. (They are equal: a Rust
        // deallocation passes the layout the block was allocated or
        // reallocated with.)
        if self.counters.count_free(layout.0, addr) {
            // The site word outlives the slot.
            self.walk_for_peak(self.slots.site_of(p, addr, v), layout.0);
        }
        Some((p, v))
    }

    /// [`Table::try_forget`] for a block of unknown size (the preload
    /// library's `free`): its slot, if it holds one. False (nothing done)
    /// when the block needs [`Table::remove`].
    #[inline(always)]
    pub fn try_take(&self, addr: u64) -> bool {
        addr & 15 == 0 && Shadow::covers(addr) && self.slots.place(addr, true).is_some_and(|p| self.take_counted(p, addr) != 0)
    }

    /// Empties the slot at `p` for `addr`, counting the block it held as
    /// freed; returns what it held (0: nothing).
    #[inline(always)]
    fn take_counted(&self, p: Place, addr: u64) -> u16 {
        let v = self.slots.take(p, addr);
        if v != 0 && self.counters.count_free(slot_size(v), addr) {
            self.walk_for_peak(self.slots.site_of(p, addr, v), slot_size(v));
        }
        v
    }

    #[inline(never)]
    fn remove_slow(&self, addr: u64, layout: Option<(u64, u8)>) -> Option<Entry> {
        self.remove(addr, layout)
    }

    /// Forgets an allocation; returns its entry if it was known. `layout`,
    /// when the caller knows it (size, log2 of the alignment), says which
    /// part of the table holds it; otherwise both are looked at.
    #[inline]
    pub fn remove(&self, addr: u64, layout: Option<(u64, u8)>) -> Option<Entry> {
        let small = layout.map(|(size, align_log2)| is_small(addr, size, align_log2));
        if small != Some(false) && addr & 15 == 0 && Shadow::covers(addr) {
            if let Some(p) = self.slots.place(addr, true) {
                let v = self.take_counted(p, addr);
                if v != 0 {
                    return Some(self.slots.decode(p, addr, v));
                }
            }
            if small == Some(true) && self.small_overflow.load(Ordering::Relaxed) == 0 {
                return None;
            }
        }
        let e = {
            let _l = crate::stop::guard::Locked::new();
            let mut shard = self.overflow[shard_index(addr)].lock();
            shard.remove(addr)
        }?;
        if self.counters.count_free(e.size, addr) {
            self.walk_for_peak(counted_site(&e), e.size);
        }
        Some(e)
    }

    /// A free (of `size` bytes at `site`, already taken out of the table)
    /// brought the heap a step below a peak not yet recorded: walks the
    /// table, summing its blocks by site, as the peak's rows (see
    /// [`crate::table::site_totals`]), unless the allocations since the
    /// last walk do not pay for it.
    #[cold]
    #[inline(never)]
    fn walk_for_peak(&self, site: u32, size: u64) {
        if let Some(w) = self.counters.begin_walk(true) {
            w.add(site, size);
            self.sum_by_site(&w);
            self.counters.end_walk(w);
        }
    }

    /// Adds every block in the table to the walk `w`, by site.
    fn sum_by_site(&self, w: &site_totals::Walk<'_>) {
        // SAFETY: with other threads running too: every mapping the slots
        // are read from stays mapped while the table is in use and every
        // word is read atomically, so the walk reads only memory it may; a
        // slot written meanwhile may give a block or not, or (its site word
        // read after another block took the slot) the wrong site, which
        // the walk's rows allow for (see `site_totals`).
        unsafe { self.slots.for_each_unlocked(|e| w.add(counted_site(&e), e.size)) };
        for s in &self.overflow {
            let _l = crate::stop::guard::Locked::new();
            let shard = s.lock();
            shard.for_each(|e| w.add(counted_site(&e), e.size));
        }
    }

    /// Before a dump (the world stopped, or in its forked child): when the
    /// heap is within a step of a peak not yet recorded (a heap that grew
    /// and never fell back), records it now by a walk.
    ///
    /// # Safety
    /// As for [`Table::for_each_small_unlocked`].
    pub unsafe fn record_peak_now(&self) {
        let (_, live) = self.live();
        if self.counters.at_unrecorded_peak(live) {
            self.counters.note_peak(live);
            if let Some(w) = self.counters.begin_walk(false) {
                self.sum_by_site(&w);
                self.counters.end_walk(w);
            }
        }
    }

    /// Sums the counters, and measures the table's memory.
    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        let [allocs, frees, bytes_in, bytes_out] = self.counters.sums();
        t.live_count = allocs.wrapping_sub(frees);
        t.live_bytes = bytes_in.wrapping_sub(bytes_out);
        t.total_allocs = allocs;
        t.total_bytes = bytes_in;
        self.counters.note_peak(t.live_bytes);
        for s in &self.overflow {
            let _l = crate::stop::guard::Locked::new();
            t.table_bytes += (s.lock().capacity() * core::mem::size_of::<Slot>()) as u64;
        }
        t.table_bytes += self.slots.bytes();
        t
    }

    /// Visits the entries of the address-indexed slots, in address order.
    ///
    /// # Safety
    /// Only with the world stopped (no other thread inside the tracker) or
    /// in a forked child.
    pub unsafe fn for_each_small_unlocked(&self, f: impl FnMut(Entry)) {
        // SAFETY: the caller's guarantee, passed on.
        unsafe { self.slots.for_each_unlocked(f) }
    }

    /// Entries in the overflow table.
    ///
    /// # Safety
    /// As for [`Table::for_each_small_unlocked`].
    pub unsafe fn overflow_len_unlocked(&self) -> usize {
        // SAFETY: the caller stopped the world (or is the forked child): no
        // shard is written while it is read.
        self.overflow.iter().map(|s| unsafe { s.get_unlocked() }.len()).sum()
    }

    /// Live allocations as the per-thread counts say (exact while no
    /// thread is inside the tracker).
    pub fn live_count(&self) -> u64 {
        self.live().0
    }

    /// Live allocations and their bytes as the per-thread counts say.
    pub fn live(&self) -> (u64, u64) {
        let [allocs, frees, bytes_in, bytes_out] = self.counters.sums();
        (allocs.wrapping_sub(frees), bytes_in.wrapping_sub(bytes_out))
    }

    /// Allocations and bytes since start, and the peak of live bytes
    /// (see `Stats::peak_bytes`): atomics only, for the dump to read with
    /// the world stopped.
    pub fn history(&self) -> (u64, u64, u64) {
        let [allocs, _, bytes_in, bytes_out] = self.counters.sums();
        (allocs, bytes_in, self.counters.peak().max(bytes_in.wrapping_sub(bytes_out)))
    }

    /// The recorded peak (live bytes, ns since the epoch), when sites were
    /// counted (see [`crate::table::site_totals`]).
    pub fn recorded_peak(&self) -> Option<(u64, u64)> {
        self.counters.recorded_peak()
    }

    /// Calls `f` with each site's totals since start and its live blocks
    /// and bytes at the recorded peak.
    ///
    /// # Safety
    /// As for [`Table::for_each_small_unlocked`].
    pub unsafe fn for_each_site_row(&self, f: impl FnMut(site_totals::SiteRow)) {
        // SAFETY: the caller's guarantee, passed on.
        unsafe { self.counters.for_each_site_row(f) }
    }

    /// Visits the entries of the overflow table, in no particular order.
    ///
    /// # Safety
    /// As for [`Table::for_each_small_unlocked`].
    pub unsafe fn for_each_overflow_unlocked(&self, mut f: impl FnMut(Entry)) {
        for s in &self.overflow {
            // SAFETY: as for the length: no shard is written while it is read.
            unsafe { s.get_unlocked() }.for_each(&mut f);
        }
    }

    /// Takes every lock (before fork).
    pub fn lock_all(&self) {
        crate::sys::lock::lock_all_for_fork(&self.overflow);
    }

    /// Releases every lock (after fork).
    ///
    /// # Safety
    /// Only after [`Table::lock_all`].
    pub unsafe fn unlock_all(&self) {
        // SAFETY: the caller took these locks with `lock_all` (before fork).
        unsafe { crate::sys::lock::unlock_all_after_fork(&self.overflow) }
    }
}

impl Drop for Table {
    /// Gives back the shadow's address space (the process's table is a
    /// static and never dropped; tests make and drop tables).
    fn drop(&mut self) {
        self.slots.release();
    }
}

/// The site an entry's counts go to: none for a sampled site (its counts
/// would be a sample's).
#[inline(always)]
fn counted_site(e: &Entry) -> u32 {
    if e.sampled {
        0
    } else {
        e.site
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::counters::FLUSH;
    use crate::table::slots::SMALL_MAX;

    #[test]
    fn pack_round_trips_extreme_values() {
        for e in [
            Entry { addr: 1, size: 0, align_log2: 0, site: 0, sampled: false },
            Entry { addr: ADDR_MASK, size: (1 << 49) - 1, align_log2: 63, site: 0xff_ffff, sampled: true },
            Entry { addr: 0x5555_0000_1230, size: 1 << 40, align_log2: 4, site: 17, sampled: false },
        ] {
            assert_eq!(Slot::pack(&e).unpack(), e);
        }
    }

    #[test]
    fn shard_matches_a_model_through_growth_and_deletion() {
        let mut s = Shard::empty();
        let mut model = std::collections::BTreeMap::new();
        let mut x = 0x1234_5678u64;
        for step in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let addr = 0x1000 + (x % 50_000) * 16;
            if model.contains_key(&addr) && step % 3 != 0 {
                let e = s.remove(addr).unwrap();
                assert_eq!(e.addr, addr);
                assert_eq!(Some(e.size), model.remove(&addr));
            } else if let std::collections::btree_map::Entry::Vacant(v) = model.entry(addr) {
                let e = Entry { addr, size: x % 1000, align_log2: 3, site: (x % 7) as u32, sampled: false };
                assert_eq!(s.insert(&e), Ok(None));
                v.insert(e.size);
            }
        }
        assert_eq!(s.len(), model.len());
        let mut seen = std::collections::BTreeMap::new();
        s.for_each(|e| {
            seen.insert(e.addr, e.size);
        });
        assert_eq!(seen, model);
    }

    /// Random operations on a table against a map: small and large blocks,
    /// odd addresses, over-aligned ones, blocks in far-apart leaves,
    /// replacement of an address never freed, and removal with and without
    /// the layout. The table must hold exactly the model's entries, the
    /// small ones in address order, and count them exactly.
    /// The peak's rows: a walk of the table when a free takes the heap a
    /// step below a new peak (the freed block added back), none while it
    /// grows, and one before a dump when the heap is at a peak never left.
    #[test]
    fn the_peak_is_walked_when_the_heap_leaves_it() {
        let t = Box::new(Table::new());
        t.every_block_has_a_site();
        t.keep_sites_at_peak();
        let rows = |t: &Table| {
            let mut v = Vec::new();
            // SAFETY: no other thread uses this table.
            unsafe { t.for_each_site_row(|r| v.push((r.site, r.peak_count, r.peak_bytes))) };
            v.sort();
            v
        };
        let small = 0x5555_0000_0000u64;
        for i in 0..4096 {
            t.insert(&Entry { addr: small + i * 512, size: 512, align_log2: 4, site: 1, sampled: false });
        }
        let big = 0x6000_0000_0000u64;
        t.insert(&Entry { addr: big, size: 8 << 20, align_log2: 4, site: 2, sampled: false });
        assert_eq!(t.recorded_peak().map(|p| p.0), Some(0), "nothing recorded while the heap grows");
        assert_eq!(t.remove(big, None).map(|e| e.site), Some(2));
        let (bytes, ns) = t.recorded_peak().unwrap();
        assert!(bytes >= (10 << 20) - FLUSH && ns > 0, "{bytes}");
        assert_eq!(rows(&t), vec![(1, 4096, 2 << 20), (2, 1, 8 << 20)], "the freed buffer added back");
        // Growing past it by more than a step, without falling back: the
        // rows stay until a dump asks.
        for i in 0..4u64 {
            t.insert(&Entry { addr: big + (i << 24), size: 4 << 20, align_log2: 4, site: 3, sampled: false });
        }
        assert_eq!(rows(&t), vec![(1, 4096, 2 << 20), (2, 1, 8 << 20), (3, 0, 0)]);
        // SAFETY: no other thread uses this table.
        unsafe { t.record_peak_now() };
        assert_eq!(rows(&t), vec![(1, 4096, 2 << 20), (2, 0, 0), (3, 4, 16 << 20)]);
        assert!(t.recorded_peak().unwrap().0 >= 18 << 20);
    }

    #[test]
    fn table_matches_a_model() {
        let t = Box::new(Table::new());
        matches_a_model(&t);
        assert!(t.slots.in_shadow(), "small blocks went to the shadow");
    }

    /// The same where the shadow is refused: small blocks in buckets.
    #[test]
    fn table_with_buckets_matches_a_model() {
        let t = Box::new(Table::new());
        t.use_buckets();
        matches_a_model(&t);
        assert!(!t.slots.in_shadow() && t.slots.bytes() > 0, "small blocks went to buckets");
    }

    fn matches_a_model(t: &Table) {
        let mut model = std::collections::BTreeMap::<u64, Entry>::new();
        let (mut allocs, mut bytes) = (0u64, 0u64);
        let mut x = 0x9e37_79b9u64;
        for step in 0..300_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let region = [0x5555_0000_0000u64, 0x7fff_f000_0000, 0x1000_0000, 0x5555_00ff_f000][(x >> 60) as usize % 4];
            let addr = region + (x % 40_000) * [16, 8, 48][(x >> 50) as usize % 3];
            let old = model.get(&addr).copied();
            if let Some(old) = old.filter(|_| step % 5 != 0) {
                let layout = (x >> 33) & 1 == 0;
                let got = t.remove(addr, layout.then_some((old.size, old.align_log2)));
                assert_eq!(got, Some(old));
                model.remove(&addr);
            } else {
                let size = match (x >> 20) % 10 {
                    0 => 0,
                    1 => SMALL_MAX,
                    2 => SMALL_MAX + 1,
                    3 => 5 << 30,
                    _ => (x >> 24) % 300,
                };
                let mut align_log2 = [0u8, 3, 4, 6][(x >> 40) as usize % 4];
                let mut size = size;
                if old.is_some_and(|o| !is_small(addr, o.size, o.align_log2)) {
                    // A stale large entry is not looked for by a small one
                    // (see the module's documentation): replace large by large.
                    (size, align_log2) = (SMALL_MAX + 16, 6);
                }
                let site = if x & 1 == 0 { 0 } else { (x >> 8) as u32 & 0xff_ffff };
                let e = Entry { addr, size, align_log2, site, sampled: site != 0 && x & 2 != 0 };
                t.insert(&e);
                allocs += 1;
                bytes += size;
                model.insert(addr, e);
            }
        }
        let live: Vec<Entry> = model.values().copied().collect();
        let mut small = Vec::new();
        let mut all = Vec::new();
        // SAFETY: no other thread uses this table.
        unsafe {
            t.for_each_small_unlocked(|e| small.push(e));
            t.for_each_overflow_unlocked(|e| all.push(e));
        }
        assert!(small.windows(2).all(|w| w[0].addr < w[1].addr), "small blocks in address order");
        assert!(small.iter().all(|e| is_small(e.addr, e.size, e.align_log2)));
        all.extend(small);
        all.sort_by_key(|e| e.addr);
        assert_eq!(all, live);
        let tot = t.totals();
        assert_eq!(tot.live_count, live.len() as u64);
        assert_eq!(tot.live_bytes, live.iter().map(|e| e.size).sum::<u64>());
        let flushed = t.counters.flushed_live();
        assert!(flushed.abs_diff(tot.live_bytes as i64) <= FLUSH, "the global count lags by less than FLUSH");
        assert_eq!((tot.total_allocs, tot.total_bytes), (allocs, bytes));
        assert!(tot.table_bytes > 0);
        // Removing what is not there finds nothing and changes no count.
        assert_eq!(t.remove(0x1234_5670, None), None);
        assert_eq!(t.remove(0x1234_5670, Some((8, 3))), None);
        assert_eq!(t.totals().live_count, live.len() as u64);
    }
}
