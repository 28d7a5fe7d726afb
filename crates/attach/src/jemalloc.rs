//! jemalloc's heap (5.3), walked from outside the process: the extents its
//! radix tree (the emap's rtree) maps, the live regions of each slab (its
//! bitmap), each large extent as one allocation; the regions the threads'
//! caches (tcaches) hold are free, not live.
//!
//! Nothing of jemalloc's is found by name: Debian's `libjemalloc.so.2`
//! exports none of its structures. The module is the one whose read-only
//! memory holds jemalloc's version string (`5.3.0-0-g<commit>`); the rtree's
//! root array, in that module's data, is found through a leaf it points to
//! (the first page a leaf maps names the root slot that must hold it); the
//! threads' caches through the arenas' lists of them, each checked by its
//! links back (the cache's arena, its bins, its `tcache`). Every pointer
//! and size read is data: checked against the mappings and against each
//! other (the rtree's copy of an extent's state and size class against the
//! extent's, a slab's bitmap against its free count) before it is used,
//! and each walk is bounded. A heap that does not add up is refused where
//! it stops making sense; a layout that is not 5.3's is refused by version.

use crate::error::{Error, Result};
use crate::glibc::{Chunk, GlibcHeap};
use crate::memory::{Map, Memory, Region};
use std::collections::{HashMap, HashSet};
use std::fmt;

/// jemalloc's heap does not add up, or its version is not read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Problem {
    /// A jemalloc whose layout this version does not read.
    Unsupported {
        /// Its version string.
        version: String,
        /// The module it is in.
        module: String,
    },
    /// No place in the module's data has the rtree's shape.
    NoRtree {
        /// The module.
        module: String,
    },
    /// Several places have it.
    RtreeUncertain {
        /// Their addresses.
        candidates: Vec<u64>,
    },
    /// An rtree node points outside the process's memory (at: the slot).
    BadLeaf {
        /// What it points to.
        leaf: u64,
    },
    /// An rtree leaf names an extent that is not one (at: the extent).
    BadExtent {
        /// The page the leaf maps.
        page: u64,
        /// What does not add up.
        why: &'static str,
    },
    /// A slab's bitmap says another number of free regions than its
    /// extent's count (at: the extent).
    SlabBitmap {
        /// Free regions the bitmap says.
        bitmap: u64,
        /// Free regions the extent says.
        nfree: u64,
        /// Regions of the slab.
        nregs: u64,
    },
    /// A thread cache's list of caches loops or leaves its arena (at: the
    /// cache).
    TcacheRing {
        /// The arena.
        arena: u64,
    },
    /// A thread cache holds a region twice (at: the region).
    CachedTwice {
        /// The cache's bins.
        bins: u64,
    },
    /// A thread cache's bin is not one (at: the bin).
    BadBin {
        /// What does not add up.
        why: &'static str,
    },
}

impl Problem {
    /// Whether the heap is damaged (not a refusal of a layout or a version).
    pub fn is_damage(&self) -> bool {
        !matches!(self, Problem::Unsupported { .. } | Problem::NoRtree { .. } | Problem::RtreeUncertain { .. })
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Unsupported { version, module } => {
                write!(f, "jemalloc {version} ({module}): a heap layout this version of heapdump does not know (it reads jemalloc 5.3)")
            }
            Problem::NoRtree { module } => write!(
                f,
                "jemalloc's extent map (its rtree) was not found in {module}'s data: not jemalloc 5.3's layout, or jemalloc not yet started"
            ),
            Problem::RtreeUncertain { candidates } => {
                write!(f, "jemalloc's extent map is not certain: {} places have its shape (", candidates.len())?;
                for (i, a) in candidates.iter().enumerate() {
                    write!(f, "{}{a:#x}", if i == 0 { "" } else { ", " })?;
                }
                write!(f, ")")
            }
            Problem::BadLeaf { leaf } => write!(f, "jemalloc's rtree node points to {leaf:#x}, not a leaf in the process's memory"),
            Problem::BadExtent { page, why } => write!(f, "jemalloc's rtree maps page {page:#x} to an extent that {why}"),
            Problem::SlabBitmap { bitmap, nfree, nregs } => {
                write!(f, "the slab's bitmap has {bitmap} free regions of {nregs}, its extent says {nfree}")
            }
            Problem::TcacheRing { arena } => write!(f, "the list of thread caches of arena {arena:#x} is broken"),
            Problem::CachedTwice { bins } => write!(f, "a region is held twice in thread caches (bins at {bins:#x})"),
            Problem::BadBin { why } => write!(f, "a thread cache's bin {why}"),
        }
    }
}

/// The error for a problem at `at`.
fn bad(at: u64, what: Problem) -> Error {
    Error::Jemalloc { at, what }
}

/// The versions whose layout is read.
const READ: &[&str] = &["5.3."];

/// `EDATA_ALIGNMENT`: extents' descriptors are 128 bytes, so aligned.
const EDATA_ALIGN: u64 = 128;
/// `sizeof(edata_t)`.
const EDATA_SIZE: u64 = 128;
/// The page (LG_PAGE 12: x86-64's).
const PAGE: u64 = 4096;

