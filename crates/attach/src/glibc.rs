//! glibc's malloc heap, walked from outside the process: its arenas, the
//! chunks of each arena's heaps in address order, the chunks it mapped
//! for large requests, and which chunks are free though their neighbours
//! say "in use" (those held in the per-thread caches and the fastbins).
//!
//! Everything read from the target is data, never trusted: every size and
//! pointer is checked against the mappings before it is followed, and a
//! heap that does not add up is an error naming the address, not a guess.
//! Every walk (the chunks, the fastbins, the caches' lists, the ring of
//! arenas, an arena's heaps, the mapped chunks) moves forward at each step
//! or meets each place once, and stays inside what it walks: a damaged
//! heap is refused where it stops making sense, in milliseconds.
//!
//! The main arena is found by its shape in the C library's data, every
//! field checked; the brk heap is the one range from glibc's `sbrk_base`
//! to its top chunk, however many mappings the kernel splits it into (a
//! forked worker's). The layout is glibc's on x86-64 from 2.30 (the
//! per-thread cache's 16-bit counts) to 2.41; the version is read from
//! the banner in the C library's memory (from its file only for a core
//! that left it out), and any other is refused. A static program holds
//! the banner only when it asks for glibc's version: without it, the
//! version is inferred from strings glibc links into every static program
//! that allocates (`MARKERS`), which is all the layout needs.

use crate::error::{BadSize, Damage, Error, Result, StaticGlibc, NEWEST_GLIBC, OLDEST_GLIBC};
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
    /// glibc's version (a static program's without the banner: the oldest
    /// its strings allow, whose layout is walked, and `warnings` says so).
    pub version: (u32, u32),
    /// Whether `version` is only the oldest the program's strings allow
    /// (a static program without glibc's banner).
    pub version_inferred: bool,
    /// glibc's main arena when it lies in a static program's own data
    /// (start, end): the allocator's state, not the program's, so no root
    /// (memcheck, which replaces malloc, never sees it). Its `top` points
    /// inside the newest block; the analysis knows libc.so.6's data by its
    /// name and takes only block starts from it, but a static program's
    /// data is the program's.
    pub static_arena: Option<(u64, u64)>,
    /// What the walk noticed and the user should know.
    pub warnings: Vec<String>,
    /// The allocator walked and its version, as the dump names it
    /// (`glibc 2.36`, `jemalloc 5.3.0`).
    pub allocator: String,
}

/// `sizeof (struct malloc_state)` and the offsets of its fields.
const ARENA_SIZE: u64 = 2200;
const FLAGS: u64 = 4;
const HAVE_FASTCHUNKS: u64 = 8;
const FASTBINS: u64 = 16;
const NFASTBINS: u64 = 10;
const TOP: u64 = 96;
const LAST_REMAINDER: u64 = 104;
const BINS: u64 = 112;
const NBINS: u64 = 127;
const NEXT: u64 = 2160;
const NEXT_FREE: u64 = 2168;
const ATTACHED_THREADS: u64 = 2176;
const SYSTEM_MEM: u64 = 2184;
const MAX_SYSTEM_MEM: u64 = 2192;
/// Non-main heaps are aligned to (and at most) this size.
const HEAP_MAX: u64 = 64 << 20;
/// More arenas than glibc ever makes (8 per core by default, at most
/// `arena_max`): a ring longer than this is not glibc's.
const MAX_ARENAS: usize = 1 << 16;
/// The per-thread cache's chunk: 64 u16 counts and 64 pointers, plus
/// the chunk header.
const TCACHE_CHUNK: u64 = 0x290;
const TCACHE_BINS: u64 = 64;
/// Mappings larger than this are not searched page by page for mapped
/// chunks (address-space reservations, such as a sanitizer's shadow).
const MAX_SEARCHED: u64 = 64 << 30;
/// The C library's read-only mappings larger than this are not searched
/// for its version.
const MAX_BANNER_MAP: u64 = 64 << 20;

/// The glibc image the process maps (libc.so.6, or a static program's
/// own executable), and its version when the search for it read it.
struct Libc {
    maps: Vec<Map>,
    /// A static program's: read from its banner, or the oldest its
    /// markers allow (`None` for libc.so.6, found by its name).
    version: Option<(u32, u32)>,
    /// How the version was inferred, when no banner said it.
    inferred: Option<String>,
}

/// What a static glibc program without glibc's version banner still holds
/// in its read-only data: the variable glibc's start-up reads its tunables
/// from (in every static glibc since 2.26; musl has none).
const GLIBC_MARK: &[u8] = b"GLIBC_TUNABLES";

/// What a static glibc program without the banner holds in its read-only
/// data (with their NUL: whole strings), and the release that first has
/// each, on every stable branch too (their heads as of 2.42): glibc's
/// tunables' names (its start-up's, linked into every static program)
/// and malloc's messages (malloc.c is one object, linked whole with
/// malloc). Each release holds every marker before its own. The layout
/// changes where one begins: 16-bit cache counts with `mxfast` (released
/// in 2.31, taken by the 2.28 to 2.30 branches after the counts' fix:
/// 2.30 as released lacks it and is refused, 2.29's branch has 2.30's
/// layout and reads as 2.30); safe-linking with its unaligned tcache
/// chunk check (2.32, the same commit); `mp_`'s and `heap_info`'s huge
/// page fields with the `hugetlb` tunable (2.35; tunables were optional
/// before 2.38, but `mxfast` shows they are built in): those three
/// (`true`) must agree. The others only narrow what the note says, and
/// only within the layout's range (a check a stable branch takes later,
/// as they do, must not make a release look newer than its layout).
const MARKERS: &[(&[u8], (u32, u32), bool)] = &[
    (b"glibc.malloc.mxfast\0", (2, 30), true),
    (b"malloc(): unaligned tcache chunk detected\0", (2, 32), true),
    (b"free(): too many chunks detected in tcache\0", (2, 33), false),
    (b"glibc.malloc.hugetlb\0", (2, 35), true),
    (b"glibc.mem.decorate_maps\0", (2, 39), false),
    (b"glibc.rtld.enable_secure\0", (2, 40), false),
    (b"free(): chunks in smallbin corrupted\0", (2, 41), false),
];

/// What every glibc malloc from 2.30 to 2.41 holds and a later one may
/// not: the fastbins' (gone after 2.42).
const FASTBIN_MARK: &[u8] = b"double free or corruption (fasttop)\0";

