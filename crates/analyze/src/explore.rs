//! The questions of an interactive viewer, answered a page at a time: a
//! node of the dominator tree and its children (largest first, paged, so a
//! dump of ten million blocks never sends its whole graph), and one
//! block's page (contents, what it points to, who holds it, how it is
//! reached). Field names are the viewer's JSON keys.

use crate::address::Address;
use crate::analysis::{hex, Analysis, Holder, PathStep};
use crate::error::{AnalyzeError, Result};
use crate::heap::BlockId;
use crate::leaks::LeakKind;
use crate::symbols::Frame;
use heapdump_format::{ContentsRef, Record};
use serde::Serialize;

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
    pub path_start: Option<String>,
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

    /// The page of the block holding `addr`: `n` pointers out and `n`
    /// holders at most.
    pub fn block_page(&self, addr: u64, n: usize) -> Result<BlockPage> {
        let b = self.block_at(addr)?;
        let heap = self.heap();
        let blk = heap.block(b);
        let d = self.dominators();
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
            class: self.leaks().kind[b.index()],
            retained: d.retained[b.index()],
            dominated: d.dominated[b.index()],
            dominator: d.idom(b).map_or_else(|| "root".to_string(), |p| hex(heap.block(p).addr)),
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
