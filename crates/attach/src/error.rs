//! What a capture from outside can fail with: what was being read, and
//! where (an address, a chunk, an arena, a core's segment or note, a
//! file), or why the target is refused. Each renders as the one line the
//! CLI prints; callers that decide (a refusal, a damaged heap) match on
//! the variants, never on the text.

use std::fmt;
use std::path::PathBuf;

/// What a process in a container needs to trace another, said when it
/// is refused.
const NEEDS: &str = "needs root or CAP_SYS_PTRACE (in a container: `docker run --cap-add SYS_PTRACE`, \
`kubectl debug --profile=general`; a process of another container or of the host: `--pid=host` and its pid as this namespace sees it)";

/// The first glibc release heapdump reads.
pub(crate) const OLDEST_GLIBC: (u32, u32) = (2, 30);
/// The last glibc release heapdump reads.
pub(crate) const NEWEST_GLIBC: (u32, u32) = (2, 41);

/// A capture's failure.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    // Refusals: the capture cannot be done here, and why.
    /// No process `pid` (in this PID namespace, when `own_namespace`: a
    /// container's).
    NoProcess {
        /// The pid asked for.
        pid: i32,
        /// Whether this tracer is in a PID namespace of its own.
        own_namespace: bool,
    },
    /// The process is traced already (a debugger).
    AlreadyTraced {
        /// The process.
        pid: i32,
        /// Its tracer's pid, as `/proc/PID/status` says it.
        tracer: u32,
    },
    /// `kernel.yama.ptrace_scope` forbids tracing the process.
    PtraceScope {
        /// The process.
        pid: i32,
        /// The scope (1, 2 or 3).
        scope: u8,
    },
    /// `ptrace` refused for another reason.
    TraceDenied {
        /// The process.
        pid: i32,
        /// The error `PTRACE_SEIZE` returned.
        cause: std::io::Error,
        /// Whether the refusal says what privilege would allow it (this
        /// tracer lacks CAP_SYS_PTRACE and got EPERM).
        needs_privilege: bool,
    },
    /// A thread seized did not stop.
    ThreadDidNotStop {
        /// The process.
        pid: i32,
        /// The thread.
        tid: i32,
        /// What it was doing, in words (its state and kernel function).
        state: String,
        /// How long it had.
        within: std::time::Duration,
    },
    /// The process's executable (`/proc/PID/exe`) cannot be read:
    /// another user's process.
    ExeUnreadable {
        /// `/proc/PID/exe`.
        path: String,
        /// The error.
        cause: std::io::Error,
        /// The process is this user's: it made itself not dumpable
        /// (`prctl(PR_SET_DUMPABLE, 0)`, as ssh-agent and gpg-agent do).
        own: bool,
    },
    /// The process is not an x86-64 program.
    NotX86_64 {
        /// `/proc/PID/exe`.
        path: String,
    },
    /// The file is not an x86-64 ELF core file, or its headers or notes
    /// contradict themselves.
    NotACore {
        /// The core file.
        path: PathBuf,
        /// What is wrong with it.
        why: CoreDefect,
    },
    /// The core file is cut short before its thread registers
    /// (NT_PRSTATUS).
    CoreCutShort {
        /// The core file.
        path: PathBuf,
        /// The bytes the file holds.
        len: u64,
        /// The bytes its program headers describe.
        wanted: u64,
    },
    /// The core file is cut short, and its heap could not be read: what
    /// failed is likely in the part missing.
    CoreCutShortHeap {
        /// The core file.
        path: PathBuf,
        /// The bytes the file holds.
        len: u64,
        /// The bytes its program headers describe.
        wanted: u64,
        /// What failed.
        cause: Box<Error>,
    },
    /// The process allocates with another allocator (jemalloc, …).
    OtherAllocator {
        /// The module's file name.
        module: String,
    },
    /// The process runs on musl.
    Musl {
        /// The musl module mapped.
        module: String,
    },
    /// A static program without glibc in it.
    NoGlibc {
        /// The executable.
        exe: String,
    },
    /// A static glibc program without a version banner whose strings do
    /// not tell a glibc this version reads.
    StaticGlibcUnknown {
        /// The module glibc is linked into.
        path: String,
        /// What its strings say.
        why: StaticGlibc,
    },
    /// The C library does not say which glibc it is.
    NoGlibcVersion {
        /// The C library.
        path: String,
    },
    /// glibc's banner names no version that can be read.
    UnreadableBanner {
        /// What follows "release version ".
        text: String,
    },
    /// A glibc whose heap layout this version does not read.
    UnsupportedGlibc {
        /// Its version.
        version: (u32, u32),
    },

    // The heap.
    /// glibc's main arena was not found in the C library's data.
    NoMainArena,
    /// Several places in the C library's data have the main arena's shape.
    MainArenaUncertain {
        /// Their addresses.
        candidates: Vec<u64>,
    },
    /// jemalloc's heap does not add up at `at`, or its version is not
    /// read (a refusal).
    Jemalloc {
        /// Where it stops making sense (a descriptor, a slab, a cache).
        at: u64,
        /// What.
        what: crate::jemalloc::Problem,
    },
    /// musl's heap (mallocng) does not add up at `at`, or its state is
    /// not found (a refusal).
    Mallocng {
        /// Where it stops making sense (a meta area, a group, a slot).
        at: u64,
        /// What.
        what: crate::musl::Problem,
    },
    /// tcmalloc's heap (gperftools) does not add up at `at`, or its
    /// structures are not found (a refusal).
    Tcmalloc {
        /// Where it stops making sense (a span, a free list).
        at: u64,
        /// What.
        what: crate::tcmalloc::Problem,
    },
    /// mimalloc's heap does not add up at `at`, or its version or main
    /// heap is not read (a refusal).
    Mimalloc {
        /// Where it stops making sense (a segment, a page, a heap).
        at: u64,
        /// What.
        what: crate::mimalloc::Problem,
    },
    /// glibc's heap does not add up at `at`.
    DamagedHeap {
        /// Where it stops making sense (an arena, a heap, a chunk).
        at: u64,
        /// What does not add up.
        what: Damage,
    },

    // Reading and writing.
    /// Memory the capture needs could not be read.
    Unreadable {
        /// Where.
        addr: u64,
        /// How much.
        len: u64,
        /// Why.
        why: Unread,
    },
    /// A file failed.
    File {
        /// What was being done.
        op: FileOp,
        /// The file.
        path: PathBuf,
        /// The error (in the message, not as a source: one line).
        cause: std::io::Error,
    },
    /// The threads of the process could not be listed.
    ListThreads {
        /// The process.
        pid: i32,
        /// The error.
        cause: std::io::Error,
    },
    /// The dump could not be written.
    Write {
        /// The dump being written.
        path: PathBuf,
        /// The writer's error.
        error: heapdump_format::WriteError,
    },
}