/// Strings only a glibc newer than 2.41 holds: malloc's of 2.42, whose
/// per-thread cache has 76 lists and counts free slots.
const NEWER: &[(&[u8], (u32, u32))] =
    &[(b"max tcache size too large\0", (2, 42)), (b"malloc(): chunk size mismatch in fastbin\0", (2, 42))];

/// Strings only a glibc older than 2.30 holds: the tunable 2.29 renamed
/// `glibc.cpu.hwcap_mask` (2.28's branch took `mxfast` too).
const OLDER: &[(&[u8], (u32, u32))] = &[(b"glibc.tune.hwcap_mask\0", (2, 28))];

/// Shows a marker for a message (without its NUL).
fn shown(m: &[u8]) -> String {
    String::from_utf8_lossy(m.strip_suffix(b"\0").unwrap_or(m)).into_owned()
}

/// glibc's version as the strings of the static program `path` allow
/// (`has` says whether its read-only data holds one): the oldest release
/// they prove, and the note saying so; refused when they prove a release
/// outside 2.30 to 2.41, miss one every such release has, or contradict
/// each other.
fn infer_version(path: &str, has: impl Fn(&[u8]) -> bool) -> Result<((u32, u32), String)> {
    let v = |(a, b): (u32, u32)| format!("{a}.{b}");
    let refused = |why| Err(Error::StaticGlibcUnknown { path: path.to_string(), why });
    if let Some((m, since)) = NEWER.iter().find(|(m, _)| has(m)) {
        return refused(StaticGlibc::Newer { since: *since, marker: shown(m) });
    }
    if let Some((m, until)) = OLDER.iter().find(|(m, _)| has(m)) {
        return refused(StaticGlibc::Older { until: *until, marker: shown(m) });
    }
    for m in [MARKERS[0].0, FASTBIN_MARK] {
        if !has(m) {
            return refused(StaticGlibc::Missing { marker: shown(m) });
        }
    }
    // The newest marker of a layout held; every older one must be held too.
    let layout: Vec<_> = MARKERS.iter().filter(|m| m.2).collect();
    let top = layout.iter().rposition(|(m, ..)| has(m)).unwrap_or(0);
    if let Some((missing, since, _)) = layout[..top].iter().find(|(m, ..)| !has(m)) {
        return refused(StaticGlibc::Contradiction {
            held: shown(layout[top].0),
            held_since: layout[top].1,
            missing: shown(missing),
            missing_since: *since,
        });
    }
    // Narrowed by the others, below the next layout's start.
    let next = layout.get(top + 1).map_or((u32::MAX, 0), |m| m.1);
    let lo = MARKERS.iter().filter(|(m, since, _)| *since < next && has(m)).map(|m| m.1).fold(layout[top].1, Ord::max);
    Ok((lo, format!("glibc's version inferred from its strings: {} or later (no version banner in {path})", v(lo))))
}

/// The C library the process maps, and the allocator in it: libc.so.6
/// when it is mapped; else (a static program) the module whose read-only
/// memory holds glibc's banner, or glibc's tunables and the markers of
/// its version (`infer_version`). musl (its loader `ld-musl-*.so.1` mapped,
/// or a static program with no glibc in it) and the other allocators are
/// refused by name.
fn libc_maps(mem: &dyn Memory) -> Result<Libc> {
    let name = |m: &Map| m.file().and_then(|p| p.rsplit('/').next()).unwrap_or("").to_string();
    for m in mem.maps() {
        let n = name(m);
        for other in ["jemalloc", "tcmalloc", "mimalloc", "hoard", "snmalloc"] {
            if n.contains(other) {
                return Err(Error::OtherAllocator { module: n });
            }
        }
        // musl's loader is its C library too; where `ld-musl-*.so.1` is
        // a link, the file mapped is musl's `libc.so` (Debian's
        // /usr/lib/x86_64-linux-musl/libc.so; glibc's is libc.so.6).
        let musl_libc = n == "libc.so" && m.file().is_some_and(|p| p.contains("musl"));
        if n.starts_with("ld-musl-") || n.starts_with("libc.musl-") || musl_libc {
            return Err(Error::Musl { module: m.file().unwrap_or(&n).to_string() });
        }
    }
    let libc: Vec<Map> = mem.maps().iter().filter(|m| name(m).starts_with("libc.so.") || name(m).starts_with("libc-2.")).cloned().collect();
    if !libc.is_empty() {
        return Ok(Libc { maps: libc, version: None, inferred: None });
    }
    // No libc.so.6: a static program, glibc inside one of its modules
    // (those with code: not a data file), found by the banner in its
    // read-only data, else by its tunables (then its version by its
    // strings).
    // A core may leave a module's code out (gdb's keeps its first page
    // and its data): an ELF image's first page tells it too.
    let elf = |m: &Map| {
        let mut magic = [0u8; 4];
        m.offset == 0 && m.read && mem.read(m.start, &mut magic).is_ok() && &magic == b"\x7fELF"
    };
    let mut modules: Vec<&str> = Vec::new();
    for m in mem.maps().iter().filter(|m| m.exec || elf(m)) {
        if let Some(p) = m.file().filter(|p| !modules.contains(p)) {
            modules.push(p);
        }
    }
    let mut marked = None;
    for path in &modules {
        let maps: Vec<Map> = mem.maps().iter().filter(|m| m.file() == Some(path)).cloned().collect();
        match read_only_find(mem, &maps, banner) {
            Some(v) => return Ok(Libc { version: Some(v?), maps, inferred: None }),
            None if marked.is_none() && read_only_find(mem, &maps, |b| find(b, GLIBC_MARK)).is_some() => marked = Some((*path, maps)),
            None => {}
        }
    }
    if let Some((path, maps)) = marked {
        let all: Vec<&[u8]> = MARKERS.iter().map(|m| m.0).chain(NEWER.iter().chain(OLDER).map(|m| m.0)).chain([FASTBIN_MARK]).collect();
        let mut held = vec![false; all.len()];
        read_only_find(mem, &maps, |b| {
            for (h, m) in held.iter_mut().zip(&all) {
                *h = *h || find(b, m).is_some();
            }
            held.iter().all(|h| *h).then_some(())
        });
        let (version, note) = infer_version(path, |m| all.iter().zip(&held).any(|(a, h)| *h && *a == m))?;
        return Ok(Libc { maps, version: Some(version), inferred: Some(note) });
    }
    let exe = modules.first().copied().unwrap_or("the executable");
    Err(Error::NoGlibc { exe: exe.to_string() })
}

