//! The loaded graph of a dump, kept for the next analysis of it: a repeat
//! question then reads arrays instead of walking and decoding every
//! record. Written beside the analysis cache (`cache.rs`), with the same
//! key and the same care: a temporary name renamed into place, mode 0600,
//! a seal at the end (`cache_file.rs`); read back with every chunk and every
//! index checked, so that a damaged
//! file is refused (and rebuilt) rather than trusted.

use crate::cache_file::{CacheProblem, Out, Reader, Sealed};
use crate::heap::{Blocks, Heap, ModuleInfo, Offsets, Packed, Root, RootKind, RootRegion, SiteId, ThreadInfo, INTERIOR};
use crate::slab::Slab;
use heapdump_format::{Backtrace, Header, Mode, Reason, Segment, SignalInfo, Trailer};
use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// Version 2: the large arrays start at multiples of 8 bytes, read in
/// place from the mapping ([`Slab`]); 4: the first words that could be
/// vtable pointers follow; 5: the edges' offsets a byte each
/// ([`Offsets`]); 6: sealed by a CRC per chunk.
const MAGIC: &[u8; 8] = b"HDGRAPH\x06";

fn bad(what: &'static str) -> CacheProblem {
    CacheProblem::Stale(what)
}

/// Writes the graph to `w`, keyed by `key` (the cache's).
pub(crate) fn encode(heap: &Heap, key: &[u64; 5], w: &mut Out) {
    w.raw(MAGIC);
    for k in key {
        w.u64(*k);
    }
    let h = &heap.header;
    w.u32(u32::from(h.major) | u32::from(h.minor) << 16);
    w.u8(h.pointer_size);
    w.u8(h.mode.to_u8());
    w.u8(h.reason.to_u8());
    w.u32(h.page_size);
    w.u32(h.pid);
    w.u64(h.time_ns);
    w.counted(heap.exe.as_bytes());
    w.u64(heap.cmdline.len() as u64);
    for a in &heap.cmdline {
        w.counted(a.as_bytes());
    }
    w.u8(heap.backtrace.to_u8());
    w.u64(heap.sample_mean);
    w.u64(heap.modules.len() as u64);
    for m in &heap.modules {
        w.counted(m.path.as_bytes());
        w.counted(&m.build_id);
        w.u64(m.bias);
        w.u64(m.segments.len() as u64);
        for s in &m.segments {
            w.u64(s.vaddr);
            w.u64(s.memsz);
            w.u64(s.file_offset);
            w.u32(s.flags);
        }
    }
    w.u64(heap.threads.len() as u64);
    for t in &heap.threads {
        w.u32(t.tid);
        w.counted(t.name.as_bytes());
        w.u32(t.flags);
        w.u64(t.stack.0);
        w.u64(t.stack.1);
    }
    let mut sites: Vec<(&SiteId, &Vec<u64>)> = heap.sites.iter().collect();
    sites.sort();
    w.u64(sites.len() as u64);
    for (id, frames) in sites {
        w.u32(id.0);
        w.u64(frames.len() as u64);
        for f in frames {
            w.u64(*f);
        }
    }
    let b = &heap.blocks;
    w.slab(&b.packed);
    let mut wide: Vec<(&u32, &(u64, SiteId))> = b.wide.iter().collect();
    wide.sort();
    w.u64(wide.len() as u64);
    for (i, (size, site)) in wide {
        w.u32(*i);
        w.u64(*size);
        w.u32(site.0);
    }
    w.slab(&heap.edge_start);
    w.slab(&heap.edge_target);
    w.slab(&heap.edge_offset.deltas);
    w.slab(&heap.edge_offset.anchors);
    let mut into: Vec<(&u32, &u64)> = heap.interior_into.iter().collect();
    into.sort();
    w.u64(into.len() as u64);
    for (k, v) in into {
        w.u32(*k);
        w.u64(*v);
    }
    match &heap.block_of {
        None => w.u8(0),
        Some(m) => {
            w.u8(1);
            w.slab(m);
        }
    }
    w.u64(heap.roots.len() as u64);
    for r in &heap.roots {
        w.u32(r.region);
        w.u64(r.offset);
        w.u32(r.target.0);
        w.u8(u8::from(r.interior));
        w.u64(r.into);
    }
    w.u64(heap.root_regions.len() as u64);
    for r in &heap.root_regions {
        w.u8(match r.kind {
            RootKind::Stack => 0,
            RootKind::Registers => 1,
            RootKind::Static => 2,
        });
        w.u64(r.address);
        w.u32(r.tid);
        w.counted(r.owner.as_bytes());
        w.counted(r.name.as_bytes());
        w.u8(u8::from(r.libc));
    }
    match &heap.trailer {
        None => w.u8(0),
        Some(t) => {
            w.u8(1);
            for v in [t.records, t.allocations, t.alloc_bytes, t.sites, t.pointers, t.pause_ns] {
                w.u64(v);
            }
            for v in [t.threads, t.statics, t.modules, t.checksum] {
                w.u32(v);
            }
        }
    }
    match &heap.signal {
        None => w.u8(0),
        Some(s) => {
            w.u8(1);
            w.u32(s.signal);
            w.u32(s.code as u32);
            w.u32(s.tid);
            w.u64(s.address);
            w.u32(s.sender);
        }
    }
    match &heap.truncated {
        None => w.u8(0),
        Some(t) => {
            w.u8(1);
            w.counted(t.as_bytes());
        }
    }
    w.u8(u8::from(heap.roots_complete));
    match &heap.module_words {
        None => w.u8(0),
        Some(words) => {
            w.u8(1);
            w.slab(words);
        }
    }
}

