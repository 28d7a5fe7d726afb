//! Signals: dispositions through the C library's own `sigaction`, masks,
//! the alternate stack, signals sent to a thread.

// The one room where the C library is called (see `sys`).
#![allow(clippy::disallowed_methods)]

use super::*;

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
