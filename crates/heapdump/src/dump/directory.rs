//! The directory of the index: what answers "does this word point into
//! a live allocation?" in constant time, over the entries sorted by
//! address (see `index`, which owns the entries and asks it).
//!
//! The address range is cut into clusters (runs of blocks with no gap of
//! 16 MiB or more: the brk heap, each arena, the mapped blocks); a dense
//! cluster of small, 16-byte aligned blocks gets a granule map (a line of
//! 256 granules: where blocks start and which they cover whole), any other
//! buckets of a power-of-two size holding a few blocks on average (the
//! index of the first block starting in each). Built and used with the
//! world stopped, inside the traced process, in memory mapped from the
//! kernel.

use crate::entry::Entry;
use crate::sys;

/// Starts reading the cache line at `p` into the cache.
#[inline]
pub(super) fn prefetch(p: usize) {
    // SAFETY: a prefetch never faults, whatever the address.
    unsafe { core::arch::x86_64::_mm_prefetch(p as *const i8, core::arch::x86_64::_MM_HINT_T0) };
}

/// A run of blocks with no large gap, and how its lookups are answered:
/// buckets, or a granule map.
#[derive(Clone, Copy)]
pub(super) struct Cluster {
    /// First address of the cluster (its first block's).
    pub(super) lo: u64,
    /// One past its last byte (the largest block end).
    pub(super) hi: u64,
    /// log2 of the bucket size.
    pub(super) shift: u32,
    /// Where its buckets start in the directory's bucket array.
    pub(super) buckets: usize,
    /// The index of its first entry.
    pub(super) first: usize,
    /// Where its lines start in the granule map, or [`NO_LINES`].
    pub(super) lines: usize,
}

impl Cluster {
    /// The granule-map line holding `v` (a granule cluster's, `v` in it).
    #[inline]
    pub(super) fn line_of(&self, v: u64) -> usize {
        self.lines + ((v - self.lo) >> GRANULE_SHIFT) as usize / LINE_GRANULES
    }
}

/// A gap this large between blocks starts a new cluster.
pub(super) const GAP: u64 = 16 << 20;
/// Blocks per bucket, on average, that the bucket size aims at.
pub(super) const PER_BUCKET: u64 = 4;
/// A cluster answered by its buckets.
pub(super) const NO_LINES: usize = usize::MAX;
/// The granule of the granule map: glibc's and most allocators' alignment.
pub(super) const GRANULE_SHIFT: u32 = 4;
/// Granules per line of the granule map (4 KiB of heap per 64 bytes).
pub(super) const LINE_GRANULES: usize = 256;
/// What a granule map may cost per block of its cluster, in bytes (the
/// index entry itself is 24).
pub(super) const LINE_BUDGET: usize = 16;

/// 256 granules of 16 bytes of a cluster: which of them a block starts in,
/// and which a block covers whole. With the count of starts before each
/// line ([`Directory::ranks`]), a pointer's target, its ordinal and its
/// offset come from one cache line, where the buckets need a bucket and
/// then the index entries it names: two dependent misses per pointer, in
/// 240 MB of entries at 10 M blocks against 10 MB of lines.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct Line {
    pub(super) starts: [u64; 4],
    pub(super) full: [u64; 4],
}

pub(super) struct Directory {
    pub(super) clusters: *mut Cluster,
    pub(super) nclusters: usize,
    /// Per bucket cluster, one u32 per bucket plus one: the index of the
    /// first entry starting at or after the bucket's start.
    pub(super) buckets: *mut u32,
    /// How many (none when every cluster has a granule map).
    pub(super) nbuckets: usize,
    /// Per granule cluster, its lines, and per line the number of blocks
    /// of the cluster starting before it.
    pub(super) lines: *mut Line,
    pub(super) ranks: *mut u32,
    /// The cluster of the most blocks, looked at first (an empty range
    /// when there are none).
    pub(super) hot: Cluster,
    /// Whether the processor counts bits in one instruction.
    pub(super) popcnt: bool,
    pub(super) map: *mut u8,
    pub(super) map_len: usize,
}

impl Directory {
    pub(super) const EMPTY: Directory = Directory {
        clusters: core::ptr::null_mut(),
        nclusters: 0,
        buckets: core::ptr::null_mut(),
        nbuckets: 0,
        lines: core::ptr::null_mut(),
        ranks: core::ptr::null_mut(),
        hot: Cluster { lo: 0, hi: 0, shift: 0, buckets: 0, first: 0, lines: NO_LINES },
        popcnt: false,
        map: core::ptr::null_mut(),
        map_len: 0,
    };

