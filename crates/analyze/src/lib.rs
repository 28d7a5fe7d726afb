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

mod address;
mod analysis;
pub mod cache;
mod cache_file;
mod contents;
pub mod dominators;
pub mod dwarf;
mod error;
pub mod explore;
mod file;
mod graph_cache;
pub mod group;
mod heap;
pub mod input;
pub mod leaks;
mod load;
mod names;
mod open;
pub mod paths;
mod prefetch;
pub mod private_dir;
pub mod slab;
mod summary;
pub mod suppress;
pub mod symbols;
pub mod types;

pub use address::Address;
pub use analysis::{Analysis, CallerNode, Holder, LeakGroup, LeakReport, NoVerdict, PathReport, PathStep, Retainer, SiteTotal};
pub use contents::DumpContents;
pub use error::{AnalyzeError, Result};
pub use file::DumpFile;
pub use heap::{
    round_keeping_sum, Block, BlockId, Edge, Heap, ModuleInfo, Root, RootKind, RootRegion, RootSource, SiteId, ThreadInfo, MAX_BLOCKS,
};
pub use open::{open, open_with_progress, Dump, Options};
pub use summary::{LimitSummary, SignalSummary, Summary};
