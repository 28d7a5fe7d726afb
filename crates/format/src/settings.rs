//! The meaning of the `HEAPDUMP_*` settings' values, shared by the runtime
//! that reads them (inside the traced process, without allocating) and by
//! the `heapdump` command that writes them and checks a user's options
//! first (it does not link the runtime). Signal numbers are Linux's.

use crate::types::Backtrace;

/// Default mean sampling interval: 512 KiB, as jemalloc and tcmalloc.
pub const DEFAULT_SAMPLE: u64 = 512 * 1024;

/// Parses a decimal number.
pub fn parse_u64(v: &[u8]) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    let mut n: u64 = 0;
    for &b in v {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(n)
}

/// Parses a byte count with an optional K/M/G suffix (powers of 1024).
pub fn parse_bytes(v: &[u8]) -> Option<u64> {
    let (num, mul) = match v.last()? {
        b'k' | b'K' => (&v[..v.len() - 1], 1u64 << 10),
        b'm' | b'M' => (&v[..v.len() - 1], 1 << 20),
        b'g' | b'G' => (&v[..v.len() - 1], 1 << 30),
        _ => (v, 1),
    };
    parse_u64(num)?.checked_mul(mul)
}

/// Parses a duration: a decimal number with a unit, `ms`, `s`, `m` or
/// `h` (`30s`, `500ms`, `5m`); a bare number is seconds. Milliseconds.
pub fn parse_duration_ms(v: &[u8]) -> Option<u64> {
    let (num, mul) = if let Some(n) = v.strip_suffix(b"ms") {
        (n, 1)
    } else {
        match v.last()? {
            b's' => (&v[..v.len() - 1], 1000),
            b'm' => (&v[..v.len() - 1], 60_000),
            b'h' => (&v[..v.len() - 1], 3_600_000u64),
            _ => (v, 1000),
        }
    };
    parse_u64(num)?.checked_mul(mul)
}

/// Parses `all`, `off`, `sampled`, `sampled=BYTES`: how sites are
/// captured and the mean sampling interval in bytes (never 0 when
/// sampled, else 0), the pair the PROCESS record stores.
pub fn parse_backtrace(v: &[u8]) -> Option<(Backtrace, u64)> {
    match v {
        b"all" => Some((Backtrace::All, 0)),
        b"off" => Some((Backtrace::Off, 0)),
        b"sampled" => Some((Backtrace::Sampled, DEFAULT_SAMPLE)),
        _ => {
            let rest = v.strip_prefix(b"sampled=")?;
            let n = parse_bytes(rest)?;
            (n > 0).then_some((Backtrace::Sampled, n))
        }
    }
}

/// The signals of Linux on x86-64 by number, as `kill -l` names them.
const SIGNAL_NAMES: [&str; 32] = [
    "",
    "SIGHUP",
    "SIGINT",
    "SIGQUIT",
    "SIGILL",
    "SIGTRAP",
    "SIGABRT",
    "SIGBUS",
    "SIGFPE",
    "SIGKILL",
    "SIGUSR1",
    "SIGSEGV",
    "SIGUSR2",
    "SIGPIPE",
    "SIGALRM",
    "SIGTERM",
    "SIGSTKFLT",
    "SIGCHLD",
    "SIGCONT",
    "SIGSTOP",
    "SIGTSTP",
    "SIGTTIN",
    "SIGTTOU",
    "SIGURG",
    "SIGXCPU",
    "SIGXFSZ",
    "SIGVTALRM",
    "SIGPROF",
    "SIGWINCH",
    "SIGIO",
    "SIGPWR",
    "SIGSYS",
];

/// A signal's name (`SIGTERM`), or `None` for a real-time or unknown one.
pub fn signal_name(sig: u32) -> Option<&'static str> {
    SIGNAL_NAMES.get(sig as usize).copied().filter(|n| !n.is_empty())
}

/// Parses a signal name (`USR2`, `SIGUSR2`) or number; `0` means none.
pub fn parse_signal(v: &[u8]) -> Option<i32> {
    if let Some(n) = parse_u64(v) {
        return (n < 65).then_some(n as i32);
    }
    let name = v.strip_prefix(b"SIG").unwrap_or(v);
    Some(match name {
        b"USR1" => 10,
        b"USR2" => 12,
        b"HUP" => 1,
        b"INT" => 2,
        b"QUIT" => 3,
        b"TERM" => 15,
        b"PROF" => 27,
        b"URG" => 23,
        b"WINCH" => 28,
        b"PWR" => 30,
        b"TTIN" => 21,
        b"TTOU" => 22,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_as_documented() {
        assert_eq!(parse_bytes(b"100M"), Some(100 << 20));
        assert_eq!(parse_bytes(b"4096"), Some(4096));
        assert_eq!(parse_bytes(b"x"), None);
        assert_eq!(parse_bytes(b"99999999999999999999"), None);
        assert_eq!(parse_backtrace(b"sampled=64K"), Some((Backtrace::Sampled, 65536)));
        assert_eq!(parse_backtrace(b"sampled=0"), None);
        assert_eq!(parse_backtrace(b"all"), Some((Backtrace::All, 0)));
        assert_eq!(parse_backtrace(b"sampled"), Some((Backtrace::Sampled, DEFAULT_SAMPLE)));
        assert_eq!(parse_signal(b"SIGUSR1"), Some(10));
        assert_eq!(parse_signal(b"USR2"), Some(12));
        assert_eq!(parse_signal(b"0"), Some(0));
        assert_eq!(parse_signal(b"99"), None);
        assert_eq!(parse_signal(b"BOGUS"), None);
    }
}
