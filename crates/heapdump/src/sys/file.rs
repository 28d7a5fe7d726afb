//! Files and descriptors: open, read, write, /proc, the report socket.

// The one room where the C library is called (see `sys`).
#![allow(clippy::disallowed_methods)]

use super::*;
use core::ffi::CStr;

/// Opens `path` (NUL-terminated) with `flags` and `mode`.
pub fn open(path: &CStr, flags: i32, mode: u32) -> Result<i32, i32> {
    loop {
        // SAFETY: `path` is NUL-terminated.
        let fd = unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC, mode as libc::c_uint) };
        if fd >= 0 {
            return Ok(fd);
        }
        let e = errno();
        if e != libc::EINTR {
            return Err(e);
        }
    }
}

/// Reads into `buf`, retrying on EINTR. Returns the bytes read (0 at end).
pub fn read(fd: i32, buf: &mut [u8]) -> Result<usize, i32> {
    loop {
        // SAFETY: `buf` is writable for its whole length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = errno();
        if e != libc::EINTR {
            return Err(e);
        }
    }
}

/// Reads a whole (small, /proc) file into `buf`; returns the bytes read,
/// at most `buf.len()`.
pub fn read_file(path: &CStr, buf: &mut [u8]) -> Result<usize, i32> {
    let fd = open(path, libc::O_RDONLY, 0)?;
    let mut n = 0;
    while n < buf.len() {
        match read(fd, &mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) => {
                close(fd);
                return Err(e);
            }
        }
    }
    close(fd);
    Ok(n)
}

/// Closes a descriptor.
pub fn close(fd: i32) {
    // SAFETY: closing a descriptor we own; errors are irrelevant here.
    unsafe { libc::close(fd) };
}

/// Reads directory entries (`getdents64`) into `buf`.
pub fn getdents(fd: i32, buf: &mut [u8]) -> Result<usize, i32> {
    // SAFETY: `buf` is writable for its whole length.
    let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) };
    if n < 0 {
        Err(errno())
    } else {
        Ok(n as usize)
    }
}

/// Waits at most `ms` milliseconds for `fd` to be readable: `Ok(true)`
/// when it is, `Ok(false)` on timeout.
pub fn poll_in(fd: i32, ms: i32) -> Result<bool, i32> {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one pollfd we own.
    let r = unsafe { libc::poll(&mut p, 1, ms) };
    if r < 0 {
        Err(errno())
    } else {
        Ok(r > 0)
    }
}

/// `write(2)` of `buf` to `fd`, once: the bytes written.
pub fn write(fd: i32, buf: &[u8]) -> Result<usize, i32> {
    // SAFETY: `buf` is valid for `buf.len()` bytes.
    let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(errno())
    } else {
        Ok(n as usize)
    }
}

/// Sends `msg` as one datagram to the abstract Unix socket `name` (no
/// file system), without blocking and without SIGPIPE; whether it went.
/// The caller's `errno` is kept.
pub fn send_abstract(name: &[u8], msg: &[u8]) -> bool {
    let saved = errno();
    // SAFETY: a plain socket(2); the descriptor is closed below.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        set_errno(saved);
        return false;
    }
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { core::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    // An abstract name: a NUL, then the name's bytes (not NUL-terminated).
    let k = name.len().min(addr.sun_path.len() - 1);
    for (d, &b) in addr.sun_path[1..=k].iter_mut().zip(name) {
        *d = b as libc::c_char;
    }
    let len = core::mem::size_of::<libc::sa_family_t>() + 1 + k;
    // SAFETY: `msg` is valid for its length; `addr` is a sockaddr_un whose
    // first `len` bytes are initialised.
    let n = unsafe {
        libc::sendto(
            fd,
            msg.as_ptr().cast(),
            msg.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            (&raw const addr).cast(),
            len as libc::socklen_t,
        )
    };
    close(fd);
    set_errno(saved);
    n == msg.len() as isize
}

/// The current directory into `out`; its length (None if it does not fit).
pub fn getcwd(out: &mut [u8]) -> Option<usize> {
    // SAFETY: getcwd writes at most `out.len()` bytes, NUL included.
    let p = unsafe { libc::getcwd(out.as_mut_ptr().cast(), out.len()) };
    (!p.is_null()).then(|| out.iter().position(|&b| b == 0).unwrap_or(0))
}

/// The symbolic link `path` (NUL-terminated) read into `out`; its length
/// (0 on any error).
pub fn readlink(path: &CStr, out: &mut [u8]) -> usize {
    // SAFETY: readlink writes at most `out.len()` bytes into `out`.
    let n = unsafe { libc::readlink(path.as_ptr(), out.as_mut_ptr().cast(), out.len()) };
    n.max(0) as usize
}

/// `fstat(2)`: (device, inode, size) of an open descriptor.
pub fn fstat(fd: i32) -> Option<(u64, u64, u64)> {
    // SAFETY: fstat into a zeroed struct we own.
    unsafe {
        let mut st: libc::stat = core::mem::zeroed();
        (libc::fstat(fd, &mut st) == 0).then_some((st.st_dev, st.st_ino, st.st_size as u64))
    }
}

/// Whether `path` names a regular file (not following a symlink).
pub fn is_regular_file(path: &CStr) -> bool {
    // SAFETY: lstat of a NUL-terminated path into a zeroed struct we own.
    unsafe {
        let mut st: libc::stat = core::mem::zeroed();
        libc::lstat(path.as_ptr(), &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFREG
    }
}

/// `unlink(2)`.
pub fn unlink(path: &CStr) -> Result<(), i32> {
    // SAFETY: a NUL-terminated path.
    if unsafe { libc::unlink(path.as_ptr()) } == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

/// A pipe whose ends close on exec, the write end non-blocking: (read, write).
pub fn pipe_nonblocking_writer() -> Result<(i32, i32), i32> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(errno());
    }
    // SAFETY: fcntl on the descriptor just made.
    unsafe { libc::fcntl(fds[1], libc::F_SETFL, libc::O_NONBLOCK) };
    Ok((fds[0], fds[1]))
}
