//! The dominator tree read from the cache a node at a time, for the
//! viewer: its first page and a node's expansion read a few hundred
//! entries of arrays of gigabytes (at 100 M blocks the analysis' file is
//! 2.1 GB, the children lists 0.8 GB), so each entry is checked when it is
//! read, not the whole file at opening (`cache.rs`'s checks pass over
//! every block: 5 s at 100 M blocks). Never trusted: each chunk of the
//! files read is checked against the file's seal the first time it is
//! touched ([`Sealed::check`]), and what is read against the rest of what
//! is read: every index in range, each child of a node's page under that
//! node (its immediate dominator) and the page largest first, each node's
//! counts no less than its children's, and for each node shown or
//! expanded that has at most [`SUMS_CHECKED`] children, its retained size
//! and dominated count their exact sums (as `check_dominators` checks
//! every node), its leak class one a block under it may have. A damaged chunk
//! or a disagreement is an `Err`: the caller then drops this tree and
//! answers from the whole cache, checked whole (or rebuilt).

use crate::cache::CacheFile;
use crate::cache_file::{CacheProblem, Reader, Sealed};
use crate::heap::Heap;
use crate::leaks::LeakKind;
use std::ops::Range;

/// A node whose children are at most this many has its retained size and
/// dominated count checked as the exact sums of theirs when it is shown
/// or expanded (a node of millions of children, the virtual root of a
/// heap that is mostly lost, is checked against the page read alone).
pub(crate) const SUMS_CHECKED: usize = 1 << 12;

/// What a walk of subtrees reads of the files at a time from a cold disk
/// (the node-at-a-time reads take a chunk): at 100 M blocks the suspects'
/// walk read 1.3 GB in 3.0 s a chunk at a time, 1.4 s a MiB at a time
/// (0.5 MiB: 1.8 s, 2 MiB: 1.5 s).
const WALK_WINDOW: usize = 1 << 20;

/// The tree's arrays where the cache files hold them.
pub(crate) struct KeptTree {
    analysis: Sealed,
    children: Sealed,
    n: usize,
    kind: Range<usize>,
    leader: Range<usize>,
    idom: Range<usize>,
    retained: Range<usize>,
    dominated: Range<usize>,
    start: Range<usize>,
    list: Range<usize>,
    /// The bytes of the four leak classes together: the heap's, which the
    /// virtual root retains (when the dump's trailer agrees).
    class_bytes: u64,
}

fn bad(what: &'static str) -> CacheProblem {
    CacheProblem::Stale(what)
}

impl KeptTree {
    /// The tree of `heap` in `cache`'s files: `Ok(None)` when either is
    /// missing or holds no tree. Reads the files' headers (their chunks
    /// checked) and where their arrays are, no more.
    pub(crate) fn open(cache: &CacheFile, heap: &Heap) -> Result<Option<KeptTree>, CacheProblem> {
        let Some(analysis) = Sealed::open_random(cache.path())? else { return Ok(None) };
        let Some(children) = Sealed::open_random(&cache.part_path(crate::analysis::TREE))? else { return Ok(None) };
        let n = heap.len();
        let (kind, leader, idom, retained, dominated, class_bytes) = {
            let mut r = Reader::body(&analysis);
            crate::cache::read_header(&mut r, cache, n)?;
            let kind = r.skip_bytes(n)?;
            let leader = r.skip_slab::<u32>()?;
            let mut class_bytes = 0u64;
            for _ in 0..4 {
                class_bytes = class_bytes.wrapping_add(r.u64()?);
                r.u64()?;
            }
            let nh = r.u64()?;
            if nh > 16 {
                return Err(bad("bad heuristic count"));
            }
            for _ in 0..nh {
                r.take(17)?;
            }
            match r.u8()? {
                0 => return Ok(None),
                1 => {}
                _ => return Err(bad("bad flag")),
            }
            let idom = r.skip_slab::<u32>()?;
            let retained = r.skip_slab::<u64>()?;
            let dominated = r.skip_slab::<u32>()?;
            r.end()?;
            (kind, leader, idom, retained, dominated, class_bytes)
        };
        let (start, list) = {
            let mut r = Reader::body(&children);
            crate::cache::read_part_header(&mut r, cache, crate::analysis::TREE)?;
            let start = r.skip_slab::<u32>()?;
            let list = r.skip_slab::<u32>()?;
            r.end()?;
            (start, list)
        };
        if [leader.len(), idom.len(), dominated.len(), list.len()] != [4 * n; 4] || retained.len() != 8 * n || start.len() != 4 * (n + 2) {
            return Err(bad("dominators of another heap"));
        }
        Ok(Some(KeptTree { analysis, children, n, kind, leader, idom, retained, dominated, start, list, class_bytes }))
    }

