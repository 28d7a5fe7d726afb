//! Linked lists as one structure, not one node after another.
//!
//! In the dominator tree a list is a path: each node dominates the next.
//! A list whose nodes own something (the usual cache: a node and its
//! string) is still a path, each node dominating the next node *and* its
//! own payload, so "dominates one block" is not the test. The rule: the
//! node after block `b` ([`Analysis::list_next`]) is the one block among
//! those `b` immediately dominates that comes from `b`'s allocation site
//! (with `b`'s size, where the dump has no stack for the site) and that
//! `b` points to directly. Two such blocks (a tree's two children) make no
//! list. Every view that shows lists (`retained`'s rows, `path`'s hops,
//! the DOT export, the viewer) asks this module, so they agree on what a
//! list is.
//!
//! ```no_run
//! let dump = heapdump_analyze::open("app.hdump".as_ref(), &heapdump_analyze::Options::default())?;
//! let a = dump.analysis();
//! for row in a.retainers(10) {
//!     if let Some(list) = &row.list {
//!         println!("{list}"); // a list of 40000 `node` nodes (with their 40000 `string` blocks), held by static `cache_head`
//!     }
//! }
//! # Ok::<(), heapdump_analyze::AnalyzeError>(())
//! ```

use crate::address::Address;
use crate::analysis::{hex, Analysis, Origin, PathStep};
use crate::explore::{Kept, Tree};
use crate::heap::{BlockId, SiteId};
use crate::leaks::LeakKind;
use serde::Serialize;
use std::collections::HashMap;

/// A list found in the dominator tree: `nodes` blocks from `head` to
/// `last`, each holding the next (see the module's rule).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chain {
    /// Its first node.
    pub head: BlockId,
    /// Its last node.
    pub last: BlockId,
    /// How many nodes, `head` and `last` included (at least 2).
    pub nodes: u32,
    /// Offset, in the head, of its pointer to the second node (the `next`
    /// field).
    pub next_offset: u64,
}

/// A list as the views show it, named. Field names are the JSON keys of
/// `retained --json`'s `list`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ListSummary {
    /// How many nodes.
    pub nodes: u32,
    /// What the nodes are: their type where known, else their site.
    pub node: String,
    /// Offset of the pointer to the next node in a node.
    pub next_offset: u64,
    /// The nodes' own bytes.
    pub node_bytes: u64,
    /// Blocks the nodes hold besides the nodes (their strings, buffers,
    /// and what those hold), each once.
    pub payload_blocks: u64,
    /// Their bytes.
    pub payload_bytes: u64,
    /// What the nodes hold directly, when mostly one thing: its type where
    /// known, else its site.
    pub payload: Option<String>,
    /// How many blocks of `payload` the nodes hold directly.
    pub payload_named: u64,
    /// The first node.
    pub head: Address,
    /// The last node.
    pub last: Address,
    /// What holds the first node: a root (`static cache_head`), the block
    /// dominating it, or nothing (a lost list).
    pub held_by: String,
}

impl std::fmt::Display for ListSummary {
    /// "a list of 40000 `node` nodes (with their 40000 `payload` blocks),
    /// held by static `cache_head`".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a list of {} `{}` nodes", self.nodes, self.node)?;
        match &self.payload {
            Some(p) if self.payload_blocks > self.payload_named => {
                write!(f, " (with their {} `{p}` blocks and {} more blocks)", self.payload_named, self.payload_blocks - self.payload_named)?
            }
            Some(p) => write!(f, " (with their {} `{p}` blocks)", self.payload_named)?,
            None if self.payload_blocks > 0 => write!(f, " (with {} blocks they hold)", self.payload_blocks)?,
            None => {}
        }
        write!(f, ", held by {}", self.held_by)
    }
}

impl<'h> Analysis<'h> {
    /// The node after `b` in a list, and the offset of `b`'s pointer to
    /// it: the one block `b` immediately dominates that comes from `b`'s
    /// site (and has its size, where the site has no stack) and that `b`
    /// points to. `None` when there is no such block, or more than one.
    pub fn list_next(&self, b: BlockId) -> Option<(BlockId, u64)> {
        self.list_next_in(Tree::Whole, b).unwrap_or(None)
    }

    /// [`Analysis::list_next`] in tree `t` (an `Err` only from a kept
    /// tree that disagrees with itself).
    pub(crate) fn list_next_in(&self, t: Tree<'_>, b: BlockId) -> Kept<Option<(BlockId, u64)>> {
        let heap = self.heap();
        let children = self.kids_in(t, b)?;
        if children.is_empty() {
            return Ok(None);
        }
        let blk = heap.block(b);
        let by_size = heap.sites.get(&blk.site).is_none_or(|f| f.is_empty());
        let mut next = None;
        for &c in children.iter() {
            let cb = heap.block(BlockId(c));
            if cb.site == blk.site && (!by_size || cb.size == blk.size) {
                if next.is_some() {
                    return Ok(None);
                }
                next = Some(BlockId(c));
            }
        }
        let Some(next) = next else { return Ok(None) };
        // A start pointer first (as valgrind's reachability prefers them).
        let mut edges = heap.edges(b).filter(|e| e.target == next);
        let Some(first) = edges.next() else { return Ok(None) };
        let offset = if first.interior { edges.find(|e| !e.interior).unwrap_or(first).offset } else { first.offset };
        Ok(Some((next, offset)))
    }

