//! A dump written from outside: the live chunks glibc's heap holds, the
//! threads' registers and stacks, the modules and their writable
//! segments, the anonymous memory that is neither heap nor stack; no
//! sites. Every command reads it as it reads a dump `heapdump run` wrote.

use crate::error::{on_file, Error, FileOp, Result, Unread};
use crate::glibc::{walk_heap, Chunk, GlibcHeap};
use crate::live::ThreadRegs;
use crate::memory::{Map, Memory};
use heapdump_format::lookup::{self, Directory, Line, Run, Shape};
use heapdump_format::{
    raw, Alloc, Backtrace, Contents, Header, Link, Mode, ModuleInfo, Process, Reason, Segment, Sink, Static, ThreadInfo, WriteError, Writer,
};
use object::read::elf::{FileHeader, ProgramHeader};
use object::Endianness;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The root a runtime thread's stack is written as.
const RUNTIME_STACK: &[u8] = b"stack of the runtime's thread (heapdump)";

/// How many allocations ahead the compact scan's lookups are prefetched.
const PREFETCH_AHEAD: usize = 16;

/// The most of a thread's stack read above its stack pointer.
const MAX_STACK: u64 = 256 << 20;

/// What a capture wrote.
#[derive(Clone, Debug, Default)]
pub struct CaptureInfo {
    /// Live allocations written.
    pub allocations: u64,
    /// Their usable bytes.
    pub bytes: u64,
    /// Threads.
    pub threads: usize,
    /// glibc's arenas.
    pub arenas: usize,
    /// Freed chunks held in glibc's caches (not live).
    pub cached_free: u64,
    /// glibc's version.
    pub glibc: (u32, u32),
    /// The allocator read and its version (`glibc 2.36`, `jemalloc 5.3.0`).
    pub allocator: String,
    /// Whether `glibc` is only the oldest version the program's strings
    /// allow (a static program without glibc's banner).
    pub glibc_inferred: bool,
    /// How long the process was held (live captures): every stop's, when
    /// it was stopped more than once.
    pub pause_ns: u64,
    /// How many times it was stopped (live captures: again after a stop
    /// that found an allocator's lock taken, or a heap mid-update).
    pub stops: usize,
    /// What the user should know (memory a core did not hold, a locked
    /// arena, …).
    pub warnings: Vec<String>,
}

impl CaptureInfo {
    /// The heap read and what of it was left out, as the report line says
    /// it: `3 arenas of glibc 2.36, 5 freed chunks in its caches left out`.
    pub fn heap(&self) -> String {
        if self.allocator.starts_with("glibc") || self.allocator.is_empty() {
            let later = if self.glibc_inferred { " or later" } else { "" };
            let (a, b) = self.glibc;
            return format!("{} arenas of glibc {a}.{b}{later}, {} freed chunks in its caches left out", self.arenas, self.cached_free);
        }
        if self.allocator.starts_with("mimalloc 3") {
            return format!("{} pages of {}, {} free blocks in its lists left out", self.arenas, self.allocator, self.cached_free);
        }
        if self.allocator.starts_with("mimalloc") {
            return format!("{} segments of {}, {} free blocks in its lists left out", self.arenas, self.allocator, self.cached_free);
        }
        if self.allocator.starts_with("tcmalloc") {
            return format!(
                "{} spans of {}, {} free objects in its lists and caches left out",
                self.arenas, self.allocator, self.cached_free
            );
        }
        if self.allocator.starts_with("musl") {
            return format!("{} groups of {}, {} free slots left out", self.arenas, self.allocator, self.cached_free);
        }
        format!("{} extents of {}, {} freed regions in its thread caches left out", self.arenas, self.allocator, self.cached_free)
    }
}

/// Who the process is.
pub struct Identity {
    /// Process id.
    pub pid: u32,
    /// Executable path.
    pub exe: String,
    /// Command line, NUL-separated.
    pub cmdline: Vec<u8>,
}

struct FileSink(std::io::BufWriter<std::fs::File>);

impl Sink for FileSink {
    fn write_all(&mut self, data: &[u8]) -> Result<(), WriteError> {
        self.0.write_all(data).map_err(|e| WriteError::Sink { errno: e.raw_os_error().unwrap_or(libc::EIO) })
    }
}

/// A module: the file mapped, its load bias and segments.
struct Module {
    path: String,
    bias: u64,
    build_id: Vec<u8>,
    segments: Vec<Segment>,
    /// Its TLS segment's size (0: none).
    tls: u64,
}

