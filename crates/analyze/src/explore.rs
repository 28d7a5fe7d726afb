//! The questions of an interactive viewer, answered a page at a time: a
//! node of the dominator tree and its children (largest first, paged, so a
//! dump of ten million blocks never sends its whole graph), and one
//! block's page (contents, what it points to, who holds it, how it is
//! reached). Field names are the viewer's JSON keys.

use crate::address::Address;
use crate::analysis::{hex, Analysis, Holder, PathStep};
use crate::cache::CacheProblem;
use crate::error::{AnalyzeError, Result};
use crate::heap::{BlockId, RootSource};
use crate::kept_tree::KeptTree;
use crate::leaks::LeakKind;
use crate::symbols::Frame;
use heapdump_format::{ContentsRef, Record};
use serde::Serialize;
use std::collections::HashMap;

/// A block as a node of the dominator tree.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TreeNode {
    /// Its address.
    pub address: Address,
    /// Its requested size.
    pub size: u64,
    /// Bytes its dominator subtree holds, itself included.
    pub retained: u64,
    /// Blocks it dominates, itself included.
    pub dominated: u32,
    /// Blocks it dominates immediately (its children in the tree).
    pub children: usize,
    /// Its site.
    pub site: String,
    /// Its type, where known.
    #[serde(rename = "type")]
    pub ty: String,
    /// Its leak class.
    pub class: LeakKind,
}

/// A page of a node's children in the dominator tree.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TreePage {
    /// The node: `root` (the virtual root: roots and the heads of lost
    /// structures hang below it) or a block's `0x…`.
    pub parent: String,
    /// How many children it has in all.
    pub total: usize,
    /// Where this page starts among them.
    pub offset: usize,
    /// Bytes the parent retains (the whole heap for the root).
    pub retained: u64,
    /// The children of this page, largest retained size first.
    pub nodes: Vec<TreeNode>,
}

/// A pointer held in a block.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Pointer {
    /// Offset of the pointer word in the block.
    pub offset: u64,
    /// The block pointed to.
    pub to: Address,
    /// Where inside it the pointer points (0: its start).
    pub into: u64,
    /// Its size.
    pub size: u64,
    /// Its site.
    pub site: String,
}

/// Everything the viewer shows of one block.
#[derive(Clone, Debug, Serialize)]
pub struct BlockPage {
    /// Its address.
    pub address: Address,
    /// Its requested size.
    pub size: u64,
    /// Its site, as `top` names it.
    pub site: String,
    /// The program's frames of its site, innermost first.
    pub stack: Vec<String>,
    /// Its type, where known.
    #[serde(rename = "type")]
    pub ty: String,
    /// Its leak class.
    pub class: LeakKind,
    /// Bytes its dominator subtree holds.
    pub retained: u64,
    /// Blocks it dominates, itself included.
    pub dominated: u32,
    /// Its immediate dominator, `0x…`, or `root`.
    pub dominator: String,
    /// Its first bytes as hexadecimal (full dumps; compact dumps keep no
    /// contents: `null`).
    pub contents: Option<String>,
    /// Whether `contents` stops before the block's end.
    pub contents_truncated: bool,
    /// The pointers it holds (the first of them).
    pub pointers: Vec<Pointer>,
    /// How many pointers it holds.
    pub pointers_total: usize,
    /// Who holds a pointer to it (the first of them), each with how it is
    /// itself reached.
    pub holders: Vec<Holder>,
    /// How many pointers to it there are.
    pub holders_total: usize,
    /// Where its shortest path from a root starts (none: nothing points to
    /// it, it heads a lost structure).
    pub path_start: Option<crate::analysis::Origin>,
    /// That path's steps.
    pub path: Vec<PathStep>,
}

/// Most contents a block page carries.
pub const CONTENTS_MAX: usize = 4096;

