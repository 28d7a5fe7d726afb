//! Stopping the world: every other thread of the process suspended in a
//! signal handler, its registers recorded in a pre-mapped slot, until the
//! dump is written (the technique of conservative collectors such as
//! Boehm's).
//!
//! A thread inside the tracker when the signal arrives does not stop
//! there: the handler marks the stop pending and the thread parks as it
//! leaves the tracker, so no stopped thread ever holds a tracker lock. A
//! thread that blocks the signal, or does not answer within the time
//! limit, is reported as not stopped rather than waited for. The marking
//! and the parking on leaving live in `guard`: the two files are one
//! handshake (see there).

use crate::sys;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// Most threads a dump can stop.
pub const MAX_THREADS: usize = 8192;
/// How long to wait for threads to stop, in total.
pub const STOP_TIMEOUT_NS: u64 = 2_000_000_000;
/// How long to wait, beyond the others, for threads that blocked the stop
/// signal when they were signalled.
const BLOCKED_GRACE_NS: u64 = 100_000_000;

/// Registers as the format orders them: rax rbx rcx rdx rsi rdi rbp rsp
/// r8..r15 rip.
pub type Regs = [u64; 17];
/// Index of rsp in [`Regs`].
pub const RSP: usize = 7;

const SIGNALLED: u32 = 1;
const STOPPED: u32 = 2;
const GONE: u32 = 3;

/// One thread's place in a stop.
#[repr(C)]
pub struct Slot {
    /// Kernel thread id.
    pub tid: AtomicU32,
    state: AtomicU32,
    /// Registers when it stopped (written by the thread before STOPPED).
    regs: UnsafeCell<Regs>,
    /// Thread pointer (likewise).
    fs: UnsafeCell<u64>,
    /// The thread's name (from /proc, written by the stopper after the
    /// stop, so that a forked writer, which cannot see the parent's threads
    /// in its own /proc, has it too).
    name: UnsafeCell<([u8; 16], u8)>,
    /// For a thread that did not stop: its stack pointer while blocked in
    /// the kernel, 0 when unknown (likewise written by the stopper).
    blocked_sp: AtomicU64,
}

impl Slot {
    /// The stack pointer of a thread that did not stop, while it waits in
    /// a system call (0: unknown).
    pub fn blocked_sp(&self) -> u64 {
        self.blocked_sp.load(Ordering::Acquire)
    }

    /// Registers at the stop; meaningful only when [`Slot::stopped`].
    pub fn regs(&self) -> Regs {
        // SAFETY: written once by the thread before it published STOPPED
        // (release), read after the stopper saw STOPPED (acquire).
        unsafe { *self.regs.get() }
    }
    /// Thread pointer at the stop.
    pub fn fs(&self) -> u64 {
        // SAFETY: as in `regs`.
        unsafe { *self.fs.get() }
    }
    /// The thread's name.
    pub fn name(&self) -> ([u8; 16], u8) {
        // SAFETY: written by the stopper (this dump's thread) before it
        // reads it; nobody else writes it.
        unsafe { *self.name.get() }
    }
    /// Whether the thread stopped and its registers are valid.
    pub fn stopped(&self) -> bool {
        self.state.load(Ordering::Acquire) == STOPPED
    }
    /// Whether the thread exited during the stop.
    pub fn gone(&self) -> bool {
        self.state.load(Ordering::Acquire) == GONE
    }
}

static SLOTS: AtomicU64 = AtomicU64::new(0);
static NSLOTS: AtomicU32 = AtomicU32::new(0);
static ACTIVE: AtomicBool = AtomicBool::new(false);
static EPOCH: AtomicU32 = AtomicU32::new(0);
static ACKS: AtomicU32 = AtomicU32::new(0);
static RELEASE: AtomicU32 = AtomicU32::new(0);

/// The runtime's own long-lived thread (the signal helper): never stopped,
/// never counted as the program's, its stack and TLS never roots.
static RUNTIME_TID: AtomicU32 = AtomicU32::new(0);
static RUNTIME_SP: AtomicU64 = AtomicU64::new(0);
static RUNTIME_FS: AtomicU64 = AtomicU64::new(0);
/// glibc's thread descriptor (`struct pthread`): its size, measured on the
/// helper thread (whose stack the runtime maps itself, so the descriptor
/// sits at its top), and the offset of its `tid` field, found on the main
/// thread at start-up. 0 when unknown.
static TCB_SIZE: AtomicU64 = AtomicU64::new(0);
static TID_OFFSET: AtomicU64 = AtomicU64::new(0);

