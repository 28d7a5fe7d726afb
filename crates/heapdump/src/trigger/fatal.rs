//! Dumps at the moments programs die (`HEAPDUMP_ON_FATAL=1`, which
//! `heapdump run` sets unless `--no-on-fatal`).
//!
//! A signal that ends the program (SIGTERM, SIGINT, SIGHUP, SIGQUIT) or a
//! crash (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL) runs [`on_fatal`]: it
//! asks the runtime's helper thread for a dump and waits for it (the
//! helper stops every thread, this one included, as for the dump signal),
//! then gives the signal back: to the program's own handler when it has
//! one, else to the default action, so that the process ends as it would
//! have (status, core file). A signal the program ignores is left alone.
//!
//! The program's own handlers: one installed before start-up is kept and
//! called after the dump; one installed later goes through `sigaction` or
//! `signal`, which the preload library interposes ([`program_sigaction`]):
//! the program's action is recorded and ours stays in front. A Rust
//! program with `Tracked` has no interposer: a handler it installs
//! replaces ours, and that signal then dumps only at exit.
//!
//! A crash runs on an alternate signal stack (the main thread gets one if
//! it has none) so that a stack overflow is dumped too; the registers the
//! fault left are recorded, and the crashing thread is dumped with them
//! (its real stack, not the handler's). Written by hand: it runs in a
//! signal handler of someone else's process, allocation-free.

use crate::sys;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use heapdump_format::SignalInfo;

/// Signals that end a program; dumped with reason `signal`.
pub(crate) const ENDING: [i32; 4] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT];
/// Crashes; dumped with reason `crash`.
pub(crate) const CRASHES: [i32; 5] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGABRT, libc::SIGFPE, libc::SIGILL];

/// The program's own action for each signal we hold, as it set it (or
/// as it was at start-up), behind a sequence count: written by the
/// program's `sigaction` calls, read by the handler, which must not lock.
struct Actions {
    seq: AtomicU32,
    writing: AtomicBool,
    act: UnsafeCell<[libc::sigaction; 32]>,
}

// SAFETY: `act` is written only under `writing` with `seq` odd, and read
// only as a copy checked against `seq` (see `program_action`).
unsafe impl Sync for Actions {}

static PROGRAM: Actions = Actions {
    seq: AtomicU32::new(0),
    writing: AtomicBool::new(false),
    // SAFETY: an all-zero sigaction is SIG_DFL with no flags.
    act: UnsafeCell::new(unsafe { core::mem::zeroed() }),
};

/// Signals whose kernel disposition is ours (bit per signal).
static HELD: AtomicU64 = AtomicU64::new(0);
/// The signal being handled (0: none) and the thread handling it.
static FATAL: AtomicU32 = AtomicU32::new(0);
static FATAL_TID: AtomicU32 = AtomicU32::new(0);
/// Set by the helper when the dump for `FATAL` is finished.
static DONE: AtomicU32 = AtomicU32::new(0);

/// What the next signal dump records (its SIGNAL record).
static CAUSE_SIG: AtomicU32 = AtomicU32::new(0);
static CAUSE_CODE: AtomicU32 = AtomicU32::new(0);
static CAUSE_TID: AtomicU32 = AtomicU32::new(0);
static CAUSE_ADDR: AtomicU64 = AtomicU64::new(0);
static CAUSE_SENDER: AtomicU32 = AtomicU32::new(0);

fn bit(sig: i32) -> u64 {
    if (1..64).contains(&sig) {
        1 << sig
    } else {
        0
    }
}

/// Whether our handler holds `sig`.
pub(crate) fn held(sig: i32) -> bool {
    HELD.load(Ordering::Acquire) & bit(sig) != 0
}

/// The program's own action for `sig`.
pub(crate) fn program_action(sig: i32) -> libc::sigaction {
    let i = sig as usize;
    for _ in 0..1000 {
        let s = PROGRAM.seq.load(Ordering::Acquire);
        if s % 2 == 0 {
            // SAFETY: a copy of a plain struct; torn copies are discarded
            // by the sequence check.
            let a = unsafe { core::ptr::read_volatile(&(*PROGRAM.act.get())[i % 32]) };
            if PROGRAM.seq.load(Ordering::Acquire) == s {
                return a;
            }
        }
        core::hint::spin_loop();
    }
    // SAFETY: all-zero is SIG_DFL.
    unsafe { core::mem::zeroed() }
}

fn set_program_action(sig: i32, a: &libc::sigaction) {
    while PROGRAM.writing.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
        core::hint::spin_loop();
    }
    PROGRAM.seq.fetch_add(1, Ordering::AcqRel);
    // SAFETY: the only writer (under `writing`), readers check `seq`.
    unsafe { core::ptr::write_volatile(&mut (*PROGRAM.act.get())[sig as usize % 32], *a) };
    PROGRAM.seq.fetch_add(1, Ordering::AcqRel);
    PROGRAM.writing.store(false, Ordering::Release);
}

