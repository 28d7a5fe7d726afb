//! Every system call the runtime makes, in one module.
//!
//! Written by hand (no `std::fs`, no `nix`) because everything here must run
//! inside the traced process with the world stopped or inside the
//! allocator: no allocation, no locks, no panics. Each function is a thin,
//! async-signal-safe wrapper returning `Err(errno)`. Clippy's
//! `disallowed_methods` (clippy.toml) keeps the C library's functions out
//! of every other module of the runtime.
#![allow(clippy::disallowed_methods)]

pub(crate) mod lock;
pub(crate) mod procfs;
pub(crate) mod text;

use core::ffi::CStr;

/// The calling thread's errno.
pub fn errno() -> i32 {
    // SAFETY: __errno_location returns a pointer to this thread's errno,
    // valid for the thread's whole life.
    unsafe { *libc::__errno_location() }
}

/// Sets the calling thread's errno (to restore it in handlers).
pub fn set_errno(v: i32) {
    // SAFETY: as in `errno`.
    unsafe { *libc::__errno_location() = v }
}

/// The runtime's own mappings (its tables hold heap addresses, so a dump
/// must never scan them as roots): a fixed, lock-free registry.
const OWN_MAX: usize = 1024;
static OWN: [(core::sync::atomic::AtomicU64, core::sync::atomic::AtomicU64); OWN_MAX] =
    [const { (core::sync::atomic::AtomicU64::new(0), core::sync::atomic::AtomicU64::new(0)) }; OWN_MAX];

fn register(p: *mut u8, len: usize) {
    use core::sync::atomic::Ordering;
    for (a, l) in &OWN {
        if a.compare_exchange(0, p as u64, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            l.store(len as u64, Ordering::Release);
            return;
        }
    }
}

fn unregister(p: *mut u8) {
    use core::sync::atomic::Ordering;
    for (a, l) in &OWN {
        if a.load(Ordering::Acquire) == p as u64 {
            l.store(0, Ordering::Release);
            a.store(0, Ordering::Release);
            return;
        }
    }
}

/// Whether `[start, end)` overlaps one of the runtime's own mappings.
pub fn overlaps_own(start: u64, end: u64) -> bool {
    use core::sync::atomic::Ordering;
    OWN.iter().any(|(a, l)| {
        let a = a.load(Ordering::Acquire);
        let l = l.load(Ordering::Acquire);
        a != 0 && a < end && start < a + l.max(1)
    })
}

/// The text of an error number (`strerror_r` into the caller's buffer: no
/// allocation), e.g. "No such file or directory".
pub fn errno_text(errno: i32, buf: &mut [u8; 128]) -> &[u8] {
    // SAFETY: the XSI strerror_r writes a NUL-terminated string of at most
    // buf.len() bytes into buf.
    let r = unsafe { libc::strerror_r(errno, buf.as_mut_ptr().cast(), buf.len()) };
    let n = buf.iter().position(|&b| b == 0).unwrap_or(0);
    if r != 0 || n == 0 {
        return b"unknown error";
    }
    &buf[..n]
}

/// Calls `f(a, b)` for each part of `[start, end)` outside the runtime's
/// own mappings, in address order. (The kernel merges an anonymous
/// mapping of the program's with one of ours beside it into one line of
/// /proc/self/maps: the program's part is still the program's.)
pub fn for_each_outside_own(start: u64, end: u64, mut f: impl FnMut(u64, u64)) {
    use core::sync::atomic::Ordering;
    let mut cur = start;
    while cur < end {
        // The own mapping overlapping [cur, end) that starts first.
        let mut first: Option<(u64, u64)> = None;
        for (a, l) in &OWN {
            let a = a.load(Ordering::Acquire);
            let l = l.load(Ordering::Acquire);
            if a != 0 && l != 0 && a < end && a + l > cur && first.is_none_or(|(fa, _)| a < fa) {
                first = Some((a, a + l));
            }
        }
        match first {
            None => {
                f(cur, end);
                return;
            }
            Some((a, b)) => {
                if a > cur {
                    f(cur, a);
                }
                cur = b;
            }
        }
    }
}

