//! Which block a word points into: a directory of buckets over blocks
//! sorted by address, for the scans that ask it of every word of a heap.
//!
//! The blocks are cut into runs wherever the next block starts a gap or
//! more past the end of every block before it (the brk heap, each arena,
//! the mapped blocks); each run into buckets of a power-of-two size, each
//! bucket holding the index of the first block starting at or after it.
//! A lookup is a search of the few runs, two bucket reads and a search of
//! the handful of blocks starting in the word's bucket (plus the one
//! before, which may hold the word).
//!
//! No allocation and no panic: the caller asks [`Shape::sizes`] how much
//! storage the directory needs, hands it over (a `Vec`, or memory mapped
//! from the kernel inside a traced process) and [`Directory::build`]
//! fills it, or refuses storage that is too small.

/// Blocks sorted by start address, for a directory: `start` and `size`
/// are asked only for `i < len()`. A block of size 0 holds the word equal
/// to its start.
pub trait Blocks {
    /// How many.
    fn len(&self) -> usize;
    /// Whether there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The address of block `i`.
    fn start(&self, i: usize) -> u64;
    /// Its size in bytes.
    fn size(&self, i: usize) -> u64;
    /// The first block of `from..to` (inside `0..len()`) starting after
    /// `v`, or `to`. A binary search with [`Blocks::start`]; blocks in a
    /// slice answer with `partition_point`, without bounds checks.
    #[inline]
    fn first_after(&self, from: usize, to: usize, v: u64) -> usize {
        let (mut lo, mut hi) = (from, to);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.start(mid) <= v {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

/// How a directory cuts its blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// A block starting this far or more past the end of every block before
    /// it starts a new run.
    pub gap: u64,
    /// log2 of the smallest bucket; a run starts at its first block's
    /// address rounded down to it.
    pub min_shift: u32,
    /// The buckets of a run are the smallest (at least `1 << min_shift`
    /// bytes) that give at most this many buckets per block.
    pub buckets_per_block: u64,
}

/// One run of blocks and where its buckets are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Run {
    /// Its first address (its first block's, rounded down to the smallest
    /// bucket).
    pub lo: u64,
    /// One past its last byte (the largest block end; a block of size 0
    /// counts as one byte).
    pub hi: u64,
    /// Its first bucket in the directory's bucket array.
    pub at: usize,
    /// log2 of its bucket size.
    pub shift: u32,
}

/// The storage a directory needs: [`Run`]s and bucket entries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sizes {
    /// Runs.
    pub runs: usize,
    /// Bucket entries (`u32`).
    pub buckets: usize,
}

impl Shape {
    /// Calls `f(first, end, lo, hi)` for each run of `b`: its blocks
    /// `first..end` and its address range.
    fn each_run<B: Blocks + ?Sized>(&self, b: &B, mut f: impl FnMut(usize, usize, u64, u64)) {
        let n = b.len();
        let mut first = 0;
        let mut hi = 0u64;
        for i in 0..n {
            let start = b.start(i);
            let end = start.saturating_add(b.size(i).max(1));
            if i > first && start >= hi.saturating_add(self.gap) {
                f(first, i, self.lo_of(b.start(first)), hi);
                first = i;
                hi = end;
                continue;
            }
            hi = if i == first { end } else { hi.max(end) };
        }
        if n > first {
            f(first, n, self.lo_of(b.start(first)), hi);
        }
    }

    fn lo_of(&self, start: u64) -> u64 {
        start & !((1u64 << self.min_shift.min(63)) - 1)
    }

    /// The bucket size (log2) of a run of `count` blocks over `[lo, hi)`.
    fn shift_for(&self, lo: u64, hi: u64, count: usize) -> u32 {
        let mut shift = self.min_shift.min(40);
        let most = (count as u64).saturating_mul(self.buckets_per_block.max(1));
        while shift < 40 && (hi - lo) >> shift > most {
            shift += 1;
        }
        shift
    }

    /// Buckets of a run over `[lo, hi)` with buckets of `1 << shift`
    /// bytes: one per bucket the run touches, and one past its end.
    fn buckets_of(lo: u64, hi: u64, shift: u32) -> usize {
        (((hi - lo - 1) >> shift) + 2) as usize
    }

