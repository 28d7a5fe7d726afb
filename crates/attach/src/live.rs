//! A running process, held still with ptrace while its heap is read:
//! every thread seized and interrupted (`PTRACE_SEIZE`,
//! `PTRACE_INTERRUPT`: no signal is sent, the program's own handlers and
//! state are untouched), its memory read through `/proc/PID/mem`, its
//! registers with `PTRACE_GETREGS`; detached when dropped, and the
//! process goes on. (A call Linux does not restart after a stop,
//! `epoll_wait` and a few others, returns `EINTR` to a thread held
//! inside it, as it does after gdb's or `gcore`'s stop: signal(7).)

use crate::error::{on_file, Error, FileOp, Result, Unread};
use crate::memory::{parse_maps, Map, Memory};
use std::fs::File;
use std::os::unix::fs::FileExt;

/// A thread's registers, as the dump wants them.
#[derive(Clone, Debug)]
pub struct ThreadRegs {
    /// Kernel thread id (as this tracer's PID namespace sees it).
    pub tid: u32,
    /// The thread's id in its own PID namespace (a container's), as the
    /// process itself knows it (glibc keeps it in the thread descriptor);
    /// `tid` outside containers.
    pub ns_tid: u32,
    /// Its name.
    pub name: String,
    /// rax … r15, rip, in `raw::X86_64_REG_NAMES` order.
    pub regs: [u64; 17],
    /// The thread pointer (`fs` base).
    pub fs_base: u64,
}

impl ThreadRegs {
    /// The stack pointer.
    pub fn sp(&self) -> u64 {
        self.regs[7]
    }
}

/// A process whose threads are all stopped by this tracer.
pub struct Process {
    pid: i32,
    maps: Vec<Map>,
    mem: File,
    tids: Vec<i32>,
    /// Per thread, a signal it was stopped for on its way in (a
    /// signal-delivery-stop instead of the interrupt's stop): given back
    /// when it is let go.
    pending: Vec<i32>,
    /// Threads seized and asked to stop that had not stopped when the
    /// attach gave up on them.
    late: Vec<i32>,
    /// The thread whose `/proc` files are read for the process's (see
    /// [`live_thread`]).
    reader: i32,
}

/// How long every thread has to stop, from the first asked: a thread in
/// an uninterruptible sleep (`vfork`, a read of a hung NFS or FUSE file
/// system, a core being written) cannot stop until its call returns,
/// and meanwhile the threads already stopped would be held with it.
const STOP_WITHIN: std::time::Duration = std::time::Duration::from_secs(1);

/// How one thread's wait for its stop ended.
enum Stop {
    /// Stopped: its wait status.
    Stopped(i32),
    /// It exited, or is no longer this tracer's (another thread's exec
    /// ends every other thread).
    Gone,
    /// Still running at the deadline.
    Late,
}

