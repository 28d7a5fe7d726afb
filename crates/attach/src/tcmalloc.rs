//! tcmalloc's heap (gperftools 2.10, Debian's `libtcmalloc-minimal4`),
//! walked from outside the process: the spans of its page map, each
//! small-object span's objects less the free ones (the span's own list,
//! the transfer caches', the threads' caches'), the large spans whole.
//!
//! gperftools keeps its state in hidden statics (`Static::sizemap_`,
//! `Static::central_cache_`, `Static::pageheap_`), found in the library's
//! data by their shape: the size-class table (class sizes 0, 8, 16, …
//! rising to 256 KiB, followed by their count where the layout puts it),
//! the central free lists (each naming its own class, with two empty or
//! linked list heads), the page heap's 128 pairs of span-list heads after
//! its radix page map (whose allocator is a function of the library).
//! The threads' caches are found the same way: a pointer in the library's
//! data to a cache whose 128 lists each carry their class's size and with
//! no predecessor (`ThreadCache::thread_heaps_`). Every span is checked
//! against the page map (the pages it covers point back to it), every
//! free list is bounded by what it may hold (a span's object count, a
//! cache list's length, a transfer batch) and every free object must be
//! an object boundary of a span of its class, free once: a span's free
//! objects and the objects handed out of it add up to its object count.
//! Any other layout (another gperftools, a debug build, another page
//! size) is refused where it stops making sense.

use crate::error::{Error, Result};
use crate::glibc::{Chunk, GlibcHeap};
use crate::memory::{Map, Memory, Region};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

/// The versions whose layout is read.
const READ: &[&str] = &["2.10"];
/// Pages of 8 KiB (`kPageShift` 13, the default build).
const PAGE_SHIFT: u64 = 13;
/// `TCMalloc_PageMap2<35>`: 2^17 root entries, leaves of 2^18 pages.
const LEAF_BITS: u64 = 18;
const ROOT_LEN: u64 = 1 << 17;
/// `kMaxPages`: the page heap's small span lists (normal, returned).
const SPAN_LISTS: u64 = 128 * 2;
/// `sizeof (Span)` and its fields.
const SPAN: u64 = 48;
const SPAN_NEXT: u64 = 16;
const SPAN_PREV: u64 = 24;
const SPAN_OBJECTS: u64 = 32;
const SPAN_BITS: u64 = 40;
/// From the page heap's first span list back to the page map's root:
/// the two `SpanSet`s (48 bytes each) and the map's allocator.
const SETS: u64 = 96;
/// `kClassSizesMax`, `kMaxSize`.
const CLASSES: u64 = 128;
const MAX_SIZE: u64 = 256 << 10;
/// `SizeMap`, from `class_to_size_`: `num_objects_to_move_` before,
/// `class_to_pages_` and `num_size_classes` after.
const TO_MOVE: i64 = -512;
const TO_PAGES: u64 = 516;
const NUM_CLASSES: u64 = 1540;
/// `CentralFreeListPadded` and its fields.
const CENTRAL: u64 = 1216;
const C_CLASS: u64 = 8;
const C_EMPTY: u64 = 16;
const C_NONEMPTY: u64 = 64;
const C_SLOTS: u64 = 128;
const C_USED: u64 = 1152;
const MAX_SLOTS: u64 = 64;
/// `ThreadCache`: 128 `FreeList`s of 32 bytes (list, length, …, size),
/// then its links.
const TC: u64 = 4160;
const FL: u64 = 32;
const FL_LENGTH: u64 = 8;
const FL_SIZE: u64 = 24;
const TC_NEXT: u64 = 4144;
const TC_PREV: u64 = 4152;
/// Bounds of the walks.
const MAX_LEAVES: usize = 4096;
const MAX_THREADS: usize = 1 << 16;
const MAX_LIST: u64 = 1 << 20;
/// `PageHeapAllocator<T>` (the metadata's allocators: span descriptors,
/// thread caches): `free_area_`, `free_avail_`, `free_list_`, `inuse_`,
/// carving `T`s from chunks of `kAllocIncrement` bytes.
const PHA: u64 = 32;
const PHA_CHUNK: u64 = 128 << 10;
/// Descriptors a span allocator's free list may hold (6 GiB of them).
const MAX_FREED: usize = 1 << 27;
/// The spans' allocator holds two descriptors besides the page map's
/// (`InitStaticVars` takes them "to reduce cache conflicts").
const SPANS_RESERVED: u64 = 2;
/// The mangled `tcmalloc::threadcache_allocator` (Debian's build exports it).
const TC_ALLOCATOR: &[u8] = b"_ZN8tcmalloc21threadcache_allocatorE";
/// The mangled `tcmalloc::Static::pageheap_lock_`.
const PAGEHEAP_LOCK: &[u8] = b"_ZN8tcmalloc6Static14pageheap_lock_E";