    /// Calls `f(first, end_entry, lo, hi, tidy)` for each cluster of `s`;
    /// `tidy` when its blocks are 16-byte aligned and none overlaps the
    /// one before (each granule then holds at most one block start).
    pub(super) fn each_cluster(s: &[Entry], mut f: impl FnMut(usize, usize, u64, u64, bool)) {
        let mut start = 0;
        let mut hi = 0u64;
        let mut tidy = true;
        for (i, e) in s.iter().enumerate() {
            let end = (e.addr + e.size).max(e.addr + 1);
            if i > start && e.addr > hi.saturating_add(GAP) {
                f(start, i, s[start].addr, hi, tidy);
                start = i;
                hi = 0;
                tidy = true;
            }
            tidy &= e.addr % (1 << GRANULE_SHIFT) == 0 && (i == start || e.addr >= hi);
            hi = hi.max(end);
        }
        if start < s.len() {
            f(start, s.len(), s[start].addr, hi, tidy);
        }
    }

    pub(super) fn shift_for(lo: u64, hi: u64, count: usize) -> u32 {
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

    /// How many granule-map lines a cluster gets: none (buckets) unless it
    /// is tidy and dense enough for the lines to cost at most
    /// [`LINE_BUDGET`] bytes per block.
    pub(super) fn lines_for(lo: u64, hi: u64, count: usize, tidy: bool) -> usize {
        let lines = (((hi - lo - 1) >> GRANULE_SHIFT) as usize / LINE_GRANULES) + 1;
        if tidy && lines * (core::mem::size_of::<Line>() + 4) <= LINE_BUDGET * count {
            lines
        } else {
            0
        }
    }

    pub(super) fn build(s: &[Entry]) -> Result<Directory, i32> {
        if s.is_empty() {
            return Ok(Directory::EMPTY);
        }
        let (mut nclusters, mut nbuckets, mut nlines) = (0usize, 0usize, 0usize);
        Self::each_cluster(s, |first, end, lo, hi, tidy| {
            nclusters += 1;
            match Self::lines_for(lo, hi, end - first, tidy) {
                0 => nbuckets += ((hi - lo) >> Self::shift_for(lo, hi, end - first)) as usize + 2,
                n => nlines += n,
            }
        });
        let cl_bytes = (nclusters * core::mem::size_of::<Cluster>()).next_multiple_of(64);
        let ranks_at = cl_bytes + (nbuckets * 4).next_multiple_of(64);
        let lines_at = ranks_at + (nlines * 4).next_multiple_of(64);
        let map_len = (lines_at + nlines * core::mem::size_of::<Line>()).next_multiple_of(4096);
        let map = sys::mmap_anon(map_len)?;
        let _ = sys::huge_pages(map as usize, map_len);
        let clusters: *mut Cluster = map.cast();
        // SAFETY: the mapping holds cl_bytes of clusters, then the buckets,
        // the ranks and the lines (64-byte aligned: the mapping is
        // page-aligned and every offset a multiple of 64).
        let (buckets, ranks, lines): (*mut u32, *mut u32, *mut Line) =
            unsafe { (map.add(cl_bytes).cast(), map.add(ranks_at).cast(), map.add(lines_at).cast()) };
        let (mut c, mut at, mut line_at) = (0usize, 0usize, 0usize);
        Self::each_cluster(s, |first, end, lo, hi, tidy| {
            let nl = Self::lines_for(lo, hi, end - first, tidy);
            if nl > 0 {
                // The mapping is fresh (zeroed): set the bits of each block.
                // SAFETY: line_at + nl <= nlines (the count above).
                let ls = unsafe { core::slice::from_raw_parts_mut(lines.add(line_at), nl) };
                for e in &s[first..end] {
                    let g = ((e.addr - lo) >> GRANULE_SHIFT) as usize;
                    ls[g / LINE_GRANULES].starts[(g % LINE_GRANULES) / 64] |= 1 << (g % 64);
                    set_full(ls, g, g + (e.size >> GRANULE_SHIFT) as usize);
                }
                let mut before = 0u32;
                for (k, l) in ls.iter().enumerate() {
                    // SAFETY: line_at + k < nlines.
                    unsafe { ranks.add(line_at + k).write(before) };
                    before += l.starts.iter().map(|w| w.count_ones()).sum::<u32>();
                }
                // SAFETY: c < nclusters.
                unsafe { clusters.add(c).write(Cluster { lo, hi, shift: GRANULE_SHIFT, buckets: 0, first, lines: line_at }) };
                line_at += nl;
            } else {
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
                unsafe { clusters.add(c).write(Cluster { lo, hi, shift, buckets: at, first, lines: NO_LINES }) };
                at += n;
            }
            c += 1;
        });
        // SAFETY: nclusters clusters written above.
        let cl = unsafe { core::slice::from_raw_parts(clusters, nclusters) };
        let size = |k: usize| cl.get(k + 1).map_or(s.len(), |n| n.first) - cl[k].first;
        let hot = cl[(0..nclusters).max_by_key(|&k| size(k)).unwrap_or(0)];
        // std_detect's answer is cached in a static after one CPUID: it
        // does not allocate.
        let popcnt = std::arch::is_x86_feature_detected!("popcnt");
        Ok(Directory { clusters, nclusters, buckets, nbuckets, lines, ranks, hot, popcnt, map, map_len })
    }

    /// The lookup of `v` in the granule cluster `c` (see [`Line`]): the
    /// last block starting at or before `v`'s granule is the one whose
    /// ordinal the starts before it count; a granule it covers whole holds
    /// `v`, and its start is the last start bit (found nearby, or read from
    /// the entry for a block of more than a few lines); any other granule
    /// is checked against the entry.
    #[inline(always)]
    pub(super) fn granule_find(&self, c: &Cluster, v: u64, s: &[Entry]) -> Option<(usize, u64)> {
        let g = ((v - c.lo) >> GRANULE_SHIFT) as usize;
        let li = c.line_of(v);
        // SAFETY: v < c.hi, so li is one of the cluster's lines.
        let (line, rank) = unsafe { (&*self.lines.add(li), *self.ranks.add(li) as usize) };
        let w = (g % LINE_GRANULES) / 64;
        let le = u64::MAX >> (63 - g % 64);
        let mut r = rank;
        for x in &line.starts[..w] {
            r += x.count_ones() as usize;
        }
        r += (line.starts[w] & le).count_ones() as usize;
        let ord = c.first + r.checked_sub(1)?;
        if line.full[w] >> (g % 64) & 1 == 1 {
            if let Some(sg) = self.last_start(c, li, w, line.starts[w] & le) {
                return Some((ord, v - (c.lo + ((sg as u64) << GRANULE_SHIFT))));
            }
        }
        let e = s.get(ord)?;
        (v < e.addr + e.size || v == e.addr).then_some((ord, v - e.addr))
    }

    /// [`Directory::granule_find`] with the processor's population count
    /// (the portable one is a dozen instructions per word counted).
    ///
    /// # Safety
    /// The processor must have POPCNT.
    #[target_feature(enable = "popcnt")]
    pub(super) unsafe fn granule_find_popcnt(&self, c: &Cluster, v: u64, s: &[Entry]) -> Option<(usize, u64)> {
        self.granule_find(c, v, s)
    }

    /// The granule of the last block start at or before word `w` of line
    /// `li` (`bits` being that word's starts at or before the granule),
    /// searched back over at most four lines (16 KiB).
    #[inline]
    pub(super) fn last_start(&self, c: &Cluster, li: usize, w: usize, bits: u64) -> Option<usize> {
        let at = |li: usize, w: usize, bits: u64| (li - c.lines) * LINE_GRANULES + w * 64 + 63 - bits.leading_zeros() as usize;
        if bits != 0 {
            return Some(at(li, w, bits));
        }
        let (mut li, mut w) = (li, w);
        for _ in 0..4 * 4 {
            if w == 0 {
                if li == c.lines {
                    return None;
                }
                li -= 1;
                w = 4;
            }
            w -= 1;
            // SAFETY: li is one of the cluster's lines.
            let bits = unsafe { (*self.lines.add(li)).starts[w] };
            if bits != 0 {
                return Some(at(li, w, bits));
            }
        }
        None
    }

    /// The first block's address and one past the last byte of any block
    /// (clusters are in address order, and each ends past every block
    /// before it); (0, 0) when empty.
    pub(super) fn bounds(&self) -> (u64, u64) {
        if self.nclusters == 0 {
            return (0, 0);
        }
        // SAFETY: nclusters clusters were written by `build`.
        let cl = unsafe { core::slice::from_raw_parts(self.clusters, self.nclusters) };
        (cl[0].lo, cl[self.nclusters - 1].hi)
    }

    /// The cluster holding `v`.
    #[inline]
    pub(super) fn cluster_of(&self, v: u64) -> Option<Cluster> {
        if v >= self.hot.lo && v < self.hot.hi {
            return Some(self.hot);
        }
        if self.nclusters == 0 {
            return None;
        }
        // SAFETY: nclusters clusters were written by `build`.
        let cl = unsafe { core::slice::from_raw_parts(self.clusters, self.nclusters) };
        let c = cl[cl.partition_point(|c| c.lo <= v).checked_sub(1)?];
        (v < c.hi).then_some(c)
    }

    pub(super) fn release(&mut self) {
        if !self.map.is_null() {
            // SAFETY: our own mapping, no longer referenced.
            unsafe { sys::munmap(self.map, self.map_len) };
        }
        *self = Directory::EMPTY;
    }
}

/// Sets the full bits of granules `[from, to)` of a cluster's lines.
pub(super) fn set_full(ls: &mut [Line], from: usize, to: usize) {
    let mut g = from;
    while g < to {
        let (l, w, b) = (g / LINE_GRANULES, (g % LINE_GRANULES) / 64, g % 64);
        let n = (64 - b).min(to - g);
        let bits = if n == 64 { u64::MAX } else { ((1u64 << n) - 1) << b };
        ls[l].full[w] |= bits;
        g += n;
    }
}