/// The rtree's shape, which jemalloc's `configure` fixes from the virtual
/// address bits of the machine it is built on (`LG_VADDR`, from CPUID): 48
/// gives two levels of 18 bits and leaves of one word a page (the
/// descriptor's address, its state and size class packed in it); 57 (a
/// processor with five-level paging: Intel's servers since Ice Lake, AMD's
/// since Zen 4) three levels of 15 bits and leaves of two words (the
/// descriptor's address, then the state and size class), as a jemalloc
/// built from source there has it (tikv-jemallocator's, which Rust
/// services link).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    /// `LG_VADDR`.
    lg_vaddr: u32,
    /// Levels: 2 or 3.
    height: usize,
    /// The bits each level distinguishes, root first (`rtree_levels`).
    bits: [u32; 3],
    /// One word a leaf slot (`RTREE_LEAF_COMPACT`).
    compact: bool,
}

/// The shapes looked for.
const LAYOUTS: [Layout; 2] = [Layout::of(48), Layout::of(57)];

impl Layout {
    const fn of(lg_vaddr: u32) -> Layout {
        // RTREE_NSB: the page number's bits, split as rtree_levels does
        // (a remainder to the lower levels).
        let nsb = lg_vaddr - 12;
        let (height, bits) = if nsb <= 36 {
            (2, [nsb / 2, nsb / 2 + nsb % 2, 0])
        } else {
            (3, [nsb / 3, nsb / 3 + nsb % 3 / 2, nsb / 3 + nsb % 3 - nsb % 3 / 2])
        };
        // Compact when the size class fits above the address: 64 -
        // LG_VADDR >= LG_CEIL(SC_NSIZES), 8.
        Layout { lg_vaddr, height, bits, compact: 64 - lg_vaddr >= 8 }
    }
    /// Bytes of a leaf slot.
    fn elm(self) -> u64 {
        if self.compact {
            8
        } else {
            16
        }
    }
    /// Bits a leaf distinguishes.
    fn leaf_bits(self) -> u32 {
        self.bits[self.height - 1]
    }
    /// Slots of a leaf.
    fn leaf_slots(self) -> u64 {
        1 << self.leaf_bits()
    }
    /// Bytes of a leaf.
    fn leaf_bytes(self) -> u64 {
        self.leaf_slots() * self.elm()
    }
    /// Bytes of the root array (in the module's data).
    fn root_bytes(self) -> u64 {
        8 << self.bits[0]
    }
    /// Slots of a node between the root and the leaves (three levels).
    fn node_slots(self) -> u64 {
        1 << self.bits[1]
    }
    /// The leaf slot at `off` of `b`; `None` when empty.
    fn slot(self, b: &[u8], off: usize) -> Option<Slot> {
        if self.compact {
            // Bits LG_VADDR..: the size class; 2..5: the state; 0: slab;
            // the rest the descriptor's address (128-aligned).
            let bits = word(b, off);
            (bits != 0).then(|| Slot {
                edata: bits & ((1 << self.lg_vaddr) - 1) & !(EDATA_ALIGN - 1),
                state: (bits >> 2) & 7,
                szind: bits >> self.lg_vaddr,
                slab: bits & 1 != 0,
            })
        } else {
            // The descriptor, then 32 bits: the size class from bit 5,
            // the state in 2..5, slab in 0.
            let (edata, m) = (word(b, off), word(b, off + 8) & 0xffff_ffff);
            (edata != 0 || m != 0).then_some(Slot { edata, state: (m >> 2) & 7, szind: m >> 5, slab: m & 1 != 0 })
        }
    }
}
/// Small size classes (`SC_NBINS` with 4 KiB pages).
const NBINS: u64 = 36;
/// Size classes (`SC_NSIZES`).
const NSIZES: u64 = 232;
/// Most regions in a slab (`1 << SC_LG_SLAB_MAXREGS`).
const MAX_REGS: u64 = 512;
/// Most thread-cache bins (`TCACHE_NBINS_MAX`).
const MAX_BINS: u64 = 232;
/// The words around a tcache's bin stacks.
const PRECEDING_JUNK: u64 = 0x7a7a_7a7a_7a7a_7a7a;
const TRAILING_JUNK: u64 = 0xa7a7_a7a7_a7a7_a7a7;
/// How far into an arena its list of thread caches is looked for (past
/// its statistics).
const ARENA_SCAN: u64 = 64 << 10;
/// The most thread caches one arena's list is followed through.
const MAX_TCACHES: usize = 1 << 16;
/// How far below a thread's pointer its static TLS (where a statically
/// linked jemalloc's `tsd`, and in it the thread's cache, lies) is looked
/// through.
const TLS_SCAN: u64 = 64 << 10;

/// An extent's state (`extent_state_t`): in use.
const ACTIVE: u64 = 0;

/// jemalloc in a process: the module holding it and its version.
#[derive(Clone, Debug)]
pub struct Found {
    /// The module's path.
    pub module: String,
    /// Its version string's release (`5.3.0`).
    pub version: String,
    /// Linked into the executable (a static copy, `je_`- or
    /// `_rjem_`-prefixed beside glibc's malloc, or the only malloc).
    pub in_exe: bool,
    /// The module's writable memory: its data and, after it, its bss.
    rw: Vec<(u64, u64)>,
}