/// What in tcmalloc's heap does not add up (a refusal, at an address).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Problem {
    /// A tcmalloc whose layout is not read here.
    Unsupported {
        /// Its version (or what its strings say).
        version: String,
        /// The module.
        module: String,
    },
    /// One of its structures has no place of its shape in its data.
    NotFound {
        /// Which.
        what: &'static str,
    },
    /// Several places have its shape.
    Uncertain {
        /// Which.
        what: &'static str,
        /// Their addresses.
        candidates: Vec<u64>,
    },
    /// The page map or a span does not add up.
    BadSpan {
        /// What.
        why: &'static str,
    },
    /// A free list does not add up (a loop, an object outside its span).
    BadList {
        /// Which list and what.
        why: &'static str,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Unsupported { version, module } => {
                write!(f, "{module} is tcmalloc {version}: attach and core read gperftools {}'s layout", READ.join(", "))
            }
            Problem::NotFound { what } => {
                write!(
                    f,
                    "tcmalloc's {what} has no place of its shape in its data: not gperftools 2.10's default layout, or a heap not used yet"
                )
            }
            Problem::Uncertain { what, candidates } => {
                let c: Vec<String> = candidates.iter().take(4).map(|a| format!("{a:#x}")).collect();
                write!(f, "tcmalloc's {what} could be at any of {}: not walked", c.join(", "))
            }
            Problem::BadSpan { why } => write!(f, "tcmalloc's span: {why}"),
            Problem::BadList { why } => write!(f, "tcmalloc's free list: {why}"),
        }
    }
}

impl Problem {
    /// Whether it says the heap is damaged (rather than not read).
    pub fn is_damage(&self) -> bool {
        matches!(self, Problem::BadSpan { .. } | Problem::BadList { .. })
    }
}

fn problem(at: u64, what: Problem) -> Error {
    Error::Tcmalloc { at, what }
}

/// tcmalloc in a process, its structures found.
pub struct Found {
    version: String,
    /// `class_to_size_`.
    sizes: Vec<u64>,
    pages: Vec<u64>,
    to_move: Vec<u64>,
    /// The page map's root, `central_cache_`, the first thread cache.
    root: u64,
    central: u64,
    threads: Option<u64>,
    /// The root's entries (leaves).
    leaves: Vec<(u64, u64)>,
    /// The central lists, read.
    central_bytes: Region,
    /// The library's read-only data (its vtables).
    relro: Vec<(u64, u64)>,
    /// Places in its data of a `PageHeapAllocator` of span descriptors'
    /// shape, and the thread caches' allocator (by its symbol or shape).
    span_allocators: Vec<Pha>,
    cache_allocators: Vec<Pha>,
    /// Whether `Static::pageheap_lock_` is held (when the module names it).
    pageheap_locked: bool,
}

/// A `PageHeapAllocator`, as read: where it lies, its current chunk's
/// next free byte and what is left of it, its free list, its count.
#[derive(Clone, Copy, Debug)]
struct Pha {
    at: u64,
    area: u64,
    avail: u64,
    list: u64,
    inuse: u64,
}

/// A `PageHeapAllocator` of `size`-byte objects at `at` in `r`: its area
/// and free list in memory, what is left of its chunk a whole chunk less
/// whole objects.
fn pha_at(mem: &dyn Memory, r: &Region, at: u64, size: u64) -> Option<Pha> {
    let (area, avail, list) = (r.u64(at)?, r.u64(at + 8)?, r.u64(at + 16)?);
    let inuse = u32_at(r, at + 24)?;
    if area == 0 || area % 16 != 0 || avail > PHA_CHUNK || (PHA_CHUNK - avail) % size != 0 || list % 8 != 0 {
        return None;
    }
    let start = (area + avail).checked_sub(PHA_CHUNK)?;
    let m = mem.map_of(start).filter(|m| m.write && m.read && area + avail <= m.end)?;
    let _ = m;
    if list != 0 && mem.map_of(list).is_none_or(|m| !m.write || list + size > m.end) {
        return None;
    }
    Some(Pha { at, area, avail, list, inuse })
}

/// Every place in `rw` of a `PageHeapAllocator` of `size`-byte objects.
fn phas(mem: &dyn Memory, rw: &[Region], size: u64, skip: &[(u64, u64)]) -> Vec<Pha> {
    let mut out = Vec::new();
    for r in rw {
        let mut at = r.start;
        while at + PHA <= r.end() {
            if let Some(&(_, e)) = skip.iter().find(|(s, e)| (*s..*e).contains(&at)) {
                at = e.next_multiple_of(8);
                continue;
            }
            if let Some(p) = pha_at(mem, r, at, size) {
                out.push(p);
            }
            at += 8;
        }
    }
    out
}

/// The objects on a `PageHeapAllocator`'s free list (freed metadata),
/// each `size` bytes in writable memory, outside `heap` (the spans'
/// pages) and not one of `live`, each once.
fn freed(mem: &dyn Memory, p: &Pha, size: u64, heap: &[(u64, u64)], live: &HashSet<u64>) -> Result<Vec<u64>> {
    let bad = |a, why| problem(a, Problem::BadList { why });
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut page: Option<Region> = None;
    let mut o = p.list;
    while o != 0 {
        if out.len() >= MAX_FREED || !seen.insert(o) {
            return Err(bad(p.at, "tcmalloc's metadata free list loops"));
        }
        let i = heap.partition_point(|r| r.0 <= o);
        let in_heap = i > 0 && o < heap[i - 1].1;
        if o % 8 != 0 || in_heap || live.contains(&o) || mem.map_of(o).is_none_or(|m| !m.write || o + size > m.end) {
            return Err(bad(o, "tcmalloc's metadata free list holds what is no freed object of it"));
        }
        out.push(o);
        // Read by pages: the list runs through its chunks.
        if page.as_ref().is_none_or(|r| r.u64(o).is_none()) {
            let a = o & !4095;
            let end = mem.map_of(o).map_or(a + 4096, |m| m.end.min(a + 4096));
            page = Some(Region::read(mem, a, end).map_err(|_| bad(o, "unreadable"))?);
        }
        o = page.as_ref().and_then(|r| r.u64(o)).ok_or(bad(o, "unreadable"))?;
    }
    Ok(out)
}

