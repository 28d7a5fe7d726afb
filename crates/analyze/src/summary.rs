//! `heapdump summary`: what a dump holds, read in one pass over its records.

use crate::error::{AnalyzeError, Result};
use crate::file::DumpFile;
use heapdump_format::{Record, Trailer};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The summary of one dump. Field names are the `summary --json` keys.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    /// Number of live allocations.
    pub allocations: u64,
    /// Their requested bytes.
    pub bytes: u64,
    /// `compact` or `full`.
    pub mode: String,
    /// Process id.
    pub pid: u32,
    /// Number of the program's threads (never the runtime's own).
    pub threads: u64,
    /// Threads that could not be stopped (they block the stop signal or
    /// did not answer in time): their stacks were read while they ran.
    pub threads_not_stopped: u64,
    /// Number of root regions: thread stacks, thread-local areas, static
    /// segments, anonymous regions (as `Heap::root_region_count`).
    pub roots: u64,
    /// Why the dump was taken.
    pub reason: String,
    /// The signal it was taken for (the dump signal, a signal that ended
    /// the program, a crash), when one was.
    pub signal: Option<SignalSummary>,
    /// The memory limit a near-limit dump was taken for.
    pub limit: Option<LimitSummary>,
    /// The highest live bytes since the program started, where the capture
    /// knows it (null for dumps before format 1.2).
    pub peak_bytes: Option<u64>,
    /// Allocations made since the program started (null where unknown).
    pub total_allocations: Option<u64>,
    /// Bytes allocated since the program started (null where unknown).
    pub total_bytes: Option<u64>,
    /// How long the program's threads were held stopped, in microseconds
    /// (null when the trailer is missing).
    pub pause_us: Option<u64>,
    /// Wall-clock time of the dump, seconds since the Unix epoch.
    pub time: f64,
    /// Executable path.
    pub exe: String,
    /// Command line.
    pub cmdline: Vec<String>,
    /// Number of loaded modules.
    pub modules: u64,
    /// Number of distinct allocation sites.
    pub sites: u64,
    /// How sites were captured (`off`, `all`, `sampled`).
    pub backtrace: String,
    /// Captured from outside the process (`attach`, `core`): no sites,
    /// sizes are the allocator's usable sizes.
    pub outside: bool,
    /// Mean sampling interval in bytes, when sampled.
    pub sample_mean: u64,
    /// Pointer entries (compact mode).
    pub pointers: u64,
    /// Format version, `major.minor`.
    pub format_version: String,
    /// File size in bytes.
    pub file_bytes: u64,
    /// Present when the dump is incomplete: what is missing and where.
    pub truncated: Option<String>,
    /// The allocator whose heap the dump shows, where known: the one a
    /// capture from outside read, with its version (`jemalloc 5.3.0`,
    /// `glibc 2.36`); for the runtime's dumps, the allocator module the
    /// program maps (`jemalloc`), else `glibc`.
    pub allocator: Option<String>,
    /// What the reader of this dump should know about it (a program that
    /// allocates through its own, statically linked allocator).
    pub warnings: Vec<String>,
    /// The process's resident anonymous memory when the runtime wrote the
    /// dump (its MEMORY record, since 1.6), in bytes.
    pub resident_anon: Option<u64>,
}

/// The `limit` of `summary --json`: which limit, and what it counted.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LimitSummary {
    /// `cgroup memory.max`, `cgroup memory.high`, `cgroup
    /// memory.limit_in_bytes`, `RLIMIT_AS`, `RLIMIT_DATA`, `physical memory`.
    pub kind: String,
    /// The limit in bytes.
    pub bytes: u64,
    /// What it counted when the dump was decided.
    pub used: u64,
}

/// The `signal` of `summary --json`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SignalSummary {
    /// Its number.
    pub number: u32,
    /// Its name (`SIGSEGV`), or `SIG<number>`.
    pub name: String,
    /// `si_code`: above 0 when the kernel raised it (a fault).
    pub code: i32,
    /// The thread that received it (for a crash, the faulting one).
    pub tid: u32,
    /// The faulting address, `"0x…"`, for a fault; else null.
    pub address: Option<String>,
    /// The process that sent it, when one did; else null.
    pub sender: Option<u32>,
}

