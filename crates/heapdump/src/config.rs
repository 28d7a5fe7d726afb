//! Configuration from `HEAPDUMP_*` environment variables.
//!
//! Parsed by hand with `getenv` because it runs at the tracker's first
//! allocation, where `std::env` (which allocates) cannot. A value that does
//! not parse is reported once on stderr and the default is used.
#![forbid(unsafe_code)]

use core::ffi::CStr;
pub use heapdump_format::settings::{parse_backtrace, parse_bytes, parse_signal, parse_u64};
pub use heapdump_format::Backtrace;
use heapdump_format::Mode;

/// The runtime's configuration.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Output path (`HEAPDUMP_OUTPUT`), NUL-terminated in `output_buf`.
    pub output_len: usize,
    /// Storage for the output path.
    pub output_buf: [u8; 1024],
    /// The report file `heapdump run` reads (`HEAPDUMP_REPORT`), kept from
    /// start-up: a program that clears its environment (`clearenv`) still
    /// has its dumps reported.
    pub report_len: usize,
    /// Storage for the report path.
    pub report_buf: [u8; 1024],
    /// Dump mode.
    pub mode: Mode,
    /// Dump at exit.
    pub at_exit: bool,
    /// Dump when a fatal signal ends the program or it crashes
    /// (`HEAPDUMP_ON_FATAL`, off unless `1`; `heapdump run` sets it).
    pub on_fatal: bool,
    /// Dump when the memory a limit counts crosses this percentage of it
    /// (`HEAPDUMP_NEAR_LIMIT`, 1-100; 0 for none).
    pub near_limit: u32,
    /// Dump signal, 0 for none.
    pub signal: i32,
    /// Live-heap threshold in bytes, 0 for none.
    pub threshold: u64,
    /// A dump every this many milliseconds (`HEAPDUMP_EVERY`, a duration
    /// such as `30s`), taken by the helper thread; 0 for none.
    pub every_ms: u64,
    /// Write dumps from a forked child.
    pub fork: bool,
    /// Before forking, collapse the heap into transparent huge pages
    /// (`HEAPDUMP_FORK=collapse`), so that the fork copies far fewer
    /// page-table entries.
    pub collapse: bool,
    /// Site capture.
    pub backtrace: Backtrace,
    /// Mean sampling interval in bytes when `backtrace` is sampled (never
    /// 0 then), else 0.
    pub sample_mean: u64,
    /// Deepest site, in frames (`HEAPDUMP_MAX_FRAMES`, default 32).
    pub max_frames: usize,
    /// Unwinder for sites (`HEAPDUMP_UNWINDER`): the caching `.eh_frame`
    /// walker (`cached`, the default) or libgcc's `_Unwind_Backtrace`
    /// for every capture (`libgcc`).
    pub cached_unwinder: bool,
    /// Where small blocks' slots live (`HEAPDUMP_TABLE`): at a fixed
    /// offset from their address (`shadow`, the default: fastest), or in
    /// buckets found through a directory (`buckets`: less memory where
    /// small blocks are scattered among large ones).
    pub shadow: bool,
    /// Whether the shadow's dense parts ask for transparent huge pages
    /// (`HEAPDUMP_THP`, `1` by default; `0` keeps 4 KiB pages, for a
    /// program that cannot have its allocations wait on the kernel
    /// compacting memory).
    pub thp: bool,
    /// Whether each site's live bytes are kept for the peak
    /// (`HEAPDUMP_PEAK`, `1` by default, with every site: the table is
    /// walked when the heap leaves a new peak, nothing on the hot path, see
    /// `table::site_totals` and BENCHMARKS.md; `0` turns it off). Totals
    /// since start are kept either way.
    pub peak: bool,
}

impl Config {
    /// The defaults, before the environment is read.
    pub const fn default() -> Config {
        Config {
            output_len: 0,
            output_buf: [0; 1024],
            report_len: 0,
            report_buf: [0; 1024],
            mode: Mode::Compact,
            at_exit: false,
            on_fatal: false,
            near_limit: 0,
            signal: libc::SIGUSR2,
            threshold: 0,
            every_ms: 0,
            fork: false,
            collapse: false,
            backtrace: Backtrace::All,
            sample_mean: 0,
            max_frames: 32,
            cached_unwinder: true,
            shadow: true,
            thp: true,
            peak: true,
        }
    }

    /// The report file, if `heapdump run` named one.
    pub fn report(&self) -> Option<&[u8]> {
        (self.report_len != 0).then(|| &self.report_buf[..self.report_len])
    }

    /// The configured output path, if any.
    pub fn output(&self) -> Option<&[u8]> {
        if self.output_len == 0 {
            None
        } else {
            Some(&self.output_buf[..self.output_len])
        }
    }

