//! Enumerations and plain descriptions shared by the writer and the reader.

use crate::items::{Items, ItemsIter, Packed};

/// What a dump holds for each allocation and root region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// First word plus the (offset, value) list of words pointing into the heap.
    Compact,
    /// Raw contents.
    Full,
}

impl Mode {
    /// The byte stored in the file header.
    pub const fn to_u8(self) -> u8 {
        match self {
            Mode::Compact => 1,
            Mode::Full => 2,
        }
    }
    /// Decodes the header byte.
    pub const fn from_u8(v: u8) -> Option<Mode> {
        match v {
            1 => Some(Mode::Compact),
            2 => Some(Mode::Full),
            _ => None,
        }
    }
    /// Lowercase name, as the command line spells it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Mode::Compact => "compact",
            Mode::Full => "full",
        }
    }
}

/// Why the dump was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// An explicit call of the API.
    Api,
    /// The dump signal arrived.
    Signal,
    /// The process was exiting.
    Exit,
    /// The underlying allocator returned null.
    AllocFailure,
    /// The live heap crossed the configured threshold.
    Threshold,
    /// The memory one of the process's limits counts crossed the share
    /// asked (since 1.2); a LIMIT record says which limit.
    NearLimit,
    /// The program crashed (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL);
    /// since 1.2. A SIGNAL record says which signal, thread and address.
    Crash,
    /// Captured from a running process from outside (`heapdump attach`);
    /// since 1.3.
    Attach,
    /// Captured from a core file (`heapdump core`); since 1.3.
    Core,
    /// Taken on the schedule `heapdump run --every` set; since 1.4.
    Every,
}

impl Reason {
    /// The byte stored in the file header.
    pub const fn to_u8(self) -> u8 {
        match self {
            Reason::Api => 1,
            Reason::Signal => 2,
            Reason::Exit => 3,
            Reason::AllocFailure => 4,
            Reason::Threshold => 5,
            Reason::NearLimit => 6,
            Reason::Crash => 7,
            Reason::Attach => 8,
            Reason::Core => 9,
            Reason::Every => 10,
        }
    }
    /// Decodes the header byte.
    pub const fn from_u8(v: u8) -> Option<Reason> {
        match v {
            1 => Some(Reason::Api),
            2 => Some(Reason::Signal),
            3 => Some(Reason::Exit),
            4 => Some(Reason::AllocFailure),
            5 => Some(Reason::Threshold),
            6 => Some(Reason::NearLimit),
            7 => Some(Reason::Crash),
            8 => Some(Reason::Attach),
            9 => Some(Reason::Core),
            10 => Some(Reason::Every),
            _ => None,
        }
    }
    /// Lowercase name used in JSON and tables.
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::Api => "api",
            Reason::Signal => "signal",
            Reason::Exit => "exit",
            Reason::Crash => "crash",
            Reason::NearLimit => "near_limit",
            Reason::AllocFailure => "alloc_failure",
            Reason::Threshold => "threshold",
            Reason::Attach => "attach",
            Reason::Core => "core",
            Reason::Every => "every",
        }
    }
}

/// How allocation sites are captured: the PROCESS record's mode, and the
/// `HEAPDUMP_BACKTRACE` setting's (with its mean, see
/// [`crate::settings::parse_backtrace`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backtrace {
    /// No sites.
    Off,
    /// A site for every allocation.
    All,
    /// Sites for a Poisson sample of allocated bytes.
    Sampled,
}

impl Backtrace {
    /// The byte stored in the PROCESS record.
    pub const fn to_u8(self) -> u8 {
        match self {
            Backtrace::Off => 0,
            Backtrace::All => 1,
            Backtrace::Sampled => 2,
        }
    }
    /// Decodes the PROCESS byte.
    pub const fn from_u8(v: u8) -> Option<Backtrace> {
        match v {
            0 => Some(Backtrace::Off),
            1 => Some(Backtrace::All),
            2 => Some(Backtrace::Sampled),
            _ => None,
        }
    }
    /// Lowercase name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Backtrace::Off => "off",
            Backtrace::All => "all",
            Backtrace::Sampled => "sampled",
        }
    }
}

