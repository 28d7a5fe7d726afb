//! What a dump gives back: what it wrote ([`DumpInfo`]) or why it failed
//! ([`DumpError`]).
#![forbid(unsafe_code)]

use heapdump_format::WriteError;

/// What a finished dump holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DumpInfo {
    /// Bytes written.
    pub file_bytes: u64,
    /// Allocations in the dump.
    pub allocations: u64,
    /// Their requested bytes.
    pub alloc_bytes: u64,
    /// Threads recorded.
    pub threads: u32,
    /// Threads that did not stop in time.
    pub not_stopped: u32,
    /// How long the program's threads were held stopped, in nanoseconds.
    pub pause_ns: u64,
    /// How long the heap took to collapse into huge pages before the world
    /// was stopped (`HEAPDUMP_FORK=collapse`), in nanoseconds.
    pub collapse_ns: u64,
}

/// Why a dump failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DumpError {
    /// A system call failed.
    Os {
        /// What was being done.
        what: &'static str,
        /// errno.
        errno: i32,
    },
    /// Writing the file failed (ENOSPC, EIO...).
    Write(WriteError),
    /// The path is longer than the runtime's fixed buffer.
    PathTooLong,
    /// The forked writer failed with this exit status.
    Child(i32),
}

impl core::fmt::Display for DumpError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            DumpError::Os { what, errno } => write!(f, "{what} failed: {}", std::io::Error::from_raw_os_error(errno)),
            DumpError::Write(e) => write!(f, "{e}"),
            DumpError::PathTooLong => write!(f, "dump path too long"),
            DumpError::Child(s) => write!(f, "forked dump writer failed (status {s:#x})"),
        }
    }
}

impl std::error::Error for DumpError {}

impl From<WriteError> for DumpError {
    fn from(e: WriteError) -> Self {
        DumpError::Write(e)
    }
}
