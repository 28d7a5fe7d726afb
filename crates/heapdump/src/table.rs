//! The live table: every live allocation, in memory mapped straight from
//! the kernel.
//!
//! Small blocks (at most [`SMALL_MAX`] bytes, 16-byte aligned, alignment
//! at most 16, below 2^47) are indexed by address: a 16-bit slot per
//! 16-byte granule holds a block's size, alignment and whether it has a
//! site (sites sit in a parallel array, touched only when one is
//! recorded). The slots live in one of two layouts, chosen once:
//! - the shadow ([`crate::shadow`], the default): at a fixed offset from
//!   the address, so finding a slot is arithmetic;
//! - buckets, where the shadow's address space is refused or
//!   `HEAPDUMP_TABLE=buckets` asks for them: a top array and 4096-entry
//!   middle tables lead to a leaf for each 16 MiB of address space, which
//!   gives each 512-byte window that ever held a small block a bucket of
//!   32 slots (one cache line) from a reserved pool.
//!
//! Why by address: a hash table scatters neighbouring blocks over the whole
//! table, so every allocation and every free missed the cache on a slot of
//! its own (that was most of the tracker's cost). Slots by address follow
//! the allocator's own locality: blocks made or freed together share a
//! line. An address belongs to one thread between its allocation and its
//! free, so a slot has one writer at a time and is read and written
//! without a lock.
//!
//! Memory: both layouts take an eighth of the address span where small
//! blocks are dense (2 bytes per 16). Where they are scattered among large
//! blocks, the shadow takes a 4 KiB page for every 32 KiB that holds one
//! (an eighth of the span) and the buckets a 64-byte line for every 512
//! bytes that does, plus 4 bytes per 512 bytes of span for the leaves:
//! dump_bench's heap, 48-byte nodes among payloads of up to 4 KiB, costs
//! 148 bytes per allocation with the shadow and 55 with buckets. The
//! shadow is the default for its speed (an allocation or a free touches
//! one line of the table; buckets cost three dependent loads before it).
//!
//! Larger blocks, over-aligned ones, odd addresses and addresses at or
//! above 2^47 go to the overflow table instead (as do small blocks when no
//! bucket can be had): 64 shards, chosen by a hash of the address, each an
//! open-addressing table with linear probing and backward-shift deletion
//! (no tombstones), behind its own spin lock. A shard grows (doubling, at
//! 3/4 load) under its own lock only, so there is no global pause and no
//! entry is lost.
//!
//! A shard entry is 16 bytes:
//! - `key`: address in bits 0..48, log2(alignment) in 48..54, the sampled
//!   flag in bit 54, bits 40.. of the size in 55..64;
//! - `meta`: bits 0..40 of the size in 0..40, the site id in 40..64.
//!
//! So sizes up to 2^49 bytes and 2^24 sites are exact. Addresses at or
//! above 2^48 (5-level paging only) are counted, not tracked.
//!
//! An address live twice means a free the tracker never saw (a path that
//! bypassed it): the newer entry replaces the older, except that a small
//! block does not look for a stale large one at its address (that would
//! cost a hash lookup per allocation); the dump keeps the small one.
//!
//! The slots take no lock. The overflow shards' locks are taken under
//! [`crate::guard::Locked`], so that a signal handler allocating on a thread
//! that holds one defers its update instead of spinning on it.
//!
//! Counts are kept per thread (a stripe of counters each thread picks at
//! its first allocation) so that threads do not share a counter's cache
//! line; each thread adds its change of live bytes to one global counter,
//! for the peak and the threshold trigger, every [`FLUSH`] bytes.