fn file_name(m: &Map) -> &str {
    m.file().and_then(|p| p.rsplit('/').next()).unwrap_or("")
}

/// gperftools' version in `b`: `gperftools X.Y`.
fn version_in(b: &[u8]) -> Option<String> {
    let mut from = 0;
    while let Some(i) = memchr::memmem::find(&b[from..], b"gperftools ") {
        let at = from + i + 11;
        let v: Vec<u8> = b[at..].iter().take(16).copied().take_while(|c| c.is_ascii_digit() || *c == b'.').collect();
        if v.first().is_some_and(u8::is_ascii_digit) && v.contains(&b'.') {
            return String::from_utf8(v).ok();
        }
        from = at;
    }
    None
}

/// The tcmalloc the process allocates with (a module named for it,
/// loaded or preloaded), its structures found; `None` when there is none.
pub fn find(mem: &dyn Memory) -> Result<Option<Found>> {
    let maps = mem.maps();
    let Some(first) = maps.iter().find(|m| file_name(m).starts_with("libtcmalloc")) else { return Ok(None) };
    let path = first.file().unwrap_or_default().to_string();
    let own: Vec<&Map> = maps.iter().filter(|m| m.file() == Some(path.as_str())).collect();
    let mut version = None;
    for m in own.iter().filter(|m| m.read && !m.write && !m.exec) {
        if let Ok(b) = mem.bytes(m.start, (m.end - m.start).min(64 << 20)) {
            version = version.or_else(|| version_in(&b));
        }
    }
    // A core leaves read-only data out: the file on this machine then.
    let version = version.or_else(|| {
        use std::io::Read;
        let f = mem.host_file(&path)?.ok()?;
        let mut b = Vec::new();
        f.take(64 << 20).read_to_end(&mut b).ok()?;
        version_in(&b)
    });
    let module = file_name(first).to_string();
    let version = match version {
        Some(v) if READ.contains(&v.as_str()) && !module.contains("debug") => v,
        Some(v) => return Err(problem(first.start, Problem::Unsupported { version: v, module })),
        None => return Err(problem(first.start, Problem::Unsupported { version: "(no version in its strings)".into(), module })),
    };
    // The module's data and the bss right after it.
    let mut rw: Vec<Region> = Vec::new();
    for m in own.iter().filter(|m| m.write) {
        let i = maps.partition_point(|x| x.start < m.end);
        let end = match maps.get(i).filter(|b| b.start == m.end && b.anonymous() && b.write && b.read) {
            Some(b) => b.end,
            None => m.end,
        };
        if end - m.start <= 64 << 20 {
            rw.push(Region::read(mem, m.start, end)?);
        }
    }
    // (A core leaves the text out: its mapping is then only named.)
    let text = |a: u64| own.iter().any(|m| !m.write && (m.start..m.end).contains(&a));
    let (sizes, pages, to_move) = sizemap(&rw)?;
    let n = sizes.len() as u64;
    let root = pageheap(&rw, &text)?;
    let central = central(&rw, n)?;
    let rr = rw
        .iter()
        .find(|r| root >= r.start && root + ROOT_LEN * 8 <= r.end())
        .ok_or(problem(root, Problem::NotFound { what: "page map" }))?;
    let mut leaves = Vec::new();
    for i in 0..ROOT_LEN {
        let l = rr.u64(root + i * 8).unwrap_or(0);
        if l != 0 {
            leaves.push((i, l));
        }
    }
    let cr = rw
        .iter()
        .find(|r| central >= r.start && central + CENTRAL * n <= r.end())
        .ok_or(problem(central, Problem::NotFound { what: "central free lists" }))?;
    let central_bytes = Region { start: central, bytes: cr.slice(central, CENTRAL * n).unwrap_or_default().to_vec() };
    let skip = [(root, root + ROOT_LEN * 8), (central, central + CENTRAL * n)];
    let threads = match module_symbol(mem, &path, HEADS) {
        Some(at) => {
            let r = rw.iter().find(|r| r.u64(at).is_some()).ok_or(problem(at, Problem::NotFound { what: "thread cache list" }))?;
            let head = r.u64(at).unwrap_or(0);
            (head != 0).then_some(head)
        }
        None => thread_heaps(mem, &rw, &sizes, &skip)?,
    };
    let relro = own.iter().filter(|m| m.read && !m.write && !m.exec).map(|m| (m.start, m.end)).collect();
    let span_allocators = phas(mem, &rw, SPAN, &skip);
    let by_symbol = module_symbol(mem, &path, TC_ALLOCATOR).and_then(|at| {
        let r = rw.iter().find(|r| r.u64(at + 24).is_some())?;
        Some(pha_at(mem, r, at, TC))
    });
    // The page heap's lock, when the module names it: taken while spans
    // split, merge and their descriptors come and go.
    let pageheap_locked =
        module_symbol(mem, &path, PAGEHEAP_LOCK).and_then(|at| rw.iter().find_map(|r| u32_at(r, at))).is_some_and(|w| w != 0);
    let cache_allocators = match by_symbol {
        Some(p) => p.into_iter().collect(),
        None => phas(mem, &rw, TC, &skip),
    };
    Ok(Some(Found {
        version,
        sizes,
        pages,
        to_move,
        root,
        central,
        threads,
        leaves,
        central_bytes,
        relro,
        span_allocators,
        cache_allocators,
        pageheap_locked,
    }))
}

