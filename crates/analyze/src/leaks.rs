//! Leak classification with valgrind memcheck's meanings.
//!
//! - *still reachable*: a chain of start pointers leads from a root (or a
//!   chain in which every interior pointer is explained by a heuristic);
//! - *possibly lost*: reachable only through some interior pointer;
//! - *definitely lost*: no pointer from a root chain at all, and not
//!   pointed to by another lost block (the head of a lost structure; of a
//!   lost cycle, exactly one block);
//! - *indirectly lost*: pointed to only from lost blocks.
//!
//! The propagation is memcheck's: a block reached by a start pointer from a
//! root or a still-reachable block becomes still reachable; reached any
//! other way it becomes possibly lost, and may later be upgraded. Lost
//! blocks are grouped into cliques in address order, each led by a
//! definitely lost block; a former leader reached from a later one is
//! demoted to indirectly lost.

pub use crate::contents::{Contents, NoContents};
use crate::heap::{BlockId, Heap};
use heapdump_format::{hashbrown, raw};
use serde::Serialize;

/// Class of a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LeakKind {
    /// Reachable from a root.
    StillReachable,
    /// Reachable only through interior pointers.
    PossiblyLost,
    /// Lost, and the head of its lost structure.
    DefinitelyLost,
    /// Lost, pointed to by another lost block.
    IndirectlyLost,
}

impl LeakKind {
    /// The class as valgrind words it: "definitely lost", ….
    pub fn as_str(self) -> &'static str {
        match self {
            LeakKind::StillReachable => "still reachable",
            LeakKind::PossiblyLost => "possibly lost",
            LeakKind::DefinitelyLost => "definitely lost",
            LeakKind::IndirectlyLost => "indirectly lost",
        }
    }
}

/// Classifies every block of a loaded dump, the heuristics reading the
/// contents the dump holds.
pub fn of_dump(file: &crate::DumpFile, heap: &Heap) -> Leaks {
    analyze(heap, &crate::DumpContents::build(file, heap))
}

/// Heuristics for interior pointers that are normal for a layout, named as
/// valgrind names its own (`--leak-check-heuristics`), plus Rust's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Heuristic {
    /// libstdc++'s pre-C++11 `std::string`: pointer past a 3-word header.
    Stdstring,
    /// A 64-bit length prefix: pointer 8 bytes in, first word = size - 8.
    Length64,
    /// C++ `new[]` of objects with destructors: pointer past an element-count cookie.
    Newarray,
    /// A hashbrown `HashMap`/`HashSet` table (Rust's standard maps): the
    /// pointer to the control bytes at the end of the block.
    Hashbrown,
}

impl Heuristic {
    /// Name as printed.
    pub fn as_str(self) -> &'static str {
        match self {
            Heuristic::Stdstring => "stdstring",
            Heuristic::Length64 => "length64",
            Heuristic::Newarray => "newarray",
            Heuristic::Hashbrown => "hashbrown",
        }
    }
}

/// Bytes and blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Count {
    /// Requested bytes.
    pub bytes: u64,
    /// Blocks.
    pub blocks: u64,
}

impl Count {
    fn add(&mut self, bytes: u64) {
        self.bytes += bytes;
        self.blocks += 1;
    }
}

/// The result of the leak analysis.
#[derive(Clone, Debug)]
pub struct Leaks {
    /// Class of every block, by [`BlockId`].
    pub kind: Vec<LeakKind>,
    /// For lost blocks, the definitely lost block leading their clique,
    /// bit-inverted: zero for a block that is not lost, so that the table
    /// is zeroed memory that costs nothing where nothing is lost (see
    /// [`Leaks::leader_of`]).
    pub(crate) leader: crate::slab::Slab<u32>,
    /// Totals per class.
    pub definitely_lost: Count,
    /// Indirectly lost.
    pub indirectly_lost: Count,
    /// Possibly lost.
    pub possibly_lost: Count,
    /// Still reachable.
    pub still_reachable: Count,
    /// Of the still reachable, those reached thanks to a heuristic.
    pub via_heuristic: Vec<(Heuristic, Count)>,
}

impl Leaks {
    /// The definitely lost block leading `b`'s lost structure (itself, for
    /// a definitely lost block); `None` for a block that is not lost.
    pub fn leader_of(&self, b: BlockId) -> Option<BlockId> {
        let l = self.leader[b.index()];
        (l != NO_LEADER).then_some(BlockId(!l))
    }