/// Calls `f(start, end)` for each of the runtime's own mappings.
pub fn for_each_own(mut f: impl FnMut(u64, u64)) {
    use core::sync::atomic::Ordering;
    for (a, l) in &OWN {
        let a = a.load(Ordering::Acquire);
        let l = l.load(Ordering::Acquire);
        if a != 0 && l != 0 {
            f(a, a + l);
        }
    }
}

/// Anonymous private read-write mapping of `len` bytes, zero-filled.
pub fn mmap_anon(len: usize) -> Result<*mut u8, i32> {
    map(len, libc::MAP_PRIVATE)
}

/// [`mmap_anon`] with its pages allocated at once (`MAP_POPULATE`): for
/// tables that are written all over right away. Faulting them in one by
/// one costs, for each page, a read fault mapping the shared zero page and
/// then a copy-on-write fault with a TLB shootdown on every core.
pub fn mmap_anon_populated(len: usize) -> Result<*mut u8, i32> {
    map(len, libc::MAP_PRIVATE | libc::MAP_POPULATE)
}

/// [`mmap_anon`] without a commit charge (`MAP_NORESERVE`): address space
/// for sparse tables, whose pages come on first write.
pub fn mmap_sparse(len: usize) -> Result<*mut u8, i32> {
    map(len, libc::MAP_PRIVATE | libc::MAP_NORESERVE)
}

/// [`mmap_sparse`] at an address that is a multiple of `align` (a power
/// of two, a multiple of the page size): maps `align` more and gives back
/// the ends.
pub fn mmap_sparse_aligned(len: usize, align: usize) -> Result<*mut u8, i32> {
    let p = mmap_sparse(len + align)? as usize;
    let start = (p + align - 1) & !(align - 1);
    // SAFETY: both ends lie inside the mapping just made, which nothing
    // else knows of; what stays is [start, start + len).
    unsafe {
        if start > p {
            libc::munmap(p as *mut libc::c_void, start - p);
        }
        if p + align > start {
            libc::munmap((start + len) as *mut libc::c_void, p + align - start);
        }
    }
    unregister(p as *mut u8);
    register(start as *mut u8, len);
    Ok(start as *mut u8)
}

