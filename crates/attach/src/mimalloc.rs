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
//!
//! A copy linked into the executable (the Rust `mimalloc` crate's, as
//! `libmimalloc-sys` 0.1.49 builds it: release, no padding, no encoded
//! lists) is read too: 2.3.2 (its `v2` feature) by the same walk with its
//! own offsets, 3.3.2 (its default, which has no segments) through its
//! page map (`v3`). Its version from `mi_version` or, where the linker
//! dropped that, from the code printing it; its structures from the
//! executable's symbol table (a live process's `/proc/PID/exe`, a core's
//! file) where it has one, else by their shapes.

mod v3;

use crate::error::{Error, Result};
use crate::glibc::{Chunk, GlibcHeap};
use crate::memory::{Map, Memory, Region};
use std::collections::{BTreeSet, HashSet};
use std::fmt;

/// `MI_SEGMENT_SIZE` (and alignment), `MI_SEGMENT_SLICE_SIZE`, on 64-bit.
const SEGMENT: u64 = 32 << 20;
const SLICE: u64 = 64 << 10;
const SLICES_PER_SEGMENT: u64 = SEGMENT / SLICE;
/// `mi_page_t`: offsets common to 2.0 and 2.3.
const P_COUNT: u64 = 0;
const P_OFFSET: u64 = 4;
const P_CAPACITY: u64 = 10;
const P_RESERVED: u64 = 12;
const P_FREE: u64 = 16;
/// The heap's page queues: `MI_BIN_FULL + 1` of 3 words.
const H_NQUEUES: u64 = 75;
/// `MI_HUGE_BLOCK_SIZE` (2.0): a block size at least this is the page's size.
const HUGE_BLOCK: u64 = 2 << 30;
/// Small blocks start this far into their page (2.0: `3 * MI_MAX_ALIGN_GUARANTEE`).
const SMALL_START: u64 = 384;
/// Bounds of the walks: the segments' total, the bytes of one page read.
const MAX_SEGMENTS: usize = 1 << 20;
const MAX_PAGE_READ: u64 = 1 << 32;

/// Where one generation of mimalloc keeps what the walk reads, on 64-bit,
/// as its release build lays it out (no padding, no encoded free lists,
/// no guard pages): offsets into `mi_segment_t`, `mi_page_t` (a slice)
/// and `mi_heap_t`.
#[derive(Debug)]
struct Layout {
    /// `sizeof(mi_page_t)`: the slices' stride.
    page: u64,
    seg_used: u64,
    seg_cookie: u64,
    seg_slices: u64,
    seg_info: u64,
    seg_kind: u64,
    seg_entries: u64,
    /// `slices[0]`.
    seg_slice0: u64,
    /// `used`: a `uint32_t` in 2.0, a `uint16_t` in 2.3.
    p_used: u64,
    used16: bool,
    /// 2.0's `uint32_t xblock_size` (huge pages: at least
    /// `MI_HUGE_BLOCK_SIZE`), 2.3's `size_t block_size`.
    p_bsize: u64,
    bsize32: bool,
    p_local_free: u64,
    p_thread_free: u64,
    p_heap: u64,
    /// 2.3's `page_start` (2.0 computes it).
    p_start: Option<u64>,
    /// `pages[]`, `thread_delayed_free`, `cookie`, and the heap's size.
    h_queues: u64,
    h_delayed: u64,
    h_cookie: u64,
    h_size: u64,
    /// `MI_MEDIUM_OBJ_SIZE_MAX`: the huge and full queues' block sizes are
    /// a word and two words above it.
    medium_max: u64,
}