/// The most of a module's program headers read (64 KiB: over a thousand
/// headers), and of one of its notes.
const MAX_HEADERS: u64 = 64 << 10;

/// The ELF objects mapped. Their headers are read from the process's own
/// memory (the mapping at offset 0 holds the ELF and program headers),
/// never from a file of the same name on this machine: a process in a
/// container names its files by paths inside it, and a live process is
/// read while held, when only its memory is. A core usually leaves the
/// headers out (gdb's does): the file its note names is read then, its
/// headers only, and used only when it fits the core's mappings.
fn modules(mem: &dyn Memory, warnings: &mut Vec<String>) -> Vec<Module> {
    use std::collections::{HashMap, HashSet};
    let mut out: Vec<Module> = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    // Files read from this machine, by device and inode: a core naming
    // one file under many names reads it once.
    let mut read: HashMap<(u64, u64), Option<Headers>> = HashMap::new();
    // Each file's writable mappings (a core's: named by its note).
    let mut writable: HashMap<&str, Vec<&Map>> = HashMap::new();
    for m in mem.maps().iter().filter(|m| m.write) {
        if let Some(p) = m.file() {
            writable.entry(p).or_default().push(m);
        }
    }
    for m in mem.maps().iter().filter(|m| m.offset == 0) {
        let Some(path) = m.file() else { continue };
        if !seen.insert(path) {
            continue;
        }
        // Headers, and whether they came from this machine's file; or why
        // this machine has no usable file.
        let found = match headers_in_memory(mem, m) {
            Some(h) => Ok((h, false)),
            None => match mem.host_file(path) {
                None => continue, // live: not an ELF object
                Some(Err(e)) => Err(format!("not on this machine ({e})")),
                Some(Ok(f)) => {
                    use std::os::unix::fs::MetadataExt;
                    let Ok(meta) = f.metadata() else { continue };
                    if !meta.is_file() {
                        continue; // a device, a pipe: no headers to read
                    }
                    let Some(h) = read.entry((meta.dev(), meta.ino())).or_insert_with(|| headers_in_file(&f)).clone() else {
                        continue; // not an ELF object: a data file
                    };
                    Ok((h, true))
                }
            },
        };
        let found = found.and_then(|(h, from_file)| {
            let first = h.segments.first().map(|s| s.vaddr & !0xfff).unwrap_or(0);
            let bias = m.start.wrapping_sub(first);
            match from_file.then(|| fits(mem, path, bias, &h)) {
                Some(Err(why)) => Err(format!("on this machine it is not the file the process mapped: {why}")),
                _ => Ok((h, bias)),
            }
        });
        match found {
            Ok((h, bias)) => {
                let build_id = match &h.build_id {
                    Some(id) => id.clone(),
                    None => build_id_in_memory(mem, bias, &h).unwrap_or_default(),
                };
                out.push(Module { path: path.to_string(), bias, build_id, segments: h.segments, tls: h.tls });
            }
            // No headers to trust: a core still holds the file's writable
            // mappings, its data; they are its writable segments (its
            // bss, anonymous, is a root as anonymous memory).
            Err(why) => {
                let Some(w) = writable.get(path) else { continue };
                warnings.push(format!("{path}: {why}: its writable segments are taken from the core's mappings"));
                let segments = w
                    .iter()
                    .map(|x| Segment {
                        vaddr: x.start - m.start.min(x.start),
                        memsz: x.end - x.start,
                        file_offset: x.offset,
                        flags: raw::SEG_R | raw::SEG_W,
                    })
                    .collect();
                out.push(Module { path: path.to_string(), bias: m.start, build_id: Vec::new(), segments, tls: 0 });
            }
        }
    }
    out
}

/// What a module's headers say.
#[derive(Clone)]
struct Headers {
    segments: Vec<Segment>,
    tls: u64,
    /// Its notes (address, size), where its build-id is.
    notes: Vec<(u64, u64)>,
    /// The build-id, when read from the file.
    build_id: Option<Vec<u8>>,
}

