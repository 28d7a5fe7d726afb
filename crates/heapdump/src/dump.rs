//! Writing a dump: stop the world, walk the tables, write the format.
//!
//! Nothing on this path allocates: buffers are mapped from the kernel once
//! and kept, output goes through raw `write(2)`, /proc files are read with
//! raw `read(2)`. A dump in progress excludes others (a spin flag).

use crate::config::Config;
use crate::index::{build_index, Index};
use crate::modules::Modules;
use crate::pipe::{self, PipeSink};
use crate::stw::{self, Regs, RSP};
use crate::table::Entry;
use crate::{sys, State};
use core::sync::atomic::{AtomicBool, Ordering};
use heapdump_format::{
    raw, AllocInfo, Backtrace as FmtBacktrace, Contents, Header, Link, Mode, ModuleInfo, ProcessInfo, Reason, StaticInfo, ThreadInfo,
    WriteError, Writer,
};

/// What a finished dump holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DumpInfo {
    /// Bytes written.
    pub file_bytes: u64,
    /// Allocations in the dump.
    pub allocations: u64,
    /// Their requested bytes.
    pub alloc_bytes: u64,
    /// Threads recorded.
    pub threads: u32,
    /// Threads that did not stop in time.
    pub not_stopped: u32,
    /// How long the program's threads were held stopped, in nanoseconds.
    pub pause_ns: u64,
    /// How long the heap took to collapse into huge pages before the world
    /// was stopped (`HEAPDUMP_FORK=collapse`), in nanoseconds.
    pub collapse_ns: u64,
}

/// Why a dump failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DumpError {
    /// A system call failed.
    Os {
        /// What was being done.
        what: &'static str,
        /// errno.
        errno: i32,
    },
    /// Writing the file failed (ENOSPC, EIO...).
    Write(WriteError),
    /// The path is longer than the runtime's fixed buffer.
    PathTooLong,
    /// The forked writer failed with this exit status.
    Child(i32),
}

impl core::fmt::Display for DumpError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            DumpError::Os { what, errno } => write!(f, "{what} failed: {}", std::io::Error::from_raw_os_error(errno)),
            DumpError::Write(e) => write!(f, "{e}"),
            DumpError::PathTooLong => write!(f, "dump path too long"),
            DumpError::Child(s) => write!(f, "forked dump writer failed (status {s:#x})"),
        }
    }
}

impl std::error::Error for DumpError {}

impl From<WriteError> for DumpError {
    fn from(e: WriteError) -> Self {
        DumpError::Write(e)
    }
}

static DUMPING: AtomicBool = AtomicBool::new(false);

/// Scratch memory for dumps, mapped once.
struct Scratch {
    buf: *mut u8,
    buf_len: usize,
    maps: *mut u8,
    maps_cap: usize,
    pairs: *mut (u64, u64),
    /// An allocation's first pointers, as the ALLOCS record names them.
    links: *mut Link,
    /// Where the writer gathers an ALLOCS record.
    batch: *mut u8,
    modules: Option<Modules>,
    /// Shared with the forked writer: its result.
    shared: *mut DumpInfo,
    /// The helper writer's slots and stack (null: write on the dumping thread).
    pipe: *mut u8,
}

static mut SCRATCH: Scratch = Scratch {
    buf: core::ptr::null_mut(),
    buf_len: 0,
    maps: core::ptr::null_mut(),
    maps_cap: 0,
    pairs: core::ptr::null_mut(),
    links: core::ptr::null_mut(),
    batch: core::ptr::null_mut(),
    modules: None,
    shared: core::ptr::null_mut(),
    pipe: core::ptr::null_mut(),
};

/// The staging buffer: small enough that the kernel copies it out of the
/// cache the dump just filled it through (1 GiB full dump, 8 interleaved
/// runs each: 0.571 s median at 512 KiB, 0.617 s at 1 MiB; 256 KiB and
/// 64 KiB were slower again).
const WRITE_BUF: usize = 1 << 19;
const PAIRS: usize = 4096;
/// The ALLOCS batch: some 15 000 small allocations to a record; a block
/// with more than about 8 000 pointers is a record of its own.
const BATCH: usize = 1 << 18;
/// How many blocks ahead of the scan the compact dump's lookups are
/// prefetched (twice that for the directory's buckets).
const PREFETCH_AHEAD: usize = 8;

/// Takes one dump into `fd`.
///
/// `entry_regs` are the registers of the calling thread at the public entry
/// point: its stack below `entry_regs[RSP]` belongs to the runtime and is
/// not a root. `helper` is the tid of the runtime's dumper thread (left out
/// of the dump) when the dump runs on it; then the caller is not a root at all.
pub fn write_dump(state: &State, fd: i32, mode: Mode, reason: Reason, entry_regs: &Regs, on_helper: bool) -> Result<DumpInfo, DumpError> {
    while DUMPING.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
    }
    let r = write_locked(state, fd, mode, reason, entry_regs, on_helper);
    DUMPING.store(false, Ordering::Release);
    r
}

