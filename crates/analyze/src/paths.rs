//! Shortest chains from a root to an allocation.

use crate::heap::{BlockId, Heap, Root, INTERIOR};
use crate::slab::Slab;
use std::collections::{HashMap, VecDeque};

/// Where a chain starts.
#[derive(Clone, Debug)]
pub enum PathStart {
    /// A root pointer.
    Root(Root),
    /// A lost block heading the clique the target belongs to.
    LostBlock(BlockId),
}

/// One step of a chain: a pointer at `offset` in `from` to `to`.
#[derive(Clone, Debug)]
pub struct Step {
    /// The source block (`None` for the first step from a root).
    pub from: Option<BlockId>,
    /// The block pointed to.
    pub to: BlockId,
    /// Offset of the pointer in its source (in the root region for the first step).
    pub offset: u64,
    /// Whether it points inside `to`.
    pub interior: bool,
}

/// A chain from a start to the target.
#[derive(Clone, Debug)]
pub struct Path {
    /// Where it starts.
    pub start: PathStart,
    /// The steps, first from the start.
    pub steps: Vec<Step>,
}

pub(crate) const UNSEEN: u32 = u32::MAX;
pub(crate) const FROM_ROOT: u32 = u32::MAX - 1;
/// In a computed tree's `via`: reached from the root whose index is the
/// rest of the word (edge indices are below 2^31: the load refuses more
/// pointers).
const ROOT_BIT: u32 = 1 << 31;
/// A root's index too large for the rest of the word (never met: a dump
/// of 2^31 roots): the block's first root is looked for.
const LATE_ROOT: u32 = ROOT_BIT | (ROOT_BIT - 2);

/// The breadth-first tree of everything the roots reach: for each block,
/// the pointer it was first reached through (a root, or an edge of the
/// block it was reached from). Built once (and kept in the analysis
/// cache), it gives every reachable block's shortest chain by following
/// it back: `path --all` asks that for each holder of a block.
pub struct Reach {
    tree: Tree,
}

enum Tree {
    /// Built: for each block, the edge index it was reached through (its
    /// predecessor is the block whose edges hold that index: a search in
    /// the edge starts), `ROOT_BIT | i` for root `i`, or `UNSEEN`. One
    /// word a block (the predecessor beside it took another 4 bytes a
    /// block, at the peak of `path` on a heap all reachable).
    Built(Slab<u32>),
    /// Read from the cache, whose part keeps the predecessor beside the
    /// pointer (read in place: no searches, and the part's check walks
    /// the chains without them): the block each block was reached from
    /// ([`FROM_ROOT`], or `UNSEEN` when no root reaches it) and the edge
    /// index it was reached through (the root's index for `FROM_ROOT`, 0
    /// for `UNSEEN`).
    Kept { pred: Slab<u32>, via: Slab<u32> },
}

/// How a block was first reached.
enum Link {
    Unseen,
    Root(usize),
    /// Through edge `k` of block `from`.
    Edge {
        from: u32,
        k: usize,
    },
}

/// The block whose edges hold edge `k`: the last whose edges start at or
/// before it (`None` when `k` is past the edges).
fn owner(starts: &[u32], k: usize) -> Option<u32> {
    if k >= *starts.last()? as usize {
        return None;
    }
    Some((starts.partition_point(|&s| s as usize <= k) - 1) as u32)
}

