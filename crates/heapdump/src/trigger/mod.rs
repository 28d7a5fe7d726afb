//! When the runtime dumps by itself: a threshold of live bytes, a memory
//! limit near, a signal (through the helper thread and its pipe), a fatal
//! signal, the program's exit.
//!
//! In a forked child there is no helper thread (`fork` copies only the
//! thread that called it), and none is started, except with `--every`
//! (`HEAPDUMP_EVERY`), whose schedule needs one (`startup`'s fork
//! handler starts the child's own): a thread the program did not make
//! would change it (a worker that `unshare`s or counts its threads, a
//! child that only execs). Each trigger works without one, on the thread
//! concerned, and the dump is always the dumping process's own:
//! - at exit: as anywhere, on the exiting thread; the parent's pending
//!   requests are not waited for (`forked`);
//! - the threshold: as anywhere, on the allocating thread;
//! - near the limit: the allocating thread looks at the limits each time
//!   the heap has grown by the step (the helper's look every 100 ms is
//!   missing: memory the heap does not count is seen at the next step);
//! - the dump signal and the fatal signals: the handler dumps on the
//!   thread it interrupted, with that thread's registers; inside the
//!   tracker (which may hold the locks a dump takes) the signal is raised
//!   again as the thread leaves it (`guard::defer_signal`).
//!
//! The room owns the when and the where: this file (threshold, near
//! limit, signal, exit), `fatal` (the fatal signals' handler), `limit`
//! (the memory limits), `helper_pipe` (the helper thread's pipe: how a
//! handler or an allocation asks the helper for a dump), `output` (the
//! public dump calls, the dump files' names) and `report` (what is said
//! about each dump, on stderr or to `heapdump run`). It may touch `dump`
//! (to write one), `state` (the one global state), `stop` and `sys`.

pub(crate) mod fatal;
pub(crate) mod helper_pipe;
pub(crate) mod limit;
pub(crate) mod output;
pub(crate) mod report;

use crate::dump::outcome::DumpError;
use crate::state::{State, STATE};
use crate::stop::guard;
use crate::stop::stw;
use crate::trigger::helper_pipe::{
    ask_helper, ask_helper_for_dump, helper_here, ASK_CHECK, ASK_DUMP, ASK_FATAL, SIGNALS_PENDING, SIGNAL_PIPE,
};
use crate::trigger::output::{auto_dump, Why, AUTO_DUMPS};
use crate::{sys, Reason};
use core::sync::atomic::Ordering;
use heapdump_format::{LimitInfo, SignalInfo};

pub(crate) fn threshold_crossed(st: &State, live: u64) {
    // The near-limit check: the helper looks at the limits (once per mark),
    // or this thread where there is no helper (a forked child).
    let check = st.check_mark.load(Ordering::Relaxed);
    if live >= check && st.check_mark.compare_exchange(check, u64::MAX, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
        refresh_marks(st);
        if helper_here() {
            ask_helper(ASK_CHECK);
        } else {
            near_limit_check(false);
        }
    }
    let step = st.config().threshold;
    let cur = st.user_mark.load(Ordering::Relaxed);
    if live < cur || step == 0 {
        return;
    }
    // Next step above the current live size; only the thread that moves
    // the threshold dumps.
    let next = (live / step + 1).saturating_mul(step);
    if st.user_mark.compare_exchange(cur, next, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
        refresh_marks(st);
        let regs = stw::current_regs();
        auto_dump(st, &Why::plain(Reason::Threshold), &regs, false);
    }
}

/// The allocation path's one comparison: the lower of the two marks. (A
/// race may leave it low for a moment: one more call of the cold path.)
pub(crate) fn refresh_marks(st: &State) {
    let m = st.user_mark.load(Ordering::Acquire).min(st.check_mark.load(Ordering::Acquire));
    st.next_threshold.store(m, Ordering::Release);
}

