//! The live table: every live allocation, in memory mapped straight from
//! the kernel.
//!
//! 64 shards, chosen by a hash of the address, each an open-addressing
//! table with linear probing and backward-shift deletion (no tombstones),
//! behind its own spin lock. A shard grows (doubling, at 3/4 load) under
//! its own lock only, so there is no global pause and no entry is lost.
//!
//! An entry is 16 bytes:
//! - `key`: address in bits 0..48, log2(alignment) in 48..54, the sampled
//!   flag in bit 54, bits 40.. of the size in 55..64;
//! - `meta`: bits 0..40 of the size in 0..40, the site id in 40..64.
//!
//! So sizes up to 2^49 bytes and 2^24 sites are exact. Addresses at or
//! above 2^48 (5-level paging only) are counted, not tracked.

use crate::lock::SpinLock;
use crate::sys;
use core::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

/// Number of shards (a power of two).
pub const SHARDS: usize = 64;
const INITIAL: usize = 1024;
const ADDR_MASK: u64 = (1 << 48) - 1;
const SIZE_LO: u64 = (1 << 40) - 1;

/// One live allocation as the table stores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Address.
    pub addr: u64,
    /// Requested size.
    pub size: u64,
    /// log2 of the alignment.
    pub align_log2: u8,
    /// Site id (0 = none).
    pub site: u32,
    /// Whether the site came from sampling.
    pub sampled: bool,
}

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

/// One shard's table.
pub struct Shard {
    slots: *mut Slot,
    mask: usize,
    len: usize,
    live_bytes: u64,
    total_allocs: u64,
    total_bytes: u64,
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
        Shard { slots: core::ptr::null_mut(), mask: 0, len: 0, live_bytes: 0, total_allocs: 0, total_bytes: 0 }
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

    /// Inserts; returns false if the table could not grow (out of memory).
    fn insert(&mut self, e: &Entry) -> bool {
        if (self.len + 1) * 4 > self.capacity() * 3 && !self.grow() {
            return false;
        }
        let s = Slot::pack(e);
        let mut i = self.home(e.addr);
        loop {
            let cur = *self.slot(i);
            if cur.key == 0 {
                *self.slot_mut(i) = s;
                self.len += 1;
                break;
            }
            if cur.key & ADDR_MASK == e.addr {
                // The same address live twice means a free we never saw
                // (e.g. freed by a path that bypassed us): replace.
                self.live_bytes -= cur.unpack().size;
                *self.slot_mut(i) = s;
                break;
            }
            i = (i + 1) & self.mask;
        }
        self.live_bytes += e.size;
        self.total_allocs += 1;
        self.total_bytes += e.size;
        true
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
        self.live_bytes -= e.size;
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
    pub fn len(&self) -> usize {
        self.len
    }
}

/// Where a shard's slots are, for prefetching without its lock.
struct Hint {
    slots: AtomicPtr<Slot>,
    mask: AtomicUsize,
}

/// The live table.
pub struct Table {
    shards: [SpinLock<Shard>; SHARDS],
    /// Each shard's slots and mask as of its last growth (read racily, only
    /// to prefetch: a prefetch of a stale address never faults).
    hints: [Hint; SHARDS],
    /// Live bytes over all shards, for the peak and the threshold.
    pub live: AtomicU64,
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
            shards: [const { SpinLock::new(Shard::empty()) }; SHARDS],
            hints: [const { Hint { slots: AtomicPtr::new(core::ptr::null_mut()), mask: AtomicUsize::new(0) } }; SHARDS],
            live: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            untracked: AtomicU64::new(0),
        }
    }

    #[inline]
    fn shard(&self, addr: u64) -> &SpinLock<Shard> {
        &self.shards[shard_index(addr)]
    }

    /// Starts loading the cache line where `addr`'s entry will go, so that
    /// work done meanwhile (capturing its site) hides the cache miss.
    #[inline]
    pub fn prefetch(&self, addr: u64) {
        let h = &self.hints[shard_index(addr)];
        let slots = h.slots.load(Ordering::Relaxed);
        let mask = h.mask.load(Ordering::Relaxed);
        if slots.is_null() || mask == 0 {
            return;
        }
        let home = home_in(addr, mask);
        // SAFETY: a prefetch is a hint: it never faults and reads nothing
        // the program observes, even if the address is stale.
        unsafe { core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(slots.wrapping_add(home).cast()) };
    }

    /// Records a new allocation. Returns live bytes after it.
    #[inline]
    pub fn insert(&self, e: &Entry) -> u64 {
        if e.addr > ADDR_MASK || e.size >> 49 != 0 {
            self.untracked.fetch_add(1, Ordering::Relaxed);
            return self.live.load(Ordering::Relaxed);
        }
        let ok = {
            let mut shard = self.shard(e.addr).lock();
            let cap = shard.capacity();
            let ok = shard.insert(e);
            if shard.capacity() != cap {
                let h = &self.hints[shard_index(e.addr)];
                h.slots.store(shard.slots, Ordering::Relaxed);
                h.mask.store(shard.mask, Ordering::Relaxed);
            }
            ok
        };
        if !ok {
            self.untracked.fetch_add(1, Ordering::Relaxed);
            return self.live.load(Ordering::Relaxed);
        }
        let live = self.live.fetch_add(e.size, Ordering::Relaxed) + e.size;
        if live > self.peak.load(Ordering::Relaxed) {
            self.peak.fetch_max(live, Ordering::Relaxed);
        }
        live
    }

    /// Forgets an allocation; returns its entry if it was known.
    #[inline]
    pub fn remove(&self, addr: u64) -> Option<Entry> {
        let e = self.shard(addr).lock().remove(addr)?;
        self.live.fetch_sub(e.size, Ordering::Relaxed);
        Some(e)
    }

    /// Sums the shards (each under its lock).
    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for s in &self.shards {
            let s = s.lock();
            t.live_count += s.len as u64;
            t.live_bytes += s.live_bytes;
            t.total_allocs += s.total_allocs;
            t.total_bytes += s.total_bytes;
            t.table_bytes += (s.capacity() * core::mem::size_of::<Slot>()) as u64;
        }
        t
    }

    /// The shards, read without locks.
    ///
    /// # Safety
    /// Only with the world stopped (no other thread inside the tracker) or
    /// in a forked child.
    pub unsafe fn shards_unlocked(&self) -> impl Iterator<Item = &Shard> {
        // SAFETY: forwarded to the caller.
        self.shards.iter().map(|s| unsafe { s.get_unlocked() })
    }

    /// Takes every lock (before fork).
    pub fn lock_all(&self) {
        crate::lock::lock_all_for_fork(&self.shards);
    }

    /// Releases every lock (after fork).
    ///
    /// # Safety
    /// Only after [`Table::lock_all`].
    pub unsafe fn unlock_all(&self) {
        // SAFETY: forwarded to the caller.
        unsafe { crate::lock::unlock_all_after_fork(&self.shards) }
    }
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
                assert!(s.insert(&e));
                v.insert(e.size);
            }
        }
        assert_eq!(s.len(), model.len());
        let mut seen = std::collections::BTreeMap::new();
        s.for_each(|e| {
            seen.insert(e.addr, e.size);
        });
        assert_eq!(seen, model);
        assert_eq!(s.live_bytes, model.values().sum::<u64>());
    }
}