/// The release in a version string `X.Y.Z-N-g<40 hex>` at the start of
/// `b`.
fn version_at(b: &[u8]) -> Option<String> {
    let text: Vec<u8> = b.iter().take(80).copied().take_while(|c| c.is_ascii_graphic()).collect();
    let s = std::str::from_utf8(&text).ok()?;
    let (rel, rest) = s.split_once('-')?;
    let parts: Vec<&str> = rel.split('.').collect();
    if parts.len() != 3 || parts.iter().any(|p| p.is_empty() || p.len() > 3 || !p.bytes().all(|c| c.is_ascii_digit())) {
        return None;
    }
    let (n, g) = rest.split_once("-g")?;
    if n.is_empty() || !n.bytes().all(|c| c.is_ascii_digit()) || g.len() < 40 || !g[..40].bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    Some(rel.to_string())
}

/// jemalloc's version string in read-only memory `maps`: a `-g` followed
/// by a commit, after a release, beside jemalloc's message prefix.
fn version_in(mem: &dyn Memory, maps: &[&Map], need_prefix: bool) -> Option<String> {
    let mut version = None;
    let mut prefix = !need_prefix;
    for m in maps.iter().filter(|m| m.read && !m.write && !m.exec) {
        // Read-only data: at most 64 MiB of it.
        let Ok(b) = mem.bytes(m.start, (m.end - m.start).min(64 << 20)) else { continue };
        prefix = prefix || memfind(&b, b"<jemalloc>: ").is_some();
        if version.is_none() {
            version = version_in_bytes(&b);
        }
        if version.is_some() && prefix {
            break;
        }
    }
    version.filter(|_| prefix)
}

/// The first jemalloc version string in `b`.
fn version_in_bytes(b: &[u8]) -> Option<String> {
    let mut from = 0;
    while let Some(i) = memfind(&b[from..], b"-g") {
        let at = from + i;
        // Back to the release's start.
        let start = (at.saturating_sub(12)..at).find(|&s| version_at(&b[s..]).is_some() && (s == 0 || !b[s - 1].is_ascii_graphic()));
        if let Some(v) = start.and_then(|s| version_at(&b[s..])) {
            return Some(v);
        }
        from = at + 2;
    }
    None
}

fn memfind(h: &[u8], n: &[u8]) -> Option<usize> {
    memchr::memmem::find(h, n)
}

/// The jemalloc the process allocates with: a module named for it
/// (`libjemalloc.so.2`, loaded or preloaded); `None` when there is none.
/// One whose version this does not read is refused.
pub fn find(mem: &dyn Memory) -> Result<Option<Found>> {
    let maps = mem.maps();
    let name = |m: &Map| m.file().and_then(|p| p.rsplit('/').next()).unwrap_or("").to_string();
    let named = maps.iter().find(|m| name(m).contains("jemalloc"));
    // Else the executable (the first module mapped), when its read-only
    // data holds jemalloc's version and its messages' prefix.
    let in_exe = named.is_none();
    let Some(first) = named.or_else(|| maps.iter().find(|m| m.offset == 0 && m.file().is_some())) else { return Ok(None) };
    let path = first.file().unwrap_or_default().to_string();
    let own: Vec<&Map> = maps.iter().filter(|m| m.file() == Some(path.as_str())).collect();
    if in_exe {
        return Ok(static_copy(mem, &own, &path).filter(|f| READ.iter().any(|r| f.version.starts_with(r))));
    }
    // A core leaves read-only data out: the module's file on this
    // machine then (its first 64 MiB).
    let version = version_in(mem, &own, false).or_else(|| {
        use std::io::Read;
        let f = mem.host_file(&path)?.ok()?;
        let mut b = Vec::new();
        f.take(64 << 20).read_to_end(&mut b).ok()?;
        version_in_bytes(&b)
    });
    let Some(version) = version else { return Ok(None) };
    if !READ.iter().any(|r| version.starts_with(r)) {
        return Err(bad(first.start, Problem::Unsupported { version, module: path }));
    }
    Ok(Some(Found { module: path, version, in_exe: false, rw: writable(maps, &own) }))
}

/// A static copy of jemalloc in the executable's mappings `own`.
fn static_copy(mem: &dyn Memory, own: &[&Map], path: &str) -> Option<Found> {
    let version = version_in(mem, own, true).or_else(|| {
        // A core leaves read-only data out: the file on this machine.
        use std::io::Read;
        let f = mem.host_file(path)?.ok()?;
        let mut b = Vec::new();
        f.take(256 << 20).read_to_end(&mut b).ok()?;
        memfind(&b, b"<jemalloc>: ")?;
        version_in_bytes(&b)
    })?;
    Some(Found { module: path.to_string(), version, in_exe: true, rw: writable(mem.maps(), own) })
}

/// A module's data, and the bss the kernel maps anonymous right after it.
fn writable(maps: &[Map], own: &[&Map]) -> Vec<(u64, u64)> {
    let mut rw: Vec<(u64, u64)> = Vec::new();
    for m in own.iter().filter(|m| m.write) {
        rw.push((m.start, m.end));
        let i = maps.partition_point(|x| x.start < m.end);
        if let Some(b) = maps.get(i).filter(|b| b.start == m.end && b.anonymous() && b.write && b.read) {
            rw.push((b.start, b.end));
        }
    }
    rw
}

