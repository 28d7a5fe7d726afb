//! Threads and processes: ids, clocks, futexes, raw fork and clone,
//! thread creation and keys, limits, the environment, the loader.

// The one room where the C library is called (see `sys`).
#![allow(clippy::disallowed_methods)]

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

/// `fork(3)`, with the `atfork` handlers (the C library's allocator and
/// the runtime's own locks are left usable in the child): for the test
/// side only (`testing`'s check), never the dump path. 0 in the child.
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
pub fn fork() -> Result<u32, i32> {
    // SAFETY: fork has no memory-safety preconditions; the child's one
    // thread continues from here with a copy of the caller's memory.
    let r = unsafe { libc::fork() };
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
