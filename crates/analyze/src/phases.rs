//! `HEAPDUMP_PHASES=1`: the analysis says on stderr when each of its long
//! phases ends (the load, the leak classes, each step of the dominator
//! computation), in seconds since the first phase began, on which thread,
//! and the CPU time that thread has taken so far, user and system (on a
//! VM whose host backs a guest's page at its first touch, the system time
//! is mostly the first touch of fresh memory). What BENCHMARKS.md's phase
//! tables are read from: a phase that runs beside another shows where one
//! thread waits for the other. Unset, a mark costs one relaxed load.

use std::sync::OnceLock;
use std::time::Instant;

/// The first mark's time, or `None` when the phases are not asked for.
fn clock() -> Option<Instant> {
    static CLOCK: OnceLock<Option<Instant>> = OnceLock::new();
    *CLOCK.get_or_init(|| std::env::var_os("HEAPDUMP_PHASES").is_some_and(|v| v == "1").then(Instant::now))
}

/// The calling thread's CPU time so far, user and system, in seconds.
fn thread_cpu() -> Option<(f64, f64)> {
    // SAFETY: getrusage writes the struct it is given and nothing else.
    // (The analysis is not the traced process: it calls the C library
    // directly.)
    #[allow(unsafe_code, clippy::disallowed_methods)]
    let u = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        (libc::getrusage(libc::RUSAGE_THREAD, &mut u) == 0).then_some(u)
    }?;
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    Some((secs(u.ru_utime), secs(u.ru_stime)))
}

/// Notes that phase `what` has ended.
pub(crate) fn mark(what: &str) {
    if let Some(t0) = clock() {
        let thread = std::thread::current();
        let cpu = thread_cpu().map(|(u, s)| format!(" cpu {u:.2} s user {s:.2} s system")).unwrap_or_default();
        eprintln!("heapdump: phase {:9.3} s {what} ({}){cpu}", t0.elapsed().as_secs_f64(), thread.name().unwrap_or("helper"));
    }
}
