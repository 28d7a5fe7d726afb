//! Every system call the runtime makes, in one module.
//!
//! Written by hand (no `std::fs`, no `nix`) because everything here must run
//! inside the traced process with the world stopped or inside the
//! allocator: no allocation, no locks, no panics. Each function is a thin,
//! async-signal-safe wrapper returning `Err(errno)`.

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

/// Anonymous mapping shared with forked children (results come back through it).
pub fn mmap_shared(len: usize) -> Result<*mut u8, i32> {
    map(len, libc::MAP_SHARED)
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
        // SAFETY: as above.
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
