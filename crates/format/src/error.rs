//! Errors of the reader and the writer. Both are `Copy` and carry no heap
//! data, so they can be produced inside an allocator or a signal handler.

use core::fmt;

/// What is wrong with a dump, and at which byte offset of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The file does not start with the heapdump magic.
    NotADump,
    /// The major version is not one this reader understands.
    UnsupportedVersion {
        /// Major version found in the file.
        major: u16,
        /// Minor version found in the file.
        minor: u16,
    },
    /// A header field holds a value this reader does not accept.
    BadHeader {
        /// Byte offset of the field.
        offset: u64,
        /// Which field and why.
        what: &'static str,
    },
    /// The file ends inside a record or before the trailer.
    Truncated {
        /// Byte offset where more bytes were needed.
        offset: u64,
        /// What was being read.
        what: &'static str,
    },
    /// A record's contents contradict its own lengths or the format's rules.
    Malformed {
        /// Byte offset of the record (its header).
        offset: u64,
        /// What is inconsistent.
        what: &'static str,
    },
    /// The trailer's checksum does not match the bytes before it.
    ChecksumMismatch {
        /// Byte offset of the trailer record.
        offset: u64,
        /// The checksum stored in the trailer.
        stored: u32,
        /// The checksum of the bytes actually present.
        computed: u32,
    },
    /// A count in the trailer does not match the records before it.
    CountMismatch {
        /// Byte offset of the trailer record.
        offset: u64,
        /// Which count.
        what: &'static str,
        /// The value stored in the trailer.
        stored: u64,
        /// The value counted from the records.
        counted: u64,
    },
    /// Bytes follow the trailer.
    TrailingData {
        /// Byte offset of the first byte after the trailer.
        offset: u64,
    },
}

impl Error {
    /// Whether the error means "the dump was cut short": everything before
    /// the reported offset is intact and can be analysed.
    pub fn is_truncation(&self) -> bool {
        matches!(self, Error::Truncated { .. })
    }

    /// The byte offset the error refers to.
    pub fn offset(&self) -> u64 {
        match *self {
            Error::NotADump | Error::UnsupportedVersion { .. } => 0,
            Error::BadHeader { offset, .. }
            | Error::Truncated { offset, .. }
            | Error::Malformed { offset, .. }
            | Error::ChecksumMismatch { offset, .. }
            | Error::CountMismatch { offset, .. }
            | Error::TrailingData { offset } => offset,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::NotADump => write!(f, "not a heapdump file (bad magic at offset 0)"),
            Error::UnsupportedVersion { major, minor } => {
                write!(f, "unsupported dump format version {major}.{minor} (this reader reads {}.x)", crate::raw::MAJOR)
            }
            Error::BadHeader { offset, what } => write!(f, "bad header at offset {offset}: {what}"),
            Error::Truncated { offset, what } => {
                write!(f, "dump truncated at offset {offset}: {what}")
            }
            Error::Malformed { offset, what } => {
                write!(f, "malformed record at offset {offset}: {what}")
            }
            Error::ChecksumMismatch { offset, stored, computed } => {
                write!(f, "checksum mismatch in trailer at offset {offset}: stored {stored:#010x}, computed {computed:#010x}")
            }
            Error::CountMismatch { offset, what, stored, counted } => {
                write!(f, "trailer at offset {offset} says {stored} {what}, the dump holds {counted}")
            }
            Error::TrailingData { offset } => write!(f, "unexpected data after the trailer at offset {offset}"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for Error {}

/// Why writing a dump failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WriteError {
    /// The sink failed with this `errno` (`ENOSPC` for a full disk).
    Sink {
        /// The operating system's error number.
        errno: i32,
    },
    /// A record's declared contents and what was supplied disagree.
    LengthMismatch {
        /// Which part.
        what: &'static str,
    },
    /// Full contents were given to a compact dump or the reverse.
    ModeMismatch,
    /// The staging buffer is smaller than the largest fixed record part.
    BufferTooSmall,
    /// An earlier write failed; the file is incomplete and takes no more.
    Poisoned,
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            WriteError::Sink { errno } => match errno_name(errno) {
                Some(name) => write!(f, "write failed: {name} (errno {errno})"),
                None => write!(f, "write failed: errno {errno}"),
            },
            WriteError::LengthMismatch { what } => write!(f, "record length mismatch: {what}"),
            WriteError::ModeMismatch => write!(f, "record contents do not match the dump mode"),
            WriteError::BufferTooSmall => write!(f, "staging buffer too small"),
            WriteError::Poisoned => write!(f, "an earlier write failed; the dump is incomplete"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for WriteError {}

/// A few errno names worth spelling out in messages (no allocation, no libc
/// `strerror`, which is not async-signal-safe).
fn errno_name(errno: i32) -> Option<&'static str> {
    Some(match errno {
        libc::ENOSPC => "no space left on device",
        libc::EDQUOT => "disk quota exceeded",
        libc::EIO => "input/output error",
        libc::EBADF => "bad file descriptor",
        libc::EPIPE => "broken pipe",
        libc::EFBIG => "file too large",
        libc::EACCES => "permission denied",
        libc::EEXIST => "file exists",
        _ => return None,
    })
}
