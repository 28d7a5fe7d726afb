//! What the first analysis of a dump computed, kept for the next: the leak
//! classes and the dominator tree with its retained sizes (the costly part
//! of `leaks`, `retained`, `path` and the exports). A cache file names the
//! dump it belongs to (the dump's checksum, length, time and pid) and the
//! version of the tool that wrote it, and ends with a seal (a CRC of every
//! 64 KiB of its contents: `cache_file.rs`): a stale or damaged one is
//! rebuilt, never trusted. It is written to a
//! temporary name and renamed, with mode 0600 (a dump's contents are
//! secrets: so are its classes), so that two analyses at once never see
//! half of one.
//!
//! Layout (little endian): magic `HDCACHE\x05`, the key (five u64: tool
//! version hash, checksum, file length, time, pid), the block count, the
//! leak classes (a byte per block), the leaders (u32), four counts (bytes,
//! blocks), the heuristics' counts (count, then kind byte, bytes, blocks),
//! whether dominators follow (u8), then idom (u32), retained (u64) and
//! dominated (u32) per block, and the seal of everything before it. The
//! arrays of u32 and u64 are counted and start at a multiple of 8 bytes
//! (zeros before them): a repeat analysis reads them in place from the
//! mapping ([`Slab`]).
//!
//! A CRC only says the bytes are those written: a file can be whole and
//! still not this dump's (another dump's under this one's key, a writer's
//! bug). So every index, count and total is checked once, when its part
//! is first used, against the dump and the rest of the file: the leak
//! classes' totals and leaders (`check_leaks`), the dominator tree as
//! exact sums of its children (`check_dominators`), its children lists
//! (`check_children`), the chains of the paths (`check_reach`), the
//! graph's header, trailer, blocks and pointers (`graph_cache.rs`). Each
//! is a pass over arrays the question reads anyway: at 10 M blocks (the
//! dense heap, paired runs) a repeat `leaks` takes 1.15x the CPU time of
//! the unchecked reads, `retained` and `path` 1.4x, `top` 1.0x; every
//! answer still comes in well under half a second.

use crate::cache_file::{map_checked, Out, Reader};
pub use crate::cache_file::{CacheProblem, Writing};
use crate::dominators::Dominators;
use crate::heap::{Heap, INTERIOR};
use crate::leaks::{Count, Heuristic, LeakKind, Leaks};
use crate::slab::Slab;
use std::path::{Path, PathBuf};
use std::sync::Arc;

// 4: hashbrown tables proven with their room (#39): classes cached by an
// older analysis of the same dump are not this one's. 5 (parts 2): sealed
// by a CRC per chunk, not one for the whole file (#43).
const MAGIC: &[u8; 8] = b"HDCACHE\x05";
const PART_MAGIC: &[u8; 8] = b"HDPART\x02\0";

/// What a cache holds, each part checked against the heap when first
/// taken (a question that needs neither, `top`, pays for neither check).
pub struct Cached {
    leaks: Option<Leaks>,
    /// The dominator tree's immediate dominators, retained sizes and
    /// dominated counts.
    tree: Option<(Slab<u32>, Slab<u64>, Slab<u32>)>,
}

impl Cached {
    /// The leak classes, checked against `heap` (see `check_leaks`);
    /// `None` once taken. Refused, they take the tree with them (it was
    /// computed from them).
    pub fn take_leaks(&mut self, heap: &Heap) -> Option<Result<Leaks, CacheProblem>> {
        let l = self.leaks.take()?;
        Some(match check_leaks(heap, &l) {
            Ok(()) => Ok(l),
            Err(why) => {
                self.tree = None;
                Err(why)
            }
        })
    }

    /// Whether a dominator tree is kept (and not taken yet).
    pub fn has_dominators(&self) -> bool {
        self.tree.is_some()
    }

    /// Whether it holds the leak classes (not taken yet).
    pub fn has_leaks(&self) -> bool {
        self.leaks.is_some()
    }

    /// The dominator tree, checked against `heap` and its leak classes
    /// `kinds` (see `check_dominators`); `None` once taken.
    pub fn take_dominators(&mut self, heap: &Heap, kinds: &[LeakKind]) -> Option<Result<Dominators, CacheProblem>> {
        let (idom, retained, dominated) = self.tree.take()?;
        Some(check_dominators(heap, kinds, &idom, &retained, &dominated).map(|()| Dominators::from_parts(idom, retained, dominated)))
    }
}

