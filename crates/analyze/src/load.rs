//! Loading a dump into its graph ([`Heap`]): one pass over the records for
//! the blocks, sites, modules and threads; a second, on several threads,
//! that resolves every pointer word (compact records' lists or full
//! records' contents) to the block it points into, through a directory of
//! the blocks' address ranges, and reads the roots.

use crate::error::{AnalyzeError, Result};
use crate::file::DumpFile;
use crate::heap::{
    Block, BlockId, Blocks, Heap, ModuleInfo, ModuleRanges, OffsetCursor, Offsets, Root, RootKind, RootRegion, SiteId, ThreadInfo,
    WideOffset, INTERIOR, MAX_BLOCKS,
};
use crate::prefetch::prefetch;
use crate::slab::Slab;
use heapdump_format::lookup::{self, Line, Located, Run, Shape};
use heapdump_format::{raw, Record};
use std::collections::HashMap;

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
        Self::load_with(file, progress, true, None)
    }

    /// [`Heap::load`], its first pass split between two threads when
    /// `may_split` and the dump lends itself to it, a large heap's tables
    /// built in a file when `tables` says where (see `spill::TableFile`).
    pub(crate) fn load_with(
        file: &DumpFile,
        progress: &mut dyn FnMut(u64, u64),
        may_split: bool,
        tables: Option<crate::spill::TablesIn<'_>>,
    ) -> Result<Heap> {
        crate::phases::mark("load begins");
        let dump = file.dump()?;
        let total = file.bytes().len() as u64 * 2;
        let fmt_err = |source| AnalyzeError::Format { path: file.path().to_path_buf(), source };
        // The block table, sized from the count the trailer claims (bounded
        // by what the file could hold: 5 bytes an ALLOCS entry), zeroed
        // memory the kernel maps as the threads fill their windows of it
        // (a count the trailer overstates costs address space only, and
        // when even that is refused the table starts empty; a count it
        // understates, or a cut dump's missing trailer, spills).
        let claimed_allocs = dump.claimed_counts().map_or(0, |c| c.0);
        let fit = (file.bytes().len() / 5).min(MAX_BLOCKS);
        let mut table: Vec<crate::heap::Packed> =
            bytemuck::allocation::try_zeroed_vec((claimed_allocs as usize).min(fit)).unwrap_or_default();
        let capacity = table.len();
        let mut tables = tables.and_then(|t| crate::spill::TableFile::new(capacity, t));
        if let Some(t) = &mut tables {
            t.build_in(&mut table);
        }
        // Pass 1: everything but edges. It also picks where pass 2 splits
        // the records between two threads: the first ALLOC record past the
        // middle of the file. Where a quick walk of the records' headers
        // finds it (dumps of ALLOCS records, a thousand blocks each), pass 1
        // is split there too: a second thread decodes the blocks from it on,
        // while the first decodes those before and walks the rest, checking
        // every record, the counts and the checksum as a whole walk does.
        let middle = file.bytes().len() as u64 / 2;
        let fmt_err = &fmt_err;
        let whole_file = (file.path(), file.bytes().len() as u64);
        let split_at = |at: &Split| at.allocs.min(capacity);
        let (first, second, at) = match may_split.then(|| find_split(&dump, middle)).flatten() {
            Some(at) => {
                let (w0, w1) = table.split_at_mut(split_at(&at));
                let (first, second) = std::thread::scope(|sc| {
                    let second = sc.spawn(|| {
                        let ranges = ModuleRanges::of(&at.modules);
                        let records = dump.records_between(at.offset, file.bytes().len() as u64);
                        Pass1::new(*dump.header(), w1, Some(ranges)).run(records, at.offset.., false, whole_file, fmt_err, &mut |_, _| {})
                    });
                    let first = Pass1::new(*dump.header(), w0, None).run(dump.records(), ..at.offset, true, whole_file, fmt_err, progress);
                    (first, second.join())
                });
                let second =
                    second.map_err(|_| AnalyzeError::TooLarge { path: file.path().to_path_buf(), what: "pass 1 failed".into() })?;
                (first?, Some(second?), Some(at))
            }
            None => {
                (Pass1::new(*dump.header(), &mut table, None).run(dump.records(), .., true, whole_file, fmt_err, progress)?, None, None)
            }
        };
        let Pass1 {
            mut heap,
            blocks: packing,
            mut sorted,
            mut apart,
            mut pointers,
            mut split,
            mut after_roots,
            mut module_words,
            mut lookups,
            end_of_valid,
            ..
        } = first;
        let Packing { fill, mut wide, last, .. } = packing;
        let mut filled = (fill.done(), None);
        // The second half's blocks, after the first's.
        if let (Some(b), Some(at)) = (second, at.as_ref()) {
            let n0 = filled.0 .0 + filled.0 .1.len();
            split = Some((at.offset, n0));
            if b.process {
                (heap.exe, heap.cmdline, heap.backtrace, heap.sample_mean) =
                    (b.heap.exe, b.heap.cmdline, b.heap.backtrace, b.heap.sample_mean);
            }
            heap.modules.extend(b.heap.modules);
            heap.threads.extend(b.heap.threads);
            heap.sites.extend(b.heap.sites);
            heap.signal = b.heap.signal.or(heap.signal);
            let seam = last.zip(b.blocks.first);
            sorted &= b.sorted && seam.is_none_or(|(x, y)| x.addr < y.addr);
            apart &= b.apart && seam.is_none_or(|(x, y)| !overlap(&x, &y));
            pointers = [pointers[0] + b.pointers[0], pointers[1] + b.pointers[1]];
            after_roots |= b.after_roots;
            lookups = lookups.saturating_add(b.lookups);
            module_words = module_words.zip(b.module_words).map(|(mut x, y)| {
                x.extend(y);
                x
            });
            if n0 + b.blocks.len() > MAX_BLOCKS {
                return Err(AnalyzeError::TooLarge {
                    path: file.path().to_path_buf(),
                    what: format!("more than {MAX_BLOCKS} allocations"),
                });
            }
            wide.extend(b.blocks.wide.into_iter().map(|(i, w)| (i + n0 as u32, w)));
            filled.1 = Some((b.blocks.fill.done(), split_at(at)));
        }
        // The halves joined in the table (moved only when the first half's
        // count was not the walk's), the rest of it given back.
        match filled {
            (first, Some((second, split_at))) => join(&mut table, split_at, first, second, false, |v| v),
            (first, None) => join(&mut table, capacity, first, (0, Vec::new()), false, |v| v),
        }
        table.shrink_to_fit();
        let mut blocks = Blocks::from_parts(table, wide);
        heap.roots_complete = heap.truncated.is_none() || after_roots;
        heap.module_words = module_words;
        // Sort by address when needed, remembering each block's record.
        let n = blocks.len();
        let rec_of: Option<Vec<u32>> = (!sorted).then(|| {
            let list: Vec<Block> = (0..n).map(|i| blocks.get(i)).collect();
            let mut order: Vec<(u64, u32)> = list.iter().enumerate().map(|(i, b)| (b.addr, i as u32)).collect();
            order.sort_unstable_by_key(|p| p.0);
            let list: Vec<Block> = order.iter().map(|&(_, i)| list[i as usize]).collect();
            apart = !list.windows(2).any(|w| overlap(&w[0], &w[1]));
            blocks = Blocks::from_sorted(&[&list]);
            order.into_iter().map(|(_, i)| i).collect()
        });
        // Overlapping or duplicate blocks would make lookups ambiguous: a
        // writer never produces them, so they mean a damaged dump.
        if !apart {
            return Err(fmt_err(heapdump_format::Error::Malformed { offset: 0, what: "two allocations overlap" }));
        }
        heap.blocks = blocks;
        // ALLOCS pointers name their targets by ordinal (file order): the
        // block of each ordinal, when the sort moved them.
        let block_of: Option<Vec<u32>> = rec_of.as_ref().map(|rec_of| {
            let mut v = vec![0u32; n];
            for (b, &r) in rec_of.iter().enumerate() {
                v[r as usize] = b as u32;
            }
            v
        });
        // The directory pays for itself past a few lookups a block (its
        // two passes over the blocks took 0.05 s at 10 M): a compact dump
        // of ALLOCS records looks up only its roots, each by a binary
        // search then.
        let dir = directory(&heap.blocks, lookups > n / 32);
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
        // The edge tables, sized from pass 1's counts, each thread filling
        // its window of them in place (zeroed memory the kernel maps on
        // first touch: a window the records do not fill costs nothing).
        // A second thread's tables of its own, appended after, cost 8
        // bytes per pointer of its half at the peak.
        let mut start = vec![0u32; n + 1];
        let mut target = vec![0u32; pointers[0] + pointers[1]];
        let mut deltas = vec![0u8; pointers[0] + pointers[1]];
        if let Some(t) = &mut tables {
            t.build_in(&mut start);
            t.build_in(&mut target);
            t.build_in(&mut deltas);
        }
        let (first, second) = {
            let (s0, s1) = start.split_at_mut(split_n);
            let (t0, t1) = target.split_at_mut(pointers[0]);
            let (d0, d1) = deltas.split_at_mut(pointers[0]);
            let (first, second) = std::thread::scope(|sc| {
                let second = sc.spawn(|| {
                    ctx.run(dump.records_between(split_off, end_of_valid as u64), n - split_n, Part::new(s1, t1, d1), &mut |_, _| {})
                        .map(Part::done)
                });
                let first = ctx.run(dump.records_between(header_end, split_off), split_n, Part::new(s0, t0, d0), progress).map(Part::done);
                (first, second.join())
            });
            (first?, second.map_err(|_| AnalyzeError::TooLarge { path: file.path().to_path_buf(), what: "pass 2 failed".into() })??)
        };
        let too_many = || AnalyzeError::TooLarge { path: file.path().to_path_buf(), what: "more than 2^31 pointers".into() };
        let filled = |f: &Filled| f.0 + f.1.len();
        let base = filled(&first.target);
        if base + filled(&second.target) >= INTERIOR as usize {
            return Err(too_many());
        }
        let base32 = base as u32;
        join(&mut start, split_n, first.start, second.start, base32 != 0, |v| v + base32);
        join(&mut target, pointers[0], first.target, second.target, false, |v| v);
        join(&mut deltas, pointers[0], first.deltas, second.deltas, false, |v| v);
        let mut anchors = first.anchors;
        anchors.extend(second.anchors.into_iter().map(|w| WideOffset { edge: w.edge + base32, ..w }));
        let mut offset = Offsets { deltas: deltas.into(), anchors: anchors.into() };
        let mut interior_into = first.interior_into;
        interior_into.extend(second.interior_into.into_iter().map(|(k, v)| (k + base32, v)));
        let mut roots = first.roots;
        let regions = first.root_regions.len() as u32;
        roots.extend(second.roots.into_iter().map(|r| Root { region: r.region + regions, ..r }));
        let mut root_regions = first.root_regions;
        root_regions.extend(second.root_regions);
        while start.len() <= n {
            start.push(target.len() as u32);
        }
        if let Some(rec_of) = rec_of {
            (start, target, offset, interior_into) = to_block_order(&rec_of, &start, &target, &offset, &interior_into);
        }
        target.shrink_to_fit();
        offset.shrink_to_fit();
        progress(total, total);
        heap.edge_start = start.into();
        heap.edge_target = target.into();
        heap.edge_offset = offset;
        heap.interior_into = interior_into;
        heap.block_of = block_of.map(Slab::from);
        heap.roots = roots;
        heap.root_regions = root_regions;
        if let Some(t) = &tables {
            t.mark(&heap);
        }
        crate::phases::mark("loaded");
        Ok(heap)
    }
}

