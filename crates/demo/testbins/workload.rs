//! Test helper: a Rust program built without heapdump, for `heapdump run`.
include!("workload_body.rs");