/// mimalloc 2.0 (2.0.9, Debian's `libmimalloc2.0`).
static V2_0: Layout = Layout {
    page: 80,
    seg_used: 208,
    seg_cookie: 216,
    seg_slices: 224,
    seg_info: 232,
    seg_kind: 240,
    seg_entries: 248,
    seg_slice0: 264,
    p_used: 24,
    used16: false,
    p_bsize: 28,
    bsize32: true,
    p_local_free: 32,
    p_thread_free: 40,
    p_heap: 48,
    p_start: None,
    // `tld`, `MI_PAGES_DIRECT` (129) pointers, then the queues.
    h_queues: 8 + 129 * 8,
    h_delayed: 8 + 129 * 8 + H_NQUEUES * 24,
    h_cookie: 8 + 129 * 8 + H_NQUEUES * 24 + 24,
    h_size: 8 + 129 * 8 + H_NQUEUES * 24 + 24 + 24 + 136 + 48,
    medium_max: 128 << 10,
};

/// mimalloc 2.3 (2.3.2, the Rust `mimalloc` crate's `v2` build through
/// `libmimalloc-sys` 0.1.49): the segment's header grew (its memory id,
/// sub-process, purge and commit masks), the page holds its block size in
/// a word and its blocks' start, and the heap's fields come before its
/// queues.
static V2_3: Layout = Layout {
    page: 96,
    seg_used: 216,
    seg_cookie: 224,
    seg_slices: 248,
    seg_info: 256,
    seg_kind: 264,
    seg_entries: 272,
    seg_slice0: 288,
    p_used: 32,
    used16: true,
    p_bsize: 40,
    bsize32: false,
    p_local_free: 24,
    p_thread_free: 56,
    p_heap: 64,
    p_start: Some(48),
    h_queues: 256 + 129 * 8,
    h_delayed: 8,
    h_cookie: 32,
    h_size: 256 + 129 * 8 + H_NQUEUES * 24,
    medium_max: 64 << 10,
};

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
    /// crate's) of a layout not read (2.1, 2.2, 3.0 to 3.2, later ones).
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
                "{module} links its own mimalloc ({version}): attach and core read mimalloc 2.0, 2.3 and 3.3 (Debian's libmimalloc2.0, the Rust mimalloc crate's builds), not this layout"
            ),
            Problem::NoHeap { module } => {
                write!(
                    f,
                    "mimalloc's main heap (3.x: its page map) was not found in {module}'s data: not mimalloc 2.0's, 2.3's or 3.3's layout (a secure or debug build?)"
                )
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
/// global allocator) whose heap is not read, by name, rather than walking
/// glibc's heap beside it as if it were the program's (`snapshot` asks
/// before glibc's walk; `find` reads the copies it can).
pub fn refuse_static_copy(mem: &dyn Memory) -> Result<()> {
    match static_copy(mem) {
        Some(Err(p)) => Err(bad(0, p)),
        _ => Ok(()),
    }
}

/// What the executable's file tells of a static copy: `mi_version`'s
/// number, `_mi_heap_main`'s address, mimalloc's functions' code.
#[derive(Default)]
struct ExeSymbols {
    version: Option<u32>,
    /// The version its options' printer says.
    printed: Option<u32>,
    heap_main: Option<u64>,
    /// `mi_arenas` and `mi_arena_count`.
    arenas: Option<u64>,
    arena_count: Option<u64>,
    /// 3.x's `_mi_page_map` and `mi_page_map_count`.
    page_map: Option<u64>,
    page_map_count: Option<u64>,
    code: Vec<(u64, u64)>,
}

/// The symbols of the executable mapped at `base` (its first mapping),
/// from its file (`bytes`): a Rust release build keeps its symbol table.
fn exe_symbols<'d, R: object::ReadRef<'d>>(file: R, base: u64) -> ExeSymbols {
    use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind};
    let mut out = ExeSymbols::default();
    let Ok(e) = object::File::parse(file) else { return out };
    out.printed = printed_version(&e);
    // The load bias: where the segment at file offset 0 is mapped.
    let Some(first) = e.segments().find(|s| s.file_range().0 == 0) else { return out };
    let Some(bias) = base.checked_sub(first.address() & !0xfff) else { return out };
    for sym in e.symbols().chain(e.dynamic_symbols()).filter(|s| s.is_definition()) {
        let Ok(name) = sym.name() else { continue };
        let a = sym.address();
        match name {
            "mi_version" if out.version.is_none() => {
                out.version = e
                    .sections()
                    .find(|s| s.address() <= a && a + 10 <= s.address() + s.size())
                    .and_then(|t| Some((t.data().ok()?, usize::try_from(a - t.address()).ok()?)))
                    .and_then(|(d, at)| code_version(d.get(at..at + 10)?));
            }
            "_mi_heap_main" => out.heap_main = a.checked_add(bias),
            "mi_arenas" => out.arenas = a.checked_add(bias),
            "mi_arena_count" => out.arena_count = a.checked_add(bias),
            "_mi_page_map" => out.page_map = a.checked_add(bias),
            "mi_page_map_count" => out.page_map_count = a.checked_add(bias),
            _ => {}
        }
        if sym.kind() == SymbolKind::Text && (name.starts_with("mi_") || name.starts_with("_mi_")) && sym.size() > 0 {
            if let Some((x, y)) = a.checked_add(bias).and_then(|x| Some((x, x.checked_add(sym.size())?))) {
                out.code.push((x, y));
            }
        }
    }
    out
}

