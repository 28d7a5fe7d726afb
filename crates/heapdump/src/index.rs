//! The live allocations sorted by address, and the directory that answers
//! "does this word point into a live allocation?" in constant time.
//!
//! The compact scan asks that of every word of every block and root. A
//! binary search of the whole index (10 M entries: some twenty dependent
//! cache misses) made a compact dump of a dense heap 46 times slower than a
//! full one. The directory cuts the address range into clusters (runs of
//! blocks with no gap of 16 MiB or more: the brk heap, each arena, the
//! mapped blocks) and each cluster into buckets of a power-of-two size
//! holding a few blocks on average; a bucket holds the index of the first
//! block starting in it, so a lookup is a search of the few clusters, one
//! bucket read and a search of a handful of entries.
//!
//! Written by hand: it is built and used with the world stopped, inside
//! the traced process, from memory mapped from the kernel.

use crate::outcome::DumpError;

use crate::entry::Entry;
use crate::sys;
use crate::table::Table;

/// The live allocations sorted by address: the lookup index of the compact
/// scan, and the order allocations are written in (so their contents are
/// read front to back; the table gives its small blocks in address order
/// and the others in hash order).
pub(crate) struct Index {
    ptr: *mut Entry,
    len: usize,
    map_len: usize,
    lo: u64,
    hi: u64,
    dir: Directory,
}

impl Index {
    pub(crate) fn as_slice(&self) -> &[Entry] {
        if self.ptr.is_null() {
            return &[];
        }
        // SAFETY: ptr maps `len` initialised entries.
        unsafe { core::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// Whether `v` points at or into a live allocation.
    #[inline]
    pub(crate) fn hits(&self, v: u64) -> bool {
        if v < self.lo || v >= self.hi {
            return false;
        }
        let s = self.as_slice();
        let Some((from, to)) = self.dir.window(v) else { return false };
        // The last entry starting at or before v lies in [from - 1, to):
        // every entry before `from` starts before v's bucket, every entry
        // from `to` on after it.
        let i = from + s[from..to].partition_point(|e| e.addr <= v);
        if i == 0 {
            return false;
        }
        let e = &s[i - 1];
        v < e.addr + e.size || v == e.addr
    }

    /// The live allocation `v` points at or into: its position in the
    /// index (its ordinal in the dump, allocations being written in index
    /// order) and the offset of `v` in it.
    #[inline]
    pub(crate) fn find(&self, v: u64) -> Option<(usize, u64)> {
        if v < self.lo || v >= self.hi {
            return None;
        }
        let s = self.as_slice();
        let (from, to) = self.dir.window(v)?;
        let i = from + s[from..to].partition_point(|e| e.addr <= v);
        let e = s.get(i.checked_sub(1)?)?;
        (v < e.addr + e.size || v == e.addr).then_some((i - 1, v - e.addr))
    }

    /// Starts the memory reads that [`Index::hits`] will make for the
    /// words of the live block `[addr, addr + size)` (its first 64): the
    /// directory's buckets, or (`entries`) the index entries those buckets
    /// name. Only a hint: it changes no state.
    #[inline]
    pub(crate) fn prefetch(&self, addr: u64, size: u64, entries: bool) {
        if addr % 8 != 0 {
            return;
        }
        let words = (size / 8).min(64);
        for k in 0..words {
            // SAFETY: a word inside a live allocation of the stopped (or
            // forked) process, 8-aligned (as `Rescan` reads them).
            let v = unsafe { core::ptr::read_volatile((addr + 8 * k) as *const u64) };
            if v < self.lo || v >= self.hi {
                continue;
            }
            let Some((c, k)) = self.dir.bucket_of(v) else { continue };
            if entries {
                // Every line of the window the lookup searches, from the
                // entry before it (at most 8 lines).
                // SAFETY: as in `window`: buckets k and k + 1 exist.
                let (from, to) = unsafe { (*self.dir.buckets.add(c.buckets + k), *self.dir.buckets.add(c.buckets + k + 1)) };
                let first = self.ptr.wrapping_add((from as usize).saturating_sub(1)) as usize & !63;
                let last = self.ptr.wrapping_add(to as usize) as usize;
                let mut line = first;
                while line < last && line < first + 8 * 64 {
                    // SAFETY: a prefetch never faults, whatever the address.
                    unsafe { core::arch::x86_64::_mm_prefetch(line as *const i8, core::arch::x86_64::_MM_HINT_T0) };
                    line += 64;
                }
            } else {
                let p = self.dir.buckets.wrapping_add(c.buckets + k) as *const i8;
                // SAFETY: a prefetch never faults, whatever the address.
                unsafe { core::arch::x86_64::_mm_prefetch(p, core::arch::x86_64::_MM_HINT_T0) };
            }
        }
    }

    pub(crate) fn release(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: our own mapping, no longer referenced.
            unsafe { sys::munmap(self.ptr.cast(), self.map_len) };
            self.ptr = core::ptr::null_mut();
        }
        self.dir.release();
    }
}

/// A run of blocks with no large gap, and its buckets.
#[derive(Clone, Copy)]
struct Cluster {
    /// First address of the cluster (its first block's).
    lo: u64,
    /// One past its last byte (the largest block end).
    hi: u64,
    /// log2 of the bucket size.
    shift: u32,
    /// Where its buckets start in the directory's bucket array.
    buckets: usize,
}

/// A gap this large between blocks starts a new cluster.
const GAP: u64 = 16 << 20;
/// Blocks per bucket, on average, that the bucket size aims at.
const PER_BUCKET: u64 = 4;

struct Directory {
    clusters: *mut Cluster,
    nclusters: usize,
    /// Per cluster, one u32 per bucket plus one: the index of the first
    /// entry starting at or after the bucket's start.
    buckets: *mut u32,
    map: *mut u8,
    map_len: usize,
}

impl Directory {
    const EMPTY: Directory =
        Directory { clusters: core::ptr::null_mut(), nclusters: 0, buckets: core::ptr::null_mut(), map: core::ptr::null_mut(), map_len: 0 };