    /// The bytes of `heap`'s blocks, what the virtual root retains: the
    /// leak classes' total where the dump's trailer says the same (a
    /// graph read from the cache was checked to add up to its trailer),
    /// else counted.
    pub(crate) fn heap_bytes(&self, heap: &Heap) -> u64 {
        match heap.trailer {
            Some(t) if t.alloc_bytes == self.class_bytes && t.allocations == self.n as u64 => t.alloc_bytes,
            _ => heap.total_bytes(),
        }
    }

    /// Asks the processor to load entry `i` (of `width` bytes) of the
    /// array at `r` of `s`, to be read soon: a hint, nothing is read.
    #[inline]
    fn prefetch(s: &Sealed, r: &Range<usize>, width: usize, i: usize) {
        let at = r.start.saturating_add(width.saturating_mul(i));
        if at < r.end {
            crate::prefetch::prefetch(s.body(), at);
        }
    }

    fn u32_at(s: &Sealed, r: &Range<usize>, i: usize) -> Result<u32, CacheProblem> {
        Self::u32_around(s, r, i, crate::cache_file::CHUNK)
    }

    /// [`KeptTree::u32_at`] for a walk that reads much of the files: read
    /// from a cold disk [`WALK_WINDOW`] at a time.
    fn u32_walked(s: &Sealed, r: &Range<usize>, i: usize) -> Result<u32, CacheProblem> {
        Self::u32_around(s, r, i, WALK_WINDOW)
    }

    fn u32_around(s: &Sealed, r: &Range<usize>, i: usize, window: usize) -> Result<u32, CacheProblem> {
        let at = r.start + 4 * i;
        s.check_around(at..at + 4, window)?;
        Ok(u32::from_le_bytes(s.body()[at..at + 4].try_into().map_err(|_| bad("cut short"))?))
    }

    /// Block `b`'s leak class.
    pub(crate) fn kind(&self, b: usize) -> Result<LeakKind, CacheProblem> {
        let at = self.kind.start + b;
        self.analysis.check(at..at + 1)?;
        crate::cache::kind_of(self.analysis.body()[at]).ok_or(bad("bad leak class"))
    }

    /// The leak classes of blocks `range`, as the cache keeps them (a
    /// byte each: see `cache::kind_of`), their chunks checked.
    pub(crate) fn kind_bytes(&self, range: Range<usize>) -> Result<&[u8], CacheProblem> {
        if range.end > self.n || range.start > range.end {
            return Err(bad("blocks of another heap"));
        }
        let at = self.kind.start + range.start..self.kind.start + range.end;
        self.analysis.check(at.clone())?;
        Ok(&self.analysis.body()[at])
    }

    /// The definitely lost block heading the lost structure `b` is part
    /// of (`None`: `b` is not lost), checked as `check_leaks` checks every
    /// block: a leader exactly for the lost blocks, always a definitely
    /// lost block, itself for one.
    pub(crate) fn leader(&self, b: usize) -> Result<Option<usize>, CacheProblem> {
        let k = self.kind(b)?;
        let l = Self::u32_at(&self.analysis, &self.leader, b)?;
        let lost = matches!(k, LeakKind::DefinitelyLost | LeakKind::IndirectlyLost);
        if lost != (l != crate::leaks::NO_LEADER) {
            return Err(bad("bad leader"));
        }
        if !lost {
            return Ok(None);
        }
        let head = !l as usize;
        if head >= self.n || self.kind(head)? != LeakKind::DefinitelyLost || (k == LeakKind::DefinitelyLost && head != b) {
            return Err(bad("bad leader"));
        }
        Ok(Some(head))
    }

    /// Block `b`'s immediate dominator (`u32::MAX`: the virtual root).
    pub(crate) fn idom(&self, b: usize) -> Result<u32, CacheProblem> {
        let d = Self::u32_at(&self.analysis, &self.idom, b)?;
        if d != u32::MAX && d as usize >= self.n {
            return Err(bad("bad dominator"));
        }
        Ok(d)
    }