impl Reach {
    /// Breadth-first from the roots in their order, each block's pointers
    /// in order (the first chain found of the shortest length), start
    /// pointers before interior ones: a block a start pointer reaches is
    /// reached through it (valgrind's meaning of reachable), an interior
    /// pointer of the same length taken only when no start pointer is.
    /// Roots pointing at the start of their block come first; within each
    /// layer of the search, interior pointers are followed after the
    /// layer's start pointers.
    pub fn of(heap: &Heap) -> Reach {
        let n = heap.len();
        let mut via = vec![UNSEEN; n];
        // Each block enters the queue once: its whole length reserved
        // (pages the kernel gives as they are first written), so that it
        // never grows by copying (on a heap all reachable, a doubling's
        // old and new buffers beside each other came to 10 bytes a block
        // at the peak of `path`).
        let mut queue: Vec<u32> = Vec::with_capacity(n);
        for interior in [false, true] {
            for (ri, r) in heap.roots.iter().enumerate().filter(|(_, r)| r.interior == interior) {
                let t = r.target.index();
                if via[t] == UNSEEN {
                    via[t] = ROOT_BIT | u32::try_from(ri).unwrap_or(u32::MAX).min(LATE_ROOT & !ROOT_BIT);
                    queue.push(r.target.0);
                }
            }
        }
        let (starts, targets) = heap.raw_edges();
        let mut head = 0;
        let mut layer_end = queue.len();
        // Interior pointers of the layer to blocks not reached yet, taken
        // at its end for those no start pointer of the layer reached.
        let mut deferred: Vec<u32> = Vec::new();
        loop {
            if head == layer_end {
                for k in deferred.drain(..) {
                    let t = (targets[k as usize] & !INTERIOR) as usize;
                    if via[t] == UNSEEN {
                        via[t] = k;
                        queue.push(t as u32);
                    }
                }
                if head == queue.len() {
                    break;
                }
                layer_end = queue.len();
            }
            let b = queue[head];
            head += 1;
            let s = starts[b as usize] as usize;
            for (k, &raw) in targets[s..starts[b as usize + 1] as usize].iter().enumerate().map(|(i, t)| (s + i, t)) {
                let t = (raw & !INTERIOR) as usize;
                if via[t] == UNSEEN {
                    if raw & INTERIOR != 0 {
                        deferred.push(k as u32);
                        continue;
                    }
                    via[t] = k as u32;
                    queue.push(t as u32);
                }
            }
        }
        Reach { tree: Tree::Built(via.into()) }
    }

    /// A tree kept by [`Reach::write_kept`], checked against `heap` (every
    /// index in bounds; chains are bounded when followed).
    pub fn from_parts(heap: &Heap, pred: Slab<u32>, via: Slab<u32>) -> Option<Reach> {
        let n = heap.len();
        let ok = pred.len() == n
            && via.len() == n
            && pred.iter().zip(via.iter()).all(|(&p, &v)| match p {
                UNSEEN => true,
                FROM_ROOT => (v as usize) < heap.roots.len(),
                p => (p as usize) < n && (v as usize) < heap.edge_count(),
            });
        ok.then_some(Reach { tree: Tree::Kept { pred, via } })
    }

    /// Writes the tree as the cache keeps it (see [`Tree::Kept`]): the
    /// predecessors, then the pointers taken, each array made a chunk at
    /// a time (no copy of either made whole).
    pub(crate) fn write_kept(&self, heap: &Heap, out: &mut crate::cache_file::Out) {
        let n = heap.len();
        match &self.tree {
            Tree::Kept { pred, via } => {
                out.slab(pred);
                out.slab(via);
            }
            Tree::Built(_) => {
                let pred = |b: usize| match self.link(heap, b as u32) {
                    Some(Link::Edge { from, .. }) => from,
                    Some(Link::Root(_)) => FROM_ROOT,
                    _ => UNSEEN,
                };
                out.slab_by_chunks(n, |r, buf| buf.extend(r.map(pred)));
                // The pointers taken need no search for their blocks.
                let via = |b: usize| match self.link_unowned(heap, b as u32) {
                    Some(Link::Edge { k, .. }) => k as u32,
                    Some(Link::Root(i)) => i as u32,
                    _ => 0,
                };
                out.slab_by_chunks(n, |r, buf| buf.extend(r.map(via)));
            }
        }
    }

    /// How block `b` was first reached (`None`: a kept tree or an index
    /// that does not hold).
    fn link(&self, heap: &Heap, b: u32) -> Option<Link> {
        match self.link_unowned(heap, b)? {
            Link::Edge { from: u32::MAX, k } => Some(Link::Edge { from: owner(heap.raw_edges().0, k)?, k }),
            l => Some(l),
        }
    }