/// Whether no central free list is locked (a thread stopped inside one
/// leaves its spans' counts half updated), nor the page heap (its spans
/// and their descriptors).
pub fn settled(f: &Found) -> bool {
    !f.pageheap_locked
        && (0..f.sizes.len() as u64).all(|i| f.central_bytes.slice(f.central + i * CENTRAL, 4).is_some_and(|b| b == [0, 0, 0, 0]))
}

fn u32_at(r: &Region, a: u64) -> Option<u64> {
    r.slice(a, 4).map(|b| u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
}

/// `Static::sizemap_`: class sizes 0, 8, … rising to `kMaxSize`, their
/// count after the pages per class; (sizes, pages, batch sizes).
type SizeMap = (Vec<u64>, Vec<u64>, Vec<u64>);
fn sizemap(rw: &[Region]) -> Result<SizeMap> {
    let mut found: Vec<(u64, SizeMap)> = Vec::new();
    for r in rw {
        let mut at = r.start + 2684 % 8;
        while at + 8 <= r.end() {
            if u32_at(r, at) == Some(0) && u32_at(r, at + 4) == Some(8) {
                if let Some(s) = sizemap_at(r, at) {
                    found.push((at, s));
                }
            }
            at += 8;
        }
    }
    match found.len() {
        1 => Ok(found.pop().map(|f| f.1).unwrap_or_default()),
        0 => Err(problem(0, Problem::NotFound { what: "size-class table" })),
        _ => Err(problem(found[0].0, Problem::Uncertain { what: "size-class table", candidates: found.iter().map(|f| f.0).collect() })),
    }
}

fn sizemap_at(r: &Region, x: u64) -> Option<SizeMap> {
    let n = r.u64(x + NUM_CLASSES)?;
    if !(2..=CLASSES).contains(&n) {
        return None;
    }
    let mut sizes = Vec::new();
    let mut pages = Vec::new();
    let mut to_move = Vec::new();
    for i in 0..n {
        let s = u32_at(r, x + i * 4)?;
        let p = r.u64(x + TO_PAGES + i * 8)?;
        let m = u32_at(r, x.checked_add_signed(TO_MOVE)? + i * 4)?;
        if i > 0 && (s <= sizes[i as usize - 1] || s % 8 != 0 || !(1..=128).contains(&p) || p << PAGE_SHIFT < s || !(1..=4096).contains(&m))
        {
            return None;
        }
        sizes.push(s);
        pages.push(p);
        to_move.push(m);
    }
    // The last class is kMaxSize, and the table ends there.
    (sizes[n as usize - 1] == MAX_SIZE && (n == CLASSES || u32_at(r, x + n * 4) == Some(0))).then_some((sizes, pages, to_move))
}

/// A list head (a dummy span): no pages, linked to itself or to spans.
fn dummy(r: &Region, a: u64) -> bool {
    let w = |o| r.u64(a + o);
    matches!((w(0), w(8), w(SPAN_NEXT), w(SPAN_PREV)), (Some(0), Some(0), Some(n), Some(p)) if n != 0 && p != 0 && n % 8 == 0 && p % 8 == 0)
}

/// `Static::pageheap_`: its 256 span-list heads in a row, the page map's
/// allocator (a function of the library) before its sets; the root's
/// address.
fn pageheap(rw: &[Region], text: &dyn Fn(u64) -> bool) -> Result<u64> {
    let mut found = Vec::new();
    for r in rw {
        let mut at = r.start + ROOT_LEN * 8 + 8 + SETS;
        while at + SPAN * SPAN_LISTS <= r.end() {
            // Quick: the first two heads.
            if dummy(r, at) && dummy(r, at + SPAN) && (0..SPAN_LISTS).all(|i| dummy(r, at + i * SPAN)) {
                let alloc = r.u64(at - SETS - 8).unwrap_or(0);
                if text(alloc) {
                    found.push(at - SETS - 8 - ROOT_LEN * 8);
                }
            }
            at += 8;
        }
    }
    match found.as_slice() {
        [root] => Ok(*root),
        [] => Err(problem(0, Problem::NotFound { what: "page heap" })),
        many => Err(problem(many[0], Problem::Uncertain { what: "page heap", candidates: many.to_vec() })),
    }
}

/// `Static::central_cache_`: each list naming its class, with two heads.
fn central(rw: &[Region], n: u64) -> Result<u64> {
    let mut found = Vec::new();
    for r in rw {
        let mut at = r.start;
        while at + CENTRAL * n <= r.end() {
            if r.u64(at + CENTRAL + C_CLASS) == Some(1)
                && (0..n).all(|i| {
                    let c = at + i * CENTRAL;
                    r.u64(c + C_CLASS) == Some(i)
                        && dummy(r, c + C_EMPTY)
                        && dummy(r, c + C_NONEMPTY)
                        && u32_at(r, c + C_USED).is_some_and(|u| u <= MAX_SLOTS)
                })
            {
                found.push(at);
            }
            at += 8;
        }
    }
    match found.as_slice() {
        [c] => Ok(*c),
        [] => Err(problem(0, Problem::NotFound { what: "central free lists" })),
        many => Err(problem(many[0], Problem::Uncertain { what: "central free lists", candidates: many.to_vec() })),
    }
}

/// The mangled `tcmalloc::ThreadCache::thread_heaps_`.
const HEADS: &[u8] = b"_ZN8tcmalloc11ThreadCache13thread_heaps_E";

/// Where `ThreadCache::thread_heaps_` lies, when the module's dynamic
/// symbols (Debian's build exports them) say it: from its memory (the
/// dynamic section, relocated or not), or its file (a core's).
fn module_symbol(mem: &dyn Memory, module: &str, name: &[u8]) -> Option<u64> {
    let base = mem.maps().iter().find(|m| m.file() == Some(module) && m.offset == 0)?.start;
    crate::memory::dynamic_symbol(mem, base, name).and_then(|v| base.checked_add(v)).or_else(|| {
        use object::{Object, ObjectSymbol};
        use std::io::Read;
        let f = mem.host_file(module)?.ok()?;
        let mut b = Vec::new();
        f.take(64 << 20).read_to_end(&mut b).ok()?;
        let elf = object::File::parse(&*b).ok()?;
        let sym = elf.dynamic_symbols().find(|s| s.name_bytes() == Ok(name))?;
        base.checked_add(sym.address())
    })
}

/// Whether the caches from `head` on are linked both ways (a cache freed
/// when it headed the list keeps a stale link to the next).
fn linked(mem: &dyn Memory, head: u64) -> bool {
    let (mut t, mut prev, mut n) = (head, 0, 0);
    while t != 0 && n < MAX_THREADS {
        match (mem.u64(t + TC_PREV), mem.u64(t + TC_NEXT)) {
            (Ok(p), Ok(next)) if p == prev => (prev, t, n) = (t, next, n + 1),
            _ => return false,
        }
    }
    t == 0
}

/// Whether `b` (a cache's bytes) is a thread cache: each list carries its
/// class's size.
fn is_cache(b: &Region, at: u64, sizes: &[u64]) -> bool {
    sizes.iter().enumerate().skip(1).all(|(i, &s)| u32_at(b, at + i as u64 * FL + FL_SIZE) == Some(s))
}

/// `ThreadCache::thread_heaps_`: a pointer in the library's data to a
/// thread cache with no predecessor. `None`: no thread has a cache yet.
fn thread_heaps(mem: &dyn Memory, rw: &[Region], sizes: &[u64], skip: &[(u64, u64)]) -> Result<Option<u64>> {
    let mut seen = HashSet::new();
    let mut found = HashSet::new();
    for r in rw {
        let mut at = r.start;
        while at + 8 <= r.end() {
            if let Some(&(_, e)) = skip.iter().find(|(s, e)| (*s..*e).contains(&at)) {
                at = e;
                continue;
            }
            let w = r.u64(at).unwrap_or(0);
            at += 8;
            if w == 0 || w % 8 != 0 || rw.iter().any(|x| (x.start..x.end()).contains(&w)) || !seen.insert(w) {
                continue;
            }
            let Some(m) = mem.map_of(w) else { continue };
            if !m.write || w + TC > m.end {
                continue;
            }
            let Ok(b) = Region::read(mem, w, w + TC) else { continue };
            if b.u64(w + TC_PREV) == Some(0) && is_cache(&b, w, sizes) {
                found.insert(w);
            }
        }
    }
    let mut found: Vec<u64> = found.into_iter().collect();
    found.sort_unstable();
    if found.len() > 1 {
        found.retain(|&t| linked(mem, t));
    }
    match found.as_slice() {
        [] => Ok(None),
        [t] => Ok(Some(*t)),
        many => Err(problem(many[0], Problem::Uncertain { what: "thread cache list", candidates: many.to_vec() })),
    }
}

/// One span, as read.
#[derive(Clone, Copy)]
struct Span {
    at: u64,
    start: u64,
    len: u64,
    objects: u64,
    refcount: u64,
    class: u64,
    location: u64,
}

/// The heap's bytes, for the free lists' links.
struct Heap<'a> {
    regions: &'a [Region],
}

