//! Where a dump goes: the public dump calls, the automatic dumps' file
//! names (claimed with `O_EXCL`, numbered), and reporting what was written.
#![forbid(unsafe_code)]

use crate::dump::outcome::{DumpError, DumpInfo};
use crate::dump::{write_dump, Request, Sources};
use crate::state::{state, State};
use crate::stop::guard;
use crate::stop::stw;
use crate::trigger::report;
use crate::{sys, Mode, Reason};
use core::sync::atomic::{AtomicU64, Ordering};
use heapdump_format::{LimitInfo, SignalInfo};
use std::os::unix::ffi::OsStrExt;

/// Writes a dump of the live heap to `path` (created with mode 0600; an
/// existing file is never overwritten).
///
/// Every other thread is stopped while the dump is written (or, with
/// `HEAPDUMP_FORK=1`, until a child process is forked to write it). The
/// calling thread's stack is scanned from the caller's frame up: nothing of
/// the runtime's own frames is a root.
#[inline(always)]
pub fn dump(path: impl AsRef<std::path::Path>, mode: Mode) -> Result<DumpInfo, DumpError> {
    let p = path.as_ref().as_os_str().as_bytes();
    stw::with_entry_regs(|regs| dump_path(p, mode, regs))
}

#[inline(never)]
pub(crate) fn dump_path(p: &[u8], mode: Mode, regs: &stw::Regs) -> Result<DumpInfo, DumpError> {
    let st = state();
    let mut buf = [0u8; 4096];
    if p.len() >= buf.len() || p.contains(&0) {
        return Err(DumpError::PathTooLong);
    }
    buf[..p.len()].copy_from_slice(p);
    let fd = create(&buf[..=p.len()])?;
    let r = dump_fd_inner(st, fd, mode, &Why::plain(Reason::Api), regs, false);
    sys::close(fd);
    r
}

/// Like [`dump`], but never fails because the file exists: when `path` is
/// taken, the dump gets the first free `<stem>.<pid>.<n><ext>` beside it
/// (as automatic dumps are named). Returns where it was written.
///
/// ```no_run
/// # #[global_allocator]
/// # static ALLOC: heapdump::Tracked<std::alloc::System> = heapdump::Tracked::new(std::alloc::System);
/// let (path, info) = heapdump::dump_numbered("app.hdump", heapdump::Mode::Compact).unwrap();
/// println!("{} ({} allocations)", path.display(), info.allocations);
/// ```
pub fn dump_numbered(path: impl AsRef<std::path::Path>, mode: Mode) -> Result<(std::path::PathBuf, DumpInfo), DumpError> {
    let p = path.as_ref().as_os_str().as_bytes();
    let mut out = [0u8; 1100];
    let r = stw::with_entry_regs(|regs| {
        if p.contains(&0) {
            return Err(DumpError::PathTooLong);
        }
        let (fd, len) = open_numbered(p, true, &mut out)?;
        let r = dump_fd_inner(state(), fd, mode, &Why::plain(Reason::Api), regs, false);
        sys::close(fd);
        r.map(|info| (len, info))
    });
    // Allocating again: the dump is over.
    r.map(|(len, info)| (std::path::PathBuf::from(std::ffi::OsStr::from_bytes(&out[..len])), info))
}

/// Writes a dump to an open file descriptor (not closed afterwards).
#[inline(always)]
pub fn dump_to_fd(fd: std::os::fd::RawFd, mode: Mode) -> Result<DumpInfo, DumpError> {
    stw::with_entry_regs(|regs| dump_fd_inner(state(), fd, mode, &Why::plain(Reason::Api), regs, false))
}

/// Why a dump is taken: the reason, and what the dump records of its
/// cause (the signal, the limit that was near).
pub(crate) struct Why {
    /// The reason.
    pub reason: Reason,
    /// The signal (signal and crash dumps).
    pub signal: Option<SignalInfo>,
    /// The limit (near-limit dumps).
    pub limit: Option<LimitInfo>,
}

impl Why {
    /// A reason with nothing more to record.
    pub fn plain(reason: Reason) -> Why {
        Why { reason, signal: None, limit: None }
    }
}

pub(crate) fn dump_fd_inner(st: &State, fd: i32, mode: Mode, why: &Why, regs: &stw::Regs, on_helper: bool) -> Result<DumpInfo, DumpError> {
    // The tracker is active on this thread while dumping: allocations made
    // meanwhile by this thread (none are expected) would be recorded without
    // sites rather than re-entering.
    let _g = guard::Enter::new();
    let _xfsz = sys::XfszBlocked::new();
    let src = Sources {
        table: &st.table,
        sites: &st.sites,
        config: st.config(),
        own_statics: crate::state::own_statics(),
        own_tls: crate::state::own_tls(sys::fs_base()),
    };
    let req = Request {
        mode,
        reason: why.reason,
        entry_regs: regs,
        on_helper,
        signal: why.signal,
        limit: why.limit,
        in_forked_writer: report::writer,
    };
    let r = write_dump(src, fd, &req);
    st.dump_count.fetch_add(1, Ordering::Relaxed);
    r
}

pub(crate) fn create(path_nul: &[u8]) -> Result<i32, DumpError> {
    let c = core::ffi::CStr::from_bytes_with_nul(path_nul).map_err(|_| DumpError::PathTooLong)?;
    sys::open(c, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW, 0o600)
        .map_err(|errno| DumpError::Os { what: "creating the dump file", errno })
}