/// Parses the headers of an x86-64 ELF object from the start of its
/// image: `read(offset, len)` gives its bytes.
fn parse_headers(read: impl Fn(u64, u64) -> Option<Vec<u8>>) -> Option<Headers> {
    let head = read(0, 64)?;
    let hdr = object::elf::FileHeader64::<Endianness>::parse(&*head).ok()?;
    let e = hdr.endian().ok()?;
    let ty = hdr.e_type(e);
    if hdr.e_machine(e) != object::elf::EM_X86_64 || !(ty == object::elf::ET_EXEC || ty == object::elf::ET_DYN) {
        return None;
    }
    let (phoff, phnum, entsize) = (hdr.e_phoff(e), u64::from(hdr.e_phnum(e)), u64::from(hdr.e_phentsize(e)));
    let need = phoff.checked_add(phnum.checked_mul(entsize)?)?;
    if entsize != 56 || phnum == 0 || need > MAX_HEADERS {
        return None;
    }
    let data = read(0, need)?;
    let hdr = object::elf::FileHeader64::<Endianness>::parse(&*data).ok()?;
    let mut h = Headers { segments: Vec::new(), tls: 0, notes: Vec::new(), build_id: None };
    for ph in hdr.program_headers(e, &*data).ok()? {
        match ph.p_type(e) {
            object::elf::PT_TLS => h.tls = ph.p_memsz(e),
            object::elf::PT_NOTE => h.notes.push((ph.p_vaddr(e), ph.p_filesz(e).min(MAX_HEADERS))),
            object::elf::PT_LOAD => {
                let f = ph.p_flags(e).0;
                let flags = (if f & 4 != 0 { raw::SEG_R } else { 0 })
                    | (if f & 2 != 0 { raw::SEG_W } else { 0 })
                    | (if f & 1 != 0 { raw::SEG_X } else { 0 });
                h.segments.push(Segment { vaddr: ph.p_vaddr(e), memsz: ph.p_memsz(e), file_offset: ph.p_offset(e), flags });
            }
            _ => {}
        }
    }
    (!h.segments.is_empty()).then_some(h)
}

/// A module's headers from the mapping of its start, when it holds them.
fn headers_in_memory(mem: &dyn Memory, m: &Map) -> Option<Headers> {
    // Only a mapping that could be an ELF object's start: readable, and
    // its first bytes the magic (a large data file mapped beside the heap
    // costs one read of 4 bytes).
    if !m.read {
        return None;
    }
    let mut magic = [0u8; 4];
    mem.read(m.start, &mut magic).ok()?;
    if &magic != b"\x7fELF" {
        return None;
    }
    parse_headers(|off, len| (off.checked_add(len)? <= m.end - m.start).then(|| mem.bytes(m.start + off, len).ok()).flatten())
}

/// A module's headers (and its build-id) from its file: the headers and
/// the notes only, never the whole file.
fn headers_in_file(f: &std::fs::File) -> Option<Headers> {
    use std::os::unix::fs::FileExt;
    let read = |off: u64, len: u64| {
        let mut v = vec![0u8; usize::try_from(len.min(MAX_HEADERS)).ok()?];
        f.read_exact_at(&mut v, off).ok()?;
        Some(v)
    };
    let mut h = parse_headers(read)?;
    // The notes are found by their file offsets: the segment holding each.
    let mut id = None;
    for &(vaddr, size) in &h.notes {
        let Some(sg) = h.segments.iter().find(|s| s.vaddr <= vaddr && s.vaddr.checked_add(s.memsz).is_some_and(|e| vaddr < e)) else {
            continue;
        };
        let Some(bytes) = sg.file_offset.checked_add(vaddr - sg.vaddr).and_then(|at| read(at, size)) else { continue };
        if let Some(b) = build_id_of(&bytes) {
            id = Some(b);
            break;
        }
    }
    h.build_id = Some(id.unwrap_or_default());
    Some(h)
}

/// The build-id among ELF notes.
fn build_id_of(notes: &[u8]) -> Option<Vec<u8>> {
    let mut it = object::read::elf::NoteIterator::<object::elf::FileHeader64<Endianness>>::new(Endianness::Little, 4, notes).ok()?;
    while let Ok(Some(n)) = it.next() {
        if n.name() == b"GNU" && n.n_type(Endianness::Little) == object::elf::NT_GNU_BUILD_ID {
            return Some(n.desc().to_vec());
        }
    }
    None
}

/// The build-id in a module's notes, read from memory.
fn build_id_in_memory(mem: &dyn Memory, bias: u64, h: &Headers) -> Option<Vec<u8>> {
    h.notes.iter().find_map(|&(vaddr, size)| build_id_of(&mem.bytes(bias.wrapping_add(vaddr), size).ok()?))
}