pub use crate::entry::Entry;
use crate::lock::SpinLock;
use crate::shadow::{self, Shadow};
use crate::sys;
use core::sync::atomic::{AtomicI64, AtomicPtr, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Number of overflow shards (a power of two).
pub const SHARDS: usize = 64;
/// Largest block kept in the address-indexed slots.
pub const SMALL_MAX: u64 = 1024;
const INITIAL: usize = 1024;
const ADDR_MASK: u64 = (1 << 48) - 1;
const SIZE_LO: u64 = (1 << 40) - 1;

#[repr(C)]
#[derive(Clone, Copy)]
struct Slot {
    key: u64,
    meta: u64,
}

impl Slot {
    fn pack(e: &Entry) -> Slot {
        let key =
            (e.addr & ADDR_MASK) | (u64::from(e.align_log2 & 63) << 48) | (u64::from(e.sampled) << 54) | (((e.size >> 40) & 0x1ff) << 55);
        let meta = (e.size & SIZE_LO) | (u64::from(e.site & 0xff_ffff) << 40);
        Slot { key, meta }
    }
    fn unpack(&self) -> Entry {
        Entry {
            addr: self.key & ADDR_MASK,
            size: (self.meta & SIZE_LO) | ((self.key >> 55) << 40),
            align_log2: ((self.key >> 48) & 63) as u8,
            site: (self.meta >> 40) as u32,
            sampled: (self.key >> 54) & 1 == 1,
        }
    }
}

/// One overflow shard's table.
pub struct Shard {
    slots: *mut Slot,
    mask: usize,
    len: usize,
}

// SAFETY: the raw pointer is owned by the shard and only used under its lock.
unsafe impl Send for Shard {}

#[inline]
fn hash(addr: u64) -> u64 {
    (addr >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The shard `addr` belongs to: the top 6 bits of its hash.
#[inline]
fn shard_index(addr: u64) -> usize {
    (hash(addr) >> 58) as usize
}

/// `addr`'s home slot in a shard of `mask + 1` slots: the hash bits below
/// the 6 that chose the shard.
#[inline]
fn home_in(addr: u64, mask: usize) -> usize {
    ((hash(addr) << 6) >> (64 - mask.count_ones())) as usize
}

impl Shard {
    const fn empty() -> Shard {
        Shard { slots: core::ptr::null_mut(), mask: 0, len: 0 }
    }

    /// Home slot: the hash bits below the 6 that chose the shard.
    #[inline]
    fn home(&self, addr: u64) -> usize {
        home_in(addr, self.mask)
    }

    fn capacity(&self) -> usize {
        if self.slots.is_null() {
            0
        } else {
            self.mask + 1
        }
    }

    fn slot(&self, i: usize) -> &Slot {
        // SAFETY: callers pass i <= mask; the mapping holds mask+1 slots.
        unsafe { &*self.slots.add(i) }
    }

    fn slot_mut(&mut self, i: usize) -> &mut Slot {
        // SAFETY: as in `slot`; exclusive through &mut self.
        unsafe { &mut *self.slots.add(i) }
    }

    /// Inserts; returns the entry it replaced (the same address live twice
    /// means a free we never saw, e.g. by a path that bypassed us), or `Err`
    /// if the table could not grow (out of memory).
    fn insert(&mut self, e: &Entry) -> Result<Option<Entry>, ()> {
        if (self.len + 1) * 4 > self.capacity() * 3 && !self.grow() {
            return Err(());
        }
        let s = Slot::pack(e);
        let mut i = self.home(e.addr);
        loop {
            let cur = *self.slot(i);
            if cur.key == 0 {
                *self.slot_mut(i) = s;
                self.len += 1;
                return Ok(None);
            }
            if cur.key & ADDR_MASK == e.addr {
                *self.slot_mut(i) = s;
                return Ok(Some(cur.unpack()));
            }
            i = (i + 1) & self.mask;
        }
    }

    fn find(&self, addr: u64) -> Option<usize> {
        if self.slots.is_null() {
            return None;
        }
        let mut i = self.home(addr);
        loop {
            let cur = self.slot(i);
            if cur.key == 0 {
                return None;
            }
            if cur.key & ADDR_MASK == addr {
                return Some(i);
            }
            i = (i + 1) & self.mask;
        }
    }

    fn remove(&mut self, addr: u64) -> Option<Entry> {
        let mut i = self.find(addr)?;
        let e = self.slot(i).unpack();
        // Backward-shift deletion keeps probe chains intact without tombstones.
        let mut j = i;
        loop {
            j = (j + 1) & self.mask;
            let cur = *self.slot(j);
            if cur.key == 0 {
                break;
            }
            let home = self.home(cur.key & ADDR_MASK);
            // Move `cur` into the hole at i unless its home lies cyclically in (i, j].
            let in_range = if i <= j { home > i && home <= j } else { home > i || home <= j };
            if !in_range {
                *self.slot_mut(i) = cur;
                i = j;
            }
        }
        *self.slot_mut(i) = Slot { key: 0, meta: 0 };
        self.len -= 1;
        Some(e)
    }

    fn grow(&mut self) -> bool {
        let new_cap = if self.slots.is_null() { INITIAL } else { self.capacity() * 2 };
        let Ok(p) = sys::mmap_anon_populated(new_cap * core::mem::size_of::<Slot>()) else {
            return false;
        };
        let old = self.slots;
        let old_cap = self.capacity();
        self.slots = p.cast();
        self.mask = new_cap - 1;
        for k in 0..old_cap {
            // SAFETY: k < old_cap, inside the old mapping, still mapped.
            let s = unsafe { *old.add(k) };
            if s.key != 0 {
                let mut i = self.home(s.key & ADDR_MASK);
                while self.slot(i).key != 0 {
                    i = (i + 1) & self.mask;
                }
                *self.slot_mut(i) = s;
            }
        }
        if !old.is_null() {
            // SAFETY: the old mapping is ours and nothing refers to it now
            // (every reader holds this shard's lock or the world is stopped).
            unsafe { sys::munmap(old.cast(), old_cap * core::mem::size_of::<Slot>()) };
        }
        true
    }

    /// Visits every entry.
    pub fn for_each(&self, mut f: impl FnMut(Entry)) {
        for i in 0..self.capacity() {
            let s = self.slot(i);
            if s.key != 0 {
                f(s.unpack());
            }
        }
    }

    /// Number of entries.
    fn len(&self) -> usize {
        self.len
    }
}

// --- the address-indexed slots -------------------------------------------------

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
fn is_small(addr: u64, size: u64, align_log2: u8) -> bool {
    size <= SMALL_MAX && addr & 15 == 0 && Shadow::covers(addr) && align_log2 <= 4
}

/// Where a small block's slot and site word are: in the shadow (its
/// base), or slot `j` of bucket `k`.
#[derive(Clone, Copy)]
enum Place {
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
}

impl Stripe {
    const fn new() -> Stripe {
        Stripe {
            allocs: AtomicU64::new(0),
            frees: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            flushed: AtomicU64::new(0),
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

/// The table whose stripes threads give back, and the pthread key (plus
/// one; 0 before it is made) whose destructor does it.
static EXIT_TABLE: AtomicPtr<Table> = AtomicPtr::new(core::ptr::null_mut());
static STRIPE_KEY: AtomicU32 = AtomicU32::new(0);

/// A thread that owned stripe `v - 1` ends: from now on it counts on the
/// shared stripe (other destructors may still allocate), and its stripe is
/// free for the next thread. Its counts stay in the stripe, which goes on
/// adding up.
extern "C" fn stripe_exit(v: *mut libc::c_void) {
    let k = (v as usize).wrapping_sub(1);
    let t = EXIT_TABLE.load(Ordering::Acquire);
    if k >= SHARED || t.is_null() {
        return;
    }
    let _ = STRIPE.try_with(|c| c.set(SHARED as u16));
    // SAFETY: the table is the process's, a static.
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

/// The live table.
pub struct Table {
    /// The small blocks' slots by address, when it could be reserved;
    /// else the buckets below.
    shadow: Shadow,
    top: [AtomicPtr<Mid>; TOP_LEN],
    /// The pool leaves are committed from, and how many it gave.
    leaves: Pool,
    leaves_used: AtomicUsize,
    /// Buckets of slots, their sites, and the next bucket index (from 1).
    buckets: Pool,
    sites: Pool,
    next_bucket: AtomicU64,
    /// Small blocks put in the overflow table for want of a bucket.
    small_overflow: AtomicU64,
    overflow: [SpinLock<Shard>; SHARDS],
    stripes: [Stripe; STRIPES],
    next_stripe: AtomicUsize,
    /// Owned stripes given back by threads that ended, a bit each.
    free_stripes: [AtomicU64; STRIPES / 64],
    /// Live bytes over all threads as flushed from the stripes (see
    /// [`FLUSH`]), for the peak and the threshold; may dip below zero when
    /// one thread frees what another allocated before either flushed.
    live: AtomicI64,
    /// Highest `live` seen.
    pub peak: AtomicU64,
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
            shadow: Shadow::new(),
            top: [const { AtomicPtr::new(core::ptr::null_mut()) }; TOP_LEN],
            leaves: Pool::new(ARENA_LEAVES * LEAF_BYTES),
            leaves_used: AtomicUsize::new(0),
            buckets: Pool::new(POOL_BYTES),
            sites: Pool::new(SITE_POOL_BYTES),
            next_bucket: AtomicU64::new(1),
            small_overflow: AtomicU64::new(0),
            overflow: [const { SpinLock::new(Shard::empty()) }; SHARDS],
            stripes: [const { Stripe::new() }; STRIPES],
            next_stripe: AtomicUsize::new(0),
            free_stripes: [const { AtomicU64::new(0) }; STRIPES / 64],
            live: AtomicI64::new(0),
            peak: AtomicU64::new(0),
            untracked: AtomicU64::new(0),
        }
    }

    /// Calls `f(start, end)` for each `chunk`-aligned range of the shadow
    /// that holds marked pages, in address order (nothing when the table
    /// uses buckets).
    pub fn for_each_shadow_chunk(&self, chunk: u64, f: &mut dyn FnMut(u64, u64)) {
        let b = self.shadow.base();
        if b > shadow::FAILED {
            let mut last = u64::MAX;
            Shadow::for_each_page(b, |start| {
                let c = Shadow::slot(b, start) as *const AtomicU16 as u64 & !(chunk - 1);
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
    /// back when it ends (see [`Table::give_back_stripes`]).
    #[cold]
    #[inline(never)]
    fn first_stripe(&self, c: &core::cell::Cell<u16>) -> u8 {
        let k = self.take_free_stripe().unwrap_or_else(|| self.next_stripe.fetch_add(1, Ordering::Relaxed).min(SHARED) as u8);
        // Set before registering: registering may allocate (a pthread key
        // past the first 32), and that allocation counts on this stripe.
        c.set(k.into());
        if usize::from(k) != SHARED && core::ptr::eq(EXIT_TABLE.load(Ordering::Acquire), self) {
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
            EXIT_TABLE.store(self as *const Table as *mut Table, Ordering::Release);
            STRIPE_KEY.store(key + 1, Ordering::Release);
        }
    }

    /// In a child after `fork`: the threads that owned the other stripes
    /// are gone; their stripes are free.
    pub fn free_stripes_after_fork(&self) {
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

    /// Counts an allocation; returns the global live bytes when this
    /// thread's share was just added to them, else 0.
    #[inline]
    fn count_alloc(&self, size: u64) -> u64 {
        let k = self.stripe() as usize;
        let s = &self.stripes[k];
        bump(k, &s.allocs, 1);
        bump(k, &s.bytes_in, size);
        self.maybe_flush(s)
    }

    #[inline]
    fn count_free(&self, size: u64) {
        let k = self.stripe() as usize;
        let s = &self.stripes[k];
        bump(k, &s.frees, 1);
        bump(k, &s.bytes_out, size);
        self.maybe_flush(s);
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
        }
        live
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
    fn place(&self, addr: u64, marked: bool) -> Option<Place> {
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

    /// The entry at `p` for `addr`, whose slot holds `v` (not 0).
    #[inline]
    fn decode(&self, p: Place, addr: u64, v: u16) -> Entry {
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

    /// Records a new allocation. Returns the live bytes after it when they
    /// were brought up to date (at least every [`FLUSH`] bytes), else 0.
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
            if let Some(p) = self.place(e.addr, true) {
                self.fill(p, e, true);
                return Some(self.count_alloc(e.size));
            }
        }
        None
    }

    #[inline(never)]
    fn insert_slow(&self, e: &Entry) -> u64 {
        let small = is_small(e.addr, e.size, e.align_log2);
        if small && self.insert_small(e) {
            return self.count_alloc(e.size);
        }
        if e.addr > ADDR_MASK || e.size >> 49 != 0 {
            return self.untracked_one();
        }
        if small {
            self.small_overflow.fetch_add(1, Ordering::Relaxed);
        } else if let Some(p) = self.place(e.addr, true).filter(|_| e.addr & 15 == 0 && Shadow::covers(e.addr)) {
            // A small block at this address whose free we never saw.
            self.take_slot(p, e.addr);
        }
        let r = {
            let _l = crate::guard::Locked::new();
            // Bound, so that the lock is released before `_l` says so
            // (a tail expression's temporaries would outlive `_l`).
            let mut shard = self.overflow[shard_index(e.addr)].lock();
            shard.insert(e)
        };
        match r {
            Ok(None) => {}
            Ok(Some(old)) => self.count_free(old.size),
            Err(()) => return self.untracked_one(),
        }
        self.count_alloc(e.size)
    }

    /// Puts a small block in its slot: in the shadow (reserved on first
    /// use, its page marked first), or else in a bucket; false when it has
    /// no bucket (out of memory), for the overflow table to take it.
    #[inline]
    fn insert_small(&self, e: &Entry) -> bool {
        let b = self.shadow.base_or_reserve();
        let p = if b > shadow::FAILED {
            self.shadow.mark(b, e.addr);
            Place::Shadow(b)
        } else {
            let Some(k) = self.bucket_or_new(e.addr) else { return false };
            Place::Bucket(k, slot_in_bucket(e.addr))
        };
        self.fill(p, e, false);
        true
    }

    /// Writes a small block's slot (and site) at `p`; `in_use`: the slot's
    /// page is known to have been written before (marked).
    #[inline(always)]
    fn fill(&self, p: Place, e: &Entry, in_use: bool) {
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
        let old = if in_use {
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
        };
        if old != 0 {
            self.count_free(u64::from(old & SLOT_SIZE) - 1);
        }
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
        self.take_small(addr, layout).map(|(p, v)| self.decode(p, addr, v))
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
        let p = self.place(addr, false)?;
        let slot = self.slot_at(p, addr);
        let v = slot.load(Ordering::Acquire);
        if v == 0 {
            return None;
        }
        slot.store(0, Ordering::Relaxed);
        // The size the caller gives, not the slot's: the count then does
        // not wait for the slot's line to arrive. (They are equal: a Rust
        // deallocation passes the layout the block was allocated or
        // reallocated with.)
        self.count_free(layout.0);
        Some((p, v))
    }

    /// [`Table::try_forget`] for a block of unknown size (the preload
    /// library's `free`): its slot, if it holds one. False (nothing done)
    /// when the block needs [`Table::remove`].
    #[inline(always)]
    pub fn try_take(&self, addr: u64) -> bool {
        addr & 15 == 0 && Shadow::covers(addr) && self.place(addr, true).is_some_and(|p| self.take_slot(p, addr) != 0)
    }

    /// Empties the slot at `p` for `addr`, counting the block it held as
    /// freed; returns what it held (0: nothing).
    #[inline(always)]
    fn take_slot(&self, p: Place, addr: u64) -> u16 {
        let slot = self.slot_at(p, addr);
        let v = slot.load(Ordering::Acquire);
        if v != 0 {
            slot.store(0, Ordering::Relaxed);
            self.count_free(u64::from(v & SLOT_SIZE) - 1);
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
            if let Some(p) = self.place(addr, true) {
                let v = self.take_slot(p, addr);
                if v != 0 {
                    return Some(self.decode(p, addr, v));
                }
            }
            if small == Some(true) && self.small_overflow.load(Ordering::Relaxed) == 0 {
                return None;
            }
        }
        let e = {
            let _l = crate::guard::Locked::new();
            let mut shard = self.overflow[shard_index(addr)].lock();
            shard.remove(addr)
        }?;
        self.count_free(e.size);
        Some(e)
    }

    /// Sums the counters, and measures the table's memory.
    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        let [allocs, frees, bytes_in, bytes_out] = self.sums();
        t.live_count = allocs.wrapping_sub(frees);
        t.live_bytes = bytes_in.wrapping_sub(bytes_out);
        t.total_allocs = allocs;
        t.total_bytes = bytes_in;
        self.peak.fetch_max(t.live_bytes, Ordering::Relaxed);
        for s in &self.overflow {
            let _l = crate::guard::Locked::new();
            t.table_bytes += (s.lock().capacity() * core::mem::size_of::<Slot>()) as u64;
        }
        let b = self.shadow.base();
        if b > shadow::FAILED {
            t.table_bytes += self.shadow.bytes(b);
        }
        let mids = self.top.iter().filter(|m| !m.load(Ordering::Relaxed).is_null()).count();
        t.table_bytes += (mids * core::mem::size_of::<Mid>()) as u64;
        let mut pages = [0u8; 1024];
        self.for_each_leaf(|_, leaf| t.table_bytes += sys::resident_bytes(leaf.cast(), LEAF_BYTES, &mut pages));
        let buckets = (self.next_bucket.load(Ordering::Relaxed) - 1).min(MAX_BUCKETS as u64);
        t.table_bytes += buckets * BUCKET_BYTES as u64;
        let sites = self.sites.base();
        if !sites.is_null() {
            t.table_bytes += sys::resident_bytes(sites, self.sites.committed.load(Ordering::Acquire), &mut pages);
        }
        t
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
    pub unsafe fn for_each_small_unlocked(&self, mut f: impl FnMut(Entry)) {
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
        let [allocs, frees, bytes_in, bytes_out] = self.sums();
        (allocs.wrapping_sub(frees), bytes_in.wrapping_sub(bytes_out))
    }

    /// The stripes' counters summed: allocations, frees, bytes in, bytes out.
    /// Allocations and bytes since start, and the peak of live bytes
    /// (see `Stats::peak_bytes`): atomics only, for the dump to read with
    /// the world stopped.
    pub fn history(&self) -> (u64, u64, u64) {
        let [allocs, _, bytes_in, bytes_out] = self.sums();
        (allocs, bytes_in, self.peak.load(Ordering::Relaxed).max(bytes_in.wrapping_sub(bytes_out)))
    }

    fn sums(&self) -> [u64; 4] {
        let mut t = [0u64; 4];
        for s in &self.stripes {
            for (x, c) in t.iter_mut().zip([&s.allocs, &s.frees, &s.bytes_in, &s.bytes_out]) {
                *x = x.wrapping_add(c.load(Ordering::Relaxed));
            }
        }
        t
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
        crate::lock::lock_all_for_fork(&self.overflow);
    }

    /// Releases every lock (after fork).
    ///
    /// # Safety
    /// Only after [`Table::lock_all`].
    pub unsafe fn unlock_all(&self) {
        // SAFETY: the caller took these locks with `lock_all` (before fork).
        unsafe { crate::lock::unlock_all_after_fork(&self.overflow) }
    }
}

impl Drop for Table {
    /// Gives back the shadow's address space (the process's table is a
    /// static and never dropped; tests make and drop tables).
    fn drop(&mut self) {
        self.shadow.release();
    }
}

/// This thread's stripe (address, size): never a root.
pub(crate) fn tls_stripe() -> (u64, u64) {
    STRIPE.try_with(|v| (v as *const _ as u64, core::mem::size_of_val(v) as u64)).unwrap_or((0, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    #[test]
    fn table_matches_a_model() {
        let t = Box::new(Table::new());
        matches_a_model(&t);
        assert!(t.shadow.base() > shadow::FAILED, "small blocks went to the shadow");
    }

    /// The same where the shadow is refused: small blocks in buckets.
    #[test]
    fn table_with_buckets_matches_a_model() {
        let t = Box::new(Table::new());
        t.use_buckets();
        matches_a_model(&t);
        assert!(t.next_bucket.load(Ordering::Relaxed) > 1, "small blocks went to buckets");
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
        let flushed = t.live.load(Ordering::Relaxed);
        assert!(flushed.abs_diff(tot.live_bytes as i64) <= FLUSH, "the global count lags by less than FLUSH");
        assert_eq!((tot.total_allocs, tot.total_bytes), (allocs, bytes));
        assert!(tot.table_bytes > 0);
        // Removing what is not there finds nothing and changes no count.
        assert_eq!(t.remove(0x1234_5670, None), None);
        assert_eq!(t.remove(0x1234_5670, Some((8, 3))), None);
        assert_eq!(t.totals().live_count, live.len() as u64);
    }
}
