//! The `heapdump` command end to end: C, C++ and Rust programs traced
//! through the preload library, leak reports checked against valgrind, and
//! the command line's contract (JSON keys, exit codes, damaged input).

mod allocation_wrappers_and_names;
mod analysis_cache;
mod attach_and_core;
mod attach_in_containers_and_crafted_cores;
mod chains_as_structures;
mod check_gate;
mod cli_contract;
mod closed_pipes_and_usage;
mod common;
mod cxx_classes_in_stripped_programs;
mod damaged_dumps;
mod demo_from_anywhere;
mod exports;
mod fatal_signal_dumps;
mod figures_in_views;
mod glibc_heap_walk;
mod growth_across_dumps;
mod install;
mod jemalloc_heap_walk;
mod manual_pages;
mod memory_past_malloc;
mod mimalloc_heap_walk;
mod musl_heap_walk;
mod near_limit_dumps;
mod parquet_tables;
mod peak_and_totals;
mod preload_tracing;
mod real_programs_match_valgrind;
mod report_channel;
mod run_and_the_traced_program;
mod run_forked_workers_and_refusals;
mod run_triggers;
mod spilled_tables;
mod static_programs;
mod tcmalloc_heap_walk;
mod type_names;
mod valgrind;
mod view_answers;
mod viewer;
mod viewer_limits;
mod views_agree;