/// Called by the runtime's helper thread as it starts; `stack_end` is the
/// top of the stack the runtime mapped for it.
pub fn register_runtime_thread(stack_end: u64) {
    let here = 0u8;
    let fs = sys::fs_base();
    RUNTIME_SP.store(&here as *const u8 as u64, Ordering::Relaxed);
    RUNTIME_FS.store(fs, Ordering::Relaxed);
    if fs < stack_end && stack_end - fs < 16384 {
        TCB_SIZE.store(stack_end - fs, Ordering::Relaxed);
    }
    RUNTIME_TID.store(sys::gettid(), Ordering::Release);
}

/// Finds where glibc keeps a thread's id in its descriptor: the first
/// 4-byte word past the header that holds the calling thread's id (the
/// kernel clears it when the thread ends: `CLONE_CHILD_CLEARTID`).
pub fn find_tid_offset() {
    let fs = sys::fs_base();
    if fs == 0 || fs % 64 != 0 {
        return;
    }
    let me = sys::gettid();
    // The header (tcbhead_t) is at least 0x40 bytes; the descriptor is
    // smaller than a page in every glibc, and the thread pointer is 64-byte
    // aligned, so [fs, fs + 0x800) lies in the descriptor's own mapping.
    for off in (0x40..0x800u64).step_by(4) {
        // SAFETY: inside the calling thread's descriptor (see above), aligned.
        let v = unsafe { core::ptr::read_volatile((fs + off) as *const u32) };
        if v == me {
            TID_OFFSET.store(off, Ordering::Relaxed);
            return;
        }
    }
}

/// (size of glibc's thread descriptor, offset of its `tid`), 0 if unknown.
pub fn tcb_layout() -> (u64, u64) {
    (TCB_SIZE.load(Ordering::Relaxed), TID_OFFSET.load(Ordering::Relaxed))
}

/// In a forked child: the helper thread was not copied (its stack and
/// thread pointer stay known: they are the runtime's own mapping still).
pub fn forked() {
    RUNTIME_TID.store(0, Ordering::Release);
}

/// Whether the runtime's helper thread has registered itself.
pub fn runtime_thread_started() -> bool {
    RUNTIME_TID.load(Ordering::Acquire) != 0
}

/// An address on the runtime thread's stack and its thread pointer (0, 0
/// when there is none).
pub fn runtime_thread() -> (u64, u64) {
    (RUNTIME_SP.load(Ordering::Relaxed), RUNTIME_FS.load(Ordering::Relaxed))
}

/// The signal used to stop threads (0 before one is claimed).
static SUSPEND_SIG: core::sync::atomic::AtomicI32 = core::sync::atomic::AtomicI32::new(0);

/// The handler installed for `sig` now (its `sa_sigaction` word).
fn handler_of(sig: i32) -> Option<usize> {
    // SAFETY: a query: sigaction with no new action writes the current one
    // into a zeroed struct we own.
    unsafe {
        let mut old: libc::sigaction = core::mem::zeroed();
        (sys::sigaction_raw(sig, core::ptr::null(), &mut old) == 0).then_some(old.sa_sigaction)
    }
}

/// The signals a stop may use (see [`claim_signal`]): a handler of the
/// runtime's that runs on the program's threads blocks them (its
/// `sa_mask`), so that a stop never parks a thread inside it. Its frames
/// and the kernel's signal frame under them are the runtime's, laid over
/// the program's dead stack; the dump must see the thread as the signal
/// found it, and a stop caught there would record the handler's stack
/// pointer, making the dead words below the program's frames roots (a
/// dropped block "still reachable" in a third of the dumps). The stop is
/// delivered as the handler returns, with the program's own registers.
pub fn stop_signals() -> libc::sigset_t {
    let sigs: [i32; 65] = core::array::from_fn(|i| i as i32);
    let r = stop_candidates();
    sys::sigset(false, sigs.get(r.start as usize..r.end as usize).unwrap_or(&[]))
}

/// The real-time signals a stop may claim, in the order it tries them.
fn stop_candidates() -> core::ops::Range<i32> {
    libc::SIGRTMIN() + 5..libc::SIGRTMAX()
}