    /// [`Reach::link`], but an edge of a built tree with its block not
    /// looked for (`from` is `u32::MAX`).
    fn link_unowned(&self, heap: &Heap, b: u32) -> Option<Link> {
        match &self.tree {
            Tree::Built(via) => match *via.get(b as usize)? {
                UNSEEN => Some(Link::Unseen),
                LATE_ROOT => {
                    // The first root to it in the search's order.
                    let first = |interior: bool| heap.roots.iter().position(|r| r.target.0 == b && r.interior == interior);
                    Some(Link::Root(first(false).or_else(|| first(true))?))
                }
                v if v & ROOT_BIT != 0 => Some(Link::Root((v & !ROOT_BIT) as usize)),
                k => Some(Link::Edge { from: u32::MAX, k: k as usize }),
            },
            Tree::Kept { pred, via } => {
                let (&p, &v) = (pred.get(b as usize)?, via.get(b as usize)?);
                Some(match p {
                    UNSEEN => Link::Unseen,
                    FROM_ROOT => Link::Root(v as usize),
                    p => Link::Edge { from: p, k: v as usize },
                })
            }
        }
    }

    /// The shortest chain from a root to `target`, `None` when no root
    /// reaches it.
    pub fn path_to(&self, heap: &Heap, target: BlockId) -> Option<Path> {
        let (starts, targets) = heap.raw_edges();
        let mut steps = Vec::new();
        let mut cur = target.0;
        loop {
            match self.link(heap, cur)? {
                Link::Unseen => return None,
                Link::Root(i) => {
                    let root = *heap.roots.get(i)?;
                    steps.push(Step { from: None, to: BlockId(cur), offset: root.offset, interior: root.interior });
                    steps.reverse();
                    return Some(Path { start: PathStart::Root(root), steps });
                }
                Link::Edge { from: p, k } => {
                    // The pointer must be one of `p`'s, to `cur`: a kept
                    // tree that says otherwise (or loops) is not followed.
                    let (s, e) = (*starts.get(p as usize)? as usize, *starts.get(p as usize + 1)? as usize);
                    if !(s..e).contains(&k) || targets[k] & !INTERIOR != cur || steps.len() > heap.len() {
                        return None;
                    }
                    steps.push(Step {
                        from: Some(BlockId(p)),
                        to: BlockId(cur),
                        offset: heap.edge_offset_at(k),
                        interior: targets[k] & INTERIOR != 0,
                    });
                    cur = p;
                }
            }
        }
    }
}

/// The shortest chain from the lost block `head` to `target` (in its
/// structure), breadth-first through the blocks `head` reaches.
pub fn from_lost(heap: &Heap, head: BlockId, target: BlockId) -> Option<Path> {
    let (starts, targets) = heap.raw_edges();
    // Block -> (predecessor, edge index); only what the structure reaches.
    let mut pred: HashMap<u32, (u32, u32)> = HashMap::new();
    pred.insert(head.0, (FROM_ROOT, 0));
    let mut queue = VecDeque::from([head.0]);
    while let Some(b) = queue.pop_front() {
        if b == target.0 {
            break;
        }
        let s = starts[b as usize] as usize;
        for (k, &raw) in targets[s..starts[b as usize + 1] as usize].iter().enumerate().map(|(i, t)| (s + i, t)) {
            let t = raw & !INTERIOR;
            if let std::collections::hash_map::Entry::Vacant(v) = pred.entry(t) {
                v.insert((b, k as u32));
                queue.push_back(t);
            }
        }
    }
    pred.get(&target.0)?;
    let mut steps = Vec::new();
    let mut cur = target.0;
    while let Some(&(p, k)) = pred.get(&cur).filter(|x| x.0 != FROM_ROOT) {
        let k = k as usize;
        steps.push(Step { from: Some(BlockId(p)), to: BlockId(cur), offset: heap.edge_offset_at(k), interior: targets[k] & INTERIOR != 0 });
        cur = p;
    }
    steps.reverse();
    Some(Path { start: PathStart::LostBlock(head), steps })
}

/// The shortest chain of pointers from any root to `target`, breadth-first.
/// When no root reaches it, the shortest chain from `fallback` (the head of
/// its lost structure), if given. (One question: [`Reach`] answers many.)
pub fn shortest(heap: &Heap, target: BlockId, fallback: Option<BlockId>) -> Option<Path> {
    Reach::of(heap).path_to(heap, target).or_else(|| from_lost(heap, fallback?, target))
}
