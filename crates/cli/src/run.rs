//! `heapdump run`: any dynamically linked program, traced through the
//! preload library.

use crate::output::Usage;
use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Options of `run`, as DESIGN.md fixes them.
#[derive(Default)]
pub struct RunOptions {
    pub mode: String,
    pub output: Option<PathBuf>,
    pub signal: Option<String>,
    pub threshold: Option<String>,
    /// `--every`: a dump on this schedule (a duration such as `30s`).
    pub every: Option<String>,
    pub fork: bool,
    /// With `fork`: collapse the heap into huge pages before forking.
    pub collapse: bool,
    pub backtrace: Option<String>,
    pub no_at_exit: bool,
    pub near_limit: Option<u32>,
    pub no_on_fatal: bool,
    pub program: Vec<OsString>,
}

/// Finds `libheapdump_preload.so`: the one `HEAPDUMP_PRELOAD` names; else
/// the one built next to this executable (a build from source); else the
/// copy this executable carries (`preload.rs`).
pub fn preload_library() -> Result<crate::preload::Library> {
    const NAME: &str = "libheapdump_preload.so";
    if let Some(p) = std::env::var_os("HEAPDUMP_PRELOAD") {
        let p = PathBuf::from(p);
        if p.exists() {
            return Ok(crate::preload::Library::File(p));
        }
        bail!("HEAPDUMP_PRELOAD names {}, which does not exist", p.display());
    }
    let me = std::env::current_exe().context("cannot locate the heapdump executable")?;
    let mut candidates = vec![];
    if let Some(dir) = me.parent() {
        candidates.push(dir.join(NAME));
        // target/<profile>/deps/.. when run from a test binary.
        if dir.file_name().is_some_and(|n| n == "deps") {
            if let Some(up) = dir.parent() {
                candidates.push(up.join(NAME));
            }
        }
    }
    // A library beside the executable is a build from source's, taken only
    // when it is this user's and nobody else could have put it there or
    // could swap it (a heapdump copied to /tmp must not load
    // /tmp/libheapdump_preload.so).
    if let Some(p) = candidates.iter().find_map(|c| crate::preload::trusted_beside(c)) {
        return Ok(crate::preload::Library::File(p));
    }
    crate::preload::embedded()
}

/// `heapdump run`: the program's run, one line per dump on stderr, its
/// exit status.
pub fn run(o: RunOptions) -> Result<ExitCode> {
    let ran = launch(o)?;
    let mut err = std::io::stderr().lock();
    for d in &ran.dumps {
        let _ = writeln!(err, "{}", d.line());
    }
    if ran.dumps.is_empty() && ran.started {
        let _ = writeln!(err, "heapdump: no dump was written");
    }
    // A program that links its own allocator allocates past malloc: its
    // dumps show little of its heap, and say so (#40).
    let mut seen: Vec<&str> = Vec::new();
    for d in &ran.dumps {
        if !seen.contains(&d.exe.as_str()) {
            seen.push(&d.exe);
            if let Some(a) = heapdump_analyze::own_allocator(std::path::Path::new(&d.exe)) {
                let _ = writeln!(err, "heapdump: warning: {}: {}", d.program(), heapdump_analyze::static_allocator_warning(a));
                continue;
            }
            // No allocator's symbols, but far more memory than its heap
            // (the last dump of the program: its exit's).
            let last = ran.dumps.iter().rev().find(|x| x.exe == d.exe && x.complete());
            let file = last.and_then(|x| heapdump_analyze::DumpFile::open(std::path::Path::new(x.path())).ok());
            if let Some(w) = file.as_ref().and_then(heapdump_analyze::unseen_memory) {
                let _ = writeln!(err, "heapdump: warning: {}: {w}", d.program());
            }
        }
    }
    Ok(ExitCode::from(ran.code))
}

