//! The stderr the program was started with: the runtime's own lines go
//! there, and only while descriptor 2 is still that file.
#![forbid(unsafe_code)]

use crate::sys;

/// Writes bytes to stderr with one `write(2)`, ignoring errors.
pub(crate) fn write_stderr(b: &[u8]) {
    if !stderr_is_ours() {
        return;
    }
    let _xfsz = sys::XfszBlocked::new();
    let _ = sys::write(2, b);
}

/// Device and inode of the stderr the program was started with (0: none).
static STDERR_ID: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
static STDERR_DEV: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

fn fd2_id() -> Option<(u64, u64)> {
    sys::fstat(2).map(|(dev, ino, _)| (dev, ino))
}

/// Remembers which file descriptor 2 is at start-up.
pub(crate) fn remember_stderr() {
    if let Some((dev, ino)) = fd2_id() {
        STDERR_DEV.store(dev, core::sync::atomic::Ordering::Relaxed);
        STDERR_ID.store(ino, core::sync::atomic::Ordering::Relaxed);
    }
}

/// Whether descriptor 2 is still the stderr the program was given: a
/// program that closed it and opened a data file as number 2 must not find
/// the runtime's lines in its file.
fn stderr_is_ours() -> bool {
    if STDERR_ID.load(core::sync::atomic::Ordering::Relaxed) == 0 {
        // A message before start-up (a bad setting read at the first
        // allocation): the stderr of now is the one the program was given.
        remember_stderr();
    }
    let ino = STDERR_ID.load(core::sync::atomic::Ordering::Relaxed);
    ino != 0 && fd2_id() == Some((STDERR_DEV.load(core::sync::atomic::Ordering::Relaxed), ino))
}