    /// The list from `b` on (`b` its first node), when `b` has a next
    /// node; its nodes are [`Analysis::list_nodes`].
    pub fn list_from(&self, b: BlockId) -> Option<Chain> {
        self.list_from_in(Tree::Whole, b).unwrap_or(None)
    }

    /// [`Analysis::list_from`] in tree `t`.
    pub(crate) fn list_from_in(&self, t: Tree<'_>, b: BlockId) -> Kept<Option<Chain>> {
        let Some((mut last, next_offset)) = self.list_next_in(t, b)? else { return Ok(None) };
        let mut nodes = 2u32;
        // Bounded by the blocks (a kept tree that loops is refused).
        while let Some((n, _)) = self.list_next_in(t, last)? {
            last = n;
            nodes = nodes.saturating_add(1);
            if nodes as usize > self.heap().len() {
                return Err(crate::cache::CacheProblem::Stale("a list that loops"));
            }
        }
        Ok(Some(Chain { head: b, last, nodes, next_offset }))
    }

    /// The whole list `b` is a node of (from its first node), if any.
    pub fn list_containing(&self, b: BlockId) -> Option<Chain> {
        let d = self.dominators();
        let mut head = b;
        // Bounded by the blocks: a dominator tree has no cycle.
        for _ in 0..self.heap().len() {
            match d.idom(head) {
                Some(p) if self.list_next(p).is_some_and(|(n, _)| n == head) => head = p,
                _ => break,
            }
        }
        self.list_from(head)
    }

