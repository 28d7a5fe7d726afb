//! Heap dumps taken from outside a process: `heapdump attach PID` reads
//! the heap of a running glibc program (held still with ptrace, then let
//! go), `heapdump core CORE` the heap of a core file. glibc's malloc is
//! walked as it lays its heap out (arenas, chunks, the per-thread caches
//! and fastbins whose chunks are free), and the dump is written in the
//! same format as the runtime's, with no sites and the allocator's usable
//! sizes: every command, export and the viewer read it unchanged.
//!
//! This crate runs on the analysis side; it never injects anything into
//! the target and never trusts a pointer read from it.
// It traces another process: ptrace and waitpid are its own business, not
// the runtime's (whose sys/ room the workspace's clippy.toml points to).
#![allow(clippy::disallowed_methods)]

mod capture;
mod core;
mod error;
#[cfg(test)]
mod fake;
mod glibc;
mod jemalloc;
mod live;
mod memory;
mod mimalloc;
mod musl;
mod tcmalloc;

pub use capture::{CaptureInfo, Identity};
pub use error::{BadSize, CoreDefect, Damage, Error, FileOp, Result, StaticGlibc, Unread};
pub use glibc::{walk_heap, Chunk, GlibcHeap};
pub use jemalloc::Problem as JemallocProblem;
pub use live::ThreadRegs;
pub use memory::{parse_maps, Map, Memory};

use heapdump_format::{Mode, Reason};
use std::path::Path;

/// Captures the running process `pid` into `out`: stops every thread,
/// walks glibc's heap, writes the dump, lets the process go on.
pub fn attach(pid: i32, mode: Mode, out: &Path) -> Result<CaptureInfo> {
    if pid <= 0 {
        return Err(live::no_process(pid));
    }
    check_machine(pid)?;
    // A thread stopped inside malloc holds its arena's lock with the lists
    // half updated: let the process run a moment and stop it again, a
    // bounded number of times and for a bounded time held in all (a
    // process of hundreds of busy threads always has a lock taken: it
    // is then read as it is, and the capture says which arena was
    // locked).
    let mut rereads = 0;
    // The time every stop so far held the process, and their number.
    let mut held_before = std::time::Duration::ZERO;
    let mut stops = 0;
    'attempt: loop {
        let (p, held) = loop {
            let held = std::time::Instant::now();
            let p = live::Process::stop(pid)?;
            stops += 1;
            let last = stops >= 50 || held_before + held.elapsed() >= RETRY_HOLD;
            let mut again = |p: live::Process| {
                drop(p);
                held_before += held.elapsed();
                std::thread::sleep(std::time::Duration::from_millis(1));
            };
            // tcmalloc: held when no central free list is locked.
            if let Some(t) = tcmalloc::find(&p)? {
                if last || tcmalloc::settled(&t) {
                    break (p, held);
                }
                again(p);
                continue;
            }
            // mimalloc takes no lock on its pages: held when no thread is
            // stopped in its code.
            if let Some(f) = mimalloc::find(&p)? {
                if last || mimalloc::settled(&f, p.threads()?.iter().map(|t| t.regs[16])) {
                    break (p, held);
                }
                again(p);
                continue;
            }
            // (jemalloc's and musl's locks are not read: their walks check
            // what they read.)
            if last || jemalloc::find(&p)?.is_some() || musl::find(&p)?.is_some() || glibc::locked_arenas(&p)? == 0 {
                break (p, held);
            }
            again(p);
        };
        // The runtime's helper thread (a program under `heapdump run`, or
        // one with `Tracked`) is held with the others, but it is no thread of
        // the program's: not one of the dump's threads.
        let (runtime, threads): (Vec<ThreadRegs>, Vec<ThreadRegs>) =
            p.threads()?.into_iter().partition(|t| t.name == RUNTIME_THREAD && t.tid != pid as u32);
        let (exe, cmdline) = p.identity();
        let snap = capture::snapshot(&p, &threads, &runtime);
        // Every thread detached: the process goes on while the dump is written.
        drop(p);
        // A heap that does not add up in a live process may be one a thread
        // was stopped in the middle of changing (in a system call an allocator
        // made, outside its code, or inside musl's, whose lock is not read):
        // read again after a moment, five times and then for as long as
        // the stops have held the process less than `RETRY_HOLD` in all (a
        // musl program of 8 threads allocating without pause was read
        // mid-update in 3 of 10 attaches with five rereads); a heap still
        // not adding up is damaged, and said so.
        let held = held.elapsed();
        if let Err(e) = &snap {
            if e.damaged_at().is_some() && !e.is_refusal() && (rereads < 5 || (rereads < 100 && held_before + held < RETRY_HOLD)) {
                rereads += 1;
                held_before += held;
                std::thread::sleep(std::time::Duration::from_millis(1));
                continue 'attempt;
            }
        }
        let who = Identity { pid: pid as u32, exe, cmdline };
        let mut info = capture::write(&snap?, &who, mode, Reason::Attach, out, (held_before + held).as_nanos() as u64)?;
        info.stops = stops;
        return Ok(info);
    }
}

