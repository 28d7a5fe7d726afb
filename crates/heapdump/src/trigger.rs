//! When the runtime dumps by itself: a threshold of live bytes, a memory
//! limit near, a signal (through the helper thread and its pipe), a fatal
//! signal, the program's exit.

use crate::helper::{ask_helper, ask_helper_for_dump, ASK_CHECK, ASK_DUMP, ASK_FATAL, SIGNALS_PENDING, SIGNAL_PIPE};
use crate::outcome::DumpError;
use crate::output::{auto_dump, Why, AUTO_DUMPS};
use crate::state::{State, STATE};
use crate::{fatal, limit, report, stw, sys, Reason};
use core::sync::atomic::Ordering;
use heapdump_format::LimitInfo;

pub(crate) fn threshold_crossed(st: &State, live: u64) {
    // The near-limit check: the helper looks at the limits (once per mark).
    let check = st.check_mark.load(Ordering::Relaxed);
    if live >= check && st.check_mark.compare_exchange(check, u64::MAX, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
        refresh_marks(st);
        ask_helper(ASK_CHECK);
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

/// Looks at the memory limits (on the helper thread) and dumps when one is
/// near; then sets the live size at which to look again.
pub(crate) fn near_limit_check() {
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
            auto_dump(&STATE, &why, &regs, true);
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
    for _ in 0..600_000 {
        if AUTO_DUMPS.load(Ordering::Acquire) == 0 && SIGNALS_PENDING.load(Ordering::Acquire) == 0 {
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

/// The dump signal's handler: notes the cause and asks the helper.
pub(crate) extern "C" fn on_dump_signal(sig: i32) {
    let saved = sys::errno();
    fatal::set_cause(sig, 0, sys::gettid(), 0, 0);
    ask_helper_for_dump(ASK_DUMP);
    sys::set_errno(saved);
}

pub(crate) extern "C" fn helper_main(stack_end: *mut libc::c_void) -> *mut libc::c_void {
    let _ = std::panic::catch_unwind(|| {
        sys::set_thread_name(c"heapdump");
        stw::register_runtime_thread(stack_end as u64);
        let rfd = (SIGNAL_PIPE.load(Ordering::Relaxed) >> 32) as i32;
        let mut b = [0u8; 64];
        let near = limit::armed();
        if near {
            near_limit_check();
        }
        loop {
            // Near-limit dumps: the limits are looked at every 100 ms too
            // (memory the heap does not count grows as well).
            if near && sys::poll_in(rfd, 100) == Ok(false) {
                near_limit_check();
                continue;
            }
            match sys::read(rfd, &mut b) {
                Ok(0) | Err(_) => return,
                Ok(got) => {
                    let asked = &b[..got];
                    if asked.contains(&ASK_CHECK) {
                        near_limit_check();
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