impl Analysis<'_> {
    /// The block holding `addr` (at or inside it).
    fn block_at(&self, addr: u64) -> Result<BlockId> {
        self.heap().find(addr).map(|(b, _)| b).ok_or(AnalyzeError::NoSuchAllocation { address: addr })
    }

    /// One block as a tree node.
    pub fn tree_node(&self, b: BlockId) -> TreeNode {
        let d = self.dominators();
        let blk = self.heap().block(b);
        TreeNode {
            address: Address(blk.addr),
            size: blk.size,
            retained: d.retained[b.index()],
            dominated: d.dominated[b.index()],
            children: self.dominated_by(Some(b)).len(),
            site: self.site_label(blk.site),
            ty: self.type_of_block(b),
            class: self.leaks().kind[b.index()],
        }
    }

    /// The children of `parent` (a block holding that address, or the
    /// virtual root for `None`) in the dominator tree, `n` from `offset`.
    pub fn tree_children(&self, parent: Option<u64>, offset: usize, n: usize) -> Result<TreePage> {
        let p = parent.map(|a| self.block_at(a)).transpose()?;
        // From the cache, a node at a time, while it is kept and good; else
        // from the whole tree.
        if let Some(t) = self.kept_tree() {
            match self.kept_children(t, p, offset, n) {
                Ok(page) => return Ok(page),
                Err(why) => self.refuse_kept_tree(why),
            }
        }
        let all = self.dominated_by(p);
        let page = all.iter().skip(offset).take(n).map(|&c| self.tree_node(BlockId(c))).collect();
        let retained = match p {
            Some(b) => self.dominators().retained[b.index()],
            None => self.heap().total_bytes(),
        };
        Ok(TreePage {
            parent: p.map_or_else(|| "root".to_string(), |b| hex(self.heap().block(b).addr)),
            total: all.len(),
            offset,
            retained,
            nodes: page,
        })
    }

    /// Block `b`'s retained bytes, dominated count and immediate
    /// dominator (`None`: the virtual root), from the kept tree while it
    /// is good, else from the whole tree.
    fn dominance_of(&self, b: BlockId) -> (u64, u32, Option<BlockId>) {
        if let Some(t) = self.kept_tree() {
            let i = b.index();
            let kept = (|| {
                let ((r, c, _, _), d) = (t.node(self.heap(), i)?, t.idom(i)?);
                if d != u32::MAX && t.retained(d as usize)? < r {
                    return Err(CacheProblem::Stale("bad retained size"));
                }
                Ok((r, c, (d != u32::MAX).then_some(BlockId(d))))
            })();
            match kept {
                Ok(v) => return v,
                Err(why) => self.refuse_kept_tree(why),
            }
        }
        let d = self.dominators();
        (d.retained[b.index()], d.dominated[b.index()], d.idom(b))
    }

    /// [`Analysis::tree_children`] from the tree kept in the cache (see
    /// `kept_tree.rs`): the page's entries checked as they are read.
    fn kept_children(&self, t: &KeptTree, p: Option<BlockId>, offset: usize, n: usize) -> std::result::Result<TreePage, CacheProblem> {
        let (page, total) = t.children(self.heap(), p.map(BlockId::index), offset, n)?;
        let nodes = page.iter().map(|&c| self.kept_node(t, BlockId(c))).collect::<std::result::Result<Vec<_>, _>>()?;
        let retained = match p {
            Some(b) => t.retained(b.index())?,
            None => t.heap_bytes(self.heap()),
        };
        Ok(TreePage { parent: p.map_or_else(|| "root".to_string(), |b| hex(self.heap().block(b).addr)), total, offset, retained, nodes })
    }

    /// [`Analysis::tree_node`] from the kept tree, checked against its
    /// children (see `KeptTree::node`).
    fn kept_node(&self, t: &KeptTree, b: BlockId) -> std::result::Result<TreeNode, CacheProblem> {
        let blk = self.heap().block(b);
        let (retained, dominated, children, class) = t.node(self.heap(), b.index())?;
        Ok(TreeNode {
            address: Address(blk.addr),
            size: blk.size,
            retained,
            dominated,
            children,
            site: self.site_label(blk.site),
            ty: self.type_of_block(b),
            class,
        })
    }

    /// The page of the block holding `addr`: `n` pointers out and `n`
    /// holders at most.
    pub fn block_page(&self, addr: u64, n: usize) -> Result<BlockPage> {
        let b = self.block_at(addr)?;
        let heap = self.heap();
        let blk = heap.block(b);
        let (retained, dominated, dominator) = self.dominance_of(b);
        let pointers_total = heap.edges(b).len();
        let pointers = heap
            .edges(b)
            .take(n)
            .map(|e| {
                let t = heap.block(e.target);
                Pointer { offset: e.offset, to: Address(t.addr), into: e.into, size: t.size, site: self.site_label(t.site) }
            })
            .collect();
        let (report, holders, holders_total) = self.holders(blk.addr, n)?;
        let contents = self.contents_of(blk.addr);
        Ok(BlockPage {
            address: Address(blk.addr),
            size: blk.size,
            site: self.site_label(blk.site),
            stack: self.program_frames(blk.site).iter().take(32).map(Frame::label).collect(),
            ty: self.type_of_block(b),
            class: self.class_and_leader(b).0,
            retained,
            dominated,
            dominator: dominator.map_or_else(|| "root".to_string(), |p| hex(heap.block(p).addr)),
            contents_truncated: contents.is_some_and(|c| c.len() > CONTENTS_MAX),
            contents: contents.map(|c| c.iter().take(CONTENTS_MAX).map(|x| format!("{x:02x}")).collect()),
            pointers,
            pointers_total,
            holders,
            holders_total,
            path_start: report.start,
            path: report.steps,
        })
    }

    /// The recorded contents of the block at `addr` (full dumps): one pass
    /// over the records, skipping their bodies.
    fn contents_of(&self, addr: u64) -> Option<&[u8]> {
        let dump = self.file().dump().ok()?;
        for r in dump.records() {
            match r {
                Ok((_, Record::Alloc(a))) if a.address == addr => {
                    return match a.contents {
                        ContentsRef::Full(bytes) => Some(bytes),
                        ContentsRef::Compact { .. } => None,
                    };
                }
                Ok((_, Record::Allocs(_))) => return None,
                Ok(_) => {}
                Err(_) => return None,
            }
        }
        None
    }
}

