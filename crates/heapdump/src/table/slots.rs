//! The small blocks' slots, by address: a 16-bit slot per 16-byte granule
//! holds a block's size, alignment and whether it has a site (sites sit in
//! a parallel array, touched only when one is recorded). Two layouts,
//! chosen once, behind this one type (nothing outside knows which):
//! - the shadow ([`crate::table::shadow`], the default): at a fixed offset from
//!   the address, so finding a slot is arithmetic;
//! - buckets, where the shadow's address space is refused or
//!   `HEAPDUMP_TABLE=buckets` asks for them: a top array and 4096-entry
//!   middle tables lead to a leaf for each 16 MiB of address space, which
//!   gives each 512-byte window that ever held a small block a bucket of
//!   32 slots (one cache line) from a reserved pool.
//!
//! An address belongs to one thread between its allocation and its free,
//! so a slot has one writer at a time and is read and written without a
//! lock. Counting is the table's: these methods say what a slot held.

use crate::entry::Entry;
use crate::sys;
use crate::table::shadow::{self, Shadow};
use core::sync::atomic::{AtomicPtr, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Largest block kept in the address-indexed slots.
pub const SMALL_MAX: u64 = 1024;

const GRANULE_BITS: u32 = 4;
/// A bucket holds the slots of a 512-byte window of address space: 32
/// slots of 16 bits, one cache line.
const WINDOW_BITS: u32 = 9;
const BUCKET_SLOTS: usize = 1 << (WINDOW_BITS - GRANULE_BITS);
const BUCKET_BYTES: usize = BUCKET_SLOTS * 2;
const LEAF_BITS: u32 = 24;
const MID_BITS: u32 = 12;
const TOP_BITS: u32 = 48 - LEAF_BITS - MID_BITS;
/// Windows in a leaf (16 MiB of address space); the leaf maps each to a
/// bucket index (0: none yet).
const LEAF_WINDOWS: usize = 1 << (LEAF_BITS - WINDOW_BITS);
const LEAF_BYTES: usize = LEAF_WINDOWS * 4;
const MID_LEN: usize = 1 << MID_BITS;
const TOP_LEN: usize = 1 << TOP_BITS;
/// Leaves in their reserved region (16 GiB of address space, for 1 TiB
/// of small-block address span); later leaves are mapped one by one.
const ARENA_LEAVES: usize = 1 << 16;
/// The most buckets, and the reserved regions of buckets and of their
/// sites (32 bits per slot).
const MAX_BUCKETS: usize = 1 << 31;
const POOL_BYTES: usize = BUCKET_BYTES * MAX_BUCKETS;
const SITE_POOL_BYTES: usize = BUCKET_SLOTS * 4 * MAX_BUCKETS;
/// A pool is committed this much at a time.
const COMMIT_STEP: usize = 8 << 20;

/// A slot: 0 when empty, else `size + 1` in bits 0..11, log2 of the
/// alignment in 11..14, and whether the granule's site is set in bit 14.
const SLOT_SIZE: u16 = (1 << SLOT_ALIGN_SHIFT) - 1;
const SLOT_ALIGN_SHIFT: u32 = 11;
const SLOT_HAS_SITE: u16 = 1 << 14;
/// A site word: the site id, and the sampled flag in bit 31.
const SITE_SAMPLED: u32 = 1 << 31;

const _: () = assert!(SMALL_MAX < SLOT_SIZE as u64);

/// A middle table: the leaves of 64 GiB of address space.
struct Mid {
    leaves: [AtomicPtr<AtomicU32>; MID_LEN],
}

/// Whether an entry goes to the slots rather than the overflow table.
#[inline]
pub fn is_small(addr: u64, size: u64, align_log2: u8) -> bool {
    size <= SMALL_MAX && addr & 15 == 0 && Shadow::covers(addr) && align_log2 <= 4
}

/// Where a small block's slot and site word are: in the shadow (its
/// base), or slot `j` of bucket `k`.
#[derive(Clone, Copy)]
pub enum Place {
    Shadow(usize),
    Bucket(u32, usize),
}

#[inline]
fn window_index(addr: u64) -> usize {
    ((addr >> WINDOW_BITS) as usize) & (LEAF_WINDOWS - 1)
}

#[inline]
fn slot_in_bucket(addr: u64) -> usize {
    ((addr >> GRANULE_BITS) as usize) & (BUCKET_SLOTS - 1)
}

#[inline]
fn encode(e: &Entry) -> u16 {
    (e.size as u16 + 1) | (u16::from(e.align_log2) << SLOT_ALIGN_SHIFT) | if e.site != 0 { SLOT_HAS_SITE } else { 0 }
}

/// A region reserved once and committed in steps as it is handed out.
///
/// The reservation asks for the largest size first and halves it down to
/// 16 MiB when the kernel refuses (a limit on address space, or a tool
/// such as valgrind that maps less); if even that fails, the pool is marked
/// failed for good, so that callers fall back at once instead of asking
/// the kernel again on every allocation.
struct Pool {
    /// The region's start with log2 of its length in the low bits; 0
    /// before the reservation, [`Pool::FAILED`] after a refused one.
    region: AtomicUsize,
    committed: AtomicUsize,
    max_log2: u32,
}

impl Pool {
    const FAILED: usize = 1;
    const MIN_LOG2: u32 = 24;

    /// A reserved region's start and length, from `region`.
    #[inline(always)]
    fn split(r: usize) -> (*mut u8, usize) {
        ((r & !4095) as *mut u8, 1 << (r & 4095))
    }

    const fn new(max_len: usize) -> Pool {
        Pool { region: AtomicUsize::new(0), committed: AtomicUsize::new(0), max_log2: max_len.trailing_zeros() }
    }

    /// The region's start (null before the reservation or after a refusal).
    #[inline]
    fn base(&self) -> *mut u8 {
        let r = self.region.load(Ordering::Acquire);
        if r <= Self::FAILED {
            core::ptr::null_mut()
        } else {
            Self::split(r).0
        }
    }

    /// The region's start, with its first `end` bytes usable; `None` when
    /// it cannot be reserved or committed (out of memory).
    #[inline]
    fn upto(&self, end: usize) -> Option<*mut u8> {
        let r = self.region.load(Ordering::Acquire);
        if r > Self::FAILED && end <= self.committed.load(Ordering::Acquire) {
            return Some(Self::split(r).0);
        }
        self.grow(end)
    }

    #[cold]
    fn grow(&self, end: usize) -> Option<*mut u8> {
        let mut r = self.region.load(Ordering::Acquire);
        if r == 0 {
            let mut mine = Self::FAILED;
            // Under an address-space limit (RLIMIT_AS) a reservation is
            // charged in full: each pool takes at most a 32nd of the limit,
            // or the pools would leave the program a tenth of its own (a
            // 512 MiB limit gave the program 53 MiB of heap, not 507).
            let cap = match sys::address_space_limit() {
                Some(limit) => (63 - (limit / 32).max(1).leading_zeros()).max(Self::MIN_LOG2),
                None => self.max_log2,
            };
            for l in (Self::MIN_LOG2..=self.max_log2.min(cap)).rev() {
                if let Ok(p) = sys::reserve(1 << l) {
                    mine = p as usize | l as usize;
                    break;
                }
            }
            r = match self.region.compare_exchange(0, mine, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => mine,
                Err(winner) => {
                    if mine != Self::FAILED {
                        let (p, len) = Self::split(mine);
                        // SAFETY: our reservation, never published.
                        unsafe { sys::munmap(p, len) };
                    }
                    winner
                }
            };
        }
        if r == Self::FAILED {
            return None;
        }
        let (base, len) = Self::split(r);
        if end > len {
            return None;
        }
        loop {
            let c = self.committed.load(Ordering::Acquire);
            if end <= c {
                return Some(base);
            }
            let to = end.next_multiple_of(COMMIT_STEP).min(len);
            // Threads racing here commit overlapping ranges: harmless.
            // SAFETY: [c, to) lies inside the reservation.
            unsafe { sys::commit(base.wrapping_add(c), to - c) }.ok()?;
            let _ = self.committed.compare_exchange(c, to.max(c), Ordering::AcqRel, Ordering::Acquire);
        }
    }

    /// The region's start, once it is known to be reserved (a bucket
    /// index was handed out from it).
    #[inline(always)]
    fn reserved_base(&self) -> *mut u8 {
        Self::split(self.region.load(Ordering::Acquire)).0
    }

    /// 32-bit word `i` of the region, which must be committed.
    #[inline]
    fn word(base: *mut u8, i: usize) -> &'static AtomicU32 {
        // SAFETY: callers pass a base from `upto` whose commitment covers i
        // (the region is never unmapped).
        unsafe { &*base.cast::<AtomicU32>().add(i) }
    }

    /// 16-bit half-word `i` of the region, which must be committed.
    #[inline]
    fn half(base: *mut u8, i: usize) -> &'static AtomicU16 {
        // SAFETY: as in `word`.
        unsafe { &*base.cast::<AtomicU16>().add(i) }
    }
}