/// Whether a module file found on this machine is the one the core's
/// process mapped: each of its loaded segments where the core's note says
/// this file is mapped, at the offset it says, and its build-id the one in
/// the core's memory when the core holds that page.
fn fits(mem: &dyn Memory, path: &str, bias: u64, h: &Headers) -> std::result::Result<(), String> {
    for sg in h.segments.iter().filter(|s| s.memsz > 0) {
        let at = bias.wrapping_add(sg.vaddr) & !0xfff;
        let Some(m) = mem.map_of(at) else {
            return Err(format!("nothing is mapped where its segment at {:#x} would be", sg.vaddr));
        };
        // The part of the segment backed by the file is the named mapping
        // at that offset (a segment's bss past it is anonymous).
        if m.file() == Some(path) && m.offset.wrapping_add(at - m.start) != sg.file_offset & !0xfff {
            return Err(format!("its segment at {:#x} is mapped from another offset", sg.vaddr));
        }
        if m.file().is_some_and(|p| p != path) {
            return Err(format!("its segment at {:#x} falls in {}", sg.vaddr, m.file().unwrap_or("")));
        }
    }
    if let (Some(file_id), Some(core_id)) = (&h.build_id, build_id_in_memory(mem, bias, h)) {
        if !file_id.is_empty() && *file_id != core_id {
            return Err("another build-id".into());
        }
    }
    Ok(())
}

/// The live allocations, for the compact scan: which one a word points
/// into, found through the format's directory of buckets over each run of
/// blocks, about one block to a bucket (a binary search of ten million
/// blocks per word took most of a capture's time).
struct Blocks<'a> {
    all: &'a [Chunk],
    dir: Directory<Vec<Run>, Vec<u32>, Vec<Line>>,
}

/// Runs of blocks with no gap of 16 MiB, buckets of at least 16 bytes, no
/// more buckets than blocks, no granule maps.
const SHAPE: Shape = Shape { gap: 16 << 20, min_shift: 4, buckets: 1, per_blocks: 1, line_budget: 0 };

/// The chunks as the directory sees them.
struct Chunks<'a>(&'a [Chunk]);

impl lookup::Blocks for Chunks<'_> {
    fn len(&self) -> usize {
        self.0.len()
    }
    #[inline]
    fn start(&self, i: usize) -> u64 {
        self.0[i].mem
    }
    #[inline]
    fn size(&self, i: usize) -> u64 {
        self.0[i].usable
    }
    #[inline]
    fn first_after(&self, from: usize, to: usize, v: u64) -> usize {
        self.0.get(from..to).map_or(to, |s| from + s.partition_point(|c| c.mem <= v))
    }
}

impl<'a> Blocks<'a> {
    fn new(all: &'a [Chunk]) -> Blocks<'a> {
        let s = SHAPE.sizes(&Chunks(all));
        // Refused only past 2^32 blocks: then no word points into one.
        let dir = Directory::build(&SHAPE, &Chunks(all), vec![Run::default(); s.runs], vec![0u32; s.words], vec![Line::default(); s.lines])
            .unwrap_or_else(|| Directory::empty(Vec::new(), Vec::new(), Vec::new()));
        Blocks { all, dir }
    }

    /// The block `v` points at or into: its ordinal and the offset.
    #[inline]
    fn find(&self, v: u64) -> Option<(usize, u64)> {
        self.dir.find(&Chunks(self.all), v)
    }

    /// The pointers of `bytes` (at `start`) into a block: (offset, value,
    /// ordinal, offset into it).
    fn pointers(&self, start: u64, bytes: &[u8]) -> Vec<(u64, u64, usize, u64)> {
        let skip = (start.next_multiple_of(8) - start) as usize;
        let words = bytes.get(skip..).unwrap_or(&[]);
        let word = |k: usize| words.get(8 * k..8 * k + 8).map(|w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])));
        let mut out = Vec::new();
        for k in 0..words.len() / 8 {
            // A large block of pointers starts its lookups ahead.
            if let Some(v) = word(k + 32) {
                self.prefetch_value(v);
            }
            let Some(v) = word(k) else { break };
            if let Some((i, d)) = self.find(v) {
                out.push((skip as u64 + 8 * k as u64, v, i, d));
            }
        }
        out
    }

    /// Starts reading what the lookups of the words of `bytes` will read.
    fn prefetch(&self, bytes: &[u8]) {
        for w in bytes.chunks_exact(8) {
            self.prefetch_value(u64::from_le_bytes(w.try_into().unwrap_or([0; 8])));
        }
    }

    /// Starts reading the block list where the lookup of `v` will.
    fn prefetch_value(&self, v: u64) {
        // The entry before the bucket's first is the one searched for a
        // pointer into the middle of a block.
        if let Some((first, _)) = self.dir.locate(v).and_then(|l| self.dir.window(l)) {
            lookup::prefetch(self.all.as_ptr().wrapping_add(first));
        }
    }
}