/// mimalloc's version from the code that prints it (`mi_options_print`,
/// which a program keeps where the linker dropped an unused `mi_version`):
/// the one `lea REG, [rip + d]` of the executable's code that loads its
/// message `v%i.%i.%i%s%s (built on`, and the `mov r32, imm32` of a number
/// below 100 (or `xor`, for 0) that set the three next argument registers
/// (the System V order) within 48 bytes before it and 32 after (bytes
/// read at every offset, not decoded: a register set twice there to
/// different numbers gives no version). `None` when any of it is
/// missing, a register is set to two values there, or a number is not a
/// version's.
fn printed_version<'d, R: object::ReadRef<'d>>(e: &object::File<'d, R>) -> Option<u32> {
    use object::{Object, ObjectSection, SectionKind};
    let message = b"v%i.%i.%i%s%s (built on";
    let read_only = [SectionKind::ReadOnlyData, SectionKind::ReadOnlyString, SectionKind::ReadOnlyDataWithRel];
    let text = e.sections().filter(|s| read_only.contains(&s.kind())).find_map(|s| {
        let d = s.data().ok()?;
        Some(s.address() + memchr::memmem::find(d, message)? as u64)
    })?;
    // x86-64 register numbers of the arguments, in order.
    const ARGS: [u8; 6] = [7, 6, 2, 1, 8, 9];
    let mut sites = Vec::new();
    for s in e.sections().filter(|s| s.kind() == SectionKind::Text) {
        let Ok(d) = s.data() else { continue };
        for i in 0..d.len().saturating_sub(7) {
            if (d[i] == 0x48 || d[i] == 0x4c) && d[i + 1] == 0x8d && d[i + 2] & 0xc7 == 0x05 {
                let disp = i32::from_le_bytes([d[i + 3], d[i + 4], d[i + 5], d[i + 6]]);
                if (s.address() + i as u64 + 7).checked_add_signed(i64::from(disp)) == Some(text) {
                    let reg = (d[i + 2] >> 3 & 7) + if d[i] == 0x4c { 8 } else { 0 };
                    sites.push((d, i, reg));
                }
            }
        }
    }
    let [(d, i, reg)] = sites.as_slice() else { return None };
    let k = ARGS.iter().position(|r| r == reg)?;
    let wanted = ARGS.get(k + 1..k + 4)?;
    let mut set: Vec<(u8, u32)> = Vec::new();
    let window = &d[i.saturating_sub(48)..(i + 7 + 32).min(d.len())];
    for j in 0..window.len() {
        let rex_b = j > 0 && window[j - 1] == 0x41;
        if (0xb8..=0xbf).contains(&window[j]) && j + 5 <= window.len() {
            // (A version's numbers are small: a larger value is another
            // instruction's bytes read from the middle.)
            let v = u32::from_le_bytes([window[j + 1], window[j + 2], window[j + 3], window[j + 4]]);
            if v < 100 {
                set.push((window[j] - 0xb8 + if rex_b { 8 } else { 0 }, v));
            }
        }
        if window[j] == 0x31 && j + 1 < window.len() && window[j + 1] >= 0xc0 && window[j + 1] >> 3 & 7 == window[j + 1] & 7 {
            let rex = j > 0 && window[j - 1] == 0x45;
            set.push(((window[j + 1] & 7) + if rex { 8 } else { 0 }, 0));
        }
    }
    let mut parts = [0u32; 3];
    for (n, r) in wanted.iter().enumerate() {
        let mut vals: Vec<u32> = set.iter().filter(|s| s.0 == *r).map(|s| s.1).collect();
        vals.dedup();
        let [v] = vals.as_slice() else { return None };
        parts[n] = *v;
    }
    let [major, minor, patch] = parts;
    ((2..=3).contains(&major) && minor < 100 && patch < 100).then_some(major * 10000 + minor * 100 + patch)
}