/// The size of the block a slot value (not 0) describes.
#[inline(always)]
pub fn slot_size(v: u16) -> u64 {
    u64::from(v & SLOT_SIZE) - 1
}

/// The address-indexed slots of the small blocks.
pub struct Slots {
    /// The slots by address, when it could be reserved; else the buckets.
    shadow: Shadow,
    top: [AtomicPtr<Mid>; TOP_LEN],
    /// The pool leaves are committed from, and how many it gave.
    leaves: Pool,
    leaves_used: AtomicUsize,
    /// Buckets of slots, their sites, and the next bucket index (from 1).
    buckets: Pool,
    sites: Pool,
    next_bucket: AtomicU64,
}

impl Slots {
    /// No slots yet: memory is mapped on first use.
    pub const fn new() -> Slots {
        Slots {
            shadow: Shadow::new(),
            top: [const { AtomicPtr::new(core::ptr::null_mut()) }; TOP_LEN],
            leaves: Pool::new(ARENA_LEAVES * LEAF_BYTES),
            leaves_used: AtomicUsize::new(0),
            buckets: Pool::new(POOL_BYTES),
            sites: Pool::new(SITE_POOL_BYTES),
            next_bucket: AtomicU64::new(1),
        }
    }

    /// Calls `f(start, end)` for each `chunk`-aligned range of the shadow
    /// that holds marked pages, in address order (nothing when the table
    /// uses buckets).
    pub fn for_each_shadow_chunk(&self, chunk: u64, f: &mut dyn FnMut(u64, u64)) {
        self.for_each_chunk_of(chunk, |b, start| Shadow::slot(b, start) as *const AtomicU16 as u64, f);
    }
    /// Calls `f` with each `chunk`-aligned range of the shadow's site
    /// words for the pages of slots in use, in address order, once each.
    pub fn for_each_site_chunk(&self, chunk: u64, f: &mut dyn FnMut(u64, u64)) {
        self.for_each_chunk_of(chunk, |b, start| Shadow::site(b, start) as *const AtomicU32 as u64, f);
    }
    /// The `chunk`-aligned ranges holding `word(base, start)` for the first
    /// address `start` of each marked page, once each.
    fn for_each_chunk_of(&self, chunk: u64, word: impl Fn(usize, u64) -> u64, f: &mut dyn FnMut(u64, u64)) {
        let b = self.shadow.base();
        if b > shadow::FAILED {
            let mut last = u64::MAX;
            Shadow::for_each_page(b, |start| {
                let c = word(b, start) & !(chunk - 1);
                if c != last {
                    last = c;
                    f(c, c + chunk);
                }
            });
        }
    }
    /// Keeps the shadow on 4 KiB pages (called before the first small block
    /// is recorded).
    pub fn no_huge_pages(&self) {
        self.shadow.no_huge_pages();
    }
    /// Every block will have a site (see [`Shadow::every_block_has_a_site`]).
    pub fn every_block_has_a_site(&self) {
        self.shadow.every_block_has_a_site();
    }
    /// Keeps small blocks in buckets rather than the shadow (called before
    /// the first is recorded).
    pub fn use_buckets(&self) {
        self.shadow.refuse();
    }
    /// The leaf holding `addr`'s slot, if it exists.
    #[inline]
    fn leaf(&self, addr: u64) -> Option<*mut AtomicU32> {
        let mid = self.top[(addr >> (LEAF_BITS + MID_BITS)) as usize & (TOP_LEN - 1)].load(Ordering::Acquire);
        if mid.is_null() {
            return None;
        }
        // SAFETY: a published middle table stays mapped for the process's life.
        let leaf = unsafe { &*mid }.leaves[(addr >> LEAF_BITS) as usize & (MID_LEN - 1)].load(Ordering::Acquire);
        (!leaf.is_null()).then_some(leaf)
    }
    /// The leaf holding `addr`'s slot, made if needed; `None` when out of memory.
    #[inline]
    fn leaf_or_new(&self, addr: u64) -> Option<*mut AtomicU32> {
        match self.leaf(addr) {
            Some(l) => Some(l),
            None => self.new_leaf(addr),
        }
    }
    #[cold]
    fn new_leaf(&self, addr: u64) -> Option<*mut AtomicU32> {
        let top = &self.top[(addr >> (LEAF_BITS + MID_BITS)) as usize & (TOP_LEN - 1)];
        let mut mid = top.load(Ordering::Acquire);
        if mid.is_null() {
            let m: *mut Mid = sys::mmap_anon(core::mem::size_of::<Mid>()).ok()?.cast();
            // A zero-filled mapping is a middle table of null pointers.
            match top.compare_exchange(core::ptr::null_mut(), m, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => mid = m,
                Err(winner) => {
                    // SAFETY: our mapping, never published.
                    unsafe { sys::munmap(m.cast(), core::mem::size_of::<Mid>()) };
                    mid = winner;
                }
            }
        }
        // SAFETY: published middle tables stay mapped.
        let slot = &unsafe { &*mid }.leaves[(addr >> LEAF_BITS) as usize & (MID_LEN - 1)];
        let cur = slot.load(Ordering::Acquire);
        if !cur.is_null() {
            return Some(cur);
        }
        let leaf = self.map_leaf()?;
        match slot.compare_exchange(core::ptr::null_mut(), leaf, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Some(leaf),
            // The loser's leaf stays committed but untouched (no memory).
            Err(winner) => Some(winner),
        }
    }
    /// A zero-filled leaf: the next part of the leaves' pool, or a mapping
    /// of its own once that is used up or refused.
    fn map_leaf(&self) -> Option<*mut AtomicU32> {
        let k = self.leaves_used.fetch_add(1, Ordering::Relaxed);
        if let Some(base) = self.leaves.upto((k + 1) * LEAF_BYTES) {
            return Some(base.wrapping_add(k * LEAF_BYTES).cast());
        }
        sys::mmap_anon(LEAF_BYTES).ok().map(|p| p.cast())
    }
    /// The bucket holding `addr`'s slot, if there is one.
    #[inline]
    fn bucket(&self, addr: u64) -> Option<u32> {
        let dir = self.leaf(addr)?;
        // SAFETY: window_index < LEAF_WINDOWS, the leaf's length.
        let k = unsafe { &*dir.add(window_index(addr)) }.load(Ordering::Acquire);
        (k != 0).then_some(k)
    }
    /// The bucket for `addr`'s slot, made if needed; `None` when out of memory.
    #[inline]
    fn bucket_or_new(&self, addr: u64) -> Option<u32> {
        let dir = self.leaf_or_new(addr)?;
        // SAFETY: as in `bucket`.
        let d = unsafe { &*dir.add(window_index(addr)) };
        match d.load(Ordering::Acquire) {
            0 => self.new_bucket(d),
            k => Some(k),
        }
    }
    #[cold]
    fn new_bucket(&self, d: &AtomicU32) -> Option<u32> {
        let k = self.next_bucket.fetch_add(1, Ordering::Relaxed);
        if k >= MAX_BUCKETS as u64 {
            return None;
        }
        self.buckets.upto((k as usize + 1) * BUCKET_BYTES)?;
        // A thread that loses the race leaves its bucket unused (and untouched).
        match d.compare_exchange(0, k as u32, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Some(k as u32),
            Err(winner) => Some(winner),
        }
    }
    /// Slot `j` of bucket `k` (an index `bucket` or `bucket_or_new` gave).
    #[inline]
    fn slot(&self, k: u32, j: usize) -> &AtomicU16 {
        Pool::half(self.buckets.reserved_base(), k as usize * BUCKET_SLOTS + j)
    }
    /// Where the slot of the small block at `addr` is, if it can hold one
    /// now; with `marked`, a shadow page never written is not one (reading
    /// it would map a page for nothing).
    #[inline(always)]
    pub fn place(&self, addr: u64, marked: bool) -> Option<Place> {
        let b = self.shadow.base();
        if b > shadow::FAILED {
            return (!marked || Shadow::marked(b, addr)).then_some(Place::Shadow(b));
        }
        self.bucket(addr).map(|k| Place::Bucket(k, slot_in_bucket(addr)))
    }
    /// The slot at `p` for `addr`.
    #[inline(always)]
    fn slot_at(&self, p: Place, addr: u64) -> &AtomicU16 {
        match p {
            Place::Shadow(b) => Shadow::slot(b, addr),
            Place::Bucket(k, j) => self.slot(k, j),
        }
    }
    /// The site of the block at `p` for `addr`, whose slot held `v` (not
    /// 0), for its counts: 0 when it has none or a sampled one.
    #[inline(always)]
    pub fn site_of(&self, p: Place, addr: u64, v: u16) -> u32 {
        let e = self.decode(p, addr, v);
        if e.sampled {
            0
        } else {
            e.site
        }
    }
    /// The entry at `p` for `addr`, whose slot holds `v` (not 0).
    #[inline]
    pub fn decode(&self, p: Place, addr: u64, v: u16) -> Entry {
        let (site, sampled) = if v & SLOT_HAS_SITE != 0 {
            // The site was stored (so its part of the pool committed)
            // before the slot said so.
            let w = match p {
                Place::Shadow(b) => Shadow::site(b, addr),
                Place::Bucket(k, j) => Pool::word(self.sites.reserved_base(), k as usize * BUCKET_SLOTS + j),
            }
            .load(Ordering::Relaxed);
            (w & !SITE_SAMPLED, w & SITE_SAMPLED != 0)
        } else {
            (0, false)
        };
        Entry { addr, size: u64::from(v & SLOT_SIZE) - 1, align_log2: ((v >> SLOT_ALIGN_SHIFT) & 7) as u8, site, sampled }
    }
    /// Starts loading the cache line where `addr`'s entry will go, so that
    /// work done meanwhile (capturing its site) hides a cache miss.
    #[inline]
    pub fn prefetch(&self, addr: u64) {
        let addr = addr & !15;
        if !Shadow::covers(addr) {
            return;
        }
        if let Some(p) = self.place(addr, true) {
            let p: *const AtomicU16 = self.slot_at(p, addr);
            // SAFETY: a prefetch is a hint: it never faults and reads nothing
            // the program observes.
            unsafe { core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast()) };
        }
    }
    /// The place for a new small block at `addr`: in the shadow (reserved
    /// on first use, its page marked first), or else in a bucket; `None`
    /// when it has no bucket (out of memory), for the overflow table to
    /// take it.
    #[inline]
    pub fn place_new(&self, addr: u64) -> Option<Place> {
        let b = self.shadow.base_or_reserve();
        if b > shadow::FAILED {
            self.shadow.mark(b, addr);
            return Some(Place::Shadow(b));
        }
        let k = self.bucket_or_new(addr)?;
        Some(Place::Bucket(k, slot_in_bucket(addr)))
    }
    /// Writes a small block's slot (and site) at `p`; `in_use`: the slot's
    /// page is known to have been written before (marked). Returns what the
    /// slot held (0: nothing; else a block whose free was missed).
    #[inline(always)]
    pub fn fill(&self, p: Place, e: &Entry, in_use: bool) -> u16 {
        let mut e = *e;
        if e.site != 0 {
            let w = match p {
                Place::Shadow(b) => Some(Shadow::site(b, e.addr)),
                Place::Bucket(k, j) => {
                    let i = k as usize * BUCKET_SLOTS + j;
                    self.sites.upto((i + 1) * 4).map(|base| Pool::word(base, i))
                }
            };
            match w {
                // Before the slot, so a slot that says "has a site" has it.
                Some(w) => w.store(e.site | if e.sampled { SITE_SAMPLED } else { 0 }, Ordering::Relaxed),
                None => e.site = 0,
            }
        }
        // The old value says whether a free was missed (a block the
        // tracker never saw freed).
        let slot = self.slot_at(p, e.addr);
        if in_use {
            // A plain load and store: a swap is a locked instruction, a
            // full barrier that waits for every store before it (the
            // allocator's own) to reach the cache. The slot has one writer
            // at a time (see the module's documentation).
            let old = slot.load(Ordering::Relaxed);
            slot.store(encode(&e), Ordering::Release);
            old
        } else {
            // Written without reading first: a read of a page never touched
            // would map the zero page, and the write after it would fault
            // again and flush that page from every core's TLB.
            slot.swap(encode(&e), Ordering::AcqRel)
        }
    }

    /// Empties the slot at `p` for `addr`; returns what it held (0:
    /// nothing; [`slot_size`] says the block's size).
    #[inline(always)]
    pub fn take(&self, p: Place, addr: u64) -> u16 {
        let slot = self.slot_at(p, addr);
        let v = slot.load(Ordering::Acquire);
        if v != 0 {
            slot.store(0, Ordering::Relaxed);
        }
        v
    }
    /// Calls `f(base address, leaf)` for every leaf, in address order.
    fn for_each_leaf(&self, mut f: impl FnMut(u64, *mut AtomicU32)) {
        for (t, mid) in self.top.iter().enumerate() {
            let mid = mid.load(Ordering::Acquire);
            if mid.is_null() {
                continue;
            }
            // SAFETY: published middle tables stay mapped.
            for (m, leaf) in unsafe { &*mid }.leaves.iter().enumerate() {
                let leaf = leaf.load(Ordering::Acquire);
                if !leaf.is_null() {
                    f(((t << MID_BITS | m) as u64) << LEAF_BITS, leaf);
                }
            }
        }
    }
    /// Visits the entries of the address-indexed slots, in address order.
    ///
    /// # Safety
    /// Only with the world stopped (no other thread inside the tracker) or
    /// in a forked child.
    pub unsafe fn for_each_unlocked(&self, mut f: impl FnMut(Entry)) {
        let b = self.shadow.base();
        if b > shadow::FAILED {
            Shadow::for_each_slot(b, |addr, v| f(self.decode(Place::Shadow(b), addr, v)));
            return;
        }
        const PER_PAGE: usize = 4096 / 4;
        self.for_each_leaf(|base, leaf| {
            // Pages of a leaf never written are not in memory: skip them
            // rather than read (and map) them.
            let mut pages = [1u8; LEAF_BYTES / 4096];
            let _ = sys::resident(leaf.cast(), &mut pages);
            for (p, _) in pages.iter().enumerate().filter(|(_, &r)| r & 1 != 0) {
                for w in p * PER_PAGE..(p + 1) * PER_PAGE {
                    // SAFETY: w < LEAF_WINDOWS.
                    let k = unsafe { &*leaf.add(w) }.load(Ordering::Relaxed);
                    if k == 0 {
                        continue;
                    }
                    for j in 0..BUCKET_SLOTS {
                        let v = self.slot(k, j).load(Ordering::Relaxed);
                        if v != 0 {
                            f(self.decode(Place::Bucket(k, j), base | (w as u64) << WINDOW_BITS | (j as u64) << GRANULE_BITS, v));
                        }
                    }
                }
            }
        });
    }

    /// The memory the slots take.
    pub fn bytes(&self) -> u64 {
        let mut n = 0;
        let b = self.shadow.base();
        if b > shadow::FAILED {
            n += self.shadow.bytes(b);
        }
        let mids = self.top.iter().filter(|m| !m.load(Ordering::Relaxed).is_null()).count();
        n += (mids * core::mem::size_of::<Mid>()) as u64;
        let mut pages = [0u8; 1024];
        self.for_each_leaf(|_, leaf| n += sys::resident_bytes(leaf.cast(), LEAF_BYTES, &mut pages));
        let buckets = (self.next_bucket.load(Ordering::Relaxed) - 1).min(MAX_BUCKETS as u64);
        n += buckets * BUCKET_BYTES as u64;
        let sites = self.sites.base();
        if !sites.is_null() {
            n += sys::resident_bytes(sites, self.sites.committed.load(Ordering::Acquire), &mut pages);
        }
        n
    }

    /// Whether the slots are in the shadow (not in buckets).
    #[cfg(test)]
    pub fn in_shadow(&self) -> bool {
        self.shadow.base() > shadow::FAILED
    }

    /// Gives back the shadow's address space.
    pub fn release(&mut self) {
        self.shadow.release();
    }
}
