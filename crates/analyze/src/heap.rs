//! Loading a dump into a compact graph.
//!
//! Blocks (live allocations) are sorted by address and numbered
//! ([`BlockId`]); the pointers between them are stored in compressed
//! sparse rows: for block `i`, `edges[edge_start[i]..edge_start[i+1]]`.
//! Edges come from the compact records' pointer lists, or from a
//! conservative scan of full contents (every aligned word that points to
//! the start or the inside of a live block). Roots come from the thread
//! stacks and registers and the static segments.

use crate::error::{AnalyzeError, Result};
use crate::file::DumpFile;
use crate::prefetch::prefetch;
use heapdump_format::{raw, Header, Record, Trailer};
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

/// One live allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// Address.
    pub addr: u64,
    /// Requested size.
    pub size: u64,
    /// Site id (0 = none).
    pub site: u32,
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
    pub sites: HashMap<u32, Vec<u64>>,
    /// Blocks sorted by address.
    blocks: Blocks,
    /// Start of each block's edges (n + 1 entries).
    edge_start: Vec<u32>,
    edge_target: Vec<u32>,
    edge_offset: Offsets,
    /// Offsets into the target of interior edges, by edge index.
    interior_into: HashMap<u32, u64>,
    /// The block of each allocation ordinal (file order), when the dump's
    /// allocations were not in address order; else the ordinal is the block.
    block_of: Option<Vec<u32>>,
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
    roots_complete: bool,
    /// How sampled blocks stand for the unsampled rest (see [`Heap::weight`]).
    sample_scale: std::sync::OnceLock<Option<(f64, f64)>>,
}

/// The blocks, sorted by address, 16 bytes each: the address, then the
/// size (32 bits), site (24) and flags (8) in one word. A block whose size
/// or site does not fit keeps both in `wide` (by block index), its size
/// field saying so.
#[derive(Clone, Debug, Default)]
pub(crate) struct Blocks {
    pub(crate) packed: Vec<Packed>,
    wide: HashMap<u32, (u64, u32)>,
}

/// A block as [`Blocks`] stores it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Packed {
    pub(crate) addr: u64,
    rest: u64,
}

impl Blocks {
    const WIDE: u64 = u32::MAX as u64;

    fn from_sorted(list: &[Block]) -> Blocks {
        let mut b = Blocks { packed: Vec::with_capacity(list.len()), wide: HashMap::new() };
        for (i, x) in list.iter().enumerate() {
            let (size, site) = if x.size < Self::WIDE && x.site < 1 << 24 {
                (x.size, x.site)
            } else {
                b.wide.insert(i as u32, (x.size, x.site));
                (Self::WIDE, 0)
            };
            b.packed.push(Packed { addr: x.addr, rest: size | u64::from(site) << 32 | u64::from(x.flags) << 56 });
        }
        b
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

    #[inline]
    pub(crate) fn get(&self, i: usize) -> Block {
        let p = self.packed[i];
        let (size, site) = match p.rest & Self::WIDE {
            Self::WIDE => self.wide.get(&(i as u32)).copied().unwrap_or((0, 0)),
            s => (s, (p.rest >> 32) as u32 & 0xff_ffff),
        };
        Block { addr: p.addr, size, site, flags: (p.rest >> 56) as u8 }
    }

    /// `lo` plus the number of blocks in `lo..hi` starting at or before `v`.
    #[inline]
    fn partition(&self, lo: usize, hi: usize, v: u64) -> usize {
        lo + self.packed[lo..hi].partition_point(|b| b.addr <= v)
    }
}

/// Each edge's offset in its source block: the word's index in 16 bits
/// (two bytes an edge instead of eight for the offset itself), or
/// [`Offsets::WIDE`] with the exact offset kept by edge index (offsets of
/// 512 KiB and more, and unaligned ones from other writers). The wide ones
/// are a vector in edge order (edges are pushed in order), searched by
/// edge index: a program's big pointer array (10 M entries) made a hash
/// map of them the costliest part of loading.
#[derive(Clone, Debug, Default)]
struct Offsets {
    words: Vec<u16>,
    wide: Vec<(u32, u64)>,
}

impl Offsets {
    const WIDE: u16 = u16::MAX;

    fn with_capacity(n: usize) -> Offsets {
        Offsets { words: Vec::with_capacity(n), wide: Vec::new() }
    }

    fn push(&mut self, offset: u64) {
        match u16::try_from(offset / 8) {
            Ok(w) if offset % 8 == 0 && w != Self::WIDE => self.words.push(w),
            _ => {
                self.wide.push((self.words.len() as u32, offset));
                self.words.push(Self::WIDE);
            }
        }
    }

    fn get(&self, k: usize) -> u64 {
        match self.words[k] {
            Self::WIDE => self.wide.binary_search_by_key(&(k as u32), |w| w.0).map_or(0, |i| self.wide[i].1),
            w => u64::from(w) * 8,
        }
    }

