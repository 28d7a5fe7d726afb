//! Shortest chains from a root to an allocation.

use crate::heap::{BlockId, Heap, Root};
use std::collections::VecDeque;

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

const UNSEEN: u32 = u32::MAX;
const FROM_ROOT: u32 = u32::MAX - 1;

/// The shortest chain of pointers from any root to `target`, breadth-first.
/// When no root reaches it, the shortest chain from `fallback` (the head of
/// its lost structure), if given.
pub fn shortest(heap: &Heap, target: BlockId, fallback: Option<BlockId>) -> Option<Path> {
    let n = heap.len();
    let mut pred = vec![UNSEEN; n];
    let mut pred_edge: Vec<(u64, bool)> = vec![(0, false); n];
    let mut root_of = vec![UNSEEN; n];
    let mut q = VecDeque::new();
    for (ri, r) in heap.roots.iter().enumerate() {
        let t = r.target.index();
        if pred[t] == UNSEEN {
            pred[t] = FROM_ROOT;
            root_of[t] = ri as u32;
            pred_edge[t] = (r.offset, r.interior);
            q.push_back(r.target.0);
        }
    }
    let mut from_lost = None;
    loop {
        while let Some(b) = q.pop_front() {
            if b == target.0 {
                q.clear();
                break;
            }
            for e in heap.edges(BlockId(b)) {
                let t = e.target.index();
                if pred[t] == UNSEEN {
                    pred[t] = b;
                    pred_edge[t] = (e.offset, e.interior);
                    q.push_back(e.target.0);
                }
            }
        }
        if pred[target.index()] != UNSEEN || from_lost.is_some() {
            break;
        }
        let f = fallback?;
        from_lost = Some(f);
        pred[f.index()] = FROM_ROOT;
        q.push_back(f.0);
    }
    if pred[target.index()] == UNSEEN {
        return None;
    }
    let mut steps = Vec::new();
    let mut cur = target.0;
    loop {
        let p = pred[cur as usize];
        let (offset, interior) = pred_edge[cur as usize];
        if p == FROM_ROOT {
            steps.push(Step { from: None, to: BlockId(cur), offset, interior });
            break;
        }
        steps.push(Step { from: Some(BlockId(p)), to: BlockId(cur), offset, interior });
        cur = p;
    }
    steps.reverse();
    let first = steps[0].to;
    let start = match from_lost {
        Some(f) if first == f => PathStart::LostBlock(f),
        _ => PathStart::Root(heap.roots[root_of[first.index()] as usize]),
    };
    if let PathStart::LostBlock(_) = start {
        steps.remove(0);
    }
    Some(Path { start, steps })
}
