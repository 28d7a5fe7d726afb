//! Which block a word points into, over blocks sorted by address: what
//! the runtime's compact dump (inside the traced process, with the world
//! stopped: no allocation, the caller's storage), attach's compact scan
//! and the analysis load ask (BENCHMARKS.md, "One address lookup").
//!
//! The blocks are cut into runs wherever the next block starts a gap or
//! more past the end of every block before it (the brk heap, each arena,
//! the mapped blocks). A run is answered one of two ways:
//! - buckets of a power-of-two size, each holding the index of the first
//!   block starting at or after it: a lookup is a search of the few runs,
//!   two bucket reads and a search of the handful of blocks starting in
//!   the word's bucket (plus the one before, which may hold the word);
//! - a granule map ([`Line`]), for a dense run of small 16-byte-aligned
//!   blocks that do not overlap, when the [`Shape`] allows it: per 16
//!   bytes, whether a block starts there and whether a block covers it
//!   whole, 256 granules to a 64-byte line, with the count of starts before
//!   each line. A word's block and offset come from one cache line and a
//!   population count (and, for a granule no block covers whole, one read
//!   of the block), where buckets need a bucket and then the blocks it
//!   names: two dependent misses.
//!
//! A directory made with [`Directory::searching`] has no runs: each lookup
//! is a binary search of every block, for a caller with only a few
//! lookups to make (building reads the blocks twice: once to size the
//! storage, once to fill it, a run answered by buckets once more).
//!
//! A lookup is one call ([`Directory::find`], the run found once and kept
//! in hand; [`Directory::prefetch_word`] starts its reads ahead) or two:
//! [`Directory::locate`] names the bucket or line the lookup reads (its
//! addresses can be read ahead with [`Directory::prefetch`], and
//! [`Directory::window`] names the blocks it then searches),
//! [`Directory::finish`] answers, so that a caller with many lookups to
//! make can overlap their cache misses.
//!
//! No allocation and no panic: the caller asks [`Shape::sizes`] how much
//! storage the directory needs, hands it over (`Vec`s, or memory mapped
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

/// log2 of a granule of a granule map: glibc's and most allocators'
/// alignment.
pub const GRANULE_SHIFT: u32 = 4;
/// Granules per [`Line`] (4 KiB of heap per 64 bytes).
pub const LINE_GRANULES: usize = 256;

/// 256 granules of 16 bytes of a run: which of them a block starts in, and
/// which a block covers whole. With the count of starts before each line,
/// a word's block, its ordinal and its offset come from one cache line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct Line {
    /// Bit `g % 64` of word `g / 64`: a block starts in granule `g`.
    pub starts: [u64; 4],
    /// Bit `g % 64` of word `g / 64`: a block covers granule `g` whole.
    pub full: [u64; 4],
}

/// How a directory cuts its blocks and answers each run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// A block starting this far or more past the end of every block before
    /// it starts a new run.
    pub gap: u64,
    /// log2 of the smallest bucket; a run starts at its first block's
    /// address rounded down to it (at most 40).
    pub min_shift: u32,
    /// The buckets of a run are the smallest (at least `1 << min_shift`
    /// bytes) that give at most `buckets` buckets per `per_blocks` blocks
    /// (and one bucket at least).
    pub buckets: u64,
    /// See `buckets`.
    pub per_blocks: u64,
    /// A run of 16-byte-aligned blocks that do not overlap gets a granule
    /// map when its lines (and their counts) cost at most this many bytes
    /// per block of it; 0: never.
    pub line_budget: u64,
}

/// One run of blocks and where its buckets or granule map are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Run {
    /// Its first address (its first block's, rounded down to the smallest
    /// bucket).
    pub lo: u64,
    /// One past its last byte (the largest block end; a block of size 0
    /// counts as one byte).
    pub hi: u64,
    /// The index of its first block.
    pub first: usize,
    /// Its first bucket in the directory's words; for a granule map, the
    /// count of starts before its first line.
    pub at: usize,
    /// Its first line in the directory's lines, or [`Run::BUCKETS`].
    pub line: usize,
    /// log2 of its bucket size ([`GRANULE_SHIFT`] for a granule map).
    pub shift: u32,
}

impl Run {
    /// [`Run::line`] of a run answered by its buckets.
    pub const BUCKETS: usize = usize::MAX;

    /// Whether a granule map answers its lookups.
    #[inline]
    pub fn has_lines(&self) -> bool {
        self.line != Run::BUCKETS
    }
}

/// The storage a directory needs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sizes {
    /// [`Run`]s.
    pub runs: usize,
    /// `u32` words: the buckets, and the count before each line.
    pub words: usize,
    /// [`Line`]s.
    pub lines: usize,
}

/// How a run of blocks `first..end` over `[lo, hi)` is answered.
#[derive(Clone, Copy)]
enum Plan {
    /// `n` buckets of `1 << shift` bytes.
    Buckets { shift: u32, n: usize },
    /// `n` lines.
    Lines { n: usize },
}

impl Plan {
    fn words(self) -> usize {
        match self {
            Plan::Buckets { n, .. } | Plan::Lines { n } => n,
        }
    }
}

impl Shape {
    /// Adds the block `[start, start + size)` to the run read so far (one
    /// past its last byte `hi`, and whether its blocks are `tidy`: 16-byte
    /// aligned, none overlapping one before it, so that each granule holds
    /// at most one block start); false when the block starts the next run
    /// instead (`first`: it is the run's first, which it always joins).
    /// [`Shape::sizes`] and the build cut runs with it alike.
    #[inline(always)]
    fn step(&self, first: bool, start: u64, size: u64, hi: &mut u64, tidy: &mut bool) -> bool {
        let end = start.saturating_add(size.max(1));
        if !first && start >= *hi && start - *hi >= self.gap {
            return false;
        }
        *tidy = (first || (*tidy && start >= *hi)) && start % (1 << GRANULE_SHIFT) == 0;
        *hi = if first { end } else { (*hi).max(end) };
        true
    }