    /// Calls `f(first, end_entry, lo, hi)` for each cluster of `s`.
    fn each_cluster(s: &[Entry], mut f: impl FnMut(usize, usize, u64, u64)) {
        let mut start = 0;
        let mut hi = 0u64;
        for (i, e) in s.iter().enumerate() {
            let end = (e.addr + e.size).max(e.addr + 1);
            if i > start && e.addr > hi.saturating_add(GAP) {
                f(start, i, s[start].addr, hi);
                start = i;
                hi = 0;
            }
            hi = hi.max(end);
        }
        if start < s.len() {
            f(start, s.len(), s[start].addr, hi);
        }
    }

    fn shift_for(lo: u64, hi: u64, count: usize) -> u32 {
        let range = hi - lo;
        let want = (count as u64 / PER_BUCKET).max(1);
        // The smallest bucket size giving at most `want` buckets, at least
        // 16 bytes (no two 16-byte-aligned blocks start in one bucket less).
        let mut shift = 4;
        while shift < 63 && (range >> shift) >= want {
            shift += 1;
        }
        shift
    }

    fn build(s: &[Entry]) -> Result<Directory, i32> {
        if s.is_empty() {
            return Ok(Directory::EMPTY);
        }
        let (mut nclusters, mut nbuckets) = (0usize, 0usize);
        Self::each_cluster(s, |first, end, lo, hi| {
            nclusters += 1;
            nbuckets += ((hi - lo) >> Self::shift_for(lo, hi, end - first)) as usize + 2;
        });
        let cl_bytes = (nclusters * core::mem::size_of::<Cluster>()).next_multiple_of(8);
        let map_len = (cl_bytes + nbuckets * 4).next_multiple_of(4096);
        let map = sys::mmap_anon(map_len)?;
        let _ = sys::huge_pages(map as usize, map_len);
        let clusters: *mut Cluster = map.cast();
        // SAFETY: the mapping holds cl_bytes of clusters, then the buckets.
        let buckets: *mut u32 = unsafe { map.add(cl_bytes) }.cast();
        let (mut c, mut at) = (0usize, 0usize);
        Self::each_cluster(s, |first, end, lo, hi| {
            let shift = Self::shift_for(lo, hi, end - first);
            let n = ((hi - lo) >> shift) as usize + 2;
            // Bucket k holds the first entry starting at or after
            // lo + k << shift; entries come in address order.
            let mut j = first;
            for k in 0..n {
                let start = lo.saturating_add((k as u64) << shift);
                while j < end && s[j].addr < start {
                    j += 1;
                }
                // SAFETY: at + k < nbuckets (the count above, same clusters).
                unsafe { buckets.add(at + k).write(j as u32) };
            }
            // SAFETY: c < nclusters.
            unsafe { clusters.add(c).write(Cluster { lo, hi, shift, buckets: at }) };
            c += 1;
            at += n;
        });
        Ok(Directory { clusters, nclusters, buckets, map, map_len })
    }

