//! What a capture from outside can fail with: each a one-line reason.

/// A capture's failure.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The capture cannot be done here, and why (another tracer, the
    /// kernel's ptrace policy, not glibc, not x86-64, …).
    #[error("{0}")]
    Refused(String),
    /// A system call or a file failed.
    #[error("{what}: {cause}")]
    Io {
        /// What was being done.
        what: String,
        /// The error (in the message, not as a source: one line).
        cause: std::io::Error,
    },
    /// The heap is not as glibc lays it out (damaged, or a layout this
    /// version does not know).
    #[error("{0}")]
    Heap(String),
    /// Memory the capture needs could not be read.
    #[error("cannot read {len} bytes at {addr:#x} ({why})")]
    Unreadable {
        /// Where.
        addr: u64,
        /// How much.
        len: u64,
        /// Why (not mapped, not in the core, …).
        why: String,
    },
    /// The dump could not be written.
    #[error("writing the dump: {0}")]
    Write(#[from] heapdump_format::WriteError),
}

/// A capture's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |cause| Error::Io { what, cause }
}