impl Heap<'_> {
    fn word(&self, a: u64) -> Option<u64> {
        let i = self.regions.partition_point(|r| r.start <= a).checked_sub(1)?;
        self.regions[i].u64(a)
    }
}

/// The small spans' free objects, marked.
struct Free {
    /// Small in-use spans by their first address: index.
    by_addr: BTreeMap<u64, usize>,
    spans: Vec<Span>,
    sizes: Vec<u64>,
    bits: Vec<Vec<u64>>,
    /// Per span: free in its own list, free in the caches.
    own: Vec<u64>,
    cached: Vec<u64>,
}

impl Free {
    /// Marks `a`, free, of class `class` (0: whatever its span's).
    fn mark(&mut self, a: u64, class: u64, in_cache: bool) -> Result<()> {
        let bad = |why| problem(a, Problem::BadList { why });
        let (&base, &i) = self.by_addr.range(..=a).next_back().ok_or(bad("an object outside every small span"))?;
        let s = self.spans[i];
        if a >= base + (s.len << PAGE_SHIFT) {
            return Err(bad("an object outside every small span"));
        }
        if class != 0 && s.class != class {
            return Err(bad("an object in a span of another size class"));
        }
        let size = self.sizes[s.class as usize];
        let k = (a - base) / size;
        if (a - base) % size != 0 || k >= (s.len << PAGE_SHIFT) / size {
            return Err(bad("an object not at an object's start"));
        }
        let (w, b) = ((k / 64) as usize, 1u64 << (k % 64));
        if self.bits[i][w] & b != 0 {
            return Err(bad("an object free twice (a loop, or a list crossing another)"));
        }
        self.bits[i][w] |= b;
        if in_cache {
            self.cached[i] += 1;
        } else {
            self.own[i] += 1;
        }
        Ok(())
    }
}

