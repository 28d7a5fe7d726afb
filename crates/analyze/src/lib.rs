//! Offline analysis of heapdump dumps.
//!
//! `heapdump-analyze` sits between the file format (`heapdump-format`) and
//! the exports and command line: it maps a dump, builds a compact graph of
//! the live allocations and the pointers between them ([`Heap`]), and
//! answers the questions a user opens the tool for: what is alive
//! ([`group::top`]), what leaked ([`leaks`]), what keeps what alive
//! ([`dominators`], [`paths`]), how two dumps differ ([`group::diff`]). It
//! never touches a live process.
#![deny(missing_docs)]
#![deny(unsafe_code)]

pub mod dominators;
pub mod dwarf;
mod error;
mod file;
pub mod group;
mod heap;
pub mod input;
pub mod leaks;
pub mod paths;
mod prefetch;
mod summary;
pub mod symbols;
pub mod types;

pub use error::{AnalyzeError, Result};
pub use file::DumpFile;
pub use heap::{
    round_keeping_sum, Block, BlockId, DumpContents, Edge, Heap, ModuleInfo, Root, RootKind, RootRegion, RootSource, ThreadInfo, MAX_BLOCKS,
};
pub use summary::{LimitSummary, SignalSummary, Summary};
