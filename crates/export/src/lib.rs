//! Exports of a heapdump analysis into formats other tools read.
//!
//! `heapdump-export` sits between `heapdump-analyze` and the command line:
//! it takes one [`Analysis`] session (the graph plus the analysis results,
//! computed once by `heapdump-analyze`) and writes it as a pprof profile,
//! a V8 `.heapsnapshot` (Chrome DevTools, memlab), folded stacks or an SVG
//! flamegraph, a DOT or mermaid graph, JSON, Parquet tables for SQL
//! engines, or a self-contained HTML report. It never re-derives an
//! analysis result: every number comes from the analysis. Large outputs
//! are streamed to the writer.
#![deny(missing_docs)]
#![deny(unsafe_code)]

mod flame;
mod graph;
mod html;
mod json;
mod parquet;
mod pprof;
mod snapshot;

pub use flame::{write_folded, write_svg};
pub use graph::{write_dot, write_mermaid, GraphOptions};
pub use heapdump_analyze::Analysis;
pub use html::{human as human_bytes, write_html};
pub use json::write_json;
pub use parquet::{dump_id, write_parquet, Written as ParquetFile};
pub use pprof::{profile, write_pprof};
pub use snapshot::write_heapsnapshot;

/// Errors of the exports: only I/O can fail.
pub type Result<T> = std::io::Result<T>;