    /// Appends the offsets of the edges that follow these.
    fn append(&mut self, next: Offsets) {
        let base = self.words.len() as u32;
        self.words.extend(next.words);
        self.wide.extend(next.wide.into_iter().map(|(k, v)| (k + base, v)));
    }

    fn shrink_to_fit(&mut self) {
        self.words.shrink_to_fit();
        self.wide.shrink_to_fit();
    }
}

/// Bit 31 of an edge target: the pointer is interior.
pub(crate) const INTERIOR: u32 = 1 << 31;

/// Largest number of blocks a dump may hold for this analyser.
pub const MAX_BLOCKS: usize = (1 << 31) - 1;

impl Heap {
    /// Loads a dump. `progress` is called with (bytes read, total) as the
    /// records are walked (three passes).
    ///
    /// A dump cut short loads as far as it is intact, with `truncated`
    /// saying where it stops; any other damage is an error.
    ///
    /// Roots that are not roots: the C library's own data holds the malloc
    /// arena's state, whose `top` pointer names the chunk after the newest
    /// block and so can point *inside* that block. Pointers from the C
    /// library's writable segments therefore count as roots only when they
    /// point at the start of a block (stdio buffers and other blocks libc
    /// itself holds stay reachable; a block merely adjacent to the arena's
    /// top does not become "possibly lost").
    pub fn load(file: &DumpFile, progress: &mut dyn FnMut(u64, u64)) -> Result<Heap> {
        let dump = file.dump()?;
        let total = file.bytes().len() as u64 * 2;
        let fmt_err = |source| AnalyzeError::Format { path: file.path().to_path_buf(), source };
        let mut heap = Heap::empty(*dump.header());
        // Sized from the count the trailer claims (bounded by what the file
        // could hold), so the table is not grown by doubling.
        let claimed_allocs = dump.claimed_counts().map_or(0, |c| c.0);
        let fit = (file.bytes().len() / (raw::RECORD_HEADER_SIZE + raw::ALLOC_FIXED)).min(MAX_BLOCKS);
        // The blocks as read; packed once sorted.
        let mut list: Vec<Block> = Vec::with_capacity((claimed_allocs as usize).min(fit));
        // Writers emit ALLOC records in address order; when a dump's are
        // not, the blocks are sorted and the edges permuted after pass 2.
        let mut sorted = true;
        // Pointers before and from the split (compact dumps), to size pass 2's tables.
        let mut pointers = [0usize; 2];
        // Pass 1: everything but edges. It also picks where pass 2 splits
        // the records between two threads: the first ALLOC record past the
        // middle of the file.
        let mut end_of_valid = file.bytes().len();
        let middle = file.bytes().len() as u64 / 2;
        let mut split: Option<(u64, usize)> = None;
        let mut after_roots = false;
        for r in dump.records() {
            let (off, rec) = match r {
                Ok(x) => x,
                Err(e) if e.is_truncation() => {
                    heap.truncated = Some(e.to_string());
                    end_of_valid = e.offset() as usize;
                    break;
                }
                Err(e) => return Err(fmt_err(e)),
            };
            if list.len() % 65536 == 0 {
                progress(off, total);
            }
            match rec {
                Record::Process(p) => {
                    heap.exe = String::from_utf8_lossy(p.exe).into_owned();
                    heap.cmdline =
                        p.cmdline.split(|&b| b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
                    heap.backtrace = p.backtrace;
                    heap.sample_mean = p.sample_mean;
                }
                Record::Module(m) => heap.modules.push(ModuleInfo {
                    path: String::from_utf8_lossy(m.path).into_owned(),
                    build_id: m.build_id.to_vec(),
                    bias: m.bias,
                    segments: m.segments().collect(),
                }),
                Record::Thread(t) => heap.threads.push(ThreadInfo {
                    tid: t.tid,
                    name: String::from_utf8_lossy(t.name).into_owned(),
                    flags: t.flags,
                    stack: (t.stack_start, t.stack_end),
                }),
                Record::Site(s) => {
                    after_roots = true;
                    heap.sites.insert(s.id, s.frames().collect());
                }
                Record::Alloc(a) => {
                    after_roots = true;
                    if split.is_none() && off >= middle {
                        split = Some((off, list.len()));
                    }
                    if list.len() >= MAX_BLOCKS {
                        return Err(AnalyzeError::TooLarge {
                            path: file.path().to_path_buf(),
                            what: format!("more than {MAX_BLOCKS} allocations"),
                        });
                    }
                    if let Some(last) = list.last() {
                        sorted &= last.addr < a.address;
                    }
                    if let heapdump_format::ContentsRef::Compact(p) = a.contents {
                        pointers[usize::from(split.is_some())] += p.len();
                    }
                    list.push(Block { addr: a.address, size: a.size, site: a.site, flags: a.flags });
                }
                Record::Allocs(a) => {
                    after_roots = true;
                    if split.is_none() && off >= middle {
                        split = Some((off, list.len()));
                    }
                    if list.len() + a.count as usize > MAX_BLOCKS {
                        return Err(AnalyzeError::TooLarge {
                            path: file.path().to_path_buf(),
                            what: format!("more than {MAX_BLOCKS} allocations"),
                        });
                    }
                    pointers[usize::from(split.is_some())] += a.pointers as usize;
                    list.reserve(a.count as usize);
                    for e in a.entries() {
                        let e = e.map_err(fmt_err)?;
                        if let Some(last) = list.last() {
                            sorted &= last.addr < e.address;
                        }
                        list.push(Block { addr: e.address, size: e.size, site: e.site, flags: e.flags });
                    }
                }
                Record::End(t) => heap.trailer = Some(t),
                Record::Signal(g) => heap.signal = Some(g),
                Record::Limit(_) | Record::History(_) => {}
                Record::Static(_) | Record::Unknown { .. } => {}
            }
        }
        heap.roots_complete = heap.truncated.is_none() || after_roots;
        // Sort by address when needed, remembering each block's record.
        let n = list.len();
        let rec_of: Option<Vec<u32>> = (!sorted).then(|| {
            let mut order: Vec<(u64, u32)> = list.iter().enumerate().map(|(i, b)| (b.addr, i as u32)).collect();
            order.sort_unstable_by_key(|p| p.0);
            list = order.iter().map(|&(_, i)| list[i as usize]).collect();
            order.into_iter().map(|(_, i)| i).collect()
        });
        // Overlapping or duplicate blocks would make lookups ambiguous: a
        // writer never produces them, so they mean a damaged dump.
        for w in list.windows(2) {
            if w[1].addr < w[0].addr.saturating_add(w[0].size.max(1)) {
                return Err(fmt_err(heapdump_format::Error::Malformed { offset: 0, what: "two allocations overlap" }));
            }
        }
        heap.blocks = Blocks::from_sorted(&list);
        drop(list);
        // ALLOCS pointers name their targets by ordinal (file order): the
        // block of each ordinal, when the sort moved them.
        let block_of: Option<Vec<u32>> = rec_of.as_ref().map(|rec_of| {
            let mut v = vec![0u32; n];
            for (b, &r) in rec_of.iter().enumerate() {
                v[r as usize] = b as u32;
            }
            v
        });
        let dir = Directory::new(&heap.blocks);
        let libc_modules: Vec<bool> = heap.modules.iter().map(|m| is_libc(&m.path)).collect();
        let mut thread_names: HashMap<u32, String> = HashMap::new();
        for t in &heap.threads {
            thread_names.insert(t.tid, t.name.clone());
        }
        // Pass 2: edges in record order, and roots; the two halves of the
        // records on two threads, then joined.
        let module_paths: Vec<std::sync::Arc<str>> = heap.modules.iter().map(|m| m.path.as_str().into()).collect();
        let ctx = Pass2 {
            blocks: &heap.blocks,
            block_of: block_of.as_deref(),
            dir: &dir,
            libc_modules: &libc_modules,
            module_paths: &module_paths,
            thread_names: &thread_names,
            path: file.path(),
            bytes: file.bytes().len() as u64,
            total,
        };
        let header_end = raw::FILE_HEADER_SIZE as u64;
        let (split_off, split_n) = split.unwrap_or((end_of_valid as u64, n));
        let (first, second) = std::thread::scope(|sc| {
            let second =
                sc.spawn(|| ctx.run(dump.records_between(split_off, end_of_valid as u64), n - split_n, pointers[1], &mut |_, _| {}));
            let first = ctx.run(dump.records_between(header_end, split_off), split_n, pointers[0] + pointers[1], progress);
            (first, second.join())
        });
        let mut part = first?;
        let second = second.map_err(|_| AnalyzeError::TooLarge { path: file.path().to_path_buf(), what: "pass 2 failed".into() })??;
        part.append(second)
            .map_err(|_| AnalyzeError::TooLarge { path: file.path().to_path_buf(), what: "more than 2^31 pointers".into() })?;
        let Part { mut start, mut target, mut offset, mut interior_into, roots, root_regions } = part;
        start.reserve_exact((n + 1).saturating_sub(start.len()));
        while start.len() <= n {
            start.push(target.len() as u32);
        }
        if let Some(rec_of) = rec_of {
            (start, target, offset, interior_into) = to_block_order(&rec_of, &start, &target, &offset, &interior_into);
        }
        target.shrink_to_fit();
        offset.shrink_to_fit();
        progress(total, total);
        heap.edge_start = start;
        heap.edge_target = target;
        heap.edge_offset = offset;
        heap.interior_into = interior_into;
        heap.block_of = block_of;
        heap.roots = roots;
        heap.root_regions = root_regions;
        Ok(heap)
    }

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
        for o in offsets {
            offset.push(o);
        }
        Heap {
            blocks: Blocks::from_sorted(&blocks),
            edge_start: counts,
            edge_target: target,
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
        let b = self.block_of.as_ref().map_or(i, |m| m[i] as usize);
        Some(self.blocks.addr(b))
    }

    fn empty(header: Header) -> Heap {
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
            edge_start: vec![],
            edge_target: vec![],
            edge_offset: Offsets::default(),
            interior_into: HashMap::new(),
            block_of: None,
            roots: vec![],
            root_regions: vec![],
            trailer: None,
            signal: None,
            truncated: None,
            roots_complete: true,
            sample_scale: std::sync::OnceLock::new(),
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

    /// Number of blocks.
    pub fn len(&self) -> usize {
        self.blocks.len()
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
        let s = self.edge_start[id.index()] as usize;
        let e = self.edge_start[id.index() + 1] as usize;
        (s..e).map(move |k| {
            let t = self.edge_target[k];
            let interior = t & INTERIOR != 0;
            let into = if interior { self.interior_into.get(&(k as u32)).copied().unwrap_or(0) } else { 0 };
            Edge { target: BlockId(t & !INTERIOR), offset: self.edge_offset.get(k), interior, into }
        })
    }

    /// The raw targets of a block's edges (block index, interior bit 31).
    #[inline]
    pub(crate) fn raw_targets(&self, id: u32) -> &[u32] {
        &self.edge_target[self.edge_start[id as usize] as usize..self.edge_start[id as usize + 1] as usize]
    }

    /// The edge tables: block `b`'s edges are `targets[starts[b]..starts[b + 1]]`
    /// (block index, interior bit 31).
    #[inline]
    pub(crate) fn raw_edges(&self) -> (&[u32], &[u32]) {
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
        s / (1.0 - (-s / self.sample_mean as f64).exp())
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

/// What pass 2 of [`Heap::load`] reads, shared by its threads.
struct Pass2<'a> {
    blocks: &'a Blocks,
    /// The block of each ordinal, when it is not the ordinal itself.
    block_of: Option<&'a [u32]>,
    dir: &'a Directory,
    libc_modules: &'a [bool],
    /// The modules' paths, shared by their STATIC records' regions.
    module_paths: &'a [std::sync::Arc<str>],
    thread_names: &'a HashMap<u32, String>,
    path: &'a std::path::Path,
    bytes: u64,
    total: u64,
}

/// Edges and roots of a run of records.
struct Part {
    /// Start of each ALLOC record's edges.
    start: Vec<u32>,
    target: Vec<u32>,
    offset: Offsets,
    interior_into: HashMap<u32, u64>,
    roots: Vec<Root>,
    root_regions: Vec<RootRegion>,
}

impl Part {
    /// Appends the part that follows this one in the file.
    fn append(&mut self, next: Part) -> std::result::Result<(), ()> {
        let base = u32::try_from(self.target.len()).map_err(|_| ())?;
        if self.target.len() + next.target.len() >= INTERIOR as usize {
            return Err(());
        }
        let regions = self.root_regions.len() as u32;
        // Room for the final entry too: a doubling for that one push would
        // cost 4 bytes per block.
        self.start.reserve_exact(next.start.len() + 1);
        self.start.extend(next.start.into_iter().map(|s| s + base));
        self.target.extend(next.target);
        self.offset.append(next.offset);
        self.interior_into.extend(next.interior_into.into_iter().map(|(k, v)| (k + base, v)));
        self.roots.extend(next.roots.into_iter().map(|r| Root { region: r.region + regions, ..r }));
        self.root_regions.extend(next.root_regions);
        Ok(())
    }
}

impl Pass2<'_> {
    /// Resolves the pointers of `records` (at most `allocs` ALLOC records).
    /// `pointers` sizes the edge tables (the compact records' counts).
    fn run(
        &self,
        records: heapdump_format::Records<'_>,
        allocs: usize,
        pointers: usize,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Part> {
        let too_many = || AnalyzeError::TooLarge { path: self.path.to_path_buf(), what: "more than 2^31 pointers".into() };
        let mut p = Part {
            start: Vec::with_capacity(allocs + 1),
            target: Vec::with_capacity(pointers),
            offset: Offsets::with_capacity(pointers),
            interior_into: HashMap::new(),
            roots: Vec::new(),
            root_regions: Vec::new(),
        };
        let blocks = self.blocks;
        let find = |v: u64| self.dir.find(blocks, v);
        let mut pipe = Pipeline::new(self.dir, blocks);
        let mut records_seen = 0usize;
        for r in records {
            let Ok((off, rec)) = r else { break };
            if off % (1 << 22) < 64 {
                progress(self.bytes + off, self.total);
            }
            match rec {
                Record::Alloc(a) => {
                    if records_seen >= allocs {
                        break;
                    }
                    records_seen += 1;
                    pipe.push(Pending::Start, &mut p).map_err(|_| too_many())?;
                    for (o, v) in a.contents.words(a.address) {
                        if let Some(located) = self.dir.in_range(v).then(|| self.dir.locate(v)).flatten() {
                            pipe.push(Pending::Word { v, o, located }, &mut p).map_err(|_| too_many())?;
                        }
                    }
                }
                Record::Allocs(a) => {
                    for e in a.entries() {
                        let Ok(e) = e else { break };
                        if records_seen >= allocs {
                            break;
                        }
                        records_seen += 1;
                        pipe.push(Pending::Start, &mut p).map_err(|_| too_many())?;
                        for l in e.links {
                            // Resolved by ordinal: no lookup. A target past
                            // the blocks read (a cut dump) or a delta past
                            // its size is not a pointer.
                            let Some(b) = usize::try_from(l.target).ok().filter(|&t| t < blocks.len()) else { continue };
                            let b = self.block_of.map_or(b as u32, |m| m[b]);
                            if l.delta != 0 && l.delta >= blocks.size(b as usize) {
                                continue;
                            }
                            pipe.push(Pending::Resolved { b, o: l.offset, into: l.delta }, &mut p).map_err(|_| too_many())?;
                        }
                    }
                }
                Record::Thread(t) => {
                    let name: std::sync::Arc<str> = self.thread_names.get(&t.tid).map_or_else(|| "".into(), |n| n.as_str().into());
                    let region = p.root_regions.len() as u32;
                    p.root_regions.push(RootRegion {
                        kind: RootKind::Stack,
                        address: t.stack_start,
                        tid: t.tid,
                        owner: name.clone(),
                        name: "".into(),
                        libc: false,
                    });
                    for (o, v) in t.contents.words(t.stack_start) {
                        if let Some((b, interior)) = find(v) {
                            p.roots.push(Root { region, offset: o, target: b, interior, into: v - blocks.addr(b.index()) });
                        }
                    }
                    let region = p.root_regions.len() as u32;
                    p.root_regions.push(RootRegion {
                        kind: RootKind::Registers,
                        address: 0,
                        tid: t.tid,
                        owner: name,
                        name: "".into(),
                        libc: false,
                    });
                    for (i, v) in t.regs().enumerate() {
                        if let Some((b, interior)) = find(v) {
                            p.roots.push(Root { region, offset: i as u64, target: b, interior, into: v - blocks.addr(b.index()) });
                        }
                    }
                    if let Some((b, interior)) = find(t.tls) {
                        p.roots.push(Root { region, offset: u64::MAX, target: b, interior, into: t.tls - blocks.addr(b.index()) });
                    }
                }
                Record::Static(s) => {
                    let libc = self.libc_modules.get(s.module as usize).copied().unwrap_or(false);
                    let name: std::sync::Arc<str> = String::from_utf8_lossy(s.name).into();
                    let owner = if s.module == raw::NO_MODULE {
                        name.clone()
                    } else {
                        self.module_paths.get(s.module as usize).cloned().unwrap_or_else(|| "".into())
                    };
                    let region = p.root_regions.len() as u32;
                    p.root_regions.push(RootRegion { kind: RootKind::Static, address: s.address, tid: 0, owner, name, libc });
                    for (o, v) in s.contents.words(s.address) {
                        if let Some((b, interior)) = find(v) {
                            if libc && interior {
                                continue;
                            }
                            p.roots.push(Root { region, offset: o, target: b, interior, into: v - blocks.addr(b.index()) });
                        }
                    }
                }
                _ => {}
            }
        }
        pipe.drain(&mut p).map_err(|_| too_many())?;
        Ok(p)
    }
}

/// Pass 2's lookups of the ALLOC records' words, pipelined so that the
/// cache misses of many lookups overlap: a word's granule entry is
/// prefetched as it enters, the block it names [`LAG`] words later, and
/// the lookup finished [`LAG`] words after that, in record order.
struct Pipeline<'a> {
    dir: &'a Directory,
    blocks: &'a Blocks,
    ring: std::collections::VecDeque<Pending>,
}

const LAG: usize = 12;

/// A step of pass 2 waiting in the [`Pipeline`].
#[derive(Clone, Copy)]
enum Pending {
    /// The start of an ALLOC record's edges.
    Start,
    /// A word (offset, value) that may point into a block, located.
    Word { v: u64, o: u64, located: (u32, Option<usize>) },
    /// A pointer whose block is known (ALLOCS): at offset `o`, `into` bytes
    /// into block `b`.
    Resolved { b: u32, o: u64, into: u64 },
}

impl<'a> Pipeline<'a> {
    fn new(dir: &'a Directory, blocks: &'a Blocks) -> Pipeline<'a> {
        Pipeline { dir, blocks, ring: std::collections::VecDeque::with_capacity(2 * LAG + 1) }
    }

    /// Queues a step, finishing the oldest one when the pipeline is full.
    /// `Err` when the edges outgrow 2^31.
    #[inline]
    fn push(&mut self, step: Pending, p: &mut Part) -> std::result::Result<(), ()> {
        // Nothing waiting: a step with no lookup (ALLOCS) is done at once.
        if self.ring.is_empty() && !matches!(step, Pending::Word { .. }) {
            return self.finish(step, p);
        }
        if let Pending::Word { located: (_, Some(e)), .. } = step {
            prefetch(self.dir.table(), e);
        }
        self.ring.push_back(step);
        let n = self.ring.len();
        if n > LAG {
            if let Pending::Word { located, .. } = self.ring[n - 1 - LAG] {
                prefetch(&self.blocks.packed, self.dir.first_block(located));
            }
        }
        if n > 2 * LAG {
            if let Some(step) = self.ring.pop_front() {
                self.finish(step, p)?;
            }
        }
        Ok(())
    }

    /// Finishes every queued step.
    fn drain(&mut self, p: &mut Part) -> std::result::Result<(), ()> {
        while let Some(step) = self.ring.pop_front() {
            self.finish(step, p)?;
        }
        if p.target.len() >= INTERIOR as usize {
            return Err(());
        }
        Ok(())
    }

    #[inline]
    fn finish(&self, step: Pending, p: &mut Part) -> std::result::Result<(), ()> {
        match step {
            Pending::Start => {
                if p.target.len() >= INTERIOR as usize {
                    return Err(());
                }
                p.start.push(p.target.len() as u32);
            }
            Pending::Resolved { b, o, into } => {
                if into != 0 {
                    p.interior_into.insert(p.target.len() as u32, into);
                }
                p.target.push(b | if into != 0 { INTERIOR } else { 0 });
                p.offset.push(o);
            }
            Pending::Word { v, o, located } => {
                if let Some((b, interior)) = self.dir.finish(self.blocks, v, located) {
                    if interior {
                        p.interior_into.insert(p.target.len() as u32, v - self.blocks.addr(b.index()));
                    }
                    p.target.push(b.0 | if interior { INTERIOR } else { 0 });
                    p.offset.push(o);
                }
            }
        }
        Ok(())
    }
}

/// The edge tables of a dump whose ALLOC records were not in address
/// order, from record order (`start`, …) to block order; `rec_of[b]` is
/// block `b`'s record.
fn to_block_order(
    rec_of: &[u32],
    start: &[u32],
    target: &[u32],
    offset: &Offsets,
    interior_into: &HashMap<u32, u64>,
) -> (Vec<u32>, Vec<u32>, Offsets, HashMap<u32, u64>) {
    let mut new_start = Vec::with_capacity(rec_of.len() + 1);
    let mut new_target = Vec::with_capacity(target.len());
    let mut new_offset = Offsets::with_capacity(target.len());
    let mut new_into = HashMap::with_capacity(interior_into.len());
    for &r in rec_of {
        new_start.push(new_target.len() as u32);
        let (s, e) = (start[r as usize] as usize, start[r as usize + 1] as usize);
        for (k, &t) in target.iter().enumerate().take(e).skip(s) {
            if t & INTERIOR != 0 {
                if let Some(&into) = interior_into.get(&(k as u32)) {
                    new_into.insert(new_target.len() as u32, into);
                }
            }
            new_target.push(t);
            new_offset.push(offset.get(k));
        }
    }
    new_start.push(new_target.len() as u32);
    (new_start, new_target, new_offset, new_into)
}

fn is_libc(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.starts_with("libc.so") || name.starts_with("libc-2.")
}

/// Contents of the blocks that interior pointers point into: what the
/// leak heuristics look at. Built by one more pass over the dump.
pub struct DumpContents<'a> {
    words: HashMap<u32, BlockWords<'a>>,
}

/// First word, second word (full dumps) and contents (full dumps).
type BlockWords<'a> = (u64, Option<u64>, Option<&'a [u8]>);

