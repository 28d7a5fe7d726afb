//! The files the caches are made of, below what they hold: each written
//! to a temporary name beside it (mode 0600, locked while written), sealed
//! by a CRC of every 64 KiB of its contents (a table at its end, itself
//! under a CRC), renamed into place, the directory kept within bounds;
//! each read back mapped, its fields read with every length checked
//! against what is left. A question that reads a whole file checks every
//! chunk at opening (on the machine's cores: [`Sealed::check_all`]); one
//! that reads a few entries of a file of gigabytes (the viewer's first
//! page, a node's expansion) checks the chunks it touches, the first time
//! it touches them ([`Sealed::check`]): a damaged chunk is then refused
//! where it is read, never trusted. `cache.rs` (the analysis' file and its
//! parts) and `graph_cache.rs` (the loaded graph) both write and read
//! through it; it knows neither.
//!
//! The seal (after the contents, little endian): a u32 CRC-32 per
//! [`CHUNK`] bytes of the contents (the last chunk shorter), the contents'
//! length (u64), and the CRC-32 of that table and length (u32).

use crate::slab::Slab;
use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The bytes of contents each CRC of a seal covers: a question that reads
/// one entry of an array checks 64 KiB around it (some 5 µs), and the table
/// of a file of 3 GB is 190 KB.
pub(crate) const CHUNK: usize = 64 << 10;

/// The seal's bytes after its table: the contents' length and its CRC.
const SEAL_TAIL: usize = 12;

/// The extensions of a directory's cache files (what eviction counts).
pub(crate) const EXTENSIONS: [&str; 8] = ["hdcache", "hdgraph", "hdtree", "hdnames", "hdreach", "hdreport", "hdrows", "hdsummary"];

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

/// A cache file being written: little-endian fields straight to the
/// file (no copy of the whole in memory: the graph of 10 M blocks is
/// 440 MB), the CRC kept as they go. The first error is kept and ends
/// the writing (see [`create_temporary`], [`write_temporary`]).
pub(crate) struct Out {
    file: std::io::BufWriter<std::fs::File>,
    /// The CRC of the chunk being written, and the CRCs of those before.
    crc: crc32fast::Hasher,
    table: Vec<u32>,
    len: u64,
    error: Option<std::io::Error>,
}