    /// Reads the run of `b` that starts at block `first` on from block `i`
    /// (`hi` and `tidy` as [`Shape::step`] left them) to its end; returns
    /// where it ends, `hi` and `tidy`.
    #[inline(always)]
    fn scan_rest<B: Blocks + ?Sized>(&self, b: &B, first: usize, mut i: usize, mut hi: u64, mut tidy: bool) -> (usize, u64, bool) {
        let n = b.len();
        if i == first && i < n {
            self.step(true, b.start(i), b.size(i), &mut hi, &mut tidy);
            i += 1;
        }
        while i < n {
            if !self.step(false, b.start(i), b.size(i), &mut hi, &mut tidy) {
                break;
            }
            i += 1;
        }
        (i, hi, tidy)
    }

    fn lo_of(&self, start: u64) -> u64 {
        start & !((1u64 << self.min_shift.min(40)) - 1)
    }

    /// How the run of `count` blocks over `[lo, hi)` is answered.
    fn plan(&self, lo: u64, hi: u64, count: usize, tidy: bool) -> Plan {
        if tidy && self.line_budget > 0 && lo % (1 << GRANULE_SHIFT) == 0 {
            let n = ((hi - lo - 1) >> GRANULE_SHIFT) / LINE_GRANULES as u64 + 1;
            if n.saturating_mul(core::mem::size_of::<Line>() as u64 + 4) <= self.line_budget.saturating_mul(count as u64) {
                return Plan::Lines { n: n as usize };
            }
        }
        let mut shift = self.min_shift.min(40);
        let most = ((count as u64).saturating_mul(self.buckets) / self.per_blocks.max(1)).max(1);
        while shift < 40 && (hi - lo) >> shift > most {
            shift += 1;
        }
        // One per bucket the run touches, and one past its end.
        Plan::Buckets { shift, n: (((hi - lo - 1) >> shift) + 2) as usize }
    }

    /// The storage a directory of `b` takes.
    pub fn sizes<B: Blocks + ?Sized>(&self, b: &B) -> Sizes {
        let mut s = Sizes::default();
        let mut first = 0;
        while first < b.len() {
            let (end, hi, tidy) = self.scan_rest(b, first, first, 0, true);
            let plan = self.plan(self.lo_of(b.start(first)), hi, end - first, tidy);
            s.runs += 1;
            s.words = s.words.saturating_add(plan.words());
            if let Plan::Lines { n } = plan {
                s.lines = s.lines.saturating_add(n);
            }
            first = end;
        }
        s
    }
}

/// A run's granule map, filled while the run's blocks are read for its
/// bounds, so that a dense run's blocks are read once: each line zeroed
/// just before its first bit is set, and its count of the starts before
/// it written once no later block starts in it (while the line is still
/// in the cache). Given up (and the run filled after its bounds are
/// known, if it gets a granule map all the same) at the first block that
/// is not tidy, or when the lines it needs exceed the storage left or
/// the room it is given (lines given up so far may not exceed the whole
/// storage: runs that turn out to be answered by buckets cost at most
/// one more writing of the lines).
struct Fill<'a> {
    /// The lines and the words from the run's first on.
    lines: &'a mut [Line],
    counts: &'a mut [u32],
    marks: Marks,
}

/// How far a [`Fill`] went.
#[derive(Clone, Copy, Default)]
struct Marks {
    /// Lines zeroed; lines whose count is written, and their starts.
    zeroed: usize,
    counted: usize,
    before: u32,
}

/// Where a run's reading stopped ([`Fill::read`]).
struct Read {
    /// The next block to read.
    i: usize,
    /// As [`Shape::step`] leaves them.
    hi: u64,
    tidy: bool,
    /// Whether block `i` starts the next run (or there is none).
    ended: bool,
    /// Whether every block before `i` is in the granule map.
    filled: bool,
}

