//! `HEAPDUMP_PHASES=1`: the analysis says on stderr when each of its long
//! phases ends (the load, the leak classes, each step of the dominator
//! computation), in seconds since the first phase began, and on which
//! thread. What BENCHMARKS.md's phase tables are read from: a phase that
//! runs beside another shows where one thread waits for the other.
//! Unset, a mark costs one relaxed load.

use std::sync::OnceLock;
use std::time::Instant;

/// The first mark's time, or `None` when the phases are not asked for.
fn clock() -> Option<Instant> {
    static CLOCK: OnceLock<Option<Instant>> = OnceLock::new();
    *CLOCK.get_or_init(|| std::env::var_os("HEAPDUMP_PHASES").is_some_and(|v| v == "1").then(Instant::now))
}

/// Notes that phase `what` has ended.
pub(crate) fn mark(what: &str) {
    if let Some(t0) = clock() {
        let thread = std::thread::current();
        eprintln!("heapdump: phase {:9.3} s {what} ({})", t0.elapsed().as_secs_f64(), thread.name().unwrap_or("helper"));
    }
}