/// The graph back from the mapped file of `sealed`, every index checked;
/// its large arrays are read in place. It must be the dump's that `key`
/// names: its header and trailer those of the key (and `dump`'s own, when
/// given), its blocks as many as the trailer counts, their sizes adding
/// up to its total, in address order and apart, as a load leaves them.
/// With `later` (its chunks not checked yet), the edges' tables and the
/// block of each record are checked when first read ([`EdgesLater`]),
/// the rest now; without, everything now (its chunks all checked by
/// `map_checked`).
fn decode(
    sealed: &Sealed,
    key: &[u64; 5],
    dump: Option<&(Header, Trailer)>,
    later: bool,
) -> Result<(Heap, Vec<Range<usize>>), CacheProblem> {
    let (mut r, map) = (Reader::body(sealed), sealed.map());
    let mut arrays = Arrays { sealed, later, edges: Vec::new() };
    if r.take(8)? != MAGIC {
        return Err(bad("not a heapdump graph cache"));
    }
    r.key(key)?;
    let v = r.u32()?;
    let pointer_size = r.u8()?;
    let mode = Mode::from_u8(r.u8()?).ok_or(bad("mode"))?;
    let reason = Reason::from_u8(r.u8()?).ok_or(bad("reason"))?;
    let header = Header {
        major: v as u16,
        minor: (v >> 16) as u16,
        pointer_size,
        mode,
        reason,
        page_size: r.u32()?,
        pid: r.u32()?,
        time_ns: r.u64()?,
    };
    if header.time_ns != key[3] || u64::from(header.pid) != key[4] || dump.is_some_and(|d| d.0 != header) {
        return Err(bad("the header of another dump"));
    }
    let mut heap = Heap::empty(header);
    heap.exe = r.string()?;
    let n = r.len(8)?;
    heap.cmdline = (0..n).map(|_| r.string()).collect::<Result<_, _>>()?;
    heap.backtrace = Backtrace::from_u8(r.u8()?).ok_or(bad("backtrace"))?;
    heap.sample_mean = r.u64()?;
    let n = r.len(24)?;
    for _ in 0..n {
        let path = r.string()?;
        let build_id = r.bytes()?.to_vec();
        let bias = r.u64()?;
        let ns = r.len(28)?;
        let mut segments = Vec::with_capacity(ns);
        for _ in 0..ns {
            segments.push(Segment { vaddr: r.u64()?, memsz: r.u64()?, file_offset: r.u64()?, flags: r.u32()? });
        }
        heap.modules.push(ModuleInfo { path, build_id, bias, segments });
    }
    let n = r.len(28)?;
    for _ in 0..n {
        let tid = r.u32()?;
        let name = r.string()?;
        heap.threads.push(ThreadInfo { tid, name, flags: r.u32()?, stack: (r.u64()?, r.u64()?) });
    }
    let n = r.len(12)?;
    for _ in 0..n {
        let id = SiteId(r.u32()?);
        let k = r.len(8)?;
        let frames = (0..k).map(|_| r.u64()).collect::<Result<Vec<_>, _>>()?;
        heap.sites.insert(id, frames);
    }
    let packed: Slab<Packed> = arrays.read(&mut r, map, false)?;
    let blocks = packed.len();
    let n = r.len(16)?;
    let mut wide = HashMap::with_capacity(n);
    for _ in 0..n {
        let i = r.u32()?;
        if i as usize >= blocks {
            return Err(bad("wide block"));
        }
        wide.insert(i, (r.u64()?, SiteId(r.u32()?)));
    }
    heap.blocks = Blocks { packed, wide };
    heap.edge_start = arrays.read(&mut r, map, true)?;
    heap.edge_target = arrays.read(&mut r, map, true)?;
    heap.edge_offset = Offsets { deltas: arrays.read(&mut r, map, true)?, anchors: arrays.read(&mut r, map, true)? };
    // Where each interior edge points into its target (checked against
    // the edges with them).
    let n = r.len(12)?;
    for _ in 0..n {
        let k = r.u32()?;
        if heap.interior_into.insert(k, r.u64()?).is_some() {
            return Err(bad("interior edge"));
        }
    }
    heap.block_of = match r.u8()? {
        0 => None,
        1 => Some(arrays.read(&mut r, map, true)?),
        _ => return Err(bad("flag")),
    };
    let n = r.len(25)?;
    let mut roots = Vec::with_capacity(n);
    for _ in 0..n {
        let region = r.u32()?;
        let offset = r.u64()?;
        let target = r.u32()?;
        let (interior, into) = (r.u8()?, r.u64()?);
        // At the block's start, or inside it.
        if target as usize >= blocks
            || interior > 1
            || (interior == 1) != (into != 0)
            || (into != 0 && into >= heap.blocks.size(target as usize))
        {
            return Err(bad("root target"));
        }
        roots.push(Root { region, offset, target: crate::BlockId(target), interior: interior == 1, into });
    }
    let n = r.len(30)?;
    for _ in 0..n {
        let kind = match r.u8()? {
            0 => RootKind::Stack,
            1 => RootKind::Registers,
            2 => RootKind::Static,
            _ => return Err(bad("root kind")),
        };
        let address = r.u64()?;
        let tid = r.u32()?;
        let owner: Arc<str> = r.string()?.into();
        let name: Arc<str> = r.string()?.into();
        heap.root_regions.push(RootRegion { kind, address, tid, owner, name, libc: r.u8()? != 0 });
    }
    if roots.iter().any(|x| x.region as usize >= heap.root_regions.len()) {
        return Err(bad("root region"));
    }
    heap.roots = roots;
    heap.trailer = match r.u8()? {
        0 => None,
        1 => {
            let mut v = [0u64; 6];
            for x in &mut v {
                *x = r.u64()?;
            }
            let [records, allocations, alloc_bytes, sites, pointers, pause_ns] = v;
            Some(Trailer {
                records,
                allocations,
                alloc_bytes,
                sites,
                pointers,
                pause_ns,
                threads: r.u32()?,
                statics: r.u32()?,
                modules: r.u32()?,
                checksum: r.u32()?,
            })
        }
        _ => return Err(bad("flag")),
    };
    // The blocks on this thread, the edges on a second one when they are
    // checked now (each a pass over hundreds of megabytes at 10^8 blocks).
    let (total, edges) = std::thread::scope(|s| {
        let edges = (!later).then(|| s.spawn(|| check_edges(&heap)));
        (blocks_apart(&heap.blocks), edges.map(|e| e.join().unwrap_or(Err(bad("edges")))))
    });
    let total = total.ok_or(bad("blocks out of order or overlapping"))?;
    edges.transpose()?;
    // The trailer the key names, counting these blocks and their bytes.
    match (&heap.trailer, dump) {
        (Some(t), _) if u64::from(t.checksum) != key[1] || t.allocations != blocks as u64 || t.alloc_bytes != total => {
            return Err(bad("the trailer of another dump"))
        }
        (t, Some(d)) if *t != Some(d.1) => return Err(bad("the trailer of another dump")),
        _ => {}
    }
    heap.signal = match r.u8()? {
        0 => None,
        1 => Some(SignalInfo { signal: r.u32()?, code: r.u32()? as i32, tid: r.u32()?, address: r.u64()?, sender: r.u32()? }),
        _ => return Err(bad("flag")),
    };
    heap.truncated = match r.u8()? {
        0 => None,
        1 => Some(r.string()?),
        _ => return Err(bad("flag")),
    };
    heap.roots_complete = r.u8()? != 0;
    heap.module_words = match r.u8()? {
        0 => None,
        1 => Some(arrays.read::<[u64; 2]>(&mut r, map, false)?.to_vec()),
        _ => return Err(bad("flag")),
    };
    r.end()?;
    Ok((heap, arrays.edges))
}