/// Writes one region record in the dump's mode.
fn region<'b>(
    w: &mut Writer<'b, FileSink>,
    blocks: &Blocks<'_>,
    start: u64,
    bytes: &[u8],
    f: impl FnOnce(&mut Writer<'b, FileSink>, Contents<'_, std::vec::IntoIter<(u64, u64)>>) -> Result<(), WriteError>,
) -> Result<(), WriteError> {
    match w.mode() {
        Mode::Full => f(w, Contents::Full(bytes))?,
        Mode::Compact => {
            let p: Vec<(u64, u64)> = blocks.pointers(start, bytes).into_iter().map(|(o, v, _, _)| (o, v)).collect();
            f(w, Contents::Compact { count: p.len() as u64, pointers: p.into_iter() })?
        }
    }
    Ok(())
}

/// Everything the dump holds, read from the process: once taken, the
/// process may go on while the dump is written.
pub struct Snapshot {
    heap: GlibcHeap,
    modules: Vec<Module>,
    /// Each thread, the start of its stack read and the bytes.
    threads: Vec<(ThreadRegs, u64, Vec<u8>)>,
    /// Module index, address, bytes of each writable segment.
    statics: Vec<(u32, u64, Vec<u8>)>,
    /// Address and bytes of each anonymous root.
    anon: Vec<(u64, Vec<u8>)>,
    /// Address and bytes of the stack of each of the runtime's threads
    /// (held, but no thread of the program's): roots as memory, like an
    /// ended thread's TLS and descriptor.
    runtime: Vec<(u64, Vec<u8>)>,
    warnings: Vec<String>,
}