/// Waits for seized and interrupted thread `t` to stop, until `deadline`:
/// without blocking, a short sleep between looks (most threads stop at
/// once; a blocking wait would hold the process for as long as one
/// thread does not).
fn wait_stopped(t: i32, deadline: std::time::Instant) -> Stop {
    let mut pause = std::time::Duration::from_micros(20);
    loop {
        let mut status = 0;
        // SAFETY: a plain int out-parameter; WNOHANG never blocks.
        let w = unsafe { libc::waitpid(t, &mut status, libc::WNOHANG | libc::__WALL) };
        if w == t {
            if libc::WIFSTOPPED(status) {
                return Stop::Stopped(status);
            }
            return Stop::Gone; // exited or killed
        }
        if w < 0 {
            return Stop::Gone; // ECHILD: not ours any more
        }
        if std::time::Instant::now() >= deadline {
            return Stop::Late;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(std::time::Duration::from_millis(1));
    }
}

/// The state letter of thread `t` of `pid` (`/proc/PID/task/TID/stat`:
/// it follows the name, which is in parentheses and may hold any byte).
fn state_of(pid: i32, t: i32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{t}/stat")).ok()?;
    Some(stat[stat.rfind(')')? + 1..].split_ascii_whitespace().next()?.to_string())
}

/// What a thread is doing, in words, from its state and `wchan`: "in an
/// uninterruptible sleep (D, in kernel_clone)" and the like.
fn thread_state(pid: i32, t: i32) -> String {
    let state = state_of(pid, t).unwrap_or_else(|| "?".into());
    let words = match state.as_str() {
        "D" => "in an uninterruptible sleep",
        "R" => "running",
        "S" => "sleeping",
        "T" | "t" => "stopped",
        "Z" => "a zombie",
        "X" | "" | "?" => "gone",
        _ => "in state",
    };
    let wchan = std::fs::read_to_string(format!("/proc/{pid}/task/{t}/wchan")).unwrap_or_default();
    let wchan = wchan.trim();
    if wchan.is_empty() || wchan == "0" {
        format!("{words} ({state})")
    } else {
        format!("{words} ({state}, in {wchan})")
    }
}

fn threads_of(pid: i32) -> Result<Vec<i32>> {
    let mut v: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map_err(|cause| Error::ListThreads { pid, cause })?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    v.sort_unstable();
    Ok(v)
}

/// Whether thread `t` of `pid` has ended and waits to be reaped with its
/// process (state Z: a main thread that called `pthread_exit` stays one
/// while the others run on, and cannot be seized).
fn is_zombie(pid: i32, t: i32) -> bool {
    state_of(pid, t).as_deref() == Some("Z")
}

/// A live thread of `pid` (the main thread unless it has ended), whose
/// `/proc/PID/task/TID` files (`maps`, `mem`, `exe`, `pagemap`) are the
/// process's: a main thread that has ended has none.
pub(crate) fn live_thread(pid: i32) -> Option<i32> {
    threads_of(pid).ok()?.into_iter().find(|&t| !is_zombie(pid, t))
}

/// The signal a wait status says the thread stopped for, when it is a
/// signal-delivery-stop (a ptrace event's stop carries none): 0 otherwise.
fn stop_signal(status: i32) -> i32 {
    if libc::WIFSTOPPED(status) && status >> 16 == 0 {
        libc::WSTOPSIG(status)
    } else {
        0
    }
}

/// "no process PID", with what to do when this tracer is in a PID
/// namespace of its own (a container sees only its own processes).
pub(crate) fn no_process(pid: i32) -> Error {
    // The kernel's first PID namespace has a fixed inode (PROC_PID_INIT_INO):
    // any other is a container's (NSpid cannot tell: a namespace's own
    // /proc shows only its own level).
    let own_ns = std::fs::read_link("/proc/self/ns/pid").is_ok_and(|l| l.as_os_str() != "pid:[4026531836]");
    Error::NoProcess { pid, own_namespace: own_ns }
}

/// Whether this process holds CAP_SYS_PTRACE.
fn can_ptrace_any() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|c| u64::from_str_radix(c.trim(), 16).ok())
        .is_some_and(|c| c & (1 << 19) != 0)
}