    /// The first block's address and one past the last byte of any block
    /// (clusters are in address order, and each ends past every block
    /// before it); (0, 0) when empty.
    fn bounds(&self) -> (u64, u64) {
        if self.nclusters == 0 {
            return (0, 0);
        }
        // SAFETY: nclusters clusters were written by `build`.
        let cl = unsafe { core::slice::from_raw_parts(self.clusters, self.nclusters) };
        (cl[0].lo, cl[self.nclusters - 1].hi)
    }

    /// The cluster holding `v` and `v`'s bucket in it.
    #[inline]
    fn bucket_of(&self, v: u64) -> Option<(Cluster, usize)> {
        if self.nclusters == 0 {
            return None;
        }
        // SAFETY: nclusters clusters were written by `build`.
        let cl = unsafe { core::slice::from_raw_parts(self.clusters, self.nclusters) };
        let c = cl.partition_point(|c| c.lo <= v).checked_sub(1)?;
        let c = cl[c];
        if v >= c.hi {
            return None;
        }
        Some((c, ((v - c.lo) >> c.shift) as usize))
    }

    /// The entries `[from, to)` among which the last one starting at or
    /// before `v` lies (with `from - 1`), when `v` lies in a cluster.
    #[inline]
    fn window(&self, v: u64) -> Option<(usize, usize)> {
        let (c, k) = self.bucket_of(v)?;
        // SAFETY: k + 1 < the cluster's bucket count ((hi - lo) >> shift
        // + 2), since v - lo < hi - lo.
        let (from, to) = unsafe { (*self.buckets.add(c.buckets + k), *self.buckets.add(c.buckets + k + 1)) };
        Some((from as usize, to as usize))
    }

