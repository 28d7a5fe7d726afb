//! glibc's malloc heap, walked from outside the process: its arenas, the
//! chunks of each arena's heaps in address order, the chunks it mapped
//! for large requests, and which chunks are free though their neighbours
//! say "in use" (those held in the per-thread caches and the fastbins).
//!
//! Everything read from the target is data, never trusted: every size and
//! pointer is checked against the mappings before it is followed, and a
//! heap that does not add up is an error naming the address, not a guess.
//! The layout is glibc's on x86-64 from 2.30 (the per-thread cache's
//! 16-bit counts) to 2.41; the version is read from the C library the
//! process maps, and any other is refused.

use crate::error::{Error, Result};
use crate::memory::{Map, Memory, Region};
use std::collections::HashSet;

/// A live allocation: the address the program was given and the size it
/// may use (glibc's usable size: the size it asked for is not recorded).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Chunk {
    /// `chunk + 16`.
    pub mem: u64,
    /// `malloc_usable_size`.
    pub usable: u64,
}

/// What the walk found.
pub struct GlibcHeap {
    /// Live allocations, in address order.
    pub live: Vec<Chunk>,
    /// The arenas (the main one first).
    pub arenas: usize,
    /// The memory of the arenas' heaps (the brk heap, each other heap):
    /// never roots.
    pub heap_ranges: Vec<(u64, u64)>,
    /// The chunks glibc mapped for large requests, header to end.
    pub mmapped: Vec<(u64, u64)>,
    /// The heaps' bytes, read once, for the allocations' contents.
    pub regions: Vec<Region>,
    /// Freed chunks held in the per-thread caches and the fastbins.
    pub cached_free: u64,
    /// glibc's version.
    pub version: (u32, u32),
    /// What the walk noticed and the user should know.
    pub warnings: Vec<String>,
}

/// `sizeof (struct malloc_state)` and the offsets of its fields used here.
const ARENA_SIZE: u64 = 2200;
const FASTBINS: u64 = 16;
const NFASTBINS: u64 = 10;
const TOP: u64 = 96;
const BINS: u64 = 112;
const NEXT: u64 = 2160;
/// Non-main heaps are aligned to (and at most) this size.
const HEAP_MAX: u64 = 64 << 20;
/// The per-thread cache's chunk: 64 u16 counts and 64 pointers, plus
/// the chunk header.
const TCACHE_CHUNK: u64 = 0x290;
const TCACHE_BINS: u64 = 64;
/// Mappings larger than this are not searched page by page for mapped
/// chunks (address-space reservations, such as a sanitizer's shadow).
const MAX_SEARCHED: u64 = 64 << 30;

/// The C library the process maps, and the allocator in it.
fn libc_maps(mem: &dyn Memory) -> Result<(String, Vec<Map>)> {
    let name = |m: &Map| m.file().and_then(|p| p.rsplit('/').next()).unwrap_or("").to_string();
    for m in mem.maps() {
        let n = name(m);
        for other in ["jemalloc", "tcmalloc", "mimalloc", "hoard", "snmalloc"] {
            if n.contains(other) {
                return Err(Error::Refused(format!(
                    "the process allocates with {n}, not glibc's malloc: attach and core read glibc's heap only"
                )));
            }
        }
    }
    let libc: Vec<Map> = mem.maps().iter().filter(|m| name(m).starts_with("libc.so") || name(m).starts_with("libc-2.")).cloned().collect();
    let Some(path) = libc.first().and_then(|m| m.path.clone()) else {
        return Err(Error::Refused(
            "no glibc (libc.so.6) is mapped in the process: a static binary or another C library (musl?): attach and core read glibc's heap only"
                .into(),
        ));
    };
    Ok((path, libc))
}

/// glibc's version, from the "release version X.Y" of its banner.
fn version_of(path: &str) -> Result<(u32, u32)> {
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() < 1 << 30) {
        return Err(Error::Refused(format!("{path} is not the C library's file: cannot learn glibc's version")));
    }
    let data = std::fs::read(path)
        .map_err(|e| Error::Refused(format!("cannot read {path} to learn glibc's version ({e}): its heap layout depends on it")))?;
    let needle = b"release version ";
    let at = data
        .windows(needle.len())
        .position(|w| w == needle)
        .ok_or_else(|| Error::Refused(format!("{path} does not say which glibc it is")))?;
    let rest = &data[at + needle.len()..];
    let text: String = rest.iter().take(16).take_while(|c| c.is_ascii_digit() || **c == b'.').map(|&c| c as char).collect();
    let mut it = text.split('.').map(|x| x.parse::<u32>());
    match (it.next(), it.next()) {
        (Some(Ok(a)), Some(Ok(b))) => Ok((a, b)),
        _ => Err(Error::Refused(format!("{path}: cannot read glibc's version from {text:?}"))),
    }
}