/// Where a dump's cache lives, and whether the last look found it.
#[derive(Clone, Debug)]
pub struct CacheFile {
    path: PathBuf,
    key: [u64; 5],
    /// The dump's own header and trailer, when known: a kept graph must
    /// repeat them.
    dump: Option<(heapdump_format::Header, heapdump_format::Trailer)>,
    /// Whether a large file may be written by a forked child (see
    /// [`Writing`]; [`CacheFile::in_background`]).
    background: bool,
    /// How the dump's bytes were found to match its checksum (see
    /// [`CacheFile::checksum_checked`]).
    checked: Checked,
}

/// How a dump's bytes were found to match its checksum before its caches
/// were looked at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checked {
    /// Not by this question (a cache named from a loaded dump, checked as
    /// it was decoded).
    Loaded,
    /// Hashed now.
    Hashed,
    /// Hashed now, and remembered for the next question on the same file
    /// unchanged (see `seen.rs`).
    Remembered,
    /// Recalled: an earlier question hashed the same file, unchanged since.
    Recalled,
}

impl std::fmt::Display for Checked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Checked::Loaded => "checked as loaded",
            Checked::Hashed => "hashed",
            Checked::Remembered => "hashed and remembered",
            Checked::Recalled => "recalled",
        })
    }
}

impl CacheFile {
    /// The cache of `heap` (a complete dump: it needs the trailer's
    /// checksum) in `dir`, for tool version `version`; `None` for a dump
    /// without a trailer.
    pub fn for_dump(dir: &Path, heap: &Heap, file_len: u64, version: &str) -> Option<CacheFile> {
        let t = heap.trailer?;
        Some(CacheFile { dump: Some((heap.header, t)), ..Self::keyed(dir, version, t.checksum, file_len, &heap.header) })
    }

    /// The cache named by a dump's checksum, length and header.
    pub(crate) fn keyed(dir: &Path, version: &str, checksum: u32, len: u64, h: &heapdump_format::Header) -> CacheFile {
        let key = [heapdump_format::fnv1a64(version.as_bytes()), u64::from(checksum), len, h.time_ns, u64::from(h.pid)];
        let name = format!("{:016x}.hdcache", heapdump_format::fnv1a64(&key.iter().flat_map(|k| k.to_le_bytes()).collect::<Vec<u8>>()));
        CacheFile { path: dir.join(name), key, dump: None, background: true, checked: Checked::Loaded }
    }

    /// The cache of the dump in `file` (complete and intact: its bytes
    /// match its checksum), before it is loaded: the same file as
    /// [`CacheFile::for_dump`] names once it is.
    pub fn for_file(dir: &Path, file: &crate::DumpFile, version: &str) -> Option<CacheFile> {
        let dump = file.dump().ok()?;
        let (checksum, checked) = checked_checksum(dir, file, version)?;
        let trailer = trailer_of(file.bytes())?;
        Some(CacheFile {
            dump: Some((*dump.header(), trailer)),
            checked,
            ..Self::keyed(dir, version, checksum, file.bytes().len() as u64, dump.header())
        })
    }

    /// Whether its large files may be written by a forked child that
    /// outlives the answer (the default: see [`Writing`]), or always in
    /// place, by the calling thread (see [`crate::Options`]).
    pub fn in_background(mut self, yes: bool) -> Self {
        self.background = yes;
        self
    }

    /// How the dump's bytes were found to match its checksum.
    pub fn checksum_checked(&self) -> Checked {
        self.checked
    }

    /// Whether its large files may be written by a forked child.
    pub fn background(&self) -> bool {
        self.background
    }

    /// Where the loaded graph is kept, beside the analysis.
    pub fn graph_path(&self) -> PathBuf {
        self.path.with_extension("hdgraph")
    }

    /// The loaded graph, when a good copy is kept (`Ok(None)`: none).
    pub fn read_graph(&self) -> Result<Option<Heap>, CacheProblem> {
        crate::graph_cache::read(&self.graph_path(), &self.key, self.dump.as_ref())
    }