/// Reads what the dump of `mem` needs: glibc's heap, the threads' stacks,
/// the modules' writable segments, the anonymous roots. `runtime` are
/// heapdump's own threads in the process (under `heapdump run`): their
/// stacks are kept as roots, not as the program's threads.
pub fn snapshot(mem: &dyn Memory, threads: &[ThreadRegs], runtime: &[ThreadRegs]) -> Result<Snapshot> {
    // The allocator whose heap is walked.
    let tc = crate::tcmalloc::find(mem)?;
    let mut heap = match crate::jemalloc::find(mem)? {
        _ if tc.is_some() => crate::tcmalloc::walk_found(mem, tc.as_ref())?,
        Some(je) => {
            let tls: Vec<u64> = threads.iter().chain(runtime).map(|t| t.fs_base).collect();
            let mut h = crate::jemalloc::walk_heap(mem, &je, &tls)?;
            // A static copy beside glibc's malloc: both heaps.
            if je.in_exe {
                if let Ok(g) = walk_heap(mem) {
                    crate::jemalloc::add_glibc(&mut h, g);
                }
            }
            h
        }
        None => match crate::mimalloc::find(mem)? {
            Some(mi) => {
                let mut h = crate::mimalloc::walk_heap(mem, &mi)?;
                // A static copy beside glibc's malloc (the C libraries'
                // blocks): both heaps, glibc's named when it holds any.
                if mi.in_exe {
                    if let Ok(g) = walk_heap(mem) {
                        let name = (g.live.is_empty()).then(|| h.allocator.clone());
                        crate::jemalloc::add_glibc(&mut h, g);
                        if let Some(name) = name {
                            h.allocator = name;
                        }
                    }
                }
                h
            }
            None => match crate::musl::find(mem)? {
                Some(m) => crate::musl::walk_heap(mem, &m)?,
                None => {
                    crate::mimalloc::refuse_static_copy(mem)?;
                    walk_heap(mem)?
                }
            },
        },
    };
    // In address order, for the allocations' contents (found by search).
    heap.regions.sort_unstable_by_key(|r| r.start);
    let mut warnings = heap.warnings.clone();
    let modules = modules(mem, &mut warnings);
    // Threads: the stack from the stack pointer (less the red zone) to the
    // end of its mapping; a stack in a larger mapping (a thread library's
    // own reservation) up to MAX_STACK above its stack pointer.
    let mut stacks: Vec<(u64, u64)> = Vec::new();
    let mut ts = Vec::new();
    for t in threads {
        let sp = t.sp();
        let (lo, hi) = match mem.map_of(sp) {
            Some(m) => (sp.saturating_sub(128).max(m.start), m.end.min(sp.saturating_add(MAX_STACK))),
            None => (sp, sp),
        };
        let bytes = mem.bytes(lo, hi - lo).unwrap_or_else(|e| {
            warnings.push(format!("thread {}: its stack was not read ({e})", t.tid));
            Vec::new()
        });
        if let Some(m) = mem.map_of(sp).filter(|m| m.end - m.start <= MAX_STACK) {
            stacks.push((m.start, m.end));
        }
        ts.push((t.clone(), lo, bytes));
    }
    let mut rt = Vec::new();
    for t in runtime {
        // Its whole stack mapping: the thread descriptor glibc put at its
        // top holds what pthread_create allocated for it.
        let Some(m) = mem.map_of(t.sp()).filter(|m| m.end - m.start <= MAX_STACK) else { continue };
        let lo = t.sp().saturating_sub(128).max(m.start);
        if let Ok(bytes) = mem.bytes(lo, m.end - lo) {
            stacks.push((m.start, m.end));
            rt.push((lo, bytes));
        }
    }
    // The modules' writable segments.
    let mut statics = Vec::new();
    let mut static_ranges = Vec::new();
    for (i, m) in modules.iter().enumerate() {
        for sg in m.segments.iter().filter(|s| s.flags & raw::SEG_W != 0 && s.memsz > 0) {
            // The headers are the target's word: a segment running past
            // the address space is no segment.
            let a = m.bias.wrapping_add(sg.vaddr);
            let Some(b) = a.checked_add(sg.memsz) else {
                warnings.push(format!("{}: a writable segment at {a:#x} of {:#x} bytes runs past the address space", m.path, sg.memsz));
                continue;
            };
            match mem.bytes(a, b - a) {
                Ok(bytes) => {
                    static_ranges.push((a, b));
                    // A static program's segment less glibc's main arena
                    // (the allocator's state): the parts before and after.
                    // And less the heap's own memory inside it: the
                    // groups musl's dynamic linker donated to malloc (the
                    // unused ends of modules' data pages).
                    let mut cuts: Vec<(u64, u64)> = heap
                        .static_arena
                        .iter()
                        .chain(&heap.heap_ranges)
                        .map(|&(x, y)| (x.max(a), y.min(b)))
                        .filter(|(x, y)| x < y)
                        .collect();
                    cuts.sort_unstable();
                    let mut parts = Vec::new();
                    let mut cur = a;
                    for (x, y) in cuts {
                        if x > cur {
                            parts.push((cur, x));
                        }
                        cur = cur.max(y);
                    }
                    parts.push((cur, b));
                    for (x, y) in parts.into_iter().filter(|(x, y)| x < y) {
                        let piece = bytes[(x - a) as usize..(y - a) as usize].to_vec();
                        statics.push((i as u32, x, piece));
                    }
                }
                Err(e) => warnings.push(format!("{}: its writable segment at {a:#x} was not read ({e})", m.path)),
            }
        }
    }
    // Anonymous writable memory that is neither heap, nor a thread's
    // stack, nor a module's segment, nor an ended thread's stack: roots,
    // as memcheck scans them.
    let mut holes: Vec<(u64, u64)> = heap.heap_ranges.iter().chain(&heap.mmapped).chain(&stacks).chain(&static_ranges).copied().collect();
    let tls = static_tls(&modules);
    if let Some(tid_off) = threads.first().and_then(|t| tid_offset(mem, t)) {
        for m in mem.maps().iter().filter(|m| m.anonymous() && m.read && m.write && m.end - m.start <= 1 << 30) {
            dead_stacks(mem, m, tid_off, tls, &mut holes);
        }
    }
    holes.sort_unstable();
    let mut anon = Vec::new();
    // The brk area is anonymous memory too: what lies there outside
    // glibc's heap is the program's (a static program's start-up takes its
    // main thread's static TLS and descriptor from it, below malloc's
    // heap). A core names no mapping "[heap]": there it is anonymous.
    let brk = |m: &Map| m.path.as_deref() == Some("[heap]");
    for m in mem.maps().iter().filter(|m| (m.anonymous() || brk(m)) && m.read && m.write) {
        if m.end - m.start > 64 << 30 {
            continue; // an address-space reservation, not data
        }
        let mut cur = m.start;
        let mut parts = Vec::new();
        for &(a, b) in &holes {
            if b <= cur || a >= m.end {
                continue;
            }
            if a > cur {
                parts.push((cur, a));
            }
            cur = cur.max(b);
        }
        if cur < m.end {
            parts.push((cur, m.end));
        }
        // Only what the process touched, in pieces of at most 64 MiB.
        for (a, b) in parts.into_iter().flat_map(|(a, b)| mem.present(a, b)) {
            let mut at = a;
            while at < b {
                let to = b.min(at + (64 << 20));
                match mem.bytes(at, to - at) {
                    Ok(bytes) => anon.push((at, bytes)),
                    Err(_) => warnings.push(format!("anonymous memory at {at:#x}..{to:#x} was not read")),
                }
                at = to;
            }
        }
    }
    Ok(Snapshot { heap, modules, threads: ts, statics, anon, runtime: rt, warnings })
}