/// Where pass 1 of [`Heap::load`] splits the records between two threads
/// (see [`find_split`]).
struct Split {
    /// The first ALLOC or ALLOCS record past the middle of the file.
    offset: u64,
    /// The allocations before it.
    allocs: usize,
    /// The modules before it (the second thread checks first words
    /// against them: see `Heap::module_words`).
    modules: Vec<ModuleInfo>,
}

/// Records the walk for a split may read: a dump of more (one ALLOC record
/// per block, as full dumps are) is read by one thread, for which walking
/// half its records twice would cost what the split saves.
const SPLIT_WALK: usize = 1 << 16;

/// Where pass 1 splits (`None`: not worth it, or the walk met damage,
/// which one walk then reports in file order).
fn find_split(dump: &heapdump_format::Dump<'_>, middle: u64) -> Option<Split> {
    let mut allocs = 0usize;
    let mut modules = Vec::new();
    for (i, r) in dump.records().enumerate() {
        if i >= SPLIT_WALK {
            return None;
        }
        match r.ok()? {
            (off, Record::Alloc(_) | Record::Allocs(_)) if off >= middle => return Some(Split { offset: off, allocs, modules }),
            (_, Record::Alloc(_)) => allocs += 1,
            (_, Record::Allocs(a)) => allocs += a.count as usize,
            (_, Record::Module(m)) => modules.push(ModuleInfo::of(&m)),
            _ => {}
        }
    }
    None
}