    /// The storage a directory of `b` takes.
    pub fn sizes<B: Blocks + ?Sized>(&self, b: &B) -> Sizes {
        let mut s = Sizes::default();
        self.each_run(b, |first, end, lo, hi| {
            s.runs += 1;
            s.buckets = s.buckets.saturating_add(Self::buckets_of(lo, hi, self.shift_for(lo, hi, end - first)));
        });
        s
    }
}

/// The directory over one set of blocks, in storage `R` (runs) and `K`
/// (buckets) the caller owns: `Vec`s, or slices of its own memory.
pub struct Directory<R, K> {
    runs: R,
    nruns: usize,
    buckets: K,
}

impl<R: AsRef<[Run]>, K: AsRef<[u32]>> Directory<R, K> {
    /// Builds the directory of `b` in `runs` and `buckets`, which must hold
    /// at least [`Shape::sizes`]; `None` when they do not, or when `b` has
    /// more blocks than a `u32` counts.
    pub fn build<B: Blocks + ?Sized>(shape: &Shape, b: &B, mut runs: R, mut buckets: K) -> Option<Directory<R, K>>
    where
        R: AsMut<[Run]>,
        K: AsMut<[u32]>,
    {
        if b.len() > u32::MAX as usize {
            return None;
        }
        let (rs, ks) = (runs.as_mut(), buckets.as_mut());
        let (mut nruns, mut used, mut fits) = (0usize, 0usize, true);
        let mut i = 0usize;
        shape.each_run(b, |first, end, lo, hi| {
            let shift = shape.shift_for(lo, hi, end - first);
            let n = Shape::buckets_of(lo, hi, shift);
            let (Some(slot), Some(table)) = (rs.get_mut(nruns), used.checked_add(n).and_then(|to| ks.get_mut(used..to))) else {
                fits = false;
                return;
            };
            *slot = Run { lo, hi, at: used, shift };
            i = i.max(first);
            for (k, entry) in table.iter_mut().enumerate() {
                // The first block starting at or after the bucket's start
                // (the run's end for the bucket past it).
                let at = lo.saturating_add((k as u64) << shift);
                while i < end && b.start(i) < at {
                    i += 1;
                }
                *entry = i as u32;
            }
            nruns += 1;
            used += n;
        });
        fits.then_some(Directory { runs, nruns, buckets })
    }

    /// A directory of no blocks (finds nothing), in `runs` and `buckets`.
    pub fn empty(runs: R, buckets: K) -> Directory<R, K> {
        Directory { runs, nruns: 0, buckets }
    }

    fn runs(&self) -> &[Run] {
        self.runs.as_ref().get(..self.nruns).unwrap_or(&[])
    }

    /// The run holding `v` and the bucket `v` is in (its index in the
    /// bucket array), when `v` is inside a run.
    #[inline]
    fn bucket_of(&self, v: u64) -> Option<usize> {
        let runs = self.runs();
        let r = runs.get(runs.partition_point(|r| r.lo <= v).checked_sub(1)?)?;
        if v >= r.hi {
            return None;
        }
        Some(r.at + ((v - r.lo) >> r.shift) as usize)
    }

    /// The block `v` points at or into (a block of size 0: at), and the
    /// offset of `v` in it.
    #[inline]
    pub fn find<B: Blocks + ?Sized>(&self, b: &B, v: u64) -> Option<(usize, u64)> {
        let k = self.bucket_of(v)?;
        let ks = self.buckets.as_ref();
        let (from, to) = (*ks.get(k)? as usize, *ks.get(k + 1)? as usize);
        holder(b, from, to, v)
    }

    /// The first block a lookup of `v` reads (the one before the first
    /// starting in its bucket), to start reading it ahead; `None` when
    /// `v` is outside every run.
    #[inline]
    pub fn first_read(&self, v: u64) -> Option<usize> {
        let k = self.bucket_of(v)?;
        Some((*self.buckets.as_ref().get(k)? as usize).saturating_sub(1))
    }
}