// --- the tree as a person reads it: groups, chains, named roots -------------

/// What a row of the grouped tree stands for.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RowKind {
    /// One block.
    Node,
    /// Siblings of one site and type (MAT's "group by class"): the
    /// members one level down.
    Group,
    /// A chain: blocks of one site each dominating the next (a linked
    /// list), with what each holds besides; its members one level down.
    Chain,
}

/// A row of the grouped dominator tree.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TreeRow {
    /// What it stands for.
    pub kind: RowKind,
    /// The block (a node), the chain's head, or the group's largest member.
    pub address: Address,
    /// What it is, in words: the type (or site) of a node, `400 × entry`
    /// for a group, `list of 40000 cached_response nodes` for a chain.
    pub name: String,
    /// For a child of the root: the root that holds it (`static
    /// cache_head`, `thread main, frame handle_request`), or that nothing
    /// does (`lost`).
    pub held_by: Option<String>,
    /// The site.
    pub site: String,
    /// The type, where known.
    #[serde(rename = "type")]
    pub ty: String,
    /// The leak class (of the group's largest member).
    pub class: LeakKind,
    /// Blocks it stands for: 1, the group's members, the chain's nodes.
    pub count: u64,
    /// Their own bytes.
    pub bytes: u64,
    /// What it retains, each byte once.
    pub retained: u64,
    /// Blocks it dominates, itself included.
    pub dominated: u64,
    /// Rows one level down: a node's children, a group's members, a
    /// chain's nodes.
    pub children: usize,
    /// For a group: its index among the parent's rows in retained order,
    /// to ask for its members (`TreeRows` with `group`).
    pub group: Option<usize>,
    /// For a chain's member: the next node, left out of its children.
    pub next: Option<Address>,
}

/// A page of rows below a node, a group or a chain.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TreeRows {
    /// The node (`root` or `0x…`) the rows are below.
    pub parent: String,
    /// How many rows there are in all.
    pub total: usize,
    /// Where this page starts.
    pub offset: usize,
    /// The rows of the page, in the order asked for.
    pub rows: Vec<TreeRow>,
}

/// The order of a page of rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowOrder {
    /// Retained bytes, largest first.
    Retained,
    /// Own bytes, largest first.
    Bytes,
    /// Blocks, most first.
    Count,
    /// Name, A to Z.
    Name,
}

impl RowOrder {
    /// The order a column's name asks for.
    pub fn parse(s: &str) -> Option<RowOrder> {
        Some(match s {
            "retained" => RowOrder::Retained,
            "bytes" | "size" => RowOrder::Bytes,
            "count" => RowOrder::Count,
            "name" => RowOrder::Name,
            _ => return None,
        })
    }
}

/// Which rows below a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowsOf {
    /// A node's children (`None`: the root's), grouped, chains collapsed.
    Children(Option<u64>),
    /// The members of one group of a node's children (the group's index
    /// among them in retained order).
    Group(Option<u64>, usize),
    /// A node's children without the next node of its chain (a chain's
    /// member opened: what it holds besides).
    Payload(u64),
    /// The nodes of the chain `head` heads.
    Chain(u64),
}

/// The shortest list collapsed into one row.
pub const CHAIN_MIN: usize = 3;

/// The members of one group of siblings, largest retained first, and
/// their figures (`members` left empty for the root's groups kept in the
/// cache: `kept_rows.rs` reads them a page at a time).
pub(crate) struct Grouped {
    pub(crate) site: u32,
    pub(crate) lost: bool,
    pub(crate) first: u32,
    pub(crate) count: u64,
    pub(crate) retained: u64,
    pub(crate) bytes: u64,
    pub(crate) dominated: u64,
    pub(crate) members: Vec<u32>,
}

/// The dominator tree a page is read from: the whole tree, or the one
/// kept in the cache, read a node at a time (`kept_tree.rs`).
#[derive(Clone, Copy)]
pub(crate) enum Tree<'t> {
    Whole,
    Kept(&'t KeptTree),
}

/// An answer from tree `t`: an `Err` only from a kept tree found damaged
/// or disagreeing with itself (the answer is then taken from the whole).
pub(crate) type Kept<T> = std::result::Result<T, CacheProblem>;

/// Most children of a node read whole from the kept tree (each checked
/// under its node and in order): a node of more (the dense heap's table of
/// 10 M) is read faster from the whole tree, checked whole.
const KEPT_CHILDREN_MAX: usize = 1 << 20;

