//! Start-up, before `main`: fork handlers, the exit dump, the helper
//! thread with its pipe, the dump signal and the fatal signals.

use crate::sites::unwind;
use crate::state::{state, STATE};
use crate::stop::guard;
use crate::stop::stw;
use crate::stop::stw::STATIC_TLS;
use crate::sys;
use crate::trigger::helper_pipe::{HELPER_PID, SIGNAL_PIPE};
use crate::trigger::{__cxa_atexit, heapdump_rt_at_exit, helper_main, on_dump_signal};
use crate::trigger::{fatal, limit};
use core::sync::atomic::Ordering;

extern "C" fn before_fork() {
    STATE.table.lock_all();
    STATE.sites.lock_all();
}

extern "C" fn after_fork() {
    // SAFETY: taken by before_fork in this thread (parent) or inherited
    // from it (child).
    unsafe {
        STATE.sites.unlock_all();
        STATE.table.unlock_all();
    }
}

extern "C" fn after_fork_child() {
    after_fork();
    STATE.table.free_stripes_after_fork();
    // The helper thread stayed in the parent: the child's triggers work
    // without it (see `trigger`).
    crate::trigger::forked();
    // Except the schedule of `--every`, which needs a thread to keep it:
    // a child that outlives its fork (a pre-fork server's worker) gets a
    // helper of its own, and its own series (`<stem>.<pid>.<n>`). Only
    // when asked for: otherwise a child stays as the program made it.
    // The dump signal, fatal signals and limits then go through it too,
    // as in the parent. (glibc has released malloc's locks and ours are
    // released above: what `pthread_create` allocates is the runtime's.)
    if STATE.config().every_ms != 0 {
        let _internal = guard::Internal::new();
        start_helper();
    }
}

// The exit handler `atexit` calls: straight into the register capture (see
/// Runs before `main` (from `.init_array`): fork handlers, the exit dump,
/// the dump signal and its helper thread.
extern "C" fn start() {
    let st = state();
    let c = *st.config();
    let _internal = guard::Internal::new();
    sys::stderr::remember_stderr();
    sys::at_fork(before_fork, after_fork, after_fork_child);
    unwind::init();
    stw::find_tid_offset();
    read_static_tls_size();
    if c.at_exit || c.signal != 0 || c.threshold != 0 {
        // Registered with no DSO handle: `atexit` from the preload library
        // would tie the handler to it, and glibc would run it from the
        // loader's finalisation (`_dl_fini`, `__cxa_finalize`), whose frames
        // hold stale words memcheck never sees. This way it runs from
        // `__run_exit_handlers` itself, after every destructor (the loader's
        // handler was registered after this one), with the exiting thread's
        // stack as memcheck scans it at exit. The runtime is never unloaded.
        // SAFETY: registering a function that lives as long as the process.
        unsafe { __cxa_atexit(heapdump_rt_at_exit, core::ptr::null_mut(), core::ptr::null_mut()) };
    }
    limit::init(c.near_limit);
    if (c.signal != 0 || c.on_fatal || limit::armed() || c.every_ms != 0) && start_helper() {
        if c.signal != 0 {
            let mut sa = sys::empty_sigaction();
            sa.sa_sigaction = on_dump_signal as *const () as usize;
            // SA_SIGINFO: a process without the helper (a forked child)
            // dumps in the handler, with the interrupted registers.
            sa.sa_flags = libc::SA_RESTART | libc::SA_SIGINFO;
            // No stop parks the thread in the handler (the helper's stop
            // may come before it returns): see `stw::stop_signals`.
            sa.sa_mask = stw::stop_signals();
            // SAFETY: a valid action, no old one asked for.
            unsafe { sys::sigaction_raw(c.signal, &sa, core::ptr::null_mut()) };
        }
        if c.on_fatal {
            fatal::install();
        }
    }
}

/// The size of the static TLS area below each thread pointer, from glibc's
/// loader (`_dl_get_tls_static_info`), when it says.
fn read_static_tls_size() {
    let f = sys::dlsym(c"_dl_get_tls_static_info", false);
    if f.is_null() {
        return;
    }
    // SAFETY: glibc's `_dl_get_tls_static_info(size_t *size, size_t *align)`.
    let f: extern "C" fn(*mut usize, *mut usize) = unsafe { core::mem::transmute(f) };
    let (mut size, mut align) = (0usize, 0usize);
    f(&mut size, &mut align);
    if size > 0 && size < (64 << 20) {
        STATIC_TLS.store(size as u64, Ordering::Relaxed);
    }
}

/// Starts the helper thread and its pipe; true when it runs.
fn start_helper() -> bool {
    let Ok((rfd, wfd)) = sys::pipe_nonblocking_writer() else { return false };
    HELPER_PID.store(sys::getpid(), Ordering::Release);
    SIGNAL_PIPE.store((u64::from(rfd as u32) << 32) | u64::from(wfd as u32), Ordering::Release);
    // The helper's stack is the runtime's own mapping: never a root, and
    // glibc puts the thread descriptor at its top, which tells the
    // descriptor's size (see stw::tcb_layout). It lives as long as the
    // process.
    const HELPER_STACK: usize = 1 << 20;
    let stack = sys::mmap_anon(HELPER_STACK).unwrap_or(core::ptr::null_mut());
    let end = if stack.is_null() { core::ptr::null_mut() } else { stack.wrapping_add(HELPER_STACK) };
    // The helper starts with every signal blocked: the program's
    // process-directed signals (SIGALRM of a timer, SIGCHLD, SIGINT) must
    // reach the program's own threads, never run its handlers on the
    // runtime's thread. (glibc keeps its internal signals open.)
    if !sys::spawn_thread(stack, HELPER_STACK, helper_main, end.cast()) {
        return false;
    }
    // The helper is the runtime's, not the program's: wait (at most 1 s)
    // until it has said so, so that no dump counts it.
    let deadline = sys::monotonic_ns() + 1_000_000_000;
    while !stw::runtime_thread_started() && sys::monotonic_ns() < deadline {
        sys::yield_now();
    }
    true
}

#[used]
#[link_section = ".init_array"]
static START: extern "C" fn() = start;