impl Fill<'_> {
    /// Reads the run of `b` from block `first` (the run's start `lo`,
    /// 16-byte aligned) as [`Shape::scan_rest`] does, filling the granule
    /// map on the way, until the run ends or the fill is given up (at
    /// `room` lines, or the storage's end).
    #[inline(always)]
    fn read<B: Blocks + ?Sized>(&mut self, shape: &Shape, b: &B, first: usize, lo: u64, room: usize) -> Read {
        let (lines, counts, m) = (&mut *self.lines, &mut *self.counts, &mut self.marks);
        let room = room.min(lines.len()).min(counts.len());
        // From this granule on, a block's bits need a line not yet zeroed,
        // or follow a line not yet counted (see `Fill::enter`).
        let mut next = 0usize;
        let mut add = |start: u64, size: u64| Self::add(lines, counts, m, &mut next, lo, room, start, size);
        let n = b.len();
        let (mut hi, mut tidy) = (0u64, true);
        // The first block joins the run whatever it is.
        let (start, size) = (b.start(first), b.size(first));
        shape.step(true, start, size, &mut hi, &mut tidy);
        if !tidy || !add(start, size) {
            return Read { i: first + 1, hi, tidy, ended: false, filled: false };
        }
        let mut i = first + 1;
        while i < n {
            let (start, size) = (b.start(i), b.size(i));
            // `Shape::step` for a block after a tidy one.
            let end = start.saturating_add(size.max(1));
            let past = start.wrapping_sub(hi);
            if start < hi || past >= shape.gap || start % (1 << GRANULE_SHIFT) != 0 {
                if start >= hi && past >= shape.gap {
                    return Read { i, hi, tidy, ended: true, filled: true };
                }
                return Read { i: i + 1, hi: hi.max(end), tidy: false, ended: false, filled: false };
            }
            i += 1;
            // Tidy: it starts at or past every end before it.
            hi = end;
            if !add(start, size) {
                return Read { i, hi, tidy, ended: false, filled: false };
            }
        }
        Read { i, hi, tidy, ended: true, filled: true }
    }

    /// Adds the block `[start, start + size)`, tidy and after every block
    /// added before it, to the granule map from `lo` (`next`: see
    /// [`Fill::enter`]); false when its lines reach `room`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn add(lines: &mut [Line], counts: &mut [u32], m: &mut Marks, next: &mut usize, lo: u64, room: usize, start: u64, size: u64) -> bool {
        let g = ((start - lo) >> GRANULE_SHIFT) as usize;
        // The granules it covers whole.
        let whole = (size >> GRANULE_SHIFT) as usize;
        let to = g.saturating_add(whole);
        if to.max(g + 1) > *next {
            match Self::enter(lines, counts, m, g, to, room) {
                Some(x) => *next = x,
                None => return false,
            }
        }
        let (w, bit) = ((g % LINE_GRANULES) / 64, g % 64);
        if let Some(line) = lines.get_mut(g / LINE_GRANULES) {
            line.starts[w] |= 1 << bit;
            if bit + whole < 64 {
                // Most blocks: their whole granules in the word of their
                // start.
                line.full[w] |= ((1 << whole) - 1) << bit;
                return true;
            }
        }
        set_full(lines, g, to);
        true
    }

    /// For a block over granules `g..to` (at least `g`) whose bits need a
    /// line not yet zeroed, or that follows lines not yet counted: zeroes
    /// the lines up to its last and counts those before its first; the
    /// granule from which a block needs this again, or `None` when its
    /// lines reach `room`.
    #[inline(never)]
    fn enter(lines: &mut [Line], counts: &mut [u32], m: &mut Marks, g: usize, to: usize, room: usize) -> Option<usize> {
        let last = (to.max(g + 1) - 1) / LINE_GRANULES;
        if last >= m.zeroed {
            if last >= room {
                return None;
            }
            lines.get_mut(m.zeroed..=last)?.fill(Line::default());
            m.zeroed = last + 1;
        }
        let l = g / LINE_GRANULES;
        if l > m.counted {
            // Every later block starts past this one: the lines before its
            // line have all their starts.
            m.before = count(lines, counts, m.counted, l, m.before);
            m.counted = l;
        }
        Some(m.zeroed.min(m.counted + 1).saturating_mul(LINE_GRANULES))
    }

    /// The run's `n` lines complete: the rest zeroed, every count
    /// written; false when they do not fit.
    fn finish(&mut self, n: usize) -> bool {
        let m = &mut self.marks;
        let Some(rest) = self.lines.get_mut(m.zeroed..n) else { return false };
        if n > self.counts.len() {
            return false;
        }
        rest.fill(Line::default());
        m.zeroed = n;
        m.before = count(self.lines, self.counts, m.counted, n, m.before);
        m.counted = n;
        true
    }
}

/// Writes the counts of lines `from..to` (`before`: the starts before
/// `from`); the starts before `to`.
fn count(lines: &[Line], counts: &mut [u32], from: usize, to: usize, mut before: u32) -> u32 {
    for (c, l) in counts.iter_mut().zip(lines).take(to).skip(from) {
        *c = before;
        before += l.starts.iter().map(|w| w.count_ones()).sum::<u32>();
    }
    before
}

/// Fills the granule map `map` and the counts `counts` of the tidy run of
/// blocks `first..end` from `lo`, in one more reading of its blocks.
fn fill_lines<B: Blocks + ?Sized>(b: &B, first: usize, end: usize, lo: u64, map: &mut [Line], counts: &mut [u32]) {
    map.fill(Line::default());
    for k in first..end {
        // Tidy: 16-byte aligned, in the run, apart.
        let g = ((b.start(k) - lo) >> GRANULE_SHIFT) as usize;
        if let Some(l) = map.get_mut(g / LINE_GRANULES) {
            l.starts[(g % LINE_GRANULES) / 64] |= 1 << (g % 64);
        }
        set_full(map, g, g.saturating_add((b.size(k) >> GRANULE_SHIFT) as usize));
    }
    let mut before = 0u32;
    for (rank, l) in counts.iter_mut().zip(map.iter()) {
        *rank = before;
        before += l.starts.iter().map(|w| w.count_ones()).sum::<u32>();
    }
}

/// Where a lookup stands once located ([`Directory::locate`]): the bucket
/// or line it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Located {
    /// The bucket's index in the words, or the line's in the lines.
    slot: usize,
    /// The run's index, or [`Located::SEARCH`].
    run: u32,
}

impl Located {
    /// A lookup of a searching directory: every block is searched.
    const SEARCH: u32 = u32::MAX;
}

/// The directory over one set of blocks, in storage `R` (runs), `K`
/// (words) and `L` (lines) the caller owns: `Vec`s, or slices of its own
/// memory.
pub struct Directory<R, K, L> {
    runs: R,
    nruns: usize,
    words: K,
    lines: L,
    /// The run of the most blocks, looked at first, and its index.
    hot: Run,
    hot_at: u32,
    /// Whether some run is answered by buckets.
    buckets: bool,
    /// Each lookup a search of every block.
    search: bool,
    /// The first run's start and the last one's end.
    lo: u64,
    hi: u64,
}

/// A run that holds nothing.
const NO_RUN: Run = Run { lo: 0, hi: 0, first: 0, at: 0, line: Run::BUCKETS, shift: 0 };