#[allow(static_mut_refs)]
fn scratch() -> Result<&'static mut Scratch, DumpError> {
    // SAFETY: SCRATCH is only touched with DUMPING held, so never aliased.
    let s = unsafe { &mut SCRATCH };
    if s.buf.is_null() {
        s.buf = sys::mmap_anon(WRITE_BUF).map_err(|errno| DumpError::Os { what: "mapping the write buffer", errno })?;
        s.buf_len = WRITE_BUF;
        s.pairs = sys::mmap_anon(PAIRS * 16).map_err(|errno| DumpError::Os { what: "mapping scratch", errno })?.cast();
        s.links =
            sys::mmap_anon(PAIRS * core::mem::size_of::<Link>()).map_err(|errno| DumpError::Os { what: "mapping scratch", errno })?.cast();
        s.batch = sys::mmap_anon(BATCH).map_err(|errno| DumpError::Os { what: "mapping scratch", errno })?;
        s.shared = sys::mmap_shared(4096).map_err(|errno| DumpError::Os { what: "mapping shared scratch", errno })?.cast();
        s.pipe = pipe::map();
    }
    if s.modules.is_none() {
        s.modules = Some(Modules::new().map_err(|errno| DumpError::Os { what: "mapping the module map", errno })?);
    }
    Ok(s)
}

/// Whether the dump will be large enough (32 MiB, as the counts estimate
/// it) to be worth a writer thread: below that, starting it and first
/// touching its slots cost about as much as it saves (10 MiB full dumps
/// took 7-8 ms without it, 6-20 ms with it; 100 MiB ones 65 ms without,
/// 42 ms with).
fn writes_much(state: &State, mode: Mode) -> bool {
    let (count, bytes) = state.table.live();
    let estimate = match mode {
        Mode::Full => bytes,
        // A compact record: header, first word, a few pointer pairs.
        Mode::Compact => count.saturating_mul(64),
    };
    estimate >= 32 << 20
}

fn write_locked(state: &State, fd: i32, mode: Mode, reason: Reason, entry_regs: &Regs, on_helper: bool) -> Result<DumpInfo, DumpError> {
    let sc = scratch()?;
    // The loader's lock may be held by a thread we are about to stop:
    // read the module map first.
    if let Some(m) = sc.modules.as_mut() {
        m.refresh();
    }
    let config = state.config();
    // Never fork near the memory limit: the forked writer is charged to the
    // same cgroup, and each page the program writes after the fork would be
    // copied.
    let fork = config.fork && reason != Reason::NearLimit;
    // Not on allocation failure: collapsing takes memory.
    let collapse_ns = if fork && config.collapse && reason != Reason::AllocFailure {
        let c0 = sys::monotonic_ns();
        collapse_heap(&read_maps(sc), &state.table);
        sys::monotonic_ns() - c0
    } else {
        0
    };
    // The writer thread is started before the world stops, and left
    // running by it; a forked writer starts its own (here: none).
    let pipe = if writes_much(state, mode) { sc.pipe } else { core::ptr::null_mut() };
    let sink = PipeSink::start(fd, if fork { core::ptr::null_mut() } else { pipe });
    let t0 = sys::monotonic_ns();
    let stopped = stw::stop(sink.helper_tid());
    if fork {
        let r = match sys::raw_fork() {
            Ok(0) => {
                // Child: one thread, a copy of the stopped image. Write and leave.
                let pause = sys::monotonic_ns() - t0;
                crate::report::writer();
                let sink = PipeSink::start(fd, pipe);
                let code = match write_body(state, sc, sink, mode, reason, entry_regs, on_helper, stopped, t0, Some(pause)) {
                    Ok(info) => {
                        // SAFETY: `shared` is a MAP_SHARED page the parent
                        // reads after waiting for this process.
                        unsafe { sc.shared.write(info) };
                        0
                    }
                    Err(DumpError::Write(WriteError::Sink { errno })) | Err(DumpError::Os { errno, .. }) => errno.clamp(1, 250),
                    Err(_) => 251,
                };
                sys::exit_now(code)
            }
            Ok(pid) => Ok(pid),
            Err(errno) => Err(DumpError::Os { what: "fork", errno }),
        };
        let pause = sys::monotonic_ns() - t0;
        stw::resume();
        let pid = r?;
        let status = sys::waitpid(pid).map_err(|errno| DumpError::Os { what: "waitpid", errno })?;
        if status != 0 {
            let code = (status >> 8) & 0xff;
            return Err(if (1..=250).contains(&code) {
                DumpError::Write(WriteError::Sink { errno: code })
            } else {
                DumpError::Child(status)
            });
        }
        // SAFETY: the child wrote its result into the shared page and has exited.
        let mut info = unsafe { sc.shared.read() };
        info.pause_ns = pause;
        info.collapse_ns = collapse_ns;
        info.not_stopped = stopped.not_stopped;
        return Ok(info);
    }
    let r = write_body(state, sc, sink, mode, reason, entry_regs, on_helper, stopped, t0, None);
    stw::resume();
    r
}