impl SignalSummary {
    /// From the SIGNAL record.
    pub fn of(g: &heapdump_format::SignalInfo) -> SignalSummary {
        SignalSummary {
            number: g.signal,
            name: heapdump_format::settings::signal_name(g.signal).map_or_else(|| format!("SIG{}", g.signal), str::to_string),
            code: g.code,
            tid: g.tid,
            address: (g.code > 0 && g.address != 0).then(|| format!("{:#x}", g.address)),
            sender: (g.sender != 0).then_some(g.sender),
        }
    }

    /// One line: `SIGSEGV at 0x10 in thread 1234`, `SIGTERM from process 99`.
    pub fn describe(&self) -> String {
        let mut s = self.name.clone();
        if let Some(a) = &self.address {
            s += &format!(" at {a}");
        }
        s += &format!(" in thread {}", self.tid);
        if let Some(p) = self.sender {
            s += &format!(", sent by process {p}");
        }
        s
    }
}

impl Summary {
    /// Reads `file` once. A dump cut short is summarised as far as it goes,
    /// with `truncated` saying where it stops; any other damage is an error.
    pub fn of(file: &DumpFile) -> Result<Summary> {
        Ok(Self::read(file)?.warned())
    }

    /// [`Summary::of`] but the warnings: what the dump's records say,
    /// nothing else (the warnings read the program's executable, where it
    /// is now: see [`Summary::warned`]).
    pub(crate) fn read(file: &DumpFile) -> Result<Summary> {
        let dump = file.dump()?;
        let h = *dump.header();
        let mut s = Summary {
            allocations: 0,
            bytes: 0,
            mode: h.mode.as_str().to_string(),
            pid: h.pid,
            threads: 0,
            threads_not_stopped: 0,
            roots: 0,
            reason: h.reason.as_str().to_string(),
            signal: None,
            limit: None,
            peak_bytes: None,
            total_allocations: None,
            total_bytes: None,
            pause_us: None,
            time: h.time_ns as f64 / 1e9,
            exe: String::new(),
            cmdline: vec![],
            modules: 0,
            sites: 0,
            backtrace: "off".to_string(),
            outside: false,
            sample_mean: 0,
            pointers: 0,
            format_version: format!("{}.{}", h.major, h.minor),
            file_bytes: file.bytes().len() as u64,
            truncated: None,
            allocator: None,
            warnings: Vec::new(),
            resident_anon: None,
        };
        let mut modules: Vec<String> = Vec::new();
        let mut records = dump.records();
        let mut trailer: Option<Trailer> = None;
        let mut root_records = 0u64;
        for r in records.by_ref() {
            match r {
                Ok((_, Record::Process(p))) => {
                    s.exe = String::from_utf8_lossy(p.exe).into_owned();
                    s.cmdline =
                        p.cmdline.split(|&b| b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
                    s.backtrace = p.backtrace.as_str().to_string();
                    s.outside = p.flags & heapdump_format::raw::PROCESS_OUTSIDE != 0;
                    s.sample_mean = p.sample_mean;
                }
                Ok((_, Record::End(t))) => trailer = Some(t),
                Ok((_, Record::Allocator(a))) => s.allocator = Some(String::from_utf8_lossy(a).into_owned()),
                Ok((_, Record::Module(m))) if modules.len() < 4096 => modules.push(String::from_utf8_lossy(m.path).into_owned()),
                Ok((_, Record::Signal(g))) => s.signal = Some(SignalSummary::of(&g)),
                Ok((_, Record::History(h))) => {
                    s.peak_bytes = Some(h.peak_bytes);
                    s.total_allocations = Some(h.total_allocations);
                    s.total_bytes = Some(h.total_bytes);
                }
                Ok((_, Record::Memory(m))) => s.resident_anon = Some(m.resident_anon),
                Ok((_, Record::Limit(l))) => s.limit = Some(LimitSummary { kind: l.kind_name().to_string(), bytes: l.bytes, used: l.used }),
                Ok((_, Record::Thread(t))) => {
                    root_records += 1;
                    if t.flags & heapdump_format::raw::THREAD_NOT_STOPPED != 0 {
                        s.threads_not_stopped += 1;
                    }
                }
                // A thread's stack and every static region: the root
                // regions `Heap::root_region_count` counts.
                Ok((_, Record::Static(_))) => root_records += 1,
                Ok(_) => {}
                Err(e) if e.is_truncation() => {
                    s.truncated = Some(e.to_string());
                    break;
                }
                Err(source) => return Err(AnalyzeError::Format { path: file.path().to_path_buf(), source }),
            }
        }
        let c = trailer.unwrap_or(*records.counted());
        s.allocations = c.allocations;
        s.bytes = c.alloc_bytes;
        s.threads = c.threads.into();
        s.roots = root_records;
        s.modules = c.modules.into();
        s.sites = c.sites;
        s.pointers = c.pointers;
        s.pause_us = trailer.map(|t| t.pause_ns / 1000);
        if !s.outside && s.allocator.is_none() {
            s.allocator = mapped_allocator(&modules);
        }
        Ok(s)
    }

    /// With its warnings: an allocator the executable links in (read
    /// where the dump says it is), else memory the process held past
    /// malloc.
    pub(crate) fn warned(mut self) -> Summary {
        if !self.outside {
            if let Some(own) = own_allocator(Path::new(&self.exe)) {
                self.warnings.push(static_allocator_warning(own));
            } else if let Some(rss) = self.resident_anon {
                let peak = self.peak_bytes.unwrap_or(0).max(self.bytes);
                self.warnings.extend(unseen_memory_warning(rss, peak, self.total_allocations.unwrap_or(0).max(self.allocations)));
            }
        }
        self
    }
}

/// The allocators a program can map or link in, by a symbol or a file
/// name of theirs.
const ALLOCATORS: &[(&str, &[&str])] = &[
    ("jemalloc", &["je_malloc", "_rjem_malloc", "_rjem_je_malloc_default", "je_malloc_default"]),
    // The Rust `mimalloc` crate calls only the aligned entry points and
    // mi_free: a release build keeps no mi_malloc.
    ("mimalloc", &["mi_malloc", "mi_heap_malloc", "mi_malloc_aligned", "mi_free"]),
    ("tcmalloc", &["tc_malloc", "_ZN8tcmalloc"]),
];

/// The allocator module a runtime dump's program maps (the preload
/// library forwards to it), else glibc's when libc.so.6 is mapped.
fn mapped_allocator(modules: &[String]) -> Option<String> {
    let name = |m: &String| m.rsplit('/').next().unwrap_or("").to_string();
    for (a, _) in ALLOCATORS {
        if modules.iter().any(|m| name(m).starts_with("lib") && name(m).contains(a)) {
            return Some(a.to_string());
        }
    }
    modules.iter().any(|m| name(m).starts_with("libc.so.")).then(|| "glibc".to_string())
}

/// The allocator the executable links in statically (its symbol table
/// names it), when it can be read: what it allocates never goes through
/// `malloc`, so a dump of `heapdump run` does not see it.
pub fn own_allocator(exe: &Path) -> Option<&'static str> {
    use object::{Object, ObjectSymbol};
    if !std::fs::metadata(exe).ok()?.is_file() {
        return None;
    }
    let map = crate::cache_file::map(exe).ok()?;
    let obj = object::File::parse(&*map).ok()?;
    for sym in obj.symbols().chain(obj.dynamic_symbols()) {
        if !sym.is_definition() {
            continue;
        }
        let Ok(n) = sym.name() else { continue };
        for (a, names) in ALLOCATORS {
            if names.iter().any(|x| n == *x || (x.ends_with("tcmalloc") && n.starts_with(x))) {
                return Some(a);
            }
        }
    }
    None
}

