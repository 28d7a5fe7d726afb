//! The dominator tree and retained sizes.
//!
//! Semi-NCA (Georgiadis, Tarjan): semidominators with Lengauer–Tarjan's
//! path-compressed `eval`, then immediate dominators by walking up the
//! DFS tree. Everything is iterative (explicit stacks), so a chain of ten
//! million blocks needs no deep recursion.
//!
//! The graph has a virtual root (node 0) whose children are the targets of
//! root pointers, then the leaders of lost cliques (so a leaked structure
//! has a dominator tree too, headed by its definitely lost block). Block
//! `i` is node `i + 1`.

use crate::heap::{BlockId, Heap, INTERIOR};
use crate::prefetch::prefetch;
use crate::slab::Slab;

const NONE: u32 = u32::MAX;
/// Marks the first entry of each node's predecessor list (node numbers
/// stay below 2^31: see [`crate::heap::MAX_BLOCKS`]).
const FIRST: u32 = 1 << 31;

/// The dominator tree.
pub struct Dominators {
    /// Immediate dominator of each block (`None` = the virtual root), by
    /// [`BlockId`]; unreachable blocks (none, given the extra roots) are `None`.
    idom: Slab<u32>,
    /// Bytes each block's dominator subtree holds, itself included.
    pub retained: Slab<u64>,
    /// Number of blocks each block dominates, itself included.
    pub dominated: Slab<u32>,
}

impl Dominators {
    /// A tree as [`Dominators::parts`] gave it (from a cache).
    pub fn from_parts(idom: Slab<u32>, retained: Slab<u64>, dominated: Slab<u32>) -> Dominators {
        Dominators { idom, retained, dominated }
    }

    /// The immediate dominators (`u32::MAX`: the virtual root), retained
    /// sizes and dominated counts, by block.
    pub fn parts(&self) -> (&[u32], &[u64], &[u32]) {
        (&self.idom, &self.retained, &self.dominated)
    }

    /// Immediate dominator, or `None` when it is the root.
    pub fn idom(&self, b: BlockId) -> Option<BlockId> {
        let d = self.idom[b.index()];
        (d != NONE).then_some(BlockId(d))
    }

    /// Blocks whose immediate dominator is the virtual root.
    pub fn top_level(&self) -> impl Iterator<Item = BlockId> + '_ {
        self.idom.iter().enumerate().filter(|(_, &d)| d == NONE).map(|(i, _)| BlockId(i as u32))
    }

    /// What each group of blocks retains, each byte once: `group_of[b]` is
    /// block `b`'s group (below `groups`); a group retains the dominator
    /// subtrees of its members that no other member dominates (as DevTools
    /// and MAT give a class's retained size: a tree of one site is its own
    /// size, not the sum of its nodes' nested retained sizes). One walk of
    /// the dominator tree, counting the members of each group on the path.
    pub fn retained_by_group(&self, groups: usize, group_of: &[u32]) -> Vec<u64> {
        let n = self.idom.len();
        // Children lists of the dominator tree (node 0 the virtual root,
        // block b node b + 1).
        let mut start = vec![0u32; n + 2];
        for &d in self.idom.iter() {
            let parent = if d == NONE { 0 } else { d as usize + 1 };
            start[parent + 1] += 1;
        }
        for i in 1..start.len() {
            start[i] += start[i - 1];
        }
        let mut fill = start.clone();
        let mut child = vec![0u32; n];
        for (b, &d) in self.idom.iter().enumerate() {
            let parent = if d == NONE { 0 } else { d as usize + 1 };
            child[fill[parent] as usize] = b as u32;
            fill[parent] += 1;
        }
        let mut out = vec![0u64; groups];
        let mut on_path = vec![0u32; groups];
        // (block, entered): entering adds the block to its group's path
        // count (and its subtree to the group when it is the first on the
        // path), leaving takes it off.
        let mut stack: Vec<(u32, bool)> = child[start[0] as usize..start[1] as usize].iter().map(|&c| (c, false)).collect();
        while let Some((b, entered)) = stack.pop() {
            let g = group_of[b as usize] as usize;
            if entered {
                on_path[g] -= 1;
                continue;
            }
            if on_path[g] == 0 {
                out[g] += self.retained[b as usize];
            }
            on_path[g] += 1;
            stack.push((b, true));
            let node = b as usize + 1;
            stack.extend(child[start[node] as usize..start[node + 1] as usize].iter().map(|&c| (c, false)));
        }
        out
    }
}

/// Computes dominators from the roots, then from `extra_roots` (in order)
/// for whatever the roots do not reach.
pub fn compute(heap: &Heap, extra_roots: &[BlockId]) -> Dominators {
    compute_with(heap, || extra_roots.to_vec())
}

