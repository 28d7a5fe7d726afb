//! Errors of the analysis.

use std::path::PathBuf;

/// What went wrong while loading or analysing a dump.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AnalyzeError {
    /// The file could not be read. (Its message is the path; the source
    /// says what went wrong, once, as every error chain does.)
    #[error("{}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a readable dump.
    #[error("{}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What the reader found.
        #[source]
        source: heapdump_format::Error,
    },
    /// The dump holds more allocations than the analysis can index.
    #[error("{}: {what}", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// What exceeded the limit.
        what: String,
    },
    /// An address given by the user is not a live allocation.
    #[error("no live allocation contains {address:#x}")]
    NoSuchAllocation {
        /// The address asked for.
        address: u64,
    },
    /// No chain of pointers reaches the allocation.
    #[error("no chain of pointers leads to {address:#x} ({class})")]
    NoPath {
        /// The address asked for.
        address: u64,
        /// The allocation's leak class.
        class: &'static str,
    },
    /// A group of a node's children asked for by its index is not there.
    #[error("the node has no group {group} among its children")]
    NoSuchGroup {
        /// The index asked for.
        group: usize,
    },
    /// Dumps that are not a series of one process, oldest first.
    #[error("{what}")]
    Series {
        /// What is wrong with them.
        what: String,
    },
}

/// Result of the analysis.
pub type Result<T, E = AnalyzeError> = std::result::Result<T, E>;