/// Writes the dump of a snapshot to `out`; `pause_ns` is how long the
/// process was held (live captures).
pub fn write(s: &Snapshot, who: &Identity, mode: Mode, reason: Reason, out: &Path, pause_ns: u64) -> Result<CaptureInfo> {
    let heap = &s.heap;
    let mut info = CaptureInfo {
        threads: s.threads.len(),
        arenas: heap.arenas,
        cached_free: heap.cached_free,
        glibc: heap.version,
        glibc_inferred: heap.version_inferred,
        allocator: heap.allocator.clone(),
        warnings: s.warnings.clone(),
        pause_ns,
        ..Default::default()
    };
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600) // dumps hold the process's secrets
        .open(out)
        .map_err(on_file(FileOp::Create, out))?;
    // Each record's failure names the dump.
    let failed = |error| Error::Write { path: out.to_path_buf(), error };
    // A capture that fails leaves no half-written dump behind.
    let mut unfinished = Unfinished(Some(out));
    let mut buf = vec![0u8; 1 << 20];
    let time_ns = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let mut w = Writer::new(
        FileSink(std::io::BufWriter::with_capacity(1 << 20, file)),
        &mut buf,
        &Header::new(mode, reason, 4096, who.pid, time_ns),
    )
    .map_err(failed)?;
    w.process(&Process {
        backtrace: Backtrace::Off,
        max_frames: 0,
        sample_mean: 0,
        exe: who.exe.as_bytes(),
        cmdline: &who.cmdline,
        flags: raw::PROCESS_OUTSIDE,
    })
    .map_err(failed)?;
    w.allocator(heap.allocator.as_bytes()).map_err(failed)?;
    let blocks = Blocks::new(&heap.live);
    let mut batch = vec![0u8; 1 << 18];
    for m in &s.modules {
        w.module(&ModuleInfo { bias: m.bias, path: m.path.as_bytes(), build_id: &m.build_id, segments: &m.segments }).map_err(failed)?;
    }
    for (t, lo, bytes) in &s.threads {
        let ti = ThreadInfo {
            tid: t.tid,
            flags: 0,
            stack_start: *lo,
            stack_end: lo + bytes.len() as u64,
            tls: t.fs_base,
            name: t.name.as_bytes(),
            regs: &t.regs,
        };
        region(&mut w, &blocks, *lo, bytes, |w, c| w.thread(&ti, c)).map_err(failed)?;
    }
    for (i, a, bytes) in &s.statics {
        let si = Static { address: *a, size: bytes.len() as u64, module: *i, name: b".data+.bss" };
        region(&mut w, &blocks, *a, bytes, |w, c| w.static_root(&si, c)).map_err(failed)?;
    }
    for (a, bytes) in &s.runtime {
        let si = Static { address: *a, size: bytes.len() as u64, module: raw::NO_MODULE, name: RUNTIME_STACK };
        region(&mut w, &blocks, *a, bytes, |w, c| w.static_root(&si, c)).map_err(failed)?;
    }
    for (a, bytes) in &s.anon {
        let si = Static { address: *a, size: bytes.len() as u64, module: raw::NO_MODULE, name: b"anonymous" };
        region(&mut w, &blocks, *a, bytes, |w, c| w.static_root(&si, c)).map_err(failed)?;
    }
    // The allocations, their contents from the heaps read once; in compact
    // dumps as ALLOCS entries, their pointers naming their targets by
    // ordinal (allocations are written in address order).
    if mode == Mode::Compact {
        w.set_batch_buffer(&mut batch).map_err(failed)?;
    }
    let contents = |c: &Chunk| {
        let i = heap.regions.partition_point(|r| r.start <= c.mem).checked_sub(1)?;
        heap.regions[i].slice(c.mem, c.usable)
    };
    for (n, c) in heap.live.iter().enumerate() {
        // The lookups of a dense heap's pointers are random reads of the
        // block list: start those of the blocks ahead.
        if mode == Mode::Compact {
            if let Some(ahead) = heap.live.get(n + PREFETCH_AHEAD).and_then(contents) {
                blocks.prefetch(&ahead[..ahead.len().min(512)]);
            }
        }
        let bytes = contents(c).ok_or(Error::Unreadable { addr: c.mem, len: c.usable, why: Unread::OutsideHeapRead })?;
        let first_word = bytes.get(..8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
        let a = Alloc { address: c.mem, size: c.usable, site: raw::NO_SITE, align_log2: 4, flags: 0, first_word };
        match mode {
            Mode::Full => w.alloc(&a, Contents::<std::iter::Empty<(u64, u64)>>::Full(bytes)).map_err(failed)?,
            Mode::Compact => {
                let links: Vec<Link> = blocks
                    .pointers(c.mem, bytes)
                    .into_iter()
                    .map(|(offset, _, i, delta)| Link { offset, target: i as u64, delta })
                    .collect();
                w.dense_alloc(&a, links.len() as u64, links.into_iter()).map_err(failed)?;
            }
        }
        info.allocations += 1;
        info.bytes += c.usable;
    }
    let (mut sink, _) = w.finish(info.pause_ns).map_err(failed)?;
    sink.0.flush().map_err(on_file(FileOp::Write, out))?;
    unfinished.0 = None;
    Ok(info)
}