/// Where a graph's large arrays are, as they are read: the edges' noted
/// when their check is left for later, the others checked now when the
/// file's chunks were not all checked at opening.
struct Arrays<'s> {
    sealed: &'s Sealed,
    later: bool,
    edges: Vec<Range<usize>>,
}

impl Arrays<'_> {
    /// The next array (one of the edges' when `edges`), read in place.
    fn read<T: bytemuck::Pod>(&mut self, r: &mut Reader<'_>, map: &Arc<memmap2::Mmap>, edges: bool) -> Result<Slab<T>, CacheProblem> {
        let at = r.skip_slab::<T>()?;
        match (self.later, edges) {
            (true, true) => self.edges.push(at.clone()),
            (true, false) => check_ranges(self.sealed, std::slice::from_ref(&at))?,
            // Every chunk checked by `map_checked`.
            (false, _) => {}
        }
        Slab::mapped(map, at).ok_or(bad("array"))
    }
}

/// Checks the chunks of `ranges` of `s`'s contents against its seal, on
/// up to four threads (pieces of 64 MiB: a table of 10^8 blocks is 1.6 GB).
fn check_ranges(s: &Sealed, ranges: &[Range<usize>]) -> Result<(), CacheProblem> {
    const PIECE: usize = 64 << 20;
    let pieces: Vec<Range<usize>> =
        ranges.iter().flat_map(|r| (r.start..r.end).step_by(PIECE).map(move |a| a..(a + PIECE).min(r.end))).collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(4).min(pieces.len()).max(1);
    if threads == 1 {
        return pieces.into_iter().try_for_each(|p| s.check(p));
    }
    std::thread::scope(|sc| {
        let parts: Vec<_> = (0..threads)
            .map(|t| {
                let pieces = &pieces;
                sc.spawn(move || pieces.iter().skip(t).step_by(threads).try_for_each(|p| s.check(p.clone())))
            })
            .collect();
        parts.into_iter().try_for_each(|p| p.join().unwrap_or(Err(bad("checksum differs"))))
    })
}

