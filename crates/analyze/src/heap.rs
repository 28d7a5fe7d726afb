//! The graph of a dump: its blocks, pointers and roots (loaded by
//! [`Heap::load`], in `load.rs`).
//!
//! Blocks (live allocations) are sorted by address and numbered
//! ([`BlockId`]); the pointers between them are stored in compressed
//! sparse rows: for block `i`, `edges[edge_start[i]..edge_start[i+1]]`.
//! Edges come from the compact records' pointer lists, or from a
//! conservative scan of full contents (every aligned word that points to
//! the start or the inside of a live block). Roots come from the thread
//! stacks and registers and the static segments.

use crate::slab::Slab;
use heapdump_format::{raw, Header, Trailer};
use std::collections::HashMap;

/// Index of a block in [`Heap::blocks`] (by address).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockId(pub u32);

impl BlockId {
    /// As an index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// An allocation site as the dump numbers it: the key of its SITE record
/// (its return addresses); [`SiteId::NONE`] when no site was recorded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SiteId(pub u32);

impl SiteId {
    /// No site recorded (tracking without backtraces, an unsampled block).
    pub const NONE: SiteId = SiteId(0);
}

impl std::fmt::Display for SiteId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// One live allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// Address.
    pub addr: u64,
    /// Requested size.
    pub size: u64,
    /// Its allocation site.
    pub site: SiteId,
    /// `ALLOC_*` flags.
    pub flags: u8,
}

/// A pointer from one block (or root) into another block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edge {
    /// The block pointed into.
    pub target: BlockId,
    /// Offset of the pointer word in its source.
    pub offset: u64,
    /// Whether it points inside the target rather than at its start.
    pub interior: bool,
    /// Where inside the target it points (0 for a start pointer).
    pub into: u64,
}

/// Where a root pointer lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RootSource {
    /// A thread's stack.
    Stack {
        /// Thread id.
        tid: u32,
        /// Thread name.
        thread: String,
        /// Stack address of the word.
        address: u64,
    },
    /// A thread's register.
    Register {
        /// Thread id.
        tid: u32,
        /// Thread name.
        thread: String,
        /// Register name.
        register: &'static str,
    },
    /// A static segment (or thread-local block).
    Static {
        /// Module path (or the region's name when not in a module).
        module: String,
        /// Region name.
        name: String,
        /// Address of the word.
        address: u64,
    },
}

impl std::fmt::Display for RootSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RootSource::Stack { tid, thread, address } => write!(f, "stack of thread {tid} ({thread}) at {address:#x}"),
            RootSource::Register { tid, thread, register } => write!(f, "register {register} of thread {tid} ({thread})"),
            RootSource::Static { module, name, address } => write!(f, "static {name} of {module} at {address:#x}"),
        }
    }
}

/// A root pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Root {
    /// Index into [`Heap::root_regions`].
    pub region: u32,
    /// Offset of the word in the region (register index for registers).
    pub offset: u64,
    /// The block it points into.
    pub target: BlockId,
    /// Interior pointer.
    pub interior: bool,
    /// Where inside the target it points (0 for a start pointer).
    pub into: u64,
}

/// A region roots come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RootRegion {
    /// What it is.
    pub kind: RootKind,
    /// Start address (0 for registers).
    pub address: u64,
    /// Thread id, for stacks and registers.
    pub tid: u32,
    /// Thread name or module path (shared by the regions that have it: a
    /// dump of thousands of STATIC records holds each name once).
    pub owner: std::sync::Arc<str>,
    /// Static region name.
    pub name: std::sync::Arc<str>,
    /// Whether this is the C library's own data (see [`Heap::load`]).
    pub libc: bool,
}

/// Kinds of root region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RootKind {
    /// Thread stack.
    Stack,
    /// Thread registers.
    Registers,
    /// Static data.
    Static,
}

/// The address ranges of the modules' segments, for the question "could
/// this word point into a module?" asked of every block's first word.
pub(crate) struct ModuleRanges {
    /// Sorted by start.
    ranges: Vec<(u64, u64)>,
    lo: u64,
    hi: u64,
}

