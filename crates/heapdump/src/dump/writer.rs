//! A second thread that writes a dump's bytes to the file while the
//! dumping thread gathers the next ones.
//!
//! A full dump reads the whole heap (cold memory) and writes as much to the
//! file; on one thread the two add up. Here the dumping thread copies each
//! staged piece into one of four slots and goes on, while the helper
//! `write(2)`s the slots in order: the heap's read overlaps the kernel's
//! copy into the file.
//!
//! Written by hand because it runs inside the traced process with the
//! world stopped: the helper is a raw `clone` thread (pthread_create may
//! allocate), created before the world is stopped (and left running by it),
//! or in the forked writer. It starts with every signal blocked, so that no
//! handler ever runs on it, and it never touches thread-local storage (it
//! shares the creating thread's): it only reads and writes the shared block
//! below with atomics and makes raw system calls (`write`, `futex`; no
//! `errno`). It allocates nothing and cannot panic.
//!
//! Into a regular file the helper writes with `O_DIRECT` (issue 43): the
//! dumping thread fills each slot whole before handing it over, so every
//! write but the last is a page-aligned 512 KiB at a page-aligned offset,
//! which goes from the slot to the disk without the kernel copying it
//! into fresh page-cache pages. On this VM buffered writes of a 1.7 GB
//! dump ran at 226-500 MB/s (the page cache's first touch and dirty-page
//! throttling, and a core's worth of copying beside the scan) against 1.5-1.7
//! GB/s direct. The first 64 MiB go buffered (a small dump is done
//! before the page cache minds). Where the file system refuses (`EINVAL`), or the file
//! is not at an aligned offset, or opened for appending, the writes stay
//! buffered; the last, partial slot is written buffered, and the
//! descriptor's flags are put back before the helper exits.

use crate::sys;
use core::sync::atomic::{AtomicI32, AtomicU32, AtomicUsize, Ordering};
use heapdump_format::{FdSink, Sink, WriteError};

/// Eight slots of 512 KiB: direct writes wait for the disk, and the
/// dumping thread fills the next slots meanwhile.
const SLOTS: u32 = 8;
const SLOT_LEN: usize = 512 << 10;
const STACK_LEN: usize = 64 << 10;
/// The shared block, the slots, the helper's stack.
pub const MAP_LEN: usize = 4096 + SLOTS as usize * SLOT_LEN + STACK_LEN;
/// Set in `filled` when no more slots will come.
const QUIT: u32 = 1 << 31;

/// What the two threads share, at the start of the mapping.
#[repr(C)]
struct Shared {
    fd: i32,
    /// Slots handed to the helper (a count; [`QUIT`] at the end).
    filled: AtomicU32,
    /// Slots the helper has written (a count).
    written: AtomicU32,
    /// The first write error's errno (0: none).
    errno: AtomicI32,
    /// The helper's thread id; the kernel clears it (and wakes waiters on
    /// it) when the helper exits.
    tid: AtomicU32,
    lens: [AtomicUsize; SLOTS as usize],
    /// Bytes in the slot being filled (slot `filled`), not yet handed
    /// over: only the dumping thread reads and writes it.
    fill: AtomicUsize,
}

/// Bytes of a dump written buffered before the writes go direct: a
/// smaller dump fits the page cache's dirty allowance and returns at
/// once, where each direct write waits for the disk (1 M blocks, a 17 MB
/// file: held 0.82 s direct against 0.64 s buffered, 2 rounds, load 10).
const DIRECT_AFTER: usize = if cfg!(test) { 1 << 20 } else { 64 << 20 };

/// The alignment `O_DIRECT` writes are given (buffer, length and offset):
/// a page, which every file system's logical block divides.
const DIRECT_ALIGN: usize = 4096;