/// Looks at the memory limits (on the helper thread, or on the allocating
/// thread where there is none) and dumps when one is near; then sets the
/// live size at which to look again.
pub(crate) fn near_limit_check(on_helper: bool) {
    let (due, step) = limit::check();
    if let Some(r) = due {
        // The dump maps memory of its own: the sorted index and its
        // directory (about 26 bytes per live allocation) and 1.5 MiB of
        // buffers. Taken from what the limit leaves, it must not be what
        // brings the program to it: skipped (and said) past half of that.
        let need = STATE.table.live_count().saturating_mul(26).saturating_add(3 << 19);
        if need > r.bytes.saturating_sub(r.used) / 2 {
            let e = DumpError::Os { what: "skipped: the dump would take more than half the memory the limit leaves", errno: libc::ENOMEM };
            report::failed(Reason::NearLimit, b"", &e);
        } else {
            let regs = stw::current_regs();
            let l = limit::last();
            let why =
                Why { reason: Reason::NearLimit, signal: None, limit: Some(LimitInfo { kind: l.kind, bytes: l.bytes, used: l.used }) };
            auto_dump(&STATE, &why, &regs, on_helper);
        }
    }
    let (_, live) = STATE.table.live();
    STATE.check_mark.store(live.saturating_add(step), Ordering::Release);
    refresh_marks(&STATE);
}

// `stw::with_entry_regs`), so that no Rust frame of the runtime's lies
// between `exit`'s frames and the stack the dump scans.
core::arch::global_asm!(
    ".text",
    ".p2align 4",
    ".globl heapdump_rt_at_exit",
    ".hidden heapdump_rt_at_exit",
    ".type heapdump_rt_at_exit,@function",
    "heapdump_rt_at_exit:",
    ".cfi_startproc",
    "xor edi, edi",
    "lea rsi, [rip + {body}]",
    "jmp heapdump_rt_with_entry_regs",
    ".cfi_endproc",
    ".size heapdump_rt_at_exit, .-heapdump_rt_at_exit",
    body = sym at_exit,
);

unsafe extern "C" {
    // Declared safe: its arguments are ignored and it is only ever called
    // by `exit` (the assembly above).
    pub(crate) safe fn heapdump_rt_at_exit(arg: *mut core::ffi::c_void);
    pub(crate) fn __cxa_atexit(
        f: extern "C" fn(*mut core::ffi::c_void),
        arg: *mut core::ffi::c_void,
        dso: *mut core::ffi::c_void,
    ) -> core::ffi::c_int;
}

/// Registered whatever `HEAPDUMP_AT_EXIT` says: a dump the signal thread
/// is writing (it resumed the program, which went on to exit; or a forked
/// writer it waits for) is finished and reported, not cut off by `exit`.
/// Then the exit dump, when configured, with the registers `exit` had.
pub(crate) extern "C" fn at_exit(regs: *const stw::Regs, _: *mut core::ffi::c_void) {
    // Bounded (10 minutes: a compact dump of tens of millions of blocks
    // takes minutes) so that a stuck writer cannot hold the exit forever.
    // Signals are answered only by a helper of this process's own: a child
    // that was not told of its fork (a raw `clone`) has none to wait for.
    let helper = helper_here();
    for _ in 0..600_000 {
        if AUTO_DUMPS.load(Ordering::Acquire) == 0 && (!helper || SIGNALS_PENDING.load(Ordering::Acquire) == 0) {
            break;
        }
        sys::sleep_ms(1);
    }
    if STATE.config().at_exit {
        // SAFETY: the capture's array, alive for this call.
        let regs = unsafe { &*regs };
        auto_dump(&STATE, &Why::plain(Reason::Exit), regs, false);
    }
}

/// The dump signal's handler (`SA_SIGINFO`): notes the cause and asks the
/// helper; where there is none (a forked child), dumps on this thread.
pub(crate) extern "C" fn on_dump_signal(sig: i32, _info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let saved = sys::errno();
    if helper_here() {
        fatal::set_cause(sig, 0, sys::gettid(), 0, 0);
        ask_helper_for_dump(ASK_DUMP);
    } else if !guard::defer_signal(sig) {
        let regs = if ctx.is_null() {
            stw::current_regs()
        } else {
            // SAFETY: for an SA_SIGINFO handler the kernel passes a ucontext_t.
            stw::regs_from_gregs(&unsafe { &*(ctx as *const libc::ucontext_t) }.uc_mcontext.gregs)
        };
        let cause = SignalInfo { signal: sig as u32, code: 0, tid: sys::gettid(), address: 0, sender: 0 };
        dump_on_this_thread(Reason::Signal, Some(cause), &regs);
    }
    sys::set_errno(saved);
}