/// Leak classes and the dominator tree headed by the lost structures'
/// leaders, the leaks computed on a second thread while the dominator walk
/// from the roots runs (it needs the leaders only after that walk).
pub fn with_leaks(heap: &Heap, contents: &(dyn crate::leaks::Contents + Sync)) -> (crate::leaks::Leaks, Dominators) {
    std::thread::scope(|s| {
        let job = s.spawn(|| crate::leaks::analyze(heap, contents));
        let mut leaks = None;
        let d = compute_with(heap, || {
            let l = job.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
            let heads = l.heads();
            leaks = Some(l);
            heads
        });
        let leaks = leaks.unwrap_or_else(|| crate::leaks::analyze(heap, contents));
        (leaks, d)
    })
}

/// [`with_leaks`] over a loaded dump, the heuristics reading its contents.
pub fn of_dump(file: &crate::DumpFile, heap: &Heap) -> (crate::leaks::Leaks, Dominators) {
    with_leaks(heap, &crate::DumpContents::build(file, heap))
}

/// [`compute`], asking for the extra roots only once the walk from the
/// roots is done (the same tree: the extra roots come after the roots
/// among the virtual root's children).
pub fn compute_with(heap: &Heap, extra_roots: impl FnOnce() -> Vec<BlockId>) -> Dominators {
    let n = heap.len() + 1;
    // Children of the virtual root, deduplicated, in order.
    let mut root_children: Vec<u32> = Vec::new();
    let mut is_child = std::collections::HashSet::new();
    for r in &heap.roots {
        let v = r.target.0 + 1;
        if is_child.insert(v) {
            root_children.push(v);
        }
    }
    // Per node, side by side: its preorder number (1-based; 0 =
    // unvisited) and how many edges point to it, counted as the walk
    // reads each edge's number (the same cache line: a separate pass over
    // the edges for the counts took 0.46 s at 10 M dense blocks).
    let mut dfn = vec![[0u32; 2]; n];
    // Successors of node v (node = block + 1; 0 = the virtual root).
    let succ = |root_children: &[u32], v: u32, k: usize| -> Option<u32> {
        if v == 0 {
            root_children.get(k).copied()
        } else {
            heap.raw_targets(v - 1).get(k).map(|&t| (t & !INTERIOR) + 1)
        }
    };

    // Iterative DFS: preorder numbers (1-based; 0 = unvisited), parents.
    // Instead of a stack, each numbered node keeps the index of its next
    // edge (`next`), and the walk climbs back through `parent`: four bytes
    // a node, where a stack of (node, edge) pairs as deep as a long list
    // took eight, doubled by its growth.
    let mut vertex: Vec<u32> = Vec::with_capacity(n); // dfn-1 -> node
    let mut parent: Vec<u32> = Vec::with_capacity(n); // by dfn-1, parent's dfn-1
    let mut next: Vec<u32> = Vec::with_capacity(n); // by dfn-1
    const AHEAD: usize = 16;
    let (starts, targets) = heap.raw_edges();
    let mut dfs_from =
        |start: u32, parent_dfn: u32, root_children: &[u32], dfn: &mut [[u32; 2]], vertex: &mut Vec<u32>, parent: &mut Vec<u32>| {
            vertex.push(start);
            parent.push(parent_dfn);
            next.push(0);
            dfn[start as usize][0] = vertex.len() as u32;
            let first = vertex.len() - 1;
            let mut cur = first;
            loop {
                let v = vertex[cur];
                let k = next[cur] as usize;
                // A node of many edges (an array of pointers, a hash
                // table: where most of a large heap hangs) is read a few
                // edges ahead, in three stages: a target's edge range,
                // then its edge list, then its number and those of its
                // first few targets, which the walk reads when it enters
                // it (otherwise a miss each, one after the other: the
                // walk of benches/c/dense.c's 10 M blocks of two random
                // pointers, held from one array, took 2.2 s without
                // this, 1.1 s with it).
                if let Some(t) = succ(root_children, v, k + 3 * AHEAD) {
                    prefetch(starts, t as usize - 1);
                }
                if let Some(t) = succ(root_children, v, k + 2 * AHEAD) {
                    if let Some(&from) = starts.get(t as usize - 1) {
                        prefetch(targets, from as usize);
                    }
                }
                if let Some(t) = succ(root_children, v, k + AHEAD) {
                    prefetch(dfn, t as usize);
                    for &u in heap.raw_targets(t - 1).iter().take(4) {
                        prefetch(dfn, (u & !INTERIOR) as usize + 1);
                    }
                }
                match succ(root_children, v, k) {
                    Some(w) => {
                        next[cur] += 1;
                        dfn[w as usize][1] += 1;
                        if dfn[w as usize][0] == 0 {
                            vertex.push(w);
                            parent.push(cur as u32);
                            next.push(0);
                            dfn[w as usize][0] = vertex.len() as u32;
                            cur = vertex.len() - 1;
                        }
                    }
                    None if cur == first => break,
                    None => cur = parent[cur] as usize,
                }
            }
        };
    dfs_from(0, NONE, &root_children, &mut dfn, &mut vertex, &mut parent);
    // Then the extra roots, as the virtual root's next children.
    for b in extra_roots() {
        let v = b.0 + 1;
        if is_child.insert(v) {
            root_children.push(v);
            dfn[v as usize][1] += 1;
            if dfn[v as usize][0] == 0 {
                dfs_from(v, 0, &root_children, &mut dfn, &mut vertex, &mut parent);
            }
        }
    }
    drop(is_child);
    // Whatever the roots and leaders do not reach hangs off the root too.
    for start in 1..n as u32 {
        if dfn[start as usize][0] == 0 {
            root_children.push(start);
            dfn[start as usize][1] += 1;
            dfs_from(start, 0, &root_children, &mut dfn, &mut vertex, &mut parent);
        }
    }
    drop(next);
    let count = vertex.len();

    // Predecessors in dfn space (CSR): the counts the walk kept, in
    // preorder, then the edges walked in block order (sequential reads of
    // the heap's tables; every node was visited).
    let mut pred_start = vec![0u32; count + 1];
    const GATHER_AHEAD: usize = 16;
    for i in 0..count {
        if let Some(&ahead) = vertex.get(i + GATHER_AHEAD) {
            prefetch(&dfn, ahead as usize);
        }
        pred_start[i + 1] = dfn[vertex[i] as usize][1];
    }
    for i in 0..count {
        pred_start[i + 1] += pred_start[i];
    }
    let mut preds = vec![0u32; pred_start[count] as usize];
    // Fill from the end of each range backwards, reusing pred_start's
    // shifted values as cursors (no second array).
    for_edges(heap, &root_children, &dfn, &mut pred_start, |pred_start, v, w| {
        let wi = dfn[w as usize][0] as usize;
        pred_start[wi] -= 1;
        preds[pred_start[wi] as usize] = dfn[v][0] - 1;
    });
    // pred_start[wi] now is the start of w's range, for wi in 1..=count:
    // shift down by one so that index wi-1 (0-based dfn) starts there.
    pred_start.remove(0);
    pred_start.push(preds.len() as u32);
    drop(dfn);
    // The DFS parent is one of each node's predecessors: moved to the front
    // of its range, it is kept there instead of in an array of its own.
    // Then the front of each range is marked (every node but the virtual
    // root has a predecessor, its parent), and the ranges' starts go: the
    // lists are read in order, forwards or backwards, never at random.
    for w in 1..count {
        let range = &mut preds[pred_start[w] as usize..pred_start[w + 1] as usize];
        if let Some(i) = range.iter().position(|&p| p == parent[w]) {
            range.swap(0, i);
        }
        if let Some(first) = range.first_mut() {
            *first |= FIRST;
        }
    }
    drop((parent, pred_start));
    // The range of the list that ends at `*end`, moving `*end` to its start.
    let prev_list = |end: &mut usize| -> std::ops::Range<usize> {
        let e = *end;
        let mut b = e;
        while b > 0 {
            b -= 1;
            if preds[b] & FIRST != 0 {
                break;
            }
        }
        *end = b;
        b..e
    };

    // Semi-NCA in dfn space (0-based). Each node's record holds, side by
    // side so that one cache miss fetches them: its ancestor in the
    // linked forest (its DFS parent until path compression shortens it; a
    // node is linked once its number is past the one being processed), the
    // smallest semidominator number on its compressed path (`best`, what
    // Lengauer–Tarjan's `eval` returns the label of), and its own
    // semidominator number.
    let mut info: Vec<Info> = (0..count).map(|w| Info { ancestor: 0, best: w as u32, semi: w as u32 }).collect();
    let mut w = 0;
    for &p in &preds {
        if p & FIRST != 0 {
            w += 1;
            info[w].ancestor = p & !FIRST;
        }
    }
    {
        let mut path: Vec<u32> = Vec::new();
        // The nodes this loop reads a few steps on, prefetched in two
        // stages: a predecessor, then (once it has arrived) its ancestor.
        // Three cursors walk the lists backwards: this node's, and those
        // AHEAD and 2 * AHEAD nodes on.
        const AHEAD: usize = 8;
        let mut end = preds.len();
        let mut end_a = end;
        let mut end_b = end;
        for _ in 0..AHEAD.min(count - 1) {
            prev_list(&mut end_a);
        }
        for _ in 0..(2 * AHEAD).min(count - 1) {
            prev_list(&mut end_b);
        }
        for w in (1..count).rev() {
            let mut s = info[w].semi;
            if w > 2 * AHEAD {
                for &v in &preds[prev_list(&mut end_b)] {
                    prefetch(&info, (v & !FIRST) as usize);
                }
            }
            if w > AHEAD {
                for &v in &preds[prev_list(&mut end_a)] {
                    prefetch(&info, info[(v & !FIRST) as usize].ancestor as usize);
                }
            }
            for &v in &preds[prev_list(&mut end)] {
                s = s.min(eval(v & !FIRST, w as u32 + 1, &mut info, &mut path));
            }
            info[w].semi = s;
            info[w].best = s;
        }
    }
    // Immediate dominators, in place over the ancestors (idom[w] needs
    // only idom of smaller numbers and semi[w] itself), walking the lists
    // forwards for each node's parent.
    let mut w = 0;
    for &p in &preds {
        if p & FIRST != 0 {
            w += 1;
            let s = info[w].semi;
            let mut d = p & !FIRST;
            while d > s {
                d = info[d as usize].ancestor;
            }
            info[w].ancestor = d;
        }
    }
    drop(preds);
    let idom_d: Vec<u32> = info.iter().map(|i| i.ancestor).collect();
    drop(info);

    // Back to block ids; retained sizes bottom-up in reverse preorder,
    // directly in block space.
    let nb = heap.len();
    let mut idom = vec![NONE; nb];
    let mut retained = vec![0u64; nb];
    let mut dominated = vec![0u32; nb];
    for w in (1..count).rev() {
        let b = (vertex[w] - 1) as usize;
        retained[b] += heap.size(BlockId(b as u32));
        dominated[b] += 1;
        let d = idom_d[w] as usize;
        if d != 0 {
            let db = (vertex[d] - 1) as usize;
            retained[db] += retained[b];
            dominated[db] += dominated[b];
            idom[b] = db as u32;
        }
    }
    Dominators { idom: idom.into(), retained: retained.into(), dominated: dominated.into() }
}