/// The resident anonymous memory a process may hold besides its heap
/// without a warning: the runtime's own tables, stacks, libraries' data.
const UNSEEN_SLACK: u64 = 32 << 20;

/// The warning for a runtime dump whose process held far more resident
/// anonymous memory (`resident_anon`) than its heap ever did through
/// malloc (`peak` bytes, `allocations` since start): it allocates past
/// malloc (an allocator of its own whose symbols are stripped, or mmap).
/// Conservative: 32 MiB, eight times the peak and 128 bytes per
/// allocation ever made may go unexplained (allocator rounding and
/// fragmentation, the runtime's tables), so a program whose memory went
/// through malloc never warns.
pub fn unseen_memory_warning(resident_anon: u64, peak: u64, allocations: u64) -> Option<String> {
    let explained = UNSEEN_SLACK.saturating_add(peak.saturating_mul(8)).saturating_add(allocations.saturating_mul(128));
    (resident_anon > explained).then(|| {
        format!(
            "this program holds {} of resident anonymous memory but its heap through malloc peaked at {}: it allocates past malloc (an allocator of its own, or mmap); what is shown is only what went through malloc; use `heapdump attach`, or `Tracked` in a Rust program",
            human(resident_anon),
            human(peak)
        )
    })
}

/// The unseen-memory warning of the dump at `path`, from its first
/// records (MEMORY and HISTORY come before the modules): for `run`, which
/// does not read the whole dump.
pub fn unseen_memory(file: &DumpFile) -> Option<String> {
    let dump = file.dump().ok()?;
    let (mut rss, mut history) = (None, None);
    for r in dump.records() {
        match r {
            Ok((_, Record::Memory(m))) => rss = Some(m.resident_anon),
            Ok((_, Record::History(h))) => history = Some(h),
            Ok((_, Record::Process(p))) if p.flags & heapdump_format::raw::PROCESS_OUTSIDE != 0 => return None,
            Ok((_, Record::Process(_) | Record::Signal(_) | Record::Limit(_) | Record::Allocator(_))) => continue,
            _ => break,
        }
    }
    let h = history?;
    unseen_memory_warning(rss?, h.peak_bytes, h.total_allocations)
}

