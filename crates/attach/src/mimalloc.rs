//! mimalloc's heap (2.0.x, as Debian's `libmimalloc2.0` builds it: no
//! encoded free lists, no padding), walked from outside the process: its
//! segments, each segment's pages (spans of 64 KiB slices), and each
//! page's blocks less its free lists (`free`, `local_free`, the other
//! threads' `xthread_free`, and the owning heap's `thread_delayed_free`).
//!
//! Debian's library exports no data: its version comes from the code of
//! `mi_version` (a `mov eax, imm32; ret`), its main heap (`_mi_heap_main`,
//! in the module's data) from its shape (the page queues' block sizes, a
//! non-zero cookie), and the segments from theirs: 32 MiB-aligned, each
//! starting with `segment ^ _mi_heap_main.cookie`. Every segment a heap's
//! page queue leads to must carry that cookie, every span of slices must
//! tile the segment, every page's counts must add up (`used` plus its
//! `free` and `local_free` lists is its capacity), and every free list
//! stays inside its page, without loops, no longer than the page's
//! capacity. What does not add up is refused where it stops.

use crate::error::{Error, Result};
use crate::glibc::{Chunk, GlibcHeap};
use crate::memory::{Map, Memory, Region};
use std::collections::{BTreeSet, HashSet};
use std::fmt;

/// `MI_SEGMENT_SIZE` (and alignment), `MI_SEGMENT_SLICE_SIZE`, on 64-bit.
const SEGMENT: u64 = 32 << 20;
const SLICE: u64 = 64 << 10;
const SLICES_PER_SEGMENT: u64 = SEGMENT / SLICE;
/// `sizeof(mi_page_t)` (a slice), release build: 10 words.
const PAGE: u64 = 80;
/// `mi_segment_t`: offsets of the fields read, and of `slices`.
const SEG_USED: u64 = 208;
const SEG_COOKIE: u64 = 216;
const SEG_SLICES: u64 = 224;
const SEG_INFO_SLICES: u64 = 232;
const SEG_KIND: u64 = 240;
const SEG_ENTRIES: u64 = 248;
const SEG_SLICE0: u64 = 264;
/// `mi_page_t`: offsets.
const P_COUNT: u64 = 0;
const P_OFFSET: u64 = 4;
const P_CAPACITY: u64 = 10;
const P_RESERVED: u64 = 12;
const P_FREE: u64 = 16;
const P_USED: u64 = 24;
const P_BLOCK_SIZE: u64 = 28;
const P_LOCAL_FREE: u64 = 32;
const P_THREAD_FREE: u64 = 40;
const P_HEAP: u64 = 48;
/// `mi_heap_t`: its page queues (`MI_PAGES_DIRECT` 129 pointers after
/// `tld`), `MI_BIN_FULL + 1` of 3 words, then the fields read.
const H_QUEUES: u64 = 8 + 129 * 8;
const H_NQUEUES: u64 = 75;
const H_DELAYED: u64 = H_QUEUES + H_NQUEUES * 24;
const H_COOKIE: u64 = H_DELAYED + 24;
const H_SIZE: u64 = H_COOKIE + 24 + 136 + 48;
/// `MI_HUGE_BLOCK_SIZE`: a block size at least this is the page's size.
const HUGE_BLOCK: u64 = 2 << 30;
/// Small blocks start this far into their page (`3 * MI_MAX_ALIGN_GUARANTEE`).
const SMALL_START: u64 = 384;
/// Bounds of the walks: the segments' total, the bytes of one page read.
const MAX_SEGMENTS: usize = 1 << 20;
const MAX_PAGE_READ: u64 = 1 << 32;

/// What in mimalloc's heap does not add up, or is not read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Problem {
    /// A mimalloc whose layout this version does not read.
    Unsupported {
        /// Its version (`mi_version()`), or none read.
        version: Option<u32>,
        /// The module.
        module: String,
    },
    /// A copy of mimalloc linked into the executable (the Rust `mimalloc`
    /// crate's, 2.1 and later or 3.x): its build's layout is not read.
    StaticCopy {
        /// The executable.
        module: String,
        /// Its version, or how far its symbols tell it.
        version: String,
    },
    /// No place in the module's data has the main heap's shape.
    NoHeap {
        /// The module.
        module: String,
    },
    /// Several places have it.
    HeapUncertain {
        /// Their addresses.
        candidates: Vec<u64>,
    },
    /// A heap's page queue leads to a page whose segment does not carry
    /// the cookie (at: the segment).
    BadCookie,
    /// A segment's header or its spans of slices do not add up.
    BadSegment {
        /// What does not add up.
        why: &'static str,
    },
    /// A page's counts or lists do not add up (at: the page).
    BadPage {
        /// What does not add up.
        why: &'static str,
    },
}

