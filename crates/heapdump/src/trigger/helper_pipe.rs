//! The helper thread's pipe: how a signal handler, the fatal handler or
//! the allocation path asks the runtime's own thread for a dump or a look
//! at the memory limits, with one non-blocking `write(2)` of a byte.

//!
//! The helper is a thread of the process that started it. A forked child
//! has none (`fork` copies only the calling thread) though it inherits the
//! pipe: a byte it wrote would wake its parent's helper, which would dump
//! the parent and answer a request the child waits on forever. So the pipe
//! is forgotten in the child (`forked`), and every request checks that the
//! helper is this process's ([`helper_here`]): a child that is not told of
//! its fork (a raw `clone`) is not misled either. Without a helper, the
//! triggers dump on the thread that asks (see `trigger`).
#![forbid(unsafe_code)]

use crate::sys;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The helper's pipe: read end in the high half, write end in the low
/// half (`u64::MAX` before the helper starts, and in a forked child).
pub(crate) static SIGNAL_PIPE: AtomicU64 = AtomicU64::new(u64::MAX);

/// The process whose thread reads [`SIGNAL_PIPE`].
pub(crate) static HELPER_PID: AtomicU32 = AtomicU32::new(0);

/// Dump signals received that the helper has not yet answered.
pub(crate) static SIGNALS_PENDING: AtomicU64 = AtomicU64::new(0);

/// What a byte on the helper's pipe asks for.
pub(crate) const ASK_DUMP: u8 = 1;
pub(crate) const ASK_FATAL: u8 = 2;
/// Look at the memory limits (no dump unless one is near).
pub(crate) const ASK_CHECK: u8 = 3;

/// Whether this process has a helper thread (not a forked child of the
/// process that started it). Async-signal-safe (one `getpid`).
pub(crate) fn helper_here() -> bool {
    SIGNAL_PIPE.load(Ordering::Acquire) != u64::MAX && HELPER_PID.load(Ordering::Acquire) == sys::getpid()
}

/// Writes one byte to the helper's pipe (never blocks: its write end is
/// non-blocking; a full pipe already holds a wake-up). Async-signal-safe.
/// False when there is no helper in this process or the byte was not
/// written.
pub(crate) fn ask_helper(what: u8) -> bool {
    let fd = SIGNAL_PIPE.load(Ordering::Relaxed);
    helper_here() && sys::write((fd & 0xffff_ffff) as i32, &[what]) == Ok(1)
}

/// In a forked child (from the `fork` handler, one thread): no helper, and
/// none of the parent's requests pending. The pipe's descriptors are left
/// open (they close on exec): the program may have closed them in the
/// parent and reused their numbers for files of its own.
pub(crate) fn forked() {
    SIGNAL_PIPE.store(u64::MAX, Ordering::Release);
    SIGNALS_PENDING.store(0, Ordering::Release);
}

/// [`ask_helper`] for a dump, counted in `SIGNALS_PENDING` before the
/// helper wakes, so that an exit right after (a program that raises the
/// signal and returns) waits for it. A full pipe means dumps are already
/// pending: this one merges with them.
pub(crate) fn ask_helper_for_dump(what: u8) -> bool {
    SIGNALS_PENDING.fetch_add(1, Ordering::AcqRel);
    if ask_helper(what) {
        return true;
    }
    SIGNALS_PENDING.fetch_sub(1, Ordering::AcqRel);
    false
}

/// Asks the helper for the dump of a fatal signal (see `fatal`); false
/// when there is no helper.
pub(crate) fn request_fatal_dump() -> bool {
    ask_helper_for_dump(ASK_FATAL)
}