/// Finds `main_arena` in libc's data: the one place where most of 127
/// bin headers point at themselves (empty bins), with a `next` pointer.
fn find_main_arena(mem: &dyn Memory, libc: &[Map]) -> Result<u64> {
    for m in libc.iter().filter(|m| m.write && m.read) {
        let Ok(r) = Region::read(mem, m.start, m.end) else { continue };
        let mut a = m.start;
        while a + ARENA_SIZE <= m.end {
            if let Some(next) = r.u64(a + NEXT) {
                if next != 0 && next % 8 == 0 {
                    let mut empty = 0;
                    let mut ok = true;
                    for i in 0..127u64 {
                        let (Some(fd), Some(bk)) = (r.u64(a + BINS + 16 * i), r.u64(a + BINS + 16 * i + 8)) else {
                            ok = false;
                            break;
                        };
                        let own = a + BINS + 16 * i - 16;
                        if fd == own && bk == own {
                            empty += 1;
                        } else if fd == 0 || bk == 0 || fd % 16 != 0 || bk % 16 != 0 {
                            ok = false;
                            break;
                        }
                    }
                    if ok && empty >= 64 {
                        return Ok(a);
                    }
                }
            }
            a += 8;
        }
    }
    Err(Error::Heap(
        "glibc's main arena was not found in the C library's data: not glibc's malloc, or a layout this version does not know".into(),
    ))
}

/// The chunks walked, by address (a hash map of ten million chunks cost
/// seconds of a capture's pause).
struct Index<'a>(&'a [Seen]);

impl Index<'_> {
    /// The position of the chunk at `c`.
    fn get(&self, c: u64) -> Option<usize> {
        self.0.binary_search_by_key(&c, |s| s.chunk).ok()
    }
}

/// glibc's version and its arenas (the main one first), checked.
fn arenas(mem: &dyn Memory) -> Result<((u32, u32), Vec<u64>)> {
    let (path, libc) = libc_maps(mem)?;
    let version = version_of(&path)?;
    if !((2, 30)..=(2, 41)).contains(&version) {
        return Err(Error::Refused(format!(
            "glibc {}.{}: a heap layout this version of heapdump does not know (it reads 2.30 to 2.41)",
            version.0, version.1
        )));
    }
    let main = find_main_arena(mem, &libc)?;
    let mut arenas = vec![main];
    let mut a = mem.u64(main + NEXT)?;
    while a != main {
        if arenas.len() > 4096 || a % 16 != 0 || mem.map_of(a).is_none() {
            return Err(Error::Heap(format!("glibc's ring of arenas is broken at {a:#x}")));
        }
        arenas.push(a);
        a = mem.u64(a + NEXT)?;
    }
    Ok((version, arenas))
}

/// How many arenas are locked: a thread stopped inside malloc or free,
/// whose lists may be half updated.
pub fn locked_arenas(mem: &dyn Memory) -> Result<usize> {
    let (_, arenas) = arenas(mem)?;
    let mut n = 0;
    for a in arenas {
        if mem.u64(a)? & 0xffff_ffff != 0 {
            n += 1;
        }
    }
    Ok(n)
}

/// One chunk as the walk sees it.
#[derive(Clone, Copy)]
struct Seen {
    chunk: u64,
    size: u64,
    in_use: bool,
    /// The first chunk of its arena's heap.
    first: bool,
}

/// Walks `[start, end)` of `r` chunk by chunk; stops at `top` when given
/// (which must be met exactly) or at the heap's end or a fencepost.
fn walk(r: &Region, start: u64, end: u64, top: Option<u64>, out: &mut Vec<Seen>) -> Result<()> {
    let mut c = start;
    let mut first = true;
    loop {
        if Some(c) == top {
            return Ok(());
        }
        if c + 16 > end {
            return match top {
                Some(t) => Err(Error::Heap(format!("the heap's chunks run past its top chunk {t:#x} at {c:#x}: a damaged heap"))),
                None => Ok(()),
            };
        }
        let s = r.u64(c + 8).ok_or_else(|| Error::Heap(format!("chunk {c:#x} lies outside its heap")))?;
        let size = s & !7;
        if size == 16 && top.is_none() {
            return Ok(()); // the fencepost closing an older heap
        }
        if size < 32 || size % 16 != 0 || c + size > end + if top.is_some() { 16 } else { 0 } {
            return Err(Error::Heap(format!("chunk {c:#x} has size {s:#x}: a damaged heap, or a layout this version does not know")));
        }
        let next = c + size;
        let in_use = match r.u64(next + 8) {
            Some(n) => n & 1 == 1,
            None if top.is_none() => true,
            None => return Err(Error::Heap(format!("chunk {c:#x} runs past the heap"))),
        };
        out.push(Seen { chunk: c, size, in_use, first });
        first = false;
        c = next;
    }
}