/// The stop signal, still ours: the first real-time signal from SIGRTMIN+5
/// (clear of glibc's own, SIGRTMIN and SIGRTMIN+1, and of the common
/// runtimes' choices) that the program has not claimed. A program that installs its own handler
/// for it later (its right: it is the program's signal) keeps it, and the
/// runtime moves to the next free one rather than sending it signals it
/// does not expect. The program's handlers are never replaced.
fn claim_signal() -> Result<i32, i32> {
    let ours = on_suspend as *const () as usize;
    let cur = SUSPEND_SIG.load(Ordering::Acquire);
    if cur != 0 && handler_of(cur) == Some(ours) {
        return Ok(cur);
    }
    for sig in stop_candidates() {
        if sig == cur || handler_of(sig) != Some(libc::SIG_DFL) {
            continue;
        }
        // The handler, flags and a full mask (no other signal interrupts a
        // parked thread).
        let mut sa = sys::empty_sigaction();
        sa.sa_sigaction = ours;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        sa.sa_mask = sys::sigset(true, &[]);
        // SAFETY: a valid action, no old one asked for.
        let ok = unsafe { sys::sigaction_raw(sig, &sa, core::ptr::null_mut()) } == 0;
        if ok {
            SUSPEND_SIG.store(sig, Ordering::Release);
            return Ok(sig);
        }
    }
    Err(libc::EBUSY)
}

fn slots() -> &'static [Slot] {
    let p = SLOTS.load(Ordering::Acquire) as *const Slot;
    if p.is_null() {
        return &[];
    }
    let n = (NSLOTS.load(Ordering::Acquire) as usize).min(MAX_THREADS);
    // SAFETY: SLOTS maps MAX_THREADS zero-initialised slots for the process's
    // life; the first n have been initialised by `stop`.
    unsafe { core::slice::from_raw_parts(p, n) }
}

/// Maps the slots and installs the suspend handler. Idempotent.
pub fn init() -> Result<(), i32> {
    if SLOTS.load(Ordering::Acquire) != 0 {
        return Ok(());
    }
    let p = sys::mmap_anon(MAX_THREADS * core::mem::size_of::<Slot>())?;
    if SLOTS.compare_exchange(0, p as u64, Ordering::AcqRel, Ordering::Acquire).is_err() {
        // SAFETY: our mapping lost the race and was never published.
        unsafe { sys::munmap(p, MAX_THREADS * core::mem::size_of::<Slot>()) };
        return Ok(());
    }
    claim_signal()?;
    Ok(())
}

/// The crashing thread and the registers its fault left.
static CRASH_TID: AtomicU32 = AtomicU32::new(0);
struct RegsCell(UnsafeCell<Regs>);
// SAFETY: written by the crashing thread before it publishes CRASH_TID
// (release), read by the stop after seeing it (acquire); only the first
// crashing thread writes it (the fatal handler lets one through).
unsafe impl Sync for RegsCell {}
static CRASH_REGS: RegsCell = RegsCell(UnsafeCell::new([0; 17]));

/// Thread `tid` crashed with `regs` (from the fatal signal's handler): a
/// stop parks it at once and the dump records these registers, those of
/// the fault, not of the handler it waits in.
pub fn note_crash(tid: u32, regs: &Regs) {
    // SAFETY: see RegsCell: the one crashing thread writes before it
    // publishes its tid.
    unsafe { *CRASH_REGS.0.get() = *regs };
    CRASH_TID.store(tid, Ordering::Release);
}

/// The registers to record for thread `tid` when it is the one that
/// crashed.
fn crash_regs(tid: u32) -> Option<Regs> {
    if tid == 0 || CRASH_TID.load(Ordering::Acquire) != tid {
        return None;
    }
    // SAFETY: published before CRASH_TID (see RegsCell).
    Some(unsafe { *CRASH_REGS.0.get() })
}

extern "C" fn on_suspend(_sig: i32, _info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let saved = sys::errno();
    // The thread that crashed waits in the crash handler (on its alternate
    // stack) until the dump is written: it is dumped as the fault left it,
    // at once, even when the fault was inside the tracker (a corrupted
    // heap's abort in `free`), whose tables the dump reads without locks.
    if let Some(r) = crash_regs(sys::gettid()) {
        park(&r);
        sys::set_errno(saved);
        return;
    }
    if crate::stop::guard::defer_stop() {
        // Inside the tracker: park when leaving it.
        sys::set_errno(saved);
        return;
    }
    let mut regs = [0u64; 17];
    if !ctx.is_null() {
        // SAFETY: for an SA_SIGINFO handler the kernel passes a ucontext_t.
        let uc = unsafe { &*(ctx as *const libc::ucontext_t) };
        regs = regs_from_gregs(&uc.uc_mcontext.gregs);
    }
    park(&regs);
    sys::set_errno(saved);
}