    /// The definitely lost blocks: each heads a lost structure (the extra
    /// roots of the dominator tree).
    pub fn heads(&self) -> Vec<BlockId> {
        self.kind.iter().enumerate().filter(|(_, k)| **k == LeakKind::DefinitelyLost).map(|(i, _)| BlockId(i as u32)).collect()
    }
}

/// Which heuristic, if any, explains an interior pointer.
pub fn heuristic(heap: &Heap, c: &dyn Contents, b: BlockId, offset: u64) -> Option<Heuristic> {
    let size = heap.block(b).size;
    if offset == 24 && size >= 24 {
        if let (Some(len), Some(cap)) = (c.word(b, 0), c.word(b, 1)) {
            if cap.checked_add(25) == Some(size) && len <= cap {
                return Some(Heuristic::Stdstring);
            }
        }
    }
    if offset == 8 {
        if let Some(first) = c.word(b, 0) {
            if first > 0 && size - 8 == first {
                return Some(Heuristic::Length64);
            }
            if first > 0 && (size - 8) % first == 0 {
                return Some(Heuristic::Newarray);
            }
        }
    }
    // hashbrown: [buckets × T, padded to 16][buckets + 16 control bytes],
    // proven on the contents when the dump has them, else by the writer
    // (the ALLOC flags' hashbrown bits, trusted only from a writer that
    // also proved the table has room, as hashbrown keeps it: an older
    // writer took zeroed C structs for tables); never from the sizes alone.
    let tail_len = size.checked_sub(offset)?;
    let buckets = tail_len.checked_sub(16)?;
    if !buckets.is_power_of_two() {
        return None;
    }
    let log2 = buckets.trailing_zeros() as u8;
    if hashbrown::ctrl_offset(size, log2) != Some(offset) {
        return None;
    }
    let proven = match c.tail(b, offset) {
        Some(ctrl) => hashbrown::ctrl_ok(ctrl, buckets as usize),
        None => {
            let flags = heap.block(b).flags;
            flags & raw::ALLOC_HASHBROWN_ROOM != 0 && (flags & raw::ALLOC_HASHBROWN_MASK) >> raw::ALLOC_HASHBROWN_SHIFT == log2
        }
    };
    proven.then_some(Heuristic::Hashbrown)
}

const UNREACHED: u8 = 0;
const POSSIBLE: u8 = 1;
const REACHABLE: u8 = 2;
const INDIRECT: u8 = 3;
const LEADER: u8 = 4;
/// The state's class bits (the values above).
const CLASS: u8 = 7;
/// Reached, and not yet walked from, but not on the walk's stack: the
/// stack was full (see [`MARK_STACK`]).
const PENDING: u8 = 8;
/// A leader as [`Leaks::leader`] holds it: none.
pub(crate) const NO_LEADER: u32 = 0;
/// The most blocks the walk's stack holds (4 MiB). A block with millions
/// of pointers (an array of every node) pushed them all: 40 MB at 10 M
/// blocks, where issue 18 allows 48 bytes per block in all. Blocks past
/// it are marked pending and pushed from a sweep of the states once the
/// stack is empty.
const MARK_STACK: usize = 1 << 20;

/// Classifies every block.
pub fn analyze(heap: &Heap, contents: &dyn Contents) -> Leaks {
    classify(heap, contents, MARK_STACK)
}