/// Captures the process a core file holds into `out`; `exe` names the
/// executable when the core's path to it is not this machine's.
pub fn core(path: &Path, exe: Option<&Path>, mode: Mode, out: &Path) -> Result<CaptureInfo> {
    let mut c = core::Core::open(path)?;
    if let Some(e) = exe {
        c.set_exe(e.display().to_string());
    }
    let (exe, cmdline) = c.identity();
    let who = Identity { pid: c.pid(), exe, cmdline };
    let snap = capture::snapshot(&c, c.threads(), &[]).map_err(|e| match c.cut_short() {
        // Whatever failed, the first thing to know is that the file is
        // incomplete (a full disk, a killed writer, a core size limit).
        Some((len, wanted)) => Error::CoreCutShortHeap { path: path.to_path_buf(), len, wanted, cause: Box::new(e) },
        None => e,
    })?;
    capture::write(&snap, &who, mode, Reason::Core, out, 0)
}

/// The time the process may be held in all, over the stops that found an
/// allocator's lock taken, before it is read as it is: each stop of a
/// process of 200 busy threads held them 10-650 ms, and 50 such stops
/// held it for up to 70 s.
const RETRY_HOLD: std::time::Duration = std::time::Duration::from_millis(250);

/// The name the runtime (crates/heapdump) gives its helper thread.
const RUNTIME_THREAD: &str = "heapdump";

/// Refuses a program that is not x86-64 (the only layout read): its
/// executable as the process sees it (`/proc/PID/exe`, a container's too).
fn check_machine(pid: i32) -> Result<()> {
    // (A main thread that has ended has no executable: a live thread's.)
    let exe = match live::live_thread(pid) {
        Some(t) if t != pid => format!("/proc/{pid}/task/{t}/exe"),
        _ => format!("/proc/{pid}/exe"),
    };
    let mut head = [0u8; 20];
    let f = std::fs::File::open(&exe).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => live::no_process(pid),
        _ => Error::ExeUnreadable { path: exe.clone(), cause: e, own: own_process(pid) },
    })?;
    use std::io::Read;
    let _ = (&f).read(&mut head);
    if &head[..4] != b"\x7fELF" || head[4] != 2 || u16::from_le_bytes([head[18], head[19]]) != 62 {
        return Err(Error::NotX86_64 { path: exe });
    }
    Ok(())
}

/// Whether process `pid` runs as this process's user (its real, effective
/// and saved ids all ours, as `/proc/PID/status` says: readable whatever
/// the process's dumpable flag).
fn own_process(pid: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    // SAFETY: geteuid reads this process's id; it cannot fail.
    let me = unsafe { libc::geteuid() }.to_string();
    status.lines().find_map(|l| l.strip_prefix("Uid:")).is_some_and(|ids| ids.split_whitespace().take(3).all(|id| id == me))
}