/// Switches `fd` to `O_DIRECT` when it is a regular file, not appended to,
/// at an aligned offset, and the file system accepts it; returns the
/// flags to put back (`None`: writes stay buffered).
fn direct_on(fd: i32) -> Option<u64> {
    // SAFETY: an all-zero `stat` is a valid value of the plain struct.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: fstat writes one `struct stat` into `st`, which is ours.
    let r = unsafe { sys::raw_syscall4(libc::SYS_fstat, fd as u64, (&raw mut st) as u64, 0, 0) };
    if r != 0 || st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return None;
    }
    // SAFETY: F_GETFL reads the descriptor's flags; no memory is touched.
    let flags = unsafe { sys::raw_syscall4(libc::SYS_fcntl, fd as u64, libc::F_GETFL as u64, 0, 0) };
    if flags < 0 || flags & i64::from(libc::O_APPEND | libc::O_DIRECT) != 0 {
        return None;
    }
    // SAFETY: lseek moves nothing with SEEK_CUR and offset 0; no memory is touched.
    let at = unsafe { sys::raw_syscall4(libc::SYS_lseek, fd as u64, 0, libc::SEEK_CUR as u64, 0) };
    if at < 0 || at as usize % DIRECT_ALIGN != 0 {
        return None;
    }
    let with = flags as u64 | libc::O_DIRECT as u64;
    // SAFETY: F_SETFL sets the descriptor's status flags; no memory is touched.
    let r = unsafe { sys::raw_syscall4(libc::SYS_fcntl, fd as u64, libc::F_SETFL as u64, with, 0) };
    (r == 0).then_some(flags as u64)
}

/// Puts back the flags [`direct_on`] found.
fn direct_off(fd: i32, flags: u64) {
    // SAFETY: F_SETFL sets the descriptor's status flags; no memory is touched.
    unsafe { sys::raw_syscall4(libc::SYS_fcntl, fd as u64, libc::F_SETFL as u64, flags, 0) };
}

/// A [`Sink`] that hands the bytes to a helper thread, or writes them
/// itself where no helper could be started.
pub enum PipeSink {
    /// The helper writes; the mapping holds [`Shared`], the slots, its stack.
    Helper(*mut u8),
    /// Plain `write(2)` on this thread.
    Direct(FdSink),
}

// --- raw system calls (no errno: this runs on a thread without TLS) -----

pub(crate) fn futex_wait(word: &AtomicU32, seen: u32) {
    // SAFETY: FUTEX_WAIT on a valid, aligned u32: returns at once if it no
    // longer holds `seen`; no timeout.
    unsafe { sys::raw_syscall4(libc::SYS_futex, word.as_ptr() as u64, libc::FUTEX_WAIT as u64, u64::from(seen), 0) };
}

/// Waits until `word` no longer holds `seen`: spinning a while first, since
/// the other side usually answers within microseconds, and a thread that
/// sleeps takes far longer to wake (an idle virtual CPU halts). The world
/// is stopped meanwhile, so the spinning takes nothing from the program.
pub(crate) fn wait_change(word: &AtomicU32, seen: u32) {
    for i in 0..SPINS {
        if word.load(Ordering::Acquire) != seen {
            return;
        }
        if i % 256 == 255 {
            // Should the two threads share a CPU, let the other one run.
            // SAFETY: sched_yield takes no arguments and touches no memory.
            unsafe { sys::raw_syscall4(libc::SYS_sched_yield, 0, 0, 0, 0) };
        } else {
            core::hint::spin_loop();
        }
    }
    futex_wait(word, seen);
}

/// Spins before sleeping: about 100 µs of `pause`, yielding now and then.
const SPINS: u32 = 20_000;

/// Waits until the raw thread whose id the kernel keeps in `tid` (set by
/// `clone`, cleared with a futex wake at its exit) has exited.
pub(crate) fn wait_exit(tid: &AtomicU32) {
    loop {
        let t = tid.load(Ordering::Acquire);
        if t == 0 {
            return;
        }
        futex_wait(tid, t);
    }
}