impl Out {
    /// Bytes as they are.
    pub(crate) fn raw(&mut self, b: &[u8]) {
        if self.error.is_none() {
            match self.file.write_all(b) {
                Ok(()) => {
                    let mut rest = b;
                    while !rest.is_empty() {
                        let room = CHUNK - (self.len % CHUNK as u64) as usize;
                        let (now, later) = rest.split_at(room.min(rest.len()));
                        self.crc.update(now);
                        self.len += now.len() as u64;
                        if self.len % CHUNK as u64 == 0 {
                            self.table.push(std::mem::take(&mut self.crc).finalize());
                        }
                        rest = later;
                    }
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
    /// One counted array of `parts` one after another, as [`Out::slab`]
    /// writes their concatenation (with no copy of it made).
    pub(crate) fn slab_of_parts(&mut self, parts: &[&[u32]]) {
        self.u64(parts.iter().map(|p| p.len() as u64).sum());
        let pad = (8 - self.len % 8) % 8;
        self.raw(&[0u8; 8][..pad as usize]);
        for p in parts {
            if cfg!(target_endian = "little") {
                self.raw(bytemuck::cast_slice(p));
            } else {
                for x in *p {
                    self.u32(*x);
                }
            }
        }
    }
    /// A counted array of `len` words, as [`Out::slab`] writes it, made a
    /// chunk at a time: `fill(range, buf)` pushes the words of the indices
    /// in `range` onto `buf` (empty), so that no copy of the whole is
    /// made (a word it leaves out is written 0, one too many dropped).
    pub(crate) fn slab_by_chunks(&mut self, len: usize, mut fill: impl FnMut(Range<usize>, &mut Vec<u32>)) {
        const WORDS: usize = 1 << 14;
        self.u64(len as u64);
        let pad = (8 - self.len % 8) % 8;
        self.raw(&[0u8; 8][..pad as usize]);
        let mut buf = Vec::with_capacity(WORDS);
        for at in (0..len).step_by(WORDS) {
            let r = at..(at + WORDS).min(len);
            buf.clear();
            fill(r.clone(), &mut buf);
            buf.resize(r.len(), 0);
            if cfg!(target_endian = "little") {
                self.raw(bytemuck::cast_slice(&buf));
            } else {
                for &x in &buf {
                    self.u32(x);
                }
            }
        }
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

/// The cache file at `path`, mapped, every chunk of it checked against
/// its seal: `Ok(None)` when there is none.
pub(crate) fn map_checked(path: &Path) -> Result<Option<Sealed>, CacheProblem> {
    let Some(s) = Sealed::open(path)? else { return Ok(None) };
    s.check_all()?;
    Ok(Some(s))
}

/// A cache file mapped, its seal read (the table's own CRC checked), its
/// chunks checked when first read ([`Sealed::check`]) or all at once
/// ([`Sealed::check_all`]).
pub(crate) struct Sealed {
    map: Arc<memmap2::Mmap>,
    /// The contents' length, and where the seal's table starts (at
    /// `body` itself).
    body: usize,
    /// A bit per chunk: checked and good.
    checked: Vec<AtomicU64>,
    /// Read a few entries at a time, at random ([`Sealed::open_random`]).
    random: bool,
}

impl Sealed {
    /// The file at `path`, its seal read: `Ok(None)` when there is none.
    pub(crate) fn open(path: &Path) -> Result<Option<Sealed>, CacheProblem> {
        let map = match map(path) {
            Ok(b) => Arc::new(b),
            // Being written by an earlier command's writer: waited for.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && wait_for_writer(path) => Arc::new(map(path)?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        Self::of(map).map(Some)
    }

    /// [`Sealed::open`] for a file read a few entries at a time, at random
    /// (the viewer's dominator tree and groups): the chunks an entry's
    /// check reads are asked for first, whole (`MADV_WILLNEED`: one read
    /// of their 64 KiB, or of a walk's window). A page found in the page
    /// cache that way is not read around: otherwise each fault of a cold
    /// file reads the window around it (`read_ahead_kb`, 8 MiB on this
    /// VM's disk: the viewer's first page read 750 MB of a tree it reads
    /// 50 nodes of). (`MADV_RANDOM` does the same for a cold file, but
    /// maps one page a fault of a warm one: the suspects' walk 1.4x as
    /// long.)
    pub(crate) fn open_random(path: &Path) -> Result<Option<Sealed>, CacheProblem> {
        let mut s = Self::open(path)?;
        if let Some(s) = &mut s {
            s.random = true;
        }
        Ok(s)
    }

    /// The seal of `map` read: its length and table agreeing with the
    /// file's length, the table's CRC right.
    fn of(map: Arc<memmap2::Mmap>) -> Result<Sealed, CacheProblem> {
        let short = CacheProblem::Stale("too short");
        let tail_at = map.len().checked_sub(SEAL_TAIL).ok_or(short)?;
        let tail = &map[tail_at..];
        let body = usize::try_from(u64::from_le_bytes(tail[..8].try_into().map_err(|_| CacheProblem::Stale("seal"))?))
            .map_err(|_| CacheProblem::Stale("seal"))?;
        let chunks = body.div_ceil(CHUNK);
        if body.checked_add(chunks * 4) != Some(tail_at) {
            return Err(CacheProblem::Stale("cut short"));
        }
        if crc32fast::hash(&map[body..map.len() - 4]).to_le_bytes() != tail[8..] {
            return Err(CacheProblem::Stale("checksum differs"));
        }
        Ok(Sealed { map, body, checked: (0..chunks.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(), random: false })
    }

    /// The contents (the seal left out).
    pub(crate) fn body(&self) -> &[u8] {
        &self.map[..self.body]
    }

    /// The mapping (arrays are read in place from it).
    pub(crate) fn map(&self) -> &Arc<memmap2::Mmap> {
        &self.map
    }

    /// Checks the chunks holding `range` of the contents (each once: a
    /// bit says it was): `Err` when one differs from its seal, or the
    /// range passes the contents' end.
    pub(crate) fn check(&self, range: Range<usize>) -> Result<(), CacheProblem> {
        self.check_around(range, CHUNK)
    }

    /// [`Sealed::check`], a file read at random ([`Sealed::open_random`])
    /// read `window` bytes at a time (a multiple of [`CHUNK`], aligned) for
    /// a walk that will soon read much of it: a walk of the tree's
    /// subtrees reads a third of the tree's files, which one chunk at a
    /// time took twice as long from a cold disk as a window of 1 MiB.
    pub(crate) fn check_around(&self, range: Range<usize>, window: usize) -> Result<(), CacheProblem> {
        if range.end > self.body || range.start > range.end {
            return Err(CacheProblem::Stale("cut short"));
        }
        if range.is_empty() {
            return Ok(());
        }
        let chunks = range.start / CHUNK..=(range.end - 1) / CHUNK;
        if self.random && chunks.clone().any(|c| !self.is_checked(c)) {
            // The window asked for in one request, and checked whole while
            // it is fresh: one request a window, not one a chunk.
            let w = window.max(CHUNK);
            let from = chunks.start() * CHUNK / w * w;
            let to = (((chunks.end() + 1) * CHUNK).div_ceil(w) * w).min(self.body);
            let _ = self.map.advise_range(memmap2::Advice::WillNeed, from, to - from);
            return (from / CHUNK..to.div_ceil(CHUNK)).try_for_each(|c| self.check_chunk(c));
        }
        chunks.into_iter().try_for_each(|c| self.check_chunk(c))
    }

    fn is_checked(&self, c: usize) -> bool {
        self.checked[c / 64].load(Ordering::Relaxed) & (1u64 << (c % 64)) != 0
    }

    fn check_chunk(&self, c: usize) -> Result<(), CacheProblem> {
        if self.is_checked(c) {
            return Ok(());
        }
        let (word, bit) = (&self.checked[c / 64], 1u64 << (c % 64));
        let bytes = &self.map[c * CHUNK..((c + 1) * CHUNK).min(self.body)];
        let at = self.body + 4 * c;
        if crc32fast::hash(bytes).to_le_bytes() != self.map[at..at + 4] {
            return Err(CacheProblem::Stale("checksum differs"));
        }
        word.fetch_or(bit, Ordering::Relaxed);
        Ok(())
    }

    /// Checks every chunk, on up to four threads (a file of gigabytes,
    /// the graph of 100 M blocks, is checked in a fraction of the time one
    /// thread takes).
    pub(crate) fn check_all(&self) -> Result<(), CacheProblem> {
        let chunks = self.body.div_ceil(CHUNK);
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(4).min(chunks / 256).max(1);
        if threads == 1 {
            return (0..chunks).try_for_each(|c| self.check_chunk(c));
        }
        let per = chunks.div_ceil(threads);
        std::thread::scope(|s| {
            let parts: Vec<_> = (0..threads)
                .map(|t| s.spawn(move || (t * per..((t + 1) * per).min(chunks)).try_for_each(|c| self.check_chunk(c))))
                .collect();
            parts.into_iter().try_for_each(|p| p.join().unwrap_or(Err(CacheProblem::Stale("checksum differs"))))
        })
    }
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
/// meanwhile waits for the file (see `wait_for_writer`). Only a process
/// of one thread forks (a lock another thread held would stay locked in
/// the child); otherwise, or when the fork fails, the file is written in
/// place. The child's standard input and outputs are /dev/null: a pipe
/// the command writes to ends when the command does.
///
/// Why a child and not a thread: the command line is a short-lived
/// process, and a thread ends with it. A writer thread would keep the
/// command from exiting until the file is written (the second the answer
/// should not wait for), or be cut off and leave nothing; a child writes on
/// after the command has exited. Forking is the caller's choice, never the
/// library's: `start` forks only when told it may (`cache.rs`'s
/// `CacheFile::in_background`), which `open.rs` allows only when its
/// `Options` say so (the command line does; a program embedding the
/// library has its files written in place).
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
    /// `background` allows it, the process has one thread and the file is large enough for its
    /// writing to cost more than the fork (page tables copied: some 20 ms
    /// at 10 M blocks). (The C library's `fork`, `_exit` and `waitpid` are
    /// called here directly: `clippy.toml` keeps them in the runtime's
    /// `sys.rs`, which is for the traced process; this is the analyser's
    /// own.)
    #[allow(unsafe_code, clippy::disallowed_methods)]
    pub(crate) fn start(path: &Path, background: bool, bytes: usize, body: impl FnOnce(&mut Out)) -> Writing {
        let path = path.to_path_buf();
        let done = |r| Writing { path: path.clone(), state: WritingState::Done(Some(r)) };
        // Created and locked before any fork: a question asked once this
        // command has answered finds the writer at work.
        let (tmp, f) = match create_temporary(&path) {
            Ok(t) => t,
            Err(e) => return done(Err(e)),
        };
        if !background || bytes < IN_BACKGROUND || !single_threaded() {
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

/// Whether this process has one thread (`/proc/self/task` lists them). A
/// thread just joined (the checks' and checksums' scoped threads) can be
/// listed a moment longer, exiting: one whose state is zombie or dead is
/// not counted.
fn single_threaded() -> bool {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return false };
    let running = |e: &std::fs::DirEntry| {
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        // `tid (name) S ...`: the state follows the name's last parenthesis.
        !stat.rfind(')').and_then(|at| stat[at + 1..].trim_start().chars().next()).is_some_and(|c| matches!(c, 'Z' | 'X' | 'x'))
    };
    if tasks.filter_map(Result::ok).filter(running).take(2).count() == 1 {
        return true;
    }
    // Still exiting: looked at again for a few milliseconds.
    (0..20).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(1));
        std::fs::read_dir("/proc/self/task").is_ok_and(|d| d.filter_map(Result::ok).filter(running).take(2).count() == 1)
    })
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
    let r = seal_and_rename(path, tmp, f, body);
    evict(path.parent().unwrap_or(Path::new(".")), path);
    r
}

/// A small file that bounds itself (see `seen.rs`), written sealed as a
/// cache file is, in place, without evicting any other: a few bytes that
/// would otherwise push out the files they serve.
pub(crate) fn write_apart(path: &Path, body: impl FnOnce(&mut Out)) -> std::io::Result<()> {
    let (tmp, f) = create_temporary(path)?;
    seal_and_rename(path, tmp, f, body)
}

/// [`write_temporary`] but the eviction.
fn seal_and_rename(path: &Path, tmp: PathBuf, f: std::fs::File, body: impl FnOnce(&mut Out)) -> std::io::Result<()> {
    let mut o =
        Out { file: std::io::BufWriter::with_capacity(1 << 20, f), crc: crc32fast::Hasher::new(), table: Vec::new(), len: 0, error: None };
    body(&mut o);
    // The seal: the last chunk's CRC, the table, the length, their CRC.
    if o.len % CHUNK as u64 != 0 {
        o.table.push(std::mem::take(&mut o.crc).finalize());
    }
    let mut seal: Vec<u8> = o.table.iter().flat_map(|c| c.to_le_bytes()).collect();
    seal.extend_from_slice(&o.len.to_le_bytes());
    let crc = crc32fast::hash(&seal);
    seal.extend_from_slice(&crc.to_le_bytes());
    if o.error.is_none() {
        if let Err(e) = o.file.write_all(&seal) {
            o.error = Some(e);
        }
    }
    // No fsync: a cache cut short by a crash fails its seal and is rebuilt.
    let r = match o.error.take() {
        Some(e) => Err(e),
        None => o.file.flush().and_then(|()| std::fs::rename(&tmp, path)),
    };
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

/// The most the caches of a directory may take together, and the most
/// files: past either, the least recently written go, other dumps' first.
const KEEP_BYTES: u64 = 2 << 30;
const KEEP_FILES: usize = 64;

/// Removes the oldest caches of `dir` while they take more than
/// [`KEEP_BYTES`] or number more than [`KEEP_FILES`], never those of the
/// dump `keep` belongs to (its name's stem: its graph, its analysis and
/// their parts). One dump's files can take more than the whole budget
/// (at 100 M blocks they are some 7 GB): evicted by one another, each
/// written file would remove the one before it, and the next opening
/// would find none of them.
fn evict(dir: &Path, keep: &Path) {
    evict_within(dir, keep, KEEP_BYTES, KEEP_FILES);
}

fn evict_within(dir: &Path, keep: &Path, keep_bytes: u64, keep_files: usize) {
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
    let own = keep.file_stem();
    for (_, len, path) in files {
        if total <= keep_bytes && count <= keep_files {
            break;
        }
        if path.file_stem() != own && std::fs::remove_file(&path).is_ok() {
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
    /// The file's seal: each field's chunks checked as it is read.
    seal: &'a Sealed,
}

impl<'a> Reader<'a> {
    /// The fields of a file (its contents: the seal left out), each
    /// checked against the seal as it is read (at no cost once
    /// [`map_checked`] checked them all).
    pub(crate) fn body(seal: &'a Sealed) -> Reader<'a> {
        Reader { b: seal.body(), at: 0, seal }
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
        let start = self.at;
        self.skip(n)?;
        self.seal.check(start..self.at)?;
        Ok(&self.b[start..self.at])
    }
    /// Passes `n` bytes without reading (nor checking) them.
    fn skip(&mut self, n: usize) -> Result<Range<usize>, CacheProblem> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len()).ok_or(CacheProblem::Stale("cut short"))?;
        let r = self.at..end;
        self.at = end;
        Ok(r)
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
        let bytes = self.skip_slab::<T>()?;
        self.seal.check(bytes.clone())?;
        Slab::mapped(map, bytes).ok_or(CacheProblem::Stale("array"))
    }
    /// Passes a counted array written by [`Out::slab`] without reading
    /// (nor checking) its items: where they are (a multiple of 8 bytes
    /// from the file's start), for a reader that checks the few it reads
    /// ([`Sealed::check`]).
    pub(crate) fn skip_slab<T: bytemuck::Pod>(&mut self) -> Result<Range<usize>, CacheProblem> {
        let size = std::mem::size_of::<T>();
        let n = self.len(size)?;
        self.take((8 - self.at % 8) % 8)?;
        self.skip(n * size)
    }
    /// Passes `n` bytes without reading (nor checking) them: where they
    /// are.
    pub(crate) fn skip_bytes(&mut self, n: usize) -> Result<Range<usize>, CacheProblem> {
        self.skip(n)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A dump whose own files take more than the budget keeps them all
    /// (each written one used to remove the ones before it: the next
    /// opening found only the last); other dumps' go, oldest first.
    #[test]
    fn a_dumps_own_files_are_never_evicted_by_one_another() {
        let dir = std::env::temp_dir().join(format!("heapdump-evict-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str| {
            std::fs::write(dir.join(name), [0u8; 100]).unwrap();
            // Distinct times, in the order written.
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        write("other.hdcache");
        write("other.hdgraph");
        for ext in ["hdgraph", "hdcache", "hdtree"] {
            write(&format!("big.{ext}"));
            evict_within(&dir, &dir.join(format!("big.{ext}")), 250, 64);
        }
        let mut left: Vec<String> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        assert_eq!(left, ["big.hdcache", "big.hdgraph", "big.hdtree"]);
        // Files not of the caches are never counted nor removed.
        write("notes.txt");
        evict_within(&dir, &dir.join("big.hdtree"), 0, 0);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 4);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
