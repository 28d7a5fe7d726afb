//! What the runtime reads from `/proc/self`: the memory map, the threads
//! (their ids, names, blocked signals and stack pointers in a system
//! call) and the executable's path. Read with raw system calls into fixed
//! buffers or the runtime's own mappings: nothing here allocates.
#![forbid(unsafe_code)]

use crate::sys::text::{fmt_u64, parse_hex, parse_u64};
use crate::sys::{self, Mapping};

/// This process's executable (`/proc/self/exe`) into `out`; its length (0
/// when unknown).
pub fn exe_path(out: &mut [u8]) -> usize {
    sys::readlink(c"/proc/self/exe", out)
}

/// Reads `/proc/self/task/TID/<file>` (`file` NUL-terminated) into `out`;
/// returns the length read (0 on any error).
fn read_task_file(tid: u32, file: &[u8], out: &mut [u8]) -> usize {
    let mut path = [0u8; 64];
    let prefix = b"/proc/self/task/";
    path[..prefix.len()].copy_from_slice(prefix);
    let mut n = prefix.len();
    n += fmt_u64(tid.into(), &mut path[n..]);
    path[n] = b'/';
    n += 1;
    let k = file.len().min(path.len() - n);
    path[n..n + k].copy_from_slice(&file[..k]);
    let Ok(c) = core::ffi::CStr::from_bytes_until_nul(&path[..n + k]) else { return 0 };
    sys::read_file(c, out).unwrap_or(0)
}

/// Reads a thread's name from /proc/self/task/TID/comm.
pub(crate) fn thread_name(tid: u32, out: &mut [u8; 16]) -> &[u8] {
    let k = read_task_file(tid, b"comm\0", out);
    let k = out[..k].iter().position(|&b| b == b'\n').unwrap_or(k);
    &out[..k]
}

/// The user stack pointer of a thread of this process blocked in a system
/// call (`/proc/self/task/TID/syscall`: number, six arguments, stack
/// pointer, program counter); 0 when it is running or unknown. A thread
/// that blocks every signal cannot be stopped, but while it waits in the
/// kernel its stack below this pointer is dead and above it unchanging.
pub(crate) fn blocked_sp(tid: u32) -> u64 {
    let mut text = [0u8; 256];
    let k = read_task_file(tid, b"syscall\0", &mut text);
    let mut fields = text[..k].split(|&b| b == b' ' || b == b'\n').filter(|f| !f.is_empty());
    // "running", or "-1 sp pc" (stopped outside a call) have no 9 fields.
    let Some(sp) = fields.nth(7) else { return 0 };
    sp.strip_prefix(b"0x").and_then(parse_hex).unwrap_or(0)
}

/// Whether thread `tid` blocks signal `sig` (from /proc/self/task/TID/status,
/// `SigBlk`): such a thread cannot answer a stop, so it is not waited for.
pub fn blocks_signal(tid: u32, sig: i32) -> bool {
    let mut buf = [0u8; 2048];
    let len = read_task_file(tid, b"status\0", &mut buf);
    let text = &buf[..len];
    let key = b"SigBlk:";
    let Some(at) = text.windows(key.len()).position(|w| w == key) else { return false };
    let mut mask: u64 = 0;
    for &b in text[at + key.len()..].iter().skip_while(|b| b.is_ascii_whitespace()).take_while(|b| b.is_ascii_hexdigit()) {
        let d = (b as char).to_digit(16).unwrap_or(0) as u64;
        mask = (mask << 4) | d;
    }
    (1..=64).contains(&sig) && mask & (1u64 << (sig - 1)) != 0
}

/// Calls `f` with each thread id in /proc/self/task.
pub fn for_each_task(mut f: impl FnMut(u32)) {
    let Ok(fd) = sys::open(c"/proc/self/task", libc::O_RDONLY | libc::O_DIRECTORY, 0) else { return };
    let mut buf = [0u8; 4096];
    while let Ok(n) = sys::getdents(fd, &mut buf) {
        if n == 0 {
            break;
        }
        let mut off = 0;
        while off + 19 < n {
            let reclen = u16::from_ne_bytes([buf[off + 16], buf[off + 17]]) as usize;
            if reclen == 0 {
                break;
            }
            let name = &buf[off + 19..(off + reclen).min(n)];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            if let Some(tid) = parse_u64(name) {
                f(tid as u32);
            }
            off += reclen;
        }
    }
    sys::close(fd);
}