impl<'a> DumpContents<'a> {
    /// Collects the first words (and, in full dumps, the contents) of every
    /// block an interior pointer points into.
    pub fn build(file: &'a DumpFile, heap: &Heap) -> DumpContents<'a> {
        let mut wanted = std::collections::HashSet::new();
        for r in &heap.roots {
            if r.interior {
                wanted.insert(r.target.0);
            }
        }
        for &k in heap.interior_into.keys() {
            wanted.insert(heap.edge_target[k as usize] & !INTERIOR);
        }
        let mut words = HashMap::new();
        if wanted.is_empty() {
            return DumpContents { words };
        }
        let Ok(dump) = heapdump_format::Dump::parse(file.bytes()) else { return DumpContents { words } };
        for r in dump.records() {
            let a = match r {
                Ok((_, Record::Alloc(a))) => a,
                Ok((_, Record::Allocs(a))) => {
                    // Compact: the first word alone, which may be the
                    // block's first pointer (its target's address plus
                    // its delta).
                    for e in a.entries() {
                        let Ok(e) = e else { break };
                        let Some(b) = heap.find_start(e.address).filter(|b| wanted.contains(&b.0)) else { continue };
                        let first = match e.first_word {
                            heapdump_format::FirstWord::Value(v) => v,
                            heapdump_format::FirstWord::FirstLink => e
                                .links
                                .clone()
                                .next()
                                .map_or(0, |l| heap.block_ordinal_address(l.target).map_or(0, |t| t.wrapping_add(l.delta))),
                        };
                        words.insert(b.0, (first, None, None));
                    }
                    continue;
                }
                Ok(_) => continue,
                Err(_) => break,
            };
            let Some(b) = heap.find_start(a.address) else { continue };
            if !wanted.contains(&b.0) {
                continue;
            }
            match a.contents {
                heapdump_format::ContentsRef::Full(bytes) => {
                    let w1 = bytes.get(8..16).map(|w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])));
                    words.insert(b.0, (a.first_word, w1, Some(bytes)));
                }
                heapdump_format::ContentsRef::Compact(_) => {
                    words.insert(b.0, (a.first_word, None, None));
                }
            }
        }
        DumpContents { words }
    }
}