/// Reads the spans the page map points to: (span address, pages seen).
fn spans(mem: &dyn Memory, f: &Found) -> Result<Vec<Span>> {
    if f.leaves.len() > MAX_LEAVES {
        return Err(problem(f.root, Problem::BadSpan { why: "the page map has more leaves than an address space" }));
    }
    let leaf_len = (1u64 << LEAF_BITS) * 8;
    // Page: the span its entry names.
    let mut entries: HashMap<u64, u64> = HashMap::new();
    for &(i1, leaf) in &f.leaves {
        let bad = || problem(leaf, Problem::BadSpan { why: "a page-map leaf is not mapped" });
        if leaf % 8 != 0 || mem.map_of(leaf).is_none_or(|m| leaf + leaf_len > m.end) {
            return Err(bad());
        }
        for (a, b) in mem.present(leaf, leaf + leaf_len) {
            let bytes = mem.bytes(a, b - a).map_err(|_| bad())?;
            for (k, w) in bytes.chunks_exact(8).enumerate() {
                let s = u64::from_le_bytes(w.try_into().unwrap_or_default());
                if s == 0 {
                    continue;
                }
                entries.insert((i1 << LEAF_BITS) | ((a - leaf) / 8 + k as u64), s);
            }
        }
    }
    // The spans' descriptors, read by runs.
    let mut ptrs: Vec<u64> = entries.values().copied().collect::<HashSet<u64>>().into_iter().collect();
    ptrs.sort_unstable();
    let mut out = Vec::with_capacity(ptrs.len());
    let mut i = 0;
    while i < ptrs.len() {
        let a = ptrs[i];
        let bad = |why| problem(a, Problem::BadSpan { why });
        let m = mem.map_of(a).filter(|m| a % 8 == 0 && a + SPAN <= m.end).ok_or(bad("the page map points outside memory"))?;
        let mut j = i + 1;
        while j < ptrs.len() && ptrs[j] + SPAN <= m.end && ptrs[j] - ptrs[j - 1] < 4096 {
            j += 1;
        }
        let r = Region::read(mem, a, ptrs[j - 1] + SPAN).map_err(|_| bad("unreadable"))?;
        for &p in &ptrs[i..j] {
            let bad = |why| problem(p, Problem::BadSpan { why });
            let w = |o| r.u64(p + o).ok_or(bad("unreadable"));
            let bits = w(SPAN_BITS)?;
            let s = Span {
                at: p,
                start: w(0)?,
                len: w(8)?,
                objects: w(SPAN_OBJECTS)?,
                refcount: bits & 0xffff,
                class: (bits >> 16) & 0xff,
                location: (bits >> 24) & 3,
            };
            // A descriptor is the span its first and last pages name: other
            // entries naming it are stale (tcmalloc rewrites only a span's
            // ends when spans merge, and reuses freed descriptors).
            let names = |page: u64| entries.get(&page) == Some(&p);
            let end = match s.start.checked_add(s.len) {
                Some(e) if s.len > 0 && e <= 1 << (48 - PAGE_SHIFT) && names(s.start) && names(e - 1) => e,
                _ => continue,
            };
            if s.location == 3 {
                return Err(bad("its location is none of tcmalloc's"));
            }
            if s.location == 0 && s.class != 0 {
                if s.class as usize >= f.sizes.len() || s.len != f.pages[s.class as usize] {
                    return Err(bad("its size class is not one of the table's, or not its pages"));
                }
                if !(s.start..end).all(names) {
                    return Err(bad("a page of a small span does not point to it"));
                }
            }
            out.push(s);
        }
        i = j;
    }
    out.sort_unstable_by_key(|s| s.start);
    if let Some(w) = out.windows(2).find(|w| w[0].start + w[0].len > w[1].start) {
        return Err(problem(w[1].at, Problem::BadSpan { why: "two spans overlap" }));
    }
    Ok(out)
}

