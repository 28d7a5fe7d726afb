//! What the first analysis of a dump computed, kept for the next: the leak
//! classes and the dominator tree with its retained sizes (the costly part
//! of `leaks`, `retained`, `path` and the exports). A cache file names the
//! dump it belongs to (the dump's checksum, length, time and pid) and the
//! version of the tool that wrote it, and ends with a CRC of its contents:
//! a stale or damaged one is rebuilt, never trusted. It is written to a
//! temporary name and renamed, with mode 0600 (a dump's contents are
//! secrets: so are its classes), so that two analyses at once never see
//! half of one.
//!
//! Layout (little endian): magic `HDCACHE\x03`, the key (five u64: tool
//! version hash, checksum, file length, time, pid), the block count, the
//! leak classes (a byte per block), the leaders (u32), four counts (bytes,
//! blocks), the heuristics' counts (count, then kind byte, bytes, blocks),
//! whether dominators follow (u8), then idom (u32), retained (u64) and
//! dominated (u32) per block, and the CRC-32 of everything before it. The
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

use crate::dominators::Dominators;
use crate::heap::{Heap, INTERIOR};
use crate::leaks::{Count, Heuristic, LeakKind, Leaks};
use crate::slab::Slab;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const MAGIC: &[u8; 8] = b"HDCACHE\x03";
const PART_MAGIC: &[u8; 8] = b"HDPART\x01\0";

/// The extensions of a directory's cache files (what eviction counts).
const EXTENSIONS: [&str; 5] = ["hdcache", "hdgraph", "hdtree", "hdnames", "hdreach"];