/// What a traced run came to: the program's exit status (as a shell gives
/// it) and the dumps its process tree started, in the order they were.
pub struct Ran {
    /// The exit status: the program's own, 128 + the signal that ended it,
    /// or 127/126 when it could not be started (said on stderr).
    pub code: u8,
    /// Whether the program was started at all.
    pub started: bool,
    /// The dumps, complete or not.
    pub dumps: Vec<Dump>,
}

/// Runs the program as `run` does (the preload library, the report
/// channel, the signals forwarded, every dump of its process tree waited
/// for) and says what came of it, printing nothing about its dumps: `run`
/// and `check` say it each their way.
pub fn launch(o: RunOptions) -> Result<Ran> {
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
    if let Some(e) = &o.every {
        if heapdump_format::settings::parse_duration_ms(e.as_bytes()).is_none_or(|n| n == 0) {
            return Err(Usage(format!("invalid --every {e:?}: expected a duration such as 30s, 500ms, 5m or 1h")).into());
        }
    }
    if let Some(b) = &o.backtrace {
        if heapdump_format::settings::parse_backtrace(b.as_bytes()).is_none() {
            return Err(Usage(format!("invalid --backtrace {b:?}: expected all, sampled, sampled=BYTES or off")).into());
        }
    }
    crate::program::check_preloadable(&o.program[0])?;
    let lib = preload_library().map_err(|e| Usage(format!("no preload library to load safely: {e:#}")))?;
    // The channel the runtime reports its dumps on (`channel.rs`).
    let mut channel = crate::channel::Channel::open()?;
    let mut cmd = std::process::Command::new(&o.program[0]);
    cmd.args(&o.program[1..]);
    let preload = match std::env::var_os("LD_PRELOAD") {
        Some(existing) if !existing.is_empty() => {
            let mut v = lib.loader_path();
            v.push(":");
            v.push(existing);
            v
        }
        _ => lib.loader_path(),
    };
    cmd.env("LD_PRELOAD", preload)
        .env("HEAPDUMP_MODE", &o.mode)
        .env("HEAPDUMP_AT_EXIT", if o.no_at_exit { "0" } else { "1" })
        .env("HEAPDUMP_ON_FATAL", if o.no_on_fatal { "0" } else { "1" })
        .env("HEAPDUMP_NEAR_LIMIT", o.near_limit.map_or("0".into(), |p| p.to_string()))
        .env(
            "HEAPDUMP_FORK",
            match (o.fork, o.collapse) {
                (true, true) => "collapse",
                (true, false) => "1",
                _ => "0",
            },
        )
        .env("HEAPDUMP_REPORT", channel.path());
    match &o.output {
        Some(p) => {
            let abs = if p.is_absolute() { p.clone() } else { std::env::current_dir()?.join(p) };
            // Found out now, not when the program exits.
            // One dump per line on stderr, fields split at tabs.
            if abs.as_os_str().as_encoded_bytes().iter().any(|&b| b == b'\t' || b == b'\n') {
                return Err(Usage(format!("cannot write dumps to {:?}: a tab or newline in the path", abs)).into());
            }
            // A device, a FIFO or a directory there: dumps are files.
            if let Ok(m) = std::fs::symlink_metadata(&abs) {
                if !m.is_file() {
                    return Err(Usage(format!("cannot write dumps to {}: it exists and is not a regular file", abs.display())).into());
                }
            }
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
    match &o.every {
        Some(e) => cmd.env("HEAPDUMP_EVERY", e),
        None => cmd.env_remove("HEAPDUMP_EVERY"),
    };
    match &o.backtrace {
        Some(b) => cmd.env("HEAPDUMP_BACKTRACE", b),
        None => cmd.env_remove("HEAPDUMP_BACKTRACE"),
    };
    // Orphaned descendants (a forked writer whose program ended, a
    // program started through a shell) become this process's children, so
    // that they can be waited for and reaped.
    let _ = rustix::process::set_child_subreaper(rustix::process::Pid::from_raw(std::process::id() as i32));
    // Forward the signals a user sends to `heapdump run` to the program
    // (the dump signal among them). The handlers go in before the program
    // starts, so that one sent in between is kept and passed on once it
    // runs: a SIGTERM that found no handler yet would end `heapdump run`
    // alone and leave the program running without it.
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
    let mut signals = signal_hook::iterator::SignalsInfo::<signal_hook::iterator::exfiltrator::WithRawSiginfo>::new(&forwarded)
        .context("cannot install signal handlers")?;
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            // As shells do: 127 when the program is not found, 126 when it
            // cannot be run.
            let code = if e.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 };
            eprintln!("heapdump: cannot run {}: {e}", o.program[0].to_string_lossy());
            return Ok(Ran { code, started: false, dumps: vec![] });
        }
    };
    let pid = rustix::process::Pid::from_raw(child.id() as i32);
    let handle = signals.handle();
    let exited = Arc::new(AtomicBool::new(false));
    let interrupted = Arc::new(AtomicBool::new(false));
    let forwarder = {
        let (exited, interrupted) = (exited.clone(), interrupted.clone());
        std::thread::spawn(move || {
            for info in signals.forever() {
                let sig = info.si_signo;
                // Ctrl-C and Ctrl-\ at a terminal (raised by the kernel,
                // si_code > 0) reach the whole foreground group, the
                // program too: not sent again.
                let from_terminal = info.si_code > 0 && [signal_hook::consts::SIGINT, signal_hook::consts::SIGQUIT].contains(&sig);
                if exited.load(Ordering::Acquire) {
                    // The program has ended; a user interrupting the wait
                    // for its dumps stops the wait.
                    if [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP].contains(&sig) {
                        interrupted.store(true, Ordering::Release);
                    }
                } else if !from_terminal {
                    if let (Some(pid), Some(s)) = (pid, rustix::process::Signal::from_named_raw(sig)) {
                        let _ = rustix::process::kill_process(pid, s);
                    }
                }
            }
        })
    };
    let status = child.wait().context("waiting for the program")?;
    exited.store(true, Ordering::Release);
    channel.quiet();
    let dumps = wait_for_dumps(&channel, &interrupted);
    handle.close();
    let _ = forwarder.join();
    drop(channel);
    let code = match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => 1,
    };
    Ok(Ran { code: code.clamp(0, 255) as u8, started: true, dumps })
}