impl crate::leaks::Contents for DumpContents<'_> {
    fn word(&self, b: BlockId, i: usize) -> Option<u64> {
        let e = self.words.get(&b.0)?;
        match i {
            0 => Some(e.0),
            1 => e.1,
            _ => None,
        }
    }
    fn tail(&self, b: BlockId, offset: u64) -> Option<&[u8]> {
        self.words.get(&b.0)?.2?.get(usize::try_from(offset).ok()?..)
    }
}

/// An index over the sorted blocks for "which block holds this address"
/// during loading. The blocks are cut into regions wherever two
/// consecutive blocks start more than [`REGION_GAP`] bytes apart (a heap
/// arena, a thread's arena, a large mapped block); each region has a dense
/// table with, for every granule of its address range, the first block
/// starting at or after the granule. A lookup is a binary search over the
/// few regions, one read of that table (a few bytes per granule: small
/// enough to stay in cache), and a search among the blocks starting in the
/// granule. The granule grows from 512 bytes until the tables hold at most
/// a few entries per block, whatever the layout.
struct Directory {
    regions: Vec<Region>,
    /// Every region's table, one after the other.
    firsts: Vec<u32>,
    /// log2 of the granule size.
    shift: u32,
    lo: u64,
    hi: u64,
}

/// Blocks starting further apart than this begin a new region.
const REGION_GAP: u64 = 1 << 20;