fn human(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} bytes"),
    }
}

/// The warning for a program that allocates through its own `allocator`.
pub fn static_allocator_warning(allocator: &str) -> String {
    format!(
        "this program allocates through its own {allocator}: what is shown is only what went through malloc; use `heapdump attach`, or `Tracked` in a Rust program"
    )
}

/// The cache part holding a dump's summary, as its records say it.
const SUMMARY: &str = "hdsummary";

impl crate::analysis::Analysis<'_> {
    /// [`Summary::of`] the analysis' dump, from the cache when it keeps it
    /// (part `hdsummary`), else read and kept there: the walk of the
    /// records reads the whole dump (at 100 M blocks 1.7 GB, 1.9 s of the
    /// viewer's cold first page), kept it is a few hundred bytes. What is
    /// kept is checked against the dump's header and trailer and the
    /// file's length; the warnings are made again each time (they read
    /// the program's executable as it is now).
    pub fn summary_kept(&self) -> Result<Summary> {
        let file = self.file();
        let Some(c) = self.cache_file() else { return Summary::of(file) };
        if let Some(s) = self.read_part(c, SUMMARY, |r, _| read_kept(r, file)) {
            return Ok(s.warned());
        }
        let s = Summary::read(file)?;
        if s.truncated.is_none() {
            if let Ok(json) = serde_json::to_vec(&s) {
                self.keep_part(SUMMARY, json.len(), |o| o.counted(&json));
            }
        }
        Ok(s.warned())
    }
}

/// A kept summary, checked against `file`: a complete dump (a cache is
/// kept only for one), its header's fields and its trailer's counts the
/// summary's. The time is the header's own (a float through text need
/// not come back to the same bits).
fn read_kept(r: &mut crate::cache_file::Reader<'_>, file: &DumpFile) -> std::result::Result<Summary, crate::cache::CacheProblem> {
    let bad = || crate::cache::CacheProblem::Stale("the summary of another dump");
    let mut s: Summary = serde_json::from_slice(r.bytes()?).map_err(|_| bad())?;
    let dump = file.dump().map_err(|_| bad())?;
    let h = dump.header();
    let t = crate::cache::trailer_of(file.bytes()).ok_or_else(bad)?;
    let agrees = s.pid == h.pid
        && s.mode == h.mode.as_str()
        && s.reason == h.reason.as_str()
        && s.format_version == format!("{}.{}", h.major, h.minor)
        && s.file_bytes == file.bytes().len() as u64
        && s.truncated.is_none()
        && s.warnings.is_empty()
        && (s.allocations, s.bytes, s.sites, s.pointers) == (t.allocations, t.alloc_bytes, t.sites, t.pointers)
        && (s.threads, s.modules, s.pause_us) == (u64::from(t.threads), u64::from(t.modules), Some(t.pause_ns / 1000))
        && s.roots >= s.threads;
    if !agrees {
        return Err(bad());
    }
    s.time = h.time_ns as f64 / 1e9;
    Ok(s)
}