/// Why a cache file was not used (it is then rebuilt).
#[derive(Debug, thiserror::Error)]
pub enum CacheProblem {
    /// It could not be read.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// It is not this dump's, or damaged.
    #[error("{0}")]
    Stale(&'static str),
}

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
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3))
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
        let key = [fnv(version.as_bytes()), u64::from(checksum), len, h.time_ns, u64::from(h.pid)];
        let name = format!("{:016x}.hdcache", fnv(&key.iter().flat_map(|k| k.to_le_bytes()).collect::<Vec<u8>>()));
        CacheFile { path: dir.join(name), key, dump: None }
    }

    /// The cache of the dump in `file` (complete and intact: its bytes
    /// match its checksum), before it is loaded: the same file as
    /// [`CacheFile::for_dump`] names once it is.
    pub fn for_file(dir: &Path, file: &crate::DumpFile, version: &str) -> Option<CacheFile> {
        let dump = file.dump().ok()?;
        let checksum = dump.checksum_if_intact()?;
        let trailer = trailer_of(file.bytes())?;
        Some(CacheFile {
            dump: Some((*dump.header(), trailer)),
            ..Self::keyed(dir, version, checksum, file.bytes().len() as u64, dump.header())
        })
    }

    /// Where the loaded graph is kept, beside the analysis.
    pub fn graph_path(&self) -> PathBuf {
        self.path.with_extension("hdgraph")
    }

    /// The loaded graph, when a good copy is kept (`Ok(None)`: none).
    pub fn read_graph(&self) -> Result<Option<Heap>, CacheProblem> {
        crate::graph_cache::read(&self.graph_path(), &self.key, self.dump.as_ref())
    }

    /// Keeps the loaded graph (atomically, mode 0600), in the background
    /// when it can (see [`Writing`]).
    pub fn write_graph(&self, heap: &Heap) -> Writing {
        Writing::start(&self.graph_path(), heap.len() * 24, |o| crate::graph_cache::encode(heap, &self.key, o))
    }

    /// Where part `ext` is kept (see [`CacheFile::read_part`]).
    pub fn part_path(&self, ext: &str) -> PathBuf {
        self.path.with_extension(ext)
    }

    /// Part `ext` of the analysis, kept apart because it is computed
    /// apart (the dominator tree's children lists, the blocks named by
    /// vtables): its body, read back by `parse` from a [`Reader`] (its
    /// arrays in place from the mapping), when a good copy is kept. The
    /// file is the magic `HDPART\x01\0`, the part's name (counted), the
    /// key, the body and a CRC of everything before it: a part of another
    /// dump or version, or a damaged one, is refused.
    pub(crate) fn read_part<T>(
        &self,
        ext: &str,
        parse: impl FnOnce(&mut Reader<'_>, &Arc<memmap2::Mmap>) -> Result<T, CacheProblem>,
    ) -> Result<Option<T>, CacheProblem> {
        let Some(map) = map_checked(&self.part_path(ext))? else { return Ok(None) };
        let mut r = Reader::body(&map);
        if r.take(8)? != PART_MAGIC || r.bytes()? != ext.as_bytes() {
            return Err(CacheProblem::Stale("not this part of a heapdump cache"));
        }
        r.key(&self.key)?;
        let v = parse(&mut r, &map)?;
        r.end()?;
        Ok(Some(v))
    }

    /// Keeps part `ext` (atomically, mode 0600), in the background when it
    /// can and it is about `bytes` or more: `body` writes its contents
    /// (arrays with [`Out::slab`]).
    pub(crate) fn write_part(&self, ext: &str, bytes: usize, body: impl FnOnce(&mut Out)) -> Writing {
        Writing::start(&self.part_path(ext), bytes, |o| {
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
        let Some(map) = map_checked(&self.path)? else { return Ok(None) };
        let mut r = Reader::body(&map);
        if r.take(8)? != MAGIC {
            return Err(CacheProblem::Stale("not a heapdump cache"));
        }
        r.key(&self.key)?;
        let n = usize::try_from(r.u64()?).map_err(|_| CacheProblem::Stale("block count"))?;
        if n != heap.len() {
            return Err(CacheProblem::Stale("block count differs"));
        }
        let kind = r.take(n)?.iter().map(|&k| kind_of(k).ok_or(CacheProblem::Stale("bad leak class"))).collect::<Result<Vec<_>, _>>()?;
        let leader: Slab<u32> = r.slab(&map)?;
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
            1 => Some((r.slab(&map)?, r.slab(&map)?, r.slab(&map)?)),
            _ => return Err(CacheProblem::Stale("bad flag")),
        };
        r.end()?;
        Ok(Some(Cached { leaks: Some(leaks), tree }))
    }

    /// Writes the cache (atomically, mode 0600), in the background when it
    /// can.
    pub fn write(&self, leaks: &Leaks, dominators: Option<&Dominators>) -> Writing {
        let bytes = leaks.kind.len() * if dominators.is_some() { 21 } else { 5 };
        Writing::start(&self.path, bytes, |o| {
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

/// The trailer of a complete dump, `bytes` (its last record: see
/// FORMAT.md's END).
fn trailer_of(bytes: &[u8]) -> Option<heapdump_format::Trailer> {
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

/// A cache file being written: little-endian fields straight to the
/// file (no copy of the whole in memory: the graph of 10 M blocks is
/// 440 MB), the CRC kept as they go. The first error is kept and ends
/// the writing (see [`create_temporary`], [`write_temporary`]).
pub(crate) struct Out {
    file: std::io::BufWriter<std::fs::File>,
    crc: crc32fast::Hasher,
    len: u64,
    error: Option<std::io::Error>,
}

impl Out {
    /// Bytes as they are.
    pub(crate) fn raw(&mut self, b: &[u8]) {
        if self.error.is_none() {
            match self.file.write_all(b) {
                Ok(()) => {
                    self.crc.update(b);
                    self.len += b.len() as u64;
                }
                Err(e) => self.error = Some(e),
            }
        }
    }
    pub(crate) fn u8(&mut self, v: u8) {
        self.raw(&[v]);
    }
    pub(crate) fn u32(&mut self, v: u32) {
        self.raw(&v.to_le_bytes());
    }
    pub(crate) fn u64(&mut self, v: u64) {
        self.raw(&v.to_le_bytes());
    }
    /// Counted bytes.
    pub(crate) fn counted(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.raw(b);
    }
    /// A counted array, its items starting at a multiple of 8 bytes (zeros
    /// before them) so that [`Reader::slab`] can read them in place;
    /// little endian.
    pub(crate) fn slab<T: bytemuck::Pod>(&mut self, v: &[T]) {
        self.u64(v.len() as u64);
        let pad = (8 - self.len % 8) % 8;
        self.raw(&[0u8; 8][..pad as usize]);
        if cfg!(target_endian = "little") {
            self.raw(bytemuck::cast_slice(v));
        } else {
            for x in v {
                let mut b = bytemuck::bytes_of(x).to_vec();
                crate::slab::swap_words(&mut b);
                self.raw(&b);
            }
        }
    }
}

/// The cache file at `path`, mapped, its CRC (its last four bytes)
/// checked against the rest: `Ok(None)` when there is none.
pub(crate) fn map_checked(path: &Path) -> Result<Option<Arc<memmap2::Mmap>>, CacheProblem> {
    let map = match map(path) {
        Ok(b) => Arc::new(b),
        // Being written by an earlier command's writer: waited for.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && wait_for_writer(path) => Arc::new(map(path)?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let body_len = map.len().checked_sub(4).ok_or(CacheProblem::Stale("too short"))?;
    let (body, crc) = map.split_at(body_len);
    if crc32fast::hash(body).to_le_bytes() != crc {
        return Err(CacheProblem::Stale("checksum differs"));
    }
    Ok(Some(map))
}

/// A cache file, mapped (read in place: no copy of hundreds of megabytes
/// into fresh memory). Only a regular file is mapped.
pub(crate) fn map(path: &Path) -> std::io::Result<memmap2::Mmap> {
    match crate::input::map_regular(path)? {
        Some(m) => Ok(m),
        None => Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "empty file")),
    }
}

/// A cache file being written. The files of a dump of ten million blocks
/// are 700 MB, which this machine's kernel takes about a second to copy
/// into fresh page-cache pages: a second the answer waited for. So, as
/// Redis's `BGSAVE` writes its snapshot, a forked child writes the file
/// from its copy-on-write image of the analysis (which only reads its
/// arrays: nothing is copied) while the analysis goes on to its answer.
/// The command then waits for it ([`Writing::wait`], or when dropped), or
/// leaves it to finish on its own ([`Writing::detach`]): a question asked
/// meanwhile waits for the file (see [`wait_for_writer`]). Only a process
/// of one thread forks (a lock another thread held would stay locked in
/// the child); otherwise, or when the fork fails, the file is written in
/// place. The child's standard input and outputs are /dev/null: a pipe
/// the command writes to ends when the command does.
#[must_use = "dropping it waits for the writing"]
pub struct Writing {
    path: PathBuf,
    state: WritingState,
}

enum WritingState {
    /// Written in place (or the child already waited for).
    Done(Option<std::io::Result<()>>),
    /// Being written by this child.
    Child(libc::pid_t),
}

/// The smallest file written by a forked child.
const IN_BACKGROUND: usize = 16 << 20;

/// A forked writer's exit status for an error that is not the system's.
const NOT_AN_OS_ERROR: i32 = 255;

impl Writing {
    /// Writes `body` (about `bytes`) to `path` through a temporary file
    /// ([`create_temporary`], [`write_temporary`]), in a forked child when
    /// the process has one thread and the file is large enough for its
    /// writing to cost more than the fork (page tables copied: some 20 ms
    /// at 10 M blocks). (The C library's `fork`, `_exit` and `waitpid` are
    /// called here directly: `clippy.toml` keeps them in the runtime's
    /// `sys.rs`, which is for the traced process; this is the analyser's
    /// own.)
    #[allow(unsafe_code, clippy::disallowed_methods)]
    fn start(path: &Path, bytes: usize, body: impl FnOnce(&mut Out)) -> Writing {
        let path = path.to_path_buf();
        let done = |r| Writing { path: path.clone(), state: WritingState::Done(Some(r)) };
        // Created and locked before any fork: a question asked once this
        // command has answered finds the writer at work.
        let (tmp, f) = match create_temporary(&path) {
            Ok(t) => t,
            Err(e) => return done(Err(e)),
        };
        if bytes < IN_BACKGROUND || !single_threaded() {
            return done(write_temporary(&path, tmp, f, body));
        }
        // SAFETY: the process has one thread (checked just above), so no
        // lock is copied into the child held by a thread that is not
        // there; glibc's malloc stays usable across fork. The child writes
        // the file and leaves with `_exit`, running neither destructors
        // nor exit handlers (nothing of the parent's, its buffered output
        // say, is flushed twice); a panic is caught before it could unwind
        // out of the child's copy of the parent's stack.
        match unsafe { libc::fork() } {
            0 => {
                // SAFETY: plain system calls on this process's own
                // descriptors (0, 1 and 2 replaced by /dev/null).
                unsafe {
                    let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
                    if null >= 0 {
                        for fd in 0..3 {
                            libc::dup2(null, fd);
                        }
                        libc::close(null);
                    }
                }
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| write_temporary(&path, tmp, f, body)));
                let status = match r {
                    Ok(Ok(())) => 0,
                    Ok(Err(e)) => e.raw_os_error().filter(|&c| c > 0 && c < NOT_AN_OS_ERROR).unwrap_or(NOT_AN_OS_ERROR),
                    Err(_) => NOT_AN_OS_ERROR,
                };
                // SAFETY: ends the child at once (see above).
                unsafe { libc::_exit(status) }
            }
            // The child holds the file, and its lock, from here.
            pid if pid > 0 => Writing { path, state: WritingState::Child(pid) },
            _ => done(write_temporary(&path, tmp, f, body)),
        }
    }

    /// Whether a forked child is writing it.
    pub fn in_background(&self) -> bool {
        matches!(self.state, WritingState::Child(_))
    }

    /// The file written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits for the writing to end: whether the file was written.
    pub fn wait(mut self) -> std::io::Result<()> {
        self.finish()
    }

    /// Leaves a forked writer to finish on its own after this process
    /// ends (its parent then the system's, which reaps it).
    pub fn detach(mut self) {
        self.state = WritingState::Done(None);
    }

    #[allow(unsafe_code, clippy::disallowed_methods)]
    fn finish(&mut self) -> std::io::Result<()> {
        if let WritingState::Child(pid) = self.state {
            let mut status = 0;
            let r = loop {
                // SAFETY: waits for our own child, whose pid this alone
                // holds (it is waited for once: the state is then Done).
                let r = unsafe { libc::waitpid(pid, &mut status, 0) };
                if r == pid {
                    break if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
                        Ok(())
                    } else if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) != NOT_AN_OS_ERROR {
                        Err(std::io::Error::from_raw_os_error(libc::WEXITSTATUS(status)))
                    } else {
                        Err(std::io::Error::other("the cache's writer failed"))
                    };
                }
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    break Err(e);
                }
            };
            self.state = WritingState::Done(Some(r));
        }
        match &mut self.state {
            WritingState::Done(r) => r.take().unwrap_or(Ok(())),
            WritingState::Child(_) => unreachable!("waited for above"),
        }
    }
}