pub(crate) fn regs_from_gregs(g: &[i64; 23]) -> Regs {
    let r = |i: i32| g[i as usize] as u64;
    [
        r(libc::REG_RAX),
        r(libc::REG_RBX),
        r(libc::REG_RCX),
        r(libc::REG_RDX),
        r(libc::REG_RSI),
        r(libc::REG_RDI),
        r(libc::REG_RBP),
        r(libc::REG_RSP),
        r(libc::REG_R8),
        r(libc::REG_R9),
        r(libc::REG_R10),
        r(libc::REG_R11),
        r(libc::REG_R12),
        r(libc::REG_R13),
        r(libc::REG_R14),
        r(libc::REG_R15),
        r(libc::REG_RIP),
    ]
}

/// Captures the caller's callee-saved registers, stack pointer and a
/// return address. Caller-saved registers are dead across a call, so they
/// hold nothing the caller still needs.
#[inline(always)]
pub fn current_regs() -> Regs {
    let (rbx, rbp, rsp, r12, r13, r14, r15): (u64, u64, u64, u64, u64, u64, u64);
    // SAFETY: only moves register values into outputs; touches no memory.
    unsafe {
        core::arch::asm!(
            "mov {0}, rbx", "mov {1}, rbp", "mov {2}, rsp", "mov {3}, r12", "mov {4}, r13", "mov {5}, r14", "mov {6}, r15",
            out(reg) rbx, out(reg) rbp, out(reg) rsp, out(reg) r12, out(reg) r13, out(reg) r14, out(reg) r15,
            options(nomem, nostack, preserves_flags)
        );
    }
    [0, rbx, 0, 0, 0, 0, rbp, rsp, 0, 0, 0, 0, r12, r13, r14, r15, 0]
}

// The registers of the program's code at the moment it calls into the
// runtime for a dump, and its stack pointer as it is after the call
// returns. Captured in assembly because a Rust function's own frame lies
// between: its uninitialised slots hold whatever the program's earlier,
// deeper calls left there (a stale word that kept a leaked tree "still
// reachable" in one run and not the next), and by the time Rust code runs
// the caller's callee-saved registers may already be saved and reused.
//
// `heapdump_rt_with_entry_regs(ctx, f)` stores the registers in the
// format's order (rax rbx rcx rdx rsi rdi rbp rsp r8..r15 rip; rsp = the
// caller's stack pointer after the return, rip = the return address, the
// caller-saved ones 0: dead at a call) on its own stack and calls
// `f(&regs, ctx)`. Written by hand: it runs in the host's thread with no
// Rust frame around it. Hidden, so that two copies of the runtime in one
// process (a Tracked program under `heapdump run`) never interpose.
core::arch::global_asm!(
    ".text",
    ".p2align 4",
    ".globl heapdump_rt_with_entry_regs",
    ".hidden heapdump_rt_with_entry_regs",
    ".type heapdump_rt_with_entry_regs,@function",
    "heapdump_rt_with_entry_regs:",
    ".cfi_startproc",
    // 17 words: with the return address that makes 18, so rsp is
    // 16-aligned again at the call.
    "sub rsp, 136",
    ".cfi_adjust_cfa_offset 136",
    "mov qword ptr [rsp], 0",
    "mov [rsp + 8], rbx",
    "mov qword ptr [rsp + 16], 0",
    "mov qword ptr [rsp + 24], 0",
    "mov qword ptr [rsp + 32], 0",
    "mov qword ptr [rsp + 40], 0",
    "mov [rsp + 48], rbp",
    "lea rax, [rsp + 144]",
    "mov [rsp + 56], rax",
    "mov qword ptr [rsp + 64], 0",
    "mov qword ptr [rsp + 72], 0",
    "mov qword ptr [rsp + 80], 0",
    "mov qword ptr [rsp + 88], 0",
    "mov [rsp + 96], r12",
    "mov [rsp + 104], r13",
    "mov [rsp + 112], r14",
    "mov [rsp + 120], r15",
    "mov rax, [rsp + 136]",
    "mov [rsp + 128], rax",
    "mov rax, rsi",
    "mov rsi, rdi",
    "mov rdi, rsp",
    "call rax",
    "add rsp, 136",
    ".cfi_adjust_cfa_offset -136",
    "ret",
    ".cfi_endproc",
    ".size heapdump_rt_with_entry_regs, .-heapdump_rt_with_entry_regs",
);