/// The edges' tables against the blocks and one another: each block's
/// edges in order and every target one of the blocks, each offset's byte
/// saying whether it is kept aside (and only those), each interior edge's
/// place inside its target, the block of each record a permutation of the
/// blocks. Reads the tables' fields (never through the heap's accessors,
/// which wait for this check).
fn check_edges(heap: &Heap) -> Result<(), CacheProblem> {
    let (blocks, edges) = (heap.blocks.len(), heap.edge_target.len());
    let (targets_in_range, interior) = targets(&heap.edge_target, blocks);
    if heap.edge_start.len() != blocks + 1
        || heap.edge_start.windows(2).any(|w| w[0] > w[1])
        || heap.edge_start.first().is_some_and(|&s| s != 0)
        || heap.edge_start.last().is_some_and(|&e| e as usize != edges)
        || !targets_in_range
    {
        return Err(bad("edges"));
    }
    let Offsets { deltas, anchors } = &heap.edge_offset;
    if deltas.len() != edges {
        return Err(bad("edge offsets"));
    }
    // Each anchored edge's byte says so, and no other's.
    if anchors.windows(2).any(|w| w[0].edge >= w[1].edge)
        || anchors.iter().any(|w| deltas.get(w.edge as usize) != Some(&Offsets::ANCHOR))
        || deltas.iter().filter(|&&d| d == Offsets::ANCHOR).count() != anchors.len()
    {
        return Err(bad("edge offsets kept aside"));
    }
    // Where each interior edge points into its target: inside it, past
    // its start (as the load finds it), and for those edges alone.
    for (&k, &into) in &heap.interior_into {
        let Some(&t) = heap.edge_target.get(k as usize).filter(|&&t| t & INTERIOR != 0) else { return Err(bad("interior edge")) };
        if into == 0 || into >= heap.blocks.size((t & !INTERIOR) as usize) {
            return Err(bad("interior edge"));
        }
    }
    if heap.interior_into.len() != interior {
        return Err(bad("interior edge"));
    }
    if let Some(m) = &heap.block_of {
        // A permutation of the blocks: each once.
        let mut seen = vec![0u64; blocks.div_ceil(64)];
        if m.len() != blocks
            || m.iter().any(|&b| {
                let (w, bit) = (b as usize / 64, 1u64 << (b % 64));
                let fresh = (b as usize) < blocks && seen[w] & bit == 0;
                if fresh {
                    seen[w] |= bit;
                }
                !fresh
            })
        {
            return Err(bad("block order"));
        }
    }
    Ok(())
}