/// What is wrong with a file given as a core.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CoreDefect {
    /// Its ELF headers do not parse (the parser's message).
    Elf(String),
    /// An ELF file, but not a core.
    NotACore,
    /// A core of another machine.
    OtherMachine,
    /// A PT_LOAD segment runs past the address space.
    SegmentPastAddressSpace {
        /// The segment's address.
        vaddr: u64,
        /// Its size in memory.
        memsz: u64,
    },
    /// The NT_FILE note claims more files than it can hold.
    FileNoteCount {
        /// The files claimed.
        count: u64,
        /// The note's length.
        len: u64,
    },
    /// No NT_PRSTATUS note.
    NoThreads,
}

/// What a static glibc program's strings say that is refused (a marker is
/// a string only some releases hold).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StaticGlibc {
    /// A marker of a release newer than the last read.
    Newer {
        /// The first release holding it.
        since: (u32, u32),
        /// The marker.
        marker: String,
    },
    /// A marker of a release older than the first read.
    Older {
        /// The last release holding it.
        until: (u32, u32),
        /// The marker.
        marker: String,
    },
    /// A marker every release read holds is missing.
    Missing {
        /// The marker.
        marker: String,
    },
    /// A marker held without an older one every later release holds.
    Contradiction {
        /// The newest marker held.
        held: String,
        /// The first release holding it.
        held_since: (u32, u32),
        /// The older marker missing.
        missing: String,
        /// The first release holding that one.
        missing_since: (u32, u32),
    },
}

