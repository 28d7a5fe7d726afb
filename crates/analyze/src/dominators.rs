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

use crate::heap::{BlockId, Heap};

const NONE: u32 = u32::MAX;

/// The dominator tree.
pub struct Dominators {
    /// Immediate dominator of each block (`None` = the virtual root), by
    /// [`BlockId`]; unreachable blocks (none, given the extra roots) are `None`.
    idom: Vec<u32>,
    /// Bytes each block's dominator subtree holds, itself included.
    pub retained: Vec<u64>,
    /// Number of blocks each block dominates, itself included.
    pub dominated: Vec<u32>,
}

impl Dominators {
    /// Immediate dominator, or `None` when it is the root.
    pub fn idom(&self, b: BlockId) -> Option<BlockId> {
        let d = self.idom[b.index()];
        (d != NONE).then_some(BlockId(d))
    }

    /// Blocks whose immediate dominator is the virtual root.
    pub fn top_level(&self) -> impl Iterator<Item = BlockId> + '_ {
        self.idom.iter().enumerate().filter(|(_, &d)| d == NONE).map(|(i, _)| BlockId(i as u32))
    }
}

/// Computes dominators from the roots, then from `extra_roots` (in order)
/// for whatever the roots do not reach.
pub fn compute(heap: &Heap, extra_roots: &[BlockId]) -> Dominators {
    let n = heap.len() + 1;
    // Children of the virtual root, deduplicated, in order.
    let mut root_children: Vec<u32> = Vec::new();
    {
        let mut seen = vec![false; n];
        for r in &heap.roots {
            let v = r.target.0 + 1;
            if !seen[v as usize] {
                seen[v as usize] = true;
                root_children.push(v);
            }
        }
        for b in extra_roots {
            let v = b.0 + 1;
            if !seen[v as usize] {
                seen[v as usize] = true;
                root_children.push(v);
            }
        }
    }
    fn succ(heap: &Heap, root_children: &[u32], v: u32, out: &mut Vec<u32>) {
        out.clear();
        if v == 0 {
            out.extend_from_slice(root_children);
        } else {
            out.extend(heap.edges(BlockId(v - 1)).map(|e| e.target.0 + 1));
        }
    }

    // Iterative DFS: preorder numbers (1-based; 0 = unvisited), parents.
    let mut dfn = vec![0u32; n];
    let mut vertex: Vec<u32> = Vec::with_capacity(n); // dfn-1 -> node
    let mut parent: Vec<u32> = Vec::with_capacity(n); // by dfn-1, parent's dfn-1
    {
        // Stack of (node, next child index); children fetched on demand.
        let mut stack: Vec<(u32, u32)> = vec![(0, 0)];
        dfn[0] = 1;
        vertex.push(0);
        parent.push(NONE);
        let mut buf = Vec::new();
        while let Some(&mut (v, ref mut i)) = stack.last_mut() {
            succ(heap, &root_children, v, &mut buf);
            let mut pushed = false;
            while (*i as usize) < buf.len() {
                let w = buf[*i as usize];
                *i += 1;
                if dfn[w as usize] == 0 {
                    vertex.push(w);
                    parent.push(dfn[v as usize] - 1);
                    dfn[w as usize] = vertex.len() as u32;
                    stack.push((w, 0));
                    pushed = true;
                    break;
                }
            }
            if !pushed {
                stack.pop();
            }
        }
        // The leaders may not reach everything if a caller passed too few:
        // any block still unvisited hangs off the root too.
        for start in 1..n as u32 {
            if dfn[start as usize] != 0 {
                continue;
            }
            root_children.push(start);
            vertex.push(start);
            parent.push(0);
            dfn[start as usize] = vertex.len() as u32;
            let mut stack: Vec<(u32, u32)> = vec![(start, 0)];
            while let Some(&mut (v, ref mut i)) = stack.last_mut() {
                succ(heap, &root_children, v, &mut buf);
                let mut pushed = false;
                while (*i as usize) < buf.len() {
                    let w = buf[*i as usize];
                    *i += 1;
                    if dfn[w as usize] == 0 {
                        vertex.push(w);
                        parent.push(dfn[v as usize] - 1);
                        dfn[w as usize] = vertex.len() as u32;
                        stack.push((w, 0));
                        pushed = true;
                        break;
                    }
                }
                if !pushed {
                    stack.pop();
                }
            }
        }
    }
    let count = vertex.len();

    // Predecessors in dfn space (CSR).
    let mut pred_start = vec![0u32; count + 1];
    {
        let mut buf = Vec::new();
        for &v in &vertex {
            succ(heap, &root_children, v, &mut buf);
            for &w in &buf {
                pred_start[dfn[w as usize] as usize] += 1;
            }
        }
        for i in 0..count {
            pred_start[i + 1] += pred_start[i];
        }
    }
    let mut preds = vec![0u32; pred_start[count] as usize];
    {
        let mut fill = pred_start.clone();
        let mut buf = Vec::new();
        for (vi, &v) in vertex.iter().enumerate() {
            succ(heap, &root_children, v, &mut buf);
            for &w in &buf {
                let wi = dfn[w as usize] as usize - 1;
                preds[fill[wi] as usize] = vi as u32;
                fill[wi] += 1;
            }
        }
    }
    drop(dfn);

    // Semi-NCA in dfn space (0-based).
    let mut semi: Vec<u32> = (0..count as u32).collect();
    let mut label: Vec<u32> = (0..count as u32).collect();
    let mut ancestor = vec![NONE; count];
    let mut path: Vec<u32> = Vec::new();
    for w in (1..count).rev() {
        let mut s = semi[w];
        for &v in &preds[pred_start[w] as usize..pred_start[w + 1] as usize] {
            let u = eval(v, &mut ancestor, &mut label, &semi, &mut path);
            s = s.min(semi[u as usize]);
        }
        semi[w] = s;
        ancestor[w] = parent[w];
    }
    drop((ancestor, label, preds, pred_start, path));
    let mut idom_d = vec![0u32; count];
    for w in 1..count {
        let mut d = parent[w];
        while d > semi[w] {
            d = idom_d[d as usize];
        }
        idom_d[w] = d;
    }

    // Back to block ids; retained sizes bottom-up in reverse preorder.
    let nb = heap.len();
    let mut idom = vec![NONE; nb];
    let mut retained = vec![0u64; count];
    let mut dominated = vec![0u32; count];
    for w in (1..count).rev() {
        let b = vertex[w] - 1;
        retained[w] += heap.blocks[b as usize].size;
        dominated[w] += 1;
        let d = idom_d[w] as usize;
        retained[d] += retained[w];
        dominated[d] += dominated[w];
        idom[b as usize] = if d == 0 { NONE } else { vertex[d] - 1 };
    }
    let mut r = vec![0u64; nb];
    let mut c = vec![0u32; nb];
    for w in 1..count {
        let b = (vertex[w] - 1) as usize;
        r[b] = retained[w];
        c[b] = dominated[w];
    }
    Dominators { idom, retained: r, dominated: c }
}

/// Lengauer–Tarjan `eval` with path compression, iterative.
fn eval(v: u32, ancestor: &mut [u32], label: &mut [u32], semi: &[u32], path: &mut Vec<u32>) -> u32 {
    if ancestor[v as usize] == NONE {
        return v;
    }
    // Collect the path up to the node whose ancestor is a tree root.
    path.clear();
    let mut x = v;
    while ancestor[ancestor[x as usize] as usize] != NONE {
        path.push(x);
        x = ancestor[x as usize];
    }
    // Compress from the top down.
    while let Some(y) = path.pop() {
        let a = ancestor[y as usize];
        if semi[label[a as usize] as usize] < semi[label[y as usize] as usize] {
            label[y as usize] = label[a as usize];
        }
        ancestor[y as usize] = ancestor[a as usize];
    }
    label[v as usize]
}