/// Installs the handler for every fatal signal the program does not
/// ignore, and an alternate stack for the calling (main) thread when it
/// has none. Run once, at start-up.
pub(crate) fn install() {
    let mut crash = false;
    for &sig in ENDING.iter().chain(CRASHES.iter()) {
        // SAFETY: a zeroed sigaction is a valid out-parameter.
        let mut old: libc::sigaction = unsafe { core::mem::zeroed() };
        if sys::sigaction(sig, None, Some(&mut old)).is_err() || old.sa_sigaction == libc::SIG_IGN {
            continue;
        }
        set_program_action(sig, &old);
        let is_crash = CRASHES.contains(&sig);
        // SAFETY: a zeroed sigaction, then filled: our handler, an empty
        // mask (the stop signal must reach a thread waiting in it).
        let mut sa: libc::sigaction = unsafe { core::mem::zeroed() };
        sa.sa_sigaction = on_fatal as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | if is_crash { libc::SA_ONSTACK } else { 0 };
        if sys::sigaction(sig, Some(&sa), None).is_ok() {
            HELD.fetch_or(bit(sig), Ordering::AcqRel);
            crash |= is_crash;
        }
    }
    if crash {
        // So that a stack overflow can still be dumped; the stack is the
        // runtime's own mapping (never a root).
        sys::alternate_stack_if_none(64 * 1024);
    }
}

/// The SIGNAL record of the next signal dump, when a signal asked for it.
pub(crate) fn cause() -> Option<SignalInfo> {
    let signal = CAUSE_SIG.load(Ordering::Acquire);
    (signal != 0).then(|| SignalInfo {
        signal,
        code: CAUSE_CODE.load(Ordering::Relaxed) as i32,
        tid: CAUSE_TID.load(Ordering::Relaxed),
        address: CAUSE_ADDR.load(Ordering::Relaxed),
        sender: CAUSE_SENDER.load(Ordering::Relaxed),
    })
}

/// Records what the next signal dump says (from a signal handler).
pub(crate) fn set_cause(signal: i32, code: i32, tid: u32, address: u64, sender: u32) {
    CAUSE_CODE.store(code as u32, Ordering::Relaxed);
    CAUSE_TID.store(tid, Ordering::Relaxed);
    CAUSE_ADDR.store(address, Ordering::Relaxed);
    CAUSE_SENDER.store(sender, Ordering::Relaxed);
    CAUSE_SIG.store(signal as u32, Ordering::Release);
}

/// Forgets the cause once its dump is written.
pub(crate) fn clear_cause() {
    CAUSE_SIG.store(0, Ordering::Release);
}

/// Whether the pending fatal signal is a crash (its dump's reason).
pub(crate) fn is_crash() -> bool {
    CRASHES.contains(&(FATAL.load(Ordering::Acquire) as i32))
}

/// In a forked child (from the `fork` handler, one thread): a fatal
/// signal the parent was handling is not the child's.
pub(crate) fn forked() {
    FATAL.store(0, Ordering::Release);
    FATAL_TID.store(0, Ordering::Release);
    DONE.store(0, Ordering::Release);
    clear_cause();
}

/// The helper finished the dump of the fatal signal.
pub(crate) fn dump_done() {
    DONE.store(1, Ordering::Release);
    sys::futex_wake_all(&DONE);
}

/// Waits (at most 10 minutes: a dump of tens of millions of blocks takes
/// minutes) for the dump of the fatal signal.
fn wait_done() {
    let deadline = sys::monotonic_ns() + 600_000_000_000;
    while DONE.load(Ordering::Acquire) == 0 && sys::monotonic_ns() < deadline {
        sys::futex_wait(&DONE, 0, 50_000_000);
    }
}