/// What does not add up in glibc's heap (at the address `Error::DamagedHeap`
/// names).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Damage {
    /// The arena after `prev` is not an arena (at: the next pointer).
    ArenaRingBroken {
        /// The arena whose `next` it is.
        prev: u64,
    },
    /// The ring of arenas meets an arena twice (at: that arena).
    ArenaRingLoops {
        /// The arena before it.
        prev: u64,
        /// The main arena.
        main: u64,
    },
    /// The chunks run past the top chunk (at: the chunk).
    ChunksPastTop {
        /// The top chunk.
        top: u64,
    },
    /// A chunk's header lies outside its heap (at: the chunk).
    ChunkOutsideHeap,
    /// A chunk's size is not a chunk's or runs past its heap (at: the
    /// chunk).
    ChunkSize {
        /// The size field as read.
        size: u64,
        /// What is wrong with it.
        why: BadSize,
    },
    /// A chunk's successor lies outside the heap (at: the chunk).
    ChunkPastHeap,
    /// The top chunk's header lies outside its heap (at: the top chunk).
    TopOutsideHeap,
    /// The top chunk's size runs past the heap's end (at: the top chunk).
    TopSize {
        /// The size field as read.
        size: u64,
        /// The heap's end.
        end: u64,
    },
    /// The main arena's top chunk is not in the brk heap (at: the top
    /// chunk; a heap grown by mmap after brk failed is not read).
    TopNotInBrkHeap,
    /// An arena's heaps do not chain (at: the heap met twice, or not at
    /// a heap's alignment).
    ArenaHeaps {
        /// The arena.
        arena: u64,
    },
    /// A heap does not belong to its arena (at: the heap).
    HeapNotOfArena {
        /// The arena.
        arena: u64,
    },
    /// An arena's top chunk is not in its newest heap (at: the top chunk).
    TopNotInHeap {
        /// The arena.
        arena: u64,
        /// Its newest heap.
        heap: u64,
        /// That heap's end.
        end: u64,
    },
    /// A fastbin meets a chunk twice (at: the chunk).
    FastbinLoop {
        /// The fastbin's index.
        bin: usize,
        /// Its arena.
        arena: u64,
    },
    /// A chunk is held free twice (at: the chunk).
    HeldFreeTwice {
        /// The per-thread cache holding it.
        cache: u64,
    },
    /// A per-thread cache's list meets a chunk twice (at: the chunk).
    TcacheLoop {
        /// The list's index.
        list: usize,
        /// The per-thread cache.
        cache: u64,
    },
    /// A per-thread cache's list leads to no chunk of its size class (at:
    /// where it leads).
    TcacheBroken {
        /// The list's index.
        list: usize,
        /// The per-thread cache.
        cache: u64,
    },
    /// A per-thread cache's list holds other than its count (at: the
    /// cache).
    TcacheCount {
        /// The list's index.
        list: usize,
        /// Its count.
        count: usize,
        /// The chunks it leads through.
        held: usize,
    },
}

/// Why a chunk's size is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadSize {
    /// Under 32 or not a multiple of 16.
    NotASize,
    /// It ends past the top chunk.
    PastTop(u64),
    /// It ends past the heap's end.
    PastEnd(u64),
}