/// What pass 1 reads of a run of records: a heap of all but the blocks
/// and edges (modules, threads, sites, the process, signal and trailer),
/// and the blocks in record order.
struct Pass1<'a> {
    heap: Heap,
    /// Whether a PROCESS record was read.
    process: bool,
    /// The blocks in record order.
    blocks: Packing<'a>,
    /// Whether the blocks came in address order.
    sorted: bool,
    /// Whether each block ended before the next one began.
    apart: bool,
    /// Words pass 2 looks up by address: the roots' (THREAD and STATIC
    /// records), and every ALLOC record's ([`usize::MAX`] once one is read).
    lookups: usize,
    /// Pointers before and from `split`, to size pass 2's tables.
    pointers: [usize; 2],
    /// Where pass 2 splits: the first ALLOC record past the middle of the
    /// file, and the blocks before it.
    split: Option<(u64, usize)>,
    /// Whether a SITE or ALLOC record was read (the roots were written).
    after_roots: bool,
    /// The first words that could be vtable pointers (`Heap::module_words`).
    module_words: Option<Vec<[u64; 2]>>,
    /// The modules' ranges the first words are checked against (those
    /// known at the first allocation).
    ranges: Option<ModuleRanges>,
    /// Where the records stop being intact.
    end_of_valid: usize,
}