#[allow(clippy::too_many_arguments)]
fn write_body(
    state: &State,
    sc: &mut Scratch,
    sink: PipeSink,
    mode: Mode,
    reason: Reason,
    entry_regs: &Regs,
    on_helper: bool,
    stopped: stw::Stopped,
    t0: u64,
    pause_override: Option<u64>,
) -> Result<DumpInfo, DumpError> {
    let config = state.config();
    let maps = read_maps(sc);
    // The sorted index serves the compact scan and, in both modes, tells
    // which anonymous mappings hold heap blocks.
    let mut index = build_index(state)?;
    // SAFETY: buf maps buf_len bytes, used only under DUMPING.
    let buf = unsafe { core::slice::from_raw_parts_mut(sc.buf, sc.buf_len) };
    // SAFETY: pairs maps PAIRS entries, used only under DUMPING.
    let pairs = unsafe { core::slice::from_raw_parts_mut(sc.pairs, PAIRS) };
    // SAFETY: links maps PAIRS entries, used only under DUMPING.
    let links = unsafe { core::slice::from_raw_parts_mut(sc.links, PAIRS) };
    // SAFETY: batch maps BATCH bytes, used only under DUMPING.
    let batch = unsafe { core::slice::from_raw_parts_mut(sc.batch, BATCH) };
    let header = Header::new(mode, reason, sys::page_size(), sys::getpid(), sys::realtime_ns());
    let result = (|| -> Result<DumpInfo, DumpError> {
        let mut w = Writer::new(sink, buf, &header)?;
        w.set_batch_buffer(batch)?;
        process_record(&mut w, config)?;
        if matches!(reason, Reason::Signal | Reason::Crash) {
            if let Some(cause) = crate::fatal::cause() {
                w.signal(&cause)?;
            }
        }
        let (total_allocations, total_bytes, peak_bytes) = state.table.history();
        w.history(&heapdump_format::History { peak_bytes, total_allocations, total_bytes })?;
        if reason == Reason::NearLimit {
            let r = crate::limit::last();
            w.limit(&heapdump_format::LimitInfo { kind: r.kind, bytes: r.bytes, used: r.used })?;
        }
        let modules = sc.modules.as_ref();
        if let Some(m) = modules {
            for md in m.iter() {
                w.module(&ModuleInfo { bias: md.bias, path: m.path(md), build_id: md.build_id(), segments: md.segments() })?;
            }
        }
        let me = sys::gettid();
        let mut threads = 0u32;
        // The calling thread. When it is the runtime's helper (a signal
        // dump), it is not the program's: no record at all.
        let fs = stw::fs_base();
        if !on_helper {
            let mut name = [0u8; 16];
            let name = thread_name(me, &mut name);
            let sp = entry_regs[RSP];
            let end = maps.end_of(sp).unwrap_or(sp);
            let info = ThreadInfo { tid: me, flags: raw::THREAD_CURRENT, stack_start: sp, stack_end: end, tls: fs, name, regs: entry_regs };
            region(&mut w, mode, &index, pairs, sp, end - sp, |w, c| w.thread(&info, c))?;
            threads += 1;
            tls_root(&mut w, mode, &index, pairs, &maps, fs, sp, end, me)?;
        }
        for s in stw::stopped_threads() {
            let tid = s.tid.load(Ordering::Relaxed);
            if s.gone() {
                continue;
            }
            let (name_buf, name_len) = s.name();
            let name = &name_buf[..usize::from(name_len).min(16)];
            if s.stopped() {
                let regs = s.regs();
                let sp = regs[RSP];
                let (start, end) = maps.stack_of(sp);
                let info = ThreadInfo { tid, flags: 0, stack_start: start, stack_end: end, tls: s.fs(), name, regs: &regs };
                region(&mut w, mode, &index, pairs, start, end - start, |w, c| w.thread(&info, c))?;
                tls_root(&mut w, mode, &index, pairs, &maps, s.fs(), start, end, tid)?;
            } else {
                // Not stopped: its stack as it is while the thread waits in
                // the kernel (registers unknown), when it does.
                let sp = s.blocked_sp();
                let (start, end) = if sp != 0 { maps.stack_of(sp) } else { (0, 0) };
                let info = ThreadInfo { tid, flags: raw::THREAD_NOT_STOPPED, stack_start: start, stack_end: end, tls: 0, name, regs: &[] };
                region(&mut w, mode, &index, pairs, start, end - start, |w, c| w.thread(&info, c))?;
            }
            threads += 1;
        }
        // Anonymous writable mappings that are neither heap nor stacks nor
        // the runtime's own, scanned as roots as memcheck scans them (a
        // program's own mmap'd pools, the descriptors and TLS of exited
        // threads); see `anon_roots` for what is left out of them.
        let mut excluded = [(0u64, 0u64); 256];
        let mut nex = 0;
        let mut exclude = |a: u64| {
            // The runtime's own stacks are left out as its own mappings
            // are, not with the whole (possibly merged) mapping around them.
            if sys::overlaps_own(a, a + 1) {
                return;
            }
            if let Some(r) = maps.find(a) {
                if nex < excluded.len() {
                    excluded[nex] = r;
                    nex += 1;
                }
            }
        };
        exclude(stw::current_regs()[RSP]);
        exclude(fs);
        let (rsp, rfs) = stw::runtime_thread();
        if rsp != 0 {
            exclude(rsp);
            exclude(rfs);
        }
        for s in stw::stopped_threads() {
            if s.stopped() {
                exclude(s.regs()[RSP]);
                exclude(s.fs());
            }
        }
        let excluded = &excluded[..nex];
        let mut anon_err: Result<(), DumpError> = Ok(());
        maps.for_each_anon_rw(false, |start, end| {
            if anon_err.is_err() || excluded.iter().any(|&(a, b)| a < end && start < b) {
                return;
            }
            anon_err = anon_roots(start, end, &index, |a, b| {
                let info = StaticInfo { address: a, size: b - a, module: raw::NO_MODULE, name: b"anon" };
                region(&mut w, mode, &index, pairs, a, b - a, |w, c| w.static_root(&info, c))
            });
        });
        anon_err?;
        // Static roots: the writable segments of every module, less the
        // runtime's own statics (its tables hold every block's address).
        let (own_a, own_b) = crate::own_statics();
        if let Some(m) = modules {
            for (i, md) in m.iter().enumerate() {
                for seg in md.segments() {
                    if seg.flags & raw::SEG_W == 0 || seg.memsz == 0 {
                        continue;
                    }
                    let start = md.bias.wrapping_add(seg.vaddr);
                    outside_holes(start, start + seg.memsz, &mut [(own_a, own_b)], |a, b| {
                        let info = StaticInfo { address: a, size: b - a, module: i as u32, name: b".data+.bss" };
                        region(&mut w, mode, &index, pairs, a, b - a, |w, c| w.static_root(&info, c))
                    })?;
                }
            }
        }
        // Sites.
        let mut site_err = Ok(());
        // SAFETY: the world is stopped (or we are the forked child).
        unsafe {
            state.sites.for_each_unlocked(|id, frames| {
                if site_err.is_ok() {
                    site_err = w.site(id, frames);
                }
            })
        };
        site_err?;
        // Allocations, in address order.
        let all = index.as_slice();
        for (i, e) in all.iter().enumerate() {
            if mode == Mode::Compact {
                // The lookups of a dense heap's pointers are random reads
                // of the directory and the index: start them for the blocks
                // ahead, buckets first, then the entries the buckets name,
                // so that the scan of this block finds them in the cache.
                if let Some(f) = all.get(i + 2 * PREFETCH_AHEAD) {
                    index.prefetch(f.addr, f.size, false);
                }
                if let Some(f) = all.get(i + PREFETCH_AHEAD) {
                    index.prefetch(f.addr, f.size, true);
                }
            }
            if mode == Mode::Compact {
                // ALLOCS pointers name their targets by index position:
                // the writer's ordinals must be the same.
                if w.next_ordinal() != i as u64 {
                    return Err(DumpError::Write(WriteError::LengthMismatch { what: "allocation ordinals and the index disagree" }));
                }
                write_dense(&mut w, &index, links, e)?;
            } else {
                write_alloc(&mut w, mode, &index, pairs, e)?;
            }
        }
        let pause = pause_override.unwrap_or_else(|| sys::monotonic_ns() - t0);
        let totals = *w.totals();
        let (mut sink, bytes) = w.finish(pause)?;
        sink.finish()?;
        Ok(DumpInfo {
            file_bytes: bytes,
            allocations: totals.allocations,
            alloc_bytes: totals.alloc_bytes,
            threads,
            not_stopped: stopped.not_stopped,
            pause_ns: pause,
            collapse_ns: 0,
        })
    })();
    index.release();
    result
}