impl Drop for Writing {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// The longest a question waits for another command's writer.
const WRITER_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// Waits while another process is writing the cache file `path` (a
/// temporary file named after it is there, locked: its writer holds the
/// lock until it ends, whether it renamed the file or failed), at most
/// [`WRITER_WAIT`]: whether the file is there now. A temporary file left
/// by a writer that died is not locked: not waited for.
fn wait_for_writer(path: &Path) -> bool {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else { return false };
    let prefix = format!(".{}.", name.to_string_lossy());
    let temporaries: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let e = e.ok()?;
            let n = e.file_name().into_string().ok()?;
            (n.starts_with(&prefix) && n.ends_with(".tmp")).then(|| e.path())
        })
        .collect();
    let writing = |t: &PathBuf| {
        // Gone (renamed into place, or removed): no longer written.
        std::fs::File::open(t).is_ok_and(|f| rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockShared).is_err())
    };
    let began = std::time::Instant::now();
    while temporaries.iter().any(writing) && began.elapsed() < WRITER_WAIT {
        if path.exists() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    path.exists()
}

/// Whether this process has one thread (`/proc/self/task` lists them).
fn single_threaded() -> bool {
    std::fs::read_dir("/proc/self/task").is_ok_and(|d| d.take(2).count() == 1)
}