impl ModuleRanges {
    pub(crate) fn of(modules: &[ModuleInfo]) -> ModuleRanges {
        let mut ranges: Vec<(u64, u64)> = modules
            .iter()
            .flat_map(|m| {
                m.segments.iter().map(move |s| (m.bias.wrapping_add(s.vaddr), m.bias.wrapping_add(s.vaddr).wrapping_add(s.memsz)))
            })
            .filter(|(a, b)| a < b)
            .collect();
        ranges.sort_unstable();
        // Overlapping ones (a damaged dump's) merged: then only the last
        // range starting at or before a word can hold it.
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
        for (a, b) in ranges {
            match merged.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        let lo = merged.first().map_or(u64::MAX, |r| r.0);
        let hi = merged.last().map_or(0, |r| r.1);
        ModuleRanges { ranges: merged, lo, hi }
    }

    /// Whether no module has a segment.
    pub(crate) fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Whether `v` lies in some module's segment.
    pub(crate) fn contains(&self, v: u64) -> bool {
        if v < self.lo || v >= self.hi {
            return false;
        }
        let i = self.ranges.partition_point(|r| r.0 <= v);
        i > 0 && v < self.ranges[i - 1].1
    }
}

/// The first word of an ALLOC record's block, as a vtable pointer would
/// be: the record's (a full dump's read from the contents), none for a
/// block too short to hold one in full.
pub(crate) fn first_word(a: &heapdump_format::WithContents<'_, heapdump_format::Alloc>) -> u64 {
    match a.contents {
        heapdump_format::ContentsRef::Full(_) if a.size < 8 => 0,
        _ => a.first_word,
    }
}

/// A loaded module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleInfo {
    /// Path.
    pub path: String,
    /// Build id.
    pub build_id: Vec<u8>,
    /// Load bias.
    pub bias: u64,
    /// Segments.
    pub segments: Vec<heapdump_format::Segment>,
}

impl ModuleInfo {
    /// The module a MODULE record describes.
    pub(crate) fn of(m: &heapdump_format::Module<'_>) -> ModuleInfo {
        ModuleInfo {
            path: String::from_utf8_lossy(m.path).into_owned(),
            build_id: m.build_id.to_vec(),
            bias: m.bias,
            segments: m.segments().collect(),
        }
    }
}

/// A thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadInfo {
    /// Thread id.
    pub tid: u32,
    /// Name.
    pub name: String,
    /// Flags.
    pub flags: u32,
    /// Dumped stack range.
    pub stack: (u64, u64),
}

/// A loaded dump: the graph and everything needed to explain it.
pub struct Heap {
    /// File header.
    pub header: Header,
    /// Executable path.
    pub exe: String,
    /// Command line.
    pub cmdline: Vec<String>,
    /// Backtrace mode and sampling mean.
    pub backtrace: heapdump_format::Backtrace,
    /// Mean sampling interval.
    pub sample_mean: u64,
    /// Modules in file order.
    pub modules: Vec<ModuleInfo>,
    /// Threads.
    pub threads: Vec<ThreadInfo>,
    /// Sites by id: return addresses, innermost first.
    pub sites: HashMap<SiteId, Vec<u64>>,
    /// Blocks sorted by address.
    pub(crate) blocks: Blocks,
    /// Start of each block's edges (n + 1 entries).
    pub(crate) edge_start: Slab<u32>,
    pub(crate) edge_target: Slab<u32>,
    pub(crate) edge_offset: Offsets,
    /// Offsets into the target of interior edges, by edge index.
    pub(crate) interior_into: HashMap<u32, u64>,
    /// The block of each allocation ordinal (file order), when the dump's
    /// allocations were not in address order; else the ordinal is the block.
    pub(crate) block_of: Option<Slab<u32>>,
    /// Root pointers.
    pub roots: Vec<Root>,
    /// Where roots live.
    pub root_regions: Vec<RootRegion>,
    /// The trailer, when the dump is complete.
    pub trailer: Option<Trailer>,
    /// The signal the dump was taken for, when one was.
    pub signal: Option<heapdump_format::SignalInfo>,
    /// What is missing when the dump was cut short.
    pub truncated: Option<String>,
    /// Whether every root record was read: the dump is complete, or was cut
    /// after the roots (writers put THREAD and STATIC records before SITE
    /// and ALLOC ones).
    pub(crate) roots_complete: bool,
    /// The first words of blocks that fall inside a module's segments
    /// (the only ones that can point at a C++ vtable), as (block address,
    /// word), noted while loading reads every block anyway; `None` when
    /// not known (a MODULE record after the first allocation, a heap built
    /// by hand): the vtable scan then reads the dump again.
    pub(crate) module_words: Option<Vec<[u64; 2]>>,
    /// How sampled blocks stand for the unsampled rest (see [`Heap::weight`]).
    pub(crate) sample_scale: std::sync::OnceLock<Option<(f64, f64)>>,
    /// The edges' tables (and the block of each record) of a graph read
    /// from the cache whose check waits for their first read (see
    /// `graph_cache::EdgesLater`); `None`: checked, or built here.
    pub(crate) edges_later: Option<std::sync::Arc<crate::graph_cache::EdgesLater>>,
}

/// The blocks, sorted by address, 16 bytes each: the address, then the
/// size (32 bits), site (24) and flags (8) in one word. A block whose size
/// or site does not fit keeps both in `wide` (by block index), its size
/// field saying so.
#[derive(Clone, Debug, Default)]
pub(crate) struct Blocks {
    pub(crate) packed: Slab<Packed>,
    pub(crate) wide: HashMap<u32, (u64, SiteId)>,
}

/// A block as [`Blocks`] stores it.
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
pub(crate) struct Packed {
    pub(crate) addr: u64,
    pub(crate) rest: u64,
}

impl Blocks {
    const WIDE: u64 = u32::MAX as u64;