fn process_record(w: &mut Writer<'_, PipeSink>, config: &Config) -> Result<(), DumpError> {
    let mut exe = [0u8; 1024];
    // SAFETY: readlink writes at most exe.len() bytes.
    let n = unsafe { libc::readlink(c"/proc/self/exe".as_ptr(), exe.as_mut_ptr().cast(), exe.len()) };
    let exe = if n > 0 { &exe[..n as usize] } else { &[][..] };
    let mut cmd = [0u8; 8192];
    let n = sys::read_file(c"/proc/self/cmdline", &mut cmd).unwrap_or(0);
    let (bt, mean) = match config.backtrace {
        crate::config::Backtrace::Off => (FmtBacktrace::Off, 0),
        crate::config::Backtrace::All => (FmtBacktrace::All, 0),
        crate::config::Backtrace::Sampled(m) => (FmtBacktrace::Sampled, m),
    };
    w.process(&ProcessInfo { backtrace: bt, max_frames: config.max_frames as u32, sample_mean: mean, exe, cmdline: &cmd[..n] })?;
    Ok(())
}

/// Reads `/proc/self/task/TID/<file>` (`file` NUL-terminated) into `out`;
/// returns the length read (0 on any error).
fn read_task_file(tid: u32, file: &[u8], out: &mut [u8]) -> usize {
    let mut path = [0u8; 64];
    let prefix = b"/proc/self/task/";
    path[..prefix.len()].copy_from_slice(prefix);
    let mut n = prefix.len();
    n += fmt_u64(tid.into(), &mut path[n..]);
    path[n] = b'/';
    n += 1;
    let k = file.len().min(path.len() - n);
    path[n..n + k].copy_from_slice(&file[..k]);
    let Ok(c) = core::ffi::CStr::from_bytes_until_nul(&path[..n + k]) else { return 0 };
    sys::read_file(c, out).unwrap_or(0)
}

/// Reads a thread's name from /proc/self/task/TID/comm.
pub(crate) fn thread_name(tid: u32, out: &mut [u8; 16]) -> &[u8] {
    let k = read_task_file(tid, b"comm\0", out);
    let k = out[..k].iter().position(|&b| b == b'\n').unwrap_or(k);
    &out[..k]
}

/// The user stack pointer of a thread of this process blocked in a system
/// call (`/proc/self/task/TID/syscall`: number, six arguments, stack
/// pointer, program counter); 0 when it is running or unknown. A thread
/// that blocks every signal cannot be stopped, but while it waits in the
/// kernel its stack below this pointer is dead and above it unchanging.
pub(crate) fn blocked_sp(tid: u32) -> u64 {
    let mut text = [0u8; 256];
    let k = read_task_file(tid, b"syscall\0", &mut text);
    let mut fields = text[..k].split(|&b| b == b' ' || b == b'\n').filter(|f| !f.is_empty());
    // "running", or "-1 sp pc" (stopped outside a call) have no 9 fields.
    let Some(sp) = fields.nth(7) else { return 0 };
    let hex = sp.strip_prefix(b"0x").unwrap_or(&[]);
    let mut v = 0u64;
    for &b in hex {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => return 0,
        };
        v = v.wrapping_mul(16) | u64::from(d);
    }
    v
}

