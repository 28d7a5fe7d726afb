//! Integration tests of the analysis over hand-built dumps with known
//! graphs: exact leak classes, dominators, retained sizes and paths.

mod build;
mod cache_lies;
mod graphs;
mod hostile;
mod kept_pages;
mod kept_rows;
mod kept_summary;
mod kept_suspects;
mod seal;
mod spilled;