/// Adds glibc's heap `g` (the malloc a static jemalloc's program also
/// uses, through its C libraries) to jemalloc's `h`.
pub fn add_glibc(h: &mut GlibcHeap, g: GlibcHeap) {
    h.live.extend(g.live);
    h.live.sort_unstable();
    h.heap_ranges.extend(g.heap_ranges);
    h.heap_ranges.sort_unstable();
    h.mmapped.extend(g.mmapped);
    h.regions.extend(g.regions);
    h.cached_free += g.cached_free;
    h.warnings.extend(g.warnings);
    h.static_arena = g.static_arena;
    h.allocator = format!("{} and {}", h.allocator, g.allocator);
}

/// jemalloc's usable size of size class `i` (`sz_index2size`): 8, then
/// 16 to 64 by 16, then four classes to each doubling.
pub fn class_size(i: u64) -> Option<u64> {
    match i {
        0 => Some(8),
        1..=4 => Some(16 * i),
        _ if i < NSIZES => {
            let (g, k) = ((i - 5) / 4, (i - 5) % 4 + 1);
            1u64.checked_shl(6 + g as u32)?.checked_add(k.checked_mul(1u64.checked_shl(4 + g as u32)?)?)
        }
        _ => None,
    }
}

/// An rtree leaf slot: the extent's descriptor, its state, size class and
/// whether it is a slab.
#[derive(Clone, Copy)]
struct Slot {
    edata: u64,
    state: u64,
    szind: u64,
    slab: bool,
}

/// An extent's descriptor, read.
struct Edata {
    bits: u64,
    addr: u64,
    size: u64,
    bitmap: [u64; 8],
}

impl Edata {
    fn state(&self) -> u64 {
        (self.bits >> 17) & 7
    }
    fn szind(&self) -> u64 {
        (self.bits >> 20) & 0xff
    }
    fn slab(&self) -> bool {
        (self.bits >> 12) & 1 != 0
    }
    fn nfree(&self) -> u64 {
        (self.bits >> 28) & 0x3ff
    }
    fn base(&self) -> u64 {
        self.addr & !(PAGE - 1)
    }
}

fn word(b: &[u8], off: usize) -> u64 {
    b.get(off..off + 8).map_or(0, |w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])))
}

/// The memory of `[start, end)` the process touched, read.
fn touched(mem: &dyn Memory, start: u64, end: u64) -> Vec<(u64, Vec<u8>)> {
    mem.present(start, end).into_iter().filter_map(|(a, b)| Some((a, mem.bytes(a, b - a).ok()?))).collect()
}

/// The pages of `[start, end)` the process touched, read one at a time
/// (a search that stops at a table's first filled slot reads no more).
fn pages_of(mem: &dyn Memory, start: u64, end: u64) -> impl Iterator<Item = (u64, Vec<u8>)> + '_ {
    mem.present(start, end)
        .into_iter()
        .flat_map(|(a, b)| (a..b).step_by(4096).map(move |p| (p, (p + 4096).min(b))))
        .filter_map(|(p, e)| Some((p, mem.bytes(p, e - p).ok()?)))
}

/// Whether `[a, a + len)` lies in anonymous writable memory.
fn anon(mem: &dyn Memory, a: u64, len: u64) -> bool {
    let Some(end) = a.checked_add(len) else { return false };
    let mut at = a;
    while at < end {
        match mem.map_of(at) {
            Some(m) if m.anonymous() && m.write && m.read => at = m.end,
            _ => return false,
        }
    }
    true
}

fn read_edata(mem: &dyn Memory, e: u64) -> Option<Edata> {
    if e == 0 || e % EDATA_ALIGN != 0 || !anon(mem, e, EDATA_SIZE) {
        return None;
    }
    let b = mem.bytes(e, EDATA_SIZE).ok()?;
    let mut bitmap = [0u64; 8];
    for (i, g) in bitmap.iter_mut().enumerate() {
        *g = word(&b, 64 + 8 * i);
    }
    Some(Edata { bits: word(&b, 0), addr: word(&b, 8), size: word(&b, 16) & !(PAGE - 1), bitmap })
}

/// The page numbers' high part a leaf of layout `l` maps (the page
/// number shifted right by the leaf's bits): from the first slot it fills,
/// whose extent says which page that slot maps. `None`: not a leaf.
fn prefix_of(mem: &dyn Memory, l: Layout, leaf: u64) -> Option<u64> {
    let bytes = l.leaf_bytes();
    if leaf % 64 != 0 || !anon(mem, leaf, bytes) || mem.map_of(leaf).is_none_or(|m| m.end < leaf + bytes) {
        return None;
    }
    // Read a page at a time up to the first slot filled: what is not a
    // leaf stops at its first word.
    let slots = l.leaf_slots();
    for (a, page_bytes) in pages_of(mem, leaf, leaf + bytes) {
        for i in 0..page_bytes.len() / l.elm() as usize {
            let Some(s) = l.slot(&page_bytes, i * l.elm() as usize) else { continue };
            // A slot cleared when its extent left names no descriptor.
            if s.edata == 0 {
                continue;
            }
            let k = (a - leaf) / l.elm() + i as u64;
            let e = read_edata(mem, s.edata)?;
            if e.size == 0 || e.state() != s.state {
                return None;
            }
            // The page this slot maps lies in the extent (its first or
            // last page, or a slab's any), and its index is k.
            let first = e.base() >> 12;
            let last = first.checked_add(e.size / PAGE)? - 1;
            let page =
                if first & (slots - 1) <= k { (first & !(slots - 1)) | k } else { ((first >> l.leaf_bits()) + 1) << l.leaf_bits() | k };
            if page < first || page > last {
                return None;
            }
            return Some(page >> l.leaf_bits());
        }
    }
    None
}