pub(crate) fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a valid, aligned u32 wakes waiters; no memory is touched.
    unsafe { sys::raw_syscall4(libc::SYS_futex, word.as_ptr() as u64, libc::FUTEX_WAKE as u64, i32::MAX as u64, 0) };
}

fn shared(map: *mut u8) -> &'static Shared {
    // SAFETY: the mapping starts with a Shared (zero-initialised atomics
    // are valid), and lives as long as the dumper's scratch.
    unsafe { &*map.cast::<Shared>() }
}

fn slot(map: *mut u8, i: u32) -> *mut u8 {
    map.wrapping_add(4096 + (i % SLOTS) as usize * SLOT_LEN)
}

/// The helper: writes the slots in order until told to quit.
extern "C" fn helper(arg: *mut libc::c_void) -> libc::c_int {
    let map = arg.cast::<u8>();
    let sh = shared(map);
    // The flags to put back while the writes are direct; whether they
    // were tried; the bytes written so far.
    let mut direct = None;
    let mut tried = false;
    let mut done = 0usize;
    loop {
        let w = sh.written.load(Ordering::Relaxed);
        let f = sh.filled.load(Ordering::Acquire);
        if f & !QUIT == w {
            if f & QUIT != 0 {
                if let Some(flags) = direct {
                    direct_off(sh.fd, flags);
                }
                return 0;
            }
            wait_change(&sh.filled, f);
            continue;
        }
        // Full slots handed over that lie one after the other in the
        // mapping go in one write (a direct write of
        // several slots keeps the disk busier than one at a time).
        let ready = (f & !QUIT).wrapping_sub(w);
        let full = |i: u32| sh.lens[(i % SLOTS) as usize].load(Ordering::Relaxed) == SLOT_LEN;
        let mut k = 1;
        if full(w) {
            while k < ready && w.wrapping_add(k) % SLOTS != 0 && full(w.wrapping_add(k)) {
                k += 1;
            }
        }
        if sh.errno.load(Ordering::Relaxed) == 0 {
            let p = slot(map, w);
            let last = sh.lens[(w.wrapping_add(k - 1) % SLOTS) as usize].load(Ordering::Relaxed).min(SLOT_LEN);
            let len = (k as usize - 1) * SLOT_LEN + last;
            let mut off = 0;
            // A dump's first DIRECT_AFTER bytes go buffered: below that
            // the page cache takes them without waiting (and every write
            // so far was whole slots: the offset is aligned).
            if !tried && done >= DIRECT_AFTER && len % DIRECT_ALIGN == 0 {
                direct = direct_on(sh.fd);
                tried = true;
            }
            while off < len {
                // A direct write needs an aligned length (the slot and the
                // file offset are aligned while every write before was
                // whole): the last, partial slot goes buffered.
                if let Some(flags) = direct.filter(|_| (len - off) % DIRECT_ALIGN != 0) {
                    direct_off(sh.fd, flags);
                    direct = None;
                }
                // SAFETY: write(2) reads [p + off, p + len) of the k slots
                // from w, in a row in the mapping (w % SLOTS + k <= SLOTS),
                // which the dumping thread filled before counting them.
                let n = unsafe { sys::raw_syscall4(libc::SYS_write, sh.fd as u64, p.wrapping_add(off) as u64, (len - off) as u64, 0) };
                if n == -(libc::EINTR as i64) {
                    continue;
                }
                if let Some(flags) = direct.filter(|_| n == -(libc::EINVAL as i64)) {
                    // The file system took the flag but not the write:
                    // buffered from here on.
                    direct_off(sh.fd, flags);
                    direct = None;
                    continue;
                }
                if n <= 0 {
                    let e = if n == 0 { libc::ENOSPC } else { -n as i32 };
                    sh.errno.store(e, Ordering::Relaxed);
                    break;
                }
                off += n as usize;
                done += n as usize;
            }
        }
        // After an error the slots are still counted, so that the dumping
        // thread never waits; it sees the error at its next piece.
        sh.written.store(w.wrapping_add(k), Ordering::Release);
        futex_wake(&sh.written);
    }
}