    fn release(&mut self) {
        if !self.map.is_null() {
            // SAFETY: our own mapping, no longer referenced.
            unsafe { sys::munmap(self.map, self.map_len) };
        }
        *self = Directory::EMPTY;
    }
}

pub(crate) fn build_index(table: &Table) -> Result<Index, DumpError> {
    let size = core::mem::size_of::<Entry>();
    let map_err = |errno| DumpError::Os { what: "mapping the address index", errno };
    // SAFETY: world stopped or forked child (so for the table calls below).
    let large = unsafe { table.overflow_len_unlocked() };
    // The small blocks come in address order: put them at the end of the
    // index, the others (sorted) beside it, and merge from the front. The
    // merge never writes over a small entry it has yet to read. The index
    // is sized from the per-thread counts, with room to spare, so that the
    // slots are walked once; should they hold more, they are counted and
    // walked again.
    let guess = (table.live_count() as usize).saturating_sub(large);
    let mut room = guess + guess / 64 + 4096;
    let (ptr, map_len, small) = loop {
        let map_len = ((large + room).max(1) * size).next_multiple_of(4096);
        let ptr: *mut Entry = sys::mmap_anon(map_len).map_err(map_err)?.cast();
        // Looked up at random for every pointer of a dense heap: huge
        // pages spare a TLB miss per lookup (a hint; refused is fine).
        let _ = sys::huge_pages(ptr as usize, map_len);
        let base = ptr.wrapping_add(large);
        let mut small = 0;
        // SAFETY: the world is stopped or this is the forked child: no thread
        // writes the slots while they are walked.
        unsafe {
            table.for_each_small_unlocked(|e| {
                if small < room {
                    // SAFETY: large + small < large + room entries fit in the mapping.
                    base.add(small).write(e);
                }
                small += 1;
            })
        };
        if small <= room {
            break (ptr, map_len, small);
        }
        // SAFETY: our mapping, not referenced.
        unsafe { sys::munmap(ptr.cast(), map_len) };
        room = small;
    };
    let n = small + large;
    let tmp_len = (large.max(1) * size).next_multiple_of(4096);
    let tmp: *mut Entry = match sys::mmap_anon(tmp_len) {
        Ok(p) => p.cast(),
        Err(errno) => {
            // SAFETY: our mapping, not referenced.
            unsafe { sys::munmap(ptr.cast(), map_len) };
            return Err(map_err(errno));
        }
    };
    let mut i = 0;
    // SAFETY: as for the slots: nothing writes the overflow shards while
    // the world is stopped (or in the forked child).
    unsafe {
        table.for_each_overflow_unlocked(|e| {
            if i < large {
                // SAFETY: i < large entries fit in the mapping.
                tmp.add(i).write(e);
                i += 1;
            }
        })
    };
    // SAFETY: `large` entries written to tmp; sort_unstable is in core and
    // does not allocate.
    let others = unsafe { core::slice::from_raw_parts_mut(tmp, large) };
    others.sort_unstable_by_key(|e| e.addr);
    let (mut a, mut b) = (large, 0);
    let mut out = 0;
    while a < n || b < large {
        // SAFETY: a < n and b < large index written entries; out never
        // passes a (out <= (a - large) + b <= a).
        unsafe {
            let take_small = b == large || (a < n && (*ptr.add(a)).addr <= others[b].addr);
            let e = if take_small {
                a += 1;
                *ptr.add(a - 1)
            } else {
                b += 1;
                others[b - 1]
            };
            // A large entry at a small block's address is stale (a free the
            // tracker never saw; see table.rs): the small one is newer.
            if out > 0 && (*ptr.add(out - 1)).addr == e.addr {
                continue;
            }
            ptr.add(out).write(e);
            out += 1;
        }
    }
    let n = out;
    // SAFETY: our mapping, no longer referenced.
    unsafe { sys::munmap(tmp.cast(), tmp_len) };
    let mut index = Index { ptr, len: n, map_len, lo: 0, hi: 0, dir: Directory::EMPTY };
    match Directory::build(index.as_slice()) {
        Ok(d) => index.dir = d,
        Err(errno) => {
            index.release();
            return Err(map_err(errno));
        }
    }
    // The clusters' bounds, found while building them: no second pass
    // over the entries with the world stopped.
    (index.lo, index.hi) = index.dir.bounds();
    Ok(index)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer of a search of every entry.
    fn brute(s: &[Entry], v: u64) -> bool {
        s.iter().any(|e| v == e.addr || (v >= e.addr && v < e.addr + e.size))
    }

    #[test]
    fn the_directory_answers_as_a_search_of_every_block() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for layout in 0..40 {
            // Clusters far apart (a brk heap, arenas, mapped blocks), blocks
            // of 0 bytes to 1 MiB, packed or with gaps.
            let mut entries = Vec::new();
            let mut addr = 0x5555_0000_0000u64 + (rnd() % 4096) * 16;
            for _ in 0..(1 + rnd() % 2000) {
                let size = match rnd() % 10 {
                    0 => 0,
                    1 => 1 << 20,
                    2..=4 => 16 + rnd() % 64,
                    _ => 8 * (1 + rnd() % 8),
                };
                entries.push(Entry::new(addr as *mut u8, size as usize, 16, 0, false));
                addr += size.max(1).next_multiple_of(16);
                match rnd() % 50 {
                    0 => addr += 1 << (24 + rnd() % 20),
                    1..=5 => addr += 16 * (rnd() % 100_000),
                    _ => {}
                }
            }
            let lo = entries[0].addr;
            let hi = entries.iter().map(|e| (e.addr + e.size).max(e.addr + 1)).max().unwrap();
            let dir = Directory::build(&entries).unwrap();
            assert_eq!(dir.bounds(), (lo, hi), "layout {layout}: the clusters' bounds are the index's");
            let index = Index { ptr: entries.as_mut_ptr(), len: entries.len(), map_len: 0, lo, hi, dir };
            let mut probes: Vec<u64> =
                entries.iter().flat_map(|e| [e.addr, e.addr + e.size / 2, e.addr + e.size, e.addr.wrapping_sub(1)]).collect();
            probes.extend((0..2000).map(|_| lo.wrapping_sub(1 << 20) + rnd() % (hi - lo + (2 << 20))));
            for v in probes {
                assert_eq!(index.hits(v), brute(&entries, v), "layout {layout}: {v:#x}");
            }
            let mut index = index;
            index.dir.release();
        }
    }
}