    /// The blocks of `parts`, one after the other, in address order.
    pub(crate) fn from_sorted(parts: &[&[Block]]) -> Blocks {
        let mut blocks = Blocks::with_capacity(parts.iter().map(|p| p.len()).sum());
        for &x in parts.iter().flat_map(|p| p.iter()) {
            blocks.push(x);
        }
        blocks
    }

    pub(crate) fn with_capacity(n: usize) -> Blocks {
        Blocks { packed: Vec::with_capacity(n).into(), wide: HashMap::new() }
    }

    /// The table of packed blocks and the wide ones by index.
    pub(crate) fn from_parts(packed: Vec<Packed>, wide: HashMap<u32, (u64, SiteId)>) -> Blocks {
        Blocks { packed: packed.into(), wide }
    }

    /// Adds a block after the others (kept in address order).
    #[inline]
    pub(crate) fn push(&mut self, x: Block) {
        let p = Self::pack(self.packed.len() as u32, &x, &mut self.wide);
        self.packed.to_mut().push(p);
    }

    /// Block `x` packed as the table's `i`th, its size and site noted in
    /// `wide` when they do not fit.
    #[inline]
    pub(crate) fn pack(i: u32, x: &Block, wide: &mut HashMap<u32, (u64, SiteId)>) -> Packed {
        let (size, site) = if x.size < Self::WIDE && x.site.0 < 1 << 24 {
            (x.size, x.site.0)
        } else {
            wide.insert(i, (x.size, x.site));
            (Self::WIDE, 0)
        };
        Packed { addr: x.addr, rest: size | u64::from(site) << 32 | u64::from(x.flags) << 56 }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.packed.len()
    }

    #[inline]
    pub(crate) fn addr(&self, i: usize) -> u64 {
        self.packed[i].addr
    }

    #[inline]
    pub(crate) fn size(&self, i: usize) -> u64 {
        match self.packed[i].rest & Self::WIDE {
            Self::WIDE => self.wide.get(&(i as u32)).map_or(0, |w| w.0),
            s => s,
        }
    }

    /// Every block's size, in order (the table looked up once: an
    /// index into a mapped table costs a check of the mapping each time).
    #[inline]
    pub(crate) fn sizes(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        self.packed.iter().enumerate().map(|(i, p)| match p.rest & Self::WIDE {
            Self::WIDE => self.wide.get(&(i as u32)).map_or(0, |w| w.0),
            s => s,
        })
    }

    /// Block `i`'s site.
    #[inline]
    pub(crate) fn site(&self, i: usize) -> SiteId {
        let p = self.packed[i];
        match p.rest & Self::WIDE {
            Self::WIDE => self.wide.get(&(i as u32)).map_or(SiteId::NONE, |w| w.1),
            _ => SiteId((p.rest >> 32) as u32 & 0xff_ffff),
        }
    }

    #[inline]
    pub(crate) fn get(&self, i: usize) -> Block {
        let p = self.packed[i];
        let (size, site) = match p.rest & Self::WIDE {
            Self::WIDE => self.wide.get(&(i as u32)).copied().unwrap_or((0, SiteId::NONE)),
            s => (s, SiteId((p.rest >> 32) as u32 & 0xff_ffff)),
        };
        Block { addr: p.addr, size, site, flags: (p.rest >> 56) as u8 }
    }

    /// `lo` plus the number of blocks in `lo..hi` starting at or before `v`.
    #[inline]
    pub(crate) fn partition(&self, lo: usize, hi: usize, v: u64) -> usize {
        lo + self.packed[lo..hi].partition_point(|b| b.addr <= v)
    }
}

/// Each edge's offset in its source block, a byte an edge: how many words
/// past the previous edge of its block it is (the first edge: past the
/// block's start), or [`Offsets::ANCHOR`] when its exact offset is kept
/// aside in `anchors`, by edge index (a gap of 2 KiB or more, an unaligned
/// offset from another writer, and every 64th edge of a block, so that
/// any edge is at most 63 bytes' sum from a known offset). Pointers sit
/// in words one after the other (an array, a struct's fields, a hash
/// table's buckets): a byte holds their gaps. (As a 32-bit word index
/// each edge took four bytes: 120 MB of the 10 M-block dense heap's
/// analysis, the largest table after the blocks.)
#[derive(Clone, Debug, Default)]
pub(crate) struct Offsets {
    pub(crate) deltas: Slab<u8>,
    pub(crate) anchors: Slab<WideOffset>,
}

/// An edge's exact offset, by edge index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
pub(crate) struct WideOffset {
    pub(crate) edge: u32,
    /// Zero (the layout's padding, written out).
    pub(crate) pad: u32,
    pub(crate) offset: u64,
}

/// Where the encoding of a block's edges' offsets stands: the previous
/// edge's offset and how many came before (a fresh cursor for each block).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct OffsetCursor {
    prev: u64,
    i: u32,
}