/// The index in the root array of what `v` is, under layout `l`: a leaf
/// (two levels), or a node of leaves whose first leaf sits in its slot
/// (three levels). `None`: neither.
fn root_slot_of(mem: &dyn Memory, l: Layout, v: u64) -> Option<u64> {
    if l.height == 2 {
        return prefix_of(mem, l, v);
    }
    let bytes = l.node_slots() * 8;
    if v % 64 != 0 || !anon(mem, v, bytes) {
        return None;
    }
    // Its first slot filled, read a page at a time (as a leaf is: each
    // word of the module's data pointing into a large anonymous mapping
    // is tried while the target is held, and most stop at their first).
    let (i, leaf) = pages_of(mem, v, v + bytes).find_map(|(p, b)| {
        let k = b.chunks_exact(8).position(|w| w.iter().any(|&x| x != 0))?;
        Some(((p - v) / 8 + k as u64, word(&b, 8 * k)))
    })?;
    let prefix = prefix_of(mem, l, leaf)?;
    (prefix & (l.node_slots() - 1) == i).then_some(prefix >> l.bits[1])
}

/// The rtree's root array in the module's data and its layout: the one
/// place where what its slots point to sits in its slot.
fn find_root(mem: &dyn Memory, f: &Found) -> Result<(u64, Layout)> {
    let mut found: Vec<(u64, Layout)> = Vec::new();
    for l in LAYOUTS {
        let mut tried: HashSet<u64> = HashSet::new();
        for &(s, e) in &f.rw {
            for (a, bytes) in touched(mem, s, e) {
                for (i, w) in bytes.chunks_exact(8).enumerate() {
                    let v = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
                    if v == 0 || v % 64 != 0 || !tried.insert(v) {
                        continue;
                    }
                    let at = a + 8 * i as u64;
                    let Some(j) = root_slot_of(mem, l, v) else { continue };
                    let Some(root) = at.checked_sub(8 * j) else { continue };
                    // The whole array lies in the module's writable memory.
                    if f.rw.iter().any(|&(x, y)| root >= x && root + l.root_bytes() <= y) && !found.iter().any(|x| x.0 == root) {
                        found.push((root, l));
                    }
                }
            }
        }
    }
    match found.len() {
        0 => Err(bad(f.rw.first().map_or(0, |r| r.0), Problem::NoRtree { module: f.module.clone() })),
        1 => Ok(found[0]),
        _ => Err(bad(found[0].0, Problem::RtreeUncertain { candidates: found.iter().map(|x| x.0).collect() })),
    }
}

/// One extent as the walk keeps it.
struct Extent {
    edata: u64,
    base: u64,
    size: u64,
}