impl<R: AsRef<[Run]>, K: AsRef<[u32]>, L: AsRef<[Line]>> Directory<R, K, L> {
    /// Builds the directory of `b` in `runs`, `words` and `lines`, which
    /// must hold at least [`Shape::sizes`] (storage past what the
    /// directory uses may be written); `None` when they do not, or when
    /// `b` has more blocks than a `u32` counts.
    ///
    /// Each run's blocks are read once for its bounds, its granule map
    /// filled on the way (see `Fill`); a run answered by buckets reads its
    /// blocks once more.
    pub fn build<B: Blocks + ?Sized>(shape: &Shape, b: &B, mut runs: R, mut words: K, mut lines: L) -> Option<Directory<R, K, L>>
    where
        R: AsMut<[Run]>,
        K: AsMut<[u32]>,
        L: AsMut<[Line]>,
    {
        let n = b.len();
        if n > u32::MAX as usize {
            return None;
        }
        let (rs, ks, ls) = (runs.as_mut(), words.as_mut(), lines.as_mut());
        let (mut nruns, mut used, mut lines_used, mut given_up) = (0usize, 0usize, 0usize, 0usize);
        let (mut hot, mut hot_at, mut most, mut buckets) = (NO_RUN, 0u32, 0usize, false);
        let mut first = 0usize;
        while first < n {
            let lo = shape.lo_of(b.start(first));
            // Lines given up so far may not exceed the whole storage.
            let room = ls.len().saturating_sub(given_up);
            let mut fill = Fill {
                lines: ls.get_mut(lines_used..).unwrap_or_default(),
                counts: ks.get_mut(used..).unwrap_or_default(),
                marks: Marks::default(),
            };
            // While the run's blocks are tidy and the fill lives, each block
            // is read once; the rest of the run only for its bounds.
            let mut r = Read { i: first, hi: 0, tidy: true, ended: false, filled: false };
            if shape.line_budget > 0 && lo % (1 << GRANULE_SHIFT) == 0 {
                r = fill.read(shape, b, first, lo, room);
            }
            let (end, hi, tidy) = if r.ended { (r.i, r.hi, r.tidy) } else { shape.scan_rest(b, first, r.i, r.hi, r.tidy) };
            let plan = shape.plan(lo, hi, end - first, tidy);
            let run = match plan {
                Plan::Lines { n: nl } => {
                    if !(r.filled && fill.finish(nl)) {
                        given_up += fill.marks.zeroed;
                        let map = lines_used.checked_add(nl).and_then(|to| ls.get_mut(lines_used..to))?;
                        let counts = used.checked_add(nl).and_then(|to| ks.get_mut(used..to))?;
                        fill_lines(b, first, end, lo, map, counts);
                    }
                    let run = Run { lo, hi, first, at: used, line: lines_used, shift: GRANULE_SHIFT };
                    lines_used += nl;
                    run
                }
                Plan::Buckets { shift, n: nb } => {
                    given_up += fill.marks.zeroed;
                    let table = used.checked_add(nb).and_then(|to| ks.get_mut(used..to))?;
                    let mut i = first;
                    for (k, entry) in table.iter_mut().enumerate() {
                        // The first block starting at or after the bucket's
                        // start (the run's end for the bucket past it).
                        let at = lo.saturating_add((k as u64) << shift);
                        while i < end && b.start(i) < at {
                            i += 1;
                        }
                        *entry = i as u32;
                    }
                    buckets = true;
                    Run { lo, hi, first, at: used, line: Run::BUCKETS, shift }
                }
            };
            *rs.get_mut(nruns)? = run;
            if end - first > most {
                (hot, hot_at, most) = (run, nruns as u32, end - first);
            }
            nruns += 1;
            used += plan.words();
            first = end;
        }
        let built = rs.get(..nruns).unwrap_or_default();
        let (lo, hi) = (built.first().map_or(0, |r| r.lo), built.last().map_or(0, |r| r.hi));
        Some(Directory { runs, nruns, words, lines, hot, hot_at, buckets, search: false, lo, hi })
    }

    /// A directory of no blocks (finds nothing), in `runs`, `words` and
    /// `lines`.
    pub fn empty(runs: R, words: K, lines: L) -> Directory<R, K, L> {
        Directory { runs, nruns: 0, words, lines, hot: NO_RUN, hot_at: 0, buckets: false, search: false, lo: 0, hi: 0 }
    }

    /// A directory without runs: each lookup a binary search of every
    /// block (for a few lookups, where building would cost more than it
    /// saves). Its storage is not used.
    pub fn searching(runs: R, words: K, lines: L) -> Directory<R, K, L> {
        Directory { search: true, lo: 0, hi: u64::MAX, ..Directory::empty(runs, words, lines) }
    }

    /// The runs.
    pub fn runs(&self) -> &[Run] {
        self.runs.as_ref().get(..self.nruns).unwrap_or(&[])
    }

    /// The first run's start and the last one's end, outside which no word
    /// points into a block ((0, 0) when there are none; everything for a
    /// searching directory).
    #[inline]
    pub fn bounds(&self) -> (u64, u64) {
        (self.lo, self.hi)
    }

    /// Whether some run is answered by buckets (lookups then read blocks
    /// a [`Directory::window`] names).
    #[inline]
    pub fn has_buckets(&self) -> bool {
        self.buckets || self.search
    }

    #[inline(always)]
    fn run(&self, k: u32) -> Option<&Run> {
        if k == self.hot_at {
            return Some(&self.hot);
        }
        self.runs().get(k as usize)
    }

    /// The run holding `v` and its index, `v` inside the bounds: the
    /// largest run first (one comparison for most words of a dense heap),
    /// then a search of the others.
    #[inline(always)]
    fn run_of(&self, v: u64) -> Option<(u32, &Run)> {
        if v >= self.hot.lo && v < self.hot.hi {
            return Some((self.hot_at, &self.hot));
        }
        self.cold_run_of(v)
    }

    /// [`Directory::run_of`] outside the largest run: kept out of line, so
    /// that the lookup's common path needs few registers (no spills).
    #[inline(never)]
    fn cold_run_of(&self, v: u64) -> Option<(u32, &Run)> {
        let runs = self.runs();
        let k = runs.partition_point(|r| r.lo <= v).checked_sub(1)?;
        let r = runs.get(k)?;
        (v < r.hi).then_some((k as u32, r))
    }

    /// The bucket's index in the words, or the line's in the lines, of a
    /// lookup of `v` in run `r`.
    #[inline(always)]
    fn slot(r: &Run, v: u64) -> usize {
        if r.has_lines() {
            r.line + ((v - r.lo) >> GRANULE_SHIFT) as usize / LINE_GRANULES
        } else {
            r.at + ((v - r.lo) >> r.shift) as usize
        }
    }

