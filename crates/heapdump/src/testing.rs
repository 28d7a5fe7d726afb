//! Assertions in Rust tests: what the current thread allocated since a
//! mark and still holds, with the type, the site and the path from the
//! root that keeps each block (feature `testing`).
//!
//! For a test binary whose global allocator is [`crate::Tracked`]. `cargo
//! test` runs tests on many threads of one process; a `Mark` sees only
//! its own thread's allocations, so tests running beside it, allocating
//! and leaking as they like, neither fail it nor are failed by it.
//!
//! ```no_run
//! # #[cfg(feature = "testing")] {
//! #[global_allocator]
//! static ALLOC: heapdump::Tracked<std::alloc::System> = heapdump::Tracked::new(std::alloc::System);
//!
//! struct Session {
//!     user: String,
//! }
//!
//! #[test]
//! fn a_request_leaves_no_session_behind() {
//!     let mark = heapdump::testing::Mark::new();
//!     let s = Box::new(Session { user: "ada".into() });
//!     drop(s);
//!     let report = mark.check();
//!     report.assert_none_alive::<Session>();
//!     report.assert_nothing_lost();
//!     report.assert_live_bytes_at_most(0);
//! }
//! # }
//! ```
//!
//! A failing assertion panics with what is left, grouped by site and type:
//!
//! ```text
//! heapdump: 1 block of assertions::Session allocated by this thread since the mark is still live:
//!   Vec<assertions::Session>: 1 block, 224 bytes (still reachable), e.g. 0x7f81f00011c0
//!     allocated at assertions::leak_a_session (heapdump/tests/assertions.rs:95)
//!       by assertions::a_session_left_in_a_global_fails_naming_its_type_site_and_root (heapdump/tests/assertions.rs:100)
//!     kept alive by static assertions::SESSIONS in /…/deps/assertions-cc30749ba493689d at 0x559826466bd8
//!       -> at offset 16     0x7f81f00011c0 (224 bytes, assertions::leak_a_session (heapdump/tests/assertions.rs:95))
//! ```
//!
//! # How a check knows which blocks are this thread's
//!
//! The live table's entry has no room for a thread or a time, and a wider
//! entry would cost every program memory per live allocation. Instead a
//! mark sets a bit in the thread's tracker state, and the thread then logs
//! its own allocations and frees, while the mark lives, in a hash set of
//! its own (memory mapped from the kernel, never the tracked heap, never a
//! root of a dump; only that thread touches it, so no lock and nothing to
//! fear across a fork). The bit makes the thread leave the tracker's
//! unguarded fast path, so a thread without a mark pays nothing: not one
//! instruction on the fast path, one bit test of a value already loaded on
//! the guarded one. (A per-thread sequence number stamped on every block
//! would have needed room in every entry, or a global counter every
//! thread writes.)
//!
//! `Mark::check` then takes a dump as every dump is taken (the world
//! stopped, nothing allocated), keeps the blocks of the dump the log names
//! (same address, size and site), and asks the analysis
//! (`heapdump-analyze`, as `heapdump path`, `leaks` and `top --by type`
//! do) for their types, sites, leak classes and paths. The analysis runs
//! in a child forked from the test process (untracked: the thread's
//! internal state, as for the runtime's own calls into libc, which the
//! child inherits), and sends the report back: what it allocated, freed
//! or not, never stays in the test process, where a later check's dump
//! would scan a heap mapping that holds only freed chunks as a root and a
//! stale copy of an address would keep a block "reachable". Checks run
//! one at a time in a process. Before dumping, the check zeroes the
//! stack below the test's frame (its own frames are then free of what
//! the test's returned calls left there).
//!
//! What it cannot see: a block this thread allocated and another thread
//! freed stays in the log; only if that thread's allocator then gave the
//! same address to a block of the same size from the same site (a site is
//! the whole stack) would the check count it. A block reallocated by this
//! thread since the mark counts as allocated since the mark, at its whole
//! size.
//!
//! # Types
//!
//! The runtime records no type: it records each block's site (its stack),
//! and the analysis names the type from the allocating frames and their
//! debug info (README, "Type names"): `Box<T>`, `Vec<T>`, `Rc<T>`,
//! `Arc<T>`, `HashMap<K, V>`'s table. A block "of type `T`" is one whose
//! type names `T` by its full path (`std::any::type_name`), alone or as a
//! type argument: a `Vec<Session>`'s buffer holds sessions. Nothing needs
//! tagging, but the test binary needs debug info (`cargo test` builds
//! with it; a profile with `debug = false` leaves types `unknown`, and
//! `Report::assert_none_alive` then sees nothing), and a `T` stored
//! inline in a block allocated before the mark is no new block.

#[cfg(feature = "testing")]
mod check;
#[cfg(feature = "testing")]
pub use check::{Group, Mark, Report};

/// For the runtime's own tests: one backtrace of the caller with either
/// unwinder (the cached one may decline: `None`).
#[doc(hidden)]
#[inline(never)]
pub fn backtrace_cached(frames: &mut [u64]) -> Option<usize> {
    crate::sites::unwind::capture(crate::sites::room(frames), 1)
}

/// The same with libgcc's `_Unwind_Backtrace`.
#[doc(hidden)]
#[inline(never)]
pub fn backtrace_libgcc(frames: &mut [u64]) -> usize {
    crate::sites::capture_libgcc(crate::sites::room(frames), 1)
}

/// Unwind rules in the cached unwinder's cache.
#[doc(hidden)]
pub fn cached_rules() -> usize {
    crate::sites::unwind::cached_rules()
}

/// This thread's stripe of counters (255: the shared one).
#[doc(hidden)]
pub fn stripe() -> usize {
    crate::state::state().table.current_stripe()
}
