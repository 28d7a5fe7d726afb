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
use crate::huge_tables::huge_pages;
use crate::phases::mark;
use crate::prefetch::prefetch;
use crate::slab::Slab;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

const NONE: u32 = u32::MAX;
/// In [`Walk::first`]: the node has more than two edges.
const MORE: u32 = u32::MAX;

/// The dominator tree.
pub struct Dominators {
    /// Immediate dominator of each block (`None` = the virtual root), by
    /// [`BlockId`]; unreachable blocks (none, given the extra roots) are `None`.
    idom: Slab<u32>,
    /// Bytes each block's dominator subtree holds, itself included.
    pub retained: Slab<u64>,
    /// Number of blocks each block dominates, itself included.
    pub dominated: Slab<u32>,
    /// The children lists: made by the computation in its own spent
    /// memory, read from a cache, or made when first asked for.
    children: std::sync::OnceLock<Children>,
}

/// The dominator tree's children lists: those of block `b` are
/// `list[start[b]..start[b + 1]]`, the virtual root's at index `n`, each
/// largest retained size first (then by block).
pub(crate) struct Children {
    pub(crate) start: Slab<u32>,
    pub(crate) list: Slab<u32>,
}

impl Children {
    /// The blocks block `p` immediately dominates (`n`: the virtual root).
    pub(crate) fn of(&self, p: usize) -> &[u32] {
        &self.list[self.start[p] as usize..self.start[p + 1] as usize]
    }
}

impl Dominators {
    /// A tree as [`Dominators::parts`] gave it (from a cache).
    pub fn from_parts(idom: Slab<u32>, retained: Slab<u64>, dominated: Slab<u32>) -> Dominators {
        Dominators { idom, retained, dominated, children: Default::default() }
    }

    /// The children lists (made now when neither the computation nor a
    /// cache gave them).
    pub(crate) fn children(&self) -> &Children {
        self.children.get_or_init(|| {
            let (start, list) = children_lists(&self.idom, &self.retained, Vec::new(), Vec::new());
            Children { start: start.into(), list: list.into() }
        })
    }

    /// Children lists a cache kept (ignored when the tree has its own).
    pub(crate) fn set_children(&self, c: Children) {
        let _ = self.children.set(c);
    }

    /// The immediate dominators (`u32::MAX`: the virtual root), retained
    /// sizes and dominated counts, by block.
    pub fn parts(&self) -> (&[u32], &[u64], &[u32]) {
        (&self.idom, &self.retained, &self.dominated)
    }