/// Why ptrace refused, in one line.
fn refusal(pid: i32, errno: i32) -> Error {
    if errno == libc::ESRCH {
        return no_process(pid);
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    if let Some(tracer) = status.lines().find_map(|l| l.strip_prefix("TracerPid:")).and_then(|t| t.trim().parse().ok()).filter(|t| *t != 0)
    {
        return Error::AlreadyTraced { pid, tracer };
    }
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").unwrap_or_default();
    match scope.trim() {
        "1" => Error::PtraceScope { pid, scope: 1 },
        "2" => Error::PtraceScope { pid, scope: 2 },
        "3" => Error::PtraceScope { pid, scope: 3 },
        _ => Error::TraceDenied {
            pid,
            cause: std::io::Error::from_raw_os_error(errno),
            needs_privilege: errno == libc::EPERM && !can_ptrace_any(),
        },
    }
}

impl Process {
    /// Seizes and stops every thread of `pid`.
    pub fn stop(pid: i32) -> Result<Process> {
        let mut p = Process {
            pid,
            maps: Vec::new(),
            mem: File::open("/dev/null").map_err(on_file(FileOp::Open, "/dev/null"))?,
            tids: Vec::new(),
            pending: Vec::new(),
            late: Vec::new(),
            reader: pid,
        };
        // Threads may start while others are being seized: list again
        // until every one listed is held. Each round seizes and interrupts
        // every new thread first, then waits for them: the first ones are
        // not held while the last are asked.
        let deadline = std::time::Instant::now() + STOP_WITHIN;
        for _ in 0..100 {
            let all = threads_of(pid)?;
            let new: Vec<i32> = all.iter().copied().filter(|t| !p.tids.contains(t)).collect();
            if new.is_empty() {
                break;
            }
            let mut asked = Vec::with_capacity(new.len());
            for t in new {
                // SAFETY: PTRACE_SEIZE takes a tid and no pointer (addr and
                // data 0: no options).
                let r = unsafe { libc::ptrace(libc::PTRACE_SEIZE, t, 0usize, 0usize) };
                if r != 0 {
                    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
                    // The thread ended meanwhile, or had ended (a main
                    // thread that called `pthread_exit`: the others are
                    // the process). Looked at only when refused: no
                    // file more a thread while the process is held.
                    if (errno == libc::ESRCH && t != pid) || is_zombie(pid, t) {
                        continue;
                    }
                    return Err(refusal(pid, errno));
                }
                // SAFETY: as above; the thread is ours to interrupt.
                unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, t, 0usize, 0usize) };
                asked.push(t);
            }
            for (i, &t) in asked.iter().enumerate() {
                match wait_stopped(t, deadline) {
                    // A signal that arrived first stops the thread for it
                    // (its stop carries no ptrace event): kept to give back.
                    Stop::Stopped(status) => {
                        p.tids.push(t);
                        p.pending.push(stop_signal(status));
                    }
                    // It ended (or an exec in another thread ended it).
                    Stop::Gone => {}
                    Stop::Late => {
                        // Let go when they stop (see `Drop`), the stopped
                        // ones at once.
                        p.late.extend_from_slice(&asked[i..]);
                        return Err(Error::ThreadDidNotStop { pid, tid: t, state: thread_state(pid, t), within: STOP_WITHIN });
                    }
                }
            }
        }
        if let Some(&t) = p.tids.first() {
            p.reader = t;
        }
        let maps = format!("/proc/{pid}/task/{}/maps", p.reader);
        let text = std::fs::read_to_string(&maps).map_err(on_file(FileOp::Read, maps))?;
        p.maps = parse_maps(&text);
        let mem = format!("/proc/{pid}/task/{}/mem", p.reader);
        p.mem = File::open(&mem).map_err(on_file(FileOp::Open, mem))?;
        Ok(p)
    }

    /// Every thread's registers.
    pub fn threads(&self) -> Result<Vec<ThreadRegs>> {
        let mut out = Vec::new();
        for &t in &self.tids {
            // SAFETY: zeroed plain-data registers, filled by the kernel.
            let mut r: libc::user_regs_struct = unsafe { std::mem::zeroed() };
            // SAFETY: the thread is stopped under our trace; `r` is a
            // valid user_regs_struct for the kernel to fill.
            let rc = unsafe { libc::ptrace(libc::PTRACE_GETREGS, t, 0usize, &mut r as *mut libc::user_regs_struct) };
            if rc != 0 {
                continue; // ended while held (a zombie thread)
            }
            let regs =
                [r.rax, r.rbx, r.rcx, r.rdx, r.rsi, r.rdi, r.rbp, r.rsp, r.r8, r.r9, r.r10, r.r11, r.r12, r.r13, r.r14, r.r15, r.rip];
            let name = std::fs::read_to_string(format!("/proc/{}/task/{t}/comm", self.pid)).unwrap_or_default().trim().to_string();
            // "NSpid: host … innermost": the last is the process's own.
            let status = std::fs::read_to_string(format!("/proc/{}/task/{t}/status", self.pid)).unwrap_or_default();
            let ns_tid = status
                .lines()
                .find_map(|l| l.strip_prefix("NSpid:"))
                .and_then(|l| l.split_ascii_whitespace().last()?.parse().ok())
                .unwrap_or(t as u32);
            out.push(ThreadRegs { tid: t as u32, ns_tid, name, regs, fs_base: r.fs_base });
        }
        Ok(out)
    }

    /// The executable's path and the command line (NUL-separated).
    pub fn identity(&self) -> (String, Vec<u8>) {
        let at = format!("/proc/{}/task/{}", self.pid, self.reader);
        let exe = std::fs::read_link(format!("{at}/exe")).map(|p| p.display().to_string()).unwrap_or_default();
        let cmdline = std::fs::read(format!("{at}/cmdline")).unwrap_or_default();
        (exe, cmdline)
    }
}