impl PipeSink {
    /// A sink for `fd`: a helper thread writing from `map` (a mapping of
    /// [`MAP_LEN`] bytes, or null), or this thread where it cannot start.
    pub fn start(fd: i32, map: *mut u8) -> PipeSink {
        if map.is_null() {
            return PipeSink::Direct(FdSink::new(fd));
        }
        let sh = shared(map);
        sh.filled.store(0, Ordering::Relaxed);
        sh.written.store(0, Ordering::Relaxed);
        sh.errno.store(0, Ordering::Relaxed);
        sh.tid.store(0, Ordering::Relaxed);
        sh.fill.store(0, Ordering::Relaxed);
        // SAFETY: fd is a plain field of our own mapping, read by the
        // helper only after the clone below.
        unsafe { (*map.cast::<Shared>()).fd = fd };
        let stack_top = map.wrapping_add(MAP_LEN);
        // SAFETY: the stack is the top of our mapping, unused by anyone
        // else; `helper` touches only the mapping and raw system calls; the
        // kernel stores the helper's id in `tid` before clone returns and
        // clears it when the helper exits; the mapping outlives the helper.
        let started = unsafe { sys::clone_thread(helper, stack_top, map.cast(), sh.tid.as_ptr().cast::<i32>()) };
        if started {
            PipeSink::Helper(map)
        } else {
            PipeSink::Direct(FdSink::new(fd))
        }
    }

    /// The helper's thread id (0: none), for the stopper to leave running.
    pub fn helper_tid(&self) -> u32 {
        match self {
            PipeSink::Helper(map) => shared(*map).tid.load(Ordering::Acquire),
            PipeSink::Direct(_) => 0,
        }
    }

    /// Waits until every byte handed over is written and the helper has
    /// exited; returns the first write error.
    pub fn finish(&mut self) -> Result<(), WriteError> {
        let PipeSink::Helper(map) = *self else { return Ok(()) };
        let sh = shared(map);
        // The slot being filled goes as it is.
        let fill = sh.fill.load(Ordering::Relaxed);
        if fill > 0 && sh.errno.load(Ordering::Relaxed) == 0 {
            let f = sh.filled.load(Ordering::Relaxed);
            sh.lens[(f % SLOTS) as usize].store(fill, Ordering::Relaxed);
            sh.filled.store(f.wrapping_add(1), Ordering::Release);
        }
        sh.fill.store(0, Ordering::Relaxed);
        sh.filled.fetch_or(QUIT, Ordering::AcqRel);
        futex_wake(&sh.filled);
        wait_exit(&sh.tid);
        // Not an assignment: that would drop the helper variant, whose
        // drop finishes again.
        core::mem::forget(core::mem::replace(self, PipeSink::Direct(FdSink::new(sh.fd))));
        match sh.errno.load(Ordering::Relaxed) {
            0 => Ok(()),
            errno => Err(WriteError::Sink { errno }),
        }
    }
}