/// `madvise` with one of the advices below, which change how a range is
/// backed or whether it goes into a core dump, never its contents.
fn advise(p: usize, len: usize, advice: i32) -> Result<(), i32> {
    // SAFETY: see above; a range the kernel cannot advise fails with an
    // errno and is left as it was.
    if unsafe { libc::madvise(p as *mut libc::c_void, len, advice) } != 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// Leaves `[p, p + len)` out of core dumps (`MADV_DONTDUMP`).
pub fn dont_dump(p: *mut u8, len: usize) -> Result<(), i32> {
    advise(p as usize, len, libc::MADV_DONTDUMP)
}

/// Asks for transparent huge pages for `[p, p + len)` (`MADV_HUGEPAGE`):
/// only how its future pages are mapped.
pub fn huge_pages(p: usize, len: usize) -> Result<(), i32> {
    advise(p, len, libc::MADV_HUGEPAGE)
}

/// Whether the system gives transparent huge pages to ranges that ask
/// for them (`always` or `madvise` in
/// /sys/kernel/mm/transparent_hugepage/enabled, not `never`).
pub fn thp_on_request() -> bool {
    let mut buf = [0u8; 128];
    match read_file(c"/sys/kernel/mm/transparent_hugepage/enabled", &mut buf) {
        Ok(n) => {
            let s = &buf[..n];
            s.windows(8).any(|w| w == b"[always]") || s.windows(9).any(|w| w == b"[madvise]")
        }
        Err(_) => false,
    }
}

/// Address space reserved for later use (`PROT_NONE`, no memory and no
/// commit charge), recorded as the runtime's own; parts are made usable by
/// [`commit`].
pub fn reserve(len: usize) -> Result<*mut u8, i32> {
    // SAFETY: an anonymous mapping with no address hint touches no existing
    // memory; failure is reported as MAP_FAILED.
    let p = unsafe {
        libc::mmap(core::ptr::null_mut(), len, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE, -1, 0)
    };
    if p == libc::MAP_FAILED {
        Err(errno())
    } else {
        register(p.cast(), len);
        Ok(p.cast())
    }
}

/// Makes `[p, p+len)` of a [`reserve`]d region readable and writable.
/// Neighbouring committed parts merge into one mapping.
///
/// # Safety
/// The range must lie inside a region returned by [`reserve`].
pub unsafe fn commit(p: *mut u8, len: usize) -> Result<(), i32> {
    // SAFETY: the caller guarantees the range is our own reservation, which
    // nothing else uses.
    if unsafe { libc::mprotect(p.cast(), len, libc::PROT_READ | libc::PROT_WRITE) } != 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// `madvise(MADV_COLLAPSE)` (Linux 6.1): makes `[p, p + len)` (2 MiB
/// aligned) transparent huge pages now, copying its small pages.
pub fn collapse(p: u64, len: u64) -> Result<(), i32> {
    const MADV_COLLAPSE: i32 = 25;
    advise(p as usize, len as usize, MADV_COLLAPSE)
}

/// Which pages of `[p, p + 4096 * out.len())` are in memory (`mincore`):
/// bit 0 of each byte of `out`.
pub fn resident(p: *const u8, out: &mut [u8]) -> Result<(), i32> {
    // SAFETY: mincore only writes `out`, one byte per page of the range;
    // an unmapped range fails with ENOMEM.
    if unsafe { libc::mincore(p as *mut libc::c_void, out.len() * 4096, out.as_mut_ptr()) } != 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// Bytes of `[p, p + len)` in memory, counted with `mincore` a chunk of
/// `pages` at a time (a range it refuses counts as none).
pub fn resident_bytes(p: *const u8, len: usize, pages: &mut [u8]) -> u64 {
    let mut total = 0;
    let mut off = 0;
    while off < len {
        let n = ((len - off).div_ceil(4096)).min(pages.len());
        if resident(p.wrapping_add(off), &mut pages[..n]).is_ok() {
            total += pages[..n].iter().filter(|&&r| r & 1 != 0).count() as u64 * 4096;
        }
        off += n * 4096;
    }
    total
}

/// An anonymous read-write mapping, recorded as the runtime's own.
fn map(len: usize, sharing: i32) -> Result<*mut u8, i32> {
    // SAFETY: an anonymous mapping with no address hint touches no existing
    // memory; failure is reported as MAP_FAILED.
    let p = unsafe { libc::mmap(core::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, sharing | libc::MAP_ANONYMOUS, -1, 0) };
    if p == libc::MAP_FAILED {
        Err(errno())
    } else {
        register(p.cast(), len);
        Ok(p.cast())
    }
}

/// Unmaps a region obtained from [`mmap_anon`].
///
/// # Safety
/// `p..p+len` must be a mapping this module returned, no longer used.
pub unsafe fn munmap(p: *mut u8, len: usize) {
    unregister(p);
    // SAFETY: the caller guarantees the region is ours and unused.
    unsafe { libc::munmap(p.cast(), len) };
}

/// Kernel thread id of the caller.
pub fn gettid() -> u32 {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// Process id.
pub fn getpid() -> u32 {
    // SAFETY: getpid cannot fail.
    unsafe { libc::getpid() as u32 }
}

/// Sends `sig` to thread `tid` of this process.
pub fn tgkill(tid: u32, sig: i32) -> Result<(), i32> {
    // SAFETY: tgkill only sends a signal; bad ids fail with ESRCH.
    let r = unsafe { libc::syscall(libc::SYS_tgkill, getpid() as libc::c_long, tid as libc::c_long, sig as libc::c_long) };
    if r < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// Sleeps `ms` milliseconds (nanosleep, restarted on signals).
pub fn sleep_ms(ms: u64) {
    let mut ts = libc::timespec { tv_sec: (ms / 1000) as libc::time_t, tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long };
    let mut rem = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: both timespecs are valid for the call; on EINTR the rest of
    // the interval is in `rem`.
    while unsafe { libc::nanosleep(&ts, &mut rem) } != 0 && errno() == libc::EINTR {
        ts = rem;
    }
}

/// Monotonic clock in nanoseconds.
pub fn monotonic_ns() -> u64 {
    clock(libc::CLOCK_MONOTONIC)
}

/// Wall clock in nanoseconds since the Unix epoch.
pub fn realtime_ns() -> u64 {
    clock(libc::CLOCK_REALTIME)
}

fn clock(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-parameter.
    unsafe { libc::clock_gettime(id, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

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

/// `futex(FUTEX_WAIT)`: sleeps while `*addr == val`, at most `timeout_ns`
/// (0 = forever).
pub fn futex_wait(addr: &core::sync::atomic::AtomicU32, val: u32, timeout_ns: u64) {
    let ts = libc::timespec { tv_sec: (timeout_ns / 1_000_000_000) as i64, tv_nsec: (timeout_ns % 1_000_000_000) as i64 };
    let tsp: *const libc::timespec = if timeout_ns == 0 { core::ptr::null() } else { &ts };
    // SAFETY: `addr` is a valid, aligned u32 for the call's duration; the
    // kernel only reads it.
    unsafe { libc::syscall(libc::SYS_futex, addr.as_ptr(), libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG, val, tsp) };
}

/// `futex(FUTEX_WAKE)` of all waiters.
pub fn futex_wake_all(addr: &core::sync::atomic::AtomicU32) {
    // SAFETY: as in futex_wait.
    unsafe { libc::syscall(libc::SYS_futex, addr.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, i32::MAX) };
}

/// Fork by raw `clone(SIGCHLD)`: unlike `fork(3)` it runs no `atfork`
/// handlers, so it cannot block on an allocator lock that a stopped thread
/// holds. The child has one thread and may only make raw system calls
/// until it `_exit`s.
pub fn raw_fork() -> Result<u32, i32> {
    // SAFETY: clone with only SIGCHLD and no new stack behaves like fork;
    // both sides return here.
    let r = unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_long, 0 as libc::c_long, 0, 0, 0) };
    if r < 0 {
        Err(errno())
    } else {
        Ok(r as u32)
    }
}

/// Leaves the process at once, without atexit handlers or flushing.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and touches no user state.
    unsafe { libc::_exit(code) }
}

/// Waits for child `pid`; returns its raw wait status.
pub fn waitpid(pid: u32) -> Result<i32, i32> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid out-parameter.
        let r = unsafe { libc::waitpid(pid as i32, &mut status, libc::__WALL) };
        if r >= 0 {
            return Ok(status);
        }
        let e = errno();
        if e != libc::EINTR {
            return Err(e);
        }
    }
}

/// Every signal but those a fault raises (SIGSEGV, SIGBUS, SIGFPE,
/// SIGILL, SIGTRAP: blocked, the kernel would kill the process outright)
/// blocked on this thread while it lives; the mask is restored on drop.
pub struct AsyncSignalsBlocked {
    old: libc::sigset_t,
}

impl AsyncSignalsBlocked {
    /// Blocks them on the calling thread.
    pub fn new() -> AsyncSignalsBlocked {
        // SAFETY: sigset operations on sets we own; pthread_sigmask is
        // async-signal-safe in glibc and allocates nothing.
        unsafe {
            let mut set: libc::sigset_t = core::mem::zeroed();
            let mut old: libc::sigset_t = core::mem::zeroed();
            libc::sigfillset(&mut set);
            for s in [libc::SIGSEGV, libc::SIGBUS, libc::SIGFPE, libc::SIGILL, libc::SIGTRAP] {
                libc::sigdelset(&mut set, s);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            AsyncSignalsBlocked { old }
        }
    }
}

impl Drop for AsyncSignalsBlocked {
    fn drop(&mut self) {
        // SAFETY: restores the mask `new` saved.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, core::ptr::null_mut()) };
    }
}

/// SIGXFSZ blocked on this thread while it lives: a dump or a report line
/// past the program's `RLIMIT_FSIZE` fails with `EFBIG` instead of killing
/// the program (whose own writes still get the signal). The signal a
/// refused write raised on this thread is discarded before the mask is
/// restored.
pub struct XfszBlocked {
    was_blocked: bool,
}

impl XfszBlocked {
    /// Blocks SIGXFSZ on the calling thread.
    pub fn new() -> XfszBlocked {
        // SAFETY: sigset operations on sets we own; pthread_sigmask is
        // async-signal-safe in glibc.
        unsafe {
            let mut set: libc::sigset_t = core::mem::zeroed();
            let mut old: libc::sigset_t = core::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGXFSZ);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            XfszBlocked { was_blocked: libc::sigismember(&old, libc::SIGXFSZ) == 1 }
        }
    }
}

impl Drop for XfszBlocked {
    fn drop(&mut self) {
        if self.was_blocked {
            return;
        }
        // SAFETY: as above; sigtimedwait with a zero timeout only takes a
        // pending SIGXFSZ, never waits.
        unsafe {
            let mut set: libc::sigset_t = core::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGXFSZ);
            let mut pending: libc::sigset_t = core::mem::zeroed();
            if libc::sigpending(&mut pending) == 0 && libc::sigismember(&pending, libc::SIGXFSZ) == 1 {
                let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
                let saved = errno();
                libc::sigtimedwait(&set, core::ptr::null_mut(), &zero);
                set_errno(saved);
            }
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, core::ptr::null_mut());
        }
    }
}

/// The C library's `sigaction`, found once past the preload library's
/// interposer (which would otherwise route the runtime's own calls back
/// to itself); 0 until resolved.
static REAL_SIGACTION: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

type SigactionFn = unsafe extern "C" fn(i32, *const libc::sigaction, *mut libc::sigaction) -> i32;

fn real_sigaction() -> Option<SigactionFn> {
    use core::sync::atomic::Ordering;
    let mut f = REAL_SIGACTION.load(Ordering::Acquire);
    if f == 0 {
        // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT from this
        // object finds the C library's definition. Resolved at start-up,
        // before any handler of ours can run.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, c"sigaction".as_ptr()) } as usize;
        REAL_SIGACTION.store(f, Ordering::Release);
    }
    // SAFETY: a non-null address dlsym gave for `sigaction`.
    (f != 0).then(|| unsafe { core::mem::transmute::<usize, SigactionFn>(f) })
}

/// `sigaction(2)` through the C library, never through the interposer.
///
/// # Safety
/// `act` and `old` are null or valid.
pub unsafe fn sigaction_raw(sig: i32, act: *const libc::sigaction, old: *mut libc::sigaction) -> i32 {
    match real_sigaction() {
        // SAFETY: the caller's pointers, as sigaction(2) takes them.
        Some(f) => unsafe { f(sig, act, old) },
        // SAFETY: the caller's pointers, as sigaction(2) takes them (no
        // interposer found: the C library's own).
        None => unsafe { libc::sigaction(sig, act, old) },
    }
}

/// [`sigaction_raw`] with references.
pub fn sigaction(sig: i32, act: Option<&libc::sigaction>, old: Option<&mut libc::sigaction>) -> Result<(), i32> {
    let a = act.map_or(core::ptr::null(), |a| a as *const libc::sigaction);
    let o = old.map_or(core::ptr::null_mut(), |o| o as *mut libc::sigaction);
    // SAFETY: null or valid references.
    if unsafe { sigaction_raw(sig, a, o) } == 0 {
        Ok(())
    } else {
        Err(errno())
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

/// The soft limit of resource `res` (`RLIMIT_AS`, `RLIMIT_DATA`) in
/// bytes, when there is one.
pub fn soft_limit(res: libc::__rlimit_resource_t) -> Option<u64> {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct we own.
    if unsafe { libc::getrlimit(res, &mut r) } != 0 || r.rlim_cur == libc::RLIM_INFINITY || r.rlim_cur == 0 {
        return None;
    }
    Some(r.rlim_cur)
}

/// The soft `RLIMIT_AS` in bytes, when there is one.
pub fn address_space_limit() -> Option<u64> {
    soft_limit(libc::RLIMIT_AS)
}

/// The page size (from the auxiliary vector; 4096 if it makes no sense).
pub fn page_size() -> u32 {
    // SAFETY: getauxval has no preconditions.
    let p = unsafe { libc::getauxval(libc::AT_PAGESZ) } as u32;
    if p.is_power_of_two() && p >= 512 {
        p
    } else {
        4096
    }
}

/// Unblocks `sig` for the calling thread.
pub fn unblock_signal(sig: i32) {
    // SAFETY: a sigset of one signal, built and used on this stack.
    unsafe {
        let mut set: libc::sigset_t = core::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, core::ptr::null_mut());
    }
}

/// Gives the calling thread an alternate signal stack of `len` bytes (a
/// mapping of its own that stays for the life of the process) when it has
/// none.
pub fn alternate_stack_if_none(len: usize) {
    // SAFETY: an all-zero stack_t is a valid out-parameter.
    let mut cur: libc::stack_t = unsafe { core::mem::zeroed() };
    // SAFETY: sigaltstack with a null new stack only reads the current one.
    if unsafe { libc::sigaltstack(core::ptr::null(), &mut cur) } != 0 || cur.ss_flags & libc::SS_DISABLE == 0 {
        return;
    }
    let Ok(p) = mmap_anon(len) else { return };
    let st = libc::stack_t { ss_sp: p.cast(), ss_flags: 0, ss_size: len };
    // SAFETY: a fresh mapping of `len` bytes that is never unmapped.
    unsafe { libc::sigaltstack(&st, core::ptr::null_mut()) };
}

// --- owned mappings --------------------------------------------------------------

/// Memory of the runtime's own, mapped from the kernel (never the tracked
/// heap) and recorded as the runtime's (never a root); unmapped when
/// dropped.
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a Mapping owns its range like a Box owns its allocation; the
// runtime hands one to one user at a time (the dumper holds its scratch
// under its spin flag).
unsafe impl Send for Mapping {}

impl Mapping {
    /// `len` bytes of private anonymous memory, zeroed.
    pub fn anon(len: usize) -> Result<Mapping, i32> {
        map(len, libc::MAP_PRIVATE).map(|ptr| Mapping { ptr, len })
    }

    /// `len` bytes of anonymous memory shared with forked children, zeroed.
    pub fn shared(len: usize) -> Result<Mapping, i32> {
        map(len, libc::MAP_SHARED).map(|ptr| Mapping { ptr, len })
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes, alive while `self` is.
        unsafe { core::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The bytes, to write.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; `&mut self` makes the view unique.
        unsafe { core::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// The mapping as `T`s, as many as fit.
    ///
    /// # Safety
    /// Every bit pattern the mapping may hold (zeros, or `T`s written
    /// before) is a valid `T`, and `T` needs at most page alignment.
    pub unsafe fn typed_mut<T: Copy>(&mut self) -> &mut [T] {
        // SAFETY: page-aligned memory of `len` bytes, unique through
        // `&mut self`; the caller vouches for T's bit patterns.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.cast::<T>(), self.len / core::mem::size_of::<T>().max(1)) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ours (made by `map`), and no view outlives `self`.
        unsafe { munmap(self.ptr, self.len) };
    }
}

// --- the rest of the C library the runtime uses ---------------------------------------

/// `sched_yield(2)`.
pub fn yield_now() {
    // SAFETY: no arguments, no preconditions.
    unsafe { libc::sched_yield() };
}

/// `abort(3)`: the process ends with SIGABRT.
pub fn abort() -> ! {
    // SAFETY: no arguments; never returns.
    unsafe { libc::abort() }
}

/// `getppid(2)`.
pub fn getppid() -> u32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::getppid() as u32 }
}

/// The calling thread's `pthread_t`.
pub fn pthread_self() -> u64 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::pthread_self() as u64 }
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

/// The value of environment variable `name`, as the C library holds it
/// (read in place: nothing is copied or allocated).
pub fn getenv(name: &CStr) -> Option<&'static [u8]> {
    // SAFETY: getenv with a NUL-terminated name; the result, when not
    // null, is a NUL-terminated string in the environment block, which
    // the runtime never changes.
    unsafe {
        let p = libc::getenv(name.as_ptr());
        (!p.is_null()).then(|| CStr::from_ptr(p).to_bytes())
    }
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

/// Names the calling thread (at most 15 bytes show).
pub fn set_thread_name(name: &CStr) {
    // SAFETY: PR_SET_NAME with a NUL-terminated name.
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
}

/// `pthread_atfork(3)`.
pub fn at_fork(prepare: extern "C" fn(), parent: extern "C" fn(), child: extern "C" fn()) {
    // SAFETY: registering plain extern "C" functions that live as long as
    // the process.
    unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
}

/// A thread running `f(arg)` on `stack` (`len` bytes the caller mapped and
/// keeps for the process's life) or on one of `len` bytes the C library
/// maps when `stack` is null, started with every signal blocked (the
/// program's process-directed signals must reach its own threads). True
/// when it started.
pub fn spawn_thread(stack: *mut u8, len: usize, f: extern "C" fn(*mut libc::c_void) -> *mut libc::c_void, arg: *mut libc::c_void) -> bool {
    // SAFETY: a zeroed attr is initialised by pthread_attr_init; the stack,
    // when given, is the caller's mapping of `len` bytes that outlives the
    // thread; the signal mask is restored before returning.
    unsafe {
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        libc::pthread_attr_init(&mut attr);
        if stack.is_null() {
            libc::pthread_attr_setstacksize(&mut attr, len);
        } else {
            libc::pthread_attr_setstack(&mut attr, stack.cast(), len);
        }
        let mut all: libc::sigset_t = core::mem::zeroed();
        let mut old: libc::sigset_t = core::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let mut tid: libc::pthread_t = 0;
        let r = libc::pthread_create(&mut tid, &attr, f, arg);
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut());
        libc::pthread_attr_destroy(&mut attr);
        r == 0
    }
}

/// A signal set holding `sigs`, or every signal when `all`.
pub fn sigset(all: bool, sigs: &[i32]) -> libc::sigset_t {
    // SAFETY: a zeroed sigset_t initialised by sigemptyset/sigfillset
    // before it is added to.
    unsafe {
        let mut s: libc::sigset_t = core::mem::zeroed();
        if all {
            libc::sigfillset(&mut s);
        } else {
            libc::sigemptyset(&mut s);
        }
        for &g in sigs {
            libc::sigaddset(&mut s, g);
        }
        s
    }
}

/// A zeroed `sigaction` (no handler, no flags, empty mask) to fill in.
pub fn empty_sigaction() -> libc::sigaction {
    // SAFETY: all-zero is a valid sigaction (SIG_DFL, no flags).
    let mut sa: libc::sigaction = unsafe { core::mem::zeroed() };
    sa.sa_mask = sigset(false, &[]);
    sa
}

/// A symbol of the loaded objects (`RTLD_DEFAULT`, or the next one after
/// the caller's object with `next`); null when there is none.
pub fn dlsym(name: &CStr, next: bool) -> *mut libc::c_void {
    let handle = if next { libc::RTLD_NEXT } else { libc::RTLD_DEFAULT };
    // SAFETY: dlsym with a NUL-terminated name.
    unsafe { libc::dlsym(handle, name.as_ptr()) }
}

/// A thread-specific data key whose destructor is `dtor`.
pub fn thread_key(dtor: extern "C" fn(*mut libc::c_void)) -> Option<libc::pthread_key_t> {
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: pthread_key_create writes the key.
    (unsafe { libc::pthread_key_create(&mut key, Some(dtor)) } == 0).then_some(key)
}

/// Sets this thread's value of `key` (so its destructor runs at exit).
pub fn set_thread_key(key: libc::pthread_key_t, value: usize) {
    // SAFETY: a key made by `thread_key`; the value is a plain number.
    unsafe { libc::pthread_setspecific(key, value as *const libc::c_void) };
}

/// Calls `f` for each loaded object (`dl_iterate_phdr(3)`), with `data`.
///
/// # Safety
/// `f` is safe to call with the C library's `dl_phdr_info` and `data`.
pub unsafe fn for_each_object(f: unsafe extern "C" fn(*mut libc::dl_phdr_info, usize, *mut libc::c_void) -> i32, data: *mut libc::c_void) {
    // SAFETY: the caller's callback and data.
    unsafe { libc::dl_iterate_phdr(Some(f), data) };
}

/// For threads without TLS (the dump's writer thread): no `errno`, the
/// kernel's result (negative errno) as it is.
/// A raw system call with four arguments (pass 0 for those it does not
/// take: FUTEX_WAIT reads its fourth, the timeout, and a null one waits
/// without a limit).
///
/// # Safety
/// A system call with these arguments must be valid.
pub unsafe fn raw_syscall4(n: i64, a: u64, b: u64, c: u64, d: u64) -> i64 {
    let r: i64;
    // SAFETY: the caller guarantees the call; `syscall` clobbers rcx and
    // r11, declared; the fourth argument goes in r10.
    unsafe {
        core::arch::asm!("syscall", inlateout("rax") n => r, in("rdi") a, in("rsi") b, in("rdx") c, in("r10") d,
            lateout("rcx") _, lateout("r11") _, options(nostack));
    }
    r
}

/// Starts `f(arg)` as a raw thread of this process (`clone(2)` sharing
/// everything a thread shares) on the stack ending at `stack_top`, with
/// every signal blocked (glibc's own included): the kernel writes its id
/// to `tid` and clears it when the thread exits. True when it started.
///
/// # Safety
/// `stack_top` ends a mapping no one else uses while the thread runs; `f`
/// uses no TLS (none is set up) and only raw system calls; `tid` stays
/// valid as long as the thread.
pub unsafe fn clone_thread(f: extern "C" fn(*mut libc::c_void) -> i32, stack_top: *mut u8, arg: *mut libc::c_void, tid: *mut i32) -> bool {
    let flags = libc::CLONE_VM
        | libc::CLONE_FS
        | libc::CLONE_FILES
        | libc::CLONE_SIGHAND
        | libc::CLONE_THREAD
        | libc::CLONE_SYSVSEM
        | libc::CLONE_PARENT_SETTID
        | libc::CLONE_CHILD_CLEARTID;
    // The thread inherits the signal mask in force at the clone: every
    // signal blocked, glibc's own included (so the raw system call, not
    // pthread_sigmask, which leaves those open); restored here at once.
    let all = u64::MAX;
    let mut old = 0u64;
    // SAFETY: rt_sigprocmask with 8-byte kernel sigsets we own.
    unsafe { raw_syscall4(libc::SYS_rt_sigprocmask, libc::SIG_SETMASK as u64, &all as *const u64 as u64, &mut old as *mut u64 as u64, 8) };
    // SAFETY: the caller's stack, function and tid word.
    let r = unsafe { libc::clone(f, stack_top.cast(), flags, arg, tid, core::ptr::null_mut::<libc::c_void>(), tid) };
    // SAFETY: as above, restoring the mask read there.
    unsafe { raw_syscall4(libc::SYS_rt_sigprocmask, libc::SIG_SETMASK as u64, &old as *const u64 as u64, 0, 8) };
    r > 0
}

/// The calling thread's thread pointer (fs base).
pub fn fs_base() -> u64 {
    let mut v: u64 = 0;
    // SAFETY: ARCH_GET_FS writes the fs base into `v`.
    unsafe { libc::syscall(libc::SYS_arch_prctl, 0x1003, &mut v as *mut u64) };
    v
}
