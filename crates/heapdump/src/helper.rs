//! The helper thread's pipe: how a signal handler, the fatal handler or
//! the allocation path asks the runtime's own thread for a dump or a look
//! at the memory limits, with one non-blocking `write(2)` of a byte.

use crate::sys;
use core::sync::atomic::{AtomicU64, Ordering};

/// The helper's pipe: read end in the high half, write end in the low
/// half (`u64::MAX` before the helper starts).
pub(crate) static SIGNAL_PIPE: AtomicU64 = AtomicU64::new(u64::MAX);

/// Dump signals received that the helper has not yet answered.
pub(crate) static SIGNALS_PENDING: AtomicU64 = AtomicU64::new(0);

/// What a byte on the helper's pipe asks for.
pub(crate) const ASK_DUMP: u8 = 1;
pub(crate) const ASK_FATAL: u8 = 2;
/// Look at the memory limits (no dump unless one is near).
pub(crate) const ASK_CHECK: u8 = 3;

/// Writes one byte to the helper's pipe (never blocks: its write end is
/// non-blocking; a full pipe already holds a wake-up). Async-signal-safe.
/// False when there is no helper or the byte was not written.
pub(crate) fn ask_helper(what: u8) -> bool {
    let fd = SIGNAL_PIPE.load(Ordering::Relaxed);
    fd != u64::MAX && sys::write((fd & 0xffff_ffff) as i32, &[what]) == Ok(1)
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