/// The PROCESS record: what [`crate::Writer::process`] writes and
/// [`crate::Record::Process`] reads back, its strings borrowed (from the
/// writer's buffers, or from the dump without a copy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Process<'a> {
    /// How allocation sites were captured.
    pub backtrace: Backtrace,
    /// Deepest site captured, in frames.
    pub max_frames: u32,
    /// Mean sampling interval in bytes when sampled, else 0.
    pub sample_mean: u64,
    /// Path of the executable.
    pub exe: &'a [u8],
    /// Command line, arguments separated by NUL bytes.
    pub cmdline: &'a [u8],
    /// `raw::PROCESS_*` flags (since 1.3; zero before).
    pub flags: u8,
}

/// The file header's fields (after the magic).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Major format version.
    pub major: u16,
    /// Minor format version.
    pub minor: u16,
    /// Pointer width in bytes (8).
    pub pointer_size: u8,
    /// Compact or full.
    pub mode: Mode,
    /// Why the dump was taken.
    pub reason: Reason,
    /// The process's page size.
    pub page_size: u32,
    /// The process id.
    pub pid: u32,
    /// Wall-clock time of the dump, nanoseconds since the Unix epoch.
    pub time_ns: u64,
}

impl Header {
    /// A header of the current version for this machine.
    pub const fn new(mode: Mode, reason: Reason, page_size: u32, pid: u32, time_ns: u64) -> Header {
        Header { major: crate::raw::MAJOR, minor: crate::raw::MINOR, pointer_size: 8, mode, reason, page_size, pid, time_ns }
    }
}

/// One program header of a module, as ELF describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Segment {
    /// `p_vaddr`: address relative to the module's load bias.
    pub vaddr: u64,
    /// `p_memsz`.
    pub memsz: u64,
    /// `p_offset`: offset in the file.
    pub file_offset: u64,
    /// `p_flags` (`SEG_R`, `SEG_W`, `SEG_X`).
    pub flags: u32,
}

/// A MODULE record: what [`crate::Writer::module`] writes, its segments
/// a slice ([`ModuleInfo`](crate::ModuleInfo)), and what
/// [`crate::Record::Module`] reads back, its segments the dump's bytes.
#[derive(Clone, Copy, Debug)]
pub struct Module<'a, S = Packed<'a, Segment>> {
    /// Load bias: run-time address minus link-time address.
    pub bias: u64,
    /// Path of the object as the loader saw it.
    pub path: &'a [u8],
    /// GNU build id (may be empty).
    pub build_id: &'a [u8],
    /// Its loadable segments.
    pub segments: S,
}

impl<S: Items<Segment>> Module<'_, S> {
    /// The loadable segments, in order.
    pub fn segments(&self) -> ItemsIter<S, Segment> {
        self.segments.values()
    }
}

/// A THREAD record: what [`crate::Writer::thread`] writes (the stack's
/// contents given beside it), its registers a slice
/// ([`ThreadInfo`](crate::ThreadInfo)), and what [`crate::Record::Thread`]
/// reads back (with the contents, [`crate::WithContents`]), its registers
/// the dump's bytes.
#[derive(Clone, Copy, Debug)]
pub struct Thread<'a, R = Packed<'a, u64>> {
    /// Kernel thread id.
    pub tid: u32,
    /// `THREAD_*` flags.
    pub flags: u32,
    /// Lowest dumped stack address.
    pub stack_start: u64,
    /// One past the highest dumped stack address.
    pub stack_end: u64,
    /// Thread pointer (`fs` base on x86-64).
    pub tls: u64,
    /// Thread name.
    pub name: &'a [u8],
    /// Registers in `raw::X86_64_REG_NAMES` order; empty when not stopped.
    pub regs: R,
}

impl<R: Items<u64>> Thread<'_, R> {
    /// The registers, in `raw::X86_64_REG_NAMES` order.
    pub fn regs(&self) -> ItemsIter<R, u64> {
        self.regs.values()
    }
}

/// A STATIC record: what [`crate::Writer::static_root`] writes (the
/// segment's contents given beside it) and [`crate::Record::Static`] reads
/// back (with the contents, [`crate::WithContents`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Static<'a> {
    /// Start address.
    pub address: u64,
    /// Size in bytes.
    pub size: u64,
    /// Index of the MODULE record (in file order) or `raw::NO_MODULE`.
    pub module: u32,
    /// Name, such as `.data` or `.bss`.
    pub name: &'a [u8],
}