/// Why a page is not read from the kept tree though nothing is wrong with
/// it (see [`KEPT_CHILDREN_MAX`]).
const TOO_MANY_CHILDREN: &str = "a node of too many children for the kept tree";

/// Whether `why` says the page is better read from the whole tree, not
/// that the kept tree is wrong.
pub(crate) fn too_many_children(why: &CacheProblem) -> bool {
    matches!(why, CacheProblem::Stale(s) if *s == TOO_MANY_CHILDREN)
}

impl Analysis<'_> {
    /// The children of `b` in `t`, largest retained first.
    pub(crate) fn kids_in(&self, t: Tree<'_>, b: BlockId) -> Kept<std::borrow::Cow<'_, [u32]>> {
        Ok(match t {
            Tree::Whole => std::borrow::Cow::Borrowed(self.dominated_by(Some(b))),
            Tree::Kept(k) if k.child_count(b.index())? > KEPT_CHILDREN_MAX => return Err(CacheProblem::Stale(TOO_MANY_CHILDREN)),
            Tree::Kept(k) => std::borrow::Cow::Owned(k.children(self.heap(), Some(b.index()), 0, usize::MAX)?.0),
        })
    }

    /// Bytes `b` retains in `t`.
    pub(crate) fn retained_in(&self, t: Tree<'_>, b: BlockId) -> Kept<u64> {
        match t {
            Tree::Whole => Ok(self.dominators().retained[b.index()]),
            Tree::Kept(k) => k.retained(b.index()),
        }
    }

    /// Blocks `b` dominates in `t`, itself included.
    pub(crate) fn dominated_in(&self, t: Tree<'_>, b: BlockId) -> Kept<u32> {
        match t {
            Tree::Whole => Ok(self.dominators().dominated[b.index()]),
            Tree::Kept(k) => k.dominated(b.index()),
        }
    }

    /// `b`'s leak class.
    pub(crate) fn kind_in(&self, t: Tree<'_>, b: BlockId) -> Kept<LeakKind> {
        match t {
            Tree::Whole => Ok(self.leaks().kind[b.index()]),
            Tree::Kept(k) => k.kind(b.index()),
        }
    }

    /// `b`'s immediate dominator in `t` (`None`: the virtual root).
    pub(crate) fn idom_in(&self, t: Tree<'_>, b: BlockId) -> Kept<Option<BlockId>> {
        match t {
            Tree::Whole => Ok(self.dominators().idom(b)),
            Tree::Kept(k) => Ok(Some(k.idom(b.index())?).filter(|&d| d != u32::MAX).map(BlockId)),
        }
    }

    /// The children of `p` grouped by site and type, the groups (of one
    /// block or more) largest retained first.
    pub(crate) fn grouped(&self, t: Tree<'_>, p: Option<BlockId>) -> Kept<Vec<Grouped>> {
        let heap = self.heap();
        let mut index: HashMap<(u32, bool, String), usize> = HashMap::new();
        let mut groups: Vec<Grouped> = Vec::new();
        let kids = match (t, p) {
            (_, Some(p)) => self.kids_in(t, p)?,
            (Tree::Whole, None) => std::borrow::Cow::Borrowed(self.dominated_by(None)),
            (Tree::Kept(k), None) => std::borrow::Cow::Owned(k.children(heap, None, 0, usize::MAX)?.0),
        };
        // The whole tree's arrays read directly (its figures a lookup each).
        let whole = match t {
            Tree::Whole => Some((self.dominators(), &self.leaks().kind)),
            Tree::Kept(_) => None,
        };
        for &c in kids.iter() {
            let b = heap.block(BlockId(c));
            let (kind, retained, dominated) = match whole {
                Some((d, kinds)) => (kinds[c as usize], d.retained[c as usize], d.dominated[c as usize]),
                None => (self.kind_in(t, BlockId(c))?, self.retained_in(t, BlockId(c))?, self.dominated_in(t, BlockId(c))?),
            };
            // Lost blocks apart from reachable ones: two structures.
            let lost = matches!(kind, LeakKind::DefinitelyLost | LeakKind::IndirectlyLost);
            let key = (b.site.0, lost, self.type_of_block(BlockId(c)));
            let i = *index.entry(key).or_insert_with(|| {
                groups.push(Grouped { site: b.site.0, lost, first: c, count: 0, retained: 0, bytes: 0, dominated: 0, members: Vec::new() });
                groups.len() - 1
            });
            let g = &mut groups[i];
            g.members.push(c);
            g.count += 1;
            g.retained += retained;
            g.dominated += u64::from(dominated);
            g.bytes += b.size;
        }
        // Children come largest first: so do each group's members.
        groups.sort_by(|a, b| b.retained.cmp(&a.retained).then(a.first.cmp(&b.first)));
        Ok(groups)
    }

    /// The root that holds `b` (a static first, then a stack, then a
    /// register), named as a person says it.
    pub fn root_name(&self, b: BlockId) -> Option<String> {
        let heap = self.heap();
        let rank = |r: &crate::Root| match heap.root_regions[r.region as usize].kind {
            crate::RootKind::Static => 0,
            crate::RootKind::Stack => 1,
            crate::RootKind::Registers => 2,
        };
        // Of a thread's words, the outermost frame's: a pointer passed
        // down has copies in the callees' frames (and in a signal's
        // saved registers) below the frame that owns it.
        let r = heap.roots.iter().filter(|r| r.target == b).min_by_key(|r| (rank(r), r.interior, std::cmp::Reverse(r.offset)))?;
        Some(self.short_root_name(r))
    }

    /// `r` in the short form ([`crate::RootName::short`]): `static
    /// cache_head`, `thread main, frame handle_request`, `thread main,
    /// register rbx`.
    pub fn short_root_name(&self, r: &crate::Root) -> String {
        let name = self.name_root(r);
        let frame = match &name.source {
            RootSource::Stack { tid, address, .. } => self.stack_frame(*tid, *address),
            _ => None,
        };
        name.short(frame.as_deref())
    }

    /// The function whose frame holds stack word `addr` of thread `tid`:
    /// the function of the nearest return address below it (the call that
    /// function was making when the dump was taken). A heuristic: the
    /// word taken for that return address is the nearest one below that
    /// points into a program's named function (a stale code pointer in a
    /// callee's frame can be taken for it). Full dumps only: a compact
    /// dump keeps no stack words but pointers to blocks.
    fn stack_frame(&self, tid: u32, addr: u64) -> Option<String> {
        let heap = self.heap();
        let dump = self.file().dump().ok()?;
        for r in dump.records() {
            let t = match r {
                Ok((_, Record::Thread(t))) if t.tid == tid => t,
                Ok((_, Record::Alloc(_) | Record::Allocs(_))) | Err(_) => return None,
                _ => continue,
            };
            let ContentsRef::Full(bytes) = t.contents else { return None };
            let start = t.stack_start;
            let end = (addr.checked_sub(start)? as usize).min(bytes.len()) & !7;
            // At most 64 KiB below the word: a frame is not larger.
            let low = end.saturating_sub(64 * 1024);
            let mut at = end;
            while at >= low + 8 {
                at -= 8;
                let w = u64::from_le_bytes(bytes[at..at + 8].try_into().ok()?);
                if heap.code_module(w).is_some() {
                    // The runtime's own frames (a dump signal's handler), the
                    // C library's and unnamed code are passed over: a
                    // program's frame is wanted.
                    let f = self.frames_at(w.wrapping_sub(1)).into_iter().next();
                    let named = |f: &crate::symbols::Frame| {
                        !crate::symbols::is_runtime(f)
                            && !crate::symbols::is_machinery(f)
                            && f.function.as_deref().is_some_and(|n| !n.contains("+0x") && !n.starts_with("__"))
                    };
                    if let Some(name) = f.filter(named).and_then(|f| f.function) {
                        return Some(name);
                    }
                }
            }
            return None;
        }
        None
    }

    /// One block as a row (a chain's head collapsed when `chains`).
    fn node_row(&self, b: BlockId, chains: bool, named: bool) -> TreeRow {
        self.node_row_in(Tree::Whole, b, chains, named).unwrap_or_else(|_| unreachable!("the whole tree is never refused"))
    }

    /// [`Analysis::node_row`] from tree `t`.
    fn node_row_in(&self, t: Tree<'_>, b: BlockId, chains: bool, named: bool) -> Kept<TreeRow> {
        let heap = self.heap();
        let blk = heap.block(b);
        let list = if chains { self.list_from_in(t, b)?.filter(|c| c.nodes as usize >= CHAIN_MIN) } else { None };
        let ty = self.type_of_block(b);
        let site = self.site_label(blk.site);
        let what = if ty != crate::types::UNKNOWN { ty.clone() } else { site.clone() };
        let (retained, dominated, children, class) = match t {
            Tree::Whole => {
                let d = self.dominators();
                (d.retained[b.index()], d.dominated[b.index()], self.dominated_by(Some(b)).len(), self.leaks().kind[b.index()])
            }
            Tree::Kept(k) => k.node(heap, b.index())?,
        };
        let held_by = if named {
            Some(self.root_name(b).unwrap_or_else(|| match class {
                LeakKind::DefinitelyLost | LeakKind::IndirectlyLost => "lost: nothing points to it".to_string(),
                _ => "no root: lost, possibly".to_string(),
            }))
        } else {
            None
        };
        if let Some(c) = list {
            // Named as `retained` names it, the holder included.
            let summary = self.list_summary_in(t, &c)?;
            return Ok(TreeRow {
                kind: RowKind::Chain,
                address: Address(blk.addr),
                name: summary.to_string(),
                held_by: None,
                site,
                ty,
                class,
                count: u64::from(c.nodes),
                bytes: summary.node_bytes,
                retained,
                dominated: dominated as u64,
                children: c.nodes as usize,
                group: None,
                next: None,
            });
        }
        Ok(TreeRow {
            kind: RowKind::Node,
            address: Address(blk.addr),
            name: what,
            held_by,
            site,
            ty,
            class,
            count: 1,
            bytes: blk.size,
            retained,
            dominated: dominated as u64,
            children,
            group: None,
            next: None,
        })
    }

    /// Rows below a node, a group or a chain, `n` from `offset` in `order`:
    /// siblings of one site and type grouped, chains collapsed, the
    /// root's children named by the roots holding them. From the tree kept
    /// in the cache while it is good (the root's groups kept with it:
    /// `kept_rows.rs`), else from the whole tree.
    pub fn tree_rows(&self, of: RowsOf, order: RowOrder, offset: usize, n: usize) -> Result<TreeRows> {
        if let Some(t) = self.kept_tree() {
            let root = matches!(of, RowsOf::Children(None) | RowsOf::Group(None, _));
            let kept = (|| {
                // Without the root's groups kept, they are computed from the
                // whole tree (and kept then).
                let groups = if root { crate::kept_rows::open(self, Tree::Kept(t))? } else { None };
                if root && groups.is_none() {
                    return Ok(None);
                }
                self.tree_rows_in(Tree::Kept(t), groups.as_ref(), of, order, offset, n).map(Some)
            })();
            match kept {
                Ok(Some(rows)) => return rows,
                Ok(None) => {}
                Err(why) if too_many_children(&why) => {}
                Err(why) => {
                    if root {
                        crate::kept_rows::forget(self);
                    }
                    self.refuse_kept_tree(why);
                }
            }
        }
        match self.tree_rows_in(Tree::Whole, None, of, order, offset, n) {
            Ok(rows) => rows,
            Err(_) => unreachable!("the whole tree is never refused"),
        }
    }

    /// [`Analysis::tree_rows`] from tree `t`, the root's groups `kept`
    /// (when read from the cache).
    fn tree_rows_in(
        &self,
        t: Tree<'_>,
        kept: Option<&crate::kept_rows::KeptGroups>,
        of: RowsOf,
        order: RowOrder,
        offset: usize,
        n: usize,
    ) -> Kept<Result<TreeRows>> {
        let heap = self.heap();
        let parent_name = |p: Option<BlockId>| p.map_or_else(|| "root".to_string(), |b| hex(heap.block(b).addr));
        let resolve = |p: Option<u64>| p.map(|a| self.block_at(a)).transpose();
        // A node's groups made now (kept for the next viewer when they
        // are the root's, from the whole tree): `None` for the root's
        // when they were read from the cache (`kept`).
        let grouped_now = |p: Option<BlockId>| -> Kept<Option<Vec<Grouped>>> {
            if p.is_none() && kept.is_some() {
                return Ok(None);
            }
            let g = self.grouped(t, p)?;
            if p.is_none() && matches!(t, Tree::Whole) {
                crate::kept_rows::keep(self, &g);
            }
            Ok(Some(g))
        };
        // The members of group `k`, `n` from `offset`.
        let members = |g: &Grouped, k: usize, offset: usize, n: usize| -> Kept<Vec<u32>> {
            match kept {
                Some(kg) if g.members.is_empty() => kg.members(self, t, k, offset, n),
                _ => Ok(g.members.iter().skip(offset).take(n).copied().collect()),
            }
        };
        let (parent, mut rows): (String, Vec<TreeRow>) = match of {
            RowsOf::Children(p) => {
                let p = match resolve(p) {
                    Ok(p) => p,
                    Err(e) => return Ok(Err(e)),
                };
                let named = p.is_none();
                let own = grouped_now(p)?;
                let groups: &[Grouped] = own.as_deref().or(kept.map(|kg| &kg.groups[..])).expect("groups made or kept");
                let row = |i: usize, g: &Grouped| -> Kept<TreeRow> {
                    let first = BlockId(g.first);
                    if g.count == 1 {
                        return self.node_row_in(t, first, true, named);
                    }
                    let blk = heap.block(first);
                    let ty = self.type_of_block(first);
                    let site = self.site_label(blk.site);
                    let what = if ty != crate::types::UNKNOWN { ty.clone() } else { site.clone() };
                    let held_by = if named { Some(self.group_holder(&members(g, i, 0, 1000)?)) } else { None };
                    Ok(TreeRow {
                        kind: RowKind::Group,
                        address: Address(blk.addr),
                        name: format!("{} × {what}", g.count),
                        held_by,
                        site,
                        ty,
                        class: self.kind_in(t, first)?,
                        count: g.count,
                        bytes: g.bytes,
                        retained: g.retained,
                        dominated: g.dominated,
                        children: g.count as usize,
                        group: Some(i),
                        next: None,
                    })
                };
                // The groups are in the rows' retained order (retained, then
                // the first member's address: blocks are numbered in address
                // order): only the page is made into rows.
                if order == RowOrder::Retained {
                    let rows = groups.iter().enumerate().skip(offset).take(n).map(|(i, g)| row(i, g)).collect::<Kept<Vec<_>>>()?;
                    return Ok(Ok(TreeRows { parent: parent_name(p), total: groups.len(), offset, rows }));
                }
                (parent_name(p), groups.iter().enumerate().map(|(i, g)| row(i, g)).collect::<Kept<Vec<_>>>()?)
            }
            RowsOf::Group(p, k) => {
                let p = match resolve(p) {
                    Ok(p) => p,
                    Err(e) => return Ok(Err(e)),
                };
                let own = grouped_now(p)?;
                let groups: &[Grouped] = own.as_deref().or(kept.map(|kg| &kg.groups[..])).expect("groups made or kept");
                let Some(g) = groups.get(k) else { return Ok(Err(AnalyzeError::NoSuchGroup { group: k })) };
                let named = p.is_none();
                // Only the page is made into rows unless another order
                // than the members' (retained) is asked for.
                if order == RowOrder::Retained {
                    let rows = members(g, k, offset, n)?
                        .into_iter()
                        .map(|m| self.node_row_in(t, BlockId(m), true, named))
                        .collect::<Kept<Vec<_>>>()?;
                    return Ok(Ok(TreeRows { parent: parent_name(p), total: g.count as usize, offset, rows }));
                }
                let all = members(g, k, 0, usize::MAX)?;
                (parent_name(p), all.into_iter().map(|m| self.node_row_in(t, BlockId(m), true, named)).collect::<Kept<Vec<_>>>()?)
            }
            RowsOf::Payload(a) => {
                let b = match self.block_at(a) {
                    Ok(b) => b,
                    Err(e) => return Ok(Err(e)),
                };
                let next = self.list_next_in(t, b)?.map(|(n, _)| n);
                let kids: Vec<u32> = self.kids_in(t, b)?.iter().copied().filter(|&c| Some(BlockId(c)) != next).collect();
                (hex(heap.block(b).addr), kids.iter().map(|&c| self.node_row_in(t, BlockId(c), true, false)).collect::<Kept<Vec<_>>>()?)
            }
            RowsOf::Chain(a) => {
                let head = match self.block_at(a) {
                    Ok(b) => b,
                    Err(e) => return Ok(Err(e)),
                };
                let Some(c) = self.list_from_in(t, head)? else {
                    return Ok(Ok(TreeRows { parent: hex(heap.block(head).addr), total: 0, offset, rows: Vec::new() }));
                };
                // Walked to the page's end only: a list is in its own order.
                let mut rows = Vec::new();
                let (mut at, mut left, mut i) = (Some(c.head), c.nodes, 0usize);
                while let Some(m) = at.filter(|_| left > 0 && i < offset.saturating_add(n)) {
                    left -= 1;
                    let next = self.list_next_in(t, m)?.map(|(n, _)| n);
                    if i >= offset {
                        let mut r = self.node_row_in(t, m, false, false)?;
                        // A node retains the rest of its list: shown is
                        // what it adds (itself and its payload).
                        r.retained -= match next {
                            Some(x) => self.retained_in(t, x)?,
                            None => 0,
                        };
                        r.children -= usize::from(next.is_some());
                        r.next = next.map(|x| Address(heap.block(x).addr));
                        rows.push(r);
                    }
                    i += 1;
                    at = if left > 0 { next } else { None };
                }
                return Ok(Ok(TreeRows { parent: hex(heap.block(head).addr), total: c.nodes as usize, offset, rows }));
            }
        };
        match order {
            RowOrder::Retained => rows.sort_by(|a, b| b.retained.cmp(&a.retained).then(a.address.cmp(&b.address))),
            RowOrder::Bytes => rows.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(b.retained.cmp(&a.retained))),
            RowOrder::Count => rows.sort_by(|a, b| b.count.cmp(&a.count).then(b.retained.cmp(&a.retained))),
            RowOrder::Name => rows.sort_by(|a, b| a.name.cmp(&b.name).then(b.retained.cmp(&a.retained))),
        }
        let total = rows.len();
        let rows = rows.into_iter().skip(offset).take(n).collect();
        Ok(Ok(TreeRows { parent, total, offset, rows }))
    }

    /// What holds a group of the root's children: one root's name when
    /// they all share its symbol (`static slots`), else how many roots.
    fn group_holder(&self, members: &[u32]) -> String {
        let mut names: Vec<String> = members
            .iter()
            .take(1000)
            .map(|&m| {
                let n = self.root_name(BlockId(m)).unwrap_or_else(|| "nothing (lost)".into());
                // `static slots+0x18` is held by `static slots`.
                n.split('+').next().unwrap_or(&n).to_string()
            })
            .collect();
        names.sort();
        names.dedup();
        match names.as_slice() {
            [one] => one.clone(),
            [a, b] => format!("{a}; {b}"),
            _ => format!("{} roots", names.len()),
        }
    }
}