/// A mimalloc linked into the executable (the first module mapped): its
/// messages' prefix and its options' environment prefix in its read-only
/// data (in memory; a core's, which leaves it out, from the file). Its
/// version, its main heap and its code from the executable's symbol table
/// (a live process's `/proc/PID/exe`, a core's file), else its version
/// from `mi_version`'s code through the dynamic symbols, else its
/// generation from its options' names (3.x renamed the segments' options
/// `deprecated_*`). `None` when the executable has none; `Some(Ok)` for a
/// copy of a layout this reads (2.0, 2.3), its main heap found by symbol
/// or by shape; `Some(Err)` names one it does not.
fn static_copy(mem: &dyn Memory) -> Option<std::result::Result<Found, Problem>> {
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
    let in_memory = marked(&data);
    // The executable's file: a core's (which leaves read-only data out),
    // or, once its memory says it holds mimalloc, a live process's own.
    let mut file = Vec::new();
    let syms = if in_memory {
        // Only the parts read (headers, symbols, code and read-only
        // data), not its debug information.
        match mem.exe_file().or_else(|| mem.host_file(&exe)) {
            Some(Ok(f)) => exe_symbols(&object::read::ReadCache::new(f), first.start),
            _ => ExeSymbols::default(),
        }
    } else {
        if let Some(Ok(f)) = mem.host_file(&exe) {
            let _ = f.take(512 << 20).read_to_end(&mut file);
        }
        if !marked(&file) {
            return None;
        }
        exe_symbols(&*file, first.start)
    };
    let strings = if in_memory { &data } else { &file };
    let generation = if has(strings, b"deprecated_max_segment_reclaim") {
        Some(3)
    } else if has(strings, b"max_segment_reclaim") {
        Some(2)
    } else {
        None
    };
    let version = syms
        .version
        .or_else(|| {
            crate::memory::dynamic_symbol(mem, first.start, b"mi_version")
                .and_then(|v| mem.bytes(first.start.checked_add(v)?, 10).ok())
                .and_then(|c| code_version(&c))
        })
        // The printed one only where the options' names agree with it.
        .or(syms.printed.filter(|v| generation == Some(v / 10000)));
    let name = exe.rsplit('/').next().unwrap_or(&exe).to_string();
    let refuse = |version: String| Some(Err(Problem::StaticCopy { module: exe.clone(), version }));
    let three = match version {
        Some(v) => v / 100 == 303,
        None => generation == Some(3),
    };
    let layouts: &[&'static Layout] = match version {
        Some(v) if v / 10 == 20 => &[&V2_0],
        Some(v) if v / 100 == 203 => &[&V2_3],
        _ if three => &[],
        Some(v) => return refuse(format!("mimalloc {}", version_string(v))),
        // 2.x of unknown minor: the heap's shape tells 2.3's from 2.0's.
        None if generation == Some(2) => &[&V2_3, &V2_0],
        None => return refuse("its version not found".to_string()),
    };
    let label = match version {
        Some(v) => format!("mimalloc {} (static)", version_string(v)),
        None if three => "mimalloc 3.x (static, its version not read)".to_string(),
        None => "mimalloc 2.x (static, its version not read)".to_string(),
    };
    // The executable's writable mappings and its .bss after them.
    let mut rw: Vec<&Map> = Vec::new();
    for (i, m) in maps.iter().enumerate() {
        if m.file() == Some(exe.as_str()) && m.write {
            rw.push(m);
            if let Some(next) = maps.get(i + 1).filter(|n| n.anonymous() && n.write && n.start == m.end) {
                rw.push(next);
            }
        }
    }
    if three {
        // 3.3's page map, by symbol or by shape.
        return Some(v3::find(mem, syms.page_map, syms.page_map_count, &rw, &name).map(|pm| Found {
            cookie: 0,
            heap_main: 0,
            layout: &V2_3,
            allocator: label,
            code: syms.code,
            arenas: None,
            page_map: Some(pm),
            in_exe: true,
        }));
    }
    let mut last = Problem::NoHeap { module: name.clone() };
    for &layout in layouts {
        let found = match syms.heap_main {
            // By symbol: it must have the heap's shape there.
            Some(h) => Region::read(mem, h, h + layout.h_size)
                .ok()
                .filter(|r| heap_shape(layout, r, h))
                .and_then(|r| r.u64(h + layout.h_cookie))
                .filter(|&c| c != 0)
                .map(|c| (h, c))
                .ok_or(Problem::NoHeap { module: name.clone() }),
            None => heap_by_shape(mem, layout, &rw, &name),
        };
        match found {
            Ok((heap_main, cookie)) => {
                // 2.3's arenas, by symbol: their whole reservation is
                // the heap's (freed segments' stale words are no roots).
                let arenas = syms.arenas.zip(syms.arena_count).filter(|_| std::ptr::eq(layout, &V2_3));
                return Some(Ok(Found {
                    cookie,
                    heap_main,
                    layout,
                    allocator: label,
                    code: syms.code,
                    arenas,
                    page_map: None,
                    in_exe: true,
                }));
            }
            Err(p) => last = p,
        }
    }
    Some(Err(last))
}