/// Why memory could not be read.
#[derive(Debug)]
#[non_exhaustive]
pub enum Unread {
    /// The range wraps around the address space.
    PastAddressSpace,
    /// Not mapped in the process.
    NotMapped,
    /// Too large for this machine's memory.
    TooLarge,
    /// The range ends before it starts, at this address.
    EndsBeforeStart(u64),
    /// No segment of the core holds it.
    NotInCore,
    /// The core file is cut short before it.
    CoreCutShort,
    /// A page the core file does not hold (the kernel or gdb left it out).
    NotInCoreFile,
    /// A block outside the heap the walk read.
    OutsideHeapRead,
    /// Reading the process's memory failed.
    Io(std::io::Error),
}

/// What was being done with a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileOp {
    /// Opening it.
    Open,
    /// Mapping it.
    Map,
    /// Reading it.
    Read,
    /// Creating it.
    Create,
    /// Writing it.
    Write,
}

impl Error {
    /// Whether the capture was refused (the process or the core cannot be
    /// read here, and the message says why), not failed on the way.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            Error::NoProcess { .. }
                | Error::AlreadyTraced { .. }
                | Error::PtraceScope { .. }
                | Error::TraceDenied { .. }
                | Error::ThreadDidNotStop { .. }
                | Error::ExeUnreadable { .. }
                | Error::NotX86_64 { .. }
                | Error::NotACore { .. }
                | Error::CoreCutShort { .. }
                | Error::CoreCutShortHeap { .. }
                | Error::OtherAllocator { .. }
                | Error::Musl { .. }
                | Error::NoGlibc { .. }
                | Error::StaticGlibcUnknown { .. }
                | Error::NoGlibcVersion { .. }
                | Error::UnreadableBanner { .. }
                | Error::UnsupportedGlibc { .. }
                | Error::Jemalloc { what: crate::jemalloc::Problem::Unsupported { .. }, .. }
                | Error::Mallocng { what: crate::musl::Problem::NoContext { .. } | crate::musl::Problem::ContextUncertain { .. }, .. }
                | Error::Tcmalloc {
                    what: crate::tcmalloc::Problem::Unsupported { .. }
                        | crate::tcmalloc::Problem::NotFound { .. }
                        | crate::tcmalloc::Problem::Uncertain { .. },
                    ..
                }
                | Error::Mimalloc {
                    what: crate::mimalloc::Problem::Unsupported { .. }
                        | crate::mimalloc::Problem::NoHeap { .. }
                        | crate::mimalloc::Problem::StaticCopy { .. }
                        | crate::mimalloc::Problem::HeapUncertain { .. },
                    ..
                }
        )
    }

    /// Where glibc's heap stops making sense, for a damaged heap.
    pub fn damaged_at(&self) -> Option<u64> {
        match *self {
            Error::DamagedHeap { at, .. } => Some(at),
            Error::Jemalloc { at, .. } => Some(at),
            Error::Mallocng { at, .. } => Some(at),
            Error::Tcmalloc { at, .. } => Some(at),
            Error::Mimalloc { at, .. } => Some(at),
            _ => None,
        }
    }
}

/// "2.30".
struct V((u32, u32));