/// Walks the heap: every object in use of every small span, every large
/// span whole.
pub fn walk_heap(mem: &dyn Memory, f: &Found) -> Result<GlibcHeap> {
    let spans = spans(mem, f)?;
    let in_use: Vec<Span> = spans.iter().copied().filter(|s| s.location == 0).collect();
    // The memory of the spans in use, in runs, read once.
    let mut regions: Vec<Region> = Vec::new();
    let mut run: Option<(u64, u64)> = None;
    let mut runs = Vec::new();
    for s in &in_use {
        let (a, b) = (s.start << PAGE_SHIFT, (s.start + s.len) << PAGE_SHIFT);
        match run {
            Some((x, y)) if y == a && mem.map_of(x).is_some_and(|m| b <= m.end) => run = Some((x, b)),
            _ => {
                if let Some(r) = run.take() {
                    runs.push(r);
                }
                run = Some((a, b));
            }
        }
    }
    runs.extend(run);
    for (a, b) in runs {
        let r = Region::read(mem, a, b).map_err(|_| problem(a, Problem::BadSpan { why: "its pages are not mapped" }))?;
        regions.push(r);
    }
    let heap = Heap { regions: &regions };
    let small: Vec<Span> = in_use.iter().copied().filter(|s| s.class != 0).collect();
    let mut free = Free {
        by_addr: small.iter().enumerate().map(|(i, s)| (s.start << PAGE_SHIFT, i)).collect(),
        bits: small.iter().map(|s| vec![0u64; ((s.len << PAGE_SHIFT) / f.sizes[s.class as usize]).div_ceil(64) as usize]).collect(),
        own: vec![0; small.len()],
        cached: vec![0; small.len()],
        spans: small.clone(),
        sizes: f.sizes.clone(),
    };
    // Each small span's own free list, at most its object count long.
    for (i, s) in small.iter().enumerate() {
        let nobj = (s.len << PAGE_SHIFT) / f.sizes[s.class as usize];
        let mut o = s.objects;
        let mut n = 0;
        while o != 0 {
            n += 1;
            if n > nobj {
                return Err(problem(s.at, Problem::BadList { why: "a span's list is longer than its objects (a loop)" }));
            }
            free.mark(o, s.class, false)?;
            o = heap.word(o).ok_or(problem(o, Problem::BadList { why: "unreadable" }))?;
        }
        let _ = i;
    }
    // The transfer caches: batches of the class's batch size, to their
    // tails.
    let c = &f.central_bytes;
    for cl in 1..f.sizes.len() as u64 {
        let at = f.central + cl * CENTRAL;
        let used = u32_at(c, at + C_USED).unwrap_or(0);
        if used > MAX_SLOTS {
            return Err(problem(at, Problem::BadList { why: "a transfer cache holds more batches than its slots" }));
        }
        for k in 0..used {
            let (head, tail) = (c.u64(at + C_SLOTS + k * 16).unwrap_or(0), c.u64(at + C_SLOTS + k * 16 + 8).unwrap_or(0));
            let mut o = head;
            let mut n = 0;
            loop {
                n += 1;
                if o == 0 || n > f.to_move[cl as usize] {
                    return Err(problem(at, Problem::BadList { why: "a transfer batch does not reach its tail within its batch size" }));
                }
                free.mark(o, cl, true)?;
                if o == tail {
                    break;
                }
                o = heap.word(o).ok_or(problem(o, Problem::BadList { why: "unreadable" }))?;
            }
        }
    }
    // The threads' caches: each list exactly its length long.
    let mut caches = Vec::new();
    let mut seen = HashSet::new();
    let mut t = f.threads.unwrap_or(0);
    let mut prev = 0;
    while t != 0 {
        let bad = |why| problem(t, Problem::BadList { why });
        if !seen.insert(t) || seen.len() > MAX_THREADS {
            return Err(bad("the thread caches' list loops"));
        }
        let b = Region::read(mem, t, t + TC).map_err(|_| bad("a thread cache is not mapped"))?;
        if b.u64(t + TC_PREV) != Some(prev) || !is_cache(&b, t, &f.sizes) {
            return Err(bad("a thread cache is not one (its lists' sizes, its link back)"));
        }
        for cl in 1..f.sizes.len() as u64 {
            let l = t + cl * FL;
            let len = u32_at(&b, l + FL_LENGTH).unwrap_or(0);
            let mut o = b.u64(l).unwrap_or(0);
            let mut n = 0;
            while o != 0 {
                n += 1;
                if n > len || n > MAX_LIST {
                    return Err(bad("a thread cache's list is longer than its length (a loop)"));
                }
                free.mark(o, cl, true)?;
                o = heap.word(o).ok_or(problem(o, Problem::BadList { why: "unreadable" }))?;
            }
            if n != len {
                return Err(bad("a thread cache's list is shorter than its length"));
            }
        }
        caches.push(t);
        prev = t;
        t = b.u64(t + TC_NEXT).unwrap_or(0);
    }
    // Objects handed out of a span are live or cached; the rest are on its
    // list.
    let mut live = Vec::new();
    for (i, s) in small.iter().enumerate() {
        let size = f.sizes[s.class as usize];
        let nobj = (s.len << PAGE_SHIFT) / size;
        if free.own[i] + s.refcount != nobj || free.cached[i] > s.refcount {
            return Err(problem(s.at, Problem::BadSpan { why: "its free objects and its count of objects handed out do not add up" }));
        }
        let base = s.start << PAGE_SHIFT;
        for k in 0..nobj {
            if free.bits[i][(k / 64) as usize] & (1 << (k % 64)) == 0 {
                live.push(Chunk { mem: base + k * size, usable: size });
            }
        }
    }
    if f.threads.is_none() && small.iter().any(|s| s.refcount > 0) {
        return Err(problem(f.root, Problem::NotFound { what: "thread cache list" }));
    }
    // Large spans (and sampled objects): one block each.
    for s in in_use.iter().filter(|s| s.class == 0) {
        live.push(Chunk { mem: s.start << PAGE_SHIFT, usable: s.len << PAGE_SHIFT });
    }
    // tcmalloc's own objects (its `MallocExtension`s, allocated through
    // itself at start-up): their first word is a vtable of the library's.
    let heap = Heap { regions: &regions };
    live.retain(|c| !heap.word(c.mem).is_some_and(|w| f.relro.iter().any(|&(a, b)| (a..b).contains(&w))));
    live.sort_unstable();
    let cached_free: u64 = free.cached.iter().sum::<u64>() + free.own.iter().sum::<u64>();
    // Every span's pages (free ones too) are heap, never roots.
    let mut heap_ranges: Vec<(u64, u64)> = Vec::new();
    for s in &spans {
        let (a, b) = (s.start << PAGE_SHIFT, (s.start + s.len) << PAGE_SHIFT);
        match heap_ranges.last_mut() {
            Some(l) if l.1 == a => l.1 = b,
            _ => heap_ranges.push((a, b)),
        }
    }
    // tcmalloc's metadata (span descriptors, thread caches, the page map's
    // leaves, in use or freed) is the allocator's, never roots: a freed
    // descriptor still points into pages since carved into blocks.
    let metadata = metadata(mem, f, &spans, &heap_ranges, &caches)?;
    heap_ranges.extend(metadata);
    heap_ranges.sort_unstable();
    Ok(GlibcHeap {
        live,
        arenas: in_use.len(),
        heap_ranges,
        mmapped: Vec::new(),
        regions,
        cached_free,
        version: (0, 0),
        version_inferred: false,
        static_arena: None,
        warnings: Vec::new(),
        allocator: format!("tcmalloc {}", f.version),
    })
}