/// The first place `needle` is in `data` (the C library's search: the
/// process may be held while a static program's data is searched).
fn find(data: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    // SAFETY: both pointers and lengths come from live slices, which
    // memmem only reads; the result is null or points into `data`.
    let at = unsafe { libc::memmem(data.as_ptr().cast(), data.len(), needle.as_ptr().cast(), needle.len()) };
    (!at.is_null()).then(|| at as usize - data.as_ptr() as usize)
}

/// What `look` finds first in the read-only data of `maps` (one module's)
/// as the process maps it. A core may leave that data out (the kernel's
/// and gdb's keep only a file's first page): then in the file the core
/// names, where this machine has it (never for a live process, which is
/// held while this runs: its memory holds the data, and no file is read
/// then).
fn read_only_find<T>(mem: &dyn Memory, maps: &[Map], mut look: impl FnMut(&[u8]) -> Option<T>) -> Option<T> {
    let mut maps: Vec<&Map> = maps.iter().filter(|m| m.read && !m.write && m.end - m.start <= MAX_BANNER_MAP).collect();
    maps.sort_by_key(|m| m.exec); // the banner is in .rodata
    let mut missing = Vec::new();
    for m in maps {
        match mem.bytes(m.start, m.end - m.start) {
            Ok(b) => {
                if let Some(v) = look(&b) {
                    return Some(v);
                }
            }
            Err(_) => missing.push(m),
        }
    }
    for m in missing {
        let Some(Ok(f)) = m.file().and_then(|p| mem.host_file(p)) else { continue };
        let mut b = vec![0u8; (m.end - m.start) as usize];
        use std::os::unix::fs::FileExt;
        let Ok(n) = f.read_at(&mut b, m.offset) else { continue };
        if let Some(v) = look(&b[..n]) {
            return Some(v);
        }
    }
    None
}

/// glibc's version, from the "release version X.Y" of its banner in the
/// C library's read-only data as the process maps it (or, for a core that
/// left it out, as its file on this machine holds it).
fn version(mem: &dyn Memory, libc: &Libc) -> Result<(u32, u32)> {
    if let Some(v) = libc.version {
        return Ok(v);
    }
    if let Some(v) = read_only_find(mem, &libc.maps, banner) {
        return v;
    }
    let path = libc.maps.first().and_then(Map::file).unwrap_or("libc.so.6");
    Err(Error::NoGlibcVersion { path: path.to_string() })
}

/// The version the banner in `data` names, if it holds the banner.
fn banner(data: &[u8]) -> Option<Result<(u32, u32)>> {
    let needle = b"release version ";
    let at = find(data, needle)?;
    let rest = &data[at + needle.len()..];
    let text: String = rest.iter().take(16).take_while(|c| c.is_ascii_digit() || **c == b'.').map(|&c| c as char).collect();
    let mut it = text.split('.').map(|x| x.parse::<u32>());
    Some(match (it.next(), it.next()) {
        (Some(Ok(a)), Some(Ok(b))) => Ok((a, b)),
        _ => Err(Error::UnreadableBanner { text }),
    })
}

/// Whether a mapping can hold glibc's heaps: writable anonymous memory
/// (the brk heap, the other arenas' heaps, chunks mapped by themselves),
/// never a file's.
fn heap_map(m: &Map) -> bool {
    m.read && m.write && (m.anonymous() || m.path.as_deref() == Some("[heap]"))
}

/// Whether `p` may be a chunk: aligned, in heap memory.
fn chunk_like(mem: &dyn Memory, p: u64) -> bool {
    p % 16 == 0 && p != 0 && mem.map_of(p).is_some_and(heap_map)
}

/// The word at `off` of `w` (an arena's bytes).
fn word(w: &[u8], off: u64) -> u64 {
    let o = off as usize;
    w.get(o..o + 8).map_or(u64::MAX, |b| u64::from_le_bytes(b.try_into().unwrap_or([0xff; 8])))
}

/// Whether the `malloc_state` bytes `w` at `a` have an arena's shape: its
/// lock and flags small, its fastbins, top chunk, last remainder and bins
/// empty or chunks in heap memory (a bin's empty list is its own header),
/// its sizes in order. `main` is the main arena (`a` itself for a
/// candidate), which the free list may name. `next` is not looked at: a
/// broken ring is reported as such, not as a missing arena.
fn arena_shape(mem: &dyn Memory, a: u64, w: &[u8], main: u64) -> bool {
    if w.len() < ARENA_SIZE as usize {
        return false;
    }
    let half = |off: u64| word(w, off) & 0xffff_ffff;
    // The lock (0 free, 1 held, 2 held with waiters), the flags
    // (NONCONTIGUOUS_BIT, ARENA_CORRUPTION_BIT), have_fastchunks (a bool).
    if half(0) > 2 || half(FLAGS) & !6 != 0 || half(HAVE_FASTCHUNKS) > 1 {
        return false;
    }
    let chunk_or_empty = |p: u64| p == 0 || chunk_like(mem, p);
    if !(0..NFASTBINS).all(|i| chunk_or_empty(word(w, FASTBINS + 8 * i))) {
        return false;
    }
    // The top chunk: in heap memory, or the unsorted bin's header before
    // the arena's first allocation (glibc's `initial_top`).
    let top = word(w, TOP);
    if top != a + TOP && !chunk_like(mem, top) {
        return false;
    }
    if !chunk_or_empty(word(w, LAST_REMAINDER)) {
        return false;
    }
    for i in 0..NBINS {
        let own = a + BINS + 16 * i - 16;
        let (fd, bk) = (word(w, BINS + 16 * i), word(w, BINS + 16 * i + 8));
        if (fd, bk) != (own, own) && !(chunk_like(mem, fd) && chunk_like(mem, bk)) {
            return false;
        }
    }
    let next_free = word(w, NEXT_FREE);
    if next_free != 0 && next_free != main && !chunk_like(mem, next_free) {
        return false;
    }
    word(w, ATTACHED_THREADS) < 1 << 24 && word(w, SYSTEM_MEM) <= word(w, MAX_SYSTEM_MEM) && word(w, MAX_SYSTEM_MEM) < 1 << 47
}