/// The next pointer of a free list, stored at `field` (safe-linking since
/// glibc 2.32).
fn reveal(version: (u32, u32), field: u64, stored: u64) -> u64 {
    if version >= (2, 32) {
        (field >> 12) ^ stored
    } else {
        stored
    }
}

/// Walks glibc's heap in `mem`.
pub fn walk_heap(mem: &dyn Memory) -> Result<GlibcHeap> {
    let (version, arenas) = arenas(mem)?;
    let heap_info = if version >= (2, 35) { 48 } else { 32 };
    let mut h = GlibcHeap {
        live: Vec::new(),
        arenas: arenas.len(),
        heap_ranges: Vec::new(),
        mmapped: Vec::new(),
        regions: Vec::new(),
        cached_free: 0,
        version,
        warnings: Vec::new(),
    };
    let mut seen: Vec<Seen> = Vec::new();
    for (k, &ar) in arenas.iter().enumerate() {
        if mem.u64(ar)? & 0xffff_ffff != 0 {
            h.warnings.push(format!("arena {ar:#x} was locked (a thread was inside malloc): its lists may be mid-update"));
        }
        let top = mem.u64(ar + TOP)?;
        if k == 0 {
            // The brk heap: from its start to the top chunk, unless
            // nothing was ever allocated there (top is the unsorted bin).
            if top == ar + TOP {
                continue;
            }
            // The [heap] mapping (a core names no mappings but files: the
            // anonymous segment holding top).
            let Some(brk) = mem.map_of(top).filter(|m| m.write && (m.anonymous() || m.path.as_deref() == Some("[heap]"))).cloned() else {
                return Err(Error::Heap(format!(
                    "the main arena's top chunk {top:#x} is not in the brk heap (a heap grown by mmap after brk failed is not supported)"
                )));
            };
            let r = Region::read(mem, brk.start, brk.end)?;
            walk(&r, brk.start, brk.end, Some(top), &mut seen)?;
            h.heap_ranges.push((brk.start, brk.end));
            h.regions.push(r);
            continue;
        }
        // Another arena: its heaps, newest (holding top) first, through
        // each heap_info's `prev`.
        let mut hp = top & !(HEAP_MAX - 1);
        let mut newest = true;
        for _ in 0..1024 {
            let owner = mem.u64(hp)?;
            let prev = mem.u64(hp + 8)?;
            let size = mem.u64(hp + 16)?;
            if owner != ar || size > HEAP_MAX || size < heap_info {
                return Err(Error::Heap(format!("heap {hp:#x} does not belong to arena {ar:#x}: a damaged heap")));
            }
            let start = if ar >= hp && ar < hp + size {
                let p = ar + ARENA_SIZE;
                p + (16 - (p + 16) % 16) % 16
            } else {
                hp + heap_info
            };
            let end = hp + size;
            let r = Region::read(mem, hp, end)?;
            walk(&r, start, end, newest.then_some(top), &mut seen)?;
            h.heap_ranges.push((hp, end.next_multiple_of(4096)));
            h.regions.push(r);
            newest = false;
            if prev == 0 {
                break;
            }
            hp = prev;
        }
    }
    // Free chunks that look in use: the fastbins' and the caches'.
    seen.sort_unstable_by_key(|s| s.chunk);
    let index = Index(&seen);
    let mut free: HashSet<u64> = HashSet::new();
    for &ar in &arenas {
        for i in 0..NFASTBINS {
            let mut p = mem.u64(ar + FASTBINS + 8 * i)?;
            let mut n = 0;
            while p != 0 {
                if index.get(p).is_none() || n > seen.len() {
                    h.warnings.push(format!("fastbin {i} of arena {ar:#x} leads to {p:#x}, not a chunk: the rest of it is not read"));
                    break;
                }
                free.insert(p);
                p = reveal(version, p + 16, mem.u64(p + 16)?);
                n += 1;
            }
        }
    }
    let mut caches: HashSet<u64> = HashSet::new();
    for s in seen.iter().filter(|s| s.in_use && s.size == TCACHE_CHUNK) {
        if let Some(entries) = tcache_entries(mem, version, s, &seen, &index) {
            caches.insert(s.chunk);
            free.extend(entries);
        }
    }
    h.cached_free = free.len() as u64;
    for s in &seen {
        if s.in_use && !free.contains(&s.chunk) && !caches.contains(&s.chunk) {
            h.live.push(Chunk { mem: s.chunk + 16, usable: s.size - 8 });
        }
    }
    mapped_chunks(mem, &mut h)?;
    h.live.sort_unstable();
    Ok(h)
}