impl<'a> Pass1<'a> {
    /// A pass whose blocks go to `window` (then spill).
    fn new(header: heapdump_format::Header, window: &'a mut [crate::heap::Packed], ranges: Option<ModuleRanges>) -> Pass1<'a> {
        Pass1 {
            heap: Heap::empty(header),
            process: false,
            blocks: Packing { fill: Fill::new(window), wide: HashMap::new(), first: None, last: None },
            sorted: true,
            apart: true,
            lookups: 0,
            pointers: [0; 2],
            split: None,
            after_roots: false,
            module_words: Some(Vec::new()),
            ranges,
            end_of_valid: usize::MAX,
        }
    }

    /// Reads `records`, decoding those at offsets in `window` (the others
    /// only walked: checked, and the trailer taken). `whole`: the walk is
    /// the file's, whose damage is reported (a cut-short file loads up to
    /// it); otherwise the walk ends quietly at the first error, which the
    /// whole walk reports. `at`: the file's path and length.
    fn run(
        mut self,
        records: heapdump_format::Records<'_>,
        window: impl std::ops::RangeBounds<u64>,
        whole: bool,
        at: (&std::path::Path, u64),
        fmt_err: &(dyn Fn(heapdump_format::Error) -> AnalyzeError + Sync),
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Pass1<'a>> {
        let (path, file_len) = at;
        let (middle, total) = (file_len / 2, file_len * 2);
        self.end_of_valid = file_len as usize;
        let too_many = || AnalyzeError::TooLarge { path: path.to_path_buf(), what: format!("more than {MAX_BLOCKS} allocations") };
        let heap = &mut self.heap;
        let list = &mut self.blocks;
        for r in records {
            let (off, rec) = match r {
                Ok(x) => x,
                Err(e) if whole && e.is_truncation() => {
                    heap.truncated = Some(e.to_string());
                    self.end_of_valid = e.offset() as usize;
                    break;
                }
                Err(e) if whole => return Err(fmt_err(e)),
                Err(_) => break,
            };
            if !window.contains(&off) {
                if let Record::End(t) = rec {
                    heap.trailer = Some(t);
                }
                continue;
            }
            if list.len() % 65536 == 0 {
                progress(off, total);
            }
            match rec {
                Record::Process(p) => {
                    self.process = true;
                    heap.exe = String::from_utf8_lossy(p.exe).into_owned();
                    heap.cmdline =
                        p.cmdline.split(|&b| b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
                    heap.backtrace = p.backtrace;
                    heap.sample_mean = p.sample_mean;
                }
                Record::Module(m) => {
                    if self.ranges.is_some() {
                        // Blocks read before it were not checked against it.
                        self.module_words = None;
                    }
                    heap.modules.push(ModuleInfo::of(&m))
                }
                Record::Thread(t) => {
                    self.lookups = self.lookups.saturating_add(words(&t.contents) + 18);
                    heap.threads.push(ThreadInfo {
                        tid: t.tid,
                        name: String::from_utf8_lossy(t.name).into_owned(),
                        flags: t.flags,
                        stack: (t.stack_start, t.stack_end),
                    })
                }
                Record::Site(s) => {
                    self.after_roots = true;
                    heap.sites.insert(SiteId(s.id), s.frames().collect());
                }
                Record::Alloc(a) => {
                    self.after_roots = true;
                    self.lookups = usize::MAX;
                    if self.split.is_none() && off >= middle {
                        self.split = Some((off, list.len()));
                    }
                    if list.len() >= MAX_BLOCKS {
                        return Err(too_many());
                    }
                    let block = Block { addr: a.address, size: a.size, site: SiteId(a.site), flags: a.flags };
                    if let Some(last) = list.last {
                        self.sorted &= last.addr < a.address;
                        self.apart &= !overlap(&last, &block);
                    }
                    if let heapdump_format::ContentsRef::Compact { pointers: p, .. } = a.contents {
                        self.pointers[usize::from(self.split.is_some())] += p.len();
                    }
                    let first = crate::heap::first_word(&a);
                    let ranges = self.ranges.get_or_insert_with(|| ModuleRanges::of(&heap.modules));
                    if let Some(words) = self.module_words.as_mut().filter(|_| ranges.contains(first)) {
                        words.push([a.address, first]);
                    }
                    list.push(block);
                }
                Record::Allocs(a) => {
                    self.after_roots = true;
                    if self.split.is_none() && off >= middle {
                        self.split = Some((off, list.len()));
                    }
                    if list.len() + a.count as usize > MAX_BLOCKS {
                        return Err(too_many());
                    }
                    self.pointers[usize::from(self.split.is_some())] += a.pointers as usize;
                    let ranges = self.ranges.get_or_insert_with(|| ModuleRanges::of(&heap.modules));
                    for e in a.entries() {
                        let e = e.map_err(fmt_err)?;
                        let block = Block { addr: e.address, size: e.size, site: SiteId(e.site), flags: e.flags };
                        if let Some(last) = list.last {
                            self.sorted &= last.addr < e.address;
                            self.apart &= !overlap(&last, &block);
                        }
                        if let heapdump_format::FirstWord::Value(v) = e.first_word {
                            if let Some(words) = self.module_words.as_mut().filter(|_| ranges.contains(v)) {
                                words.push([e.address, v]);
                            }
                        }
                        list.push(block);
                    }
                }
                Record::End(t) => heap.trailer = Some(t),
                Record::Signal(g) => heap.signal = Some(g),
                Record::Limit(_) | Record::History(_) | Record::Allocator(_) | Record::SiteTotals(_) | Record::Memory(_) => {}
                Record::Static(s) => self.lookups = self.lookups.saturating_add(words(&s.contents)),
                Record::Unknown { .. } => {}
            }
        }
        Ok(self)
    }
}

/// One pass-1 thread's blocks, packed into its window of the block table
/// as they are read.
struct Packing<'a> {
    fill: Fill<'a, crate::heap::Packed>,
    /// The blocks whose size or site does not fit the table, by index.
    wide: HashMap<u32, (u64, SiteId)>,
    first: Option<Block>,
    last: Option<Block>,
}

impl Packing<'_> {
    fn len(&self) -> usize {
        self.fill.len()
    }