/// The edges' tables of a graph read from the cache with their check
/// left for their first read ([`Heap::edges_checked`]): their chunks
/// against the file's seal and [`check_edges`], once, on the thread that
/// first reads them (the others wait for it). A question that reads no
/// edge (the viewer's summary, leaks and tree pages, a node's expansion)
/// never pays for it (the suspects' paths and a block's page do).
pub(crate) struct EdgesLater {
    sealed: Sealed,
    /// Their bytes in the file.
    ranges: Vec<Range<usize>>,
    path: PathBuf,
    on_damage: fn(&str) -> !,
    done: OnceLock<Result<(), CacheProblem>>,
}

impl EdgesLater {
    /// Checks `heap`'s edges the first time; when they are damaged,
    /// removes the file and leaves through the caller's way out (never
    /// returns).
    pub(crate) fn check(&self, heap: &Heap) {
        let done = self.done.get_or_init(|| check_ranges(&self.sealed, &self.ranges).and_then(|()| check_edges(heap)));
        if let Err(why) = done {
            let _ = std::fs::remove_file(&self.path);
            (self.on_damage)(&format!("the kept graph {} is damaged ({why}): removed, the next opening rebuilds it", self.path.display()))
        }
    }
}

/// The blocks' sizes' total, when they are in address order and apart (a
/// block of no bytes takes one, as the load counts it), none past the end
/// of the address space.
fn blocks_apart(blocks: &Blocks) -> Option<u64> {
    let mut total = 0u64;
    let mut end = 0u64;
    for (i, (p, size)) in blocks.packed.iter().zip(blocks.sizes()).enumerate() {
        if (i > 0 && p.addr < end) || p.addr.checked_add(size).is_none() {
            return None;
        }
        end = p.addr.saturating_add(size.max(1));
        total = total.wrapping_add(size);
    }
    Some(total)
}

/// Whether every edge's target is one of the `blocks`, and how many point
/// inside their target.
fn targets(target: &[u32], blocks: usize) -> (bool, usize) {
    let (mut in_range, mut interior) = (true, 0usize);
    for &t in target {
        in_range &= ((t & !INTERIOR) as usize) < blocks;
        interior += usize::from(t & INTERIOR != 0);
    }
    (in_range, interior)
}

/// Reads `path`'s graph for `key` (`Ok(None)`: no such file).
pub fn read(path: &Path, key: &[u64; 5], dump: Option<&(Header, Trailer)>) -> Result<Option<Heap>, CacheProblem> {
    match crate::cache_file::map_checked(path)? {
        Some(sealed) => decode(&sealed, key, dump, false).map(|(heap, _)| Some(heap)),
        None => Ok(None),
    }
}