/// A signal's dump taken by the thread the signal interrupted, in its
/// handler (a process without a helper: a forked child). `regs` are the
/// interrupted ones: its stack is a root from there up, the handler's
/// frames below are not. The caller has checked that the thread is not
/// inside the tracker; signals arriving during the dump wait for its end
/// (`guard::defer_signal`), and other threads are stopped as for any dump.
pub(crate) fn dump_on_this_thread(reason: Reason, signal: Option<SignalInfo>, regs: &stw::Regs) {
    let _in = guard::Enter::new();
    auto_dump(&STATE, &Why { reason, signal, limit: None }, regs, false);
}

/// In a forked child, from the `fork` handler (one thread, nothing
/// allocated): no helper and none of its pending requests, no dump under
/// way (one the parent's helper was starting is the parent's), no fatal
/// signal being handled; the limits are looked at again at the next
/// allocation (a look the parent had asked for is not the child's).
pub(crate) fn forked() {
    helper_pipe::forked();
    AUTO_DUMPS.store(0, Ordering::Release);
    fatal::forked();
    stw::forked();
    if limit::armed() {
        STATE.check_mark.store(0, Ordering::Release);
        refresh_marks(&STATE);
    }
}

pub(crate) extern "C" fn helper_main(stack_end: *mut libc::c_void) -> *mut libc::c_void {
    let _ = std::panic::catch_unwind(|| {
        sys::set_thread_name(c"heapdump");
        stw::register_runtime_thread(stack_end as u64);
        let rfd = (SIGNAL_PIPE.load(Ordering::Relaxed) >> 32) as i32;
        let mut b = [0u8; 64];
        let near = limit::armed();
        if near {
            near_limit_check(true);
        }
        // The schedule of `--every`: the next dump's time, on the
        // monotonic clock (a dump that took longer than the period is
        // followed by the next one at once, not by a burst).
        let every_ns = STATE.config().every_ms.saturating_mul(1_000_000);
        let mut next = sys::monotonic_ns().saturating_add(every_ns);
        loop {
            if every_ns > 0 && sys::monotonic_ns() >= next {
                let regs = stw::current_regs();
                auto_dump(&STATE, &Why::plain(Reason::Every), &regs, true);
                next = next.saturating_add(every_ns).max(sys::monotonic_ns());
                continue;
            }
            // Near-limit dumps: the limits are looked at every 100 ms too
            // (memory the heap does not count grows as well).
            let until_next =
                if every_ns > 0 { next.saturating_sub(sys::monotonic_ns()).div_ceil(1_000_000).min(i32::MAX as u64) as i32 } else { -1 };
            let wait = match (near, every_ns > 0) {
                (true, true) => until_next.min(100),
                (true, false) => 100,
                (false, true) => until_next,
                (false, false) => -1,
            };
            if wait >= 0 && sys::poll_in(rfd, wait) == Ok(false) {
                if near {
                    near_limit_check(true);
                }
                continue;
            }
            match sys::read(rfd, &mut b) {
                Ok(0) | Err(_) => return,
                Ok(got) => {
                    let asked = &b[..got];
                    if asked.contains(&ASK_CHECK) {
                        near_limit_check(true);
                    }
                    // The dumps asked for (a check is not one).
                    let n = asked.iter().filter(|&&x| x != ASK_CHECK).count();
                    if n == 0 {
                        continue;
                    }
                    let regs = stw::current_regs();
                    let fatal = asked.contains(&ASK_FATAL);
                    let reason = if fatal && fatal::is_crash() { Reason::Crash } else { Reason::Signal };
                    auto_dump(&STATE, &Why { reason, signal: fatal::cause(), limit: None }, &regs, true);
                    fatal::clear_cause();
                    if fatal {
                        fatal::dump_done();
                    }
                    // The signals read were all answered by this dump.
                    SIGNALS_PENDING.fetch_sub(n as u64, Ordering::AcqRel);
                }
            }
        }
    });
    core::ptr::null_mut()
}