impl Sink for PipeSink {
    fn write_all(&mut self, mut data: &[u8]) -> Result<(), WriteError> {
        let map = match self {
            PipeSink::Helper(map) => *map,
            PipeSink::Direct(s) => return s.write_all(data),
        };
        let sh = shared(map);
        while !data.is_empty() {
            let mut fill = sh.fill.load(Ordering::Relaxed);
            let f = loop {
                if let errno @ 1.. = sh.errno.load(Ordering::Relaxed) {
                    return Err(WriteError::Sink { errno });
                }
                let f = sh.filled.load(Ordering::Relaxed);
                if fill > 0 {
                    // Slot f is ours already: it was free when its first
                    // bytes went in, and the helper waits for its count.
                    break f;
                }
                let w = sh.written.load(Ordering::Acquire);
                if f.wrapping_sub(w) < SLOTS {
                    break f;
                }
                wait_change(&sh.written, w);
            };
            let n = data.len().min(SLOT_LEN - fill);
            // SAFETY: slot f is free (the helper has written it, or never
            // had it), SLOT_LEN long, `fill + n <= SLOT_LEN`; `data` does
            // not overlap our mapping.
            unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), slot(map, f).wrapping_add(fill), n) };
            fill += n;
            data = &data[n..];
            // Handed over whole, so that the helper's writes are aligned
            // (see the module's note); `finish` hands over the last.
            if fill == SLOT_LEN {
                sh.lens[(f % SLOTS) as usize].store(fill, Ordering::Relaxed);
                sh.filled.store(f.wrapping_add(1), Ordering::Release);
                futex_wake(&sh.filled);
                fill = 0;
            }
            sh.fill.store(fill, Ordering::Relaxed);
        }
        Ok(())
    }
}