    /// The immediate dominators' table (moved to a file by
    /// [`crate::spill::after_dominators`]).
    pub(crate) fn idom_table(&self) -> &Slab<u32> {
        &self.idom
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
        let children = self.children();
        let mut out = vec![0u64; groups];
        let mut on_path = vec![0u32; groups];
        // (block, entered): entering adds the block to its group's path
        // count (and its subtree to the group when it is the first on the
        // path), leaving takes it off.
        let mut stack: Vec<(u32, bool)> = children.of(self.idom.len()).iter().map(|&c| (c, false)).collect();
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
            stack.extend(children.of(b as usize).iter().map(|&c| (c, false)));
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
/// leaders. Both cores work from the start: this thread walks the graph
/// from the roots (which needs the leaks only then, for the leaders)
/// while another classifies the blocks, hands the classes over, then
/// builds the predecessor lists (needed once the whole walk is done)
/// while this one walks on from the leaders. (Built by this thread while
/// it waited for the classes, on a heap that is mostly lost, whose walk
/// from the roots is short, the lists came after the classes, and the
/// walk from the leaders waited for them: 0.1-0.25 s of `retained` on
/// benches/c/mostly_lost.c's 10 M blocks.)
pub fn with_leaks(heap: &Heap, contents: &(dyn crate::leaks::Contents + Sync)) -> (crate::leaks::Leaks, Dominators) {
    let given_flag = AtomicBool::new(false);
    std::thread::scope(|s| {
        let (classes, given) = std::sync::mpsc::sync_channel(1);
        let ready = &given_flag;
        let other = s.spawn(move || {
            let leaks = crate::leaks::analyze(heap, contents);
            mark("leak classes");
            // The leaders listed here, on the thread whose work waits
            // least on them (100 M blocks, 33 M leaders: 0.6 s).
            let heads = leaks.heads();
            mark("leaders listed");
            // Nobody waiting means the walk has stopped: its panic goes on.
            let _ = classes.send((leaks, heads));
            ready.store(true, Ordering::Release);
            let p = Predecessors::of(heap);
            mark("predecessor lists");
            p
        });
        let mut got = None;
        let d = compute_in(
            heap,
            || match given.recv() {
                Ok((l, heads)) => {
                    got = Some(l);
                    heads
                }
                // The other thread panicked: joining it, for the
                // predecessor lists, carries its panic on.
                Err(_) => Vec::new(),
            },
            Some(ready),
            || joined(other),
        );
        (got.expect("the leak classes were given"), d)
    })
}

/// A scoped thread's result (its panic carried on).
fn joined<T>(h: std::thread::ScopedJoinHandle<'_, T>) -> T {
    h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
}

/// [`with_leaks`] over a loaded dump, the heuristics reading its contents.
pub fn of_dump(file: &crate::DumpFile, heap: &Heap) -> (crate::leaks::Leaks, Dominators) {
    with_leaks(heap, &crate::DumpContents::build(file, heap))
}

/// [`compute`], asking for the extra roots only once the walk from the
/// roots is done (the same tree: the extra roots come after the roots
/// among the virtual root's children). The predecessor lists are built on
/// a second thread while the walk runs.
pub fn compute_with(heap: &Heap, extra_roots: impl FnOnce() -> Vec<BlockId>) -> Dominators {
    std::thread::scope(|s| {
        let helper = s.spawn(|| Predecessors::of(heap));
        compute_in(heap, extra_roots, None, || helper.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
    })
}

/// The dominator computation, `predecessors` giving the heap's
/// predecessor lists once the depth-first walk is done.
///
/// `leaders`, when the extra roots are the leak classes' leaders, says
/// whether they are ready (until they are, the walk goes on from the
/// blocks that are leaders whatever the classes say).
fn compute_in(
    heap: &Heap,
    extra_roots: impl FnOnce() -> Vec<BlockId>,
    leaders: Option<&AtomicBool>,
    predecessors: impl FnOnce() -> Predecessors,
) -> Dominators {
    let n = heap.len() + 1;
    // Children of the virtual root, deduplicated, in order.
    let mut root_children: Vec<u32> = Vec::new();
    // Which nodes are children already: a bit each (the extra roots of a
    // heap that is mostly lost are millions).
    let mut is_child = vec![0u64; n.div_ceil(64)];
    let child = |is_child: &mut [u64], v: u32| {
        let (w, bit) = (v as usize / 64, 1u64 << (v % 64));
        let new = is_child[w] & bit == 0;
        is_child[w] |= bit;
        new
    };
    for r in &heap.roots {
        let v = r.target.0 + 1;
        if child(&mut is_child, v) {
            root_children.push(v);
        }
    }
    // The walk's state by node (see [`Walk`]), and by preorder number each
    // node's DFS parent (kept until the immediate dominators are made:
    // read in order there, where a parent looked for in the node's
    // predecessor list was two reads at random; on a heap the roots reach
    // whole, whose peak is then the semidominators, it costs 4 bytes a
    // block of it: benches/c/dense.c 33.5 -> 37.5). (Once the walk is done,
    // its memory holds the semidominator records, 12 bytes a node: fresh
    // pages cost a fault each, on this VM the host's too, 7-30 us.)
    let mut parents: Vec<u32> = vec![0; n];
    huge_pages(&parents);
    let parent = &mut parents[..];
    let mut walk: Vec<Walk> = bytemuck::allocation::zeroed_vec(n);
    huge_pages(&walk);
    debug_assert!(walk.as_ptr().cast::<u8>().align_offset(16) == 0, "records in one cache line each");
    let (starts, targets) = heap.raw_edges();
    let node = |t: u32| (t & !INTERIOR) + 1;
    Walk::fill(&mut walk, starts, targets);
    mark("walk's records");
    // Iterative DFS: preorder numbers (1-based; 0 = unvisited), parents.
    // Instead of a stack, each node keeps its next edge in its record
    // and the walk climbs back through `parent`. Node v's edges are its
    // record's `first` or `targets[starts[v - 1]..starts[v]]`; the virtual
    // root's are `root_children`, walked below, one walk from each.
    // (One more than the walk needs: the children lists' starts, n + 1 of
    // them, take this memory at the end; a push past it, in
    // `children_lists`, moved 400 MB to fresh pages at 100 M blocks.)
    let mut vertex: Vec<u32> = Vec::with_capacity(n + 1); // dfn-1 -> node
    huge_pages(&vertex);
    const AHEAD: usize = 16;
    // Entering w from the node numbered p (0-based): its record is
    // already asked for (entering its parent asked for those of its
    // targets), and entering it asks for those of its own.
    let enter = |w: u32, p: u32, walk: &mut [Walk], vertex: &mut Vec<u32>, parent: &mut [u32]| {
        parent[vertex.len()] = p;
        vertex.push(w);
        let r = &mut walk[w as usize];
        r.number = vertex.len() as u32;
        if r.first[0] == MORE {
            let (k, end) = (starts[w as usize - 1], starts[w as usize]);
            r.next = k;
            if end - k <= AHEAD as u32 {
                for &u in &targets[k as usize..end as usize] {
                    prefetch(walk, node(u) as usize);
                }
            }
        } else {
            let first = r.first;
            prefetch(walk, first[0] as usize);
            prefetch(walk, first[1] as usize);
        }
    };
    // Where the numbers can divide into two runs of whole walks (see
    // [`Run`]): the first end of a walk in each of [`PARTS`] parts of the
    // numbers (the work in each part is counted as the lists are
    // renumbered, and the run split at the end nearest half of it).
    let part = part_of(n);
    let mut ends: Vec<usize> = Vec::new();
    let mut dfs_from = |start: u32, walk: &mut [Walk], vertex: &mut Vec<u32>, parent: &mut [u32]| {
        let root = vertex.len();
        enter(start, 0, walk, vertex, parent);
        let mut cur = root;
        let mut v = start;
        loop {
            let r = &mut walk[v as usize];
            let w = if r.first[0] != MORE {
                // A node of two edges or fewer (most of a heap's nodes):
                // its targets are in its record.
                match r.first.get(r.next as usize) {
                    Some(&w) if w != 0 => {
                        r.next += 1;
                        w
                    }
                    _ => 0,
                }
            } else {
                let (k, end) = (r.next as usize, starts[v as usize] as usize);
                if k < end {
                    r.next += 1;
                    // A node of many edges (an array of pointers, a hash
                    // table: where most of a large heap hangs) is read a
                    // few edges ahead, in two stages: a target's record,
                    // then those of its own first targets, which the walk
                    // reads when it enters it (otherwise a miss each, one
                    // after the other: the walk of benches/c/dense.c's
                    // 10 M blocks of two random pointers, held from one
                    // array, took 2.2 s without this, 1.1 s with it).
                    if let Some(&t) = targets[..end].get(k + 2 * AHEAD) {
                        prefetch(walk, node(t) as usize);
                    }
                    if let Some(&t) = targets[..end].get(k + AHEAD) {
                        let first = walk[node(t) as usize].first;
                        if first[0] != MORE {
                            prefetch(walk, first[0] as usize);
                            prefetch(walk, first[1] as usize);
                        }
                    }
                    node(targets[k])
                } else {
                    0
                }
            };
            if w != 0 {
                if walk[w as usize].number == 0 {
                    enter(w, cur as u32, walk, vertex, parent);
                    cur = vertex.len() - 1;
                    v = w;
                }
            } else if cur == root {
                break;
            } else {
                cur = parent[cur] as usize;
                v = vertex[cur];
            }
        }
        let end = vertex.len();
        if ends.last().is_none_or(|&e| part(e) < part(end)) {
            ends.push(end);
        }
    };
    // The virtual root, numbered 1, then a walk from each of its children
    // in turn: the roots' targets, then the extra roots, then whatever
    // neither reaches.
    parent[0] = NONE;
    vertex.push(0);
    walk[0].number = 1;
    for &c in &root_children {
        if walk[c as usize].number == 0 {
            dfs_from(c, &mut walk, &mut vertex, parent);
        }
    }
    // The extra roots, in order, each a walk (most of them short on a
    // heap that is mostly lost: a leader and a block or two below it,
    // walks that the read-ahead inside a walk cannot follow). So the
    // walks are read ahead across the leaders, in three stages: a
    // leader's record, then (arrived by then) the records of its
    // targets, then those of its targets' targets not walked yet (the
    // walk of benches/c/mostly_lost.c's 10 M blocks: 1.59 s with the
    // first stage alone, 0.77 s with the three).
    let mut lead = |extra: &[BlockId], walk: &mut [Walk], vertex: &mut Vec<u32>, parent: &mut [u32], is_child: &mut [u64]| {
        for (j, b) in extra.iter().enumerate() {
            if let Some(a) = extra.get(j + 2 * AHEAD) {
                prefetch(walk, a.index() + 1);
            }
            if let Some(a) = extra.get(j + AHEAD) {
                let first = walk[a.index() + 1].first;
                if first[0] != MORE {
                    prefetch(walk, first[0] as usize);
                    prefetch(walk, first[1] as usize);
                }
            }
            if let Some(a) = extra.get(j + AHEAD / 2) {
                let first = walk[a.index() + 1].first;
                if first[0] != MORE {
                    for t in first {
                        let r = &walk[t as usize];
                        if t != 0 && r.number == 0 && r.first[0] != MORE {
                            prefetch(walk, r.first[0] as usize);
                            prefetch(walk, r.first[1] as usize);
                        }
                    }
                }
            }
            let v = b.0 + 1;
            if child(is_child, v) {
                root_children.push(v);
                if walk[v as usize].number == 0 {
                    dfs_from(v, walk, vertex, parent);
                }
            }
        }
    };
    mark("walk from the roots");
    // While the leak classes are still being made (on a heap that is
    // mostly lost they take longer than the walk from the roots), the
    // walks from the blocks the roots do not reach and nothing points to.
    // Each is a leader (no walk of the lost blocks reaches it, so none
    // demotes it: see `leaks.rs`), which the extra roots will name: the
    // tree is the same, and this thread walks instead of waiting. (On
    // benches/c/mostly_lost.c's heap, whose lost part has no cycle, every
    // leader is one of them.)
    if leaders.is_some_and(|ready| !ready.load(Ordering::Acquire)) && vertex.len() < n {
        let mut pointed_to = vec![0u64; n.div_ceil(64)];
        for &t in targets {
            let v = node(t) as usize;
            pointed_to[v / 64] |= 1 << (v % 64);
        }
        const CHUNK: usize = 1 << 12;
        let mut sources: Vec<BlockId> = Vec::with_capacity(CHUNK);
        for v in 1..n {
            if walk[v].number == 0 && pointed_to[v / 64] & 1 << (v % 64) == 0 {
                sources.push(BlockId(v as u32 - 1));
                if sources.len() == CHUNK {
                    lead(&sources, &mut walk, &mut vertex, parent, &mut is_child);
                    sources.clear();
                }
            }
        }
        lead(&sources, &mut walk, &mut vertex, parent, &mut is_child);
        mark("walk from the unreached blocks nothing points to");
    }
    let mut extra = extra_roots();
    // (Those walked already left out before the read-ahead reads them.)
    extra.retain(|b| {
        let v = b.index() + 1;
        is_child[v / 64] & 1 << (v % 64) == 0
    });
    lead(&extra, &mut walk, &mut vertex, parent, &mut is_child);
    drop(extra);
    drop(is_child);
    for start in 1..n as u32 {
        if walk[start as usize].number == 0 {
            root_children.push(start);
            dfs_from(start, &mut walk, &mut vertex, parent);
        }
    }
    let count = vertex.len();
    debug_assert_eq!(count, n, "every node is walked");
    mark("walk from the leaders");

    // The heap's predecessor lists (by node, built while the walk ran),
    // renumbered in place to preorder numbers (0-based): then the walk's
    // records go. Two threads, each over half of the nodes.
    // The preorder numbers, by node, packed four bytes each at the start
    // of the walk's memory (the lists' renumbering reads them at random:
    // a quarter of the pages): node v's, the first word of its record,
    // moved to word v, read before it is written over (in increasing
    // order, word v lies in record v / 4 or an earlier one, read
    // already). Then the memory cut to the records' 12 bytes a node (the
    // rest given back).
    const _: () = assert!(std::mem::offset_of!(Walk, number) == 0);
    let mut records: Vec<u32> = bytemuck::allocation::cast_vec(walk);
    for v in 0..n {
        records[v] = records[4 * v];
    }
    records.truncate(3 * n);
    records.shrink_to_fit();
    let dfn = &records[..n];
    let Predecessors { start, mut preds } = predecessors();
    let mid = n / 2;
    let (low, high) = preds.split_at_mut(start[mid] as usize);
    mark("records made (waited for the predecessor lists)");
    let work = std::thread::scope(|s| {
        let start = &start;
        let other = s.spawn(move || renumber(dfn, mid, &start[mid..], high, &part));
        let mut work = renumber(dfn, 0, &start[..=mid], low, &part);
        for (w, o) in work.iter_mut().zip(joined(other)) {
            *w += o;
        }
        work
    });
    // The virtual root's children, by number (0-based): their
    // semidominator is it.
    for c in root_children.iter_mut() {
        *c = dfn[*c as usize] - 1;
    }
    // Semi-NCA in dfn space (0-based), on two threads when the walks
    // divide near the middle (see [`Run`]), each over its run of whole
    // walks: semidominators and immediate dominators in one pass, then,
    // once the predecessor lists are spent and their memory holds the
    // immediate dominators and counts by block, the retained sums.
    let info = &mut bytemuck::cast_slice_mut::<u32, Info>(&mut records)[..count];
    let runs = {
        let total: u64 = work.iter().sum();
        let before = |e: usize| work[..part(e)].iter().sum::<u64>();
        let split = ends.iter().copied().filter(|&e| e > 1 && e < count).min_by_key(|&e| (2 * before(e)).abs_diff(total));
        split.map(|e| e as u32)
    };
    mark("lists renumbered");
    Run::each(info, runs, &vertex, |r| r.dominators(&start, &preds, &parents, &root_children));
    drop(root_children);
    drop(parents);
    mark("semidominators and immediate dominators");

    // Retained sizes bottom-up in reverse preorder, in preorder space in
    // the records (`best` and `semi` hold one's low and high halves: no
    // fresh memory, and the additions go to records, not to blocks);
    // immediate dominators and counts in block space, in the lists'
    // tables, done with (memory the process has touched already: fresh
    // pages cost a fault each).
    let nb = heap.len();
    let mut idom = reuse(preds, nb, NONE);
    let mut dominated = reuse(start, nb, 0);
    // Each block's retained size, written by block as its sum is final:
    // zeroed memory the kernel maps as the two runs write it (written
    // whole by one thread first, its 800 MB at 100 M blocks of fresh huge
    // pages took 1-2 s on this VM, whose host backs each page at its
    // first touch).
    let retained: Vec<AtomicU64> = bytemuck::allocation::zeroed_vec(nb);
    huge_pages(&retained);
    {
        let (idom, dominated) = (atomics(&mut idom), atomics(&mut dominated));
        Run::each(info, runs, &vertex, |r| r.sums(heap, idom, dominated, &retained));
    }
    // (In place: the same layout.)
    let retained: Vec<u64> = retained.into_iter().map(AtomicU64::into_inner).collect();
    mark("retained sums");
    // The children lists in the records' memory and `vertex`'s.
    let (start, list) = children_lists(&idom, &retained, records, vertex);
    mark("children lists");
    Dominators {
        idom: idom.into(),
        retained: retained.into(),
        dominated: dominated.into(),
        children: Children { start: start.into(), list: list.into() }.into(),
    }
}

/// The dominator tree's children lists, `(start, list)`: those of block
/// `b` are `list[start[b]..start[b + 1]]`, the virtual root's at index
/// `n`, each largest retained size first (then by block). `list` and
/// `start` are memory to reuse, whatever they hold: past the lists' `n`
/// entries, `list`'s memory holds the long lists' sort keys, and is
/// given back at the end (memory the process has touched: fresh pages
/// cost a fault each).
///
/// The virtual root's list (on a heap that is mostly lost, most blocks:
/// 78 M of 100 M) is made and sorted by a thread of its own from the
/// start, beside the others' counting and filling (after them, its sort
/// alone took 2.6 s of the lists' 6 s at 100 M blocks).
pub(crate) fn children_lists(idom: &[u32], retained: &[u64], mut list: Vec<u32>, mut start: Vec<u32>) -> (Vec<u32>, Vec<u32>) {
    let n = idom.len();
    let rooted = idom.iter().filter(|&&d| d == NONE).count();
    let others = n - rooted;
    start.clear();
    start.resize(n + 2, 0);
    if list.len() < n {
        list.resize(n, 0);
    }
    let (lists, spare) = list.split_at_mut(n);
    let (_, keys, _) = bytemuck::pod_align_to_mut::<u32, u64>(spare);
    // The keys: the root's first (as many as its children, where they
    // fit), the rest for the other lists (as long as their longest two,
    // one in each half, need: the lists are disjoint, so they fit beside
    // the root's where the spare holds one key a block).
    let (keys_root, keys) = keys.split_at_mut(rooted.min(keys.len()));
    let (lists, root_list) = lists.split_at_mut(others);
    std::thread::scope(|s| {
        s.spawn(|| {
            for (slot, (i, _)) in root_list.iter_mut().zip(idom.iter().enumerate().filter(|(_, &d)| d == NONE)) {
                *slot = i as u32;
            }
            by_retained(root_list, retained, keys_root);
        });
        // The other lists: counted, then filled from their ends in
        // reverse block order (each comes out in block order, and
        // `start[p]` ends at the start of p's list).
        for &d in idom.iter().filter(|&&d| d != NONE) {
            start[d as usize] += 1;
        }
        let mut end = 0;
        for s in &mut start[..n] {
            end += *s;
            *s = end;
        }
        for (i, &d) in idom.iter().enumerate().rev().filter(|(_, &d)| d != NONE) {
            start[d as usize] -= 1;
            lists[start[d as usize] as usize] = i as u32;
        }
        start[n] = others as u32;
        start[n + 1] = n as u32;
        // Sorted on two threads, each over about half of these children,
        // each with its share of the keys: as much as its longest list
        // needs, where both fit, else all of them to the one with the
        // longer list.
        let q = start[..n].partition_point(|&s| (s as usize) < others / 2).min(n);
        let longest = |p: std::ops::Range<usize>| p.map(|p| (start[p + 1] - start[p]) as usize).max().unwrap_or(0);
        let (need_low, need_high) = (longest(0..q), longest(q..n));
        let (keys_low, keys_high) = if need_low + need_high <= keys.len() {
            keys.split_at_mut(need_low)
        } else if need_low > need_high {
            keys.split_at_mut(keys.len())
        } else {
            keys.split_at_mut(0)
        };
        let (low, high) = lists.split_at_mut(start[q] as usize);
        let start = &start;
        let sort = |lists: std::ops::Range<usize>, part: &mut [u32], keys: &mut [u64]| {
            let base = start[lists.start] as usize;
            for p in lists {
                by_retained(&mut part[start[p] as usize - base..start[p + 1] as usize - base], retained, keys);
            }
        };
        s.spawn(move || sort(q..n, high, keys_high));
        sort(0..q, low, keys_low);
    });
    list.truncate(n);
    list.shrink_to_fit();
    (start, list)
}

/// Sorts blocks (given in ascending order) largest retained size first,
/// then by block: a total order, so an unstable sort gives the stable
/// one's. A long list (the virtual root's on a heap that is mostly lost:
/// millions of leaders) is sorted by a radix sort of packed keys, the
/// retained size's complement over the block, by the complement alone
/// (stable: the blocks stay in their order among equal sizes; a
/// comparison sort of 7.8 M children took 0.34 s at 10 M blocks, 3.6 s
/// at 100 M); a size of 4 GiB or more, which the key clamps, sorts first
/// and is then put in order by comparison (at most one such sibling per
/// 4 GiB of heap). The keys are made in `spare` where it is long enough.
fn by_retained(s: &mut [u32], retained: &[u64], spare: &mut [u64]) {
    const RADIX_FROM: usize = 1 << 12;
    let cmp = |&a: &u32, &b: &u32| retained[b as usize].cmp(&retained[a as usize]).then(a.cmp(&b));
    if s.len() < RADIX_FROM {
        s.sort_unstable_by(cmp);
        return;
    }
    debug_assert!(s.is_sorted());
    let clamp = u64::from(u32::MAX);
    let mut own = Vec::new();
    let keys = match spare.get_mut(..s.len()) {
        Some(k) => k,
        None => {
            own.resize(s.len(), 0);
            &mut own[..]
        }
    };
    for (k, &b) in keys.iter_mut().zip(s.iter()) {
        *k = u64::from(!(retained[b as usize].min(clamp) as u32)) << 32 | u64::from(b);
    }
    radsort::sort_by_key(keys, |k| (k >> 32) as u32);
    let clamped = keys.partition_point(|&k| k >> 32 == 0);
    for (b, k) in s.iter_mut().zip(keys.iter()) {
        *b = *k as u32;
    }
    s[..clamped].sort_unstable_by(cmp);
}

/// `v` made `n` times `x`, in its own memory as far as it goes (what it
/// held past `n` given back first).
fn reuse(mut v: Vec<u32>, n: usize, x: u32) -> Vec<u32> {
    v.truncate(n);
    v.shrink_to_fit();
    v.fill(x);
    v.resize(n, x);
    v
}

/// The heap's predecessor lists, by node (the virtual root 0, block b as
/// b + 1): node v's are `preds[start[v]..start[v + 1]]`. The virtual
/// root's edges are not in them.
struct Predecessors {
    start: Vec<u32>,
    preds: Vec<u32>,
}

impl Predecessors {
    /// Counts each node's predecessors, then fills the lists from their
    /// ends, reading the heap's edges in order (a target's count
    /// prefetched a few edges ahead: the writes go all over the tables).
    fn of(heap: &Heap) -> Predecessors {
        const AHEAD: usize = 16;
        let n = heap.len() + 1;
        let (starts, targets) = heap.raw_edges();
        let node_at = |k: usize| targets.get(k).map_or(n, |&t| (t & !INTERIOR) as usize + 1);
        let mut start = vec![0u32; n + 1];
        huge_pages(&start);
        for k in 0..targets.len() {
            prefetch(&start, node_at(k + AHEAD));
            start[node_at(k)] += 1;
        }
        // start[v]: the end of v's list.
        for v in 1..n {
            start[v] += start[v - 1];
        }
        start[n] = targets.len() as u32;
        let mut preds = vec![0u32; targets.len()];
        huge_pages(&preds);
        for b in 0..heap.len() {
            for k in starts[b] as usize..starts[b + 1] as usize {
                prefetch(&start, node_at(k + AHEAD));
                let w = node_at(k);
                start[w] -= 1;
                preds[start[w] as usize] = b as u32 + 1;
            }
        }
        Predecessors { start, preds }
    }
}

/// Renumbers the lists of the nodes from `first` on that `start` bounds
/// (`start[0]` at `preds[0]`) from nodes to preorder numbers (0-based).
/// Returns the work of the semidominators and dominators these nodes
/// make, by [`PARTS`] of their numbers (`part`): a node's own, weighed
/// as [`NODE`] predecessors, and its predecessors'.
fn renumber(dfn: &[u32], first: usize, start: &[u32], preds: &mut [u32], part: &impl Fn(usize) -> usize) -> [u64; PARTS] {
    const AHEAD: usize = 16;
    let base = start[0] as usize;
    let mut work = [0u64; PARTS];
    for i in 0..start.len() - 1 {
        let v = first + i;
        let range = start[i] as usize - base..start[i + 1] as usize - base;
        for k in range.clone() {
            if let Some(&ahead) = preds.get(k + AHEAD) {
                prefetch(dfn, ahead as usize);
            }
            preds[k] = dfn[preds[k] as usize] - 1;
        }
        work[part(dfn[v] as usize - 1)] += NODE + range.len() as u64;
    }
    work
}

/// The parts the preorder numbers are counted in, to divide the nodes
/// into two runs of about equal work (see [`Run`]): a node's work is its
/// own (reading its records and lists, weighed as [`NODE`] predecessors)
/// and its predecessors' (each evaluated). (By nodes alone, on
/// benches/c/mostly_lost.c's 10 M blocks, whose first third, held from
/// the roots, has most of the edges into it, the first run took twice
/// the second's time.)
const PARTS: usize = 256;
const NODE: u64 = 3;

/// Which of [`PARTS`] parts of `n` numbers a number is in.
fn part_of(n: usize) -> impl Fn(usize) -> usize + Copy + Sync {
    let scale = ((PARTS as u64) << 32) / n.max(1) as u64;
    move |number: usize| (((number as u64 * scale) >> 32) as usize).min(PARTS - 1)
}

/// A node's state in the depth-first walk: 16 bytes, so that the one
/// cache miss entering a node costs brings all the walk reads of it
/// there (its number, and the targets of a node of two edges or fewer:
/// most nodes of most heaps). Through the edge table, a node's targets
/// were a second miss, which could be asked for only once the first had
/// arrived: on a heap that is mostly lost, walked from millions of
/// leaders in short walks that read-ahead cannot follow, the two were
/// waited for in turn at every node (the walk of benches/c/mostly_lost.c's
/// 10 M blocks took about 2.2 s, now about 1.2 s).
/// (Its alignment is a word's, so that its memory is taken over as
/// words for the semidominator records; the allocator's 16 bytes keep
/// each record in one cache line.)
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Walk {
    /// Preorder number, 1-based (0: not yet walked).
    number: u32,
    /// The node's targets, as node numbers (0: none), when it has two
    /// edges or fewer; `[MORE, _]` when it has more (in the edge table).
    first: [u32; 2],
    /// The next edge to follow: an index into `first`, or into the edge
    /// table for a node of more edges (set on entering it).
    next: u32,
}

impl Walk {
    /// Each node's targets, from the heap's edge table (node v's are
    /// `targets[starts[v - 1]..starts[v]]`).
    fn fill(walk: &mut [Walk], starts: &[u32], targets: &[u32]) {
        let node = |k: u32| (targets[k as usize] & !INTERIOR) + 1;
        for (v, r) in walk.iter_mut().enumerate().skip(1) {
            let (s, e) = (starts[v - 1], starts[v]);
            r.first = match e - s {
                0 => [0, 0],
                1 => [node(s), 0],
                2 => [node(s), node(s + 1)],
                _ => [MORE, 0],
            };
        }
    }
}

/// A run of nodes numbered `base..base + info.len()` (0-based preorder
/// numbers), made of whole walks from the virtual root's children (DFS
/// trees under it), and their records. Two runs are computed apart, on
/// two threads, with nothing shared but what both only read. A
/// predecessor `p` of a node `w` in another run is one of two cases,
/// each answered without its records. After the run (a later walk):
/// every node of its walk is processed when `w` is, so `eval(p)` climbs
/// to the walk's first node, a child of the root, whose semidominator is
/// the root: 0. Before the run (an earlier walk, numbered below `w`): not
/// processed yet, so `eval(p)` is its own number, `p`. Every other
/// record a node's computation reads (its forest ancestors, its
/// dominators) lies in its own walk, or is the root's, 0, which the
/// climbs stop at before reading it.
struct Run<'a> {
    info: &'a mut [Info],
    base: u32,
    vertex: &'a [u32],
}

impl<'a> Run<'a> {
    /// `f` over the records as one run, or as two (split at `runs`: the
    /// first number of the second) on two threads.
    fn each(info: &'a mut [Info], runs: Option<u32>, vertex: &'a [u32], f: impl Fn(Run<'_>) + Sync) {
        match runs {
            Some(mid) => {
                let (low, high) = info.split_at_mut(mid as usize);
                std::thread::scope(|s| {
                    s.spawn(|| f(Run { info: high, base: mid, vertex }));
                    f(Run { info: low, base: 0, vertex });
                });
            }
            None => f(Run { info, base: 0, vertex }),
        }
    }

    /// Semidominators, then immediate dominators (in place over the
    /// forest's ancestors), from the predecessor lists (renumbered), the
    /// DFS parents by number (`parent`, the virtual root's [`NONE`]) and
    /// the virtual root's children.
    fn dominators(self, start: &[u32], preds: &[u32], parent: &[u32], root_children: &[u32]) {
        let Run { info, base, vertex } = self;
        let end = base + info.len() as u32;
        let list = |w: u32| {
            let v = vertex[w as usize] as usize;
            &preds[start[v] as usize..start[v + 1] as usize]
        };
        // A walk's first node has the virtual root (0) for its parent.
        let parent_of = |w: u32| if w == 0 { 0 } else { parent[w as usize] };
        // Each node's record holds, side by side so that one cache miss
        // fetches them: its ancestor in the linked forest (its DFS parent
        // until path compression shortens it; a node is linked once its
        // number is past the one being processed), the smallest
        // semidominator number on its compressed path (`best`, what
        // Lengauer–Tarjan's `eval` returns the label of), and its own
        // semidominator number.
        let at = |x: u32| (x - base) as usize;
        let first = base.max(1);
        for w in base..end {
            info[at(w)] = Info { ancestor: parent_of(w), best: w, semi: w };
        }
        for &c in root_children.iter().filter(|&&c| (base..end).contains(&c)) {
            info[at(c)].semi = 0;
        }
        let mut path: Vec<u32> = Vec::new();
        // The nodes this loop reads a few steps on, prefetched in four
        // stages: a node's list bounds, its list, its predecessors, then
        // (once they have arrived) their ancestors. (A predecessor in
        // another run has no record here: `get` and `prefetch` skip it.)
        const AHEAD: u32 = 8;
        let ahead = |w: u32, k: u32| w.checked_sub(k * AHEAD).filter(|&a| a >= first);
        for w in (first..end).rev() {
            if let Some(a) = ahead(w, 4) {
                prefetch(start, vertex[a as usize] as usize);
            }
            if let Some(a) = ahead(w, 3) {
                prefetch(preds, start[vertex[a as usize] as usize] as usize);
            }
            if let Some(a) = ahead(w, 2) {
                for &p in list(a) {
                    prefetch(info, (p as usize).wrapping_sub(base as usize));
                }
            }
            if let Some(a) = ahead(w, 1) {
                for &p in list(a) {
                    if let Some(r) = info.get((p as usize).wrapping_sub(base as usize)) {
                        prefetch(info, (r.ancestor as usize).wrapping_sub(base as usize));
                    }
                }
            }
            let mut s = info[at(w)].semi;
            for &p in list(w) {
                let e = if p >= end {
                    0
                } else if p < base {
                    p
                } else {
                    eval(p, w + 1, info, base, &mut path)
                };
                s = s.min(e);
            }
            info[at(w)].semi = s;
            info[at(w)].best = s;
        }
        // Immediate dominators, in place over the ancestors (idom[w] needs
        // only idom of smaller numbers and semi[w] itself).
        // (A parent's record read a few nodes ahead: the climb's first
        // step, at random.)
        const IDOM_AHEAD: usize = 16;
        for w in first..end {
            if let Some(&p) = parent.get(w as usize + IDOM_AHEAD).filter(|&&p| p >= base && p < end) {
                prefetch(info, at(p));
            }
            let s = info[at(w)].semi;
            let mut d = parent_of(w);
            while d > s {
                d = info[at(d)].ancestor;
            }
            info[at(w)].ancestor = d;
            // Semi and best are spent: they hold w's retained size from now.
            info[at(w)].best = 0;
            info[at(w)].semi = 0;
        }
    }

    /// Retained sizes bottom-up in reverse preorder, summed in the
    /// records (`best` and `semi` hold one's low and high halves), each
    /// written to `retained` by block once final (when its node is
    /// reached: its subtree's nodes are numbered after it); each block's
    /// immediate dominator and dominated count by block, in `idom` and
    /// `dominated` (a run writes only its own blocks' entries).
    fn sums(self, heap: &Heap, idom: &[AtomicU32], dominated: &[AtomicU32], retained: &[AtomicU64]) {
        let Run { info, base, vertex } = self;
        let end = base + info.len() as u32;
        let at = |x: u32| (x - base) as usize;
        let get = |r: &Info| r.best as u64 | (r.semi as u64) << 32;
        let set = |r: &mut Info, x: u64| {
            r.best = x as u32;
            r.semi = (x >> 32) as u32;
        };
        // Each step reads its block's size and count and its dominator's
        // record, number and count, all over the tables: asked for a few
        // steps ahead, in two stages (the dominator's block number first).
        const SUM_AHEAD: u32 = 16;
        let first = base.max(1);
        let ahead = |w: u32, k: u32| w.checked_sub(k * SUM_AHEAD).filter(|&a| a >= first);
        let packed: &[crate::heap::Packed] = &heap.blocks.packed;
        let (load, store) = (|a: &AtomicU32| a.load(Ordering::Relaxed), |a: &AtomicU32, x| a.store(x, Ordering::Relaxed));
        for w in (first..end).rev() {
            if let Some(a) = ahead(w, 2) {
                prefetch(vertex, info[at(a)].ancestor as usize);
            }
            if let Some(a) = ahead(w, 1) {
                let (ab, d) = ((vertex[a as usize] - 1) as usize, info[at(a)].ancestor);
                prefetch(packed, ab);
                prefetch(dominated, ab);
                prefetch(idom, ab);
                prefetch(retained, ab);
                if d != 0 {
                    prefetch(info, at(d));
                    prefetch(dominated, (vertex[d as usize] - 1) as usize);
                }
            }
            let b = (vertex[w as usize] - 1) as usize;
            let r = get(&info[at(w)]) + heap.size(BlockId(b as u32));
            retained[b].store(r, Ordering::Relaxed);
            let own = load(&dominated[b]) + 1;
            store(&dominated[b], own);
            let d = info[at(w)].ancestor;
            if d != 0 {
                let db = (vertex[d as usize] - 1) as usize;
                let rd = get(&info[at(d)]) + r;
                set(&mut info[at(d)], rd);
                store(&dominated[db], load(&dominated[db]) + own);
                store(&idom[b], db as u32);
            }
        }
    }
}

/// `v` seen as atomics, so that two threads each write their own
/// entries of it (relaxed loads and stores: plain moves).
fn atomics(v: &mut [u32]) -> &[AtomicU32] {
    #[allow(unsafe_code)]
    // SAFETY: `AtomicU32` has the same size, alignment and bit validity as
    // `u32` (its documentation), and `v` is borrowed exclusively for as
    // long as the view lives, so nothing reads or writes it other than
    // through the view.
    unsafe {
        &*(v as *mut [u32] as *const [AtomicU32])
    }
}

/// A node's state in the semi-NCA computation (see [`compute_with`]).
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Info {
    ancestor: u32,
    best: u32,
    semi: u32,
}

/// Lengauer–Tarjan's `eval` with path compression, iterative: the smallest
/// semidominator number on the path from `v` up to (not including) the
/// root of its tree in the forest of nodes numbered `linked` and above.
/// `info` holds the records of the nodes from `base` on (a [`Run`]'s).
fn eval(v: u32, linked: u32, info: &mut [Info], base: u32, path: &mut Vec<u32>) -> u32 {
    let at = |x: u32| (x - base) as usize;
    let mut x = v;
    if info[at(x)].ancestor < linked {
        // Unlinked (its best is its own number), or a root's child.
        return info[at(x)].best;
    }
    path.clear();
    loop {
        path.push(x);
        x = info[at(x)].ancestor;
        if info[at(x)].ancestor < linked {
            break;
        }
    }
    // x is the path's top (its ancestor is the root): compress from there
    // down, each node pointing at the root and keeping the smallest best.
    let (root, mut best) = (info[at(x)].ancestor, info[at(x)].best);
    while let Some(y) = path.pop() {
        let node = &mut info[at(y)];
        node.ancestor = root;
        if best < node.best {
            node.best = best;
        } else {
            best = node.best;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
        /// A long children list (sorted by packed keys) comes out in the
        /// order a comparison sort gives: largest retained size first,
        /// ties by block, sizes of 4 GiB and more (which the keys clamp)
        /// and exactly 2^32 - 1 among them.
        #[test]
        fn a_long_list_sorts_as_a_comparison_sort_does(
            sizes in proptest::collection::vec(
                proptest::prop_oneof![
                    6 => 0u64..200,
                    2 => 0u64..(1 << 40),
                    1 => proptest::prelude::Just(u64::from(u32::MAX)),
                    1 => u64::from(u32::MAX) - 2..u64::from(u32::MAX) + 3,
                ],
                13000..16000,
            ),
            keep in 1usize..4,
            spare in 0usize..20000,
        ) {
            let retained: Vec<u64> = sizes.iter().map(|s| s * 8).collect();
            // Blocks in ascending order, as the lists are filled.
            let mut list: Vec<u32> = (0..retained.len() as u32).filter(|b| *b as usize % keep == 0).collect();
            let mut expected = list.clone();
            expected.sort_by(|&a, &b| retained[b as usize].cmp(&retained[a as usize]).then(a.cmp(&b)));
            // The keys made in spare memory holding anything, or in its own
            // where the spare is too short.
            by_retained(&mut list, &retained, &mut vec![u64::MAX; spare]);
            proptest::prop_assert_eq!(list, expected);
        }

        /// The children lists made in memory that holds anything (the
        /// records' and the walk's order, in `compute_in`), of any
        /// length, are those made in fresh memory: a tree whose virtual
        /// root has a list long enough to be sorted by keys, and lists
        /// below it.
        #[test]
        fn children_lists_in_reused_memory_are_those_in_fresh(
            up in proptest::collection::vec((0u32..4, 0u32..1000, 0u64..50), 7000..10000),
            list_len in 0usize..30000,
            start_len in 0usize..12000,
        ) {
            // Block i's immediate dominator: the virtual root (NONE) or a
            // block before it.
            let idom: Vec<u32> = up.iter().enumerate().map(|(i, &(k, d, _))| if k < 3 || i == 0 { NONE } else { i as u32 - 1 - d.min(i as u32 - 1) }).collect();
            let retained: Vec<u64> = up.iter().map(|&(_, _, r)| r * 16).collect();
            let fresh = children_lists(&idom, &retained, Vec::new(), Vec::new());
            let reused = children_lists(&idom, &retained, vec![0xdead_beef; list_len], vec![7; start_len]);
            proptest::prop_assert_eq!(&fresh, &reused);
            // Every block once, under its own immediate dominator.
            let (start, list) = fresh;
            proptest::prop_assert_eq!(list.len(), idom.len());
            let mut each = list.clone();
            each.sort_unstable();
            proptest::prop_assert!(each.iter().enumerate().all(|(i, &b)| b as usize == i), "every block once");
            for p in 0..=idom.len() {
                let children = &list[start[p] as usize..start[p + 1] as usize];
                for &c in children {
                    let d = idom[c as usize];
                    proptest::prop_assert_eq!(if d == NONE { idom.len() } else { d as usize }, p);
                }
                // Largest retained size first, then by block.
                for w in children.windows(2) {
                    let (a, b) = (w[0] as usize, w[1] as usize);
                    proptest::prop_assert!((retained[b], a) < (retained[a], b), "{} before {} under {}", a, b, p);
                }
            }
        }
        /// The tree is the same when the leak classes come late and the
        /// walk goes first from the unreached blocks nothing points to
        /// (`compute_in` with the leaders not ready) as when they come at
        /// once: lost cycles (whose leader has a predecessor), blocks
        /// pointing to themselves, lost blocks pointing into the reached
        /// part, interior pointers.
        #[test]
        fn walking_first_from_the_unpointed_blocks_changes_no_dominator(
            n in 1usize..80,
            edges in proptest::collection::vec((0u32..80, 0u32..80, proptest::bool::weighted(0.1)), 0..200),
            roots in proptest::collection::vec(0u32..80, 0..4),
        ) {
            use crate::heap::{Block, Root, RootKind, RootRegion, SiteId};
            use heapdump_format::{Header, Mode, Reason};
            let n32 = n as u32;
            let blocks: Vec<Block> = (0..n as u64).map(|i| Block { addr: 0x1000 + 0x100 * i, size: 16 + 8 * (i % 5), site: SiteId(0), flags: 0 }).collect();
            let mut slots = vec![0u64; n];
            let edges: Vec<(u32, u32, u64, u64)> = edges
                .iter()
                .map(|&(s, t, inner)| {
                    let s = s % n32;
                    slots[s as usize] += 8;
                    (s, t % n32, slots[s as usize] - 8, if inner { 8 } else { 0 })
                })
                .collect();
            let roots: Vec<Root> = roots
                .iter()
                .enumerate()
                .map(|(k, &t)| Root { region: 0, offset: 8 * k as u64, target: BlockId(t % n32), interior: false, into: 0 })
                .collect();
            let region = RootRegion { kind: RootKind::Stack, address: 0, tid: 1, owner: "main".into(), name: "".into(), libc: false };
            let h = Heap::from_parts(Header::new(Mode::Compact, Reason::Api, 4096, 1, 0), blocks, &edges, roots, vec![region]);
            let l = crate::leaks::analyze(&h, &crate::leaks::NoContents);
            let late = AtomicBool::new(false);
            let first = compute_in(&h, || l.heads(), Some(&late), || Predecessors::of(&h));
            let at_once = compute_in(&h, || l.heads(), None, || Predecessors::of(&h));
            proptest::prop_assert_eq!(first.parts(), at_once.parts());
            proptest::prop_assert_eq!(first.children().of(n), at_once.children().of(n));
        }
    }
}