/// The temporary file a cache file is written to (mode 0600, locked
/// exclusively while it is written: see [`wait_for_writer`]), and its
/// path, `.NAME.PID.NANOS.tmp` beside it.
fn create_temporary(path: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.{}.{}.tmp",
        path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos())
    ));
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
    // A file system without locks (some network ones) still gets the
    // cache: a question asked meanwhile then computes its own.
    let _ = rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive);
    Ok((tmp, f))
}

/// Writes what `body` writes, then its CRC, to the temporary file `f` at
/// `tmp`, renames it to `path` and keeps the directory's caches within
/// bounds; a failure leaves no file behind.
fn write_temporary(path: &Path, tmp: PathBuf, f: std::fs::File, body: impl FnOnce(&mut Out)) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut o = Out { file: std::io::BufWriter::with_capacity(1 << 20, f), crc: crc32fast::Hasher::new(), len: 0, error: None };
    body(&mut o);
    let crc = o.crc.clone().finalize();
    o.raw(&crc.to_le_bytes());
    // No fsync: a cache cut short by a crash fails its CRC and is rebuilt.
    let r = match o.error.take() {
        Some(e) => Err(e),
        None => o.file.flush().and_then(|()| std::fs::rename(&tmp, path)),
    };
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    evict(dir, path);
    r
}

/// The most the caches of a directory may take together, and the most
/// files: past either, the least recently written go.
const KEEP_BYTES: u64 = 2 << 30;
const KEEP_FILES: usize = 64;

