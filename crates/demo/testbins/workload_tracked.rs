//! Test helper: the same program as `workload.rs`, tracked in-process.
#[global_allocator]
static ALLOC: heapdump::Tracked<std::alloc::System> = heapdump::Tracked::new(std::alloc::System);
include!("workload_body.rs");