#[derive(Clone, Copy)]
struct Region {
    /// Address of the region's first block.
    start: u64,
    /// One past its last block.
    end: u32,
    /// Its table: `firsts[table..table + granules]`, granule 0 being the
    /// one `start` is in.
    table: usize,
    granules: usize,
}

impl Directory {
    fn new(blocks: &Blocks) -> Directory {
        let mut shift = 9;
        loop {
            // Table entries this granule needs; a coarser one when too many.
            let mut total = 0u64;
            for_each_region(blocks, |first, last| {
                total += ((blocks.addr(last) >> shift) - (blocks.addr(first) >> shift)) + 1;
            });
            if total <= 4 * blocks.len() as u64 + 4096 || shift >= 40 {
                break;
            }
            shift += 1;
        }
        let mut d = Directory { regions: Vec::new(), firsts: Vec::new(), shift, lo: u64::MAX, hi: 0 };
        for_each_region(blocks, |first, last| {
            let g0 = blocks.addr(first) >> shift;
            let granules = ((blocks.addr(last) >> shift) - g0 + 1) as usize;
            let table = d.firsts.len();
            let mut i = first;
            for g in 0..granules as u64 {
                // First block at or after the granule's start.
                while i <= last && blocks.addr(i) >> shift < g0 + g {
                    i += 1;
                }
                d.firsts.push(i as u32);
            }
            d.regions.push(Region { start: blocks.addr(first), end: last as u32 + 1, table, granules });
        });
        d.lo = blocks.packed.first().map_or(u64::MAX, |b| b.addr);
        d.hi = (0..blocks.len()).map(|i| blocks.addr(i).saturating_add(blocks.size(i).max(1))).max().unwrap_or(0);
        d
    }

