//! The `heapdump` command end to end: C, C++ and Rust programs traced
//! through the preload library, leak reports checked against valgrind, and
//! the command line's contract (JSON keys, exit codes, damaged input).

mod cache_lies;
mod common;
mod contract;
mod exports;
mod fatal;
mod glibc_heaps;
mod hostile;
mod install;
mod limits;
mod one_answer;
mod outside;
mod preload;
mod production_capture;
mod production_run;
mod real_programs;
mod report_channel;
mod static_programs;
mod trust;
mod types;
mod valgrind;
mod viewer;
mod viewer_limits;
