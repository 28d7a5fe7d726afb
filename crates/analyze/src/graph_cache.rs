//! The loaded graph of a dump, kept for the next analysis of it: a repeat
//! question then reads arrays instead of walking and decoding every
//! record. Written beside the analysis cache (`cache.rs`), with the same
//! key and the same care: a temporary name renamed into place, mode 0600,
//! a seal at the end (`cache_file.rs`); read back with every chunk and every
//! index checked, so that a damaged
//! file is refused (and rebuilt) rather than trusted.

use crate::cache_file::{CacheProblem, Out, Reader};
use crate::heap::{Blocks, Heap, ModuleInfo, Offsets, Packed, Root, RootKind, RootRegion, SiteId, ThreadInfo, WideOffset, INTERIOR};
use crate::slab::Slab;
use heapdump_format::{Backtrace, Header, Mode, Reason, Segment, SignalInfo, Trailer};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

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

/// The graph back from the mapped file `map` (its CRC checked by
/// `map_checked`), every index checked; its large arrays are read in
/// place. It must be the dump's that `key` names: its header and trailer
/// those of the key (and `dump`'s own, when given), its blocks as many as
/// the trailer counts, their sizes adding up to its total, in address
/// order and apart, as a load leaves them.
fn decode(sealed: &crate::cache_file::Sealed, key: &[u64; 5], dump: Option<&(Header, Trailer)>) -> Result<Heap, CacheProblem> {
    let (mut r, map) = (Reader::body(sealed), sealed.map());
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
    let packed: Slab<Packed> = r.slab(map)?;
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
    heap.edge_start = r.slab(map)?;
    heap.edge_target = r.slab(map)?;
    let edges = heap.edge_target.len();
    // The blocks on a second thread, the edges on this one (each a pass
    // over hundreds of megabytes at 100 M blocks).
    let (blocks_apart, (targets_in_range, interior)) = std::thread::scope(|s| {
        let other = s.spawn(|| blocks_apart(&heap.blocks));
        let mine = targets(&heap.edge_target, blocks);
        (other.join().unwrap_or(None), mine)
    });
    let total = blocks_apart.ok_or(bad("blocks out of order or overlapping"))?;
    if heap.edge_start.len() != blocks + 1
        || heap.edge_start.windows(2).any(|w| w[0] > w[1])
        || heap.edge_start.first().is_some_and(|&s| s != 0)
        || heap.edge_start.last().is_some_and(|&e| e as usize != edges)
        || !targets_in_range
    {
        return Err(bad("edges"));
    }
    let deltas: Slab<u8> = r.slab(map)?;
    if deltas.len() != edges {
        return Err(bad("edge offsets"));
    }
    // Each anchored edge's byte says so, and no other's.
    let anchors: Slab<WideOffset> = r.slab(map)?;
    if anchors.windows(2).any(|w| w[0].edge >= w[1].edge)
        || anchors.iter().any(|w| deltas.get(w.edge as usize) != Some(&Offsets::ANCHOR))
        || deltas.iter().filter(|&&d| d == Offsets::ANCHOR).count() != anchors.len()
    {
        return Err(bad("edge offsets kept aside"));
    }
    heap.edge_offset = Offsets { deltas, anchors };
    // Where each interior edge points into its target: inside it, past
    // its start (as the load finds it), and for those edges alone.
    let n = r.len(12)?;
    for _ in 0..n {
        let k = r.u32()?;
        let into = r.u64()?;
        let Some(&t) = heap.edge_target.get(k as usize).filter(|&&t| t & INTERIOR != 0) else { return Err(bad("interior edge")) };
        if into == 0 || into >= heap.blocks.size((t & !INTERIOR) as usize) || heap.interior_into.insert(k, into).is_some() {
            return Err(bad("interior edge"));
        }
    }
    if heap.interior_into.len() != interior {
        return Err(bad("interior edge"));
    }
    heap.block_of = match r.u8()? {
        0 => None,
        1 => {
            let m: Slab<u32> = r.slab(map)?;
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
            Some(m)
        }
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
        1 => Some(r.slab::<[u64; 2]>(map)?.to_vec()),
        _ => return Err(bad("flag")),
    };
    r.end()?;
    Ok(heap)
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
        Some(sealed) => decode(&sealed, key, dump).map(Some),
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
}