// --- search, and pages of what a list cuts --------------------------------------

/// A group of blocks a search found: a site or a type, with its figures.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Found {
    /// `site` or `type`.
    pub by: &'static str,
    /// The site or type.
    pub key: String,
    /// Its live blocks.
    pub blocks: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// What a search found: blocks (by address or by the root holding
/// them) and groups (by site or type).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SearchResult {
    /// The text searched for.
    pub query: String,
    /// Blocks: the one holding the address, or those roots of that name
    /// hold.
    pub blocks: Vec<TreeRow>,
    /// Sites and types whose name holds the text, largest first.
    pub groups: Vec<Found>,
}

/// A page of the pointers a block holds.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PointerPage {
    /// The block.
    pub address: Address,
    /// How many pointers it holds.
    pub total: usize,
    /// Where this page starts.
    pub offset: usize,
    /// The page's pointers, in the block's order.
    pub pointers: Vec<Pointer>,
}

/// The most roots a search names (each a symbol lookup).
const SEARCH_ROOTS: usize = 20_000;

impl Analysis<'_> {
    /// Finds `query` (case-insensitive) as an address (`0x…`: the block
    /// holding it), a root's name (`cache_head`, `handle_request`), a site
    /// or a type: at most `n` of each.
    pub fn search(&self, query: &str, n: usize) -> SearchResult {
        let heap = self.heap();
        let q = query.trim().to_lowercase();
        let mut out = SearchResult { query: query.to_string(), blocks: Vec::new(), groups: Vec::new() };
        if q.is_empty() {
            return out;
        }
        if let Some(a) = q.strip_prefix("0x").and_then(|h| u64::from_str_radix(h, 16).ok()) {
            if let Some((b, _)) = heap.find(a) {
                let mut row = self.node_row(b, false, false);
                row.held_by = self.root_name(b);
                out.blocks.push(row);
            }
        }
        // The blocks roots hold, by the roots' names.
        let mut seen = std::collections::HashSet::new();
        for r in heap.roots.iter().take(SEARCH_ROOTS) {
            if out.blocks.len() >= n {
                break;
            }
            if seen.contains(&r.target) {
                continue;
            }
            let name = self.short_root_name(r);
            if name.to_lowercase().contains(&q) {
                seen.insert(r.target);
                let mut row = self.node_row(r.target, true, false);
                row.held_by = Some(name);
                out.blocks.push(row);
            }
        }
        for (by, rows) in [("site", self.top(crate::group::GroupBy::Site)), ("type", self.top(crate::group::GroupBy::Type))] {
            for r in rows.into_iter().filter(|r| r.key.to_lowercase().contains(&q)).take(n) {
                out.groups.push(Found { by, key: r.key, blocks: r.allocations, bytes: r.bytes });
            }
        }
        out.groups.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.by.cmp(b.by)));
        out.groups.truncate(n);
        out
    }

    /// The live blocks of one site or type (`by`: `site` or `type`),
    /// largest retained first, `n` from `offset`.
    pub fn blocks_of(&self, by: &str, key: &str, offset: usize, n: usize) -> TreeRows {
        let heap = self.heap();
        let d = self.dominators();
        let mut labels: HashMap<crate::SiteId, bool> = HashMap::new();
        let mut ids: Vec<u32> = Vec::new();
        for (i, b) in heap.blocks().enumerate() {
            let hit = match by {
                "type" => self.type_of_block(BlockId(i as u32)) == key,
                _ => *labels.entry(b.site).or_insert_with(|| self.site_label(b.site) == key),
            };
            if hit {
                ids.push(i as u32);
            }
        }
        ids.sort_by(|&a, &b| d.retained[b as usize].cmp(&d.retained[a as usize]).then(a.cmp(&b)));
        let rows = ids.iter().skip(offset).take(n).map(|&i| {
            let mut r = self.node_row(BlockId(i), false, false);
            r.held_by = self.root_name(BlockId(i));
            r
        });
        TreeRows { parent: format!("{by} {key}"), total: ids.len(), offset, rows: rows.collect() }
    }

    /// The pointers the block holding `addr` holds, `n` from `offset`.
    pub fn pointer_page(&self, addr: u64, offset: usize, n: usize) -> Result<PointerPage> {
        let b = self.block_at(addr)?;
        let heap = self.heap();
        let total = heap.edges(b).len();
        let pointers = heap
            .edges(b)
            .skip(offset)
            .take(n)
            .map(|e| {
                let t = heap.block(e.target);
                Pointer { offset: e.offset, to: Address(t.addr), into: e.into, size: t.size, site: self.site_label(t.site) }
            })
            .collect();
        Ok(PointerPage { address: Address(heap.block(b).addr), total, offset, pointers })
    }
}
