//! `heapdump`: take heap dumps of native programs and explain them.
//!
//! The top of the stack and a thin layer: argument parsing, tables, exit
//! codes. Every answer comes from `heapdump-analyze`'s `Analysis`, every
//! other format from `heapdump-export`; it carries the preload library
//! (`build.rs`, `preload.rs`) and never links the runtime, so it never
//! dumps itself.
#![deny(unsafe_code)]

mod channel;
mod check;
mod cmd;
mod output;
mod preload;
mod program;
mod request;
mod run;
mod serve;
mod views;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    quiet_end_on_closed_stdout();
    cut_files_end_cleanly();
    let cli = match cmd::Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match cmd::run(cli) {
        Ok(code) => code,
        Err(e) => {
            if is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            // One line: the error and its causes, no backtrace.
            say_error(&format!("{e:#}"));
            if e.downcast_ref::<output::Usage>().is_some() {
                return ExitCode::from(2);
            }
            ExitCode::from(1)
        }
    }
}

/// Writes `error` as heapdump's one-line error on stderr (a newline in
/// it, from a path say, does not break the line).
pub(crate) fn say_error(error: &str) {
    eprintln!("heapdump: error: {}", error.replace('\n', " "));
}

/// A reader that went away (`| head -1`) ends every command quietly (exit
/// 0, nothing on stderr), also where the write that found it gone panics
/// (`println!`, clap_complete's generators): a panic while standard
/// output's reader is gone is that write's, and is not reported.
fn quiet_end_on_closed_stdout() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if output::stdout_reader_gone() {
            std::process::exit(0);
        }
        report(info)
    }));
}

/// A file the analysis reads through a mapping (the dump, a cache file)
/// cut short while it is read (`cp other.hdump app.hdump` truncates the
/// file in place) makes the next read of a page past its new end a
/// SIGBUS, which killed the command: it now ends with heapdump's one-line
/// error and exit 1. (Nothing can be read on from there: the bytes are
/// gone. signal-hook refuses SIGBUS, so the handler is set here; it only
/// writes a constant line and exits, both async-signal-safe.)
fn cut_files_end_cleanly() {
    extern "C" fn on_sigbus(_: libc::c_int) {
        const LINE: &[u8] = b"heapdump: error: a file the analysis was reading (the dump or one of its cache files) was cut short meanwhile: run the command again on the whole file\n";
        // SAFETY: write(2) of a constant buffer and _exit(2) are
        // async-signal-safe; nothing else runs in the handler.
        #[allow(unsafe_code, clippy::disallowed_methods)]
        unsafe {
            libc::write(2, LINE.as_ptr().cast(), LINE.len());
            libc::_exit(1);
        }
    }
    // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" one;
    // the handler is a plain extern "C" function that never returns.
    #[allow(unsafe_code, clippy::disallowed_methods)]
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigbus as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut());
    }
}

/// A reader that went away (`| head`): every command exits quietly, as
/// with text, whether the write failed in std's `write!` or in serde_json.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<serde_json::Error>().is_some_and(|j| j.io_error_kind() == Some(std::io::ErrorKind::BrokenPipe))
    })
}
