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

/// The breadth-first tree of everything the roots reach: for each block,
/// the block it was first reached from (or a root) and through which
/// pointer. Built once (and kept in the analysis cache), it gives every
/// reachable block's shortest chain by following it back: `path --all`
/// asks that for each holder of a block.
pub struct Reach {
    /// The block each block was reached from: [`FROM_ROOT`], or `UNSEEN`
    /// when no root reaches it.
    pred: Slab<u32>,
    /// The edge index it was reached through (the root's index for
    /// [`FROM_ROOT`]).
    via: Slab<u32>,
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
        let mut pred = vec![UNSEEN; n];
        let mut via = vec![0u32; n];
        // Each block enters the queue once: its whole length reserved
        // (pages the kernel gives as they are first written), so that it
        // never grows by copying (on a heap all reachable, a doubling's
        // old and new buffers beside each other came to 10 bytes a block
        // at the peak of `path`).
        let mut queue: Vec<u32> = Vec::with_capacity(n);
        for interior in [false, true] {
            for (ri, r) in heap.roots.iter().enumerate().filter(|(_, r)| r.interior == interior) {
                let t = r.target.index();
                if pred[t] == UNSEEN {
                    pred[t] = FROM_ROOT;
                    via[t] = ri as u32;
                    queue.push(r.target.0);
                }
            }
        }
        let (starts, targets) = heap.raw_edges();
        let mut head = 0;
        let mut layer_end = queue.len();
        // Interior pointers of the layer to blocks not reached yet, taken
        // at its end for those no start pointer of the layer reached.
        let mut deferred: Vec<(u32, u32)> = Vec::new();
        loop {
            if head == layer_end {
                for (b, k) in deferred.drain(..) {
                    let t = (targets[k as usize] & !INTERIOR) as usize;
                    if pred[t] == UNSEEN {
                        pred[t] = b;
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
                if pred[t] == UNSEEN {
                    if raw & INTERIOR != 0 {
                        deferred.push((b, k as u32));
                        continue;
                    }
                    pred[t] = b;
                    via[t] = k as u32;
                    queue.push(t as u32);
                }
            }
        }
        Reach { pred: pred.into(), via: via.into() }
    }

    /// A tree kept by [`Reach::parts`], checked against `heap` (every
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
        ok.then_some(Reach { pred, via })
    }

    /// The predecessors and the pointers taken (see [`Reach::from_parts`]).
    pub fn parts(&self) -> (&[u32], &[u32]) {
        (&self.pred, &self.via)
    }

    /// The shortest chain from a root to `target`, `None` when no root
    /// reaches it.
    pub fn path_to(&self, heap: &Heap, target: BlockId) -> Option<Path> {
        let (starts, targets) = heap.raw_edges();
        let mut steps = Vec::new();
        let mut cur = target.0;
        loop {
            let (&p, &v) = (self.pred.get(cur as usize)?, self.via.get(cur as usize)?);
            match p {
                UNSEEN => return None,
                FROM_ROOT => {
                    let root = *heap.roots.get(v as usize)?;
                    steps.push(Step { from: None, to: BlockId(cur), offset: root.offset, interior: root.interior });
                    steps.reverse();
                    return Some(Path { start: PathStart::Root(root), steps });
                }
                p => {
                    // The pointer must be one of `p`'s, to `cur`: a kept
                    // tree that says otherwise (or loops) is not followed.
                    let k = v as usize;
                    let (s, e) = (*starts.get(p as usize)? as usize, *starts.get(p as usize + 1)? as usize);
                    if !(s..e).contains(&k) || targets[k] & !INTERIOR != cur || steps.len() > self.pred.len() {
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