impl OffsetCursor {
    /// The byte of the block's next edge, edge `edge` of the table, at
    /// `offset`, and the entry that keeps its offset aside when the byte
    /// is [`Offsets::ANCHOR`].
    #[inline]
    pub(crate) fn next(&mut self, edge: usize, offset: u64) -> (u8, Option<WideOffset>) {
        let anchored = self.i % Offsets::EVERY == 0 && self.i != 0;
        let d = match offset.checked_sub(self.prev) {
            Some(d) if !anchored && d % 8 == 0 && d / 8 < u64::from(Offsets::ANCHOR) => (d / 8) as u8,
            _ => Offsets::ANCHOR,
        };
        self.prev = offset;
        self.i = self.i.wrapping_add(1);
        (d, (d == Offsets::ANCHOR).then_some(WideOffset { edge: edge as u32, pad: 0, offset }))
    }
}

impl Offsets {
    /// The byte of an edge whose offset is in `anchors`.
    pub(crate) const ANCHOR: u8 = u8::MAX;
    /// Every this many edges of a block, one is anchored.
    pub(crate) const EVERY: u32 = 64;

    pub(crate) fn with_capacity(n: usize) -> Offsets {
        Offsets { deltas: Vec::with_capacity(n).into(), anchors: Slab::default() }
    }

    /// Adds the next edge of the block `cursor` follows.
    pub(crate) fn push(&mut self, cursor: &mut OffsetCursor, offset: u64) {
        let (d, anchor) = cursor.next(self.deltas.len(), offset);
        self.anchors.to_mut().extend(anchor);
        self.deltas.to_mut().push(d);
    }

    /// The offsets of the edges `s..e` of one block (all of its edges,
    /// or the first `e - s`), in order.
    pub(crate) fn of_block(&self, s: usize, e: usize) -> OffsetIter<'_> {
        let a = &self.anchors[self.anchors.partition_point(|w| (w.edge as usize) < s)..];
        let a = &a[..a.partition_point(|w| (w.edge as usize) < e)];
        OffsetIter { deltas: &self.deltas, anchors: a, ahead: 0, s, k: s, e, cur: 0 }
    }

    /// The offset of edge `k`, whose block's edges start at edge `s`.
    pub(crate) fn get(&self, s: usize, k: usize) -> u64 {
        offset_in(&self.deltas, &self.anchors, s, k)
    }

    pub(crate) fn shrink_to_fit(&mut self) {
        self.deltas.to_mut().shrink_to_fit();
        self.anchors.to_mut().shrink_to_fit();
    }
}

/// The offset of edge `k` of the block whose edges start at `s`: from the
/// last anchor at or before it in the block (or the block's start), the
/// deltas after it summed.
#[inline]
fn offset_in(deltas: &[u8], anchors: &[WideOffset], s: usize, k: usize) -> u64 {
    let (cur, from) = match anchors.partition_point(|w| w.edge as usize <= k).checked_sub(1).map(|i| anchors[i]) {
        Some(w) if w.edge as usize >= s => (w.offset, w.edge as usize + 1),
        _ => (0, s),
    };
    deltas.get(from..=k).unwrap_or_default().iter().fold(cur, |o, &d| o.wrapping_add(u64::from(d) * 8))
}

/// The offsets of a run of one block's edges (see [`Offsets::of_block`]):
/// in order, each from the one before, or from the end, each found anew.
pub(crate) struct OffsetIter<'a> {
    deltas: &'a [u8],
    /// The anchors of the run's edges, and how many of them are behind
    /// edge `k`.
    anchors: &'a [WideOffset],
    ahead: usize,
    /// The block's first edge.
    s: usize,
    k: usize,
    e: usize,
    /// The offset of edge `k - 1` (0 at the block's start).
    cur: u64,
}

impl Iterator for OffsetIter<'_> {
    type Item = u64;

    #[inline]
    fn next(&mut self) -> Option<u64> {
        if self.k >= self.e {
            return None;
        }
        let k = self.k;
        self.k += 1;
        self.cur = match self.anchors.get(self.ahead) {
            Some(w) if w.edge as usize == k => {
                self.ahead += 1;
                w.offset
            }
            _ => self.cur.wrapping_add(u64::from(self.deltas[k]) * 8),
        };
        Some(self.cur)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.e - self.k, Some(self.e - self.k))
    }
}

impl DoubleEndedIterator for OffsetIter<'_> {
    fn next_back(&mut self) -> Option<u64> {
        if self.k >= self.e {
            return None;
        }
        self.e -= 1;
        Some(offset_in(self.deltas, self.anchors, self.s, self.e))
    }
}

impl ExactSizeIterator for OffsetIter<'_> {}

/// Bit 31 of an edge target: the pointer is interior.
pub(crate) const INTERIOR: u32 = 1 << 31;

/// Largest number of blocks a dump may hold for this analyser.
pub const MAX_BLOCKS: usize = (1 << 31) - 1;