impl Problem {
    /// Whether it says the heap is damaged (rather than not read).
    pub fn is_damage(&self) -> bool {
        matches!(self, Problem::BadCookie | Problem::BadSegment { .. } | Problem::BadPage { .. })
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Unsupported { version: Some(v), module } => write!(
                f,
                "mimalloc {} ({module}): a heap layout this version of heapdump does not know (it reads mimalloc 2.0)",
                version_string(*v)
            ),
            Problem::Unsupported { version: None, module } => {
                write!(f, "{module}: mimalloc's version (mi_version) was not read, so neither is its heap")
            }
            Problem::StaticCopy { module, version } => write!(
                f,
                "{module} links its own mimalloc ({version}): attach and core read only Debian's libmimalloc2.0 (mimalloc 2.0's layout), not a copy built into a program"
            ),
            Problem::NoHeap { module } => {
                write!(f, "mimalloc's main heap was not found in {module}'s data: not mimalloc 2.0's layout (a secure or debug build?)")
            }
            Problem::HeapUncertain { candidates } => {
                let c: Vec<String> = candidates.iter().map(|a| format!("{a:#x}")).collect();
                write!(f, "mimalloc's main heap could be at any of {}: not walked", c.join(", "))
            }
            Problem::BadCookie => write!(f, "a mimalloc segment a heap uses does not carry its cookie"),
            Problem::BadSegment { why } => write!(f, "a mimalloc segment: {why}"),
            Problem::BadPage { why } => write!(f, "a mimalloc page: {why}"),
        }
    }
}

fn bad(at: u64, what: Problem) -> Error {
    Error::Mimalloc { at, what }
}

/// `mi_version()`'s number as a version: 209 is 2.0.9.
fn version_string(v: u32) -> String {
    // 2.0.9 is 209; since 2.1.8 and 3.x, major and two digits each (20302).
    if v >= 10000 {
        format!("{}.{}.{}", v / 10000, v / 100 % 100, v % 100)
    } else {
        format!("{}.{}.{}", v / 100, v / 10 % 10, v % 10)
    }
}

/// Refuses a mimalloc linked into the executable (a Rust program's
/// global allocator) by name, rather than walking glibc's heap beside it
/// as if it were the program's (`snapshot` asks before glibc's walk).
pub fn refuse_static_copy(mem: &dyn Memory) -> Result<()> {
    match static_copy(mem) {
        Some(p) => Err(bad(0, p)),
        None => Ok(()),
    }
}

/// A mimalloc linked into the executable (the first module mapped): its
/// messages' prefix and its options' environment prefix in its read-only
/// data (in memory; a core's, which leaves it out, from the file). Its
/// version from `mi_version`'s code when a symbol table names it (the
/// dynamic one in memory, a core's file's full one), else its generation
/// from its options' names (3.x renamed the segments' options
/// `deprecated_*`); `None` when the executable has none.
fn static_copy(mem: &dyn Memory) -> Option<Problem> {
    use object::{Object, ObjectSection, ObjectSymbol};
    use std::io::Read;
    let maps = mem.maps();
    let first = maps.iter().find(|m| m.offset == 0 && m.file().is_some())?;
    let exe = first.file()?.to_string();
    let mut data = Vec::new();
    for m in maps.iter().filter(|m| m.file() == Some(exe.as_str()) && m.read && !m.write && !m.exec) {
        if let Ok(b) = mem.bytes(m.start, (m.end - m.start).min(64 << 20)) {
            data.extend_from_slice(&b);
        }
    }
    let has = |b: &[u8], s: &[u8]| memchr::memmem::find(b, s).is_some();
    let marked = |b: &[u8]| has(b, b"mimalloc: warning: ") && has(b, b"mimalloc_");
    // A core's file (a live process's is not read while it is held).
    let mut file = Vec::new();
    if !marked(&data) {
        let f = mem.host_file(&exe)?.ok()?;
        f.take(512 << 20).read_to_end(&mut file).ok()?;
        if !marked(&file) {
            return None;
        }
    }
    let in_memory = crate::memory::dynamic_symbol(mem, first.start, b"mi_version")
        .and_then(|v| mem.bytes(first.start.checked_add(v)?, 10).ok())
        .and_then(|c| code_version(&c));
    let in_file = || {
        let e = object::File::parse(&*file).ok()?;
        let a = e.symbols().chain(e.dynamic_symbols()).find(|s| s.is_definition() && s.name() == Ok("mi_version"))?.address();
        let text = e.sections().find(|s| s.address() <= a && a + 10 <= s.address() + s.size())?;
        let at = usize::try_from(a - text.address()).ok()?;
        code_version(text.data().ok()?.get(at..at + 10)?)
    };
    let strings = if file.is_empty() { &data } else { &file };
    let version = match in_memory.or_else(in_file) {
        Some(v) => format!("mimalloc {}", version_string(v)),
        None if has(strings, b"deprecated_max_segment_reclaim") => "mimalloc 3.x, by its options' names".to_string(),
        None if has(strings, b"max_segment_reclaim") => "mimalloc 2.x, by its options' names".to_string(),
        None => "its version not found".to_string(),
    };
    Some(Problem::StaticCopy { module: exe, version })
}

