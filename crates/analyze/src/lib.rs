//! Offline analysis of heapdump dumps.
//!
//! `heapdump-analyze` sits between the file format (`heapdump-format`) and
//! the exports and command line: it maps a dump, builds a compact graph of
//! the live allocations and the pointers between them, and answers the
//! questions a user opens the tool for: what is alive, what leaked, what
//! keeps what alive, how two dumps differ. It never touches a live process.
#![deny(missing_docs)]
#![deny(unsafe_code)]

mod error;
mod file;
mod summary;

pub use error::{AnalyzeError, Result};
pub use file::DumpFile;
pub use summary::Summary;