/// An ALLOC record: what [`crate::Writer::alloc`] writes (the contents
/// given beside it) and [`crate::Record::Alloc`] reads back (with the
/// contents, [`crate::WithContents`]); also an allocation of an ALLOCS
/// record as [`crate::Writer::dense_alloc`] is given it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Alloc {
    /// Address returned to the program.
    pub address: u64,
    /// Size the program asked for.
    pub size: u64,
    /// SITE id, or `raw::NO_SITE`.
    pub site: u32,
    /// log2 of the requested alignment.
    pub align_log2: u8,
    /// `ALLOC_*` flags.
    pub flags: u8,
    /// The first word: written in compact mode (ignored in full mode);
    /// read from the contents in full mode, zero-padded.
    pub first_word: u64,
}

/// The trailer's totals.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Trailer {
    /// Number of records before the trailer.
    pub records: u64,
    /// Number of ALLOC records.
    pub allocations: u64,
    /// Sum of their requested sizes.
    pub alloc_bytes: u64,
    /// Number of SITE records.
    pub sites: u64,
    /// Number of pointer entries in compact ALLOC records.
    pub pointers: u64,
    /// Number of THREAD records.
    pub threads: u32,
    /// Number of STATIC records.
    pub statics: u32,
    /// Number of MODULE records.
    pub modules: u32,
    /// How long the program's threads were held stopped, in nanoseconds.
    pub pause_ns: u64,
    /// CRC-32 (IEEE) of every byte of the file before this field.
    pub checksum: u32,
}

/// What the SIGNAL record says: the signal a dump was taken for (since
/// 1.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SignalInfo {
    /// Signal number.
    pub signal: u32,
    /// `si_code` as the kernel gave it: above 0 for a fault the kernel
    /// raised, 0 or below for a signal a process sent.
    pub code: i32,
    /// The thread that received it (for a crash, the faulting thread).
    pub tid: u32,
    /// The faulting address (`si_addr`) of a SIGSEGV, SIGBUS, SIGFPE or
    /// SIGILL the kernel raised; else 0.
    pub address: u64,
    /// The process that sent it (`si_pid`), when one did; else 0.
    pub sender: u32,
}

/// What the LIMIT record says: the memory limit a near-limit dump was
/// taken for (since 1.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LimitInfo {
    /// Which limit: 1 cgroup `memory.max`, 2 cgroup `memory.high`, 3 cgroup
    /// v1 `memory.limit_in_bytes`, 4 `RLIMIT_AS`, 5 `RLIMIT_DATA`, 6
    /// physical memory.
    pub kind: u32,
    /// The limit, in bytes.
    pub bytes: u64,
    /// What it counted when the dump was decided, in bytes.
    pub used: u64,
}

impl LimitInfo {
    /// The limit's name, as `summary` shows it.
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            1 => "cgroup memory.max",
            2 => "cgroup memory.high",
            3 => "cgroup memory.limit_in_bytes",
            4 => "RLIMIT_AS",
            5 => "RLIMIT_DATA",
            6 => "physical memory",
            _ => "unknown",
        }
    }
}

/// The MEMORY record (since 1.6): what the process held besides what
/// the dump shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryInfo {
    /// Its resident anonymous memory (`RssAnon` of `/proc/self/status`)
    /// when the dump was taken, in bytes.
    pub resident_anon: u64,
}

/// One site's row of the SITE_TOTALS record (since 1.5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiteTotal {
    /// The site (not 0).
    pub site: u32,
    /// Allocations made there since start.
    pub allocations: u64,
    /// Bytes allocated there since start.
    pub bytes: u64,
    /// Of those allocations, the ones freed before their thread's next
    /// allocation (heaptrack's temporaries).
    pub temporary: u64,
    /// Its live blocks at the recorded peak.
    pub peak_count: u64,
    /// Its live bytes at the recorded peak.
    pub peak_bytes: u64,
}

/// What the HISTORY record says: the heap's history since the program
/// started, as the tracker counted it (since 1.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct History {
    /// The highest live bytes seen (short of the true peak by at most
    /// 64 KiB per thread: each adds to the global count in such steps).
    pub peak_bytes: u64,
    /// Allocations made since start.
    pub total_allocations: u64,
    /// Bytes allocated since start.
    pub total_bytes: u64,
}