impl fmt::Display for V {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.0 .0, self.0 .1)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (oldest, newest) = (V(OLDEST_GLIBC), V(NEWEST_GLIBC));
        match self {
            Error::NoProcess { pid, own_namespace: true } => write!(
                f,
                "no process {pid} in this PID namespace (a container's): a process outside it is seen only with `--pid=host`, by its pid there"
            ),
            Error::NoProcess { pid, own_namespace: false } => write!(f, "no process {pid}"),
            Error::AlreadyTraced { pid, tracer } => {
                write!(f, "process {pid} is already traced by process {tracer} (a debugger?): detach it first")
            }
            Error::PtraceScope { pid, scope } => {
                write!(f, "cannot trace process {pid}: kernel.yama.ptrace_scope is {scope} ")?;
                match scope {
                    1 => write!(f, "(only a parent may trace): {NEEDS}; or set it to 0"),
                    2 => write!(f, "(only with CAP_SYS_PTRACE)"),
                    _ => write!(f, "(no process may be traced)"),
                }
            }
            Error::TraceDenied { pid, cause, needs_privilege: true } => write!(f, "cannot trace process {pid}: {cause}: {NEEDS}"),
            Error::TraceDenied { pid, cause, needs_privilege: false } => write!(f, "cannot trace process {pid}: {cause}"),
            Error::ThreadDidNotStop { pid, tid, state, within } => write!(
                f,
                "thread {tid} of process {pid} did not stop within {} s: it is {state}; the process was let go, nothing was read (try again once the call returns)",
                within.as_secs_f64()
            ),
            Error::ExeUnreadable { path, cause, own: false } => write!(f, "cannot read {path}: {cause}: another user's process {NEEDS}"),
            Error::ExeUnreadable { path, cause, own: true } => write!(
                f,
                "cannot read {path}: {cause}: the process is yours but made itself not dumpable (prctl PR_SET_DUMPABLE, as ssh-agent and gpg-agent do): reading it {NEEDS}"
            ),
            Error::NotX86_64 { path } => write!(f, "{path} is not an x86-64 program: attach reads x86-64 processes only"),
            Error::NotACore { path, why } => write!(f, "{}: not an x86-64 ELF core file ({why})", path.display()),
            Error::CoreCutShortHeap { path, len, wanted, cause } => write!(
                f,
                "{}: the core file is cut short ({len} of {wanted} bytes) and its heap cannot be read without the part missing (what failed: {cause})",
                path.display()
            ),
            Error::CoreCutShort { path, len, wanted } => write!(
                f,
                "{}: the core file is cut short ({len} of {wanted} bytes): its thread registers (NT_PRSTATUS) are in the part missing",
                path.display()
            ),
            Error::OtherAllocator { module } => {
                write!(f, "the process allocates with {module}, whose heap attach and core do not read (they read glibc's malloc, jemalloc 5.3, mimalloc 2.0, 2.3 and 3.3, gperftools' tcmalloc 2.10 and musl's mallocng)")
            }
            Error::Musl { module } => {
                write!(f, "the process runs on musl ({module} is mapped) but its malloc state is not mallocng's: attach and core read musl 1.2.1 or later")
            }
            Error::NoGlibc { exe } => write!(
                f,
                "{exe} is statically linked without glibc (no libc.so.6 mapped, no glibc banner or tunables in it) and without musl's mallocng state: musl's bump allocator (a static musl program that never calls free: its blocks carry no headers) or another C library's heap, which attach and core cannot read"
            ),
            Error::StaticGlibcUnknown { path, why } => {
                let unguessed = "glibc's heap layout depends on its version, which is not guessed";
                match why {
                    StaticGlibc::Newer { since, marker } => write!(
                        f,
                        "{path} is statically linked with glibc {} or later (no version banner, but it holds malloc's \"{marker}\"): a heap layout this version of heapdump does not know (it reads {oldest} to {newest})",
                        V(*since)
                    ),
                    StaticGlibc::Older { until, marker } => write!(
                        f,
                        "{path} is statically linked with glibc {} or older (no version banner, but it holds \"{marker}\"): a heap layout this version of heapdump does not know (it reads {oldest} to {newest})",
                        V(*until)
                    ),
                    StaticGlibc::Missing { marker } => write!(
                        f,
                        "{path} is statically linked with glibc but holds neither its version banner nor \"{marker}\", which every glibc from {oldest} to {newest} holds (an older or newer glibc, or one built without tunables): {unguessed}"
                    ),
                    StaticGlibc::Contradiction { held, held_since, missing, missing_since } => write!(
                        f,
                        "{path} is statically linked with glibc but its strings contradict each other: \"{held}\" (glibc {} and later) without \"{missing}\" (glibc {} and later), and it holds no version banner: {unguessed}",
                        V(*held_since),
                        V(*missing_since)
                    ),
                }
            }
            Error::NoGlibcVersion { path } => write!(
                f,
                "{path} does not say which glibc it is (no \"release version\" in its read-only data, in memory or in its file here): its heap layout depends on it"
            ),
            Error::UnreadableBanner { text } => write!(f, "cannot read glibc's version from its banner's {text:?}"),
            Error::UnsupportedGlibc { version } => write!(
                f,
                "glibc {}: a heap layout this version of heapdump does not know (it reads {oldest} to {newest})",
                V(*version)
            ),
            Error::NoMainArena => write!(
                f,
                "glibc's main arena was not found in the C library's data: not glibc's malloc, or a layout this version does not know"
            ),
            Error::MainArenaUncertain { candidates } => {
                write!(f, "glibc's main arena is not certain: {} places in the C library's data have its shape (", candidates.len())?;
                for (i, a) in candidates.iter().enumerate() {
                    write!(f, "{}{a:#x}", if i == 0 { "" } else { ", " })?;
                }
                write!(f, ")")
            }
            Error::DamagedHeap { at, what } => damage(f, *at, what),
            Error::Jemalloc { at, what } if what.is_damage() => write!(f, "{what} (at {at:#x}): a damaged heap, or not jemalloc's layout"),
            Error::Jemalloc { what, .. } => write!(f, "{what}"),
            Error::Mallocng { at, what } if what.is_damage() => write!(f, "{what} (at {at:#x}): a damaged heap, or not mallocng's layout"),
            Error::Mallocng { what, .. } => write!(f, "{what}"),
            Error::Tcmalloc { at, what } if what.is_damage() => write!(f, "{what} (at {at:#x}): a damaged heap, or not tcmalloc's layout"),
            Error::Tcmalloc { what, .. } => write!(f, "{what}"),
            Error::Mimalloc { at, what } if what.is_damage() => write!(f, "{what} (at {at:#x}): a damaged heap, or not the layout of the mimalloc it names"),
            Error::Mimalloc { what, .. } => write!(f, "{what}"),
            Error::Unreadable { addr, len, why } => write!(f, "cannot read {len} bytes at {addr:#x} ({why})"),
            Error::File { op, path, cause } => write!(f, "{op} {}: {cause}", path.display()),
            Error::ListThreads { pid, cause } => write!(f, "cannot list the threads of process {pid}: {cause}"),
            Error::Write { path, error } => write!(f, "writing the dump {}: {error}", path.display()),
        }
    }
}

