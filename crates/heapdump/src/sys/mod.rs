//! The room of the system: every system call and C library call the
//! runtime makes, and what is built directly on them.
//!
//! Owns: the calls themselves, in four files by what they touch (`mem`:
//! the runtime's own mappings and the registry of them; `file`:
//! descriptors, /proc files, the report socket; `process`: threads,
//! processes, clocks, futexes, limits, the environment, the loader;
//! `signal`: dispositions, masks, the alternate stack), re-exported here as
//! one flat `sys::` (callers never name the file); and three things built
//! on them: `lock` (the spin lock of the tables, fork-safe), `procfs`
//! (/proc/self read into fixed buffers), `stderr` (the program's
//! stderr, while it is still the one it was given), `text` (numbers as text without
//! allocating).
//!
//! May touch: `libc` and nothing else of the runtime (no `crate::` path
//! but its own). Written by hand (no `std::fs`, no `nix`) because
//! everything here must run inside the traced process with the world
//! stopped or inside the allocator: no allocation, no locks, no panics.
//! Each call is a thin, async-signal-safe wrapper returning `Err(errno)`.
//! Clippy's `disallowed_methods` (clippy.toml) keeps the C library's
//! functions out of every other module of the runtime: only the four call
//! files allow them (`lock`, `procfs` and `text` go through `sys::` like
//! everyone else).

mod file;
pub(crate) mod lock;
mod mem;
mod process;
pub(crate) mod procfs;
mod signal;
pub(crate) mod stderr;
pub(crate) mod text;

pub use file::*;
pub use mem::*;
pub use process::*;
pub use signal::*;