/// A complete dump, as its `wrote` line says.
#[derive(Debug)]
struct Wrote {
    allocations: u64,
    bytes: u64,
    file_bytes: u64,
    reason: String,
}

/// One dump a process of the traced tree started, as its report lines say.
#[derive(Debug, Default)]
pub struct Dump {
    pid: u32,
    exe: String,
    path: String,
    /// Forked writers writing it.
    writers: Vec<u32>,
    /// What `wrote` said of it, or `failed`'s message.
    done: Option<Result<Wrote, String>>,
}

impl Dump {
    /// Where it was written.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Whether the file is whole: its writer said so, or it ends with the
    /// trailer although its process ended before saying it.
    pub fn complete(&self) -> bool {
        match &self.done {
            Some(done) => done.is_ok(),
            None => ends_with_trailer(&self.path),
        }
    }

    /// The process that wrote it, as `name[pid]`.
    pub fn program(&self) -> String {
        let name = self.exe.rsplit('/').next().unwrap_or(&self.exe);
        format!("{name}[{}]", self.pid)
    }

    /// What `run` says of it: one line.
    pub fn line(&self) -> String {
        match &self.done {
            Some(Ok(w)) => format!(
                "heapdump: wrote {} ({}, by {}, {} allocations, {} bytes, file {} bytes)",
                self.path,
                w.reason,
                self.program(),
                w.allocations,
                w.bytes,
                w.file_bytes
            ),
            Some(Err(m)) => format!("heapdump: no complete dump at {} ({}: {m})", self.path, self.program()),
            None if ends_with_trailer(&self.path) => {
                format!("heapdump: wrote {} (by {}, which ended before reporting it; the file is complete)", self.path, self.program())
            }
            None => format!(
                "heapdump: incomplete dump {} ({} ended while writing it; what was written can still be read)",
                self.path,
                self.program()
            ),
        }
    }
}