    /// [`CacheFile::read_graph`], the edges' tables checked when first
    /// read (see `graph_cache::EdgesLater`), `on_damage` told if they are
    /// damaged then.
    pub(crate) fn read_graph_edges_later(&self, on_damage: fn(&str) -> !) -> Result<Option<Heap>, CacheProblem> {
        crate::graph_cache::read_edges_later(&self.graph_path(), &self.key, self.dump.as_ref(), on_damage)
    }

    /// Keeps the loaded graph (atomically, mode 0600), in the background
    /// when it can (see [`Writing`]).
    pub fn write_graph(&self, heap: &Heap) -> Writing {
        Writing::start(&self.graph_path(), self.background, heap.len() * 24, |o| crate::graph_cache::encode(heap, &self.key, o))
    }

    /// Where part `ext` is kept (the file `read_part` reads, within the
    /// crate).
    pub fn part_path(&self, ext: &str) -> PathBuf {
        self.path.with_extension(ext)
    }

    /// Part `ext` of the analysis, kept apart because it is computed
    /// apart (the dominator tree's children lists, the blocks named by
    /// vtables): its body, read back by `parse` from a [`Reader`] (its
    /// arrays in place from the mapping), when a good copy is kept. The
    /// file is the magic `HDPART\x02\0`, the part's name (counted), the
    /// key, the body and the seal of everything before it: a part of another
    /// dump or version, or a damaged one, is refused.
    pub(crate) fn read_part<T>(
        &self,
        ext: &str,
        parse: impl FnOnce(&mut Reader<'_>, &Arc<memmap2::Mmap>) -> Result<T, CacheProblem>,
    ) -> Result<Option<T>, CacheProblem> {
        let Some(sealed) = map_checked(&self.part_path(ext))? else { return Ok(None) };
        let (mut r, map) = (Reader::body(&sealed), sealed.map());
        read_part_header(&mut r, self, ext)?;
        let v = parse(&mut r, map)?;
        r.end()?;
        Ok(Some(v))
    }

    /// Keeps part `ext` (atomically, mode 0600), in the background when it
    /// can and it is about `bytes` or more: `body` writes its contents
    /// (arrays with [`Out::slab`]).
    pub(crate) fn write_part(&self, ext: &str, bytes: usize, body: impl FnOnce(&mut Out)) -> Writing {
        Writing::start(&self.part_path(ext), self.background, bytes, |o| {
            o.raw(PART_MAGIC);
            o.counted(ext.as_bytes());
            for k in self.key {
                o.u64(k);
            }
            body(o);
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the cache of `heap`: `Ok(None)` when there is none, `Err`
    /// (with why) when it is there but stale or damaged. Every index and
    /// count is checked against `heap` before it is used (when a part is
    /// taken: see [`Cached`]): a file whose CRC is right but whose
    /// contents disagree with the dump or with themselves is refused, as a
    /// damaged one is.
    pub fn read(&self, heap: &Heap) -> Result<Option<Cached>, CacheProblem> {
        let Some(sealed) = map_checked(&self.path)? else { return Ok(None) };
        let (mut r, map) = (Reader::body(&sealed), sealed.map());
        let n = heap.len();
        read_header(&mut r, self, n)?;
        let kind = r.take(n)?.iter().map(|&k| kind_of(k).ok_or(CacheProblem::Stale("bad leak class"))).collect::<Result<Vec<_>, _>>()?;
        let leader: Slab<u32> = r.slab(map)?;
        let mut counts = [Count::default(); 4];
        for c in &mut counts {
            c.bytes = r.u64()?;
            c.blocks = r.u64()?;
        }
        let nh = r.u64()?;
        if nh > 16 {
            return Err(CacheProblem::Stale("bad heuristic count"));
        }
        let mut via = Vec::new();
        for _ in 0..nh {
            let h = heuristic_of(r.take(1)?[0]).ok_or(CacheProblem::Stale("bad heuristic"))?;
            via.push((h, Count { bytes: r.u64()?, blocks: r.u64()? }));
        }
        let [definitely_lost, indirectly_lost, possibly_lost, still_reachable] = counts;
        let leaks = Leaks { kind, leader, definitely_lost, indirectly_lost, possibly_lost, still_reachable, via_heuristic: via };
        let tree = match r.take(1)?[0] {
            0 => None,
            1 => Some((r.slab(map)?, r.slab(map)?, r.slab(map)?)),
            _ => return Err(CacheProblem::Stale("bad flag")),
        };
        r.end()?;
        Ok(Some(Cached { leaks: Some(leaks), tree }))
    }

    /// Writes the cache (atomically, mode 0600), in the background when it
    /// can.
    pub fn write(&self, leaks: &Leaks, dominators: Option<&Dominators>) -> Writing {
        let bytes = leaks.kind.len() * if dominators.is_some() { 21 } else { 5 };
        Writing::start(&self.path, self.background, bytes, |o| {
            o.raw(MAGIC);
            for k in self.key {
                o.u64(k);
            }
            o.u64(leaks.kind.len() as u64);
            let classes: Vec<u8> = leaks.kind.iter().map(|&k| kind_byte(k)).collect();
            o.raw(&classes);
            o.slab(&leaks.leader);
            for c in [leaks.definitely_lost, leaks.indirectly_lost, leaks.possibly_lost, leaks.still_reachable] {
                o.u64(c.bytes);
                o.u64(c.blocks);
            }
            o.u64(leaks.via_heuristic.len() as u64);
            for (h, c) in &leaks.via_heuristic {
                o.u8(heuristic_byte(*h));
                o.u64(c.bytes);
                o.u64(c.blocks);
            }
            match dominators {
                None => o.u8(0),
                Some(d) => {
                    o.u8(1);
                    let (idom, retained, dominated) = d.parts();
                    o.slab(idom);
                    o.slab(retained);
                    o.slab(dominated);
                }
            }
        })
    }
}

/// The analysis file's magic, `cache`'s key and the block count, `n`.
pub(crate) fn read_header(r: &mut Reader<'_>, cache: &CacheFile, n: usize) -> Result<(), CacheProblem> {
    if r.take(8)? != MAGIC {
        return Err(CacheProblem::Stale("not a heapdump cache"));
    }
    r.key(&cache.key)?;
    if usize::try_from(r.u64()?).ok() != Some(n) {
        return Err(CacheProblem::Stale("block count differs"));
    }
    Ok(())
}

/// Whether `path` is one of the files the caches' directory counts and
/// evicts to stay within its bound (at most 2 GiB, 64 files), or the one
/// that bounds itself (the dumps already checked: `seen.rs`): every file
/// the caches write is.
pub fn bounded(path: &Path) -> bool {
    path.extension().is_some_and(|x| crate::cache_file::EXTENSIONS.iter().chain([&crate::seen::EXT]).any(|k| x == *k))
}

/// A part's magic, its name, `ext`, and `cache`'s key.
pub(crate) fn read_part_header(r: &mut Reader<'_>, cache: &CacheFile, ext: &str) -> Result<(), CacheProblem> {
    if r.take(8)? != PART_MAGIC || r.bytes()? != ext.as_bytes() {
        return Err(CacheProblem::Stale("not this part of a heapdump cache"));
    }
    r.key(&cache.key)
}

/// The checksum of the complete dump in `file`, its bytes matching it:
/// as an earlier question found it on the same file unchanged (see
/// `seen.rs`: at 100 M blocks, 1.7 GB not read again), else hashed now,
/// and then remembered in `dir`.
fn checked_checksum(dir: &Path, file: &crate::DumpFile, version: &str) -> Option<(u32, Checked)> {
    let bytes = file.bytes();
    let identity = file.identity();
    if let Some(c) = identity.and_then(|(id, _)| crate::seen::recall(dir, &id, version)) {
        if claimed_checksum(bytes) == Some(c) {
            return Some((c, Checked::Recalled));
        }
    }
    let c = checksum_if_intact(bytes)?;
    let kept = identity.is_some_and(|(id, taken)| crate::seen::remember(dir, &id, taken, version, c));
    Some((c, if kept { Checked::Remembered } else { Checked::Hashed }))
}

/// The checksum a complete dump, `bytes`, claims in its trailer.
fn claimed_checksum(bytes: &[u8]) -> Option<u32> {
    if !heapdump_format::ends_with_trailer(bytes) {
        return None;
    }
    let at = bytes.len() - heapdump_format::raw::END_SIZE + 64;
    Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

/// The checksum of a complete dump, `bytes`, when its bytes match it (as
/// `heapdump_format::Dump::checksum_if_intact` says), its halves hashed
/// on two threads and combined: at 100 M blocks the dump is 1.7 GB, a
/// fifth of a second of one core before a cache is looked at.
fn checksum_if_intact(bytes: &[u8]) -> Option<u32> {
    let claimed = claimed_checksum(bytes)?;
    let at = bytes.len() - heapdump_format::raw::END_SIZE + 64;
    let (a, b) = bytes[..at].split_at(at / 2);
    let hash = |part: &[u8]| {
        let mut h = crc32fast::Hasher::new();
        h.update(part);
        h
    };
    let h = if at < 16 << 20 {
        hash(&bytes[..at])
    } else {
        std::thread::scope(|s| {
            let second = s.spawn(|| hash(b));
            let mut h = hash(a);
            h.combine(&second.join().unwrap_or_else(|_| hash(b)));
            h
        })
    };
    (h.finalize() == claimed).then_some(claimed)
}

/// The trailer of a complete dump, `bytes` (its last record: see
/// FORMAT.md's END).
pub(crate) fn trailer_of(bytes: &[u8]) -> Option<heapdump_format::Trailer> {
    let p = bytes.get(bytes.len().checked_sub(heapdump_format::raw::END_SIZE)?..)?;
    let u64_at = |at: usize| p.get(at..at + 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
    let u32_at = |at: usize| p.get(at..at + 4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes);
    Some(heapdump_format::Trailer {
        records: u64_at(0)?,
        allocations: u64_at(8)?,
        alloc_bytes: u64_at(16)?,
        sites: u64_at(24)?,
        pointers: u64_at(32)?,
        threads: u32_at(40)?,
        statics: u32_at(44)?,
        modules: u32_at(48)?,
        pause_ns: u64_at(56)?,
        checksum: u32_at(64)?,
    })
}

/// The leak classes of a cache, checked against `heap` and themselves: a
/// class and a leader for every block; a leader exactly for the lost
/// blocks, always a definitely lost block (itself, for one); the totals
/// those of the classes and the blocks' sizes; the heuristics' totals
/// within the still reachable. What no check short of the analysis itself
/// can tell is a file consistent throughout and with the dump yet not
/// what the analysis says (a block's class and the totals moved
/// together): the key and the CRC stand for that. One pass over the
/// blocks.
pub(crate) fn check_leaks(heap: &Heap, l: &Leaks) -> Result<(), CacheProblem> {
    let n = heap.len();
    let (kinds, leaders): (&[LeakKind], &[u32]) = (&l.kind, &l.leader);
    if kinds.len() != n || leaders.len() != n {
        return Err(CacheProblem::Stale("leak classes of another heap"));
    }
    // By `kind_byte`: still reachable, possibly, definitely, indirectly lost.
    let mut counts = [Count::default(); 4];
    for (b, size) in heap.blocks.sizes().enumerate() {
        let (k, led) = (kinds[b], leaders[b]);
        let c = &mut counts[usize::from(kind_byte(k))];
        c.bytes = c.bytes.wrapping_add(size);
        c.blocks += 1;
        let lost = matches!(k, LeakKind::DefinitelyLost | LeakKind::IndirectlyLost);
        if lost != (led != crate::leaks::NO_LEADER) {
            return Err(CacheProblem::Stale("bad leader"));
        }
        if lost {
            let head = !led as usize;
            if kinds.get(head) != Some(&LeakKind::DefinitelyLost) || (k == LeakKind::DefinitelyLost && head != b) {
                return Err(CacheProblem::Stale("bad leader"));
            }
        }
    }
    if [counts[2], counts[3], counts[1], counts[0]] != [l.definitely_lost, l.indirectly_lost, l.possibly_lost, l.still_reachable] {
        return Err(CacheProblem::Stale("leak totals differ from the classes"));
    }
    let mut via = Count::default();
    for (i, (h, c)) in l.via_heuristic.iter().enumerate() {
        via.bytes = via.bytes.wrapping_add(c.bytes);
        via.blocks = via.blocks.saturating_add(c.blocks);
        if c.blocks == 0 || l.via_heuristic.get(i + 1).is_some_and(|next| next.0 <= *h) {
            return Err(CacheProblem::Stale("bad heuristic"));
        }
    }
    if via.blocks > l.still_reachable.blocks || via.bytes > l.still_reachable.bytes {
        return Err(CacheProblem::Stale("bad heuristic"));
    }
    Ok(())
}

/// The dominator tree of a cache, checked against `heap`, its leak
/// classes `kinds` and itself: every immediate dominator a block or the
/// virtual root (which alone heads a lost structure); each block's
/// dominated count one more than its children's together, its retained
/// size its own plus theirs. The counts being exact sums, a block counts
/// more than each of its children: the tree has no cycle, and the checks
/// hold exactly for the tree of these sums. A pass over the tree, one over
/// the blocks, and 12 bytes a block for the children's sums.
pub(crate) fn check_dominators(
    heap: &Heap,
    kinds: &[LeakKind],
    idom: &[u32],
    retained: &[u64],
    dominated: &[u32],
) -> Result<(), CacheProblem> {
    let n = heap.len();
    if [kinds.len(), idom.len(), retained.len(), dominated.len()] != [n; 4] {
        return Err(CacheProblem::Stale("dominators of another heap"));
    }
    let mut below_retained: Vec<u64> = bytemuck::allocation::zeroed_vec(n);
    let mut below_count: Vec<u32> = bytemuck::allocation::zeroed_vec(n);
    for ((&d, &r), &c) in idom.iter().zip(retained).zip(dominated) {
        if d == u32::MAX {
            continue;
        }
        let d = d as usize;
        if d >= n {
            return Err(CacheProblem::Stale("bad dominator"));
        }
        below_retained[d] = below_retained[d].wrapping_add(r);
        // Saturated only by a lying file: no true count comes near.
        below_count[d] = below_count[d].saturating_add(c);
    }
    for (b, size) in heap.blocks.sizes().enumerate() {
        if kinds[b] == LeakKind::DefinitelyLost && idom[b] != u32::MAX {
            return Err(CacheProblem::Stale("bad dominator"));
        }
        let count = dominated[b] as usize;
        if count == 0 || count > n || below_count[b] != dominated[b] - 1 {
            return Err(CacheProblem::Stale("bad dominated count"));
        }
        if retained[b] != size.wrapping_add(below_retained[b]) {
            return Err(CacheProblem::Stale("bad retained size"));
        }
    }
    Ok(())
}

/// The dominator tree's children lists of a cache (those of block `p`,
/// `list[start[p]..start[p + 1]]`, the virtual root's at `n`), checked
/// against the tree `d`: each block listed under its immediate dominator,
/// each list largest retained size first, then by block. The lists then
/// are the tree's, exactly: each holds distinct blocks (strictly ordered),
/// no block is in two (one dominator each), and they hold `n` in all.
pub(crate) fn check_children(d: &Dominators, start: &[u32], list: &[u32]) -> Result<(), CacheProblem> {
    let (idom, retained, _) = d.parts();
    let n = idom.len();
    let bad = CacheProblem::Stale("dominator children of another heap");
    if start.len() != n + 2 || list.len() != n || start[0] != 0 || start[n + 1] as usize != n {
        return Err(bad);
    }
    for p in 0..=n {
        let (s, e) = (start[p] as usize, start[p + 1] as usize);
        let Some(kids) = list.get(s..e) else { return Err(bad) };
        let parent = if p == n { u32::MAX } else { p as u32 };
        if kids.iter().any(|&c| idom.get(c as usize) != Some(&parent)) {
            return Err(bad);
        }
        // In range (just checked): largest first, then by block.
        if kids.windows(2).any(|w| (std::cmp::Reverse(retained[w[0] as usize]), w[0]) >= (std::cmp::Reverse(retained[w[1] as usize]), w[1]))
        {
            return Err(bad);
        }
    }
    Ok(())
}

/// The breadth-first tree of what the roots reach (`pred`, `via`: see
/// [`crate::paths::Reach`]), checked against `heap` and its leak classes
/// `kinds`: the blocks it reaches are those the classes say the roots
/// reach (still reachable or possibly lost); each one's pointer is one of
/// its predecessor's, to it (or the first root pointing at it, for a
/// root's target, which every root's is); an unreached block has none;
/// and every chain ends at a root (no cycle). Every chain it gives is
/// then a chain of pointers from a root to a block the roots reach. Not
/// checked: that each is a shortest one, and the first of several
/// pointers from one block to the next, which take a look at every
/// pointer of the heap (a search as long as the one the file saves: with
/// it a repeat `path` took 5 times as long at 10 M blocks). A pass over
/// the blocks, a walk up each chain once, and a bit a block.
pub(crate) fn check_reach(heap: &Heap, kinds: &[LeakKind], pred: &[u32], via: &[u32]) -> Result<(), CacheProblem> {
    use crate::paths::{FROM_ROOT, UNSEEN};
    let n = heap.len();
    let bad = || CacheProblem::Stale("paths of another heap");
    if pred.len() != n || via.len() != n || kinds.len() != n {
        return Err(bad());
    }
    // The root each root-reached block is reached from: its first start
    // pointer, else its first interior pointer (see `Reach::of`).
    let mut first_root: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
    for interior in [false, true] {
        for (i, r) in heap.roots.iter().enumerate().filter(|(_, r)| r.interior == interior) {
            first_root.entry(r.target.0).or_insert(i as u32);
        }
    }
    if first_root.iter().any(|(&t, &i)| pred.get(t as usize) != Some(&FROM_ROOT) || via[t as usize] != i) {
        return Err(bad());
    }
    let (starts, targets) = heap.raw_edges();
    for (b, ((&p, &v), &k)) in pred.iter().zip(via).zip(kinds).enumerate() {
        let reached = matches!(k, LeakKind::StillReachable | LeakKind::PossiblyLost);
        if reached != (p != UNSEEN) {
            return Err(bad());
        }
        match p {
            // No pointer taken (as the search leaves it).
            UNSEEN => {
                if v != 0 {
                    return Err(bad());
                }
            }
            FROM_ROOT => {
                if first_root.get(&(b as u32)) != Some(&v) {
                    return Err(bad());
                }
            }
            p => {
                let k = v as usize;
                let (Some(&s), Some(&e)) = (starts.get(p as usize), starts.get(p as usize + 1)) else { return Err(bad()) };
                if !(s as usize..e as usize).contains(&k) || targets.get(k).map(|t| t & !INTERIOR) != Some(b as u32) {
                    return Err(bad());
                }
            }
        }
    }
    // Each chain walked up to a block known to lead to a root (its bit
    // set), then marked: a chain longer than the blocks loops.
    let mut rooted = vec![0u64; n.div_ceil(64)];
    let is_rooted = |r: &[u64], b: usize| r[b / 64] & (1 << (b % 64)) != 0;
    for b in 0..n {
        if pred[b] == UNSEEN || is_rooted(&rooted, b) {
            continue;
        }
        let (mut cur, mut len) = (b, 0usize);
        while pred[cur] != FROM_ROOT && !is_rooted(&rooted, cur) {
            len += 1;
            if len > n {
                return Err(bad());
            }
            // Reached, so its predecessor is a block (checked above).
            cur = pred[cur] as usize;
        }
        let mut cur = b;
        for _ in 0..=len {
            rooted[cur / 64] |= 1 << (cur % 64);
            if pred[cur] == FROM_ROOT {
                break;
            }
            cur = pred[cur] as usize;
        }
    }
    Ok(())
}

pub(crate) fn kind_byte(k: LeakKind) -> u8 {
    match k {
        LeakKind::StillReachable => 0,
        LeakKind::PossiblyLost => 1,
        LeakKind::DefinitelyLost => 2,
        LeakKind::IndirectlyLost => 3,
    }
}

pub(crate) fn kind_of(b: u8) -> Option<LeakKind> {
    [LeakKind::StillReachable, LeakKind::PossiblyLost, LeakKind::DefinitelyLost, LeakKind::IndirectlyLost].get(usize::from(b)).copied()
}

pub(crate) fn heuristic_byte(h: Heuristic) -> u8 {
    match h {
        Heuristic::Stdstring => 0,
        Heuristic::Length64 => 1,
        Heuristic::Newarray => 2,
        Heuristic::Hashbrown => 3,
    }
}

pub(crate) fn heuristic_of(b: u8) -> Option<Heuristic> {
    [Heuristic::Stdstring, Heuristic::Length64, Heuristic::Newarray, Heuristic::Hashbrown].get(usize::from(b)).copied()
}