/// Walks jemalloc's heap in `mem`.
///
/// `tls`: the threads' pointers (`fs` bases): a jemalloc built without
/// stats keeps no list of the threads' caches, found then in the threads'
/// static TLS (each thread's `tsd`).
pub fn walk_heap(mem: &dyn Memory, f: &Found, tls: &[u64]) -> Result<GlibcHeap> {
    let (root, l) = find_root(mem, f)?;
    let roots = mem.bytes(root, l.root_bytes())?;
    // The leaves, each with the page numbers' high part it maps (through
    // the nodes between, in three levels) and the slot naming it.
    let mut meta: Vec<(u64, u64)> = Vec::new();
    let mut leaves: Vec<(u64, u64, u64)> = Vec::new();
    for j in 0..l.root_bytes() / 8 {
        let p = word(&roots, 8 * j as usize);
        if p == 0 {
            continue;
        }
        if l.height == 2 {
            leaves.push((j, p, root + 8 * j));
            continue;
        }
        let bytes = l.node_slots() * 8;
        if p % 64 != 0 || !anon(mem, p, bytes) {
            return Err(bad(root + 8 * j, Problem::BadLeaf { leaf: p }));
        }
        meta.push((p, p + bytes));
        let node = mem.bytes(p, bytes)?;
        leaves.extend((0..l.node_slots()).map(|i| (j << l.bits[1] | i, word(&node, 8 * i as usize), p + 8 * i)).filter(|x| x.1 != 0));
    }
    // Every extent the leaves map, by descriptor; the active ones with
    // their size class and slab bit as the rtree says.
    let mut extents: HashMap<u64, (Slot, u64)> = HashMap::new();
    for (prefix, leaf, at) in leaves {
        if leaf % 64 != 0 || !anon(mem, leaf, l.leaf_bytes()) {
            return Err(bad(at, Problem::BadLeaf { leaf }));
        }
        meta.push((leaf, leaf + l.leaf_bytes()));
        for (a, bytes) in touched(mem, leaf, leaf + l.leaf_bytes()) {
            for i in 0..bytes.len() / l.elm() as usize {
                let Some(s) = l.slot(&bytes, i * l.elm() as usize) else { continue };
                if s.edata == 0 {
                    continue; // cleared
                }
                let k = (a - leaf) / l.elm() + i as u64;
                let page = (prefix << l.leaf_bits() | k) << 12;
                extents.entry(s.edata).or_insert((s, page));
            }
        }
    }
    let mut h = GlibcHeap {
        live: Vec::new(),
        arenas: 0,
        heap_ranges: Vec::new(),
        mmapped: Vec::new(),
        regions: Vec::new(),
        cached_free: 0,
        version: (0, 0),
        version_inferred: false,
        static_arena: None,
        warnings: Vec::new(),
        allocator: format!("jemalloc {}", f.version),
    };
    let mut active: Vec<Extent> = Vec::new();
    let mut all: Vec<(u64, u64)> = Vec::new();
    let mut descs: Vec<u64> = extents.keys().copied().collect();
    descs.sort_unstable();
    for &d in &descs {
        let (s, page) = extents[&d];
        let Some(e) = read_edata(mem, d) else {
            return Err(bad(d, Problem::BadExtent { page, why: "is not in the process's memory" }));
        };
        meta.push((d, d + EDATA_SIZE));
        let end = e.base().checked_add(e.size);
        if e.size == 0 || end.is_none() || !(e.base()..end.unwrap_or(0)).contains(&page) {
            return Err(bad(d, Problem::BadExtent { page, why: "does not hold that page" }));
        }
        if e.state() != s.state {
            return Err(bad(d, Problem::BadExtent { page, why: "is in another state than the rtree says" }));
        }
        all.push((e.base(), e.base() + e.size));
        if s.state != ACTIVE {
            continue;
        }
        if e.szind() != s.szind || e.slab() != s.slab || s.szind >= NSIZES {
            return Err(bad(d, Problem::BadExtent { page, why: "has another size class than the rtree says" }));
        }
        if mem.map_of(e.base()).is_none() || mem.readable(e.base(), e.size).is_err() {
            return Err(bad(d, Problem::BadExtent { page, why: "is not in the process's memory" }));
        }
        let usable = class_size(s.szind).unwrap_or(0);
        if s.slab {
            if s.szind >= NBINS || e.addr != e.base() {
                return Err(bad(d, Problem::BadExtent { page, why: "is a slab of no small size class" }));
            }
            let nregs = e.size / usable;
            if nregs == 0 || nregs > MAX_REGS {
                return Err(bad(d, Problem::BadExtent { page, why: "is a slab of more regions than a slab holds" }));
            }
            let free_bit = |i: u64| e.bitmap[(i / 64) as usize] >> (i % 64) & 1 != 0;
            let nfree = (0..nregs).filter(|&i| free_bit(i)).count() as u64;
            if nfree != e.nfree() {
                return Err(bad(d, Problem::SlabBitmap { bitmap: nfree, nfree: e.nfree(), nregs }));
            }
            for i in (0..nregs).filter(|&i| !free_bit(i)) {
                h.live.push(Chunk { mem: e.base() + i * usable, usable });
            }
        } else {
            // A large extent: one allocation at its (randomized) address,
            // within its first page, of its class's size.
            if s.szind < NBINS || e.addr < e.base() || e.addr - e.base() >= PAGE || e.addr + usable > e.base() + e.size {
                return Err(bad(d, Problem::BadExtent { page, why: "is a large extent its size class does not fit" }));
            }
            h.live.push(Chunk { mem: e.addr, usable });
        }
        active.push(Extent { edata: d, base: e.base(), size: e.size });
    }
    // The regions the threads' caches hold: free.
    // In address order: the caches' entries are looked up by search (a
    // hash set of ten million blocks cost a second of the hold).
    h.live.sort_unstable();
    let live = Live(&h.live);
    let base: HashSet<u64> = meta.iter().filter_map(|&(a, _)| mem.map_of(a).map(|m| m.start)).collect();
    all.sort_unstable();
    let extents_at = merge(all.clone());
    let in_extent = |v: u64| extents_at.partition_point(|r| r.0 <= v).checked_sub(1).is_some_and(|i| v < extents_at[i].1);
    let (cached, internal) = tcaches(
        mem,
        f,
        root..root + l.root_bytes(),
        &|v| !in_extent(v) && mem.map_of(v).is_some_and(|m| base.contains(&m.start)),
        &live,
        tls,
        &mut h.warnings,
    )?;
    h.cached_free = cached.len() as u64;
    let mut gone: Vec<u64> = cached.iter().chain(&internal).copied().collect();
    gone.sort_unstable();
    if !gone.is_empty() {
        let mut k = 0;
        h.live.retain(|c| {
            while k < gone.len() && gone[k] < c.mem {
                k += 1;
            }
            gone.get(k) != Some(&c.mem)
        });
    }
    // The extents' memory, read in runs of adjacent extents.
    active.sort_unstable_by_key(|x| x.base);
    let mut i = 0;
    while i < active.len() {
        let start = active[i].base;
        let mut end = start + active[i].size;
        let mut k = i + 1;
        while k < active.len() && active[k].base == end && end - start < 256 << 20 {
            end += active[k].size;
            k += 1;
        }
        let r = Region::read(mem, start, end)
            .map_err(|_| bad(active[i].edata, Problem::BadExtent { page: start, why: "is not in the process's memory" }))?;
        h.regions.push(r);
        i = k;
    }
    // Never roots: every extent (free ones hold stale words), and the
    // mappings of jemalloc's own metadata (the descriptors, whose addresses
    // point at every slab's first region; the rtree's leaves).
    all.sort_unstable();
    h.heap_ranges = merge(all);
    let mut m: Vec<(u64, u64)> = meta.iter().filter_map(|&(a, _)| mem.map_of(a).map(|m| (m.start, m.end))).collect();
    m.sort_unstable();
    m.dedup();
    h.heap_ranges.extend(m);
    h.heap_ranges.sort_unstable();
    h.heap_ranges = merge(std::mem::take(&mut h.heap_ranges));
    h.arenas = active.len();
    Ok(h)
}