/// Reads the report's lines: the dumps in the order they were started.
fn read_report(text: &str) -> Vec<Dump> {
    use heapdump_format::report::Event;
    let mut dumps: Vec<Dump> = vec![];
    // The latest dump of `pid` at `path` (the same process may reuse no
    // path, but a later dump of it may be started meanwhile).
    let find = |dumps: &[Dump], pid: u32, path: &str| dumps.iter().rposition(|d| d.pid == pid && d.path == path);
    for l in text.lines() {
        match Event::parse(l) {
            // Seen already when its end came first (over another channel).
            Some(Event::Started { pid, exe, path }) if find(&dumps, pid, path).is_none() => {
                dumps.push(Dump { pid, exe: exe.to_string(), path: path.to_string(), ..Default::default() });
            }
            Some(Event::Writer { pid, writer }) => {
                if let Some(d) = dumps.iter_mut().rev().find(|d| d.pid == pid && d.done.is_none()) {
                    d.writers.push(writer);
                }
            }
            Some(Event::Wrote { pid, exe, path, allocations, bytes, file_bytes, reason }) => {
                let i = find(&dumps, pid, path).unwrap_or_else(|| {
                    dumps.push(Dump { pid, exe: exe.to_string(), path: path.to_string(), ..Default::default() });
                    dumps.len() - 1
                });
                dumps[i].done = Some(Ok(Wrote { allocations, bytes, file_bytes, reason: reason.to_string() }));
            }
            Some(Event::Failed { pid, path, message, .. }) => {
                if let Some(i) = find(&dumps, pid, path) {
                    dumps[i].done = Some(Err(message.to_string()));
                }
            }
            _ => {}
        }
    }
    dumps
}

/// Whether a process exists and has not ended (a zombie has ended).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !matches!(s.rsplit_once(") ").and_then(|(_, r)| r.chars().next()), Some('Z' | 'X') | None),
        Err(_) => false,
    }
}

/// Whether the file ends with a whole END record (the writer finished).
fn ends_with_trailer(path: &str) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let n = (heapdump_format::raw::RECORD_HEADER_SIZE + heapdump_format::raw::END_SIZE) as u64;
    let mut tail = vec![0u8; n as usize];
    std::fs::File::open(path)
        .and_then(|mut f| {
            let len = f.metadata()?.len();
            f.seek(SeekFrom::Start(len.checked_sub(n).ok_or(std::io::ErrorKind::UnexpectedEof)?))?;
            f.read_exact(&mut tail)
        })
        .is_ok_and(|()| heapdump_format::ends_with_trailer(&tail))
}

/// After the program has ended: waits while a dump of its process tree is
/// being written by a process that is still alive (the process itself, or
/// its forked writer), reaping the orphans this subreaper inherits, until
/// every started dump is reported or its writers are gone, or the user
/// interrupts the wait.
fn wait_for_dumps(channel: &crate::channel::Channel, interrupted: &AtomicBool) -> Vec<Dump> {
    let mut said = false;
    loop {
        // Reap orphans that have ended (never the program: already waited).
        while let Ok(Some(_)) = rustix::process::wait(rustix::process::WaitOptions::NOHANG) {}
        let dumps = read_report(&channel.text());
        let writing: Vec<&Dump> =
            dumps.iter().filter(|d| d.done.is_none() && (alive(d.pid) || d.writers.iter().any(|&w| alive(w)))).collect();
        if writing.is_empty() || interrupted.load(Ordering::Acquire) {
            return dumps;
        }
        if !said {
            for d in &writing {
                eprintln!("heapdump: waiting for {} to finish {}", d.program(), d.path);
            }
            said = true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