impl Heap {
    /// Builds a heap directly (for tests and synthetic benchmarks): blocks
    /// sorted by address, edges as (source, target, offset, interior).
    /// Edges are (source, target, source offset, offset into the target;
    /// non-zero means interior).
    pub fn from_parts(
        header: Header,
        mut blocks: Vec<Block>,
        edges: &[(u32, u32, u64, u64)],
        roots: Vec<Root>,
        root_regions: Vec<RootRegion>,
    ) -> Heap {
        blocks.sort_unstable_by_key(|b| b.addr);
        let n = blocks.len();
        let mut counts = vec![0u32; n + 1];
        for &(s, ..) in edges {
            counts[s as usize + 1] += 1;
        }
        for i in 0..n {
            counts[i + 1] += counts[i];
        }
        let mut fill = counts.clone();
        let mut target = vec![0u32; edges.len()];
        let mut offsets = vec![0u64; edges.len()];
        let mut interior_into = HashMap::new();
        for &(s, t, o, into) in edges {
            let k = fill[s as usize] as usize;
            fill[s as usize] += 1;
            target[k] = t | if into != 0 { INTERIOR } else { 0 };
            offsets[k] = o;
            if into != 0 {
                interior_into.insert(k as u32, into);
            }
        }
        let mut offset = Offsets::with_capacity(edges.len());
        for b in 0..n {
            let mut cursor = OffsetCursor::default();
            for &o in &offsets[counts[b] as usize..counts[b + 1] as usize] {
                offset.push(&mut cursor, o);
            }
        }
        Heap {
            blocks: Blocks::from_sorted(&[&blocks]),
            edge_start: counts.into(),
            edge_target: target.into(),
            edge_offset: offset,
            interior_into,
            roots,
            root_regions,
            ..Heap::empty(header)
        }
    }

    /// The address of the allocation with this ordinal (its number in the
    /// file, as ALLOCS pointers name their targets).
    pub fn block_ordinal_address(&self, ordinal: u64) -> Option<u64> {
        let i = usize::try_from(ordinal).ok().filter(|&i| i < self.blocks.len())?;
        self.edges_checked();
        let b = self.block_of.as_ref().map_or(i, |m| m[i] as usize);
        Some(self.blocks.addr(b))
    }

    pub(crate) fn empty(header: Header) -> Heap {
        Heap {
            header,
            exe: String::new(),
            cmdline: vec![],
            backtrace: heapdump_format::Backtrace::Off,
            sample_mean: 0,
            modules: vec![],
            threads: vec![],
            sites: HashMap::new(),
            blocks: Blocks::default(),
            edge_start: Slab::default(),
            edge_target: Slab::default(),
            edge_offset: Offsets::default(),
            interior_into: HashMap::new(),
            block_of: None,
            roots: vec![],
            root_regions: vec![],
            trailer: None,
            signal: None,
            truncated: None,
            roots_complete: true,
            module_words: None,
            sample_scale: std::sync::OnceLock::new(),
            edges_later: None,
        }
    }

    /// The edges' tables checked, when their check waited for their first
    /// read (the viewer's summary, leaks and tree pages read none: at 10^8
    /// blocks 1.4 GB of the kept graph's 3.0 GB). Every read of the tables comes
    /// through here first; a damaged table found now ends the process with
    /// the caller's one-line error (`Options::edges_checked_when_read`),
    /// never an answer read from it.
    #[inline]
    pub(crate) fn edges_checked(&self) {
        if let Some(later) = &self.edges_later {
            later.check(self);
        }
    }

    /// Whether the dump holds all its roots (see `roots_complete`): without
    /// them no block can be called lost.
    pub fn has_roots(&self) -> bool {
        self.roots_complete
    }

    /// The number of root regions: thread stacks, thread-local areas,
    /// static segments and anonymous regions (a THREAD record's stack and
    /// every STATIC record; a thread's registers are part of its stack's
    /// region). The `roots` of `summary`, `export --format json` and
    /// `report`.
    pub fn root_region_count(&self) -> u64 {
        self.root_regions.iter().filter(|r| r.kind != RootKind::Registers).count() as u64
    }

    /// The module whose executable segment holds `addr` (its index in
    /// [`Heap::modules`]): where a return address's code comes from.
    pub fn code_module(&self, addr: u64) -> Option<usize> {
        self.modules.iter().position(|m| {
            m.segments.iter().any(|s| {
                let start = m.bias.wrapping_add(s.vaddr);
                s.flags & raw::SEG_X != 0 && addr >= start && addr < start.wrapping_add(s.memsz)
            })
        })
    }

    /// The blocks whose first word lies in a module's segment (the only
    /// words that can point at a C++ vtable), as (block address, word), in
    /// file order; `None` when loading could not note them.
    pub fn module_words(&self) -> Option<&[[u64; 2]]> {
        self.module_words.as_deref()
    }

