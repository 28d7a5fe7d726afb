//! What the runtime says about the dumps it takes by itself: a line on
//! stderr, or, under `heapdump run` (`HEAPDUMP_REPORT` names a file), lines
//! sent to `run` (a datagram to its socket, else appended to that file) for
//! it to read and print.
//!
//! Written by hand on stack buffers: this runs inside the host, during or
//! right after a dump, where nothing may allocate.
//!
//! One line per event, its fields in the order `heapdump_format::report`
//! defines (where `run` reads them by name), each sent as one datagram (or
//! written with one `write(2)` to a descriptor opened `O_APPEND`), so
//! lines of the processes of one tree never interleave. `run` waits while
//! a started dump has neither `wrote` nor `failed` and its process or
//! writer is alive.
#![forbid(unsafe_code)]

use crate::dump::outcome::{DumpError, DumpInfo};
use crate::sys;
use crate::sys::stderr::write_stderr;
use heapdump_format::{report, Reason};

/// A line built on the stack, cut at its capacity.
pub(crate) struct Line {
    buf: [u8; 1400],
    len: usize,
}

impl Line {
    pub(crate) fn new() -> Line {
        Line { buf: [0; 1400], len: 0 }
    }
    pub(crate) fn s(&mut self, s: &[u8]) -> &mut Self {
        let k = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + k].copy_from_slice(&s[..k]);
        self.len += k;
        self
    }
    pub(crate) fn n(&mut self, v: u64) -> &mut Self {
        let mut t = [0u8; 20];
        let k = crate::sys::text::fmt_u64(v, &mut t);
        self.s(&t[..k])
    }
    /// `path`, made absolute with the current directory when relative.
    fn abs(&mut self, path: &[u8]) -> &mut Self {
        if path.first() != Some(&b'/') {
            let mut cwd = [0u8; 1024];
            if let Some(k) = sys::getcwd(&mut cwd) {
                self.s(&cwd[..k]).s(b"/");
            }
        }
        self.s(path)
    }
    /// This process's executable (`/proc/self/exe`), or `?`.
    fn exe(&mut self) -> &mut Self {
        let mut b = [0u8; 512];
        let n = crate::sys::procfs::exe_path(&mut b);
        if n > 0 {
            // A tab or newline in the name would split the line.
            for c in &mut b[..n] {
                if *c == b'\t' || *c == b'\n' {
                    *c = b'?';
                }
            }
            self.s(&b[..n])
        } else {
            self.s(b"?")
        }
    }
    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// Sends one line to `heapdump run`; false when the program runs without
/// it. The path `run` named is the one read at start-up (a program that
/// cleared its environment since still reports). The line goes as one
/// datagram to `run`'s socket (no file system: a full or removed
/// temporary directory loses nothing), and is appended to the report file
/// only when the socket cannot be reached (a process in another network
/// namespace, a socket refused by a sandbox).
fn append(line: &Line) -> bool {
    let config = crate::state::state().config();
    let Some(report) = config.report() else { return false };
    let name = heapdump_format::report::socket_name(report);
    if sys::send_abstract(&name, line.bytes()) {
        return true;
    }
    let mut path = [0u8; 1025];
    path[..report.len()].copy_from_slice(report);
    let Ok(rp) = core::ffi::CStr::from_bytes_until_nul(&path) else { return true };
    // `heapdump run` makes the file's directory private (0700); still,
    // never follow a symlink or block on a FIFO there.
    let flags = libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK;
    let _xfsz = sys::XfszBlocked::new();
    if let Ok(fd) = sys::open(rp, flags, 0o600) {
        // One write (atomic with O_APPEND).
        let _ = sys::write(fd, line.bytes());
        sys::close(fd);
    }
    true
}

/// The dump at `path` is open and about to be written.
pub(crate) fn started(path: &[u8]) {
    let mut l = Line::new();
    l.s(report::STARTED).s(b"\t").n(sys::getpid() as u64).s(b"\t").exe().s(b"\t").abs(path).s(b"\n");
    append(&l);
}

/// Called in a forked writer: it writes the dump its parent started.
pub(crate) fn writer() {
    let mut l = Line::new();
    let parent = u64::from(sys::getppid());
    l.s(report::WRITER).s(b"\t").n(parent).s(b"\t").n(sys::getpid() as u64).s(b"\n");
    append(&l);
}

/// The dump at `path` is complete.
pub(crate) fn wrote(path: &[u8], reason: Reason, info: &DumpInfo) {
    let mut m = Line::new();
    m.s(report::WROTE).s(b"\t").n(sys::getpid() as u64).s(b"\t").exe().s(b"\t").abs(path);
    m.s(b"\t").n(info.allocations).s(b"\t").n(info.alloc_bytes).s(b"\t").n(info.file_bytes);
    m.s(b"\t").s(reason.as_str().as_bytes()).s(b"\n");
    if !append(&m) {
        let mut l = Line::new();
        l.s(b"heapdump: wrote ").s(path).s(b" (").s(reason.as_str().as_bytes()).s(b", ").n(info.allocations).s(b" allocations, ");
        l.n(info.alloc_bytes).s(b" bytes, pause ").n(info.pause_ns / 1000).s(b" us)\n");
        write_stderr(l.bytes());
    }
}

/// The dump at `path` (empty when no file was opened) failed: said on
/// stderr, and to the report file so that `run` stops waiting for it.
pub(crate) fn failed(reason: Reason, path: &[u8], e: &DumpError) {
    let mut msg = Line::new();
    msg.s(reason.as_str().as_bytes()).s(b" dump failed");
    if !path.is_empty() {
        msg.s(b" (").s(path).s(b")");
    }
    msg.s(b": ");
    let mut text = [0u8; 128];
    match *e {
        DumpError::Os { what, errno } => {
            msg.s(what.as_bytes()).s(b": ").s(sys::errno_text(errno, &mut text));
        }
        DumpError::Write(heapdump_format::WriteError::Sink { errno }) => {
            msg.s(b"write error: ").s(sys::errno_text(errno, &mut text));
        }
        DumpError::Write(_) => {
            msg.s(b"internal write error");
        }
        DumpError::PathTooLong => {
            msg.s(b"path too long");
        }
        DumpError::Child(s) => {
            msg.s(b"forked writer failed, status ").n(s as u64);
        }
    }
    let mut l = Line::new();
    l.s(b"heapdump: ").s(msg.bytes()).s(b"\n");
    write_stderr(l.bytes());
    if !path.is_empty() {
        let mut m = Line::new();
        m.s(report::FAILED).s(b"\t").n(sys::getpid() as u64).s(b"\t").exe().s(b"\t").abs(path).s(b"\t").s(msg.bytes()).s(b"\n");
        append(&m);
    }
}