    /// Whether `v` may point into a block at all (a quick filter).
    #[inline]
    fn in_range(&self, v: u64) -> bool {
        v >= self.lo && v < self.hi
    }

    /// First step of a lookup: the region holding `v` and the entry of its
    /// granule (`None`: past the region's last block start).
    #[inline]
    fn locate(&self, v: u64) -> Option<(u32, Option<usize>)> {
        let r = self.regions.partition_point(|r| r.start <= v).checked_sub(1)?;
        let reg = &self.regions[r];
        let g = (v >> self.shift) - (reg.start >> self.shift);
        Some((r as u32, (g < reg.granules as u64).then(|| reg.table + g as usize)))
    }

    /// Where [`Directory::finish`] will read the table, for prefetching.
    #[inline]
    fn table(&self) -> &[u32] {
        &self.firsts
    }

    /// The first block a lookup of `v` reads, once located.
    #[inline]
    fn first_block(&self, located: (u32, Option<usize>)) -> usize {
        let reg = &self.regions[located.0 as usize];
        match located.1 {
            Some(e) => self.firsts[e] as usize,
            None => reg.end as usize - 1,
        }
    }

    /// Second step: the block holding `v`, and whether `v` is interior.
    #[inline]
    fn finish(&self, blocks: &Blocks, v: u64, located: (u32, Option<usize>)) -> Option<(BlockId, bool)> {
        let lo = self.first_block(located);
        let cand = match located.1 {
            Some(e) => {
                // Blocks starting in v's granule: lo..hi; the holder is the
                // last block starting at or before v (maybe before lo).
                let reg = &self.regions[located.0 as usize];
                let hi = if e + 1 < reg.table + reg.granules { self.firsts[e + 1] as usize } else { reg.end as usize };
                blocks.partition(lo, hi, v) - 1
            }
            None => lo,
        };
        holder(blocks, cand, v)
    }