    /// Number of blocks.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Which of the heap's large tables are read from a file (moved or
    /// built there, or kept in a cache), by name: `blocks`, `edge starts`,
    /// `edge targets`, `edge offsets`.
    #[doc(hidden)]
    pub fn tables_in_files(&self) -> Vec<&'static str> {
        [
            ("blocks", self.blocks.packed.in_a_file()),
            ("edge starts", self.edge_start.in_a_file()),
            ("edge targets", self.edge_target.in_a_file()),
            ("edge offsets", self.edge_offset.deltas.in_a_file()),
        ]
        .into_iter()
        .filter_map(|(name, yes)| yes.then_some(name))
        .collect()
    }

    /// Whether there are no blocks.
    pub fn is_empty(&self) -> bool {
        self.blocks.len() == 0
    }

    /// The block.
    pub fn block(&self, id: BlockId) -> Block {
        self.blocks.get(id.index())
    }

    /// Every block, in address order (block `i` is `BlockId(i)`).
    pub fn blocks(&self) -> impl ExactSizeIterator<Item = Block> + DoubleEndedIterator + '_ {
        (0..self.blocks.len()).map(|i| self.blocks.get(i))
    }

    /// A block's size.
    #[inline]
    pub fn size(&self, id: BlockId) -> u64 {
        self.blocks.size(id.index())
    }

    /// The block containing `addr` (its start, or inside it), and whether
    /// `addr` is interior.
    #[inline]
    pub fn find(&self, addr: u64) -> Option<(BlockId, bool)> {
        let i = self.blocks.partition(0, self.blocks.len(), addr).checked_sub(1)?;
        holder(&self.blocks, i, addr)
    }

    /// The block starting exactly at `addr`.
    pub fn find_start(&self, addr: u64) -> Option<BlockId> {
        self.blocks.packed.binary_search_by_key(&addr, |b| b.addr).ok().map(|i| BlockId(i as u32))
    }

    /// The pointers out of a block.
    pub fn edges(&self, id: BlockId) -> impl DoubleEndedIterator<Item = Edge> + ExactSizeIterator + '_ {
        self.edges_checked();
        let s = self.edge_start[id.index()] as usize;
        let e = self.edge_start[id.index() + 1] as usize;
        (s..e).zip(self.edge_offset.of_block(s, e)).map(move |(k, offset)| {
            let t = self.edge_target[k];
            let interior = t & INTERIOR != 0;
            let into = if interior { self.interior_into.get(&(k as u32)).copied().unwrap_or(0) } else { 0 };
            Edge { target: BlockId(t & !INTERIOR), offset, interior, into }
        })
    }

    /// The pointers out of a block without their offsets (target, whether
    /// interior, where inside the target): what a walk of the graph needs,
    /// without an offset lookup per edge.
    #[inline]
    pub(crate) fn links(&self, id: BlockId) -> impl DoubleEndedIterator<Item = (BlockId, bool, u64)> + '_ {
        self.edges_checked();
        let s = self.edge_start[id.index()] as usize;
        let e = self.edge_start[id.index() + 1] as usize;
        self.edge_target[s..e].iter().enumerate().map(move |(i, &t)| {
            let interior = t & INTERIOR != 0;
            let into = if interior { self.interior_into.get(&((s + i) as u32)).copied().unwrap_or(0) } else { 0 };
            (BlockId(t & !INTERIOR), interior, into)
        })
    }

    /// Edge `k` (an index into the edge tables).
    pub(crate) fn edge_at(&self, k: usize) -> Edge {
        self.edges_checked();
        let t = self.edge_target[k];
        let interior = t & INTERIOR != 0;
        let into = if interior { self.interior_into.get(&(k as u32)).copied().unwrap_or(0) } else { 0 };
        Edge { target: BlockId(t & !INTERIOR), offset: self.edge_offset_at(k), interior, into }
    }

    /// The offset in its source of edge `k` (an index into the edge tables).
    #[inline]
    pub(crate) fn edge_offset_at(&self, k: usize) -> u64 {
        self.edges_checked();
        // The block holding edge k: the last whose edges start at or
        // before it.
        let before = self.edge_start.partition_point(|&s| s as usize <= k);
        let s = before.checked_sub(1).map_or(0, |b| self.edge_start[b] as usize);
        self.edge_offset.get(s, k)
    }

    /// The edge tables: block `b`'s edges are `targets[starts[b]..starts[b + 1]]`
    /// (block index, interior bit 31).
    #[inline]
    pub(crate) fn raw_edges(&self) -> (&[u32], &[u32]) {
        self.edges_checked();
        (&self.edge_start, &self.edge_target)
    }

    /// Number of edges.
    pub fn edge_count(&self) -> usize {
        self.edge_target.len()
    }

    /// Total requested bytes.
    pub fn total_bytes(&self) -> u64 {
        (0..self.blocks.len()).map(|i| self.blocks.size(i)).sum()
    }

    /// Describes a root pointer.
    pub fn root_source(&self, r: &Root) -> RootSource {
        let reg = &self.root_regions[r.region as usize];
        match reg.kind {
            RootKind::Stack => RootSource::Stack { tid: reg.tid, thread: reg.owner.to_string(), address: reg.address + r.offset },
            RootKind::Registers => RootSource::Register {
                tid: reg.tid,
                thread: reg.owner.to_string(),
                register: raw::X86_64_REG_NAMES.get(r.offset as usize).copied().unwrap_or("fs (thread pointer)"),
            },
            RootKind::Static => {
                RootSource::Static { module: reg.owner.to_string(), name: reg.name.to_string(), address: reg.address + r.offset }
            }
        }
    }

    /// The weight of a block in bytes: what it stands for in totals by
    /// site, type or size.
    ///
    /// With sampled sites (`--backtrace sampled`), every live block is in
    /// the dump but only the sampled ones have a site. A sampled block of
    /// `s` bytes stands for `s / (1 - exp(-s/m))` bytes (the unbiased
    /// estimator jemalloc and tcmalloc use); here that estimate *replaces*
    /// the unsampled blocks rather than adding to them: unsampled blocks
    /// weigh 0, and each sampled block's excess over its own size is scaled
    /// so that the excesses add up to exactly the unsampled bytes. Totals
    /// then equal the live bytes, and each site gets its estimated share of
    /// the unsampled rest. Without sampling (or with no sampled block) the
    /// weight is the size.
    pub fn weight(&self, b: &Block) -> f64 {
        match self.scale() {
            Some((k, _)) if b.flags & raw::ALLOC_SAMPLED != 0 => b.size as f64 + k * (self.raw_weight(b) - b.size as f64),
            Some(_) => 0.0,
            None => b.size as f64,
        }
    }

    /// How many blocks `b` stands for, in the same way as [`Heap::weight`]
    /// (the counts add up to the number of live blocks).
    pub fn count_weight(&self, b: &Block) -> f64 {
        match self.scale() {
            Some((_, k)) if b.flags & raw::ALLOC_SAMPLED != 0 => 1.0 + k * (self.raw_weight(b) / (b.size.max(1) as f64) - 1.0),
            Some(_) => 0.0,
            None => 1.0,
        }
    }

    fn raw_weight(&self, b: &Block) -> f64 {
        if b.size == 0 || self.sample_mean == 0 {
            return b.size as f64;
        }
        let s = b.size as f64;
        let x = s / self.sample_mean as f64;
        // The chance the block was sampled. Where `x` is too small for
        // `1 - e^-x` to differ from 0 (a mean near 2^64 in a damaged or
        // crafted dump), that form gave an infinite weight, then NaN, and
        // `top` dropped every row: `expm1` keeps it finite there.
        let p = match 1.0 - (-x).exp() {
            p if p > 0.0 => p,
            _ => -(-x).exp_m1(),
        };
        if p > 0.0 && p.is_finite() {
            s / p
        } else {
            s
        }
    }

    /// (bytes factor, count factor) of the sampled excess, or `None` when
    /// weights are plain sizes.
    fn scale(&self) -> Option<(f64, f64)> {
        *self.sample_scale.get_or_init(|| {
            if self.sample_mean == 0 {
                return None;
            }
            let (mut excess, mut excess_n, mut rest, mut rest_n) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
            for b in self.blocks() {
                if b.flags & raw::ALLOC_SAMPLED != 0 && b.size > 0 {
                    let w = self.raw_weight(&b);
                    excess += w - b.size as f64;
                    excess_n += w / b.size as f64 - 1.0;
                } else {
                    rest += b.size as f64;
                    rest_n += 1.0;
                }
            }
            if excess <= 0.0 || excess_n <= 0.0 {
                return None;
            }
            Some((rest / excess, rest_n / excess_n))
        })
    }
}

