//! Offline analysis of heapdump dumps.
//!
//! `heapdump-analyze` sits between the file format (`heapdump-format`) and
//! the exports and command line. Its one door is [`open`]: it maps a dump,
//! builds a compact graph of the live allocations and the pointers between
//! them ([`Heap`]), or reads it back from the cache, and hands back a
//! [`Dump`] that owns the caches (their directory, [`private_dir`]) and
//! answers the questions across dumps ([`Dump::diff`]). Its [`Analysis`]
//! answers the questions a user opens the tool for: what is alive
//! ([`Analysis::top`]), what leaked ([`Analysis::leak_report`], with its
//! verdict, [`Analysis::leak_verdict`]), what keeps what alive
//! ([`Analysis::retainers`], [`Analysis::path`]). Answers carry addresses as
//! numbers ([`Address`]); they become `0x…` only when shown. It never
//! touches a live process.
//!
//! ```no_run
//! let dump = heapdump_analyze::open("app.hdump".as_ref(), &heapdump_analyze::Options::default())?;
//! let report = dump.analysis().leak_report();
//! println!("{} bytes definitely lost", report.definitely_lost.bytes);
//! # Ok::<(), heapdump_analyze::AnalyzeError>(())
//! ```
#![deny(missing_docs)]
#![deny(unsafe_code)]

mod address;
mod analysis;
pub mod cache;
mod cache_file;
pub mod chains;
mod contents;
pub mod dominators;
pub mod dwarf;
mod error;
pub mod explore;
mod file;
mod graph_cache;
pub mod group;
mod growth;
mod heap;
mod huge_tables;
pub mod input;
mod kept_report;
mod kept_rows;
mod kept_tree;
pub mod leaks;
mod load;
mod names;
mod open;
pub mod paths;
mod phases;
mod prefetch;
pub mod private_dir;
pub mod rtti;
mod seen;
pub mod slab;
mod spill;
mod summary;
pub mod suppress;
pub mod suspects;
pub mod symbols;
pub mod totals;
pub mod types;
mod wrappers;

pub use address::Address;
pub use analysis::{
    Analysis, CallerNode, Holder, LeakGroup, LeakReport, NoVerdict, Origin, PathReport, PathStep, Retainer, RootName, SiteTotal,
};
pub use chains::{Chain, ListSummary, PathLine};
pub use contents::DumpContents;
pub use error::{AnalyzeError, Result};
pub use file::DumpFile;
pub use growth::{growth, Growth, GrowthRow, GrowthSite};
pub use heap::{
    round_keeping_sum, Block, BlockId, Edge, Heap, ModuleInfo, Root, RootKind, RootRegion, RootSource, SiteId, ThreadInfo, MAX_BLOCKS,
};
pub use open::{open, open_with_progress, summary, Dump, Options};
pub use summary::{own_allocator, static_allocator_warning, unseen_memory, unseen_memory_warning};
pub use summary::{LimitSummary, SignalSummary, Summary};