    /// Bytes block `b` retains.
    pub(crate) fn retained(&self, b: usize) -> Result<u64, CacheProblem> {
        let at = self.retained.start + 8 * b;
        self.analysis.check(at..at + 8)?;
        Ok(u64::from_le_bytes(self.analysis.body()[at..at + 8].try_into().map_err(|_| bad("cut short"))?))
    }

    /// Blocks block `b` dominates, itself included.
    pub(crate) fn dominated(&self, b: usize) -> Result<u32, CacheProblem> {
        let c = Self::u32_at(&self.analysis, &self.dominated, b)?;
        if c == 0 || c as usize > self.n {
            return Err(bad("bad dominated count"));
        }
        Ok(c)
    }

    /// Where the children of `p` (`n`: the virtual root) are in the list.
    fn span(&self, p: usize) -> Result<Range<usize>, CacheProblem> {
        let (s, e) = (Self::u32_at(&self.children, &self.start, p)? as usize, Self::u32_at(&self.children, &self.start, p + 1)? as usize);
        if s > e || e > self.n {
            return Err(bad("dominator children of another heap"));
        }
        Ok(s..e)
    }

    /// How many children `p` (`n`: the virtual root) has.
    pub(crate) fn child_count(&self, p: usize) -> Result<usize, CacheProblem> {
        Ok(self.span(p)?.len())
    }

    /// Block `b` as a node: its retained bytes, dominated count, number
    /// of children and leak class, checked against its children (see
    /// [`KeptTree::check_node`]) and its class against its place (a
    /// definitely lost block heads its structure, under the virtual root).
    pub(crate) fn node(&self, heap: &Heap, b: usize) -> Result<(u64, u32, usize, LeakKind), CacheProblem> {
        let span = self.span(b)?;
        self.check_node(heap, b, &span)?;
        let class = self.kind(b)?;
        if class == LeakKind::DefinitelyLost && self.idom(b)? != u32::MAX {
            return Err(bad("bad dominator"));
        }
        Ok((self.retained(b)?, self.dominated(b)?, span.len(), class))
    }

    /// The children of `p` (`None`: the virtual root), `count` from
    /// `offset`, largest retained size first, checked against one another
    /// and against `p` (see the module's text); with how many there are.
    pub(crate) fn children(&self, heap: &Heap, p: Option<usize>, offset: usize, count: usize) -> Result<(Vec<u32>, usize), CacheProblem> {
        let span = self.span(p.unwrap_or(self.n))?;
        let total = span.len();
        let parent = p.map_or(u32::MAX, |p| p as u32);
        // The page, and the child before it (the order holds across).
        let from = offset.min(total).saturating_sub(1);
        let to = offset.saturating_add(count).min(total);
        let mut page = Vec::with_capacity(to.saturating_sub(offset));
        let mut before: Option<(u64, u32)> = None;
        for i in from..to {
            let c = Self::u32_at(&self.children, &self.list, span.start + i)?;
            if c as usize >= self.n || self.idom(c as usize)? != parent {
                return Err(bad("dominator children of another heap"));
            }
            let key = (self.retained(c as usize)?, c);
            if before.is_some_and(|(r, b)| (std::cmp::Reverse(r), b) >= (std::cmp::Reverse(key.0), key.1)) {
                return Err(bad("dominator children of another heap"));
            }
            before = Some(key);
            if i >= offset {
                page.push(c);
            }
        }
        match p {
            Some(p) => self.check_node(heap, p, &span)?,
            // The virtual root retains the heap.
            None if total <= SUMS_CHECKED => {
                let mut r = 0u64;
                for i in span {
                    r = r.wrapping_add(self.retained(Self::u32_at(&self.children, &self.list, i)? as usize)?);
                }
                if r != self.heap_bytes(heap) {
                    return Err(bad("bad retained size"));
                }
            }
            None => {}
        }
        Ok((page, total))
    }