/// Formats `v` in decimal into `out`; returns the length.
pub fn fmt_u64(mut v: u64, out: &mut [u8]) -> usize {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let n = (tmp.len() - i).min(out.len());
    out[..n].copy_from_slice(&tmp[i..i + n]);
    n
}

/// The part of /proc/self/maps a dump needs: mapping bounds.
struct Maps<'a> {
    text: &'a [u8],
}

impl Maps<'_> {
    fn find(&self, addr: u64) -> Option<(u64, u64)> {
        for line in self.text.split(|&b| b == b'\n') {
            let Some(dash) = line.iter().position(|&b| b == b'-') else { continue };
            let Some(sp) = line.iter().position(|&b| b == b' ') else { continue };
            if sp <= dash {
                continue;
            }
            let (Some(a), Some(b)) = (hex(&line[..dash]), hex(&line[dash + 1..sp])) else { continue };
            if addr >= a && addr < b {
                return Some((a, b));
            }
        }
        None
    }
    /// Calls `f(start, end)` for each private, readable and writable,
    /// anonymous mapping: those with no path (not [stack], [vvar],
    /// [vdso]), and the brk heap too if `with_heap`.
    fn for_each_anon_rw(&self, with_heap: bool, mut f: impl FnMut(u64, u64)) {
        for line in self.text.split(|&b| b == b'\n') {
            // start-end perms offset dev inode [path]
            let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty());
            let (Some(range), Some(perms)) = (fields.next(), fields.next()) else { continue };
            let (_, _, Some(inode)) = (fields.next(), fields.next(), fields.next()) else { continue };
            let named = fields.next().is_some_and(|p| !(with_heap && p == b"[heap]"));
            if named || inode != b"0" || perms.len() < 4 || &perms[..2] != b"rw" || perms[3] != b'p' {
                continue;
            }
            let Some(dash) = range.iter().position(|&b| b == b'-') else { continue };
            if let (Some(a), Some(b)) = (hex(&range[..dash]), hex(&range[dash + 1..])) {
                f(a, b);
            }
        }
    }

    /// The stack to scan for a thread stopped with stack pointer `sp`:
    /// from its red zone (`sp` - 128, within the mapping) to the mapping's
    /// end. A thread that overflowed its stack has `sp` below the stack's
    /// mapping (in the guard gap, unmapped): then the mapping just above,
    /// within the 1 MiB gap Linux keeps below stacks. Empty (`sp`, `sp`)
    /// when neither is there: nothing unmapped is ever read.
    fn stack_of(&self, sp: u64) -> (u64, u64) {
        if let Some((a, b)) = self.find(sp) {
            return (sp.saturating_sub(128).max(a), b);
        }
        let mut above: Option<(u64, u64)> = None;
        for line in self.text.split(|&b| b == b'\n') {
            let Some(dash) = line.iter().position(|&b| b == b'-') else { continue };
            let Some(space) = line.iter().position(|&b| b == b' ') else { continue };
            if space <= dash {
                continue;
            }
            let (Some(a), Some(b)) = (hex(&line[..dash]), hex(&line[dash + 1..space])) else { continue };
            if a > sp && a - sp <= (1 << 20) && above.is_none_or(|m| a < m.0) {
                above = Some((a, b));
            }
        }
        above.unwrap_or((sp, sp))
    }

    fn end_of(&self, addr: u64) -> Option<u64> {
        self.find(addr).map(|m| m.1)
    }
}

fn hex(s: &[u8]) -> Option<u64> {
    let mut v: u64 = 0;
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    for &c in s {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            _ => return None,
        };
        v = v << 4 | u64::from(d);
    }
    Some(v)
}

/// Collapses the private anonymous memory (the heap, the table's shadow)
/// into transparent huge pages while the program runs, so that the fork
/// that follows copies a page-table entry per 2 MiB instead of 512. Only
/// 2 MiB ranges with at least 90% of their pages in memory are collapsed
/// (a collapse fills the holes, so the program's memory grows by at most a
/// ninth of what is collapsed). Best effort: a kernel without
/// MADV_COLLAPSE, or a range it will not collapse, is skipped.
///
/// The runtime's own mappings are left out (the shadow alone spans 48 TiB
/// of address space), except the parts of the shadow in use.
fn collapse_heap(maps: &Maps<'_>, table: &crate::table::Table) {
    const HUGE: u64 = 2 << 20;
    const PAGES: usize = (HUGE / 4096) as usize;
    let mut resident = [0u8; PAGES];
    let mut supported = true;
    // A run of consecutive huge ranges to collapse with one call.
    let mut run: Option<(u64, u64)> = None;
    let flush = |r: (u64, u64), supported: &mut bool| {
        if *supported && sys::collapse(r.0, r.1 - r.0) == Err(libc::EINVAL) {
            *supported = false;
        }
    };
    let mut each = |start: u64, end: u64| {
        let mut a = start.next_multiple_of(HUGE);
        while a + HUGE <= end && supported {
            let full = sys::resident_bytes(a as *const u8, HUGE as usize, &mut resident) * 10 >= HUGE * 9;
            run = match (run, full) {
                (Some((lo, hi)), true) if hi == a => Some((lo, a + HUGE)),
                (r, true) => {
                    if let Some(r) = r {
                        flush(r, &mut supported);
                    }
                    Some((a, a + HUGE))
                }
                (Some(r), false) => {
                    flush(r, &mut supported);
                    None
                }
                (None, false) => None,
            };
            a += HUGE;
        }
    };
    maps.for_each_anon_rw(true, |start, end| {
        if !sys::overlaps_own(start, end) {
            each(start, end);
        }
    });
    table.for_each_shadow_chunk(HUGE, &mut each);
    if let Some(r) = run {
        flush(r, &mut supported);
    }
}

