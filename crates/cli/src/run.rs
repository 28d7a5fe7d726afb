//! `heapdump run`: any dynamically linked program, traced through the
//! preload library.

use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitCode;

/// Options of `run`, as DESIGN.md fixes them.
pub struct RunOptions {
    pub mode: String,
    pub output: Option<PathBuf>,
    pub signal: Option<String>,
    pub threshold: Option<String>,
    pub fork: bool,
    /// With `fork`: collapse the heap into huge pages before forking.
    pub collapse: bool,
    pub backtrace: Option<String>,
    pub no_at_exit: bool,
    pub program: Vec<OsString>,
}

/// Usage errors (exit 2) are reported as this type.
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// Finds `libheapdump_preload.so`: next to this executable, or in the
/// cargo target directories the README's build uses.
pub fn preload_library() -> Result<PathBuf> {
    const NAME: &str = "libheapdump_preload.so";
    if let Some(p) = std::env::var_os("HEAPDUMP_PRELOAD") {
        let p = PathBuf::from(p);
        if p.exists() {
            return Ok(p);
        }
        bail!("HEAPDUMP_PRELOAD names {}, which does not exist", p.display());
    }
    let me = std::env::current_exe().context("cannot locate the heapdump executable")?;
    let mut candidates = vec![];
    if let Some(dir) = me.parent() {
        candidates.push(dir.join(NAME));
        // target/<profile>/deps/.. when run from tests
        if let Some(up) = dir.parent() {
            candidates.push(up.join(NAME));
        }
    }
    for c in &candidates {
        if c.exists() {
            return Ok(c.clone());
        }
    }
    bail!("{NAME} not found next to {} : build it with `cargo build --release -p heapdump-preload` (or set HEAPDUMP_PRELOAD)", me.display())
}

pub fn run(o: RunOptions) -> Result<ExitCode> {
    if o.program.is_empty() {
        return Err(Usage("run needs a program: heapdump run [OPTIONS] -- PROGRAM [ARGS...]".into()).into());
    }
    if !matches!(o.mode.as_str(), "full" | "compact") {
        return Err(Usage(format!("invalid --mode {:?}: expected full or compact", o.mode)).into());
    }
    if let Some(s) = &o.signal {
        if heapdump_format::settings::parse_signal(s.as_bytes()).is_none() {
            return Err(Usage(format!("invalid --signal {s:?}: expected a name such as USR2 or SIGUSR2, a number, or 0")).into());
        }
    }
    if let Some(t) = &o.threshold {
        if heapdump_format::settings::parse_bytes(t.as_bytes()).is_none_or(|n| n == 0) {
            return Err(Usage(format!("invalid --threshold {t:?}: expected a byte count such as 104857600 or 100M")).into());
        }
    }
    if let Some(b) = &o.backtrace {
        if heapdump_format::settings::parse_backtrace(b.as_bytes()).is_none() {
            return Err(Usage(format!("invalid --backtrace {b:?}: expected all, sampled, sampled=BYTES or off")).into());
        }
    }
    let lib = preload_library()?;
    let report = std::env::temp_dir().join(format!("heapdump-run-{}.tsv", std::process::id()));
    let _ = std::fs::remove_file(&report);
    let mut cmd = std::process::Command::new(&o.program[0]);
    cmd.args(&o.program[1..]);
    let preload = match std::env::var_os("LD_PRELOAD") {
        Some(existing) if !existing.is_empty() => {
            let mut v = lib.clone().into_os_string();
            v.push(":");
            v.push(existing);
            v
        }
        _ => lib.clone().into_os_string(),
    };
    cmd.env("LD_PRELOAD", preload)
        .env("HEAPDUMP_MODE", &o.mode)
        .env("HEAPDUMP_AT_EXIT", if o.no_at_exit { "0" } else { "1" })
        .env(
            "HEAPDUMP_FORK",
            match (o.fork, o.collapse) {
                (true, true) => "collapse",
                (true, false) => "1",
                _ => "0",
            },
        )
        .env("HEAPDUMP_REPORT", &report);
    match &o.output {
        Some(p) => {
            let abs = if p.is_absolute() { p.clone() } else { std::env::current_dir()?.join(p) };
            // Found out now, not when the program exits.
            let dir = abs.parent().unwrap_or(std::path::Path::new("/"));
            match std::fs::metadata(dir) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => return Err(Usage(format!("cannot write dumps to {}: {} is not a directory", abs.display(), dir.display())).into()),
                Err(e) => return Err(Usage(format!("cannot write dumps to {}: {}: {e}", abs.display(), dir.display())).into()),
            }
            cmd.env("HEAPDUMP_OUTPUT", abs);
        }
        None => {
            cmd.env_remove("HEAPDUMP_OUTPUT");
        }
    }
    cmd.env("HEAPDUMP_SIGNAL", o.signal.as_deref().unwrap_or("SIGUSR2"));
    match &o.threshold {
        Some(t) => cmd.env("HEAPDUMP_THRESHOLD", t),
        None => cmd.env_remove("HEAPDUMP_THRESHOLD"),
    };
    match &o.backtrace {
        Some(b) => cmd.env("HEAPDUMP_BACKTRACE", b),
        None => cmd.env_remove("HEAPDUMP_BACKTRACE"),
    };
    let mut child = cmd.spawn().with_context(|| format!("cannot start {}", o.program[0].to_string_lossy()))?;
    // Forward the signals a user sends to `heapdump run` to the program
    // (the dump signal among them).
    let pid = rustix::process::Pid::from_raw(child.id() as i32);
    let mut forwarded = vec![
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGQUIT,
        signal_hook::consts::SIGUSR1,
        signal_hook::consts::SIGUSR2,
    ];
    if let Some(s) = o.signal.as_deref().and_then(|s| heapdump_format::settings::parse_signal(s.as_bytes())) {
        if s != 0 && !forwarded.contains(&s) && !signal_hook::consts::FORBIDDEN.contains(&s) {
            forwarded.push(s);
        }
    }
    let mut signals = signal_hook::iterator::Signals::new(&forwarded).context("cannot install signal handlers")?;
    let handle = signals.handle();
    let forwarder = std::thread::spawn(move || {
        for sig in signals.forever() {
            if let Some(pid) = pid {
                if let Some(s) = rustix::process::Signal::from_named_raw(sig) {
                    let _ = rustix::process::kill_process(pid, s);
                }
            }
        }
    });
    let status = child.wait().context("waiting for the program")?;
    handle.close();
    let _ = forwarder.join();
    let lines = std::fs::read_to_string(&report).unwrap_or_default();
    let _ = std::fs::remove_file(&report);
    let mut err = std::io::stderr().lock();
    for l in lines.lines() {
        let f: Vec<&str> = l.split('\t').collect();
        if f.len() >= 5 {
            let _ = writeln!(err, "heapdump: wrote {} ({}, {} allocations, {} bytes, file {} bytes)", f[0], f[4], f[1], f[2], f[3]);
        }
    }
    if lines.is_empty() {
        let _ = writeln!(err, "heapdump: no dump was written");
    }
    let code = match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => 1,
    };
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}