/// The block holding `v` among those that may: the last block starting at
/// or before `v` is in `[from - 1, to)` (every block before `from` starts
/// before `v`'s bucket, every block from `to` on after it). Its index and
/// the offset of `v` in it, when `v` is inside it or at its start.
#[inline]
pub fn holder<B: Blocks + ?Sized>(b: &B, from: usize, to: usize, v: u64) -> Option<(usize, u64)> {
    let to = to.min(b.len());
    let i = b.first_after(from.min(to), to, v).checked_sub(1)?;
    if i >= b.len() {
        return None;
    }
    let start = b.start(i);
    let off = v.checked_sub(start)?;
    (off < b.size(i) || off == 0).then_some((i, off))
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use proptest::prelude::*;
    use std::vec;
    use std::vec::Vec;

    #[derive(Debug)]
    struct List(Vec<(u64, u64)>);
    impl Blocks for List {
        fn len(&self) -> usize {
            self.0.len()
        }
        fn start(&self, i: usize) -> u64 {
            self.0[i].0
        }
        fn size(&self, i: usize) -> u64 {
            self.0[i].1
        }
    }

    fn brute(b: &List, v: u64) -> Option<(usize, u64)> {
        b.0.iter().position(|&(s, n)| v == s || (v > s && v - s < n)).map(|i| (i, v - b.0[i].0))
    }

    const SHAPES: [Shape; 3] = [
        Shape { gap: 16 << 20, min_shift: 4, buckets_per_block: 1 },
        Shape { gap: 1 << 20, min_shift: 9, buckets_per_block: 4 },
        Shape { gap: 64, min_shift: 0, buckets_per_block: 1 },
    ];

    /// Sorted blocks that do not overlap: (gap before, size) pairs laid out
    /// from `base`, gaps now and then large enough to start runs.
    fn layout() -> impl Strategy<Value = List> {
        (0u64..1 << 47, proptest::collection::vec((0u64..4096, 0u64..2048, 0u8..40), 0..400)).prop_map(|(base, parts)| {
            let mut at = base;
            let mut v = Vec::new();
            for (gap, size, far) in parts {
                at = at.saturating_add(gap + if far == 0 { 1 << 24 } else { 0 });
                if at.saturating_add(size) >= u64::MAX - 1 {
                    break;
                }
                v.push((at, size));
                at += size.max(1);
            }
            List(v)
        })
    }

    proptest! {
        /// Every shape answers as a search of every block, at each block's
        /// start, inside, at its end, before it and anywhere around.
        #[test]
        fn the_directory_answers_as_a_search_of_every_block(b in layout(), probes in proptest::collection::vec(any::<u64>(), 0..64)) {
            for shape in &SHAPES {
                let s = shape.sizes(&b);
                let d = Directory::build(shape, &b, vec![Run::default(); s.runs], vec![0u32; s.buckets]).unwrap();
                let mut vs: Vec<u64> = b.0.iter().flat_map(|&(a, n)| [a, a + n / 2, a + n, (a + n).saturating_sub(1), a.wrapping_sub(1)]).collect();
                vs.extend(probes.iter().copied());
                if let (Some(f), Some(l)) = (b.0.first(), b.0.last()) {
                    vs.extend(probes.iter().map(|p| f.0.wrapping_add(p % (l.0 - f.0 + 4096))));
                }
                for v in vs {
                    prop_assert_eq!(d.find(&b, v), brute(&b, v), "{:?} {:#x}", shape, v);
                    if let Some((i, _)) = d.find(&b, v) {
                        prop_assert!(d.first_read(v).is_some_and(|r| r <= i));
                    }
                }
            }
        }

        /// Storage smaller than the sizes asked for is refused, not overrun.
        #[test]
        fn too_little_storage_is_refused(b in layout()) {
            let shape = &SHAPES[0];
            let s = shape.sizes(&b);
            if s.buckets > 0 {
                prop_assert!(Directory::build(shape, &b, vec![Run::default(); s.runs], vec![0u32; s.buckets - 1]).is_none());
                prop_assert!(Directory::build(shape, &b, vec![Run::default(); s.runs - 1], vec![0u32; s.buckets]).is_none());
            }
        }
    }

    /// No blocks: nothing is found, and nothing is needed.
    #[test]
    fn no_blocks() {
        let b = List(Vec::new());
        let s = SHAPES[0].sizes(&b);
        assert_eq!(s, Sizes::default());
        let d = Directory::build(&SHAPES[0], &b, Vec::<Run>::new(), Vec::<u32>::new()).unwrap();
        assert_eq!(d.find(&b, 0), None);
        assert_eq!(d.find(&b, u64::MAX), None);
    }
}