/// Sorted ranges, overlapping or touching ones joined.
fn merge(r: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (a, b) in r {
        match out.last_mut() {
            Some(l) if a <= l.1 => l.1 = l.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// The regions the threads' caches hold, and jemalloc's own allocations
/// of the caches' stacks. Through each arena (found by its place in the
/// module's data, the `arenas` array): its list of caches, each of which
/// names the arena back.
fn tcaches(
    mem: &dyn Memory,
    f: &Found,
    root: std::ops::Range<u64>,
    metadata: &dyn Fn(u64) -> bool,
    live: &Live<'_>,
    tls: &[u64],
    warnings: &mut Vec<String>,
) -> Result<(HashSet<u64>, HashSet<u64>)> {
    let mut cached: HashSet<u64> = HashSet::new();
    let mut internal: HashSet<u64> = HashSet::new();
    // Candidate arenas: 64-aligned words of the module's data (not the
    // rtree's root array) into jemalloc's metadata (an arena lies in the
    // mappings of its base, beside its extents' descriptors, in no extent).
    let mut arenas: Vec<u64> = Vec::new();
    for &(s, e) in &f.rw {
        for (a, bytes) in touched(mem, s, e) {
            for (i, w) in bytes.chunks_exact(8).enumerate() {
                let at = a + 8 * i as u64;
                let v = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
                if root.contains(&at) || v == 0 || v % 64 != 0 || arenas.contains(&v) || arenas.len() > 4096 {
                    continue;
                }
                if metadata(v) && anon(mem, v, 4096) {
                    arenas.push(v);
                }
            }
        }
    }
    // The list's offset in an arena: (first cache, its descriptor) with
    // the cache naming the arena.
    let mut offset: Option<u64> = None;
    let mut met: HashSet<u64> = HashSet::new();
    let mut ncaches = 0;
    for &ar in &arenas {
        let heads = match offset {
            Some(o) => mem.bytes(ar + o, 16).ok().map(|b| vec![(o, word(&b, 0))]),
            None => {
                let len = mem.map_of(ar).map_or(0, |m| (m.end - ar).min(ARENA_SCAN));
                mem.bytes(ar, len).ok().map(|b| {
                    (0..len.saturating_sub(16) as usize)
                        .step_by(8)
                        .filter(|&o| {
                            let x = word(&b, o);
                            x != 0 && x % 8 == 0 && word(&b, o + 8) == x.wrapping_add(16)
                        })
                        .map(|o| (o as u64, word(&b, o)))
                        .collect()
                })
            }
        };
        for (o, first) in heads.unwrap_or_default() {
            if first == 0 || !tcache_of(mem, first, ar) {
                continue;
            }
            offset = Some(o);
            // The ring of caches, each met once, each of this arena.
            let mut x = first;
            loop {
                if !met.insert(x) || met.len() > MAX_TCACHES || !tcache_of(mem, x, ar) {
                    return Err(bad(x, Problem::TcacheRing { arena: ar }));
                }
                ncaches += 1;
                bins(mem, x, live, &mut cached, &mut internal, warnings)?;
                x = mem.u64(x)?;
                if x == first {
                    break;
                }
            }
            break;
        }
    }
    // Without stats (tikv-jemallocator's default build) the arenas keep no
    // list of their caches: each thread's is in its `tsd`, in its static
    // TLS below its thread pointer, a cache of one of the arenas (checked
    // as above: it names the arena, its bins, its `tcache` names it back).
    if ncaches == 0 {
        let arenas: HashSet<u64> = arenas.iter().copied().collect();
        for &fs in tls {
            let Some(m) = mem.map_of(fs.saturating_sub(8)) else { continue };
            let lo = fs.saturating_sub(TLS_SCAN).max(m.start);
            let Ok(b) = mem.bytes(lo, fs.min(m.end) - lo) else { continue };
            for o in (0..b.len().saturating_sub(176)).step_by(8) {
                let x = lo + o as u64;
                let (ar, t) = (word(&b, o + 40), word(&b, o + 168));
                // (Without stats its descriptor is never filled in: the
                // cache is held by its arena and its `tcache`'s link back,
                // both in the same TLS.)
                if !arenas.contains(&ar) || t < lo || t >= fs || met.contains(&x) {
                    continue;
                }
                if mem.u64(t).ok() == Some(x) {
                    met.insert(x);
                    ncaches += 1;
                    bins(mem, x, live, &mut cached, &mut internal, warnings)?;
                }
            }
        }
    }
    if ncaches == 0 {
        warnings.push("no thread cache of jemalloc's was found: regions they hold (if any) are counted live".into());
    }
    Ok((cached, internal))
}

/// The live regions, in address order.
struct Live<'a>(&'a [Chunk]);

impl Live<'_> {
    fn contains(&self, p: &u64) -> bool {
        self.0.binary_search_by_key(p, |c| c.mem).is_ok()
    }
}

/// Whether `x` is a thread cache (`tcache_slow_t`) of arena `ar`: it names
/// the arena, its descriptor names its bins, its `tcache` names it back.
fn tcache_of(mem: &dyn Memory, x: u64, ar: u64) -> bool {
    let Ok(b) = mem.bytes(x, 176) else { return false };
    let t = word(&b, 168);
    word(&b, 40) == ar && t != 0 && word(&b, 32) == t.wrapping_add(8) && mem.u64(t).ok() == Some(x)
}

/// The regions the bins of cache `x` hold; its stacks' allocation is
/// jemalloc's own.
fn bins(
    mem: &dyn Memory,
    x: u64,
    live: &Live<'_>,
    cached: &mut HashSet<u64>,
    internal: &mut HashSet<u64>,
    warnings: &mut Vec<String>,
) -> Result<()> {
    let b = mem.bytes(x, 176)?;
    let (stacks, t) = (word(&b, 160), word(&b, 168));
    if mem.u64(stacks).ok() != Some(PRECEDING_JUNK) {
        return Err(bad(stacks, Problem::BadBin { why: "stacks do not start with jemalloc's mark" }));
    }
    if live.contains(&stacks) {
        internal.insert(stacks);
    }
    let all = mem.bytes(t + 8, 24 * MAX_BINS).or_else(|_| mem.bytes(t + 8, 24 * NBINS))?;
    let mut off = 8u64;
    for i in 0..all.len() as u64 / 24 {
        let at = t + 8 + 24 * i;
        if mem.u64(stacks + off).ok() == Some(TRAILING_JUNK) {
            return Ok(());
        }
        let c = &all[24 * i as usize..24 * i as usize + 24];
        let head = word(c, 0);
        let u16at = |o: usize| u16::from_le_bytes([c[o], c[o + 1]]);
        let (full, empty) = (u16at(18), u16at(20));
        let start = stacks + off;
        if full != start as u16 {
            return Err(bad(at, Problem::BadBin { why: "does not follow the one before it" }));
        }
        let size = u64::from(empty.wrapping_sub(full));
        let end = start + size;
        if size % 8 != 0 || head < start || head > end || head % 8 != 0 {
            return Err(bad(at, Problem::BadBin { why: "has its top outside its stack" }));
        }
        let n = (end - head) / 8;
        if n > 0 {
            let items = mem.bytes(head, 8 * n)?;
            for p in items.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8]))) {
                if !live.contains(&p) {
                    warnings.push(format!("a thread cache's bin {i} holds {p:#x}, no region in use: left out"));
                    continue;
                }
                if !cached.insert(p) {
                    return Err(bad(p, Problem::CachedTwice { bins: t + 8 }));
                }
            }
        }
        off += size;
    }
    Err(bad(stacks + off, Problem::BadBin { why: "stacks do not end with jemalloc's mark" }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_are_jemallocs() {
        let s: Vec<u64> = (0..14).map(|i| class_size(i).unwrap()).collect();
        assert_eq!(s, [8, 16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320]);
        assert_eq!(class_size(NBINS - 1), Some(14336));
        assert_eq!(class_size(NBINS), Some(16384));
        assert_eq!(class_size(NSIZES), None);
    }

    /// The two shapes as jemalloc's rtree.h derives them, and a leaf slot
    /// of each read back: descriptor, state, size class, slab.
    #[test]
    fn the_rtree_shapes_are_jemallocs() {
        let (l48, l57) = (Layout::of(48), Layout::of(57));
        assert_eq!(
            (l48.height, &l48.bits[..2], l48.compact, l48.leaf_bytes(), l48.root_bytes()),
            (2, &[18, 18][..], true, 8 << 18, 8 << 18)
        );
        assert_eq!(
            (l57.height, l57.bits, l57.compact, l57.leaf_bytes(), l57.root_bytes(), l57.node_slots()),
            (3, [15, 15, 15], false, 16 << 15, 8 << 15, 1 << 15)
        );
        let (edata, state, szind) = (0x7f12_3456_7880u64, 3u64, 47u64);
        let compact = (szind << 48 | edata | state << 2 | 1).to_le_bytes();
        let mut wide = [0u8; 16];
        wide[..8].copy_from_slice(&edata.to_le_bytes());
        wide[8..12].copy_from_slice(&((szind << 5 | state << 2 | 1) as u32).to_le_bytes());
        for (l, b) in [(l48, &compact[..]), (l57, &wide[..])] {
            let s = l.slot(b, 0).expect("a filled slot");
            assert_eq!((s.edata, s.state, s.szind, s.slab), (edata, state, szind, true), "{l:?}");
            assert!(l.slot(&vec![0u8; b.len()], 0).is_none(), "{l:?}: an empty slot");
        }
    }

    #[test]
    fn version_strings_are_read_and_others_are_not() {
        assert_eq!(version_at(b"5.3.0-0-g54eaed1d8b56b1aa528be3bdd1877e59c56fa90c\0").as_deref(), Some("5.3.0"));
        assert_eq!(version_at(b"5.3.0-0-g54eaed\0"), None);
        assert_eq!(version_at(b"5.3-0-g54eaed1d8b56b1aa528be3bdd1877e59c56fa90c"), None);
    }
}