    /// Every block of the subtrees of `tops` (each block once, in no
    /// particular order), given to `each`; how many there were. For a
    /// walk whose order does not matter (a tally by site): the nodes are
    /// read a level at a time, in batches whose entries are loaded in
    /// tight loops of independent reads (the arrays are gigabytes, each
    /// read a miss: a node at a time, a walk waits on each in turn). Each
    /// node is checked as [`KeptTree::children`] checks one but for the
    /// order (which the walk does not use): every child under it, and a
    /// node of at most [`SUMS_CHECKED`] children counting one more block
    /// than they do together (so no child is left out).
    pub(crate) fn subtrees(&self, heap: &Heap, tops: &[u32], mut each: impl FnMut(u32)) -> Result<u64, CacheProblem> {
        const BATCH: usize = 4096;
        let mut level: Vec<u32> = tops.to_vec();
        let mut next: Vec<u32> = Vec::new();
        let (mut spans, mut dom, mut kid_idom, mut kid_dom) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut walked = 0u64;
        while !level.is_empty() {
            for batch in level.chunks(BATCH) {
                spans.clear();
                dom.clear();
                for &x in batch {
                    Self::prefetch(&self.children, &self.start, 4, x as usize);
                    Self::prefetch(&self.analysis, &self.dominated, 4, x as usize);
                    crate::prefetch::prefetch(&heap.blocks.packed, x as usize);
                }
                for &x in batch {
                    let x = x as usize;
                    if x >= self.n {
                        return Err(bad("dominator children of another heap"));
                    }
                    spans.push((Self::u32_walked(&self.children, &self.start, x)?, Self::u32_walked(&self.children, &self.start, x + 1)?));
                }
                for &x in batch {
                    dom.push(Self::u32_walked(&self.analysis, &self.dominated, x as usize)?);
                }
                let first = next.len();
                for &(s, _) in &spans {
                    Self::prefetch(&self.children, &self.list, 4, s as usize);
                }
                for &(s, e) in &spans {
                    if s > e || e as usize > self.n {
                        return Err(bad("dominator children of another heap"));
                    }
                    let at = self.list.start + 4 * s as usize..self.list.start + 4 * e as usize;
                    self.children.check_around(at.clone(), WALK_WINDOW)?;
                    next.extend(self.children.body()[at].chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])));
                }
                kid_idom.clear();
                kid_dom.clear();
                for &c in &next[first..] {
                    Self::prefetch(&self.analysis, &self.idom, 4, c as usize);
                    Self::prefetch(&self.analysis, &self.dominated, 4, c as usize);
                }
                for &c in &next[first..] {
                    if c as usize >= self.n {
                        return Err(bad("dominator children of another heap"));
                    }
                    kid_idom.push(Self::u32_walked(&self.analysis, &self.idom, c as usize)?);
                }
                for &c in &next[first..] {
                    kid_dom.push(Self::u32_walked(&self.analysis, &self.dominated, c as usize)?);
                }
                let mut k = 0;
                for ((&x, &(s, e)), &d) in batch.iter().zip(&spans).zip(&dom) {
                    let len = (e - s) as usize;
                    if d == 0 || d as usize > self.n || d as usize <= len {
                        return Err(bad("bad dominated count"));
                    }
                    let mut sum = 1u64;
                    for i in k..k + len {
                        if kid_idom[i] != x {
                            return Err(bad("dominator children of another heap"));
                        }
                        sum += u64::from(kid_dom[i]);
                    }
                    if len <= SUMS_CHECKED && sum != u64::from(d) {
                        return Err(bad("bad dominated count"));
                    }
                    k += len;
                    each(x);
                    walked += 1;
                }
            }
            std::mem::swap(&mut level, &mut next);
            next.clear();
            if walked > self.n as u64 {
                return Err(bad("dominator children of another heap"));
            }
        }
        Ok(walked)
    }

    /// Node `p` against its children (listed at `span`): its counts no
    /// less than theirs, and their exact sums when they are few.
    fn check_node(&self, heap: &Heap, p: usize, span: &Range<usize>) -> Result<(), CacheProblem> {
        let (retained, dominated) = (self.retained(p)?, self.dominated(p)?);
        let size = heap.blocks.size(p);
        if (dominated as usize) <= span.len() || retained < size {
            return Err(bad("bad dominated count"));
        }
        if span.len() <= SUMS_CHECKED {
            let (mut r, mut d) = (size, 1u64);
            for i in span.clone() {
                let c = Self::u32_at(&self.children, &self.list, i)? as usize;
                if c >= self.n || self.idom(c)? as usize != p {
                    return Err(bad("dominator children of another heap"));
                }
                r = r.wrapping_add(self.retained(c)?);
                d += u64::from(self.dominated(c)?);
            }
            if r != retained || d != u64::from(dominated) {
                return Err(bad("bad retained size"));
            }
        }
        Ok(())
    }
}