    /// The nodes of `c`, first to last.
    pub fn list_nodes<'s>(&'s self, c: &Chain) -> ListNodes<'s, 'h> {
        ListNodes { analysis: self, next: Some(c.head), left: c.nodes }
    }

    /// `c` named, with what its nodes hold, for a view.
    pub fn list_summary(&self, c: &Chain) -> ListSummary {
        self.list_summary_in(Tree::Whole, c).unwrap_or_else(|_| unreachable!("the whole tree is never refused"))
    }

    /// [`Analysis::list_summary`] in tree `t`.
    pub(crate) fn list_summary_in(&self, t: Tree<'_>, c: &Chain) -> Kept<ListSummary> {
        let heap = self.heap();
        let mut names = HashMap::new();
        let mut node_bytes = 0u64;
        // What the nodes hold directly, by site (then named).
        let mut direct: HashMap<SiteId, (u64, BlockId)> = HashMap::new();
        let mut prev: Option<BlockId> = None;
        let (mut at, mut left) = (Some(c.head), c.nodes);
        while let Some(b) = at.filter(|_| left > 0) {
            left -= 1;
            node_bytes += heap.size(b);
            if let Some(p) = prev {
                for &k in self.kids_in(t, p)?.iter() {
                    if k != b.0 {
                        direct.entry(heap.block(BlockId(k)).site).or_insert((0, BlockId(k))).0 += 1;
                    }
                }
            }
            prev = Some(b);
            at = if left > 0 { self.list_next_in(t, b)?.map(|(n, _)| n) } else { None };
        }
        if let Some(p) = prev {
            for &k in self.kids_in(t, p)?.iter() {
                direct.entry(heap.block(BlockId(k)).site).or_insert((0, BlockId(k))).0 += 1;
            }
        }
        let nodes = u64::from(c.nodes);
        let payload_blocks = u64::from(self.dominated_in(t, c.head)?).saturating_sub(nodes);
        let payload_bytes = self.retained_in(t, c.head)?.saturating_sub(node_bytes);
        let all: u64 = direct.values().map(|v| v.0).sum();
        let top = direct.values().max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1))).copied();
        let (payload, payload_named) = match top {
            Some((count, example)) if count * 2 >= all => (Some(self.block_name(example, &mut names)), count),
            _ => (None, 0),
        };
        Ok(ListSummary {
            nodes: c.nodes,
            node: self.block_name(c.head, &mut names),
            next_offset: c.next_offset,
            node_bytes,
            payload_blocks,
            payload_bytes,
            payload,
            payload_named,
            head: Address(heap.block(c.head).addr),
            last: Address(heap.block(c.last).addr),
            held_by: self.list_holder_in(t, c.head)?,
        })
    }

    /// What holds `b`, in a few words: a root pointing to it (a start
    /// pointer first: `static cache_head`, `stack of thread 7 (main)`),
    /// else the block dominating it, else `nothing (definitely lost)` for
    /// the head of a lost structure, else `several blocks`.
    pub fn list_holder(&self, b: BlockId) -> String {
        self.list_holder_in(Tree::Whole, b).unwrap_or_else(|_| unreachable!("the whole tree is never refused"))
    }

    /// [`Analysis::list_holder`] in tree `t`.
    pub(crate) fn list_holder_in(&self, t: Tree<'_>, b: BlockId) -> Kept<String> {
        let heap = self.heap();
        let mut roots = heap.roots.iter().filter(|r| r.target == b);
        let first = roots.next();
        let root = match first {
            Some(r) if r.interior => Some(roots.find(|r| !r.interior).unwrap_or(r)),
            other => other,
        };
        if let Some(r) = root {
            return Ok(self.name_root(r).words());
        }
        if let Some(p) = self.idom_in(t, b)? {
            return Ok(format!("`{}` {}", self.block_name(p, &mut HashMap::new()), hex(heap.block(p).addr)));
        }
        Ok(match self.kind_in(t, b)? {
            LeakKind::DefinitelyLost => "nothing (definitely lost)".into(),
            _ => "several blocks".into(),
        })
    }

    /// `steps` (a path's) as lines to show: runs of hops through the nodes
    /// of one list (each step from a node to its next node as
    /// [`Analysis::list_next`] says, the pointer at the same offset) become
    /// one line when they are three hops or more, keeping the run's last
    /// hop, so a path to the 40,000th node of a list reads root, first
    /// node, "39,998 hops", last node.
    pub fn path_lines<'p>(&self, steps: &'p [PathStep]) -> Vec<PathLine<'p>> {
        let heap = self.heap();
        let mut out = Vec::new();
        let mut i = 0;
        while i < steps.len() {
            // A run: steps i..j, each from a list's node to its next node
            // (the one rule, `list_next`, that `retained` and the viewer
            // ask), the pointer at the same offset.
            let hop = |k: usize| {
                k >= 1
                    && matches!(steps[k].from, Origin::Block(_))
                    && steps[k].offset == steps[i].offset
                    && steps[k].interior == steps[i].interior
                    && heap.find_start(steps[k - 1].to.0).and_then(|b| self.list_next(b)).map(|(n, _)| n) == heap.find_start(steps[k].to.0)
            };
            let mut j = i;
            while j < steps.len() && hop(j) {
                j += 1;
            }
            if j - i >= 3 {
                let through = self
                    .heap()
                    .find_start(steps[i].to.0)
                    .map_or_else(|| steps[i].site.clone(), |b| self.block_name(b, &mut HashMap::new()));
                out.push(PathLine::Hops { hops: j - i - 1, through, offset: steps[i].offset, first: steps[i].to, last: steps[j - 2].to });
                out.push(PathLine::Step(&steps[j - 1]));
                i = j;
            } else {
                out.push(PathLine::Step(&steps[i]));
                i += 1;
            }
        }
        out
    }
}

/// The nodes of a list, first to last (see [`Analysis::list_nodes`]).
pub struct ListNodes<'s, 'h> {
    analysis: &'s Analysis<'h>,
    next: Option<BlockId>,
    left: u32,
}

impl Iterator for ListNodes<'_, '_> {
    type Item = BlockId;
    fn next(&mut self) -> Option<BlockId> {
        if self.left == 0 {
            return None;
        }
        let b = self.next?;
        self.left -= 1;
        self.next = if self.left > 0 { self.analysis.list_next(b).map(|(n, _)| n) } else { None };
        Some(b)
    }
}

/// A line of a path as the views show it (see [`Analysis::path_lines`]).
#[derive(Clone, Debug)]
pub enum PathLine<'p> {
    /// One step, as it is.
    Step(&'p PathStep),
    /// Hops through the nodes of one list, one line.
    Hops {
        /// How many hops the line stands for.
        hops: usize,
        /// What the nodes are: their type where known, else their site.
        through: String,
        /// Offset of the pointer to the next node.
        offset: u64,
        /// The first node reached by these hops.
        first: Address,
        /// The last node reached by these hops.
        last: Address,
    },
}

impl std::fmt::Display for PathLine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PathLine::Step(s) => write!(f, "-> at offset {} {}", s.offset, s.to),
            PathLine::Hops { hops, through, offset, first, last } => {
                write!(f, "… {} hops through `{through}` (the pointer at +{offset}): {first} … {last}", thousands(*hops as u64))
            }
        }
    }
}

/// `n` with a comma every three digits: 39,998.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn thousands_are_separated() {
        assert_eq!(super::thousands(39_998), "39,998");
        assert_eq!(super::thousands(999), "999");
        assert_eq!(super::thousands(1_000_000), "1,000,000");
        assert_eq!(super::thousands(0), "0");
    }
}