    /// First step of a lookup: the bucket or line a lookup of `v` reads;
    /// `None` when `v` is outside every run (it points into no block).
    #[inline(always)]
    pub fn locate(&self, v: u64) -> Option<Located> {
        if v < self.lo || v >= self.hi {
            return None;
        }
        if self.search {
            return Some(Located { slot: 0, run: Located::SEARCH });
        }
        let (k, r) = self.run_of(v)?;
        Some(Located { slot: Self::slot(r, v), run: k })
    }

    /// Starts reading what a lookup of `v` will read of the directory
    /// (its bucket, or its line and count): [`Directory::locate`] then
    /// [`Directory::prefetch`] in one step. Only a hint.
    #[inline(always)]
    pub fn prefetch_word(&self, v: u64) {
        if v < self.lo || v >= self.hi || self.search {
            return;
        }
        let Some((_, r)) = self.run_of(v) else { return };
        self.prefetch_in(r, Self::slot(r, v));
    }

    /// Starts reading what [`Directory::finish`] will read of the
    /// directory for a lookup located at `l` (its bucket, or its line and
    /// count). Only a hint.
    #[inline(always)]
    pub fn prefetch(&self, l: Located) {
        let Some(r) = self.run(l.run) else { return };
        self.prefetch_in(r, l.slot);
    }

    #[inline(always)]
    fn prefetch_in(&self, r: &Run, slot: usize) {
        if r.has_lines() {
            prefetch(self.lines.as_ref().as_ptr().wrapping_add(slot));
            prefetch(self.words.as_ref().as_ptr().wrapping_add(r.at + (slot - r.line)));
        } else {
            prefetch(self.words.as_ref().as_ptr().wrapping_add(slot));
        }
    }

    /// The blocks `from..to` that [`Directory::finish`] searches for a
    /// lookup located at `l` (in a run answered by buckets: the blocks
    /// starting in its bucket and the one before), to start reading them
    /// ahead; `None` in a granule map's run (the line names the block).
    #[inline(always)]
    pub fn window(&self, l: Located) -> Option<(usize, usize)> {
        if l.run == Located::SEARCH {
            return None;
        }
        if self.run(l.run)?.has_lines() {
            return None;
        }
        let ks = self.words.as_ref();
        Some(((*ks.get(l.slot)? as usize).saturating_sub(1), *ks.get(l.slot + 1)? as usize))
    }

    /// Second step of a lookup of `v` located at `l`: the block `v`
    /// points at or into (a block of size 0: at), and the offset of `v`
    /// in it.
    #[inline(always)]
    pub fn finish<B: Blocks + ?Sized>(&self, b: &B, v: u64, l: Located) -> Option<(usize, u64)> {
        if l.run == Located::SEARCH {
            return holder(b, 0, b.len(), v);
        }
        let r = self.run(l.run)?;
        if r.has_lines() {
            return self.granule_find(b, r, l.slot, v);
        }
        let ks = self.words.as_ref();
        let (from, to) = (*ks.get(l.slot)? as usize, *ks.get(l.slot + 1)? as usize);
        holder(b, from, to, v)
    }

    /// The block `v` points at or into (a block of size 0: at), and the
    /// offset of `v` in it: [`Directory::locate`] then
    /// [`Directory::finish`].
    #[inline(always)]
    pub fn find<B: Blocks + ?Sized>(&self, b: &B, v: u64) -> Option<(usize, u64)> {
        // One step: the run found once and kept in hand (two steps look it
        // up again by its index).
        if v < self.lo || v >= self.hi {
            return None;
        }
        if self.search {
            return holder(b, 0, b.len(), v);
        }
        let (_, r) = self.run_of(v)?;
        let slot = Self::slot(r, v);
        if r.has_lines() {
            return self.granule_find(b, r, slot, v);
        }
        let ks = self.words.as_ref();
        let (from, to) = (*ks.get(slot)? as usize, *ks.get(slot + 1)? as usize);
        holder(b, from, to, v)
    }

    /// The lookup of `v` in the granule map of run `r`, line `li` (see
    /// [`Line`]): the last block starting at or before `v`'s granule is
    /// the one whose ordinal the starts before it count; a granule it
    /// covers whole holds `v`, and its start is the last start bit (found
    /// nearby, or read from the block for a block of more than a few
    /// lines); any other granule is checked against the block.
    #[inline(always)]
    fn granule_find<B: Blocks + ?Sized>(&self, b: &B, r: &Run, li: usize, v: u64) -> Option<(usize, u64)> {
        let g = ((v - r.lo) >> GRANULE_SHIFT) as usize;
        let line = self.lines.as_ref().get(li)?;
        let rank = *self.words.as_ref().get(r.at + (li - r.line))? as usize;
        let w = (g % LINE_GRANULES) / 64;
        let le = u64::MAX >> (63 - g % 64);
        let mut n = rank;
        for x in &line.starts[..w] {
            n += x.count_ones() as usize;
        }
        n += (line.starts[w] & le).count_ones() as usize;
        let ord = r.first + n.checked_sub(1)?;
        if line.full[w] >> (g % 64) & 1 == 1 {
            if let Some(sg) = self.last_start(r, li, w, line.starts[w] & le) {
                return Some((ord, v - (r.lo + ((sg as u64) << GRANULE_SHIFT))));
            }
        }
        if ord >= b.len() {
            return None;
        }
        let off = v.checked_sub(b.start(ord))?;
        (off < b.size(ord) || off == 0).then_some((ord, off))
    }

    /// The granule (in its run) of the last block start at or before word
    /// `w` of line `li` (`bits` being that word's starts at or before the
    /// granule looked up), searched back over at most four lines (16 KiB).
    /// Inline where the word has a start (a word pointing into the first
    /// 1 KiB of its block, most of them): no call on the common path.
    #[inline(always)]
    fn last_start(&self, r: &Run, li: usize, w: usize, bits: u64) -> Option<usize> {
        if bits != 0 {
            return Some((li - r.line) * LINE_GRANULES + w * 64 + 63 - bits.leading_zeros() as usize);
        }
        self.last_start_before(r, li, w)
    }