/// The line for a damaged heap at `at`.
fn damage(f: &mut fmt::Formatter<'_>, at: u64, what: &Damage) -> fmt::Result {
    match *what {
        Damage::ArenaRingBroken { prev } => {
            write!(f, "glibc's ring of arenas is broken at {at:#x} (the next arena of {prev:#x} is not an arena): a damaged heap")
        }
        Damage::ArenaRingLoops { prev, main } => write!(
            f,
            "glibc's ring of arenas loops at {at:#x} (after {prev:#x}) without coming back to the main arena {main:#x}: a damaged heap"
        ),
        Damage::ChunksPastTop { top } => write!(f, "the heap's chunks run past its top chunk {top:#x} at {at:#x}: a damaged heap"),
        Damage::ChunkOutsideHeap => write!(f, "chunk {at:#x} lies outside its heap"),
        Damage::ChunkSize { size, why } => {
            write!(f, "chunk {at:#x} has size {size:#x} (")?;
            match why {
                BadSize::NotASize => write!(f, "not a chunk's size")?,
                BadSize::PastTop(t) => write!(f, "past the top chunk {t:#x}")?,
                BadSize::PastEnd(e) => write!(f, "past the heap's end {e:#x}")?,
            }
            write!(f, "): a damaged heap, or a layout this version does not know")
        }
        Damage::ChunkPastHeap => write!(f, "chunk {at:#x} runs past the heap"),
        Damage::TopOutsideHeap => write!(f, "the top chunk {at:#x} lies outside its heap"),
        Damage::TopSize { size, end } => {
            write!(f, "the top chunk {at:#x} has size {size:#x} (past the heap's end {end:#x}): a damaged heap")
        }
        Damage::TopNotInBrkHeap => {
            write!(f, "the main arena's top chunk {at:#x} is not in the brk heap (a heap grown by mmap after brk failed is not supported)")
        }
        Damage::ArenaHeaps { arena } => {
            write!(f, "the heaps of arena {arena:#x} do not add up at {at:#x} (met twice, or not a heap's start): a damaged heap")
        }
        Damage::HeapNotOfArena { arena } => write!(f, "heap {at:#x} does not belong to arena {arena:#x}: a damaged heap"),
        Damage::TopNotInHeap { arena, heap, end } => {
            write!(f, "the top chunk {at:#x} of arena {arena:#x} is not in its heap {heap:#x}..{end:#x}: a damaged heap")
        }
        Damage::FastbinLoop { bin, arena } => {
            write!(f, "fastbin {bin} of arena {arena:#x} meets chunk {at:#x} a second time (a loop): a damaged heap")
        }
        Damage::HeldFreeTwice { cache } => {
            write!(f, "chunk {at:#x} is held free twice (in the per-thread cache at {cache:#x} and another list): a damaged heap")
        }
        Damage::TcacheLoop { list, cache } => {
            write!(f, "list {list} of the per-thread cache at {cache:#x} meets chunk {at:#x} a second time (a loop): a damaged heap")
        }
        Damage::TcacheBroken { list, cache } => write!(
            f,
            "list {list} of the per-thread cache at {cache:#x} leads to {at:#x}, no freed chunk of its size (a write into a freed block?): a damaged heap"
        ),
        Damage::TcacheCount { list, count, held } => write!(
            f,
            "list {list} of the per-thread cache at {at:#x} counts {count} chunks but leads through {held}: a damaged heap"
        ),
    }
}

