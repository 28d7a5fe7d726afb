//! The overflow table: the blocks the address-indexed slots do not take
//! (large, over-aligned, odd addresses, addresses at or above 2^47, and
//! small blocks when no bucket can be had). 64 shards, chosen by a hash of
//! the address, each an open-addressing table with linear probing and
//! backward-shift deletion (no tombstones), behind its own spin lock (in
//! `table`). A shard grows (doubling, at 3/4 load) under its own lock
//! only, so there is no global pause and no entry is lost.
//!
//! A shard entry is 16 bytes:
//! - `key`: address in bits 0..48, log2(alignment) in 48..54, the sampled
//!   flag in bit 54, bits 40.. of the size in 55..64;
//! - `meta`: bits 0..40 of the size in 0..40, the site id in 40..64.
//!
//! So sizes up to 2^49 bytes and 2^24 sites are exact.

use crate::entry::Entry;
use crate::sys;

/// A shard could not grow (the kernel refused the memory): the entry is
/// counted as untracked.
#[derive(Debug, PartialEq, Eq)]
pub struct NoRoom;

/// Shards of the overflow table.
pub const SHARDS: usize = 64;
const INITIAL: usize = 1024;
/// Addresses the table can hold: below 2^48.
pub const ADDR_MASK: u64 = (1 << 48) - 1;
const SIZE_LO: u64 = (1 << 40) - 1;

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Slot {
    key: u64,
    meta: u64,
}

impl Slot {
    pub(crate) fn pack(e: &Entry) -> Slot {
        let key =
            (e.addr & ADDR_MASK) | (u64::from(e.align_log2 & 63) << 48) | (u64::from(e.sampled) << 54) | (((e.size >> 40) & 0x1ff) << 55);
        let meta = (e.size & SIZE_LO) | (u64::from(e.site & 0xff_ffff) << 40);
        Slot { key, meta }
    }
    pub(crate) fn unpack(&self) -> Entry {
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
pub(crate) fn shard_index(addr: u64) -> usize {
    (hash(addr) >> 58) as usize
}

/// `addr`'s home slot in a shard of `mask + 1` slots: the hash bits below
/// the 6 that chose the shard.
#[inline]
fn home_in(addr: u64, mask: usize) -> usize {
    ((hash(addr) << 6) >> (64 - mask.count_ones())) as usize
}

impl Shard {
    pub(crate) const fn empty() -> Shard {
        Shard { slots: core::ptr::null_mut(), mask: 0, len: 0 }
    }

    /// Home slot: the hash bits below the 6 that chose the shard.
    #[inline]
    fn home(&self, addr: u64) -> usize {
        home_in(addr, self.mask)
    }

    pub(crate) fn capacity(&self) -> usize {
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
    pub(crate) fn insert(&mut self, e: &Entry) -> Result<Option<Entry>, NoRoom> {
        if (self.len + 1) * 4 > self.capacity() * 3 && !self.grow() {
            return Err(NoRoom);
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

    pub(crate) fn remove(&mut self, addr: u64) -> Option<Entry> {
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
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}