/// [`read`], the edges' tables and the block of each record checked when
/// first read rather than now (see [`EdgesLater`]): `on_damage` is called
/// with a one-line error if they are found damaged then.
pub(crate) fn read_edges_later(
    path: &Path,
    key: &[u64; 5],
    dump: Option<&(Header, Trailer)>,
    on_damage: fn(&str) -> !,
) -> Result<Option<Heap>, CacheProblem> {
    match Sealed::open(path)? {
        Some(sealed) => {
            let (mut heap, ranges) = decode(&sealed, key, dump, true)?;
            heap.edges_later = Some(Arc::new(EdgesLater { sealed, ranges, path: path.to_path_buf(), on_damage, done: OnceLock::new() }));
            Ok(Some(heap))
        }
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use crate::cache_file::Writing;
    use crate::heap::{Block, BlockId, Heap, Offsets, SiteId};
    use heapdump_format::{Header, Mode, Reason};

    /// Two blocks: one of offsets a byte cannot hold (unaligned, far,
    /// backwards), one of 300 pointers (anchored every 64th).
    fn heap() -> Heap {
        let blocks: Vec<Block> = (0..2u64).map(|i| Block { addr: 0x10000 * (i + 1), size: 4096, site: SiteId(0), flags: 0 }).collect();
        let mut edges: Vec<(u32, u32, u64, u64)> = [0, 13, 4096, 1 << 40, 24].iter().map(|&o| (0, 1, o, 0)).collect();
        edges.extend((0..300).map(|i| (1, 0, 8 * i, 0)));
        Heap::from_parts(Header::new(Mode::Compact, Reason::Api, 4096, 1, 0), blocks, &edges, vec![], vec![])
    }

    fn dir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("heapdump-graph-cache-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A key for the graph of `h` (the dump's time and pid, as a cache's).
    fn key(h: &Heap) -> [u64; 5] {
        [1, 2, 3, h.header.time_ns, u64::from(h.header.pid)]
    }

    /// Keeps `h` at `d/g.hdgraph`, written in place; its path.
    fn keep(h: &Heap, d: &std::path::Path) -> std::path::PathBuf {
        let path = d.join("g.hdgraph");
        Writing::start(&path, false, 0, |o| super::encode(h, &key(h), o)).wait().unwrap();
        path
    }

    fn offsets(h: &Heap) -> Vec<Vec<u64>> {
        (0..h.len()).map(|b| h.edges(BlockId(b as u32)).map(|e| e.offset).collect()).collect()
    }

    /// The kept graph gives back every edge's offset, those kept aside
    /// too.
    #[test]
    fn the_kept_graph_gives_every_offset_back() {
        let (h, d) = (heap(), dir("back"));
        let path = keep(&h, &d);
        let back = super::read(&path, &key(&h), None).unwrap().expect("the graph is kept");
        assert_eq!(offsets(&back), offsets(&h));
        assert_eq!(offsets(&h)[0], [0, 13, 4096, 1 << 40, 24]);
        assert_eq!(offsets(&h)[1], (0..300).map(|i| 8 * i).collect::<Vec<u64>>());
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A graph whose offsets' bytes say an offset is kept aside where none
    /// is (or the reverse) is refused, though its checksum is right.
    #[test]
    fn offsets_that_disagree_with_what_is_kept_aside_are_refused() {
        for damage in [0usize, 1] {
            let (mut h, d) = (heap(), dir(&format!("refused{damage}")));
            let deltas = h.edge_offset.deltas.to_mut();
            match damage {
                // An anchor's byte says it is a gap.
                0 => deltas[1] = 0,
                // A gap's byte says it is anchored.
                _ => deltas[6] = Offsets::ANCHOR,
            }
            let path = keep(&h, &d);
            match super::read(&path, &key(&h), None) {
                Err(crate::cache_file::CacheProblem::Stale(what)) => assert_eq!(what, "edge offsets kept aside"),
                Err(e) => panic!("damage {damage}: {e}"),
                Ok(_) => panic!("damage {damage}: the graph was read"),
            }
            let _ = std::fs::remove_dir_all(&d);
        }
    }

    /// The way out the tests give a graph whose edges are found damaged
    /// when first read: a panic they catch, carrying the one-line error.
    fn late(why: &str) -> ! {
        std::panic::panic_any(why.to_string())
    }

    /// What reading `h`'s edges gives: every offset when they are good,
    /// else the error their late check ended with.
    fn edges_read(h: &Heap) -> Result<Vec<Vec<u64>>, String> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| offsets(h)))
            .map_err(|p| p.downcast_ref::<String>().cloned().unwrap_or_else(|| "a panic that is not the late check's".into()))
    }

    /// Read with its edges checked when first read, a good graph gives
    /// every offset back, its edges' tables left unchecked until then.
    #[test]
    fn a_good_graph_read_with_its_edges_checked_later_is_the_same() {
        let (h, d) = (heap(), dir("later-good"));
        let path = keep(&h, &d);
        let back = super::read_edges_later(&path, &key(&h), None, late).unwrap().expect("the graph is kept");
        let later = back.edges_later.as_ref().expect("the edges' check left for later");
        assert_eq!(later.ranges.len(), 4, "edge starts, targets, offsets, those kept aside");
        assert!(later.done.get().is_none(), "not checked at opening");
        assert_eq!(edges_read(&back), Ok(offsets(&h)));
        assert!(matches!(later.done.get(), Some(Ok(()))));
        assert!(path.exists());
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A bit flipped in the edges' targets: refused at opening when every
    /// table is checked then; with the edges checked when first read, the
    /// opening passes (the blocks are good) and the first read of an edge
    /// ends with a one-line error naming the file, which is removed (the
    /// next opening rebuilds it), never with an edge read from it. So too
    /// an edge past the last block under a good seal (a lie, not damage).
    #[test]
    fn damaged_edges_are_found_when_first_read_and_never_read() {
        // Two blocks, the first with 10^5 pointers: its targets take
        // several of the seal's chunks of 64 KiB, none shared with what the
        // opening reads.
        let big = || {
            let blocks: Vec<Block> =
                (0..2u64).map(|i| Block { addr: 0x100000 * (i + 1), size: 1 << 20, site: SiteId(0), flags: 0 }).collect();
            let edges: Vec<(u32, u32, u64, u64)> = (0..100_000).map(|i| (0, 1, 8 * i, 0)).collect();
            Heap::from_parts(Header::new(Mode::Compact, Reason::Api, 4096, 1, 0), blocks, &edges, vec![], vec![])
        };
        for lie in [false, true] {
            let (mut h, d) = (big(), dir(&format!("later-damaged-{lie}")));
            if lie {
                h.edge_target.to_mut()[0] = 7;
            }
            let path = keep(&h, &d);
            if !lie {
                let good = super::read_edges_later(&path, &key(&h), None, late).unwrap().unwrap();
                let targets = good.edges_later.as_ref().unwrap().ranges[1].clone();
                drop(good);
                let mut bytes = std::fs::read(&path).unwrap();
                bytes[(targets.start + targets.end) / 2] ^= 0x10;
                std::fs::write(&path, &bytes).unwrap();
            }
            let why = if lie { "edges" } else { "checksum differs" };
            match super::read(&path, &key(&h), None) {
                Err(crate::cache_file::CacheProblem::Stale(w)) => assert_eq!(w, why, "lie {lie}"),
                Err(e) => panic!("lie {lie}: {e}"),
                Ok(_) => panic!("lie {lie}: read whole, the graph was trusted"),
            }
            let back = super::read_edges_later(&path, &key(&h), None, late).unwrap().expect("opened: its blocks are good");
            assert_eq!(back.len(), 2);
            let err = edges_read(&back).expect_err("an edge was read from a damaged table");
            assert_eq!(
                err,
                format!("the kept graph {} is damaged ({why}): removed, the next opening rebuilds it", path.display()),
                "lie {lie}"
            );
            assert!(!err.contains('\n'));
            assert!(!path.exists(), "lie {lie}: the damaged file is removed");
            let _ = std::fs::remove_dir_all(&d);
        }
    }
}