extern "C" fn on_fatal(sig: i32, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let saved = sys::errno();
    let me = sys::gettid();
    let crash = CRASHES.contains(&sig);
    // No helper in this process (a forked child): the dump is taken on
    // this thread, and so not inside the tracker. A signal sent there is
    // raised again as the thread leaves it; a fault there is given back
    // without a dump (returning would only fault again).
    let alone = !crate::trigger::helper_pipe::helper_here();
    let faulted = crash && !info.is_null() && {
        // SAFETY: the kernel's siginfo for an SA_SIGINFO handler.
        unsafe { (*info).si_code > 0 }
    };
    if alone && !faulted && crate::stop::guard::defer_signal(sig) {
        sys::set_errno(saved);
        return;
    }
    let (mut code, mut address, mut sender) = (0i32, 0u64, 0u32);
    if !info.is_null() {
        // SAFETY: the kernel's siginfo for an SA_SIGINFO handler; si_addr
        // is meaningful for a fault it raised, si_pid for a sent signal.
        unsafe {
            code = (*info).si_code;
            if crash && code > 0 {
                address = (*info).si_addr() as u64;
            }
            if code <= 0 {
                sender = (*info).si_pid() as u32;
            }
        }
    }
    match FATAL.compare_exchange(0, sig as u32, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            FATAL_TID.store(me, Ordering::Release);
            if crash && !ctx.is_null() {
                // SAFETY: for an SA_SIGINFO handler the kernel passes a
                // ucontext_t.
                let uc = unsafe { &*(ctx as *const libc::ucontext_t) };
                crate::stop::stw::note_crash(me, &crate::stop::stw::regs_from_gregs(&uc.uc_mcontext.gregs));
            }
            set_cause(sig, code, me, address, sender);
            if !alone {
                if crate::trigger::helper_pipe::request_fatal_dump() {
                    wait_done();
                }
            } else if !crate::stop::guard::inside() {
                let regs = if ctx.is_null() {
                    crate::stop::stw::current_regs()
                } else {
                    // SAFETY: for an SA_SIGINFO handler the kernel passes
                    // a ucontext_t.
                    crate::stop::stw::regs_from_gregs(&unsafe { &*(ctx as *const libc::ucontext_t) }.uc_mcontext.gregs)
                };
                let reason = if crash { heapdump_format::Reason::Crash } else { heapdump_format::Reason::Signal };
                crate::trigger::dump_on_this_thread(reason, cause(), &regs);
                clear_cause();
                dump_done();
            } else {
                // A fault inside the tracker: no dump; threads waiting for
                // one go on.
                dump_done();
            }
        }
        Err(_) if FATAL_TID.load(Ordering::Acquire) != me => wait_done(),
        // A fault while this thread handled one: give it back at once.
        Err(_) => {}
    }
    give_back(sig, info, ctx, crash, code);
    sys::set_errno(saved);
}

/// Hands the signal to the program's handler, or to the default action.
fn give_back(sig: i32, info: *mut libc::siginfo_t, ctx: *mut libc::c_void, crash: bool, code: i32) {
    let prog = program_action(sig);
    let h = prog.sa_sigaction;
    if h != libc::SIG_DFL && h != libc::SIG_IGN {
        if prog.sa_flags & libc::SA_RESETHAND != 0 {
            // SAFETY: all-zero is SIG_DFL.
            set_program_action(sig, &unsafe { core::mem::zeroed() });
        }
        // SAFETY: the program's own handler, called as the kernel would
        // have called it (with siginfo and context when SA_SIGINFO).
        unsafe {
            if prog.sa_flags & libc::SA_SIGINFO != 0 {
                let f: extern "C" fn(i32, *mut libc::siginfo_t, *mut libc::c_void) = core::mem::transmute(h);
                f(sig, info, ctx);
            } else {
                let f: extern "C" fn(i32) = core::mem::transmute(h);
                f(sig);
            }
        }
        if !crash && held(sig) {
            // The handler returned and the program goes on with it: the
            // next such signal dumps again.
            DONE.store(0, Ordering::Release);
            FATAL.store(0, Ordering::Release);
        }
        return;
    }
    if h == libc::SIG_IGN {
        return;
    }
    // The default action, ours out of the way.
    // SAFETY: all-zero is SIG_DFL with no flags.
    let dfl: libc::sigaction = unsafe { core::mem::zeroed() };
    let _ = sys::sigaction(sig, Some(&dfl), None);
    HELD.fetch_and(!bit(sig), Ordering::AcqRel);
    if crash && code > 0 && sig != libc::SIGABRT {
        // A fault: returning runs the faulting instruction again, which
        // now ends the process with the default action (and core file).
        return;
    }
    // Sent (or abort's): raise it again, unblocked, on this thread.
    sys::unblock_signal(sig);
    let _ = sys::tgkill(sys::gettid(), sig);
}

/// The program's `sigaction` (through the preload library's interposer):
/// for a signal our handler holds, the program's action is recorded (and
/// the previous one returned) while ours stays in front; setting SIG_IGN
/// gives the signal up. Anything else goes to the C library's.
///
/// # Safety
/// As `sigaction(2)`: `act` and `old` are null or valid.
pub(crate) unsafe fn program_sigaction(sig: i32, act: *const libc::sigaction, old: *mut libc::sigaction) -> i32 {
    if !held(sig) {
        // SAFETY: forwarded as given.
        return unsafe { sys::sigaction_raw(sig, act, old) };
    }
    if !old.is_null() {
        // SAFETY: the caller's out-parameter.
        unsafe { *old = program_action(sig) };
    }
    if !act.is_null() {
        // SAFETY: the caller's action.
        let a = unsafe { *act };
        // Ignored from now on, as the program asks: not dumped. Or the
        // default action set by its own handler of the signal just dumped
        // (to end with it, as servers that clean up do): the signal is
        // the kernel's again, and raising it now is not dumped twice.
        let handling = FATAL.load(Ordering::Acquire) == sig as u32;
        if a.sa_sigaction == libc::SIG_IGN || (a.sa_sigaction == libc::SIG_DFL && handling) {
            HELD.fetch_and(!bit(sig), Ordering::AcqRel);
            set_program_action(sig, &a);
            // SAFETY: forwarded as given.
            return unsafe { sys::sigaction_raw(sig, act, core::ptr::null_mut()) };
        }
        set_program_action(sig, &a);
    }
    0
}