/// [`analyze`] with a walk's stack of at most `max_stack` blocks.
fn classify(heap: &Heap, contents: &dyn Contents, max_stack: usize) -> Leaks {
    let n = heap.len();
    let max_stack = max_stack.max(1);
    let mut state = vec![UNREACHED; n];
    crate::huge_tables::huge_pages(&state);
    let mut heur: Vec<Option<Heuristic>> = vec![None; n];
    let mut stack: Vec<u32> = Vec::new();
    let mut pending = false;
    // Memcheck's push: start pointer from a definite source upgrades to
    // reachable; anything else only lifts unreached to possible.
    let push = |state: &mut Vec<u8>,
                heur: &mut Vec<Option<Heuristic>>,
                stack: &mut Vec<u32>,
                pending: &mut bool,
                t: BlockId,
                interior: bool,
                offset: u64,
                definite: bool| {
        let h = if interior { heuristic(heap, contents, t, offset) } else { None };
        let start = !interior || h.is_some();
        let s = &mut state[t.index()];
        let class = *s & CLASS;
        if start && definite && class != REACHABLE {
            *s = REACHABLE | (*s & PENDING);
            if interior {
                heur[t.index()] = h;
            } else {
                heur[t.index()] = None;
            }
        } else if class == UNREACHED {
            *s = POSSIBLE;
        } else {
            return;
        }
        if stack.len() < max_stack {
            stack.push(t.0);
        } else {
            *s |= PENDING;
            *pending = true;
        }
    };
    for r in &heap.roots {
        push(&mut state, &mut heur, &mut stack, &mut pending, r.target, r.interior, r.into, true);
    }
    loop {
        while let Some(b) = stack.pop() {
            let definite = state[b as usize] & CLASS == REACHABLE;
            // Pushed last to first, so that the first pointer is followed
            // first: the walk then runs along lists in address order, which
            // the cache likes (the classes do not depend on the order).
            for (target, interior, into) in heap.links(BlockId(b)).rev() {
                push(&mut state, &mut heur, &mut stack, &mut pending, target, interior, into, definite);
            }
        }
        if !pending {
            break;
        }
        // The stack is empty: refill it from the pending blocks (walking
        // a block twice, as pending and pushed again, changes nothing).
        pending = false;
        for (i, s) in state.iter_mut().enumerate() {
            if *s & PENDING == 0 {
                continue;
            }
            if stack.len() == max_stack {
                pending = true;
                break;
            }
            *s &= !PENDING;
            stack.push(i as u32);
        }
    }
    // The walk's stack can hold a good part of the blocks at its deepest:
    // given back before the leaders are numbered (the lost part is walked
    // with a stack of its own).
    stack = Vec::new();
    // Cliques of lost blocks, in address order. A leader reached from a
    // later one joins it: `leader` then points from the old leader to the
    // new one, and each block's final leader is found by following those
    // links once at the end (union by reference with path compression;
    // relabelling the old clique in place would be quadratic on a long
    // lost list laid out backwards).
    // Each lost block's leader, as `Leaks::leader` holds them (inverted).
    let mut leader = vec![NO_LEADER; n];
    crate::huge_tables::huge_pages(&leader);
    // Edges read raw (no offsets, no interior lookups: the cliques need
    // only the targets). The blocks are taken in address order, so the
    // states of the targets of a block a few places on are loaded while
    // this one is walked: on a heap that is mostly lost (millions of
    // leaders, each walk a few blocks) each state is otherwise a cache
    // miss waited for in turn.
    let (starts, targets) = heap.raw_edges();
    const AHEAD: usize = 16;
    let node = |t: u32| (t & !crate::heap::INTERIOR) as usize;
    for i in 0..n {
        if let Some(&s) = starts.get(i + 2 * AHEAD) {
            crate::prefetch::prefetch(targets, s as usize);
        }
        if i + AHEAD < n {
            for &t in &targets[starts[i + AHEAD] as usize..starts[i + AHEAD + 1] as usize] {
                crate::prefetch::prefetch(&state, node(t));
            }
        }
        if state[i] != UNREACHED {
            continue;
        }
        state[i] = LEADER;
        leader[i] = !(i as u32);
        stack.clear();
        stack.push(i as u32);
        while let Some(b) = stack.pop() {
            let b = b as usize;
            for &t in &targets[starts[b] as usize..starts[b + 1] as usize] {
                let t = node(t);
                if t == i {
                    continue;
                }
                match state[t] {
                    UNREACHED => {
                        state[t] = INDIRECT;
                        leader[t] = !(i as u32);
                        stack.push(t as u32);
                    }
                    LEADER => {
                        // A previous leader reached from this one: its whole
                        // clique joins this one.
                        state[t] = INDIRECT;
                        leader[t] = !(i as u32);
                    }
                    _ => {}
                }
            }
        }
    }
    // Resolve the links: a block's leader is the end of its chain. Every
    // link goes to a block that was a leader when it was made, and a
    // leader's own link only ever goes to a later leader (one walked after
    // it, so at a higher index). So, from the top down, a block linked
    // upwards takes its target's final leader (already resolved: higher);
    // then a block linked downwards, to a former leader whose link is
    // final by now, takes that. One read each, which the loops ask for a
    // few blocks ahead (following the chains took most of the lost
    // pass's time on a heap of millions of leaders).
    let target = |leader: &[u32], i: usize| leader.get(i).filter(|&&l| l != NO_LEADER).map(|&l| !l as usize);
    for i in (0..n).rev() {
        if let Some(t) = i.checked_sub(AHEAD).and_then(|a| target(&leader, a)) {
            crate::prefetch::prefetch(&leader, t);
        }
        if let Some(t) = target(&leader, i).filter(|&t| t > i) {
            leader[i] = leader[t];
        }
    }
    for i in 0..n {
        if let Some(t) = target(&leader, i + AHEAD) {
            crate::prefetch::prefetch(&leader, t);
        }
        if let Some(t) = target(&leader, i).filter(|&t| t < i) {
            leader[i] = leader[t];
        }
    }
    let mut out = Leaks {
        kind: Vec::new(),
        leader: leader.into(),
        definitely_lost: Count::default(),
        indirectly_lost: Count::default(),
        possibly_lost: Count::default(),
        still_reachable: Count::default(),
        via_heuristic: vec![],
    };
    let mut via: std::collections::BTreeMap<Heuristic, Count> = Default::default();
    // Mapped in place: the classes take the states' memory (both one byte).
    out.kind = state
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            let size = heap.size(BlockId(i as u32));
            let k = match s {
                REACHABLE => {
                    out.still_reachable.add(size);
                    if let Some(h) = heur[i] {
                        via.entry(h).or_default().add(size);
                    }
                    LeakKind::StillReachable
                }
                POSSIBLE => {
                    out.possibly_lost.add(size);
                    LeakKind::PossiblyLost
                }
                INDIRECT => {
                    out.indirectly_lost.add(size);
                    LeakKind::IndirectlyLost
                }
                _ => {
                    out.definitely_lost.add(size);
                    LeakKind::DefinitelyLost
                }
            };
            k
        })
        .collect();
    drop(heur);
    out.via_heuristic = via.into_iter().collect();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heap::{Block, Root, RootKind, RootRegion, SiteId};
    use heapdump_format::{Header, Mode, Reason};

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
        /// A walk whose stack holds a block or two, its overflow left
        /// pending and swept up after, classifies every block as the walk
        /// with room for all does: classes, leaders, heuristic counts.
        #[test]
        fn a_small_walk_stack_changes_no_class(
            n in 1usize..60,
            edges in proptest::collection::vec((0u32..60, 0u32..60, 0u64..4, proptest::bool::weighted(0.2)), 0..200),
            roots in proptest::collection::vec((0u32..60, proptest::bool::weighted(0.2)), 0..6),
            max_stack in 1usize..4,
        ) {
            let n32 = n as u32;
            // 64-byte blocks; an interior pointer 8 bytes in (a Length64 or
            // new[] candidate, as the first word says: none here).
            let blocks: Vec<Block> = (0..n as u64).map(|i| Block { addr: 0x1000 + 0x100 * i, size: 64, site: SiteId(0), flags: 0 }).collect();
            let edges: Vec<(u32, u32, u64, u64)> =
                edges.iter().map(|&(s, t, slot, inner)| (s % n32, t % n32, slot * 8, if inner { 8 } else { 0 })).collect();
            let roots: Vec<Root> = roots
                .iter()
                .enumerate()
                .map(|(k, &(t, inner))| Root { region: 0, offset: 8 * k as u64, target: BlockId(t % n32), interior: inner, into: if inner { 8 } else { 0 } })
                .collect();
            let region = RootRegion { kind: RootKind::Stack, address: 0, tid: 1, owner: "main".into(), name: "".into(), libc: false };
            let h = Heap::from_parts(Header::new(Mode::Compact, Reason::Api, 4096, 1, 0), blocks, &edges, roots, vec![region]);
            let (small, all) = (classify(&h, &NoContents, max_stack), classify(&h, &NoContents, usize::MAX));
            proptest::prop_assert_eq!(&small.kind, &all.kind);
            proptest::prop_assert_eq!(&small.leader[..], &all.leader[..]);
            proptest::prop_assert_eq!(format!("{:?}", small.via_heuristic), format!("{:?}", all.via_heuristic));
            for b in 0..n {
                let lost = matches!(all.kind[b], LeakKind::DefinitelyLost | LeakKind::IndirectlyLost);
                proptest::prop_assert_eq!(all.leader_of(BlockId(b as u32)).is_some(), lost, "block {} leader", b);
                // A lost block's leader is definitely lost (a head leads
                // itself) and reaches it through lost blocks.
                if let Some(from) = all.leader_of(BlockId(b as u32)) {
                    proptest::prop_assert_eq!(all.kind[from.index()], LeakKind::DefinitelyLost, "leader of block {}", b);
                    if all.kind[b] == LeakKind::DefinitelyLost {
                        proptest::prop_assert_eq!(from.index(), b);
                    }
                    let mut seen = vec![false; n];
                    let mut stack = vec![from.index()];
                    while let Some(u) = stack.pop() {
                        if !std::mem::replace(&mut seen[u], true) {
                            stack.extend(edges.iter().filter(|e| e.0 as usize == u).map(|e| e.1 as usize));
                        }
                    }
                    proptest::prop_assert!(seen[b], "the leader of block {} reaches it", b);
                }
            }
        }
    }
}