impl Drop for PipeSink {
    /// A dump that failed half-way still waits for its helper.
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// Maps the helper's block (once per process; kept with the dumper's scratch).
pub fn map() -> *mut u8 {
    sys::mmap_anon(MAP_LEN).unwrap_or(core::ptr::null_mut())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// Whether thread `tid` of this process has gone (an exited thread
    /// leaves /proc a moment after its last instruction: waits up to 2 s).
    fn gone(tid: u32) -> bool {
        let p = format!("/proc/self/task/{tid}");
        for _ in 0..200 {
            if !std::path::Path::new(&p).exists() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        false
    }

    /// Pieces of every size, a slot's and several slots' worth among
    /// them, come out in order, byte for byte, and the thread is gone.
    #[test]
    fn pieces_arrive_in_order_and_the_thread_ends() {
        let path = std::env::temp_dir().join(format!("heapdump-pipe-{}", std::process::id()));
        let f = std::fs::File::create(&path).unwrap();
        let map = map();
        assert!(!map.is_null());
        let mut sink = PipeSink::start(f.as_raw_fd(), map);
        let tid = sink.helper_tid();
        assert!(tid != 0 && std::path::Path::new(&format!("/proc/self/task/{tid}")).exists(), "a writer thread started");
        let mut want = Vec::new();
        let mut x = 0x2545_f491u64;
        for len in [1usize, 7, SLOT_LEN - 1, SLOT_LEN, SLOT_LEN + 1, 3 * SLOT_LEN + 5, 0, 100_000, 9 * SLOT_LEN] {
            let piece = noise(&mut x, len);
            sink.write_all(&piece).unwrap();
            want.extend_from_slice(&piece);
        }
        sink.finish().unwrap();
        assert!(gone(tid), "the writer thread ended");
        assert_eq!(std::fs::read(&path).unwrap(), want);
        std::fs::remove_file(&path).unwrap();
    }

    /// `len` bytes of xorshift noise, the generator's state in `x`.
    fn noise(x: &mut u64, len: usize) -> Vec<u8> {
        (0..len)
            .map(|_| {
                *x ^= *x << 13;
                *x ^= *x >> 7;
                *x ^= *x << 17;
                *x as u8
            })
            .collect()
    }

    /// Into a regular file on a disk's file system the slots past the
    /// first DIRECT_AFTER bytes are written direct: their pages are not
    /// left in the page cache (the old buffered writes left every one
    /// there, dirty), the first ones are; the bytes are the same, an
    /// unaligned tail included, and the descriptor's flags are put back
    /// as they were.
    #[test]
    // The test looks at the file and its descriptor from outside the runtime.
    #[allow(clippy::disallowed_methods)]
    fn a_file_is_written_direct_and_its_flags_put_back() {
        let path = std::env::temp_dir().join(format!("heapdump-direct-{}", std::process::id()));
        let f = std::fs::File::create(&path).unwrap();
        let fd = f.as_raw_fd();
        // SAFETY: F_GETFL on our own descriptor.
        let before = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        let mut sink = PipeSink::start(fd, map());
        assert!(sink.helper_tid() != 0);
        let mut want = Vec::new();
        let mut x = 0x9e37_79b9u64;
        for len in [100usize, SLOT_LEN, 3 * SLOT_LEN + 4097, 12345, 12 * SLOT_LEN + 77] {
            let piece = noise(&mut x, len);
            sink.write_all(&piece).unwrap();
            want.extend_from_slice(&piece);
        }
        sink.finish().unwrap();
        // SAFETY: F_GETFL on our own descriptor.
        assert_eq!(unsafe { libc::fcntl(fd, libc::F_GETFL) }, before, "the descriptor's flags are as they were");
        // SAFETY: an all-zero statfs is valid; statfs writes into it.
        let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
        let cpath = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path and our struct.
        assert_eq!(unsafe { libc::statfs(cpath.as_ptr(), &mut fs) }, 0);
        // On tmpfs (and an overlay on it) the file's pages are its
        // storage: resident either way.
        if fs.f_type != libc::TMPFS_MAGIC && fs.f_type != libc::OVERLAYFS_SUPER_MAGIC {
            // Before any read of the file.
            let len = want.len();
            let f2 = std::fs::File::open(&path).unwrap();
            // SAFETY: a shared read-only mapping of the file, unmapped below.
            let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, f2.as_raw_fd(), 0) };
            assert_ne!(p, libc::MAP_FAILED);
            let pages = len.div_ceil(4096);
            let mut vec = vec![0u8; pages];
            // SAFETY: `vec` holds a byte per page of the mapping.
            assert_eq!(unsafe { libc::mincore(p, len, vec.as_mut_ptr()) }, 0);
            // SAFETY: our mapping.
            unsafe { libc::munmap(p, len) };
            // The first DIRECT_AFTER bytes went buffered (and the rest of
            // the helper's write that crossed it: at most SLOTS slots),
            // the whole slots after them direct, the tail buffered.
            let resident = |r: std::ops::Range<usize>| vec[r].iter().filter(|&&b| b & 1 != 0).count();
            let first = DIRECT_AFTER / 4096;
            let from = (DIRECT_AFTER + SLOTS as usize * SLOT_LEN) / 4096;
            let direct_end = (len / SLOT_LEN) * SLOT_LEN / 4096;
            assert!(direct_end >= from + 256, "the test writes whole slots past the buffered start");
            assert_eq!(resident(0..first), first, "the first bytes are written buffered");
            let r = resident(from..direct_end);
            assert!(r * 4 < direct_end - from, "{r} of {} pages in the page cache: not written direct", direct_end - from);
        }
        // Read after: reading brings the pages in.
        assert_eq!(std::fs::read(&path).unwrap(), want);
        std::fs::remove_file(&path).unwrap();
    }

    /// A write error (a descriptor opened for reading) reaches the dumping
    /// thread, which then stops handing pieces over; the thread still ends.
    #[test]
    fn a_write_error_comes_back() {
        let f = std::fs::File::open("/proc/self/exe").unwrap();
        let mut sink = PipeSink::start(f.as_raw_fd(), map());
        let tid = sink.helper_tid();
        assert!(tid != 0);
        let piece = vec![0u8; SLOT_LEN];
        let mut err = None;
        for _ in 0..64 {
            if let Err(e) = sink.write_all(&piece) {
                err = Some(e);
                break;
            }
        }
        assert_eq!(err, Some(WriteError::Sink { errno: libc::EBADF }));
        assert_eq!(sink.finish(), Err(WriteError::Sink { errno: libc::EBADF }));
        assert!(gone(tid), "the writer thread ended");
    }
}