/// mimalloc, found.
#[derive(Debug)]
pub struct Found {
    /// `_mi_heap_main.cookie`: every segment's is its address xor this.
    cookie: u64,
    /// `_mi_heap_main`.
    heap_main: u64,
    /// Its generation's layout.
    layout: &'static Layout,
    /// The dump's `allocator`: `mimalloc 2.0.9`, `mimalloc 2.3.2 (static)`.
    allocator: String,
    /// mimalloc's code: the library's executable mappings, or a static
    /// copy's functions as its symbols tell (none without them).
    code: Vec<(u64, u64)>,
    /// 2.3's `mi_arenas` and `mi_arena_count`, when its symbols name them.
    arenas: Option<(u64, u64)>,
    /// 3.x's page map: its heap has no segments (and neither cookie, main
    /// heap, layout nor arenas above are used).
    page_map: Option<v3::PageMap>,
    /// Linked into the executable, beside glibc's malloc.
    pub in_exe: bool,
}

fn file_name(m: &Map) -> &str {
    m.file().and_then(|p| p.rsplit('/').next()).unwrap_or("")
}

/// Finds a mapped `libmimalloc*` and its main heap, or a copy linked into
/// the executable of a layout this reads; `None` when there is neither.
pub fn find(mem: &dyn Memory) -> Result<Option<Found>> {
    let maps = mem.maps();
    let Some(module) = maps.iter().find(|m| file_name(m).starts_with("libmimalloc")).and_then(|m| m.file()) else {
        return match static_copy(mem) {
            Some(Ok(f)) => Ok(Some(f)),
            Some(Err(p)) => Err(bad(0, p)),
            None => Ok(None),
        };
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
    let (heap_main, cookie) = heap_by_shape(mem, &V2_0, &data, &name).map_err(|p| bad(0, p))?;
    let code = maps.iter().filter(|m| m.exec && m.file() == Some(module)).map(|m| (m.start, m.end)).collect();
    let allocator = format!("mimalloc {}", version_string(version.unwrap_or(0)));
    Ok(Some(Found { cookie, heap_main, layout: &V2_0, allocator, code, arenas: None, page_map: None, in_exe: false }))
}

/// The one place of `data` (at most 4 MiB of each mapping) with the main
/// heap's shape and a cookie: its address and cookie.
fn heap_by_shape(mem: &dyn Memory, layout: &Layout, data: &[&Map], name: &str) -> std::result::Result<(u64, u64), Problem> {
    let mut found = BTreeSet::new();
    for m in data {
        let end = m.end.min(m.start + (4 << 20));
        let Ok(r) = Region::read(mem, m.start, end) else { continue };
        let mut at = m.start;
        while at + layout.h_size <= end {
            if heap_shape(layout, &r, at) && r.u64(at + layout.h_cookie).is_some_and(|c| c != 0) {
                found.insert((at, r.u64(at + layout.h_cookie).unwrap_or(0)));
            }
            at += 8;
        }
    }
    match found.iter().collect::<Vec<_>>().as_slice() {
        [] => Err(Problem::NoHeap { module: name.to_string() }),
        [&one] => Ok(one),
        many => Err(Problem::HeapUncertain { candidates: many.iter().map(|f| f.0).collect() }),
    }
}

/// Whether no thread is stopped inside mimalloc's code (`rips`: the
/// threads' instruction pointers): a thread stopped in `malloc` or `free`
/// may have a page's list and its count half updated (mimalloc takes no
/// lock on its own pages), and the walk would refuse the heap as damaged.
/// (A static copy without symbols: its code is not told from the
/// program's, and the walk's checks are what is left.)
pub fn settled(f: &Found, rips: impl IntoIterator<Item = u64>) -> bool {
    rips.into_iter().all(|ip| !f.code.iter().any(|&(a, b)| (a..b).contains(&ip)))
}

/// Whether `at` has a heap's shape: its page queues' block sizes are
/// mimalloc's bins (8, 8, 16, 24, 32, …, and the huge and full queues'
/// `MI_MEDIUM_OBJ_SIZE_MAX` plus a word and two).
fn heap_shape(layout: &Layout, r: &Region, at: u64) -> bool {
    let size = |q: u64| r.u64(at + layout.h_queues + q * 24 + 16);
    size(0) == Some(8)
        && size(1) == Some(8)
        && size(2) == Some(16)
        && size(3) == Some(24)
        && size(8) == Some(64)
        && size(H_NQUEUES - 2) == Some(layout.medium_max + 8)
        && size(H_NQUEUES - 1) == Some(layout.medium_max + 16)
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
    let l = f.layout;
    for m in mem.maps().iter().filter(|m| m.anonymous() && m.read && m.write) {
        let mut a = m.start.div_ceil(SEGMENT) * SEGMENT;
        while a + l.seg_slice0 <= m.end {
            if mem.u64(a + l.seg_cookie).ok() == Some(a ^ f.cookie) {
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

/// `MI_MAX_ARENAS` (2.3), and `mi_arena_t`'s `start` and `block_count`
/// (of `MI_ARENA_BLOCK_SIZE`, a segment's size).
const MAX_ARENAS: u64 = 132;
const A_START: u64 = 32;
const A_BLOCKS: u64 = 40;

/// The memory of 2.3's arenas (`mi_arenas[..mi_arena_count]`): each
/// segment-aligned, inside one mapping.
fn arena_ranges(mem: &dyn Memory, arenas: u64, count: u64) -> Result<Vec<(u64, u64)>> {
    let ab = |at, why| bad(at, Problem::BadSegment { why });
    let n = mem.u64(count).map_err(|_| ab(count, "its arenas' count is not readable"))?;
    if n > MAX_ARENAS {
        return Err(ab(count, "more arenas than mimalloc keeps"));
    }
    let mut out = Vec::new();
    for i in 0..n {
        let a = mem.u64(arenas + 8 * i).map_err(|_| ab(arenas, "its arenas are not readable"))?;
        if a == 0 {
            continue;
        }
        let r = Region::read(mem, a, a + A_BLOCKS + 8).map_err(|_| ab(a, "an arena is not readable"))?;
        let (start, blocks) = (r.u64(a + A_START).unwrap_or(1), r.u64(a + A_BLOCKS).unwrap_or(0));
        let len = blocks.checked_mul(SEGMENT).filter(|&l| l > 0 && l <= 1 << 46);
        let inside = |l: u64| mem.map_of(start).is_some_and(|m| start.checked_add(l).is_some_and(|e| e <= m.end));
        match len {
            Some(l) if start % SEGMENT == 0 && inside(l) => out.push((start, start + l)),
            _ => return Err(ab(a, "an arena's memory is not a mapping's")),
        }
    }
    Ok(out)
}

/// Walks the heap: every block of every page less the free lists.
pub fn walk_heap(mem: &dyn Memory, f: &Found) -> Result<GlibcHeap> {
    if let Some(pm) = f.page_map {
        return v3::walk_heap(mem, pm, &f.allocator);
    }
    let l = f.layout;
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
        let head = Region::read(mem, s, s + l.seg_slice0).map_err(|_| sb("its header is not readable"))?;
        let w = |o: u64| head.u64(s + o).unwrap_or(u64::MAX);
        let (nslices, info, kind, entries) = (w(l.seg_slices), w(l.seg_info), w(l.seg_kind) as u32, w(l.seg_entries));
        if kind > 1 || entries == 0 || entries > SLICES_PER_SEGMENT || (kind == 0 && (nslices != SLICES_PER_SEGMENT || entries != nslices))
        {
            return Err(sb("its kind and counts of slices are not mimalloc's"));
        }
        if kind == 1 && (nslices > 1 << 26 || entries != nslices.min(SLICES_PER_SEGMENT)) {
            return Err(sb("its kind and counts of slices are not mimalloc's"));
        }
        if info == 0 || info >= entries.max(2) || info * SLICE < l.seg_slice0 + (entries + 1) * l.page {
            return Err(sb("its info slices do not hold its slices"));
        }
        let end = s + nslices * SLICE;
        let sl = Region::read(mem, s + l.seg_slice0, s + l.seg_slice0 + (entries + 1) * l.page)
            .map_err(|_| sb("its slices are not readable"))?;
        let mut used_pages = 0u64;
        let mut i = 0u64;
        while i < entries {
            let at = s + l.seg_slice0 + i * l.page;
            let u32_at = |o: u64| sl.slice(at + o, 4).map(|b| u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))).unwrap_or(0);
            let u16_at = |o: u64| sl.slice(at + o, 2).map(|b| u64::from(u16::from_le_bytes([b[0], b[1]]))).unwrap_or(0);
            let count = u32_at(P_COUNT);
            if count == 0 || u32_at(P_OFFSET) != 0 || (i + count > entries && !(kind == 1 && i + count <= nslices)) {
                return Err(bad(at, Problem::BadSegment { why: "its spans of slices do not tile it" }));
            }
            // A span's last slice points back to its first (mimalloc sets
            // it on every span, free or used): the slices' stride is the
            // release build's (2.0's 80 bytes, 2.3's 96; a secure build's
            // pages are two words larger).
            // (A huge segment's one span runs past its slices: its last
            // slice is then the extra one after them.)
            let last = (i + count - 1).min(entries);
            if last > i {
                let back = sl
                    .slice(s + l.seg_slice0 + last * l.page + P_OFFSET, 4)
                    .map(|b| u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])));
                if back != Some((last - i) * l.page) {
                    return Err(bad(at, Problem::BadSegment { why: "a span's last slice does not point back to its first" }));
                }
            }
            let word = |o: u64| sl.u64(at + o).unwrap_or(0);
            let xbs = if l.bsize32 { u32_at(l.p_bsize) } else { word(l.p_bsize) };
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
            let bsize = if l.bsize32 && xbs >= HUGE_BLOCK { psize } else { xbs };
            let pstart = s + this * SLICE;
            // 2.3 keeps its blocks' start (past a few blocks' worth for
            // small ones, 16-aligned), 2.0 computes it.
            let off = match l.p_start {
                Some(o) => word(o).wrapping_sub(pstart),
                None if (8..=1024).contains(&bsize) => SMALL_START,
                None => 0,
            };
            if off >= psize || off % 16 != 0 {
                return Err(pb("its blocks' start is not in it"));
            }
            let start = pstart + off;
            let used = if l.used16 { u16_at(l.p_used) } else { u32_at(l.p_used) };
            let reserved = u16_at(P_RESERVED);
            if capacity > reserved || used > capacity || reserved.checked_mul(bsize).is_none_or(|b| b > psize - off) {
                return Err(pb("its capacity does not fit it"));
            }
            let len = capacity * bsize;
            if len > MAX_PAGE_READ || start + len > end {
                return Err(pb("its blocks run past its segment"));
            }
            let r = Region::read(mem, start, start + len).map_err(|_| pb("its blocks are not readable"))?;
            regions.push(r);
            pages.push(Page { at, start, bsize, capacity, free: vec![false; capacity as usize], region: regions.len() - 1 });
            let p = pages.len() - 1;
            let n_free = walk_list(&mut pages, &regions, p, word(P_FREE), capacity).map_err(pb)?;
            let n_local = walk_list(&mut pages, &regions, p, word(l.p_local_free), capacity).map_err(pb)?;
            if used + n_free + n_local != capacity {
                return Err(pb("its used count and its free lists do not make its capacity"));
            }
            free_blocks += n_free + n_local;
            threads.push((p, word(l.p_thread_free) & !3));
            if word(l.p_heap) != 0 {
                heaps.insert(word(l.p_heap));
            }
        }
        if used_pages != w(l.seg_used) {
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
    if let Some((arenas, count)) = f.arenas {
        heap_ranges.extend(arena_ranges(mem, arenas, count)?);
    }
    let starts: Vec<u64> = pages.iter().map(|p| p.start).collect();
    let total: u64 = pages.iter().map(|p| p.capacity).sum();
    heaps.insert(f.heap_main);
    for &h in &heaps {
        let hb = |why| bad(h, Problem::BadPage { why });
        let r = Region::read(mem, h, h + l.h_size).map_err(|_| hb("a page's heap is not readable"))?;
        if !heap_shape(l, &r, h) {
            return Err(hb("a page's heap is not one"));
        }
        // Every page on the heap's queues lies in a segment with the cookie.
        for q in 0..H_NQUEUES {
            if let Some(first) = r.u64(h + l.h_queues + q * 24).filter(|&a| a != 0) {
                let seg = first & !(SEGMENT - 1);
                if !seg_set.contains(&seg) {
                    return Err(bad(seg, Problem::BadCookie));
                }
            }
        }
        let mut b = r.u64(h + l.h_delayed).unwrap_or(0);
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
        allocator: f.allocator.clone(),
    })
}