    #[inline]
    fn push(&mut self, x: Block) {
        let p = Blocks::pack(self.len() as u32, &x, &mut self.wide);
        self.fill.push(p);
        self.first.get_or_insert(x);
        self.last = Some(x);
    }
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

/// More pointers than an edge index (31 bits) can number.
#[derive(Debug)]
struct TooManyPointers;

/// Edges and roots of a run of records, the edge tables filled in the
/// thread's windows of the shared ones.
struct Part<'a> {
    /// Start of each ALLOC record's edges.
    start: Fill<'a>,
    target: Fill<'a>,
    /// The edges' offsets as [`Offsets`] keeps them: a byte each, and
    /// the offsets kept aside by (part-relative) edge index.
    deltas: Fill<'a, u8>,
    anchors: Vec<WideOffset>,
    /// Where the current block's offsets stand.
    cursor: OffsetCursor,
    interior_into: HashMap<u32, u64>,
    roots: Vec<Root>,
    root_regions: Vec<RootRegion>,
}

/// A [`Part`] once its thread is done, its tables' windows given back.
struct Done {
    start: Filled,
    target: Filled,
    deltas: Filled<u8>,
    anchors: Vec<WideOffset>,
    interior_into: HashMap<u32, u64>,
    roots: Vec<Root>,
    root_regions: Vec<RootRegion>,
}

impl<'a> Part<'a> {
    fn new(start: &'a mut [u32], target: &'a mut [u32], deltas: &'a mut [u8]) -> Part<'a> {
        Part {
            start: Fill::new(start),
            target: Fill::new(target),
            deltas: Fill::new(deltas),
            anchors: Vec::new(),
            cursor: OffsetCursor::default(),
            interior_into: HashMap::new(),
            roots: Vec::new(),
            root_regions: Vec::new(),
        }
    }

    fn push_offset(&mut self, offset: u64) {
        let (d, anchor) = self.cursor.next(self.deltas.len(), offset);
        self.anchors.extend(anchor);
        self.deltas.push(d);
    }

    fn done(self) -> Done {
        Done {
            start: self.start.done(),
            target: self.target.done(),
            deltas: self.deltas.done(),
            anchors: self.anchors,
            interior_into: self.interior_into,
            roots: self.roots,
            root_regions: self.root_regions,
        }
    }
}

/// One thread's share of a table (pass 1's blocks, pass 2's edges): its
/// window of the table, then a spill vector for what the counts did not
/// foresee (a full ALLOC record's pointers are not counted, a cut dump
/// has no trailer to count its blocks).
struct Fill<'a, T = u32> {
    window: &'a mut [T],
    n: usize,
    spill: Vec<T>,
}

/// What a [`Fill`] holds: how much of its window, and its spill.
type Filled<T = u32> = (usize, Vec<T>);