/// mimalloc, found.
#[derive(Debug)]
pub struct Found {
    /// `_mi_heap_main.cookie`: every segment's is its address xor this.
    cookie: u64,
    /// `_mi_heap_main`.
    heap_main: u64,
    /// `mi_version()`.
    version: u32,
}

fn file_name(m: &Map) -> &str {
    m.file().and_then(|p| p.rsplit('/').next()).unwrap_or("")
}

/// Finds a mapped `libmimalloc*` and its main heap; `None` when no
/// mimalloc is mapped.
pub fn find(mem: &dyn Memory) -> Result<Option<Found>> {
    let maps = mem.maps();
    let Some(module) = maps.iter().find(|m| file_name(m).starts_with("libmimalloc")).and_then(|m| m.file()) else {
        return Ok(None);
    };
    let name = module.rsplit('/').next().unwrap_or(module).to_string();
    // A core leaves the module's headers and code out: its file on this
    // machine then.
    let version = mi_version(mem, module).or_else(|| mi_version_in_file(mem, module));
    match version {
        Some(v) if v / 10 == 20 => {}
        _ => return Err(bad(0, Problem::Unsupported { version, module: name })),
    }
    // The module's writable mappings and its .bss right after them.
    let mut data: Vec<&Map> = Vec::new();
    for (i, m) in maps.iter().enumerate() {
        if m.file() == Some(module) && m.write {
            data.push(m);
            if let Some(next) = maps.get(i + 1).filter(|n| n.anonymous() && n.write && n.start == m.end) {
                data.push(next);
            }
        }
    }
    let mut found = BTreeSet::new();
    for m in data {
        let end = m.end.min(m.start + (4 << 20));
        let Ok(r) = Region::read(mem, m.start, end) else { continue };
        let mut at = m.start;
        while at + H_SIZE <= end {
            if heap_shape(&r, at) && r.u64(at + H_COOKIE).is_some_and(|c| c != 0) {
                found.insert((at, r.u64(at + H_COOKIE).unwrap_or(0)));
            }
            at += 8;
        }
    }
    match found.iter().collect::<Vec<_>>().as_slice() {
        [] => Err(bad(0, Problem::NoHeap { module: name })),
        [&(heap_main, cookie)] => Ok(Some(Found { cookie, heap_main, version: version.unwrap_or(0) })),
        many => Err(bad(many[0].0, Problem::HeapUncertain { candidates: many.iter().map(|f| f.0).collect() })),
    }
}

/// Whether no thread is stopped inside mimalloc's code (`rips`: the
/// threads' instruction pointers): a thread stopped in `malloc` or `free`
/// may have a page's list and its count half updated (mimalloc takes no
/// lock on its own pages), and the walk would refuse the heap as damaged.
pub fn settled(mem: &dyn Memory, rips: impl IntoIterator<Item = u64>) -> bool {
    let code: Vec<(u64, u64)> =
        mem.maps().iter().filter(|m| m.exec && file_name(m).starts_with("libmimalloc")).map(|m| (m.start, m.end)).collect();
    rips.into_iter().all(|ip| !code.iter().any(|&(a, b)| (a..b).contains(&ip)))
}