/// Rounds `values` to integers whose sum is the rounded sum of the values
/// (largest remainders get the spare units), so that rows of estimated
/// bytes add up to the total they share.
pub fn round_keeping_sum(values: &[f64]) -> Vec<u64> {
    let total = values.iter().sum::<f64>().round().max(0.0) as u64;
    let mut out: Vec<u64> = values.iter().map(|v| v.max(0.0).floor() as u64).collect();
    let mut short = total.saturating_sub(out.iter().sum());
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| (values[b] - values[b].floor()).total_cmp(&(values[a] - values[a].floor())).then(a.cmp(&b)));
    for i in order {
        if short == 0 {
            break;
        }
        out[i] += 1;
        short -= 1;
    }
    out
}

/// Whether block `i`, the last one starting at or before `v`, holds `v`:
/// its id, and whether `v` points inside it rather than at its start.
#[inline]
pub(crate) fn holder(blocks: &Blocks, i: usize, v: u64) -> Option<(BlockId, bool)> {
    let a = blocks.addr(i);
    if v == a {
        Some((BlockId(i as u32), false))
    } else if v > a && v < a + blocks.size(i) {
        Some((BlockId(i as u32), true))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sizes, sites and flags at and past what the packed form holds come
    /// back exactly, and lookups inside a block too large for it still
    /// find the block.
    #[test]
    fn blocks_keep_what_does_not_pack() {
        let list = [
            Block { addr: 0x1000, size: 0, site: SiteId(0), flags: 0 },
            Block { addr: 0x2000, size: u64::from(u32::MAX) - 1, site: SiteId((1 << 24) - 1), flags: 0xff },
            Block { addr: 0x1_0000_2000, size: u64::from(u32::MAX), site: SiteId(7), flags: 1 },
            Block { addr: 0x2_0000_2000, size: 5 << 32, site: SiteId(1 << 24), flags: 2 },
            Block { addr: 0x4_0000_0000, size: 48, site: SiteId(u32::MAX), flags: 3 },
        ];
        let b = Blocks::from_sorted(&[&list]);
        for (i, x) in list.iter().enumerate() {
            assert_eq!(b.get(i), *x);
            assert_eq!((b.addr(i), b.size(i)), (x.addr, x.size));
        }
        assert_eq!(holder(&b, 3, 0x2_0000_2000 + (4 << 32)), Some((BlockId(3), true)));
        assert_eq!(holder(&b, 3, 0x2_0000_2000 + (5 << 32)), None);
    }

    /// A block's edges give each offset exactly, forwards and backwards,
    /// and one at a time by edge index, wherever the offsets kept aside
    /// sit (unaligned in the middle, large at the end, all of them).
    #[test]
    fn edges_find_their_offsets_kept_aside() {
        let blocks: Vec<Block> = (0..4u64).map(|i| Block { addr: 0x1000 * (i + 1), size: 16, site: SiteId(0), flags: 0 }).collect();
        let offsets: [&[u64]; 4] = [&[0, 3, 8, 600_000, 1 << 36, (1 << 36) + 8], &[1 << 40, (1 << 40) + 8], &[8, 16], &[5, 1 << 30, 24]];
        let mut edges = Vec::new();
        for (b, list) in offsets.iter().enumerate() {
            for &o in *list {
                edges.push((b as u32, ((b + 1) % 4) as u32, o, 0));
            }
        }
        let h = Heap::from_parts(
            Header::new(heapdump_format::Mode::Compact, heapdump_format::Reason::Api, 4096, 1, 0),
            blocks,
            &edges,
            vec![],
            vec![],
        );
        let mut k = 0;
        for (b, list) in offsets.iter().enumerate() {
            let got: Vec<u64> = h.edges(BlockId(b as u32)).map(|e| e.offset).collect();
            assert_eq!(got, *list, "block {b}");
            let back: Vec<u64> = h.edges(BlockId(b as u32)).rev().map(|e| e.offset).collect();
            assert_eq!(back, list.iter().rev().copied().collect::<Vec<_>>());
            for &o in *list {
                assert_eq!(h.edge_at(k).offset, o);
                k += 1;
            }
        }
    }

    /// Offsets of every size and alignment come back exactly, forwards,
    /// backwards, one at a time and after a part of the block was read;
    /// only the gaps a byte cannot hold and every 64th edge are kept aside.
    #[test]
    fn offsets_keep_what_does_not_pack() {
        let odd = [0u64, 8, 13, 8 * 65535, 8 * 65536, 8 * (u64::from(u32::MAX) - 1), 8 * u64::from(u32::MAX), 1 << 40, u64::MAX, 16, 7];
        // An array of 200 pointers after a gap, then a sparse run.
        let array: Vec<u64> = (0..200).map(|i| 4096 + 8 * i).chain((0..10).map(|i| 8192 + 2032 * i)).collect();
        let blocks: [&[u64]; 4] = [&odd, &[], &array, &[0, 8, 2040, 2048]];
        let mut a = Offsets::with_capacity(0);
        let mut starts = vec![0];
        for b in blocks {
            let mut cursor = OffsetCursor::default();
            for &o in b {
                a.push(&mut cursor, o);
            }
            starts.push(a.deltas.len());
        }
        for (b, list) in blocks.iter().enumerate() {
            let (s, e) = (starts[b], starts[b + 1]);
            for (k, &o) in list.iter().enumerate() {
                assert_eq!(a.get(s, s + k), o, "block {b} edge {k}");
            }
            assert_eq!(a.of_block(s, e).collect::<Vec<_>>(), *list, "block {b}");
            let back: Vec<u64> = a.of_block(s, e).rev().collect();
            assert_eq!(back, list.iter().rev().copied().collect::<Vec<_>>(), "block {b}");
            // Half read forwards, the rest backwards.
            let mut it = a.of_block(s, e);
            let mut got: Vec<u64> = it.by_ref().take(list.len() / 2).collect();
            let mut rest: Vec<u64> = it.rev().collect();
            rest.reverse();
            got.extend(rest);
            assert_eq!(got, *list, "block {b}");
        }
        // Aside: the odd block's unaligned, backward and far ones (7 of
        // 11); the array's first (512 words from the start), its 65th,
        // 129th and 193rd, and the sparse run's first (313 words on),
        // not its gaps of 254 words; nothing of the last block.
        assert_eq!(a.anchors.len(), 7 + 5);
        assert!(a.anchors.windows(2).all(|w| w[0].edge < w[1].edge));
        assert_eq!(a.deltas.iter().filter(|&&d| d == Offsets::ANCHOR).count(), a.anchors.len());
    }
}