/// Builds the path of the next automatic dump and opens it exclusively.
///
/// The configured path (`HEAPDUMP_OUTPUT`, else `heapdump.<pid>.hdump`) is
/// tried first, by every process of the tree: the file itself is the claim
/// (`O_EXCL`), so the first dump anywhere in the tree gets the name the
/// user gave and nothing is written to the host's environment to hand the
/// claim on. Every later dump, of this process or another, is numbered
/// `<stem>.<pid>.<n><ext>` (n from 1), taking the first free number.
/// Returns the descriptor and path length.
pub(crate) fn open_next(st: &State, out: &mut [u8; 1100]) -> Result<(i32, usize), DumpError> {
    let c = st.config();
    let default = b"heapdump.hdump";
    open_numbered(c.output().unwrap_or(default), c.output().is_some(), out)
}

/// Opens `path` exclusively when `plain_first` and it is free, else the
/// first free `<stem>.<pid>.<n><ext>` (without `.<n>` for n = 0 when not
/// `plain_first`). Returns the descriptor and the path's length in `out`.
pub(crate) fn open_numbered(path: &[u8], plain_first: bool, out: &mut [u8; 1100]) -> Result<(i32, usize), DumpError> {
    let pid = sys::getpid() as u64;
    if path.len() >= out.len() - 48 {
        return Err(DumpError::PathTooLong);
    }
    // Insert .<pid>.<n> before the extension of the last component.
    let slash = path.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
    let dot = path[slash..].iter().rposition(|&b| b == b'.').filter(|&i| i > 0).map(|i| slash + i);
    let (stem, ext) = match dot {
        Some(d) => (&path[..d], &path[d..]),
        None => (path, &b""[..]),
    };
    for n in 0..10_000u64 {
        let mut len = 0;
        let mut put = |s: &[u8], len: &mut usize| {
            let k = s.len().min(out.len() - 1 - *len);
            out[*len..*len + k].copy_from_slice(&s[..k]);
            *len += k;
        };
        let mut num = [0u8; 20];
        if plain_first && n == 0 {
            put(path, &mut len);
        } else {
            put(stem, &mut len);
            put(b".", &mut len);
            let k = crate::sys::text::fmt_u64(pid, &mut num);
            put(&num[..k], &mut len);
            if n > 0 {
                put(b".", &mut len);
                let k = crate::sys::text::fmt_u64(n, &mut num);
                put(&num[..k], &mut len);
            }
            put(ext, &mut len);
        }
        out[len] = 0;
        match create(&out[..=len]) {
            Ok(fd) => return Ok((fd, len)),
            Err(DumpError::Os { errno: libc::EEXIST, .. }) => {
                // The configured name is taken: by an earlier dump (a
                // regular file) the next gets a number; by anything else
                // (`/dev/full`, a FIFO, a directory) nothing is created
                // beside it.
                if n == 0 && !is_regular(&out[..=len]) {
                    return Err(DumpError::Os { what: "the output path is not a regular file", errno: libc::EEXIST });
                }
                continue;
            }
            Err(e) => return Err(e),
        }
    }
    Err(DumpError::Os { what: "finding a free dump file name", errno: libc::EEXIST })
}

/// Whether the NUL-terminated `path` names a regular file (not following a
/// symlink).
pub(crate) fn is_regular(path_nul: &[u8]) -> bool {
    core::ffi::CStr::from_bytes_with_nul(path_nul).is_ok_and(sys::is_regular_file)
}

/// Automatic dumps between opening their file and reporting it (the exit
/// dump waits for them).
pub(crate) static AUTO_DUMPS: AtomicU64 = AtomicU64::new(0);

/// A dump the runtime takes by itself (exit, signal, threshold, allocation
/// failure): named automatically, reported on stderr and to
/// `HEAPDUMP_REPORT` (a file `heapdump run` reads), never fatal.
pub(crate) fn auto_dump(st: &State, why: &Why, regs: &stw::Regs, on_helper: bool) {
    AUTO_DUMPS.fetch_add(1, Ordering::AcqRel);
    auto_dump_counted(st, why, regs, on_helper);
    AUTO_DUMPS.fetch_sub(1, Ordering::AcqRel);
}

fn auto_dump_counted(st: &State, why: &Why, regs: &stw::Regs, on_helper: bool) {
    let reason = why.reason;
    let mut path = [0u8; 1100];
    let (fd, len) = match open_next(st, &mut path) {
        Ok(x) => x,
        Err(e) => {
            let n = path.iter().position(|&b| b == 0).unwrap_or(0);
            report::failed(reason, &path[..n], &e);
            return;
        }
    };
    report::started(&path[..len]);
    let r = dump_fd_inner(st, fd, st.config().mode, why, regs, on_helper);
    let empty = sys::fstat(fd).is_some_and(|(_, _, size)| size == 0);
    sys::close(fd);
    match r {
        Ok(info) => report::wrote(&path[..len], reason, &info),
        Err(e) => {
            report::failed(reason, &path[..len], &e);
            // A partial file is kept: everything before the failure is
            // readable, and the reader says where it was cut. An empty one
            // (nothing could be written) would only read as "not a dump".
            if empty {
                if let Ok(p) = core::ffi::CStr::from_bytes_until_nul(&path) {
                    let _ = sys::unlink(p);
                }
            }
        }
    }
}