extern "C" {
    fn heapdump_rt_with_entry_regs(ctx: *mut core::ffi::c_void, f: extern "C" fn(*const Regs, *mut core::ffi::c_void));
}

/// Runs `f` with the registers the calling code has at this call (see
/// `heapdump_rt_with_entry_regs`). Always inlined, so that the assembly is
/// called from the caller's own frame: the stack from the returned `rsp`
/// up is the caller's, with nothing of the runtime's in it.
#[inline(always)]
pub fn with_entry_regs<F: FnOnce(&Regs) -> R, R>(f: F) -> R {
    struct Ctx<F, R> {
        f: Option<F>,
        r: Option<R>,
    }
    extern "C" fn call<F: FnOnce(&Regs) -> R, R>(regs: *const Regs, ctx: *mut core::ffi::c_void) {
        // SAFETY: `ctx` is the `Ctx<F, R>` below, alive for the whole call,
        // and `regs` the assembly's array, alive until this returns.
        let (ctx, regs) = unsafe { (&mut *(ctx as *mut Ctx<F, R>), &*regs) };
        if let Some(f) = ctx.f.take() {
            ctx.r = Some(f(regs));
        }
    }
    let mut ctx = Ctx { f: Some(f), r: None };
    // SAFETY: the assembly follows the C ABI, calls `call::<F, R>` once
    // with a pointer to `ctx` and returns.
    unsafe { heapdump_rt_with_entry_regs((&mut ctx as *mut Ctx<F, R>).cast(), call::<F, R>) };
    // `call` always sets it; a panic in `f` would abort before here (the
    // extern "C" boundary does not unwind).
    match ctx.r {
        Some(r) => r,
        None => unreachable_abort(),
    }
}

#[cold]
fn unreachable_abort() -> ! {
    sys::abort()
}

/// Parks the calling thread until the current stop ends, if one is active
/// and this thread was asked to stop.
///
/// # Signal safety
/// Only atomics, futexes and raw system calls.
pub fn park(regs: &Regs) {
    if !ACTIVE.load(Ordering::Acquire) {
        return;
    }
    let e = EPOCH.load(Ordering::Acquire);
    let tid = sys::gettid();
    let Some(idx) = slots().iter().position(|s| s.tid.load(Ordering::Acquire) == tid) else { return };
    if slots()[idx].state.load(Ordering::Acquire) != SIGNALLED {
        return;
    }
    let slot = &slots()[idx];
    // SAFETY: only this thread writes its slot's registers, and the stopper
    // reads them only after seeing STOPPED (release below, acquire there).
    unsafe {
        *slot.regs.get() = *regs;
        *slot.fs.get() = sys::fs_base();
    }
    slot.state.store(STOPPED, Ordering::Release);
    ACKS.fetch_add(1, Ordering::AcqRel);
    sys::futex_wake_all(&ACKS);
    // Wait until a release at or after our epoch: a later stop may begin
    // (and end) before this thread gets to run again, so equality is not
    // enough.
    loop {
        let r = RELEASE.load(Ordering::Acquire);
        if r.wrapping_sub(e) as i32 >= 0 {
            break;
        }
        sys::futex_wait(&RELEASE, r, 0);
    }
}

/// The outcome of [`stop`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Stopped {
    /// Threads that stopped.
    pub stopped: u32,
    /// Threads that did not answer in time (or block the signal).
    pub not_stopped: u32,
}