/// `main_arena` where the C library's symbol table puts it, when its file
/// may be read (a core's, through `host_file`: never a live process's,
/// which is held) and carries one (Debian's and most distributions'
/// libc.so.6 do not: the symbol is in the separate debug file).
fn main_arena_symbol(mem: &dyn Memory, libc: &[Map]) -> Option<u64> {
    use object::{Object, ObjectSegment, ObjectSymbol};
    let first = libc.iter().find(|m| m.offset == 0)?;
    let mut f = mem.host_file(first.file()?)?.ok()?;
    if !f.metadata().is_ok_and(|m| m.is_file() && m.len() < 1 << 30) {
        return None;
    }
    let mut data = Vec::new();
    std::io::Read::read_to_end(&mut f, &mut data).ok()?;
    let elf = object::read::elf::ElfFile64::<object::Endianness>::parse(&*data).ok()?;
    let sym = elf.symbols().find(|s| s.name() == Ok("main_arena") && s.size() == ARENA_SIZE)?;
    let low = elf.segments().map(|s| s.address()).min()? & !0xfff;
    first.start.checked_sub(low)?.checked_add(sym.address())
}

/// Finds `main_arena`: where the C library's symbol says, when it has
/// one and the place has an arena's shape; else in its data, the one
/// `malloc_state` there whose every field has an arena's shape
/// (`arena_shape`), and when more than one does, the one whose ring of
/// arenas comes back to it.
fn find_main_arena(mem: &dyn Memory, libc: &[Map]) -> Result<u64> {
    if let Some(a) = main_arena_symbol(mem, libc) {
        if mem.bytes(a, ARENA_SIZE).is_ok_and(|w| arena_shape(mem, a, &w, a)) {
            return Ok(a);
        }
    }
    let mut found = Vec::new();
    for m in libc.iter().filter(|m| m.write && m.read) {
        let Ok(r) = Region::read(mem, m.start, m.end) else { continue };
        let mut a = m.start.next_multiple_of(8);
        while a + ARENA_SIZE <= m.end {
            if let Some(w) = r.slice(a, ARENA_SIZE) {
                if arena_shape(mem, a, w, a) {
                    found.push(a);
                }
            }
            a += 8;
        }
    }
    match found.as_slice() {
        [] => Err(Error::NoMainArena),
        [one] => Ok(*one),
        many => {
            let closed: Vec<u64> = many.iter().copied().filter(|&a| ring(mem, a).is_ok()).collect();
            match closed.as_slice() {
                [one] => Ok(*one),
                _ => Err(Error::MainArenaUncertain { candidates: many.to_vec() }),
            }
        }
    }
}

/// The ring of arenas from the main one through their `next`, checked:
/// every arena has an arena's shape, none is met twice, and the ring comes
/// back to the main arena.
fn ring(mem: &dyn Memory, main: u64) -> Result<Vec<u64>> {
    let mut arenas = vec![main];
    let mut met: HashSet<u64> = HashSet::from([main]);
    let (mut prev, mut a) = (main, mem.u64(main + NEXT)?);
    while a != main {
        let shaped = chunk_like(mem, a) && mem.bytes(a, ARENA_SIZE).is_ok_and(|w| arena_shape(mem, a, &w, main));
        if !shaped || arenas.len() >= MAX_ARENAS {
            return Err(Error::DamagedHeap { at: a, what: Damage::ArenaRingBroken { prev } });
        }
        if !met.insert(a) {
            return Err(Error::DamagedHeap { at: a, what: Damage::ArenaRingLoops { prev, main } });
        }
        arenas.push(a);
        prev = a;
        a = mem.u64(a + NEXT)?;
    }
    Ok(arenas)
}

