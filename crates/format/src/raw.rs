//! Raw layout constants, mirroring `FORMAT.md` one to one.
//!
//! Every number that appears in the file lives here: magic, versions, record
//! tags, enumerations and fixed sizes. Tags are explicit numbers, never enum
//! order, so new records can be appended without renumbering.

/// The eight magic bytes at offset 0: `HDUMP\0\r\n`. The `\r\n` makes a
/// text-mode transfer that rewrites line endings visible at once.
pub const MAGIC: [u8; 8] = *b"HDUMP\0\r\n";
/// Major version: bumped on any change that an older reader would misread.
pub const MAJOR: u16 = 1;
/// Minor version: bumped when a record type is added (old readers skip it).
pub const MINOR: u16 = 6;
/// PROCESS flags (byte 1, since 1.3): captured from outside the process
/// (`heapdump attach`, `heapdump core`): no sites, and each allocation's
/// size is the allocator's usable size, not the size asked for.
pub const PROCESS_OUTSIDE: u8 = 1 << 0;
/// Size of the file header in bytes.
pub const FILE_HEADER_SIZE: usize = 32;
/// Size of every record header (tag u32, length u64).
pub const RECORD_HEADER_SIZE: usize = 12;

/// `endianness` byte value for little-endian (the only one defined).
pub const LITTLE_ENDIAN: u8 = 1;

/// Record tags.
pub mod tag {
    /// Process description: backtrace configuration, executable, command line.
    pub const PROCESS: u32 = 0x01;
    /// One loaded object (executable, shared library, vDSO).
    pub const MODULE: u32 = 0x02;
    /// One thread: registers and live stack.
    pub const THREAD: u32 = 0x03;
    /// One static root: a writable segment of a module.
    pub const STATIC: u32 = 0x04;
    /// One allocation site: a stack of return addresses.
    pub const SITE: u32 = 0x05;
    /// One live allocation.
    pub const ALLOC: u32 = 0x06;
    /// The trailer: counts, totals and the checksum. Always last.
    pub const END: u32 = 0x07;
    /// Many live allocations of a compact dump, in address order, with
    /// their pointers as ordinals (since 1.2).
    pub const ALLOCS: u32 = 0x08;
    /// The signal the dump was taken for (since 1.2).
    pub const SIGNAL: u32 = 0x09;
    /// The memory limit a near-limit dump was taken for (since 1.2).
    pub const LIMIT: u32 = 0x0A;
    /// The heap's history since start: peak, totals (since 1.2).
    pub const HISTORY: u32 = 0x0B;
    /// The allocator whose heap the dump read, and its version (since
    /// 1.4).
    pub const ALLOCATOR: u32 = 0x0C;
    /// Per-site totals since start and each site at the recorded peak
    /// (since 1.5).
    pub const SITE_TOTALS: u32 = 0x0D;
    /// The process's resident anonymous memory when the dump was taken
    /// (since 1.6).
    pub const MEMORY: u32 = 0x0E;
}

/// Fixed part of a PROCESS payload.
pub const PROCESS_FIXED: usize = 24;
/// Fixed part of a MODULE payload.
pub const MODULE_FIXED: usize = 24;
/// Size of one segment entry inside a MODULE payload.
pub const SEGMENT_SIZE: usize = 32;
/// Fixed part of a THREAD payload.
pub const THREAD_FIXED: usize = 40;
/// Fixed part of a STATIC payload.
pub const STATIC_FIXED: usize = 24;
/// Fixed part of a SITE payload.
pub const SITE_FIXED: usize = 8;
/// Fixed part of an ALLOC payload (before the mode-specific contents).
pub const ALLOC_FIXED: usize = 24;
/// Size of the SIGNAL payload.
pub const SIGNAL_SIZE: usize = 32;
/// Size of the LIMIT payload.
pub const LIMIT_SIZE: usize = 24;
/// The longest ALLOCATOR payload (an allocator's name and version).
pub const ALLOCATOR_MAX: usize = 256;
/// Size of the HISTORY payload.
pub const HISTORY_SIZE: usize = 24;
/// Size of the MEMORY payload (since 1.6).
pub const MEMORY_SIZE: usize = 8;
/// Fixed part of a SITE_TOTALS payload.
pub const SITE_TOTALS_FIXED: usize = 24;
/// Size of one SITE_TOTALS row.
pub const SITE_TOTAL_SIZE: usize = 48;
/// Size of the END payload.
pub const END_SIZE: usize = 72;
/// Size of one (offset, value) pointer entry in compact contents.
pub const POINTER_ENTRY: usize = 16;

/// Thread flag: this is the thread that wrote the dump.
pub const THREAD_CURRENT: u32 = 1 << 0;
/// Thread flag: the thread did not answer the stop request; its registers
/// are absent and its stack was read while it may have been running.
pub const THREAD_NOT_STOPPED: u32 = 1 << 1;

/// Alloc flag: the allocation's site was captured by sampling; weigh it by
/// the sampling rate of the PROCESS record.
pub const ALLOC_SAMPLED: u8 = 1 << 0;

/// Alloc flags, bits 1-6 (since 1.1): log2 of the bucket count of the
/// hashbrown table the writer found laid out in the block (0: none; see
/// [`crate::hashbrown`]).
pub const ALLOC_HASHBROWN_SHIFT: u8 = 1;
/// Mask of the hashbrown bits.
pub const ALLOC_HASHBROWN_MASK: u8 = 0x3f << ALLOC_HASHBROWN_SHIFT;
/// ALLOC flag (1.4): the hashbrown bits were proven with the table's room
/// too (see [`crate::hashbrown::ctrl_ok`]); bits without it are not
/// trusted.
pub const ALLOC_HASHBROWN_ROOM: u8 = 1 << 7;

/// Segment flag bits (as ELF `p_flags`).
pub const SEG_X: u32 = 1;
/// Segment is writable.
pub const SEG_W: u32 = 2;
/// Segment is readable.
pub const SEG_R: u32 = 4;

/// Site id that means "no site recorded".
pub const NO_SITE: u32 = 0;
/// Module index that means "not inside a known module".
pub const NO_MODULE: u32 = u32::MAX;

/// Number of registers in a THREAD record on x86-64, in the order
/// rax rbx rcx rdx rsi rdi rbp rsp r8 r9 r10 r11 r12 r13 r14 r15 rip.
pub const X86_64_REGS: usize = 17;
/// Names of the x86-64 registers, in record order.
pub const X86_64_REG_NAMES: [&str; X86_64_REGS] =
    ["rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip"];