    /// [`Directory::last_start`] in the words before word `w` of line `li`.
    #[inline(never)]
    fn last_start_before(&self, r: &Run, li: usize, w: usize) -> Option<usize> {
        let lines = self.lines.as_ref();
        let (mut li, mut w) = (li, w);
        for _ in 0..4 * 4 {
            if w == 0 {
                if li == r.line {
                    return None;
                }
                li -= 1;
                w = 4;
            }
            w -= 1;
            let bits = lines.get(li)?.starts[w];
            if bits != 0 {
                return Some((li - r.line) * LINE_GRANULES + w * 64 + 63 - bits.leading_zeros() as usize);
            }
        }
        None
    }
}

/// Sets the full bits of granules `[from, to)` of a run's lines.
#[inline]
fn set_full(ls: &mut [Line], from: usize, to: usize) {
    let to = to.min(ls.len().saturating_mul(LINE_GRANULES));
    let mut g = from;
    while g < to {
        let (l, w, b) = (g / LINE_GRANULES, (g % LINE_GRANULES) / 64, g % 64);
        // 1 to 64 bits from bit b.
        let n = (64 - b).min(to - g);
        let bits = (u64::MAX >> (64 - n)) << b;
        ls[l].full[w] |= bits;
        g += n;
    }
}

/// The block holding `v` among those that may: the last block starting at
/// or before `v` is in `[from - 1, to)` (every block before `from` starts
/// before `v`'s bucket, every block from `to` on after it). Its index and
/// the offset of `v` in it, when `v` is inside it or at its start.
#[inline(always)]
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

