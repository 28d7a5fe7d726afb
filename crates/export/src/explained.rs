//! A dump with its analysis, computed once and shared by every export.

use heapdump_analyze::dominators::{self, Dominators};
use heapdump_analyze::leaks::Leaks;
use heapdump_analyze::symbols::{Frame, Symbolizer};
use heapdump_analyze::types::{Types, UNKNOWN};
use heapdump_analyze::{BlockId, DumpFile, Heap};
use std::cell::RefCell;
use std::collections::HashMap;

/// A loaded dump and its analysis.
pub struct Explained<'h> {
    /// The graph.
    pub heap: &'h Heap,
    /// Leak classes.
    pub leaks: Leaks,
    /// Dominator tree and retained sizes (lost structures hang off the
    /// virtual root, led by their definitely lost block).
    pub dominators: Dominators,
    sym: RefCell<Symbolizer<'h>>,
    types: RefCell<Types<'h>>,
    children: Vec<u32>,
    child_start: Vec<u32>,
}

impl<'h> Explained<'h> {
    /// Analyses `heap` (loaded from `file`).
    pub fn new(file: &'h DumpFile, heap: &'h Heap) -> Explained<'h> {
        let (leaks, dominators) = dominators::of_dump(file, heap);
        // Children lists of the dominator tree (index n = the virtual root).
        let n = heap.len();
        let parent = |i: usize| dominators.idom(BlockId(i as u32)).map_or(n, |b| b.index());
        let mut child_start = vec![0u32; n + 2];
        for i in 0..n {
            child_start[parent(i) + 1] += 1;
        }
        for i in 0..=n {
            child_start[i + 1] += child_start[i];
        }
        let mut fill = child_start.clone();
        let mut children = vec![0u32; n];
        for i in 0..n {
            let p = parent(i);
            children[fill[p] as usize] = i as u32;
            fill[p] += 1;
        }
        // Largest retained first.
        for p in 0..=n {
            let s = &mut children[child_start[p] as usize..child_start[p + 1] as usize];
            s.sort_by(|&a, &b| dominators.retained[b as usize].cmp(&dominators.retained[a as usize]).then(a.cmp(&b)));
        }
        let types = RefCell::new(Types::new(file, heap));
        Explained { heap, leaks, dominators, sym: RefCell::new(Symbolizer::new(heap)), types, children, child_start }
    }

    /// Blocks immediately dominated by `b` (`None` = the virtual root),
    /// largest retained size first.
    pub fn dominated_by(&self, b: Option<BlockId>) -> &[u32] {
        let p = b.map_or(self.heap.len(), |b| b.index());
        &self.children[self.child_start[p] as usize..self.child_start[p + 1] as usize]
    }

    /// One-line name of a site.
    pub fn site_label(&self, site: u32) -> String {
        self.sym.borrow_mut().site_label(site)
    }

    /// All frames of a site, innermost first.
    pub fn site_frames(&self, site: u32) -> Vec<Frame> {
        self.sym.borrow_mut().site_frames(site)
    }

    /// The frames at one return address (inlined first), without the
    /// tracker's own.
    pub fn frames_at(&self, addr: u64) -> Vec<Frame> {
        self.sym.borrow_mut().program_frames(addr)
    }

    /// A site's return addresses, innermost first, starting at the
    /// allocation function the program called.
    pub fn site_addresses(&self, site: u32) -> Vec<u64> {
        self.sym.borrow_mut().site_addresses(site)
    }

    /// The type a site allocates, where its frames say ("unknown" if not).
    pub fn type_of(&self, site: u32) -> String {
        self.types.borrow_mut().of_site(&mut self.sym.borrow_mut(), site)
    }

    /// The type of one block: its site's, or the concrete type of a trait
    /// object pointing at it (full dumps).
    pub fn type_of_block(&self, b: BlockId) -> String {
        self.types.borrow_mut().of_block(&mut self.sym.borrow_mut(), self.heap, b)
    }

    /// Whether some blocks are named individually (by vtables), not only by site.
    pub fn has_block_types(&self) -> bool {
        self.types.borrow_mut().has_block_names(&mut self.sym.borrow_mut(), self.heap)
    }

    /// The grouping `top` shows, with this analysis's type names.
    pub fn top(&self, by: heapdump_analyze::group::GroupBy) -> Vec<heapdump_analyze::group::Row> {
        heapdump_analyze::group::top(self.heap, &mut self.sym.borrow_mut(), &mut self.types.borrow_mut(), by)
    }

    /// A short name for a block: its type if known, else its site.
    pub fn block_name(&self, b: BlockId, site_labels: &mut HashMap<u32, String>) -> String {
        let t = self.type_of_block(b);
        if t != UNKNOWN {
            return t;
        }
        let site = self.heap.block(b).site;
        site_labels.entry(site).or_insert_with(|| self.site_label(site)).clone()
    }
}