/// Removes the oldest caches of `dir` (never `keep`) while they take more
/// than [`KEEP_BYTES`] or number more than [`KEEP_FILES`].
fn evict(dir: &Path, keep: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| EXTENSIONS.iter().any(|k| x == *k)))
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            Some((m.modified().ok()?, m.len(), e.path()))
        })
        .collect();
    files.sort();
    let mut total: u64 = files.iter().map(|f| f.1).sum();
    let mut count = files.len();
    for (_, len, path) in files {
        if total <= KEEP_BYTES && count <= KEEP_FILES {
            break;
        }
        if path != keep && std::fs::remove_file(&path).is_ok() {
            total -= len;
            count -= 1;
        }
    }
}

/// Reads the little-endian fields of a cache file, every length checked
/// against what is left (shared by the graph's file, `graph_cache.rs`, and
/// the parts).
pub(crate) struct Reader<'a> {
    pub(crate) b: &'a [u8],
    pub(crate) at: usize,
}

impl<'a> Reader<'a> {
    /// The fields of a file [`map_checked`] gave: all but its CRC.
    pub(crate) fn body(map: &'a [u8]) -> Reader<'a> {
        Reader { b: &map[..map.len().saturating_sub(4)], at: 0 }
    }
    /// The key a file was written for: this dump's and this version's, or
    /// the file is refused.
    pub(crate) fn key(&mut self, key: &[u64; 5]) -> Result<(), CacheProblem> {
        for &k in key {
            if self.u64()? != k {
                return Err(CacheProblem::Stale("written for another dump or tool version"));
            }
        }
        Ok(())
    }
    /// Nothing may follow the last field.
    pub(crate) fn end(&self) -> Result<(), CacheProblem> {
        if self.at != self.b.len() {
            return Err(CacheProblem::Stale("trailing bytes"));
        }
        Ok(())
    }
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], CacheProblem> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len()).ok_or(CacheProblem::Stale("cut short"))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    pub(crate) fn u8(&mut self) -> Result<u8, CacheProblem> {
        Ok(self.take(1)?[0])
    }
    pub(crate) fn u32(&mut self) -> Result<u32, CacheProblem> {
        let s = self.take(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    pub(crate) fn u64(&mut self) -> Result<u64, CacheProblem> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().map_err(|_| CacheProblem::Stale("cut short"))?))
    }
    /// A counted array written by [`Out::slab`], read in place from `map`
    /// (the mapping these bytes are the start of).
    pub(crate) fn slab<T: bytemuck::Pod>(&mut self, map: &Arc<memmap2::Mmap>) -> Result<Slab<T>, CacheProblem> {
        let size = std::mem::size_of::<T>();
        let n = self.len(size)?;
        self.take((8 - self.at % 8) % 8)?;
        let start = self.at;
        self.take(n * size)?;
        Slab::mapped(map, start..self.at).ok_or(CacheProblem::Stale("array"))
    }
    /// A count, bounded by what the rest of the file could hold at `unit`
    /// bytes each.
    pub(crate) fn len(&mut self, unit: usize) -> Result<usize, CacheProblem> {
        let n = usize::try_from(self.u64()?).map_err(|_| CacheProblem::Stale("length"))?;
        if n.checked_mul(unit.max(1)).is_none_or(|b| b > self.b.len() - self.at) {
            return Err(CacheProblem::Stale("length"));
        }
        Ok(n)
    }
    /// Counted bytes.
    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], CacheProblem> {
        let n = self.len(1)?;
        self.take(n)
    }
    /// Counted bytes, as text.
    pub(crate) fn string(&mut self) -> Result<String, CacheProblem> {
        Ok(String::from_utf8_lossy(self.bytes()?).into_owned())
    }
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
    let mut first_root: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
    for (i, r) in heap.roots.iter().enumerate() {
        first_root.entry(r.target.0).or_insert(i as u32);
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

fn kind_byte(k: LeakKind) -> u8 {
    match k {
        LeakKind::StillReachable => 0,
        LeakKind::PossiblyLost => 1,
        LeakKind::DefinitelyLost => 2,
        LeakKind::IndirectlyLost => 3,
    }
}

fn kind_of(b: u8) -> Option<LeakKind> {
    [LeakKind::StillReachable, LeakKind::PossiblyLost, LeakKind::DefinitelyLost, LeakKind::IndirectlyLost].get(usize::from(b)).copied()
}

fn heuristic_byte(h: Heuristic) -> u8 {
    match h {
        Heuristic::Stdstring => 0,
        Heuristic::Length64 => 1,
        Heuristic::Newarray => 2,
        Heuristic::Hashbrown => 3,
    }
}

fn heuristic_of(b: u8) -> Option<Heuristic> {
    [Heuristic::Stdstring, Heuristic::Length64, Heuristic::Newarray, Heuristic::Hashbrown].get(usize::from(b)).copied()
}