impl fmt::Display for CoreDefect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CoreDefect::Elf(e) => write!(f, "{e}"),
            CoreDefect::NotACore => write!(f, "not a core"),
            CoreDefect::OtherMachine => write!(f, "another machine"),
            CoreDefect::SegmentPastAddressSpace { vaddr, memsz } => {
                write!(f, "a segment at {vaddr:#x} of {memsz:#x} bytes runs past the address space")
            }
            CoreDefect::FileNoteCount { count, len } => write!(f, "its NT_FILE note claims {count} files in {len} bytes"),
            CoreDefect::NoThreads => write!(f, "no thread register sets (NT_PRSTATUS)"),
        }
    }
}

impl fmt::Display for Unread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unread::PastAddressSpace => write!(f, "past the address space"),
            Unread::NotMapped => write!(f, "not mapped"),
            Unread::TooLarge => write!(f, "too large"),
            Unread::EndsBeforeStart(end) => write!(f, "ends before it starts, at {end:#x}"),
            Unread::NotInCore => write!(f, "not mapped in the core"),
            Unread::CoreCutShort => write!(f, "the core file is cut short"),
            Unread::NotInCoreFile => write!(f, "a page the core file does not hold"),
            Unread::OutsideHeapRead => write!(f, "outside the heap read"),
            Unread::Io(e) => write!(f, "{e}"),
        }
    }
}

impl fmt::Display for FileOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileOp::Open => "cannot open",
            FileOp::Map => "cannot map",
            FileOp::Read => "cannot read",
            FileOp::Create => "cannot create",
            FileOp::Write => "writing",
        })
    }
}

// No source: every cause is in the one line already (a chain printed
// with its sources would say it twice).
impl std::error::Error for Error {}