impl<'a, T: Copy> Fill<'a, T> {
    fn new(window: &'a mut [T]) -> Fill<'a, T> {
        Fill { window, n: 0, spill: Vec::new() }
    }

    #[inline]
    fn push(&mut self, v: T) {
        match self.window.get_mut(self.n) {
            Some(slot) => {
                *slot = v;
                self.n += 1;
            }
            None => self.spill.push(v),
        }
    }

    fn len(&self) -> usize {
        self.n + self.spill.len()
    }

    fn done(self) -> Filled<T> {
        (self.n, self.spill)
    }
}

/// Joins in `all` the two threads' shares of it, whose windows start at 0
/// and `split`: the first's values, its spill, the second's (each passed
/// through `rebase` when `rebased`), its spill. Moves the second's values
/// within `all` (when the first's did not fill its window exactly), never
/// copies the table.
fn join<T: Copy + Default>(all: &mut Vec<T>, split: usize, first: Filled<T>, second: Filled<T>, rebased: bool, rebase: impl Fn(T) -> T) {
    let ((n0, spill0), (n1, spill1)) = (first, second);
    let head = n0 + spill0.len();
    if all.len() < head + n1 {
        all.resize(head + n1, T::default());
    }
    // Moved first: the first's spill may reach into the second's window.
    if head != split {
        all.copy_within(split..split + n1, head);
    }
    all[n0..head].copy_from_slice(&spill0);
    if rebased {
        for v in &mut all[head..head + n1] {
            *v = rebase(*v);
        }
    }
    all.truncate(head + n1);
    all.extend(spill1.into_iter().map(|v| if rebased { rebase(v) } else { v }));
}

impl Pass2<'_> {
    /// Resolves the pointers of `records` (at most `allocs` ALLOC records)
    /// into `p`.
    fn run<'a>(
        &self,
        records: heapdump_format::Records<'_>,
        allocs: usize,
        mut p: Part<'a>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Part<'a>> {
        let too_many = || AnalyzeError::TooLarge { path: self.path.to_path_buf(), what: "more than 2^31 pointers".into() };
        let blocks = self.blocks;
        let find = |v: u64| found(self.dir.find(&Addrs(blocks), v));
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
                        if let Some(located) = self.dir.locate(v) {
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
    Word { v: u64, o: u64, located: Located },
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
    fn push(&mut self, step: Pending, p: &mut Part<'_>) -> std::result::Result<(), TooManyPointers> {
        // Nothing waiting: a step with no lookup (ALLOCS) is done at once.
        if self.ring.is_empty() && !matches!(step, Pending::Word { .. }) {
            return self.finish(step, p);
        }
        if let Pending::Word { located, .. } = step {
            self.dir.prefetch(located);
        }
        self.ring.push_back(step);
        let n = self.ring.len();
        if n > LAG {
            if let Pending::Word { located, .. } = self.ring[n - 1 - LAG] {
                // The first block starting in the bucket (the window
                // starts one before it).
                if let Some((before, _)) = self.dir.window(located) {
                    prefetch(&self.blocks.packed, before + 1);
                }
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
    fn drain(&mut self, p: &mut Part<'_>) -> std::result::Result<(), TooManyPointers> {
        while let Some(step) = self.ring.pop_front() {
            self.finish(step, p)?;
        }
        if p.target.len() >= INTERIOR as usize {
            return Err(TooManyPointers);
        }
        Ok(())
    }

    #[inline]
    fn finish(&self, step: Pending, p: &mut Part<'_>) -> std::result::Result<(), TooManyPointers> {
        match step {
            Pending::Start => {
                if p.target.len() >= INTERIOR as usize {
                    return Err(TooManyPointers);
                }
                p.start.push(p.target.len() as u32);
                p.cursor = OffsetCursor::default();
            }
            Pending::Resolved { b, o, into } => {
                if into != 0 {
                    p.interior_into.insert(p.target.len() as u32, into);
                }
                p.target.push(b | if into != 0 { INTERIOR } else { 0 });
                p.push_offset(o);
            }
            Pending::Word { v, o, located } => {
                if let Some((b, interior)) = found(self.dir.finish(&Addrs(self.blocks), v, located)) {
                    if interior {
                        p.interior_into.insert(p.target.len() as u32, v - self.blocks.addr(b.index()));
                    }
                    p.target.push(b.0 | if interior { INTERIOR } else { 0 });
                    p.push_offset(o);
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
        let mut cursor = OffsetCursor::default();
        for ((k, &t), o) in target.iter().enumerate().take(e).skip(s).zip(offset.of_block(s, e)) {
            if t & INTERIOR != 0 {
                if let Some(&into) = interior_into.get(&(k as u32)) {
                    new_into.insert(new_target.len() as u32, into);
                }
            }
            new_target.push(t);
            new_offset.push(&mut cursor, o);
        }
    }
    new_start.push(new_target.len() as u32);
    (new_start, new_target, new_offset, new_into)
}

/// The words of a region's contents pass 2 looks up.
fn words(c: &heapdump_format::ContentsRef<'_>) -> usize {
    match c {
        heapdump_format::ContentsRef::Full(b) => b.len() / 8,
        heapdump_format::ContentsRef::Compact { pointers: p, .. } => p.len(),
    }
}

/// Whether block `y`, which starts after `x`, starts inside it (an empty
/// block taking a byte).
fn overlap(x: &Block, y: &Block) -> bool {
    y.addr < x.addr.saturating_add(x.size.max(1))
}

fn is_libc(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.starts_with("libc.so") || name.starts_with("libc-2.")
}

/// Which block holds an address, during loading: the format's lookup
/// ([`heapdump_format::lookup`]) over the sorted blocks, or a binary search
/// of them for a few lookups.
type Directory = lookup::Directory<Vec<Run>, Vec<u32>, Vec<Line>>;

/// Runs of blocks cut where a block starts 1 MiB or more past the end of
/// every block before it (a heap arena, a thread's arena, a large mapped
/// block); in each, buckets of 512 bytes or more, at most four to a block
/// (a few bytes per bucket: small enough to stay in cache).
const SHAPE: Shape = Shape { gap: 1 << 20, min_shift: 9, buckets: 4, per_blocks: 1, line_budget: 0 };

/// The blocks as the directory sees them.
struct Addrs<'a>(&'a Blocks);

impl lookup::Blocks for Addrs<'_> {
    #[inline]
    fn len(&self) -> usize {
        self.0.len()
    }
    #[inline]
    fn start(&self, i: usize) -> u64 {
        self.0.addr(i)
    }
    #[inline]
    fn size(&self, i: usize) -> u64 {
        self.0.size(i)
    }
    #[inline]
    fn first_after(&self, from: usize, to: usize, v: u64) -> usize {
        self.0.partition(from, to, v)
    }
}

/// The directory of `blocks`: a table when `table`, else one that
/// searches (the table costs two passes over the blocks).
fn directory(blocks: &Blocks, table: bool) -> Directory {
    let search = || Directory::searching(Vec::new(), Vec::new(), Vec::new());
    if !table {
        return search();
    }
    let s = SHAPE.sizes(&Addrs(blocks));
    // Refused only past 2^32 blocks, more than a heap holds.
    Directory::build(&SHAPE, &Addrs(blocks), vec![Run::default(); s.runs], vec![0u32; s.words], vec![Line::default(); s.lines])
        .unwrap_or_else(search)
}

/// The block holding `v`, and whether `v` is inside it (not its start).
#[inline]
fn found(at: Option<(usize, u64)>) -> Option<(BlockId, bool)> {
    at.map(|(i, off)| (BlockId(i as u32), off != 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A site id past the packed table's 24 bits.
    const WIDE_SITE: u32 = (1 << 24) + 5;

    /// A compact dump of ALLOCS records (a small batch buffer: many
    /// records), sites among them, two modules, roots.
    fn dense_dump(blocks: u64) -> Vec<u8> {
        use heapdump_format::*;
        let mut buf = vec![0u8; 4096];
        let mut batch = vec![0u8; 512];
        let mut w = Writer::new(Vec::new(), &mut buf, &Header::new(Mode::Compact, Reason::Api, 4096, 1, 0)).unwrap();
        w.process(&Process { backtrace: Backtrace::Off, max_frames: 0, sample_mean: 0, exe: b"/bin/t", cmdline: b"t\0", flags: 0 })
            .unwrap();
        for (path, at) in [(&b"/bin/t"[..], 0x40_0000u64), (b"/lib/libc.so.6", 0x7f00_0000)] {
            let seg = [Segment { vaddr: at, memsz: 0x1000, file_offset: 0, flags: raw::SEG_X | raw::SEG_R }];
            w.module(&ModuleInfo { bias: 0, path, build_id: &[], segments: &seg }).unwrap();
        }
        let stack = [(0u64, 0x10_0000u64), (8, 0x10_0000 + 40 * 64 + 8)];
        let t = ThreadInfo {
            tid: 7,
            flags: raw::THREAD_CURRENT,
            stack_start: 0x7000_0000,
            stack_end: 0x7000_0200,
            tls: 0,
            name: b"main",
            regs: &[0; 17],
        };
        w.thread(&t, Contents::Compact { count: 2, pointers: stack.into_iter() }).unwrap();
        w.site(1, &[0x40_0100, 0x40_0200]).unwrap();
        w.set_batch_buffer(&mut batch).unwrap();
        let mut x = 88172645463325252u64;
        for i in 0..blocks {
            if i == blocks / 3 {
                w.site(2, &[0x40_0300]).unwrap();
                w.site(WIDE_SITE, &[0x40_0400]).unwrap();
            }
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let first_word = if i % 5 == 0 { 0x40_0800 + i } else { x };
            let info = AllocInfo {
                address: 0x10_0000 + i * 64,
                size: 48,
                // Blocks whose site does not fit the packed table.
                site: if i > blocks / 3 && i % 17 == 0 { WIDE_SITE } else { 1 + u32::from(i > blocks / 3) },
                align_log2: 4,
                flags: 0,
                first_word,
            };
            // Interior pointers; in the second half, some past their
            // target's size or to an allocation the dump does not hold:
            // not pointers.
            let late = i > blocks / 2;
            let links: Vec<Link> = (0..i.min(2))
                .map(|k| match (k, i % 7, i % 11, i % 13) {
                    (1, 0, _, _) => Link { offset: 16, target: (x >> 20) % i, delta: 8 },
                    (0, _, 0, _) if late => Link { offset: 8, target: x % i, delta: 100 },
                    (1, _, _, 0) if late => Link { offset: 16, target: blocks + 3, delta: 0 },
                    _ => Link { offset: 8 + 8 * k, target: (x >> (20 * k)) % i, delta: 0 },
                })
                .collect();
            w.dense_alloc(&info, links.len() as u64, links.into_iter()).unwrap();
        }
        w.finish(0).unwrap().0
    }

    /// Everything a load gives, comparable.
    fn loaded(file: &DumpFile, split: bool) -> String {
        match Heap::load_with(file, &mut |_, _| {}, split, None) {
            Err(e) => format!("error: {e}"),
            Ok(h) => {
                let edges: Vec<Vec<crate::Edge>> = (0..h.len()).map(|b| h.edges(BlockId(b as u32)).collect()).collect();
                let mut sites: Vec<_> = h.sites.iter().collect();
                sites.sort();
                format!(
                    "{:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?}",
                    h.blocks().collect::<Vec<_>>(),
                    edges,
                    h.roots,
                    h.modules,
                    h.threads,
                    sites,
                    h.truncated,
                    h.trailer,
                    h.module_words,
                    h.roots_complete,
                    (&h.exe, &h.cmdline),
                    h.block_of.as_ref().map(|b| b.to_vec())
                )
            }
        }
    }

    /// The first pass split between two threads loads what one thread
    /// loads: whole, cut short at every offset, and with any one byte
    /// damaged (the same error, or the same heap up to the damage).
    #[test]
    fn a_split_first_pass_loads_what_one_thread_loads() {
        let bytes = dense_dump(300);
        let dir = std::env::temp_dir().join(format!("hd-split-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("d.hdump");
        let check = |b: &[u8], what: &str| {
            std::fs::write(&path, b).unwrap();
            let Ok(file) = DumpFile::open(&path) else { return };
            assert_eq!(loaded(&file, true), loaded(&file, false), "{what}");
        };
        std::fs::write(&path, &bytes).unwrap();
        let file = DumpFile::open(&path).unwrap();
        let dump = file.dump().unwrap();
        assert!(find_split(&dump, bytes.len() as u64 / 2).is_some(), "the dump is split");
        let heap = Heap::load(&file, &mut |_, _| {}).unwrap();
        assert!(heap.module_words.as_ref().is_some_and(|w| w.len() == 60));
        // The stack's two words: block 0's start, 8 bytes into block 40.
        assert_eq!(heap.roots.iter().map(|r| (r.target.0, r.interior, r.into)).collect::<Vec<_>>(), [(0, false, 0), (40, true, 8)]);
        // The blocks 102, 119, …, 289 (in both halves of the split).
        assert_eq!(heap.blocks().filter(|b| b.site == SiteId(WIDE_SITE)).count(), 12);
        // Without the trailer, no count sizes the table: every block
        // spills, and the same blocks load.
        let end = dump.records().filter_map(|r| r.ok()).find(|(_, r)| matches!(r, Record::End(_))).map(|(off, _)| off as usize).unwrap();
        std::fs::write(&path, &bytes[..end]).unwrap();
        let cut = Heap::load(&DumpFile::open(&path).unwrap(), &mut |_, _| {}).unwrap();
        assert!(cut.trailer.is_none());
        assert_eq!(cut.blocks().collect::<Vec<_>>(), heap.blocks().collect::<Vec<_>>());
        // 2 pointers a block but the first two blocks' (597), less those
        // past their target (14 of the blocks 154, 165, …, 297) and to no
        // target (10 of 156, 169, …, 299, not 182 nor 273); the interior
        // ones of 7, 14, …, 294.
        let interior = (0..heap.len()).flat_map(|b| heap.edges(BlockId(b as u32))).filter(|e| e.interior).count();
        assert_eq!((heap.edge_count(), interior), (597 - 14 - 10, 42));
        for cut in (raw::FILE_HEADER_SIZE..bytes.len()).step_by(3) {
            check(&bytes[..cut], &format!("cut at {cut}"));
        }
        for at in (raw::FILE_HEADER_SIZE..bytes.len()).step_by(7) {
            let mut d = bytes.clone();
            d[at] ^= 0x5a;
            check(&d, &format!("byte {at} damaged"));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Two threads' shares of a table, each filling its window and maybe
    /// spilling past it, join to the first's values then the second's
    /// (rebased), whatever each filled: the join the load makes of its
    /// two halves of the edges.
    #[test]
    fn two_shares_join_in_order() {
        // (window lengths, values each thread pushes)
        let cases: [(usize, usize, usize, usize); 7] =
            [(4, 4, 4, 4), (4, 4, 2, 4), (4, 4, 7, 3), (4, 4, 4, 9), (0, 0, 5, 6), (3, 0, 1, 0), (4, 4, 0, 0)];
        for (w0, w1, k0, k1) in cases {
            let mut all = vec![0u32; w0 + w1];
            let (a, b) = all.split_at_mut(w0);
            let (mut f0, mut f1) = (Fill::new(a), Fill::new(b));
            for v in 0..k0 {
                f0.push(100 + v as u32);
            }
            for v in 0..k1 {
                f1.push(200 + v as u32);
            }
            assert_eq!((f0.len(), f1.len()), (k0, k1));
            let (d0, d1) = (f0.done(), f1.done());
            join(&mut all, w0, d0, d1, true, |v| v + 1000);
            let want: Vec<u32> = (0..k0).map(|v| 100 + v as u32).chain((0..k1).map(|v| 1200 + v as u32)).collect();
            assert_eq!(all, want, "windows {w0}+{w1}, filled {k0}+{k1}");
        }
    }
}
