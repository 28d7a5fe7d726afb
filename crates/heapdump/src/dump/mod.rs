//! Writing a dump: stop the world (or fork), then write the format from
//! the tables: the process, the modules, each thread's stack and TLS, the
//! roots outside the heap, the sites and every live allocation.
//!
//! Nothing on this path allocates: buffers are mapped from the kernel once
//! and kept, output goes through raw `write(2)`, /proc files are read with
//! raw `read(2)`. A dump in progress excludes others (a spin flag).
//! What the dump reads comes in as [`Sources`] (the tables and the
//! configuration) and [`Request`] (what was asked and why): it knows
//! nothing of the runtime's global state or its triggers.
//!
//! The room owns the writing: this file (the sequence), `index` (the live
//! blocks sorted, and which block a word points into, through the format's
//! lookup), `scan` (memory into records), `roots` (what outside the heap is
//! a root), `modules` (the module map), `assist` (a second thread scanning
//! for compact dumps), `writer` (a second thread writing the bytes),
//! `collapse` (huge pages before a forked dump) and `outcome` (what a dump
//! gives back). It may touch `table`, `sites`, `entry`, `config` (the
//! settings it is handed), `stop` (to stop and resume the world) and
//! `sys`; never `state` or `trigger`, which call it.

pub(crate) mod assist;
pub(crate) mod collapse;
pub(crate) mod index;
pub(crate) mod modules;
pub(crate) mod outcome;
pub(crate) mod roots;
pub(crate) mod scan;
pub(crate) mod writer;

use crate::config::Config;
use crate::dump::assist::{Assist, Large, CHUNK};
use crate::dump::collapse::collapse_heap;
use crate::dump::index::{build_index, Index, Prepared};
use crate::dump::modules::Modules;
use crate::dump::outcome::{DumpError, DumpInfo};
use crate::dump::roots::{anon_roots, outside_holes, tls_root, OwnTls};
use crate::dump::scan::Scanner;
use crate::dump::writer::PipeSink;
use crate::sites::Sites;
use crate::stop::stw::{self, Regs, RSP};
use crate::sys::procfs::{self, Maps, MapsText};
use crate::sys::{self, Mapping};
use crate::table::Table;
use core::sync::atomic::{AtomicBool, Ordering};
use heapdump_format::{
    raw, Header, History, LimitInfo, Link, MemoryInfo, Mode, ModuleInfo, Process, Reason, SignalInfo, Static, ThreadInfo, WriteError,
    Writer,
};

/// What a dump reads: the runtime's tables and its configuration.
#[derive(Clone, Copy)]
pub struct Sources<'a> {
    /// The live allocations.
    pub table: &'a Table,
    /// Their sites.
    pub sites: &'a Sites,
    /// The configuration in force.
    pub config: &'a Config,
    /// The runtime's own statics that hold heap addresses, `[start, end)`:
    /// never a root.
    pub own_statics: (u64, u64),
    /// The runtime's own thread-local variables: never a root.
    pub own_tls: OwnTls,
}

/// What a dump is asked for.
#[derive(Clone, Copy)]
pub struct Request<'a> {
    /// Full or compact.
    pub mode: Mode,
    /// Why.
    pub reason: Reason,
    /// The registers of the calling thread at the public entry point: its
    /// stack below `entry_regs[RSP]` belongs to the runtime, not a root.
    pub entry_regs: &'a Regs,
    /// The dump runs on the runtime's helper thread, which is no thread of
    /// the program's: then the caller is not a root at all.
    pub on_helper: bool,
    /// The signal the dump was taken for, when one was.
    pub signal: Option<SignalInfo>,
    /// The memory limit that was near (near-limit dumps).
    pub limit: Option<LimitInfo>,
    /// Called first in a forked writer, before it writes its parent's dump
    /// (the caller says so to whoever listens: `report::writer`).
    pub in_forked_writer: fn(),
}