fn read_maps(sc: &mut Scratch) -> Maps<'static> {
    if sc.maps.is_null() {
        sc.maps_cap = 1 << 20;
        sc.maps = sys::mmap_anon(sc.maps_cap).unwrap_or(core::ptr::null_mut());
        if sc.maps.is_null() {
            return Maps { text: &[] };
        }
    }
    loop {
        // SAFETY: maps is a mapping of maps_cap bytes owned by the dumper.
        let buf = unsafe { core::slice::from_raw_parts_mut(sc.maps, sc.maps_cap) };
        let n = sys::read_file(c"/proc/self/maps", buf).unwrap_or(0);
        if n < sc.maps_cap || sc.maps_cap >= 256 << 20 {
            // SAFETY: n bytes were just written; the mapping lives until the
            // next read_maps, after this dump.
            return Maps { text: unsafe { core::slice::from_raw_parts(sc.maps, n) } };
        }
        // Full: grow and read again.
        // SAFETY: our mapping, no longer referenced.
        unsafe { sys::munmap(sc.maps, sc.maps_cap) };
        sc.maps_cap *= 4;
        sc.maps = match sys::mmap_anon(sc.maps_cap) {
            Ok(p) => p,
            Err(_) => {
                sc.maps = core::ptr::null_mut();
                return Maps { text: &[] };
            }
        };
    }
}

/// Scans `[start, start+len)` for words pointing into live allocations.
/// Fills `pairs` with the first ones; returns (total count, pairs filled,
/// offset to resume scanning from for the rest).
fn scan(index: &Index, pairs: &mut [(u64, u64)], start: u64, len: u64) -> (u64, usize, u64) {
    let mut count = 0u64;
    let mut filled = 0usize;
    let mut resume = len;
    let first = start.next_multiple_of(8) - start;
    for (off, v) in (Rescan { index, start, off: first, len }) {
        if filled < pairs.len() {
            pairs[filled] = (off, v);
            filled += 1;
            if filled == pairs.len() {
                resume = off + 8;
            }
        }
        count += 1;
    }
    (count, filled, resume)
}

struct Rescan<'a> {
    index: &'a Index,
    start: u64,
    off: u64,
    len: u64,
}

impl Iterator for Rescan<'_> {
    type Item = (u64, u64);
    fn next(&mut self) -> Option<(u64, u64)> {
        while self.off + 8 <= self.len {
            let off = self.off;
            self.off += 8;
            // SAFETY: [start, start+len) is readable memory of this process
            // (a live allocation, a stopped thread's stack, a mapped
            // segment), off+8 <= len, and the address is 8-aligned.
            let v = unsafe { core::ptr::read_volatile((self.start + off) as *const u64) };
            if self.index.hits(v) {
                return Some((off, v));
            }
        }
        None
    }
}

type PairIter<'a> = core::iter::Chain<core::iter::Copied<core::slice::Iter<'a, (u64, u64)>>, Rescan<'a>>;

/// Writes one record over the region `[start, start+len)` in the dump's mode.
fn region<'b>(
    w: &mut Writer<'b, PipeSink>,
    mode: Mode,
    index: &Index,
    pairs: &mut [(u64, u64)],
    start: u64,
    len: u64,
    f: impl FnOnce(&mut Writer<'b, PipeSink>, Contents<'_, PairIter<'_>>) -> Result<(), WriteError>,
) -> Result<(), DumpError> {
    match mode {
        Mode::Full => {
            let bytes: &[u8] = if len == 0 {
                &[]
            } else {
                // SAFETY: the region is readable process memory (see `scan`).
                unsafe { core::slice::from_raw_parts(start as *const u8, len as usize) }
            };
            f(w, Contents::Full(bytes))?;
        }
        Mode::Compact => {
            let (count, filled, resume) = scan(index, pairs, start, len);
            let it = pairs[..filled].iter().copied().chain(Rescan { index, start, off: resume, len });
            f(w, Contents::Compact { count, pointers: it })?;
        }
    }
    Ok(())
}

fn write_alloc(w: &mut Writer<'_, PipeSink>, mode: Mode, index: &Index, pairs: &mut [(u64, u64)], e: &Entry) -> Result<(), DumpError> {
    let info = alloc_info(e);
    region(w, mode, index, pairs, e.addr, e.size, |w, c| w.alloc(&info, c))
}

/// What the dump says of a live allocation, its first word read from it
/// (zero-padded below 8 bytes).
fn alloc_info(e: &Entry) -> AllocInfo {
    let first_word = if e.size >= 8 && e.addr % 8 == 0 {
        // SAFETY: a live allocation of at least 8 bytes, aligned.
        unsafe { core::ptr::read_volatile(e.addr as *const u64) }
    } else {
        let mut b = [0u8; 8];
        for (i, x) in b.iter_mut().enumerate().take(e.size.min(8) as usize) {
            // SAFETY: i < size, inside the live allocation.
            *x = unsafe { core::ptr::read_volatile((e.addr + i as u64) as *const u8) };
        }
        u64::from_le_bytes(b)
    };
    AllocInfo {
        address: e.addr,
        size: e.size,
        site: e.site,
        align_log2: e.align_log2,
        flags: if e.sampled { raw::ALLOC_SAMPLED } else { 0 } | hashbrown_flags(e),
        first_word,
    }
}