/// Calls `f(slots, v, w)` for every edge v -> w of the graph (nodes: the
/// virtual root 0, block b as b + 1), in block order, where `slots` is
/// indexed by the target's number `dfn[w][0]`. Reading the heap's edges in
/// order, it prefetches two stages ahead: a target's number, then (once
/// that has arrived) its slot.
fn for_edges(heap: &Heap, root_children: &[u32], dfn: &[[u32; 2]], slots: &mut [u32], mut f: impl FnMut(&mut [u32], usize, u32)) {
    const AHEAD: usize = 16;
    let (starts, targets) = heap.raw_edges();
    let node_at = |k: usize| targets.get(k).map_or(0, |&t| (t & !INTERIOR) as usize + 1);
    for &w in root_children {
        f(slots, 0, w);
    }
    for b in 0..heap.len() {
        for k in starts[b] as usize..starts[b + 1] as usize {
            prefetch(dfn, node_at(k + 2 * AHEAD));
            if let Some(&[d, _]) = dfn.get(node_at(k + AHEAD)) {
                prefetch(slots, d as usize);
            }
            f(slots, b + 1, node_at(k) as u32);
        }
    }
}

/// A node's state in the semi-NCA computation (see [`compute_with`]).
struct Info {
    ancestor: u32,
    best: u32,
    semi: u32,
}

/// Lengauer–Tarjan's `eval` with path compression, iterative: the smallest
/// semidominator number on the path from `v` up to (not including) the
/// root of its tree in the forest of nodes numbered `linked` and above.
fn eval(v: u32, linked: u32, info: &mut [Info], path: &mut Vec<u32>) -> u32 {
    let mut x = v;
    if info[x as usize].ancestor < linked {
        // Unlinked (its best is its own number), or a root's child.
        return info[x as usize].best;
    }
    path.clear();
    loop {
        path.push(x);
        x = info[x as usize].ancestor;
        if info[x as usize].ancestor < linked {
            break;
        }
    }
    // x is the path's top (its ancestor is the root): compress from there
    // down, each node pointing at the root and keeping the smallest best.
    let (root, mut best) = (info[x as usize].ancestor, info[x as usize].best);
    while let Some(y) = path.pop() {
        let node = &mut info[y as usize];
        node.ancestor = root;
        if best < node.best {
            node.best = best;
        } else {
            best = node.best;
        }
    }
    best
}