    /// The block holding `v`, in one go.
    #[inline]
    fn find(&self, blocks: &Blocks, v: u64) -> Option<(BlockId, bool)> {
        if !self.in_range(v) {
            return None;
        }
        self.finish(blocks, v, self.locate(v)?)
    }
}

/// Whether block `i`, the last one starting at or before `v`, holds `v`:
/// its id, and whether `v` points inside it rather than at its start.
#[inline]
fn holder(blocks: &Blocks, i: usize, v: u64) -> Option<(BlockId, bool)> {
    let a = blocks.addr(i);
    if v == a {
        Some((BlockId(i as u32), false))
    } else if v > a && v < a + blocks.size(i) {
        Some((BlockId(i as u32), true))
    } else {
        None
    }
}

/// Calls `f(first, last)` for each region of `blocks` (indices of its
/// first and last block), in order.
fn for_each_region(blocks: &Blocks, mut f: impl FnMut(usize, usize)) {
    let mut first = 0;
    for i in 1..=blocks.len() {
        if i == blocks.len() || blocks.addr(i) - blocks.addr(i - 1) > REGION_GAP {
            if i > first {
                f(first, i - 1);
            }
            first = i;
        }
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
            Block { addr: 0x1000, size: 0, site: 0, flags: 0 },
            Block { addr: 0x2000, size: u64::from(u32::MAX) - 1, site: (1 << 24) - 1, flags: 0xff },
            Block { addr: 0x1_0000_2000, size: u64::from(u32::MAX), site: 7, flags: 1 },
            Block { addr: 0x2_0000_2000, size: 5 << 32, site: 1 << 24, flags: 2 },
            Block { addr: 0x4_0000_0000, size: 48, site: u32::MAX, flags: 3 },
        ];
        let b = Blocks::from_sorted(&list);
        for (i, x) in list.iter().enumerate() {
            assert_eq!(b.get(i), *x);
            assert_eq!((b.addr(i), b.size(i)), (x.addr, x.size));
        }
        assert_eq!(holder(&b, 3, 0x2_0000_2000 + (4 << 32)), Some((BlockId(3), true)));
        assert_eq!(holder(&b, 3, 0x2_0000_2000 + (5 << 32)), None);
    }

    /// Offsets of every size and alignment come back exactly, also after
    /// two runs of edges are joined.
    #[test]
    fn offsets_keep_what_does_not_pack() {
        let first = [0u64, 8, 13, 8 * 65534, 8 * 65535, 8 * 65536, 1 << 40];
        let second = [u64::MAX, 16, 7];
        let mut a = Offsets::with_capacity(first.len());
        for &o in &first {
            a.push(o);
        }
        let mut b = Offsets::with_capacity(second.len());
        for &o in &second {
            b.push(o);
        }
        a.append(b);
        let all: Vec<u64> = first.iter().chain(&second).copied().collect();
        for (k, &o) in all.iter().enumerate() {
            assert_eq!(a.get(k), o, "edge {k}");
        }
        // Only the unaligned and the large ones take room beyond two bytes.
        assert_eq!(a.wide.len(), 6);
    }
}