/// Stops every thread but the caller and `also_skip` (the helper thread).
/// Must be followed by [`resume`].
pub fn stop(also_skip: u32) -> Stopped {
    let me = sys::gettid();
    let e = EPOCH.load(Ordering::Relaxed).wrapping_add(1).max(1);
    EPOCH.store(e, Ordering::Release);
    ACKS.store(0, Ordering::Release);
    NSLOTS.store(0, Ordering::Release);
    ACTIVE.store(true, Ordering::Release);
    let base = SLOTS.load(Ordering::Acquire) as *mut Slot;
    if base.is_null() {
        return Stopped::default();
    }
    // Every real-time signal taken by the program: nothing can stop its
    // threads (recorded as not stopped).
    let sig = claim_signal().unwrap_or(0);
    let deadline = sys::monotonic_ns() + STOP_TIMEOUT_NS;
    let mut expected = 0u32;
    let mut blocked_waiting = 0u32;
    // Threads may be created by threads not yet stopped: enumerate again
    // until a round finds nothing new.
    for _round in 0..8 {
        let mut new = 0;
        crate::sys::procfs::for_each_task(|tid| {
            if tid == me
                || tid == also_skip
                || tid == RUNTIME_TID.load(Ordering::Acquire)
                || slots().iter().any(|s| s.tid.load(Ordering::Relaxed) == tid)
            {
                return;
            }
            let n = NSLOTS.load(Ordering::Relaxed) as usize;
            if n >= MAX_THREADS {
                return;
            }
            // SAFETY: n < MAX_THREADS, inside the mapping; this slot is not
            // yet visible to any handler (NSLOTS is published after).
            let slot = unsafe { &*base.add(n) };
            slot.tid.store(tid, Ordering::Relaxed);
            slot.state.store(SIGNALLED, Ordering::Relaxed);
            NSLOTS.store(n as u32 + 1, Ordering::Release);
            if sig == 0 {
                // Nothing can stop it: recorded as not stopped.
                return;
            }
            // A thread blocking the signal may do so for a moment (glibc
            // starts every new thread with all signals blocked) or for
            // good (node's and the JVM's service threads): it is signalled
            // all the same, and waited for only briefly below.
            let blocked = crate::sys::procfs::blocks_signal(tid, sig);
            match sys::tgkill(tid, sig) {
                Ok(()) if blocked => {
                    blocked_waiting += 1;
                    new += 1;
                }
                Ok(()) => {
                    expected += 1;
                    new += 1;
                }
                Err(_) => slot.state.store(GONE, Ordering::Release),
            }
        });
        wait_acks(&mut expected, deadline);
        if new == 0 {
            break;
        }
    }
    if blocked_waiting > 0 {
        // The threads that blocked the signal: at most 100 ms more. One
        // that never unblocks is recorded as not stopped; the signal left
        // pending finds no stop under way when it is delivered.
        let mut all = expected + blocked_waiting;
        wait_acks(&mut all, deadline.min(sys::monotonic_ns() + BLOCKED_GRACE_NS));
    }
    let mut out = Stopped::default();
    for i in 0..slots().len() {
        let (tid, state) = {
            let s = &slots()[i];
            (s.tid.load(Ordering::Relaxed), s.state.load(Ordering::Acquire))
        };
        match state {
            STOPPED => out.stopped += 1,
            GONE => continue,
            _ => {
                out.not_stopped += 1;
                slots()[i].blocked_sp.store(crate::sys::procfs::blocked_sp(tid), Ordering::Release);
            }
        }
        let mut name = [0u8; 16];
        let n = crate::sys::procfs::thread_name(tid, &mut name).len();
        // SAFETY: only the stopper writes a slot's name, before reading it.
        unsafe { *slots()[i].name.get() = (name, n as u8) };
    }
    out
}

fn wait_acks(expected: &mut u32, deadline: u64) {
    loop {
        let acks = ACKS.load(Ordering::Acquire);
        if acks >= *expected {
            return;
        }
        let now = sys::monotonic_ns();
        if now >= deadline {
            return;
        }
        sys::futex_wait(&ACKS, acks, (deadline - now).min(10_000_000));
        // A thread that exited after being signalled will never answer.
        for s in slots() {
            if s.state.load(Ordering::Acquire) == SIGNALLED && sys::tgkill(s.tid.load(Ordering::Relaxed), 0).is_err() {
                s.state.store(GONE, Ordering::Release);
                *expected = expected.saturating_sub(1);
            }
        }
    }
}

/// The threads of the current stop.
pub fn stopped_threads() -> &'static [Slot] {
    slots()
}

/// Lets every stopped thread go.
pub fn resume() {
    ACTIVE.store(false, Ordering::Release);
    RELEASE.store(EPOCH.load(Ordering::Acquire), Ordering::Release);
    sys::futex_wake_all(&RELEASE);
}

pub static STATIC_TLS: AtomicU64 = AtomicU64::new(64 * 1024);

/// Size of the static TLS area below each thread pointer (glibc's
/// `_dl_get_tls_static_info`, read at start-up; 64 KiB if unknown).
pub fn static_tls_size() -> u64 {
    STATIC_TLS.load(Ordering::Relaxed)
}