/// The pointers of `[start, start + len)` as ALLOCS links, from `off`:
/// each word that points into a live allocation, named by its index
/// position and the offset into it.
#[derive(Clone)]
struct LinkScan<'a> {
    index: &'a Index,
    start: u64,
    off: u64,
    len: u64,
}

impl Iterator for LinkScan<'_> {
    type Item = Link;
    #[inline]
    fn next(&mut self) -> Option<Link> {
        while self.off + 8 <= self.len {
            let off = self.off;
            self.off += 8;
            // SAFETY: as in `Rescan`: readable memory of this process, an
            // 8-aligned word inside the region.
            let v = unsafe { core::ptr::read_volatile((self.start + off) as *const u64) };
            if let Some((i, delta)) = self.index.find(v) {
                return Some(Link { offset: off, target: i as u64, delta });
            }
        }
        None
    }
}

/// Writes one allocation of a compact dump into the writer's ALLOCS
/// record: its first pointers gathered in `links` as the scan finds them
/// (one read of the block), the rest, if any, scanned again when written.
fn write_dense(w: &mut Writer<'_, PipeSink>, index: &Index, links: &mut [Link], e: &Entry) -> Result<(), DumpError> {
    let info = alloc_info(e);
    let first = e.addr.next_multiple_of(8) - e.addr;
    let (mut count, mut filled, mut resume) = (0u64, 0usize, e.size);
    for l in (LinkScan { index, start: e.addr, off: first, len: e.size }) {
        if filled < links.len() {
            links[filled] = l;
            filled += 1;
            if filled == links.len() {
                resume = l.offset + 8;
            }
        }
        count += 1;
    }
    let it = links[..filled].iter().copied().chain(LinkScan { index, start: e.addr, off: resume, len: e.size });
    w.dense_alloc(&info, count, it)?;
    Ok(())
}

/// The hashbrown bits of a block's ALLOC flags: the layout proven on its
/// live contents (see `heapdump_format::hashbrown`), read where the dump
/// reads it anyway (the compact scan reads every word of the block).
fn hashbrown_flags(e: &Entry) -> u8 {
    if e.addr % 8 != 0 {
        return 0;
    }
    let end = e.addr + e.size;
    let log2 = heapdump_format::hashbrown::proven_log2(e.size, |offset| {
        // SAFETY: offset < size: the bytes from it to the end of the live
        // allocation are readable, and nothing writes them while the world
        // is stopped (or in the forked writer's copy).
        unsafe { core::slice::from_raw_parts((e.addr + offset) as *const u8, (end - e.addr - offset) as usize) }
    });
    log2 << raw::ALLOC_HASHBROWN_SHIFT
}

/// Calls `emit(a, b)` for each part of `[start, end)` outside every hole,
/// in address order. Holes may overlap, be empty or reach outside the
/// range; they are sorted here.
fn outside_holes(
    start: u64,
    end: u64,
    holes: &mut [(u64, u64)],
    mut emit: impl FnMut(u64, u64) -> Result<(), DumpError>,
) -> Result<(), DumpError> {
    holes.sort_unstable_by_key(|h| h.0);
    let mut cur = start;
    for &(a, b) in holes.iter() {
        if a >= b || b <= cur || a >= end {
            continue;
        }
        if a > cur {
            emit(cur, a)?;
        }
        cur = b;
    }
    if end > cur {
        emit(cur, end)?;
    }
    Ok(())
}

/// Most pieces one anonymous mapping is cut into.
const MAX_HOLES: usize = 512;

/// Calls `emit(start, end)` for each part of the anonymous mapping
/// `[start, end)` that is a root, as memcheck would see it:
///
/// - blocks glibc mapped for themselves (large allocations; the kernel
///   merges their mappings with a program's own neighbouring ones) are
///   left out, chunk header to chunk end, and the rest of the mapping is
///   scanned. A mapping holding any other tracked block is an allocator's
///   arena (glibc's per-thread heaps, whose free chunks keep stale words)
///   and is left out whole;
/// - the runtime's own mappings are left out;
/// - the stack of a thread that has ended (glibc caches it for reuse: its
///   descriptor is there, with a zero `tid`) is left out below the
///   thread's first frame, as memcheck, which marks popped frames
///   inaccessible, leaves it; its TLS and descriptor are still scanned.
fn anon_roots(start: u64, end: u64, index: &Index, mut emit: impl FnMut(u64, u64) -> Result<(), DumpError>) -> Result<(), DumpError> {
    let mut holes = [(0u64, 0u64); MAX_HOLES];
    let mut n = 0usize;
    let mut arena = false;
    let mut push = |h: (u64, u64), n: &mut usize| {
        if *n < MAX_HOLES {
            holes[*n] = h;
            *n += 1;
            true
        } else {
            false
        }
    };
    // Tracked blocks inside: glibc's mmapped chunks, or an arena.
    let blocks = index.as_slice();
    let mut i = blocks.partition_point(|e| e.addr < start);
    while i < blocks.len() && blocks[i].addr < end {
        let e = &blocks[i];
        i += 1;
        let Some(chunk) = mmapped_chunk(e.addr, e.size, start, end) else {
            arena = true;
            break;
        };
        if !push(chunk, &mut n) {
            arena = true;
            break;
        }
    }
    if arena {
        return Ok(());
    }
    sys::for_each_own(|a, b| {
        if a < end && start < b {
            push((a.max(start), b.min(end)), &mut n);
        }
    });
    let gap = |a: u64, b: u64| -> Result<(), DumpError> {
        // Within a gap, leave out the stacks of ended threads.
        let mut from = a;
        let mut r = Ok(());
        dead_stacks(a, b, |(x, y)| {
            if r.is_ok() && x > from {
                r = emit(from, x);
            }
            from = from.max(y);
        });
        r?;
        if b > from {
            emit(from, b)?;
        }
        Ok(())
    };
    outside_holes(start, end, &mut holes[..n], gap)
}