static DUMPING: AtomicBool = AtomicBool::new(false);

/// Scratch memory for dumps, mapped on the first and kept.
struct Scratch {
    /// The staging buffer.
    buf: Option<Mapping>,
    /// /proc/self/maps.
    maps: MapsText,
    /// A region's first pointers (compact dumps).
    pairs: Option<Mapping>,
    /// An allocation's first pointers, as the ALLOCS record names them.
    links: Option<Mapping>,
    /// Where the writer gathers an ALLOCS record.
    batch: Option<Mapping>,
    modules: Option<Modules>,
    /// Shared with the forked writer: its result.
    shared: Option<Mapping>,
    /// The helper writer's slots and stack (null: write on the dumping thread).
    pipe: *mut u8,
    /// The scanning helper's slots and stack (null: scan on the dumping
    /// thread alone).
    assist: *mut u8,
}

static mut SCRATCH: Scratch = Scratch {
    buf: None,
    maps: MapsText::new(),
    pairs: None,
    links: None,
    batch: None,
    modules: None,
    shared: None,
    pipe: core::ptr::null_mut(),
    assist: core::ptr::null_mut(),
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
/// Fewer live blocks than this are scanned by the dumping thread alone
/// (starting the helper and handing over chunks cost more than they save).
const ASSIST_MIN: usize = 64 * CHUNK;

/// Takes one dump into `fd`.
pub fn write_dump(src: Sources<'_>, fd: i32, req: &Request<'_>) -> Result<DumpInfo, DumpError> {
    while DUMPING.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
        sys::yield_now();
    }
    let r = write_locked(src, fd, req);
    DUMPING.store(false, Ordering::Release);
    r
}

fn mapped(m: &mut Option<Mapping>, len: usize, what: &'static str, shared: bool) -> Result<(), DumpError> {
    if m.is_none() {
        let r = if shared { Mapping::shared(len) } else { Mapping::anon(len) };
        *m = Some(r.map_err(|errno| DumpError::Os { what, errno })?);
    }
    Ok(())
}