impl Memory for Process {
    fn maps(&self) -> &[Map] {
        &self.maps
    }

    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        self.mem.read_exact_at(buf, addr).map_err(|e| Error::Unreadable { addr, len: buf.len() as u64, why: Unread::Io(e) })
    }

    fn exe_file(&self) -> Option<std::io::Result<File>> {
        Some(File::open(format!("/proc/{}/task/{}/exe", self.pid, self.reader)))
    }

    /// From `/proc/PID/pagemap`: the pages present or swapped.
    fn present(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let Ok(pm) = File::open(format!("/proc/{}/task/{}/pagemap", self.pid, self.reader)) else { return vec![(start, end)] };
        let mut out: Vec<(u64, u64)> = Vec::new();
        let mut buf = vec![0u8; 8 * 65536];
        let mut page = start / 4096;
        let last = end.div_ceil(4096);
        while page < last {
            let n = ((last - page) as usize).min(65536);
            if pm.read_exact_at(&mut buf[..8 * n], page * 8).is_err() {
                return vec![(start, end)];
            }
            for k in 0..n {
                let e = u64::from_le_bytes(buf[8 * k..8 * k + 8].try_into().unwrap_or([0; 8]));
                if e >> 62 != 0 {
                    let a = ((page + k as u64) * 4096).max(start);
                    let b = ((page + k as u64 + 1) * 4096).min(end);
                    match out.last_mut() {
                        Some(r) if r.1 == a => r.1 = b,
                        _ => out.push((a, b)),
                    }
                }
            }
            page += n as u64;
        }
        out
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        for (&t, &first) in self.tids.iter().zip(&self.pending) {
            // A signal that stopped the thread for us (signal-delivery-stop),
            // on the way in or while it was held, goes back as we detach,
            // or the program would never see it.
            let mut status = 0;
            let mut give_back = first as usize;
            // SAFETY: a plain int out-parameter; WNOHANG never blocks.
            if unsafe { libc::waitpid(t, &mut status, libc::WNOHANG | libc::__WALL) } == t && stop_signal(status) != 0 {
                give_back = stop_signal(status) as usize;
            }
            // SAFETY: detaching a thread we seized; it resumes as it was,
            // with the signal it was stopped for, if any.
            unsafe { libc::ptrace(libc::PTRACE_DETACH, t, 0usize, give_back) };
        }
        // A thread that had not stopped can be detached only once it has:
        // looked for a moment; past that it stays seized, with its
        // interrupt pending, until this tracer exits (the kernel then
        // detaches it, its stop undone) — the command line exits at once.
        let soon = std::time::Instant::now() + std::time::Duration::from_millis(10);
        for &t in &self.late {
            if let Stop::Stopped(status) = wait_stopped(t, soon) {
                // SAFETY: as above: a thread we seized, now stopped.
                unsafe { libc::ptrace(libc::PTRACE_DETACH, t, 0usize, stop_signal(status) as usize) };
            }
        }
    }
}
