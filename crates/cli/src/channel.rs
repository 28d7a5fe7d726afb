//! The channel the runtime reports its dumps on under `heapdump run`.
//!
//! `HEAPDUMP_REPORT` names a file in a directory only this user can enter
//! (made here, with a name nobody can guess and mkdir's refusal of anything
//! already there, so that no other local user can plant a symlink or a FIFO
//! at it). The runtime reads it at start-up and sends each line as a
//! datagram to an abstract Unix socket named after that path
//! (`heapdump_format::report::socket_name`), appending to the file
//! only when the socket cannot be reached. So a program that clears its
//! environment, a full temporary directory (where the directory may not
//! even be made) or one removed under it lose no report.
//!
//! An abstract socket can be reached by any local process: each datagram's
//! sender is known from the kernel's credentials (`SO_PASSCRED`), and only
//! this user's processes and the traced tree's are heard.

use std::os::fd::AsFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

pub struct Channel {
    /// The report file's path (`HEAPDUMP_REPORT`), whether or not its
    /// directory could be made.
    path: PathBuf,
    /// The directory made for it, removed when the channel is dropped.
    dir: Option<PathBuf>,
    socket: Arc<UnixDatagram>,
    /// Lines received so far, in order.
    lines: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Channel {
    /// Makes the channel: the socket bound, the directory made where the
    /// temporary directory allows it, and a thread receiving lines while
    /// the program runs (the kernel queues only a few datagrams).
    pub fn open() -> anyhow::Result<Channel> {
        use std::os::unix::fs::DirBuilderExt;
        let base = std::env::temp_dir();
        let mut last = None;
        for i in 0..16u32 {
            let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
            let mut seed = [0u8; 8];
            let _ = getrandom::fill(&mut seed);
            let tag = nanos ^ u64::from_ne_bytes(seed) ^ u64::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let dir = base.join(format!("heapdump-run-{}-{tag:016x}", std::process::id()));
            let path = dir.join("report.tsv");
            let name = heapdump_format::report::socket_name(path.as_os_str().as_encoded_bytes());
            let socket = match SocketAddr::from_abstract_name(name).and_then(|a| UnixDatagram::bind_addr(&a)) {
                Ok(s) => s,
                Err(e) => {
                    last = Some(e);
                    continue;
                }
            };
            let dir = match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => Some(dir),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                // A full or unwritable temporary directory: the socket alone.
                Err(_) => None,
            };
            rustix::net::sockopt::set_socket_passcred(&socket, true)?;
            socket.set_read_timeout(Some(std::time::Duration::from_millis(50)))?;
            let socket = Arc::new(socket);
            let lines = Arc::new(Mutex::new(Vec::new()));
            let stop = Arc::new(AtomicBool::new(false));
            let reader = {
                let (socket, lines, stop) = (socket.clone(), lines.clone(), stop.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Acquire) {
                        if let Some(l) = receive(&socket, false) {
                            lines.lock().unwrap_or_else(|e| e.into_inner()).extend(l);
                        }
                    }
                })
            };
            return Ok(Channel { path, dir, socket, lines, stop, reader: Some(reader) });
        }
        Err(anyhow::Error::new(last.unwrap_or_else(|| std::io::Error::other("no name")))
            .context("cannot open the report channel (an abstract Unix socket)"))
    }

    /// The value of `HEAPDUMP_REPORT`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every line received so far and every line in the file, in order.
    /// Once [`Channel::quiet`] is called, this thread reads the socket
    /// itself, so a line sent before a process ended is always seen by
    /// the next call after it ended.
    pub fn text(&self) -> String {
        if self.reader.is_none() {
            while let Some(l) = receive(&self.socket, true) {
                self.lines.lock().unwrap_or_else(|e| e.into_inner()).extend(l);
            }
        }
        let mut text = String::new();
        for l in self.lines.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            text.push_str(l);
            if !l.ends_with('\n') {
                text.push('\n');
            }
        }
        text.push_str(&std::fs::read_to_string(&self.path).unwrap_or_default());
        text
    }

    /// Stops the receiving thread: from now on [`Channel::text`] reads the
    /// socket on the caller's thread.
    pub fn quiet(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        self.quiet();
        if let Some(d) = &self.dir {
            let _ = std::fs::remove_file(d.join("report.tsv"));
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// One datagram's lines, if one came (waiting at most the socket's
/// timeout, or not at all when `now`) from a sender this channel hears:
/// the empty list for a datagram from anyone else; `None` when nothing
/// came.
fn receive(socket: &UnixDatagram, now: bool) -> Option<Vec<String>> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let mut buf = [0u8; 4096];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmCredentials(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let flags = if now { RecvFlags::DONTWAIT } else { RecvFlags::empty() };
    let got = rustix::net::recvmsg(socket.as_fd(), &mut [std::io::IoSliceMut::new(&mut buf)], &mut control, flags).ok()?;
    let mut heard = false;
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmCredentials(c) = m {
            heard = c.uid == rustix::process::geteuid() || descends_from_us(c.pid.as_raw_nonzero().get());
        }
    }
    if !heard {
        return Some(vec![]);
    }
    let text = String::from_utf8_lossy(&buf[..got.bytes]);
    Some(text.lines().map(str::to_string).collect())
}

/// Whether `pid` is a descendant of this process (a traced program that
/// changed its user, as servers' workers do).
fn descends_from_us(pid: i32) -> bool {
    let me = std::process::id() as i32;
    let mut p = pid;
    for _ in 0..64 {
        if p == me {
            return true;
        }
        if p <= 1 {
            return false;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else { return false };
        let Some(ppid) = stat.rsplit_once(") ").and_then(|(_, r)| r.split(' ').nth(1)).and_then(|s| s.parse().ok()) else {
            return false;
        };
        p = ppid;
    }
    false
}