#[allow(static_mut_refs)]
fn scratch() -> Result<&'static mut Scratch, DumpError> {
    // SAFETY: SCRATCH is only touched with DUMPING held, so never aliased.
    let s = unsafe { &mut SCRATCH };
    mapped(&mut s.buf, WRITE_BUF, "mapping the write buffer", false)?;
    mapped(&mut s.pairs, PAIRS * 16, "mapping scratch", false)?;
    mapped(&mut s.links, PAIRS * core::mem::size_of::<Link>(), "mapping scratch", false)?;
    mapped(&mut s.batch, BATCH, "mapping scratch", false)?;
    mapped(&mut s.shared, 4096, "mapping shared scratch", true)?;
    if s.pipe.is_null() {
        s.pipe = writer::map();
    }
    if s.assist.is_null() {
        s.assist = assist::map();
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
fn writes_much(table: &Table, mode: Mode) -> bool {
    let (count, bytes) = table.live();
    let estimate = match mode {
        Mode::Full => bytes,
        // A compact record: header, first word, a few pointer pairs.
        Mode::Compact => count.saturating_mul(64),
    };
    estimate >= 32 << 20
}

/// The world is held from `t0`; a forked writer was told how long.
#[derive(Clone, Copy)]
struct Held {
    stopped: stw::Stopped,
    t0: u64,
    pause: Option<u64>,
}

fn write_locked(src: Sources<'_>, fd: i32, req: &Request<'_>) -> Result<DumpInfo, DumpError> {
    let sc = scratch()?;
    // The loader's lock may be held by a thread we are about to stop:
    // read the module map first.
    if let Some(m) = sc.modules.as_mut() {
        m.refresh();
    }
    let config = src.config;
    // Never fork near the memory limit: the forked writer is charged to the
    // same cgroup, and each page the program writes after the fork would be
    // copied.
    let fork = config.fork && req.reason != Reason::NearLimit;
    // Not on allocation failure: collapsing takes memory.
    let collapse_ns = if fork && config.collapse && req.reason != Reason::AllocFailure {
        let c0 = sys::monotonic_ns();
        collapse_heap(&sc.maps.read(), src.table);
        sys::monotonic_ns() - c0
    } else {
        0
    };
    // The writer thread is started before the world stops, and left
    // running by it; a forked writer starts its own (here: none).
    let pipe = if writes_much(src.table, req.mode) { sc.pipe } else { core::ptr::null_mut() };
    let sink = PipeSink::start(fd, if fork { core::ptr::null_mut() } else { pipe });
    // The index's memory, made ready while the program runs (see
    // `Prepared`); a forked writer maps its own.
    let prepared = if fork { None } else { Prepared::new(src.table) };
    let t0 = sys::monotonic_ns();
    let stopped = stw::stop(sink.helper_tid());
    if !fork {
        let r = write_body(src, sc, sink, req, prepared, Held { stopped, t0, pause: None });
        stw::resume();
        return r;
    }
    let r = match sys::raw_fork() {
        Ok(0) => {
            // Child: one thread, a copy of the stopped image. Write and leave.
            let pause = sys::monotonic_ns() - t0;
            (req.in_forked_writer)();
            let sink = PipeSink::start(fd, pipe);
            let code = match write_body(src, sc, sink, req, None, Held { stopped, t0, pause: Some(pause) }) {
                Ok(info) => {
                    if let Some(m) = sc.shared.as_mut() {
                        // SAFETY: a MAP_SHARED page the parent reads after
                        // waiting for this process; any bits are a valid
                        // DumpInfo (plain integers).
                        unsafe { m.typed_mut::<DumpInfo>()[0] = info };
                    }
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
        return Err(if (1..=250).contains(&code) { DumpError::Write(WriteError::Sink { errno: code }) } else { DumpError::Child(status) });
    }
    // SAFETY: the child wrote its result into the shared page and has
    // exited; any bits are a valid DumpInfo.
    let mut info = sc.shared.as_mut().map_or_else(DumpInfo::default, |m| unsafe { m.typed_mut::<DumpInfo>()[0] });
    info.pause_ns = pause;
    info.collapse_ns = collapse_ns;
    info.not_stopped = stopped.not_stopped;
    Ok(info)
}

fn write_body(
    src: Sources<'_>,
    sc: &mut Scratch,
    sink: PipeSink,
    req: &Request<'_>,
    prepared: Option<Prepared>,
    held: Held,
) -> Result<DumpInfo, DumpError> {
    // The sorted index serves the compact scan and, in both modes, tells
    // which anonymous mappings hold heap blocks.
    let mut index = build_index(src.table, prepared)?;
    let result = write_records(src, sc, sink, req, held, &index);
    index.release();
    result
}

fn write_records(
    src: Sources<'_>,
    sc: &mut Scratch,
    sink: PipeSink,
    req: &Request<'_>,
    held: Held,
    index: &Index,
) -> Result<DumpInfo, DumpError> {
    let mode = req.mode;
    let maps = sc.maps.read();
    let assist_map = sc.assist;
    let unmapped = || DumpError::Os { what: "mapping scratch", errno: libc::ENOMEM };
    let buf = sc.buf.as_mut().ok_or_else(unmapped)?.bytes_mut();
    let batch = sc.batch.as_mut().ok_or_else(unmapped)?.bytes_mut();
    // SAFETY: plain integers: zeros (or earlier dumps' values) are valid.
    let pairs = unsafe { sc.pairs.as_mut().ok_or_else(unmapped)?.typed_mut::<(u64, u64)>() };
    // SAFETY: `Link` is three plain integers: every bit pattern is valid.
    let links = unsafe { sc.links.as_mut().ok_or_else(unmapped)?.typed_mut::<Link>() };
    let mut scanner = Scanner::new(mode, index, pairs, links);
    let header = Header::new(mode, req.reason, sys::page_size(), sys::getpid(), sys::realtime_ns());
    let mut w = Writer::new(sink, buf, &header)?;
    w.set_batch_buffer(batch)?;
    process_record(&mut w, src.config)?;
    if let Some(cause) = req.signal {
        w.signal(&cause)?;
    }
    let (total_allocations, total_bytes, peak_bytes) = src.table.history();
    w.history(&History { peak_bytes, total_allocations, total_bytes })?;
    // What the process holds besides its heap: a heap far smaller than it
    // tells a program allocating past malloc (#40).
    if let Some(resident_anon) = crate::trigger::limit::resident_anon() {
        w.memory(&MemoryInfo { resident_anon })?;
    }
    if let Some(l) = req.limit {
        w.limit(&l)?;
    }
    let modules = sc.modules.as_ref();
    if let Some(m) = modules {
        for md in m.iter() {
            w.module(&ModuleInfo { bias: md.bias, path: m.path(md), build_id: md.build_id(), segments: md.segments() })?;
        }
    }
    let threads = write_threads(&mut w, &mut scanner, &maps, &src.own_tls, req)?;
    write_anon_roots(&mut w, &mut scanner, &maps)?;
    // Static roots: the writable segments of every module, less the
    // runtime's own statics (its tables hold every block's address).
    if let Some(m) = modules {
        for (i, md) in m.iter().enumerate() {
            for seg in md.segments() {
                if seg.flags & raw::SEG_W == 0 || seg.memsz == 0 {
                    continue;
                }
                let start = md.bias.wrapping_add(seg.vaddr);
                outside_holes(start, start + seg.memsz, &mut [src.own_statics], |a, b| {
                    let info = Static { address: a, size: b - a, module: i as u32, name: b".data+.bss" };
                    scanner.region(&mut w, a, b - a, |w, c| w.static_root(&info, c))
                })?;
            }
        }
    }
    // Sites.
    let mut site_err = Ok(());
    // SAFETY: the world is stopped (or we are the forked child).
    unsafe {
        src.sites.for_each_unlocked(|id, frames| {
            if site_err.is_ok() {
                site_err = w.site(id, frames);
            }
        })
    };
    site_err?;
    write_site_totals(&mut w, &src)?;
    // Allocations, in address order: a compact dump of many shares their
    // scan with a second thread (see `assist`), a chunk of blocks at a time.
    let all = index.as_slice();
    let mut assist = if mode == Mode::Compact && all.len() >= ASSIST_MIN { Assist::start(assist_map, index) } else { Assist::NONE };
    let ordinals_disagree = || DumpError::Write(WriteError::LengthMismatch { what: "allocation ordinals and the index disagree" });
    for j in 0..all.len().div_ceil(CHUNK) {
        let (from, to) = (j * CHUNK, ((j + 1) * CHUNK).min(all.len()));
        let mut next = from;
        if let Some(scanned) = assist.take(j) {
            // ALLOCS pointers name their targets by index position: the
            // writer checks that the chunk's first ordinal is its next.
            w.allocs_encoded(&scanned.encoded, scanned.bytes)?;
            next = from + scanned.encoded.count as usize;
            assist.release(j);
        }
        for (i, e) in all.iter().enumerate().take(to).skip(next) {
            if mode == Mode::Compact {
                // The lookups of a dense heap's pointers are random reads of
                // the directory and the index: start them for the blocks
                // ahead, buckets first, then the entries the buckets name,
                // so that the scan of this block finds them in the cache.
                if let Some(f) = all.get(i + 2 * PREFETCH_AHEAD) {
                    index.prefetch(f.addr, f.size, false);
                }
                if let Some(f) = all.get(i + PREFETCH_AHEAD) {
                    index.prefetch(f.addr, f.size, true);
                }
                if w.next_ordinal() != i as u64 {
                    return Err(ordinals_disagree());
                }
                match assist.measured(i) {
                    Some(Large::Encoded(links, bytes)) => {
                        w.dense_alloc_encoded(&scan::alloc_info(e), links, bytes)?;
                        continue;
                    }
                    Some(Large::Measured(count, len)) => {
                        scanner.alloc_measured(&mut w, e, count, len)?;
                        continue;
                    }
                    None => {}
                }
            }
            scanner.alloc(&mut w, e)?;
        }
    }
    assist.finish();
    let pause = held.pause.unwrap_or_else(|| sys::monotonic_ns() - held.t0);
    let totals = *w.totals();
    let (mut sink, bytes) = w.finish(pause)?;
    sink.finish()?;
    Ok(DumpInfo {
        file_bytes: bytes,
        allocations: totals.allocations,
        alloc_bytes: totals.alloc_bytes,
        threads,
        not_stopped: held.stopped.not_stopped,
        pause_ns: pause,
        collapse_ns: 0,
    })
}

/// The THREAD records (each thread's stack, registers and TLS): the
/// calling thread's unless the dump runs on the runtime's helper, then
/// every stopped one, and those that could not stop as they wait in the
/// kernel. Returns how many.
fn write_threads(
    w: &mut Writer<'_, PipeSink>,
    scanner: &mut Scanner<'_>,
    maps: &Maps<'_>,
    own_tls: &OwnTls,
    req: &Request<'_>,
) -> Result<u32, DumpError> {
    let me = sys::gettid();
    let mut threads = 0u32;
    let fs = sys::fs_base();
    if !req.on_helper {
        let mut name = [0u8; 16];
        let name = procfs::thread_name(me, &mut name);
        let sp = req.entry_regs[RSP];
        let end = maps.end_of(sp).unwrap_or(sp);
        let info = ThreadInfo { tid: me, flags: raw::THREAD_CURRENT, stack_start: sp, stack_end: end, tls: fs, name, regs: req.entry_regs };
        scanner.region(w, sp, end - sp, |w, c| w.thread(&info, c))?;
        threads += 1;
        tls_root(w, scanner, maps, own_tls, fs, sp, end, me)?;
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
            scanner.region(w, start, end - start, |w, c| w.thread(&info, c))?;
            tls_root(w, scanner, maps, own_tls, s.fs(), start, end, tid)?;
        } else {
            // Not stopped: its stack as it is while the thread waits in
            // the kernel (registers unknown), when it does.
            let sp = s.blocked_sp();
            let (start, end) = if sp != 0 { maps.stack_of(sp) } else { (0, 0) };
            let info = ThreadInfo { tid, flags: raw::THREAD_NOT_STOPPED, stack_start: start, stack_end: end, tls: 0, name, regs: &[] };
            scanner.region(w, start, end - start, |w, c| w.thread(&info, c))?;
        }
        threads += 1;
    }
    Ok(threads)
}

/// Anonymous writable mappings that are neither heap nor stacks nor the
/// runtime's own, scanned as roots as memcheck scans them (a program's own
/// mmap'd pools, the descriptors and TLS of exited threads); see
/// `anon_roots` for what is left out of them.
fn write_anon_roots(w: &mut Writer<'_, PipeSink>, scanner: &mut Scanner<'_>, maps: &Maps<'_>) -> Result<(), DumpError> {
    // Threads' stacks are left out with their whole mapping (scanned as
    // thread roots from the stack pointer up; below it the stack is dead).
    // A thread's TLS is left out as the range its TLS root scans: the
    // main thread's sits in a mapping of its own, which the kernel merges
    // with a neighbour as soon as the hole between them is filled (a
    // program's pool, whose words are roots, came out unscanned in CI).
    let mut stacks = [(0u64, 0u64); 256];
    let mut tls = [(0u64, 0u64); 256];
    let (mut ns, mut nt) = (0, 0);
    let mut stack = |a: u64| {
        // The runtime's own stacks are left out as its own mappings are,
        // not with the whole (possibly merged) mapping around them.
        if sys::overlaps_own(a, a + 1) {
            return;
        }
        if let Some(r) = maps.find(a) {
            if ns < stacks.len() {
                stacks[ns] = r;
                ns += 1;
            }
        }
    };
    let mut thread_tls = |fs: u64| {
        if fs != 0 && nt < tls.len() && !sys::overlaps_own(fs, fs + 1) {
            tls[nt] = (fs.saturating_sub(stw::static_tls_size()), fs.saturating_add(4096));
            nt += 1;
        }
    };
    stack(stw::current_regs()[RSP]);
    thread_tls(sys::fs_base());
    let (rsp, rfs) = stw::runtime_thread();
    if rsp != 0 {
        stack(rsp);
        stack(rfs);
    }
    for s in stw::stopped_threads() {
        if s.stopped() {
            stack(s.regs()[RSP]);
            thread_tls(s.fs());
        }
    }
    let (stacks, tls) = (&stacks[..ns], &tls[..nt]);
    let index = scanner.index();
    let mut anon_err: Result<(), DumpError> = Ok(());
    maps.for_each_anon_rw(false, |start, end| {
        if anon_err.is_err() || stacks.iter().any(|&(a, b)| a < end && start < b) {
            return;
        }
        let mut holes = [(0u64, 0u64); 256];
        let mut nh = 0;
        for &(a, b) in tls.iter().filter(|&&(a, b)| a < end && start < b) {
            holes[nh] = (a, b);
            nh += 1;
        }
        anon_err = outside_holes(start, end, &mut holes[..nh], |lo, hi| {
            anon_roots(lo, hi, index, |a, b| {
                let info = Static { address: a, size: b - a, module: raw::NO_MODULE, name: b"anon" };
                scanner.region(w, a, b - a, |w, c| w.static_root(&info, c))
            })
        });
    });
    anon_err
}

/// The SITE_TOTALS record: per-site totals since start and each site at
/// the recorded peak, when every allocation had a site (sampled sites'
/// counts would be a sample's; without sites there is nothing to count).
fn write_site_totals(w: &mut Writer<'_, PipeSink>, src: &Sources<'_>) -> Result<(), DumpError> {
    if src.config.backtrace != crate::config::Backtrace::All {
        return Ok(());
    }
    // SAFETY: the world is stopped (or we are the forked child).
    unsafe { src.table.record_peak_now() };
    let Some((peak, peak_ns)) = src.table.recorded_peak() else { return Ok(()) };
    let mut count = 0u32;
    // SAFETY: the world is stopped (or we are the forked child).
    unsafe { src.table.for_each_site_row(|_| count = count.saturating_add(1)) };
    w.site_totals(peak, peak_ns, count, |put| {
        // SAFETY: as above; the second pass finds the rows of the first
        // (the counts were already moved out of the caches).
        unsafe {
            src.table.for_each_site_row(|r| {
                let _ = put(&heapdump_format::SiteTotal {
                    site: r.site,
                    allocations: r.allocs,
                    bytes: r.bytes,
                    temporary: r.temps,
                    peak_count: r.peak_count,
                    peak_bytes: r.peak_bytes,
                });
            })
        }
    })?;
    Ok(())
}

/// The PROCESS record: the executable, the command line, how sites were
/// captured.
fn process_record(w: &mut Writer<'_, PipeSink>, config: &Config) -> Result<(), DumpError> {
    let mut exe = [0u8; 1024];
    let n = procfs::exe_path(&mut exe);
    let mut cmd = [0u8; 8192];
    let c = sys::read_file(c"/proc/self/cmdline", &mut cmd).unwrap_or(0);
    w.process(&Process {
        backtrace: config.backtrace,
        max_frames: config.max_frames as u32,
        sample_mean: config.sample_mean,
        exe: &exe[..n],
        cmdline: &cmd[..c],
        flags: 0,
    })?;
    Ok(())
}