/// tcmalloc's metadata outside its spans' pages (`heap`, in address
/// order), merged: the span descriptors (those the page map names, those
/// on the span allocator's free list, the allocator's current chunk up to
/// its next free byte), the thread caches (`caches`, and those freed), the
/// page map's leaves.
fn metadata(mem: &dyn Memory, f: &Found, spans: &[Span], heap: &[(u64, u64)], caches: &[u64]) -> Result<Vec<(u64, u64)>> {
    let live: HashSet<u64> = spans.iter().map(|s| s.at).collect();
    // The span allocator: the one place of its shape counting the page
    // map's descriptors (the node allocator of the page heap's sets has
    // objects of the same size).
    let counted: Vec<&Pha> = f.span_allocators.iter().filter(|p| p.inuse == live.len() as u64 + SPANS_RESERVED).collect();
    let span_pha = match counted.as_slice() {
        [p] => *p,
        [] if f.span_allocators.is_empty() => return Err(problem(f.root, Problem::NotFound { what: "span allocator" })),
        [] => return Err(problem(f.root, Problem::BadSpan { why: "no span allocator counts the page map's span descriptors" })),
        many => {
            return Err(problem(many[0].at, Problem::Uncertain { what: "span allocator", candidates: many.iter().map(|p| p.at).collect() }))
        }
    };
    let mut out: Vec<(u64, u64)> = Vec::new();
    let mut add = |p: &Pha, size: u64, live: &HashSet<u64>| -> Result<()> {
        for o in freed(mem, p, size, heap, live)? {
            out.push((o, o + size));
        }
        out.push((p.area + p.avail - PHA_CHUNK, p.area));
        Ok(())
    };
    add(span_pha, SPAN, &live)?;
    let live_caches: HashSet<u64> = caches.iter().copied().collect();
    let cache_pha = f.cache_allocators.iter().filter(|p| p.inuse == caches.len() as u64).collect::<Vec<_>>();
    if let [p] = cache_pha.as_slice() {
        add(p, TC, &live_caches)?;
    }
    out.extend(live.iter().map(|&a| (a, a + SPAN)));
    out.extend(caches.iter().map(|&a| (a, a + TC)));
    let leaf_len = (1u64 << LEAF_BITS) * 8;
    out.extend(f.leaves.iter().map(|&(_, l)| (l, l + leaf_len)));
    out.sort_unstable();
    // Metadata objects less than a page apart lie in one of tcmalloc's
    // chunks (no mapping of the program's fits between them): one range.
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (a, b) in out {
        match merged.last_mut() {
            Some(l) if a <= l.1 + 128 => l.1 = l.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    Ok(merged)
}

/// Walks the heap of tcmalloc when found (`find`'s answer).
pub fn walk_found(mem: &dyn Memory, f: Option<&Found>) -> Result<GlibcHeap> {
    match f {
        Some(f) => walk_heap(mem, f),
        None => Err(problem(0, Problem::NotFound { what: "page heap" })),
    }
}