    /// Reads the `HEAPDUMP_*` variables.
    pub fn from_env() -> Config {
        let mut c = Config::default();
        if let Some(v) = var(c"HEAPDUMP_OUTPUT") {
            if v.len() < c.output_buf.len() {
                c.output_buf[..v.len()].copy_from_slice(v);
                c.output_len = v.len();
            } else {
                warn(b"HEAPDUMP_OUTPUT", v, b"path too long");
            }
        }
        if let Some(v) = var(c"HEAPDUMP_REPORT") {
            if v.len() < c.report_buf.len() {
                c.report_buf[..v.len()].copy_from_slice(v);
                c.report_len = v.len();
            } else {
                warn(b"HEAPDUMP_REPORT", v, b"path too long");
            }
        }
        if let Some(full) = either(c"HEAPDUMP_MODE", b"full", b"compact", b"expected full or compact") {
            c.mode = if full { Mode::Full } else { Mode::Compact };
        }
        if let Some(b) = either(c"HEAPDUMP_AT_EXIT", b"1", b"0", b"expected 1 or 0") {
            c.at_exit = b;
        }
        if let Some(b) = either(c"HEAPDUMP_ON_FATAL", b"1", b"0", b"expected 1 or 0") {
            c.on_fatal = b;
        }
        if let Some(v) = var(c"HEAPDUMP_NEAR_LIMIT") {
            match crate::config::parse_u64(v).filter(|&p| p <= 100) {
                Some(p) => c.near_limit = p as u32,
                None => warn(b"HEAPDUMP_NEAR_LIMIT", v, b"expected a percentage from 1 to 100, or 0"),
            }
        }
        if let Some(v) = var(c"HEAPDUMP_SIGNAL") {
            match parse_signal(v) {
                Some(s) => c.signal = s,
                None => warn(b"HEAPDUMP_SIGNAL", v, b"expected a signal name or number, or 0"),
            }
        }
        if let Some(v) = var(c"HEAPDUMP_THRESHOLD") {
            match parse_bytes(v) {
                Some(n) => c.threshold = n,
                None => warn(b"HEAPDUMP_THRESHOLD", v, b"expected a byte count such as 104857600 or 100M"),
            }
        }
        if let Some(v) = var(c"HEAPDUMP_EVERY") {
            match heapdump_format::settings::parse_duration_ms(v) {
                Some(n) => c.every_ms = n,
                None => warn(b"HEAPDUMP_EVERY", v, b"expected a duration such as 30s, 500ms, 5m or 1h"),
            }
        }
        if let Some(v) = var(c"HEAPDUMP_FORK") {
            match v {
                b"1" => c.fork = true,
                b"collapse" => (c.fork, c.collapse) = (true, true),
                b"0" => c.fork = false,
                _ => warn(b"HEAPDUMP_FORK", v, b"expected 1, collapse or 0"),
            }
        }
        if let Some(v) = var(c"HEAPDUMP_BACKTRACE") {
            match parse_backtrace(v) {
                Some((b, mean)) => (c.backtrace, c.sample_mean) = (b, mean),
                None => warn(b"HEAPDUMP_BACKTRACE", v, b"expected all, sampled, sampled=BYTES or off"),
            }
        }
        if let Some(b) = either(c"HEAPDUMP_UNWINDER", b"cached", b"libgcc", b"expected cached or libgcc") {
            c.cached_unwinder = b;
        }
        if let Some(b) = either(c"HEAPDUMP_TABLE", b"shadow", b"buckets", b"expected shadow or buckets") {
            c.shadow = b;
        }
        if let Some(b) = either(c"HEAPDUMP_THP", b"1", b"0", b"expected 1 or 0") {
            c.thp = b;
        }
        if let Some(b) = either(c"HEAPDUMP_PEAK", b"1", b"0", b"expected 1 or 0") {
            c.peak = b;
        }
        if let Some(v) = var(c"HEAPDUMP_MAX_FRAMES") {
            match parse_u64(v) {
                Some(n) if (1..=crate::sites::MAX_FRAMES as u64).contains(&n) => c.max_frames = n as usize,
                _ => warn(b"HEAPDUMP_MAX_FRAMES", v, b"expected a number from 1 to 64"),
            }
        }
        c
    }
}

fn var(name: &CStr) -> Option<&'static [u8]> {
    crate::sys::getenv(name)
}

/// Writes `heapdump: ignoring NAME=VALUE: WHY` to stderr with one write.
/// A setting of two values: `Some(true)` for `yes`, `Some(false)` for
/// `no`, `None` when unset or (reported) anything else.
fn either(name: &CStr, yes: &[u8], no: &[u8], why: &[u8]) -> Option<bool> {
    let v = var(name)?;
    if v == yes || v == no {
        return Some(v == yes);
    }
    warn(name.to_bytes(), v, why);
    None
}

fn warn(name: &[u8], value: &[u8], why: &[u8]) {
    let mut buf = [0u8; 512];
    let mut n = 0;
    for part in [b"heapdump: ignoring ".as_slice(), name, b"=", value, b": ", why, b"; using the default\n"] {
        let k = part.len().min(buf.len() - n);
        buf[n..n + k].copy_from_slice(&part[..k]);
        n += k;
    }
    crate::sys::stderr::write_stderr(&buf[..n]);
}