/// When the in-use chunk `s` is a thread's cache (`tcache_perthread_struct`):
/// the chunks its lists hold. Every list must lead through chunks of its
/// size class, as many as its count, and end; an empty cache counts only
/// as the first chunk of a heap (where a thread's first allocation puts
/// it), so that a program's own zeroed block of that size stays live.
fn tcache_entries(mem: &dyn Memory, version: (u32, u32), s: &Seen, seen: &[Seen], index: &Index<'_>) -> Option<Vec<u64>> {
    let body = mem.bytes(s.chunk + 16, 2 * TCACHE_BINS + 8 * TCACHE_BINS).ok()?;
    let count = |i: usize| u16::from_le_bytes([body[2 * i], body[2 * i + 1]]) as usize;
    let entry = |i: usize| u64::from_le_bytes(body[128 + 8 * i..136 + 8 * i].try_into().unwrap_or([0; 8]));
    let mut out = Vec::new();
    for i in 0..TCACHE_BINS as usize {
        let (n, mut e) = (count(i), entry(i));
        if (n == 0) != (e == 0) {
            return None;
        }
        for _ in 0..n {
            let c = e.checked_sub(16)?;
            let k = index.get(c)?;
            if seen[k].size != 32 + 16 * i as u64 || !seen[k].in_use {
                return None;
            }
            out.push(c);
            e = reveal(version, e, mem.u64(e).ok()?);
        }
        if e != 0 {
            return None;
        }
    }
    (!out.is_empty() || s.first).then_some(out)
}

/// The chunks glibc mapped by themselves: at a page start of an anonymous
/// writable mapping, a header with no previous size and the "mapped" bit,
/// a size of whole pages that fits the mapping (the kernel merges
/// neighbouring mappings, so several may share one).
fn mapped_chunks(mem: &dyn Memory, h: &mut GlibcHeap) -> Result<()> {
    let maps: Vec<(u64, u64)> = mem
        .maps()
        .iter()
        .filter(|m| m.anonymous() && m.read && m.write && m.end - m.start <= MAX_SEARCHED)
        .map(|m| (m.start, m.end))
        .collect();
    for (start, end) in maps {
        // Headers are looked for on the pages the process touched; a chunk
        // may reach past them (a large block written only at its start),
        // up to the mapping's end.
        let mut p = start;
        for (a, b) in mem.present(start, end) {
            p = p.max(a.next_multiple_of(4096));
            while p + 4096 <= b {
                if let Some(&(_, e)) = h.heap_ranges.iter().find(|r| r.0 <= p && p < r.1) {
                    p = e.next_multiple_of(4096);
                } else if let Some(size) = mapped_chunk_at(mem, h, p, end)? {
                    p += size;
                } else {
                    p += 4096;
                }
            }
        }
    }
    Ok(())
}

/// The mapped chunk whose header is at `p`, if there is one ending by
/// `end`: recorded, and its size returned.
fn mapped_chunk_at(mem: &dyn Memory, h: &mut GlibcHeap, p: u64, end: u64) -> Result<Option<u64>> {
    let mut hdr = [0u8; 16];
    if mem.read(p, &mut hdr).is_err() {
        return Ok(None);
    }
    let prev = u64::from_le_bytes(hdr[..8].try_into().unwrap_or([0; 8]));
    let s = u64::from_le_bytes(hdr[8..].try_into().unwrap_or([0; 8]));
    let size = s & !7;
    if prev != 0 || s & 7 != 2 || size < 4096 || size % 4096 != 0 || p + size > end {
        return Ok(None);
    }
    h.live.push(Chunk { mem: p + 16, usable: size - 16 });
    h.mmapped.push((p, p + size));
    h.regions.push(Region::read(mem, p, p + size)?);
    Ok(Some(size))
}