/// The chunk `[start, end)` of a block that glibc's malloc mapped for
/// itself, when `addr` is one: the chunk header before it has the
/// `IS_MMAPPED` bit, a page-multiple size that covers the block, and the
/// chunk lies in the mapping `[lo, hi)`.
fn mmapped_chunk(addr: u64, size: u64, lo: u64, hi: u64) -> Option<(u64, u64)> {
    const IS_MMAPPED: u64 = 2;
    let chunk = addr.checked_sub(16)?;
    if chunk < lo || addr % 16 != 0 {
        return None;
    }
    // SAFETY: [chunk, addr) lies in the readable mapping [lo, hi).
    let (prev, word) = unsafe { (core::ptr::read_volatile(chunk as *const u64), core::ptr::read_volatile((chunk + 8) as *const u64)) };
    let csize = word & !7;
    if word & IS_MMAPPED == 0 || csize % 4096 != 0 || csize < size + 16 {
        return None;
    }
    // A memalign'd chunk keeps its distance from the mapping's start in prev_size.
    let base = chunk.checked_sub(prev)?;
    let stop = chunk.checked_add(csize)?;
    (base >= lo && stop <= hi).then_some((base, stop))
}

/// Calls `hole(lo, hi)` for the stack part of each ended thread's stack in
/// `[start, end)`: glibc's descriptor of the thread (`struct pthread`, at
/// the top of its stack block, 64-byte aligned, whose first and third
/// words point to itself) with no `tid` (0 or -1). Only pages in memory
/// are looked at (a descriptor has been written), and only in mappings of
/// at most 1 GiB (a thread's stack; not a reservation of terabytes).
fn dead_stacks(start: u64, end: u64, mut hole: impl FnMut((u64, u64))) {
    let (tcb_size, tid_off) = stw::tcb_layout();
    if tid_off == 0 || end - start > 1 << 30 {
        return;
    }
    let tls = crate::static_tls_size();
    let mut pages = [0u8; 512];
    let mut below = start;
    let mut at = start;
    while at < end {
        let n = ((end - at) / 4096).min(pages.len() as u64) as usize;
        if n == 0 || sys::resident(at as *const u8, &mut pages[..n]).is_err() {
            return;
        }
        for (p, &r) in pages[..n].iter().enumerate() {
            if r & 1 == 0 {
                continue;
            }
            let page = at + p as u64 * 4096;
            for a in (page..page + 4096).step_by(64) {
                if a + tid_off + 4 > end {
                    break;
                }
                // SAFETY: `a` and its neighbours lie in a resident page of
                // the readable mapping [start, end) (checked above), aligned.
                let (w0, w2, tid) = unsafe {
                    (
                        core::ptr::read_volatile(a as *const u64),
                        core::ptr::read_volatile((a + 16) as *const u64),
                        core::ptr::read_volatile((a + tid_off) as *const u32),
                    )
                };
                // The kernel clears `tid` when the thread ends, and glibc
                // marks a joined thread's descriptor with -1.
                if w0 == a && w2 == a && (tid as i32) <= 0 {
                    // The stack grows down from below the static TLS, which
                    // ends at the descriptor's end (TLS_TCB_AT_TP).
                    let top = (a + tcb_size).saturating_sub(tls).max(below);
                    if top > below {
                        hole((below, top));
                    }
                    below = a + tcb_size.max(64);
                }
            }
        }
        at += n as u64 * 4096;
    }
}

/// Thread-local storage as a root, when it lies outside the dumped stack
/// (the main thread's static TLS sits in its own mapping; the helper
/// thread's stack is not dumped).
#[allow(clippy::too_many_arguments)]
fn tls_root(
    w: &mut Writer<'_, PipeSink>,
    mode: Mode,
    index: &Index,
    pairs: &mut [(u64, u64)],
    maps: &Maps<'_>,
    fs: u64,
    stack_start: u64,
    stack_end: u64,
    tid: u32,
) -> Result<(), DumpError> {
    if fs == 0 || (fs >= stack_start && fs < stack_end) {
        return Ok(());
    }
    let Some((ms, me)) = maps.find(fs) else { return Ok(()) };
    // glibc (x86-64) puts the static TLS blocks right below the thread
    // pointer and the thread descriptor, with the DTV pointer, above it.
    let start = fs.saturating_sub(crate::static_tls_size()).max(ms);
    let end = (fs + 4096).min(me);
    let mut name = [0u8; 32];
    name[..4].copy_from_slice(b"tls ");
    let n = 4 + fmt_u64(tid.into(), &mut name[4..]);
    // The runtime's own thread-local variables are left out.
    let mut holes =
        crate::own_tls(stw::fs_base()).map(|(off, len)| if len == 0 { (0, 0) } else { (fs.wrapping_add(off), fs.wrapping_add(off) + len) });
    outside_holes(start, end, &mut holes, |a, b| {
        let info = StaticInfo { address: a, size: b - a, module: raw::NO_MODULE, name: &name[..n] };
        region(w, mode, index, pairs, a, b - a, |w, c| w.static_root(&info, c))
    })
}