/// Whether `at` has a heap's shape: its page queues' block sizes are
/// mimalloc's bins (8, 8, 16, 24, 32, …, and the huge and full queues'
/// `MI_MEDIUM_OBJ_WSIZE_MAX + 1` and `+ 2` words).
fn heap_shape(r: &Region, at: u64) -> bool {
    let size = |q: u64| r.u64(at + H_QUEUES + q * 24 + 16);
    let large = (128 << 10) / 8;
    size(0) == Some(8)
        && size(1) == Some(8)
        && size(2) == Some(16)
        && size(3) == Some(24)
        && size(8) == Some(64)
        && size(H_NQUEUES - 2) == Some((large + 1) * 8)
        && size(H_NQUEUES - 1) == Some((large + 2) * 8)
}

/// `mi_version()`'s number, read from its code (`mov eax, imm32; ret`,
/// perhaps after `endbr64`), found through the module's dynamic symbols.
fn mi_version(mem: &dyn Memory, module: &str) -> Option<u32> {
    let base = mem.maps().iter().find(|m| m.file() == Some(module) && m.offset == 0)?.start;
    let value = crate::memory::dynamic_symbol(mem, base, b"mi_version")?;
    code_version(&mem.bytes(base.checked_add(value)?, 10).ok()?)
}

/// `mi_version()`'s number from the module's file (a core's process).
fn mi_version_in_file(mem: &dyn Memory, module: &str) -> Option<u32> {
    use object::{Object, ObjectSection, ObjectSymbol};
    use std::io::Read;
    let f = mem.host_file(module)?.ok()?;
    let mut b = Vec::new();
    f.take(64 << 20).read_to_end(&mut b).ok()?;
    let elf = object::File::parse(&*b).ok()?;
    let sym = elf.dynamic_symbols().find(|s| s.name() == Ok("mi_version"))?;
    let text = elf.sections().find(|s| s.address() <= sym.address() && sym.address() + 10 <= s.address() + s.size())?;
    let data = text.data().ok()?;
    let at = usize::try_from(sym.address() - text.address()).ok()?;
    code_version(data.get(at..at + 10)?)
}

/// `mov eax, imm32; ret` (perhaps after `endbr64`): the number.
fn code_version(code: &[u8]) -> Option<u32> {
    let code = if code.get(..4)? == [0xf3, 0x0f, 0x1e, 0xfa] { &code[4..] } else { code };
    (code.len() >= 6 && code[0] == 0xb8 && code[5] == 0xc3).then(|| u32::from_le_bytes([code[1], code[2], code[3], code[4]]))
}

/// A page with blocks: its first block, block size, capacity, and which
/// of its blocks are free.
struct Page {
    at: u64,
    start: u64,
    bsize: u64,
    capacity: u64,
    free: Vec<bool>,
    region: usize,
}

impl Page {
    /// Marks the block at `b` free; `Err` when it is not one of the
    /// page's blocks, or is free already (a loop, or a block on two lists).
    fn mark(&mut self, b: u64) -> std::result::Result<(), &'static str> {
        let off = b.checked_sub(self.start).ok_or("a free list leaves its page")?;
        if off % self.bsize != 0 {
            return Err("a free list points inside a block");
        }
        let i = off / self.bsize;
        let slot = self.free.get_mut(i as usize).ok_or("a free list leaves its page's blocks")?;
        if *slot {
            return Err("a free list loops, or two lists hold one block");
        }
        *slot = true;
        Ok(())
    }
}

/// Walks the list from `head` through the blocks' first words, marking
/// each free; at most `limit` blocks. Returns how many.
fn walk_list(pages: &mut [Page], regions: &[Region], p: usize, head: u64, limit: u64) -> std::result::Result<u64, &'static str> {
    let mut n = 0;
    let mut b = head;
    while b != 0 {
        n += 1;
        if n > limit {
            return Err("a free list is longer than its page's capacity");
        }
        pages[p].mark(b)?;
        b = regions[pages[p].region].u64(b).ok_or("a free block outside the page read")?;
    }
    Ok(n)
}