/// Starts reading the cache line at `p` into the cache: a hint, which
/// never faults whatever the address (nothing off x86-64).
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: a prefetch reads nothing the program observes and never
        // faults, whatever the address.
        unsafe { core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
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

    type Dir = Directory<Vec<Run>, Vec<u32>, Vec<Line>>;

    /// A search of every block: the last one starting at or before `v`
    /// (blocks that overlap, which a runtime's index may hold, answer for
    /// the later one), when `v` is at its start or inside it.
    fn brute(b: &List, v: u64) -> Option<(usize, u64)> {
        let i = b.0.iter().rposition(|&(s, _)| s <= v)?;
        let (s, n) = b.0[i];
        (v == s || v - s < n).then_some((i, v - s))
    }

    fn build(shape: &Shape, b: &List) -> Dir {
        let s = shape.sizes(b);
        Directory::build(shape, b, vec![Run::default(); s.runs], vec![0u32; s.words], vec![Line::default(); s.lines]).unwrap()
    }

    /// The shapes the callers use (the runtime's, attach's, the analysis
    /// load's), and two that stress the corners: tiny buckets and runs, a
    /// granule map for any tidy run.
    const SHAPES: [Shape; 5] = [
        Shape { gap: 16 << 20, min_shift: 4, buckets: 1, per_blocks: 4, line_budget: 16 },
        Shape { gap: 16 << 20, min_shift: 4, buckets: 1, per_blocks: 1, line_budget: 0 },
        Shape { gap: 1 << 20, min_shift: 9, buckets: 4, per_blocks: 1, line_budget: 0 },
        Shape { gap: 64, min_shift: 0, buckets: 1, per_blocks: 1, line_budget: 0 },
        Shape { gap: 1 << 20, min_shift: 4, buckets: 1, per_blocks: 8, line_budget: u64::MAX },
    ];

    /// Every way to ask: one step, two steps (the window holding the
    /// answer), and a searching directory, against a search of every block.
    fn check(shape: &Shape, d: &Dir, b: &List, v: u64) -> Result<(), TestCaseError> {
        let want = brute(b, v);
        prop_assert_eq!(d.find(b, v), want, "{:?} {:#x}", shape, v);
        let l = d.locate(v);
        prop_assert_eq!(l.and_then(|l| d.finish(b, v, l)), want, "two steps: {:?} {:#x}", shape, v);
        d.prefetch_word(v);
        if let (Some(l), Some((i, _))) = (l, want) {
            d.prefetch(l);
            if let Some((from, to)) = d.window(l) {
                prop_assert!(from <= i && i < to.max(from + 1), "window {}..{} holds {}", from, to, i);
            }
        }
        if want.is_some() {
            prop_assert!(l.is_some(), "found, so located");
            let (lo, hi) = d.bounds();
            prop_assert!(lo <= v && v < hi);
        }
        let s = Dir::searching(Vec::new(), Vec::new(), Vec::new());
        prop_assert_eq!(s.find(b, v), want, "searching {:#x}", v);
        Ok(())
    }

    /// The probes: each block's start, middle, end, last byte, the byte
    /// before it, and anywhere around.
    fn probes(b: &List, extra: &[u64]) -> Vec<u64> {
        let mut vs: Vec<u64> = b.0.iter().flat_map(|&(a, n)| [a, a + n / 2, a + n, (a + n).saturating_sub(1), a.wrapping_sub(1)]).collect();
        vs.extend(extra.iter().copied());
        if let (Some(f), Some(l)) = (b.0.first(), b.0.last()) {
            vs.extend(extra.iter().map(|p| f.0.wrapping_add(p % (l.0 - f.0 + 4096))));
        }
        vs
    }

    /// Sorted blocks that do not overlap: (gap before, size) pairs laid out
    /// from `base` (aligned to `align`), gaps now and then large enough to
    /// start runs.
    fn layout() -> impl Strategy<Value = List> {
        (0u64..1 << 47, proptest::collection::vec((0u64..4096, 0u64..2048, 0u8..40), 0..400), prop_oneof![Just(1u64), Just(8), Just(16)])
            .prop_map(|(base, parts, align)| {
                let mut at = base.next_multiple_of(align);
                let mut v = Vec::new();
                for (gap, size, far) in parts {
                    at = at.saturating_add(gap + if far == 0 { 1 << 24 } else { 0 }).next_multiple_of(align);
                    if at.saturating_add(size) >= u64::MAX - 64 {
                        break;
                    }
                    v.push((at, size));
                    at += size.max(1);
                }
                List(v)
            })
    }

    /// A dense heap's blocks: mostly small, 16-byte aligned (or 8 when
    /// `align` says so), packed or a granule apart, some of size 0, some
    /// large, clusters far apart; and now and then two that overlap (a
    /// runtime's index may hold them: no granule map then).
    fn dense() -> impl Strategy<Value = List> {
        (
            0u64..1 << 40,
            proptest::collection::vec((0u8..10, 0u64..2000, 0u8..200), 1..1000),
            prop_oneof![Just(8u64), Just(16)],
            any::<bool>(),
        )
            .prop_map(|(base, parts, align, overlap)| {
                let mut at = (0x5555_0000_0000 + base).next_multiple_of(16);
                let mut v: Vec<(u64, u64)> = Vec::new();
                for (kind, x, far) in parts {
                    let size = match kind {
                        0 => 0,
                        1 => 16 * (1 + if x > 1900 { 8 * x } else { x % 32 }),
                        2 if overlap && x < 20 => {
                            if let Some(&(s, n)) = v.last().filter(|b| b.1 >= 32) {
                                v.push((s + n / 2, 16));
                            }
                            continue;
                        }
                        2..=4 => 16 + x % 64,
                        _ => 8 * (1 + x % 8),
                    };
                    v.push((at, size));
                    at += size.max(1).next_multiple_of(align) + if x % 2 == 0 { 16 } else { 0 };
                    if far == 0 {
                        at += 1 << (24 + x % 16);
                    }
                }
                v.sort();
                List(v)
            })
    }

    proptest! {
        /// Every shape answers as a search of every block, at each block's
        /// start, inside, at its end, before it and anywhere around.
        #[test]
        fn the_directory_answers_as_a_search_of_every_block(b in layout(), extra in proptest::collection::vec(any::<u64>(), 0..64)) {
            for shape in &SHAPES {
                let d = build(shape, &b);
                for v in probes(&b, &extra) {
                    check(shape, &d, &b, v)?;
                }
            }
        }


        /// Storage smaller than the sizes asked for is refused, not overrun.
        #[test]
        fn too_little_storage_is_refused(b in prop_oneof![layout(), dense()]) {
            for shape in &SHAPES {
                let s = shape.sizes(&b);
                let r = || vec![Run::default(); s.runs];
                let (k, l) = (|| vec![0u32; s.words], || vec![Line::default(); s.lines]);
                if s.runs > 0 {
                    prop_assert!(Dir::build(shape, &b, vec![Run::default(); s.runs - 1], k(), l()).is_none());
                    prop_assert!(Dir::build(shape, &b, r(), vec![0u32; s.words - 1], l()).is_none());
                }
                if s.lines > 0 {
                    prop_assert!(Dir::build(shape, &b, r(), k(), vec![Line::default(); s.lines - 1]).is_none());
                }
                prop_assert!(Dir::build(shape, &b, r(), k(), l()).is_some());
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// So do dense heaps, whose runs get granule maps (and those with
        /// blocks 8-byte aligned or overlapping, which do not).
        #[test]
        fn granule_maps_answer_as_a_search_of_every_block(b in dense(), extra in proptest::collection::vec(any::<u64>(), 0..256)) {
            for shape in &SHAPES {
                let d = build(shape, &b);
                for v in probes(&b, &extra) {
                    check(shape, &d, &b, v)?;
                }
            }
        }

        /// Storage larger than asked for and not zeroed (the build may
        /// not count on fresh memory) gives the same directory.
        #[test]
        fn dirty_or_larger_storage_gives_the_same_directory(b in prop_oneof![layout(), dense()], more in 0usize..300) {
            for shape in &SHAPES {
                let s = shape.sizes(&b);
                let junk = Line { starts: [u64::MAX; 4], full: [0x5555_5555_5555_5555; 4] };
                let d = Dir::build(shape, &b, vec![NO_RUN; s.runs + more], vec![u32::MAX; s.words + more], vec![junk; s.lines + more]).unwrap();
                let exact = build(shape, &b);
                prop_assert_eq!(d.runs(), exact.runs());
                for v in probes(&b, &[]) {
                    check(shape, &d, &b, v)?;
                }
            }
        }
    }

    /// The runtime's shape gives a dense heap's run a granule map, a
    /// sparse one buckets; both answer.
    #[test]
    fn both_kinds_of_run() {
        let mut v: Vec<(u64, u64)> = (0..5000u64).map(|i| (0x5555_0000_0000 + 64 * i, 48)).collect();
        v.extend((0..50u64).map(|i| (0x7f00_0000_0000 + (1 << 16) * i, 1 << 15)));
        let b = List(v);
        let d = build(&SHAPES[0], &b);
        assert_eq!(d.runs().iter().map(Run::has_lines).collect::<Vec<_>>(), [true, false]);
        assert!(d.has_buckets());
        for v in probes(&b, &[]) {
            assert_eq!(d.find(&b, v), brute(&b, v), "{v:#x}");
        }
        // Blocks 8 bytes apart share granules: buckets.
        let b8 = List((0..5000u64).map(|i| (0x5555_0000_0000 + 8 * i, 8)).collect());
        assert!(!build(&SHAPES[0], &b8).runs()[0].has_lines());
    }

    /// A block larger than the four lines a full granule's start is
    /// searched back over: found from the block itself.
    #[test]
    fn a_block_of_many_lines() {
        let b = List(vec![(0x1000, 16), (0x1010, 64 << 10), (0x1_1010, 0), (0x1_1020, 32)]);
        let shape = Shape { line_budget: u64::MAX, ..SHAPES[0] };
        let d = build(&shape, &b);
        assert!(d.runs()[0].has_lines());
        for v in (0xff0..0x1_1100).step_by(8) {
            assert_eq!(d.find(&b, v), brute(&b, v), "{v:#x}");
        }
    }

    /// Runs answered by buckets whose blocks looked like a granule map's
    /// at first (tidy, a line apart) use up what the fill may give up
    /// (the size of the storage): the dense run after them is filled from
    /// its blocks once its bounds are known, and answers alike.
    #[test]
    fn a_granule_map_filled_after_the_fills_given_up() {
        let mut v: Vec<(u64, u64)> = Vec::new();
        for r in 0..80u64 {
            let at = 0x5555_0000_0000 + (r << 25);
            v.extend([(at, 32), (at + (1 << 20), 32)]);
        }
        let dense = 0x5555_0000_0000 + (81 << 25);
        v.extend((0..3000u64).map(|i| (dense + 64 * i, 48)));
        let b = List(v);
        let s = SHAPES[0].sizes(&b);
        assert!(s.lines < 80, "fewer lines than runs giving up one each: {s:?}");
        let d = build(&SHAPES[0], &b);
        assert_eq!(d.runs().len(), 81);
        assert!(d.runs()[..80].iter().all(|r| !r.has_lines()) && d.runs()[80].has_lines());
        for v in probes(&b, &[]) {
            assert_eq!(d.find(&b, v), brute(&b, v), "{v:#x}");
        }
    }

    /// The runtime's heaps (its index's entries, from which it built its
    /// own directory before this one): clusters far apart (a brk heap,
    /// arenas, mapped blocks), blocks of 0 bytes to 1 MiB, packed or with
    /// gaps; every third layout dense and small-blocked (granule maps),
    /// some 8-byte aligned (buckets only). Its bounds are the blocks'
    /// (what the runtime checks a word against first), and both kinds of
    /// run answer as a search of every block.
    #[test]
    fn the_runtime_s_heaps() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let (mut with_lines, mut with_buckets) = (0, 0);
        for layout in 0..60 {
            let dense = layout % 3 == 0;
            let align = if layout % 5 == 1 { 8 } else { 16 };
            let mut blocks = Vec::new();
            let mut addr = 0x5555_0000_0000u64 + (rnd() % 4096) * 16;
            for _ in 0..(1 + rnd() % 3000) {
                let size = match rnd() % 10 {
                    0 => 0,
                    1 if dense => 16 * (1 + rnd() % 2000),
                    1 => 1 << 20,
                    2..=4 => 16 + rnd() % 64,
                    _ => 8 * (1 + rnd() % 8),
                };
                blocks.push((addr, size));
                addr += size.max(1).next_multiple_of(align) + if dense { 16 * (rnd() % 2) } else { 0 };
                match rnd() % if dense { 1000 } else { 50 } {
                    0 => addr += 1 << (24 + rnd() % 20),
                    1..=5 if !dense => addr += 16 * (rnd() % 100_000),
                    _ => {}
                }
            }
            let b = List(blocks);
            let lo = b.0[0].0;
            let hi = b.0.iter().map(|&(a, n)| a + n.max(1)).max().unwrap();
            let d = build(&SHAPES[0], &b);
            assert_eq!(d.bounds(), (lo, hi), "layout {layout}: the runs' bounds are the blocks'");
            with_lines += d.runs().iter().filter(|r| r.has_lines()).count();
            with_buckets += d.runs().iter().filter(|r| !r.has_lines()).count();
            let mut vs = probes(&b, &[]);
            vs.extend((0..3000).map(|_| lo.wrapping_sub(1 << 20) + rnd() % (hi - lo + (2 << 20))));
            for v in vs {
                assert_eq!(d.find(&b, v), brute(&b, v), "layout {layout}: {v:#x}");
            }
        }
        assert!(with_lines >= 10 && with_buckets >= 10, "both kinds of run: {with_lines} granule maps, {with_buckets} bucket runs");
    }

    /// The runtime's use: a directory built in storage the caller lends
    /// (here arrays on the stack; the runtime's, a mapping from the
    /// kernel), the module having no allocator to call (`no_std` without
    /// `alloc`), answers as one in `Vec`s, and looked up in one step or
    /// with the words prefetched first.
    #[test]
    fn a_directory_in_lent_storage() {
        let mut v: Vec<(u64, u64)> = (0..600u64).map(|i| (0x5555_0000_0000 + 64 * i, 48)).collect();
        v.extend((0..6u64).map(|i| (0x7f00_0000_0000 + (1 << 21) * i, 1 << 20)));
        let b = List(v);
        let s = SHAPES[0].sizes(&b);
        let (mut runs, mut words, mut lines) = ([Run::default(); 4], [0u32; 64], [Line::default(); 16]);
        assert!(s.runs <= runs.len() && s.words <= words.len() && s.lines <= lines.len(), "{s:?}");
        let d = Directory::build(&SHAPES[0], &b, &mut runs[..s.runs], &mut words[..s.words], &mut lines[..s.lines]).unwrap();
        let in_vecs = build(&SHAPES[0], &b);
        assert_eq!(d.runs(), in_vecs.runs());
        for v in probes(&b, &[0, u64::MAX, 0x7f00_0000_0000 + (13 << 20)]) {
            d.prefetch_word(v);
            assert_eq!(d.find(&b, v), brute(&b, v), "{v:#x}");
            assert_eq!(d.find(&b, v), in_vecs.find(&b, v), "{v:#x}");
        }
    }

    /// No blocks: nothing is found, and nothing is needed.
    #[test]
    fn no_blocks() {
        let b = List(Vec::new());
        let s = SHAPES[0].sizes(&b);
        assert_eq!(s, Sizes::default());
        let d = Dir::build(&SHAPES[0], &b, Vec::new(), Vec::new(), Vec::new()).unwrap();
        assert_eq!(d.find(&b, 0), None);
        assert_eq!(d.find(&b, u64::MAX), None);
        assert_eq!(d.bounds(), (0, 0));
        let e = Dir::empty(Vec::new(), Vec::new(), Vec::new());
        assert_eq!(e.find(&b, 0), None);
        assert_eq!(Dir::searching(Vec::new(), Vec::new(), Vec::new()).find(&b, 0), None);
    }
}