/// Removes the dump it names when dropped, unless the capture finished.
struct Unfinished<'a>(Option<&'a Path>);

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        if let Some(p) = self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Where glibc keeps a thread's id in its descriptor (`struct pthread`,
/// at the thread pointer): found in a live thread's.
fn tid_offset(mem: &dyn Memory, t: &ThreadRegs) -> Option<u64> {
    if t.fs_base == 0 || t.fs_base % 64 != 0 {
        return None;
    }
    let d = mem.bytes(t.fs_base, 0x800).ok()?;
    // The id the process knows its thread by: a container's own.
    (0x40..0x800u64).step_by(4).find(|&o| u32::from_le_bytes(d[o as usize..o as usize + 4].try_into().unwrap_or([0; 4])) == t.ns_tid)
}

/// An upper bound of the static TLS below each thread descriptor: the
/// modules' TLS segments and glibc's surplus for later ones.
fn static_tls(mods: &[Module]) -> u64 {
    let own: u64 = mods.iter().map(|m| m.tls.next_multiple_of(64)).sum();
    own + 1664
}

/// The stack parts of ended threads in the mapping `m` (glibc keeps their
/// stacks for reuse): below the descriptor (whose first and third words
/// point to itself, with no tid) and its static TLS. memcheck marks popped
/// frames inaccessible; their stale words are not roots. The TLS and the
/// descriptor stay roots, as under memcheck.
fn dead_stacks(mem: &dyn Memory, m: &Map, tid_off: u64, tls: u64, holes: &mut Vec<(u64, u64)>) {
    let mut below = m.start;
    for (a, b) in mem.present(m.start, m.end) {
        let Ok(bytes) = mem.bytes(a, b - a) else { continue };
        let word = |x: u64| -> Option<u64> {
            let o = usize::try_from(x.checked_sub(a)?).ok()?;
            Some(u64::from_le_bytes(bytes.get(o..o + 8)?.try_into().ok()?))
        };
        let mut d = a.next_multiple_of(64);
        while d + tid_off + 4 <= b {
            if word(d) == Some(d) && word(d + 16) == Some(d) && word(d + tid_off).is_some_and(|w| (w as u32 as i32) <= 0) {
                // The static TLS starts at the lowest block its thread
                // vector names below the descriptor (the surplus below it
                // is never written); without a readable vector, at the
                // modules' TLS and glibc's surplus below it.
                let low = word(d + 8).and_then(|dtv| tls_low(mem, dtv, below, d)).unwrap_or_else(|| d.saturating_sub(tls));
                let top = (low & !63).max(below);
                if top > below {
                    holes.push((below, top));
                }
                below = d + 64;
            }
            d += 64;
        }
    }
}

/// The lowest static TLS block a thread vector (`dtv`, as the descriptor
/// holds it: `dtv[-1]` is its length) names in `[lo, hi)`.
fn tls_low(mem: &dyn Memory, dtv: u64, lo: u64, hi: u64) -> Option<u64> {
    let len = mem.u64(dtv.checked_sub(16)?).ok()?;
    if len == 0 || len > 4096 {
        return None;
    }
    let v = mem.bytes(dtv, 16 * (len + 1)).ok()?;
    (1..=len as usize)
        .filter_map(|i| v.get(16 * i..16 * i + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]))))
        .filter(|&p| p >= lo && p < hi)
        .min()
}