/// The segments: every 32 MiB-aligned place of the anonymous writable
/// memory whose first words carry the cookie.
fn segments(mem: &dyn Memory, f: &Found) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    for m in mem.maps().iter().filter(|m| m.anonymous() && m.read && m.write) {
        let mut a = m.start.div_ceil(SEGMENT) * SEGMENT;
        while a + SEG_SLICE0 <= m.end {
            if mem.u64(a + SEG_COOKIE).ok() == Some(a ^ f.cookie) {
                out.push(a);
                if out.len() > MAX_SEGMENTS {
                    return Err(bad(a, Problem::BadSegment { why: "more segments than mimalloc makes" }));
                }
            }
            a += SEGMENT;
        }
    }
    Ok(out)
}

/// Walks the heap: every block of every page less the free lists.
pub fn walk_heap(mem: &dyn Memory, f: &Found) -> Result<GlibcHeap> {
    let segs = segments(mem, f)?;
    let seg_set: HashSet<u64> = segs.iter().copied().collect();
    let mut pages: Vec<Page> = Vec::new();
    let mut regions: Vec<Region> = Vec::new();
    let mut heap_ranges = Vec::new();
    let mut heaps: BTreeSet<u64> = BTreeSet::new();
    let mut threads: Vec<(usize, u64)> = Vec::new();
    let mut free_blocks = 0u64;
    for &s in &segs {
        let sb = |why| bad(s, Problem::BadSegment { why });
        let head = Region::read(mem, s, s + SEG_SLICE0).map_err(|_| sb("its header is not readable"))?;
        let w = |o: u64| head.u64(s + o).unwrap_or(u64::MAX);
        let (nslices, info, kind, entries) = (w(SEG_SLICES), w(SEG_INFO_SLICES), w(SEG_KIND) as u32, w(SEG_ENTRIES));
        if kind > 1 || entries == 0 || entries > SLICES_PER_SEGMENT || (kind == 0 && (nslices != SLICES_PER_SEGMENT || entries != nslices))
        {
            return Err(sb("its kind and counts of slices are not mimalloc's"));
        }
        if kind == 1 && (nslices > 1 << 26 || entries != nslices.min(SLICES_PER_SEGMENT)) {
            return Err(sb("its kind and counts of slices are not mimalloc's"));
        }
        if info == 0 || info >= entries.max(2) || info * SLICE < SEG_SLICE0 + (entries + 1) * PAGE {
            return Err(sb("its info slices do not hold its slices"));
        }
        let end = s + nslices * SLICE;
        let sl = Region::read(mem, s + SEG_SLICE0, s + SEG_SLICE0 + (entries + 1) * PAGE).map_err(|_| sb("its slices are not readable"))?;
        let mut used_pages = 0u64;
        let mut i = 0u64;
        while i < entries {
            let at = s + SEG_SLICE0 + i * PAGE;
            let u32_at = |o: u64| sl.slice(at + o, 4).map(|b| u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))).unwrap_or(0);
            let u16_at = |o: u64| sl.slice(at + o, 2).map(|b| u64::from(u16::from_le_bytes([b[0], b[1]]))).unwrap_or(0);
            let count = u32_at(P_COUNT);
            if count == 0 || u32_at(P_OFFSET) != 0 || (i + count > entries && !(kind == 1 && i + count <= nslices)) {
                return Err(bad(at, Problem::BadSegment { why: "its spans of slices do not tile it" }));
            }
            // A span's last slice points back to its first (mimalloc sets
            // it on every span, free or used): the slices' stride, 80
            // bytes, is the release build's (a secure build's pages are
            // 96 bytes).
            // (A huge segment's one span runs past its slices: its last
            // slice is then the extra one after them.)
            let last = (i + count - 1).min(entries);
            if last > i {
                let back =
                    sl.slice(s + SEG_SLICE0 + last * PAGE + P_OFFSET, 4).map(|b| u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])));
                if back != Some((last - i) * PAGE) {
                    return Err(bad(at, Problem::BadSegment { why: "a span's last slice does not point back to its first" }));
                }
            }
            let xbs = u32_at(P_BLOCK_SIZE);
            let capacity = u16_at(P_CAPACITY);
            let this = i;
            i += count;
            if xbs == 0 || this < info {
                continue; // a free span, or the segment's own info
            }
            used_pages += 1;
            if capacity == 0 {
                continue; // a page not yet given blocks
            }
            let pb = |why| bad(at, Problem::BadPage { why });
            let psize = count * SLICE;
            let bsize = if xbs >= HUGE_BLOCK { psize } else { xbs };
            let off = if (8..=1024).contains(&bsize) { SMALL_START } else { 0 };
            let start = s + this * SLICE + off;
            let (reserved, used) = (u16_at(P_RESERVED), u32_at(P_USED));
            if capacity > reserved || used > capacity || reserved.checked_mul(bsize).is_none_or(|b| b > psize - off) {
                return Err(pb("its capacity does not fit it"));
            }
            let len = capacity * bsize;
            if len > MAX_PAGE_READ || start + len > end {
                return Err(pb("its blocks run past its segment"));
            }
            let r = Region::read(mem, start, start + len).map_err(|_| pb("its blocks are not readable"))?;
            regions.push(r);
            let word = |o: u64| sl.u64(at + o).unwrap_or(0);
            pages.push(Page { at, start, bsize, capacity, free: vec![false; capacity as usize], region: regions.len() - 1 });
            let p = pages.len() - 1;
            let n_free = walk_list(&mut pages, &regions, p, word(P_FREE), capacity).map_err(pb)?;
            let n_local = walk_list(&mut pages, &regions, p, word(P_LOCAL_FREE), capacity).map_err(pb)?;
            if used + n_free + n_local != capacity {
                return Err(pb("its used count and its free lists do not make its capacity"));
            }
            free_blocks += n_free + n_local;
            threads.push((p, word(P_THREAD_FREE) & !3));
            if word(P_HEAP) != 0 {
                heaps.insert(word(P_HEAP));
            }
        }
        if used_pages != w(SEG_USED) {
            return Err(sb("its count of pages in use is not its pages'"));
        }
        // The whole segment is the heap's: its free spans' stale words
        // are no roots.
        heap_ranges.push((s, end));
    }
    // Blocks other threads freed: each page's thread-free list (counted
    // in its `used`), and each heap's delayed list.
    for (p, head) in threads {
        let limit = pages[p].capacity;
        free_blocks += walk_list(&mut pages, &regions, p, head, limit).map_err(|why| bad(pages[p].at, Problem::BadPage { why }))?;
    }
    let starts: Vec<u64> = pages.iter().map(|p| p.start).collect();
    let total: u64 = pages.iter().map(|p| p.capacity).sum();
    heaps.insert(f.heap_main);
    for &h in &heaps {
        let hb = |why| bad(h, Problem::BadPage { why });
        let r = Region::read(mem, h, h + H_SIZE).map_err(|_| hb("a page's heap is not readable"))?;
        if !heap_shape(&r, h) {
            return Err(hb("a page's heap is not one"));
        }
        // Every page on the heap's queues lies in a segment with the cookie.
        for q in 0..H_NQUEUES {
            if let Some(first) = r.u64(h + H_QUEUES + q * 24).filter(|&a| a != 0) {
                let seg = first & !(SEGMENT - 1);
                if !seg_set.contains(&seg) {
                    return Err(bad(seg, Problem::BadCookie));
                }
            }
        }
        let mut b = r.u64(h + H_DELAYED).unwrap_or(0);
        let mut n = 0;
        while b != 0 {
            n += 1;
            let i = starts.partition_point(|&a| a <= b).checked_sub(1).ok_or_else(|| hb("its delayed free list leaves the pages"))?;
            if n > total {
                return Err(hb("its delayed free list is longer than the heap"));
            }
            pages[i].mark(b).map_err(hb)?;
            free_blocks += 1;
            b = regions[pages[i].region].u64(b).ok_or_else(|| hb("its delayed free list leaves the pages"))?;
        }
    }
    let mut live = Vec::new();
    for p in &pages {
        for (j, _) in p.free.iter().enumerate().filter(|(_, &f)| !f) {
            live.push(Chunk { mem: p.start + j as u64 * p.bsize, usable: p.bsize });
        }
    }
    live.sort_unstable();
    Ok(GlibcHeap {
        live,
        arenas: segs.len(),
        heap_ranges,
        mmapped: Vec::new(),
        regions,
        cached_free: free_blocks,
        version: (0, 0),
        version_inferred: false,
        static_arena: None,
        warnings: Vec::new(),
        allocator: format!("mimalloc {}", version_string(f.version)),
    })
}