/// A capture's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The error of `op` on the file `path`.
pub(crate) fn on_file(op: FileOp, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.into();
    move |cause| Error::File { op, path, cause }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines the CLI printed when these were strings, word for word.
    #[test]
    fn lines_are_the_ones_printed() {
        let mut cases: Vec<(Error, String)> = vec![
            (Error::NoProcess { pid: 7, own_namespace: false }, "no process 7".into()),
            (Error::AlreadyTraced { pid: 7, tracer: 9 }, "process 7 is already traced by process 9 (a debugger?): detach it first".into()),
            (
                Error::PtraceScope { pid: 7, scope: 1 },
                format!("cannot trace process 7: kernel.yama.ptrace_scope is 1 (only a parent may trace): {NEEDS}; or set it to 0"),
            ),
            (
                Error::PtraceScope { pid: 7, scope: 2 },
                "cannot trace process 7: kernel.yama.ptrace_scope is 2 (only with CAP_SYS_PTRACE)".into(),
            ),
            (
                Error::PtraceScope { pid: 7, scope: 3 },
                "cannot trace process 7: kernel.yama.ptrace_scope is 3 (no process may be traced)".into(),
            ),
            (
                Error::TraceDenied { pid: 7, cause: std::io::Error::from_raw_os_error(libc::EPERM), needs_privilege: true },
                format!("cannot trace process 7: {}: {NEEDS}", std::io::Error::from_raw_os_error(libc::EPERM)),
            ),
            (Error::UnsupportedGlibc { version: (2, 42) }, "glibc 2.42: a heap layout this version of heapdump does not know (it reads 2.30 to 2.41)".into()),
            (
                Error::MainArenaUncertain { candidates: vec![0x10, 0x20] },
                "glibc's main arena is not certain: 2 places in the C library's data have its shape (0x10, 0x20)".into(),
            ),
            (
                Error::DamagedHeap { at: 0x1000, what: Damage::ChunkSize { size: 0x21, why: BadSize::PastTop(0x2000) } },
                "chunk 0x1000 has size 0x21 (past the top chunk 0x2000): a damaged heap, or a layout this version does not know".into(),
            ),
            (
                Error::DamagedHeap { at: 0x1000, what: Damage::FastbinLoop { bin: 3, arena: 0x500 } },
                "fastbin 3 of arena 0x500 meets chunk 0x1000 a second time (a loop): a damaged heap".into(),
            ),
            (
                Error::NotACore { path: "core".into(), why: CoreDefect::FileNoteCount { count: 9, len: 40 } },
                "core: not an x86-64 ELF core file (its NT_FILE note claims 9 files in 40 bytes)".into(),
            ),
            (
                Error::Unreadable { addr: 0x10, len: 8, why: Unread::EndsBeforeStart(0x8) },
                "cannot read 8 bytes at 0x10 (ends before it starts, at 0x8)".into(),
            ),
            (
                Error::StaticGlibcUnknown {
                    path: "/p".into(),
                    why: StaticGlibc::Newer { since: (2, 42), marker: "m".into() },
                },
                "/p is statically linked with glibc 2.42 or later (no version banner, but it holds malloc's \"m\"): a heap layout this version of heapdump does not know (it reads 2.30 to 2.41)".into(),
            ),
        ];
        cases.push((
            Error::Write { path: "d.hdump".into(), error: heapdump_format::WriteError::Sink { errno: libc::ENOSPC } },
            format!("writing the dump d.hdump: {}", heapdump_format::WriteError::Sink { errno: libc::ENOSPC }),
        ));
        for (e, line) in cases {
            assert_eq!(e.to_string(), line);
        }
        assert!(Error::NoMainArena.damaged_at().is_none() && !Error::NoMainArena.is_refusal());
        assert!(Error::UnsupportedGlibc { version: (2, 29) }.is_refusal());
    }
}