/// The part of /proc/self/maps a dump needs: mapping bounds.
pub struct Maps<'a> {
    text: &'a [u8],
}

impl Maps<'_> {
    pub fn find(&self, addr: u64) -> Option<(u64, u64)> {
        for line in self.text.split(|&b| b == b'\n') {
            let Some(dash) = line.iter().position(|&b| b == b'-') else { continue };
            let Some(sp) = line.iter().position(|&b| b == b' ') else { continue };
            if sp <= dash {
                continue;
            }
            let (Some(a), Some(b)) = (parse_hex(&line[..dash]), parse_hex(&line[dash + 1..sp])) else { continue };
            if addr >= a && addr < b {
                return Some((a, b));
            }
        }
        None
    }
    /// Calls `f(start, end)` for each private, readable and writable,
    /// anonymous mapping: those with no path (not [stack], [vvar],
    /// [vdso]), and the brk heap too if `with_heap`.
    pub fn for_each_anon_rw(&self, with_heap: bool, mut f: impl FnMut(u64, u64)) {
        for line in self.text.split(|&b| b == b'\n') {
            // start-end perms offset dev inode [path]
            let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty());
            let (Some(range), Some(perms)) = (fields.next(), fields.next()) else { continue };
            let (_, _, Some(inode)) = (fields.next(), fields.next(), fields.next()) else { continue };
            let named = fields.next().is_some_and(|p| !(with_heap && p == b"[heap]"));
            if named || inode != b"0" || perms.len() < 4 || &perms[..2] != b"rw" || perms[3] != b'p' {
                continue;
            }
            let Some(dash) = range.iter().position(|&b| b == b'-') else { continue };
            if let (Some(a), Some(b)) = (parse_hex(&range[..dash]), parse_hex(&range[dash + 1..])) {
                f(a, b);
            }
        }
    }

    /// The stack to scan for a thread stopped with stack pointer `sp`:
    /// from its red zone (`sp` - 128, within the mapping) to the mapping's
    /// end. A thread that overflowed its stack has `sp` below the stack's
    /// mapping (in the guard gap, unmapped): then the mapping just above,
    /// within the 1 MiB gap Linux keeps below stacks. Empty (`sp`, `sp`)
    /// when neither is there: nothing unmapped is ever read.
    pub fn stack_of(&self, sp: u64) -> (u64, u64) {
        if let Some((a, b)) = self.find(sp) {
            return (sp.saturating_sub(128).max(a), b);
        }
        let mut above: Option<(u64, u64)> = None;
        for line in self.text.split(|&b| b == b'\n') {
            let Some(dash) = line.iter().position(|&b| b == b'-') else { continue };
            let Some(space) = line.iter().position(|&b| b == b' ') else { continue };
            if space <= dash {
                continue;
            }
            let (Some(a), Some(b)) = (parse_hex(&line[..dash]), parse_hex(&line[dash + 1..space])) else { continue };
            if a > sp && a - sp <= (1 << 20) && above.is_none_or(|m| a < m.0) {
                above = Some((a, b));
            }
        }
        above.unwrap_or((sp, sp))
    }

    pub fn end_of(&self, addr: u64) -> Option<u64> {
        self.find(addr).map(|m| m.1)
    }
}

/// `/proc/self/maps`, read into a mapping of the runtime's own that grows
/// (to at most 256 MiB) until the file fits.
pub struct MapsText {
    map: Option<Mapping>,
}

impl MapsText {
    /// Nothing read yet.
    pub const fn new() -> MapsText {
        MapsText { map: None }
    }

    /// Reads the file now (empty when it cannot be read).
    pub fn read(&mut self) -> Maps<'_> {
        let mut cap = self.map.as_ref().map_or(1 << 20, Mapping::len);
        loop {
            if self.map.as_ref().is_none_or(|m| m.len() != cap) {
                self.map = None;
                self.map = Mapping::anon(cap).ok();
            }
            let Some(m) = self.map.as_mut() else { return Maps { text: &[] } };
            let n = sys::read_file(c"/proc/self/maps", m.bytes_mut()).unwrap_or(0);
            if n < cap || cap >= 256 << 20 {
                let text = &self.map.as_ref().map_or(&[][..], Mapping::bytes)[..n];
                return Maps { text };
            }
            // Full: grow and read again.
            cap *= 4;
        }
    }
}