/// glibc's `sbrk_base` (in `mp_`, its malloc parameters): where the brk
/// heap starts, when the C library's data holds exactly one
/// `malloc_par` whose heap start lies in `[lo, top]`.
fn sbrk_base(mem: &dyn Memory, libc: &[Map], version: (u32, u32), lo: u64, top: u64) -> Option<u64> {
    // mmapped_mem, max_mmapped_mem, sbrk_base, then the tcache's
    // parameters; before 2.35 no huge page fields precede them.
    let sb = if version >= (2, 35) { 96 } else { 72 };
    let mut found = Vec::new();
    for m in libc.iter().filter(|m| m.write && m.read) {
        let Ok(r) = Region::read(mem, m.start, m.end) else { continue };
        let mut q = m.start.next_multiple_of(8);
        while q + sb + 32 <= m.end {
            let w = |off: u64| r.u64(q + off).unwrap_or(u64::MAX);
            let base = w(sb);
            // tcache_bins is what glibc derives from tcache_max_bytes
            // (`csize2tidx (request2size (max)) + 1`): in a static
            // program, other words of glibc's data point into the brk
            // area too (its static TLS is there), followed by zeros.
            let max_bytes = w(sb + 16);
            // Only for a max_bytes already bounded by 1032 (no overflow).
            let bins = || ((max_bytes + 8 + 15) & !15).max(32).saturating_sub(32).div_ceil(16) + 1;
            if base >= lo
                && base <= top
                && w(sb + 8) <= TCACHE_BINS
                && max_bytes <= 1032
                && w(sb + 8) == bins()
                && w(sb + 24) <= u16::MAX as u64
                && w(16) <= HEAP_MAX
                && w(sb - 16) <= w(sb - 8)
            {
                found.push(base);
            }
            q += 8;
        }
    }
    match found.as_slice() {
        [one] => Some(*one),
        _ => None,
    }
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

/// The C library's maps and its arenas (the main one first), checked.
fn arenas(mem: &dyn Memory) -> Result<(Libc, Vec<u64>)> {
    let libc = libc_maps(mem)?;
    let main = find_main_arena(mem, &libc.maps)?;
    let arenas = ring(mem, main)?;
    Ok((libc, arenas))
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
/// (which must be met exactly) or at the heap's end or a fencepost. Every
/// step moves forward by at least a chunk's minimum size and stays below
/// `top` (or `end`): a size that does not is the damage, reported at its
/// chunk.
fn walk(r: &Region, start: u64, end: u64, top: Option<u64>, out: &mut Vec<Seen>) -> Result<()> {
    let mut c = start;
    let mut first = true;
    let limit = top.unwrap_or(end);
    loop {
        if Some(c) == top {
            return Ok(());
        }
        if c.checked_add(16).is_none_or(|h| h > end) {
            return match top {
                Some(top) => Err(Error::DamagedHeap { at: c, what: Damage::ChunksPastTop { top } }),
                None => Ok(()),
            };
        }
        let s = r.u64(c + 8).ok_or(Error::DamagedHeap { at: c, what: Damage::ChunkOutsideHeap })?;
        let size = s & !7;
        if size == 16 && top.is_none() {
            return Ok(()); // the fencepost closing an older heap
        }
        let Some(next) = c.checked_add(size).filter(|&n| size >= 32 && size % 16 == 0 && n <= limit) else {
            let why = if size < 32 || size % 16 != 0 {
                BadSize::NotASize
            } else {
                match top {
                    Some(t) => BadSize::PastTop(t),
                    None => BadSize::PastEnd(end),
                }
            };
            return Err(Error::DamagedHeap { at: c, what: Damage::ChunkSize { size: s, why } });
        };
        let in_use = match r.u64(next + 8) {
            Some(n) => n & 1 == 1,
            None if top.is_none() => true,
            None => return Err(Error::DamagedHeap { at: c, what: Damage::ChunkPastHeap }),
        };
        out.push(Seen { chunk: c, size, in_use, first });
        first = false;
        c = next;
    }
}

/// The size of the top chunk `top`, checked: it must end by `end`.
fn top_size(r: &Region, top: u64, end: u64) -> Result<u64> {
    let s = r.u64(top + 8).ok_or(Error::DamagedHeap { at: top, what: Damage::TopOutsideHeap })?;
    let size = s & !7;
    if size < 16 || size % 16 != 0 || top.checked_add(size).is_none_or(|e| e > end) {
        return Err(Error::DamagedHeap { at: top, what: Damage::TopSize { size: s, end } });
    }
    Ok(size)
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

/// The brk heap of the main arena whose top chunk is `top`: where it may
/// start (glibc's `sbrk_base` when found, then the first of its
/// mappings), where it ends (the top chunk's end), and the mappings
/// holding it. The kernel may map it in several mappings one after the
/// other (a forked child's heap grown after the fork is a mapping of its
/// own): glibc's heap is the one range from its `sbrk_base` to the end of
/// the top chunk, however it is mapped.
fn brk_heap(mem: &dyn Memory, libc: &[Map], version: (u32, u32), top: u64) -> Result<(Vec<u64>, u64, (u64, u64))> {
    let maps = mem.maps();
    let Some(i) = maps.iter().position(|m| m.start <= top && top < m.end && heap_map(m)) else {
        return Err(Error::DamagedHeap { at: top, what: Damage::TopNotInBrkHeap });
    };
    // A live process names every mapping of its brk heap "[heap]"; a core
    // names none: the anonymous mappings that follow one another.
    let named = maps[i].path.as_deref() == Some("[heap]");
    let joins = |m: &Map| heap_map(m) && (!named || m.path.as_deref() == Some("[heap]"));
    let (mut lo, mut hi) = (i, i);
    while lo > 0 && maps[lo - 1].end == maps[lo].start && joins(&maps[lo - 1]) {
        lo -= 1;
    }
    while hi + 1 < maps.len() && maps[hi + 1].start == maps[hi].end && joins(&maps[hi + 1]) {
        hi += 1;
    }
    let (run_start, run_end) = (maps[lo].start, maps[hi].end);
    let mut starts: Vec<u64> = sbrk_base(mem, libc, version, run_start, top).map(|b| b.next_multiple_of(16)).into_iter().collect();
    if !starts.contains(&run_start) {
        starts.push(run_start);
    }
    let head = Region::read(mem, top, (top + 16).min(run_end))?;
    let end = top + top_size(&head, top, run_end)?;
    Ok((starts, end, (run_start, run_end)))
}

/// Walks glibc's heap in `mem`.
pub fn walk_heap(mem: &dyn Memory) -> Result<GlibcHeap> {
    let (libc, arenas) = arenas(mem)?;
    let version = version(mem, &libc)?;
    if !(OLDEST_GLIBC..=NEWEST_GLIBC).contains(&version) {
        return Err(Error::UnsupportedGlibc { version });
    }
    let heap_info = if version >= (2, 35) { 48 } else { 32 };
    let mut h = GlibcHeap {
        live: Vec::new(),
        arenas: arenas.len(),
        heap_ranges: Vec::new(),
        mmapped: Vec::new(),
        regions: Vec::new(),
        cached_free: 0,
        version,
        version_inferred: libc.inferred.is_some(),
        static_arena: libc.version.map(|_| (arenas[0], arenas[0] + ARENA_SIZE)),
        warnings: libc.inferred.iter().cloned().collect(),
        allocator: format!("glibc {}.{}", version.0, version.1),
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
            // From glibc's own start when found; from the first mapping
            // when that walk does not reach the top chunk (the damage is
            // then the first walk's).
            let (starts, end, range) = brk_heap(mem, &libc.maps, version, top)?;
            let before = seen.len();
            let mut first_error = None;
            for start in starts {
                let r = Region::read(mem, start, end)?;
                match walk(&r, start, top, Some(top), &mut seen) {
                    Ok(()) => {
                        // What the program took with sbrk below glibc's
                        // heap is its own: roots, as other anonymous memory.
                        h.heap_ranges.push((start, range.1));
                        h.regions.push(r);
                        first_error = None;
                        break;
                    }
                    Err(e) => {
                        seen.truncate(before);
                        first_error.get_or_insert(e);
                    }
                }
            }
            if let Some(e) = first_error {
                return Err(e);
            }
            continue;
        }
        // Another arena: its heaps, newest (holding top) first, through
        // each heap_info's `prev`, each met once.
        let mut hp = top & !(HEAP_MAX - 1);
        let mut newest = true;
        let mut met: HashSet<u64> = HashSet::new();
        loop {
            if hp % HEAP_MAX != 0 || !met.insert(hp) || met.len() > MAX_ARENAS {
                return Err(Error::DamagedHeap { at: hp, what: Damage::ArenaHeaps { arena: ar } });
            }
            let owner = mem.u64(hp)?;
            let prev = mem.u64(hp + 8)?;
            let size = mem.u64(hp + 16)?;
            if owner != ar || size > HEAP_MAX || size < heap_info + 32 {
                return Err(Error::DamagedHeap { at: hp, what: Damage::HeapNotOfArena { arena: ar } });
            }
            let start = if ar >= hp && ar < hp + size { (ar + ARENA_SIZE).next_multiple_of(16) } else { hp + heap_info };
            let end = hp + size;
            let r = Region::read(mem, hp, end)?;
            if newest {
                if !(start..end).contains(&top) {
                    return Err(Error::DamagedHeap { at: top, what: Damage::TopNotInHeap { arena: ar, heap: hp, end } });
                }
                top_size(&r, top, end)?;
            }
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
    // Free chunks that look in use: the fastbins' and the caches'. Each
    // list is followed through chunks of the heap only, each chunk once.
    seen.sort_unstable_by_key(|s| s.chunk);
    let index = Index(&seen);
    let mut free: HashSet<u64> = HashSet::new();
    for &ar in &arenas {
        for i in 0..NFASTBINS {
            let mut p = mem.u64(ar + FASTBINS + 8 * i)?;
            while p != 0 {
                let Some(k) = index.get(p) else {
                    h.warnings.push(format!("fastbin {i} of arena {ar:#x} leads to {p:#x}, not a chunk: the rest of it is not read"));
                    break;
                };
                if seen[k].size != 32 + 16 * i || !seen[k].in_use {
                    h.warnings
                        .push(format!("fastbin {i} of arena {ar:#x} leads to chunk {p:#x} of another size: the rest of it is not read"));
                    break;
                }
                if !free.insert(p) {
                    return Err(Error::DamagedHeap { at: p, what: Damage::FastbinLoop { bin: i as usize, arena: ar } });
                }
                p = reveal(version, p + 16, mem.u64(p + 16)?);
            }
        }
    }
    let mut caches: HashSet<u64> = HashSet::new();
    // (A cache carved from a free chunk only 16 bytes larger takes it
    // whole: glibc splits off no remainder under 32 bytes. Busy threads
    // over few arenas make such caches often.)
    for s in seen.iter().filter(|s| s.in_use && (s.size == TCACHE_CHUNK || s.size == TCACHE_CHUNK + 16)) {
        if let Some(entries) = tcache_entries(mem, version, s, &seen, &index)? {
            caches.insert(s.chunk);
            for c in entries {
                if !free.insert(c) {
                    return Err(Error::DamagedHeap { at: c, what: Damage::HeldFreeTwice { cache: s.chunk + 16 } });
                }
            }
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
/// the chunks its lists hold. It is one when every list's count and head
/// agree (both naught, or a count and a chunk of the list's size class
/// in use) and some list holds a chunk; an empty cache counts only as the
/// first chunk of a heap (where a thread's first allocation puts it), so
/// that a program's own zeroed block of that size stays live. In a
/// cache, a list that leads past its head to no chunk of its size class,
/// comes back to a chunk it has passed, or holds other than its count is
/// a damaged heap (a write into a freed block, most often), not a block
/// of the program's.
fn tcache_entries(mem: &dyn Memory, version: (u32, u32), s: &Seen, seen: &[Seen], index: &Index<'_>) -> Result<Option<Vec<u64>>> {
    let Ok(body) = mem.bytes(s.chunk + 16, 2 * TCACHE_BINS + 8 * TCACHE_BINS) else { return Ok(None) };
    let count = |i: usize| u16::from_le_bytes([body[2 * i], body[2 * i + 1]]) as usize;
    let entry = |i: usize| u64::from_le_bytes(body[128 + 8 * i..136 + 8 * i].try_into().unwrap_or([0; 8]));
    let cache = s.chunk + 16;
    // The chunk of list `i`'s entry `e`, when it is one of its class in use.
    let of_list = |i: usize, e: u64| {
        let c = e.checked_sub(16)?;
        let k = index.get(c)?;
        (seen[k].size == 32 + 16 * i as u64 && seen[k].in_use).then_some(c)
    };
    let mut any = false;
    for i in 0..TCACHE_BINS as usize {
        let (n, e) = (count(i), entry(i));
        if (n == 0) != (e == 0) || (e != 0 && of_list(i, e).is_none()) {
            return Ok(None);
        }
        any |= e != 0;
    }
    if !any {
        return Ok(s.first.then_some(Vec::new()));
    }
    let mut out = Vec::new();
    let mut met: HashSet<u64> = HashSet::new();
    for i in 0..TCACHE_BINS as usize {
        let (n, mut e) = (count(i), entry(i));
        // Followed to its end (a loop is met within as many steps as
        // there are chunks), then held to its count.
        let mut len = 0;
        while e != 0 {
            let broken = |at| Error::DamagedHeap { at, what: Damage::TcacheBroken { list: i, cache } };
            let c = of_list(i, e).ok_or(broken(e))?;
            if !met.insert(c) {
                return Err(Error::DamagedHeap { at: c, what: Damage::TcacheLoop { list: i, cache } });
            }
            out.push(c);
            len += 1;
            let stored = mem.u64(e).map_err(|_| broken(e))?;
            e = reveal(version, e, stored);
        }
        if len != n {
            return Err(Error::DamagedHeap { at: cache, what: Damage::TcacheCount { list: i, count: n, held: len } });
        }
    }
    Ok(Some(out))
}

/// The chunks glibc mapped by themselves: at a page start of an anonymous
/// writable mapping, a header with no previous size and the "mapped" bit,
/// a size of whole pages that fits the mapping (the kernel merges
/// neighbouring mappings, so several may share one). A block aligned
/// beyond 16 bytes has its header further in, its previous size saying
/// how far (`_int_memalign`).
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
            while p.checked_add(4096).is_some_and(|e| e <= b) {
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

/// The mapped chunk whose mapping starts at `p`, if there is one ending by
/// `end`: recorded, and its mapping's size returned.
fn mapped_chunk_at(mem: &dyn Memory, h: &mut GlibcHeap, p: u64, end: u64) -> Result<Option<u64>> {
    // Sixteen bytes a page, the rest of the page only under a header.
    let mut page = [0u8; 4096];
    if mem.read(p, &mut page[..16]).is_err() {
        return Ok(None);
    }
    let at = |page: &[u8; 4096], o: u64| u64::from_le_bytes(page[o as usize..o as usize + 8].try_into().unwrap_or([0; 8]));
    let (prev, s) = (at(&page, 0), at(&page, 8));
    let size = s & !7;
    if prev != 0 || s & 7 != 2 || mem.read(p + 16, &mut page[16..]).is_err() {
        return Ok(None);
    }
    let room = end - p;
    // The header at the mapping's start stays as mmap made it; an aligned
    // block's own header is where its alignment put it, saying so in its
    // previous size, its size ending with the mapping (mremap, shrinking
    // or growing the block, keeps that offset and leaves the first header
    // with the size it had).
    let mut chunk = None;
    let mut align = 32u64;
    while align < room {
        let mut lead = (p + 16).next_multiple_of(align) - 16 - p;
        if lead < 32 {
            lead += align; // glibc leaves room for a chunk before it
        }
        if lead + 32 > room {
            break;
        }
        let (pv, sz) = if lead + 16 <= 4096 {
            (at(&page, lead), at(&page, lead + 8))
        } else {
            let mut hdr = [0u8; 16];
            if mem.read(p + lead, &mut hdr).is_err() {
                break;
            }
            (u64::from_le_bytes(hdr[..8].try_into().unwrap_or([0; 8])), u64::from_le_bytes(hdr[8..].try_into().unwrap_or([0; 8])))
        };
        let n = sz & !7;
        if pv == lead && sz & 7 == 2 && n >= 32 && (lead + n) % 4096 == 0 && lead + n <= room {
            chunk = Some((p + lead, n));
            break;
        }
        align *= 2;
    }
    let chunk = match chunk {
        Some(c) => c,
        None if size >= 4096 && size % 4096 == 0 && size <= room => (p, size),
        None => return Ok(None),
    };
    let (c, n) = chunk;
    let mapping = c - p + n;
    h.live.push(Chunk { mem: c + 16, usable: n - 16 });
    h.mmapped.push((p, p + mapping));
    h.regions.push(Region::read(mem, c, c + n)?);
    Ok(Some(mapping))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::Fake;

    /// An arena at `a` as glibc starts it (its bins their own headers, its
    /// top the unsorted bin's header, its ring itself), in `run` at `start`.
    fn put_arena(run: &mut [u8], start: u64, a: u64) {
        let mut w = |off: u64, v: u64| {
            let o = (a - start + off) as usize;
            run[o..o + 8].copy_from_slice(&v.to_le_bytes());
        };
        w(TOP, a + TOP);
        for i in 0..NBINS {
            let own = a + BINS + 16 * i - 16;
            w(BINS + 16 * i, own);
            w(BINS + 16 * i + 8, own);
        }
        w(NEXT, a);
        w(ATTACHED_THREADS, 1);
    }

    #[test]
    fn two_places_shaped_as_the_main_arena_are_refused_unless_the_symbol_says() {
        // A shared object named libc.so.6 whose symbol table has
        // main_arena, as an unstripped C library does.
        let dir = std::env::temp_dir().join(format!("hd-glibc-symbol-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (src, lib) = (dir.join("arena.c"), dir.join("libc.so.6"));
        std::fs::write(&src, "struct arena { char b[2200]; };\nstatic struct arena main_arena __attribute__((used));\nchar *f(void) { return main_arena.b; }\n")
            .unwrap();
        let o = std::process::Command::new("gcc").args(["-shared", "-fPIC", "-o"]).arg(&lib).arg(&src).output().expect("gcc is installed");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let data = std::fs::read(&lib).unwrap();
        let elf = object::read::elf::ElfFile64::<object::Endianness>::parse(&*data).unwrap();
        use object::{Object, ObjectSymbol};
        let at = elf.symbols().find(|s| s.name() == Ok("main_arena")).unwrap().address();
        // Mapped at `base`: its first page, and the data holding the
        // arena and a decoy of the same shape after it.
        let base = 0x7f00_0000_0000u64;
        let (lo, hi) = (base + (at & !0xfff), base + (at & !0xfff) + 0x3000);
        let path = lib.display().to_string();
        let map = |start, end, write, offset| Map { start, end, read: true, write, exec: false, offset, path: Some(path.clone()) };
        let maps = vec![map(base, base + 0x1000, false, 0), map(lo, hi, true, at & !0xfff)];
        let (real, decoy) = (base + at, base + at + ARENA_SIZE + 64);
        let mut run = vec![0u8; (hi - lo) as usize];
        put_arena(&mut run, lo, real);
        put_arena(&mut run, lo, decoy);
        let runs = vec![(base, vec![0u8; 0x1000]), (lo, run)];
        // A live process (no file read): not certain, refused naming both.
        let live = Fake { maps: maps.clone(), runs: runs.clone(), file: None };
        let e = find_main_arena(&live, &maps).unwrap_err().to_string();
        assert!(e.contains("not certain") && e.contains(&format!("{real:#x}")) && e.contains(&format!("{decoy:#x}")), "{e}");
        // A core, the C library's file at hand: where its symbol says.
        let core = Fake { maps: maps.clone(), runs, file: Some(lib) };
        assert_eq!(find_main_arena(&core, &maps).unwrap(), real);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A static program at 0x400000: its ELF page, code, read-only data
    /// holding `rodata`, its writable data; or a program mapping `loader`.
    fn static_program(rodata: &[u8], loader: Option<&str>) -> Fake {
        let exe = Some("/app/prog".to_string());
        let map = |start, end, write, exec, offset, path: &Option<String>| Map {
            start,
            end,
            read: true,
            write,
            exec,
            offset,
            path: path.clone(),
        };
        let mut maps = vec![
            map(0x40_0000, 0x40_1000, false, false, 0, &exe),
            map(0x40_1000, 0x40_2000, false, true, 0x1000, &exe),
            map(0x40_2000, 0x40_3000, false, false, 0x2000, &exe),
            map(0x40_3000, 0x40_4000, true, false, 0x3000, &exe),
        ];
        let mut head = vec![0u8; 0x1000];
        head[..4].copy_from_slice(b"\x7fELF");
        let mut ro = vec![0u8; 0x1000];
        ro[0x100..0x100 + rodata.len()].copy_from_slice(rodata);
        let mut runs = vec![(0x40_0000, head), (0x40_1000, vec![0u8; 0x1000]), (0x40_2000, ro), (0x40_3000, vec![0u8; 0x1000])];
        if let Some(l) = loader {
            maps.push(map(0x7f00_0000_0000, 0x7f00_0000_1000, false, true, 0, &Some(l.to_string())));
            runs.push((0x7f00_0000_0000, vec![0u8; 0x1000]));
        }
        Fake { maps, runs, file: None }
    }

    #[test]
    fn a_static_programs_glibc_is_found_by_its_banner_and_musl_is_refused_by_name() {
        let banner = b"GNU C Library (Debian GLIBC 2.36-9) stable release version 2.36.\n";
        let libc = libc_maps(&static_program(banner, None)).map_err(|e| e.to_string()).unwrap();
        assert_eq!((libc.maps.len(), libc.version), (4, Some((2, 36))));
        let refused = |mem: &Fake| libc_maps(mem).err().map(|e| e.to_string()).unwrap_or_default();
        // glibc without its banner, none of its version's markers either.
        let e = refused(&static_program(b"\0GLIBC_TUNABLES\0", None));
        assert!(
            e.contains("/app/prog is statically linked with glibc but holds neither its version banner nor \"glibc.malloc.mxfast\""),
            "{e}"
        );
        // Neither banner nor glibc: a static musl program.
        let e = refused(&static_program(b"\0No error information\0", None));
        assert!(e.contains("statically linked without glibc") && e.contains("musl") && e.contains("cannot read"), "{e}");
        // musl's loader, by either name it is mapped under.
        for l in ["/lib/ld-musl-x86_64.so.1", "/usr/lib/x86_64-linux-musl/libc.so"] {
            let e = refused(&static_program(b"", Some(l)));
            assert_eq!(e, format!("the process runs on musl ({l} is mapped) but its malloc state is not mallocng's: attach and core read musl 1.2.1 or later"));
        }
        // A banner that names no version is refused, not guessed at.
        let e = refused(&static_program(b"release version x.y", None));
        assert!(e.contains("cannot read glibc's version"), "{e}");
    }

    /// The read-only data of a static glibc without its banner holding
    /// `markers` (each with its NUL, as glibc's strings are).
    fn unbannered(markers: &[&[u8]]) -> Fake {
        let mut ro = b"\0GLIBC_TUNABLES\0".to_vec();
        for m in markers {
            ro.extend_from_slice(m);
            ro.push(0);
        }
        static_program(&ro, None)
    }

    #[test]
    fn a_static_glibcs_version_without_its_banner_is_inferred_from_its_strings() {
        let (mxfast, fasttop, tcache, too_many, hugetlb, decorate) = (
            &b"glibc.malloc.mxfast"[..],
            &b"double free or corruption (fasttop)"[..],
            &b"malloc(): unaligned tcache chunk detected"[..],
            &b"free(): too many chunks detected in tcache"[..],
            &b"glibc.malloc.hugetlb"[..],
            &b"glibc.mem.decorate_maps"[..],
        );
        let inferred = |markers: &[&[u8]]| {
            let libc = libc_maps(&unbannered(markers)).map_err(|e| e.to_string()).unwrap();
            (libc.version, libc.inferred.unwrap_or_default())
        };
        // Debian 12's 2.36: the layout of 2.35 and later.
        let (v, note) = inferred(&[fasttop, tcache, mxfast, too_many, hugetlb]);
        assert_eq!(v, Some((2, 35)));
        assert_eq!(note, "glibc's version inferred from its strings: 2.35 or later (no version banner in /app/prog)");
        // Each boundary of the layout.
        assert_eq!(inferred(&[mxfast, fasttop]).0, Some((2, 30)));
        assert_eq!(inferred(&[mxfast, fasttop, tcache]).0, Some((2, 32)));
        assert_eq!(inferred(&[mxfast, fasttop, tcache, too_many, hugetlb, decorate]).0, Some((2, 39)));
        // A later check a stable branch took narrows nothing past the layout.
        assert_eq!(inferred(&[mxfast, fasttop, tcache, b"free(): chunks in smallbin corrupted"]).0, Some((2, 32)));
        let refused = |markers: &[&[u8]]| libc_maps(&unbannered(markers)).err().map(|e| e.to_string()).unwrap_or_default();
        // A marker of 2.42 (its cache of 76 lists): refused naming it.
        let e = refused(&[mxfast, fasttop, tcache, too_many, hugetlb, b"max tcache size too large"]);
        assert!(e.starts_with("/app/prog is statically linked with glibc 2.42 or later") && e.contains("it reads 2.30 to 2.41"), "{e}");
        // A tunable only 2.26 to 2.28 have.
        let e = refused(&[mxfast, fasttop, b"glibc.tune.hwcap_mask"]);
        assert!(e.starts_with("/app/prog is statically linked with glibc 2.28 or older"), "{e}");
        // Markers that contradict: 2.35's tunable without safe-linking's check.
        let e = refused(&[mxfast, fasttop, hugetlb]);
        assert!(e.contains("contradict") && e.contains("\"glibc.malloc.hugetlb\" (glibc 2.35 and later) without \"malloc(): unaligned tcache chunk detected\" (glibc 2.32 and later)"), "{e}");
        // The fastbins' message missing (glibc after 2.42 has none).
        let e = refused(&[mxfast, tcache]);
        assert!(e.contains("nor \"double free or corruption (fasttop)\""), "{e}");
        // A string is a marker only whole: a longer one holding it is not.
        let e = refused(&[fasttop, b"glibc.malloc.mxfast_x"]);
        assert!(e.contains("nor \"glibc.malloc.mxfast\""), "{e}");
    }

    #[test]
    fn mp_is_told_from_other_words_pointing_into_the_brk_area() {
        // glibc's data: a word pointing into the brk area followed by zeros
        // (a static program's TLS pointers), then mp_ as glibc 2.36 sets it
        // up (sbrk_base at 96, then tcache_bins, tcache_max_bytes, count).
        let (data, heap) = (0x40_3000u64, 0x100_0000u64);
        let mut run = vec![0u8; 0x1000];
        let mut put = |at: u64, v: u64| run[at as usize..at as usize + 8].copy_from_slice(&v.to_le_bytes());
        put(0x100 + 96, heap + 0x40);
        let mp = 0x400u64;
        for (off, v) in
            [(0, 0x20000), (8, 0x20000), (16, 0x20000), (24, 8), (64, 0x10000), (96, heap + 0xd00), (104, 64), (112, 1032), (120, 7)]
        {
            put(mp + off, v);
        }
        let map = |start, end, write| Map { start, end, read: true, write, exec: false, offset: 0, path: Some("/app/prog".into()) };
        let maps = vec![map(data, data + 0x1000, true), Map { path: Some("[heap]".into()), ..map(heap, heap + 0x22000, true) }];
        let mem = Fake { maps: maps.clone(), runs: vec![(data, run)], file: None };
        assert_eq!(sbrk_base(&mem, &maps[..1], (2, 36), heap, heap + 0x21000), Some(heap + 0xd00));
    }
}
