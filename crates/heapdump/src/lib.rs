//! Track every live heap allocation of a Rust program and dump the heap.
//!
//! `heapdump` is the part of the heapdump toolkit that lives inside the
//! traced process. Declare it as the global allocator, wrapping the
//! allocator you already use:
//!
//! ```no_run
//! #[global_allocator]
//! static ALLOC: heapdump::Tracked<std::alloc::System> = heapdump::Tracked::new(std::alloc::System);
//!
//! fn main() {
//!     let v: Vec<u64> = (0..1000).collect();
//!     heapdump::dump("app.hdump", heapdump::Mode::Full).unwrap();
//!     let s = heapdump::stats();
//!     assert!(s.live_bytes >= 8000);
//!     drop(v);
//! }
//! ```
//!
//! Among its siblings: it writes dumps with `heapdump-format` (below it);
//! `heapdump-preload` puts it inside any binary through its `hooks`; the
//! dumps are read offline by `heapdump-analyze` and the `heapdump` command,
//! which never link it. Configuration comes from `HEAPDUMP_*` environment
//! variables (see the README), the same ones the `LD_PRELOAD` library
//! reads.
//!
//! Its rooms, each a folder whose `mod.rs` says what it owns and what it
//! may touch, from the bottom up:
//! - `sys/`: every system call and C library call (nothing else may make
//!   one: clippy.toml), /proc, the spin lock, numbers as text;
//! - `stop/`: each thread's guard (inside the tracker, locks held, stops
//!   and signals deferred) and stopping the world (`stw`), the one circle
//!   of imports: their handshake;
//! - `table/`: the live table (`slots`, `shadow`, `overflow`, `counters`)
//!   and a marked thread's log of its own blocks (`marks`);
//! - `sites/`: allocation sites (`unwind`, `sampling`);
//! - `dump/`: writing a dump (`index`, with the format's lookup for its
//!   directory, `scan`, `roots`, `modules`, the `assist` and `writer`
//!   threads);
//! - `trigger/`: when and where to dump (`fatal`, `limit`, `helper_pipe`,
//!   `output`, `report`).
//!
//! Above them, in this folder: `entry` (the record of one allocation),
//! `config`, `state` (the one global state), `tracker` (what every
//! allocation, free and realloc does), `hooks` (the same for the preload
//! library's C functions) and `startup` (what runs before `main`). And
//! `testing` (the feature `testing`): a test's mark and its check, which
//! reads the check's dump with `heapdump-analyze` in the test process,
//! untracked, once the dump is written (the one room that allocates, and
//! only outside the tracker).
//!
//! Design constraints, because this code runs inside someone else's
//! process, often inside its allocator:
//! - it never allocates through the tracked heap: every table is memory
//!   mapped from the kernel, and the dump path uses raw system calls;
//! - it never panics or unwinds into the host program;
//! - its locks are taken by `pthread_atfork` handlers around `fork`, and a
//!   thread never stops (for a dump) while holding one.
//!
//! Where `unsafe` is, and why it cannot be fewer places: every block has a
//! `// SAFETY:` comment naming its invariant (clippy's
//! `undocumented_unsafe_blocks` denies one without), and each kind lives in
//! the room that owns its invariant:
//! - calls into the kernel and the C library: `sys/` alone (clippy's
//!   `disallowed_methods` keeps `libc` out of every other room);
//! - memory mapped from the kernel and read or written as tables (there is
//!   no heap to put a `Vec` on): the room that mapped it and knows its
//!   layout (`table/`'s slots and shards, `sites/`' arenas, `dump/`'s index
//!   and directory, `stop/guard`'s deferred queue), never handed to another
//!   room as a raw pointer;
//! - other threads' stacks and registers, and the program's own memory read
//!   while the world is stopped: `stop/stw` (the registers a signal
//!   handler saves), `dump/` (scanning, which is what a dump is),
//!   `sites/unwind` (the frames it walks);
//! - signal handlers' context (`ucontext_t`) and the host's handlers:
//!   `trigger/` (`fatal`, the dump signal);
//! - the `GlobalAlloc` contract: `tracker`, the one place that calls the
//!   wrapped allocator, and `hooks`, the preload library's C entry points.
#![deny(missing_docs)]

mod config;
mod dump;
mod entry;
mod sites;
mod startup;
mod state;
mod stop;
mod sys;
mod table;
mod tracker;
mod trigger;

pub use config::{parse_backtrace, parse_bytes, parse_signal, Backtrace, Config};
pub use dump::outcome::{DumpError, DumpInfo};
pub use heapdump_format::{Mode, Reason};
pub use state::{config, stats, Stats};
pub use tracker::Tracked;
pub use trigger::output::{dump, dump_numbered, dump_to_fd};

pub mod testing;

/// The tracker's entry points for the preload library's C functions.
#[doc(hidden)]
pub mod hooks;
