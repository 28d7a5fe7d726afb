//! The report channel of `heapdump run`: the lines the runtime inside each
//! process of the traced tree sends about the dumps it takes by itself,
//! and the socket they go to. One definition for both ends: the runtime
//! writes the fields in the order [`Event`] gives (tab-separated, one line
//! per event, each sent whole), `run` reads them by name with
//! [`Event::parse`].
//!
//! ```text
//! started  PID  EXE  PATH                                        the dump's file is open
//! writer   PID  WRITER_PID                                       a forked writer writes it
//! wrote    PID  EXE  PATH  ALLOCATIONS  BYTES  FILE_BYTES  REASON
//! failed   PID  EXE  PATH  MESSAGE
//! ```
//!
//! `PID` is the process whose heap is dumped, `EXE` its executable (tabs
//! and newlines in it replaced by `?`), `PATH` the dump's absolute path,
//! `REASON` a [`crate::Reason`]'s name. `MESSAGE` may hold tabs (it is the
//! rest of the line).

/// The tag of a `started` line.
pub const STARTED: &[u8] = b"started";
/// The tag of a `writer` line.
pub const WRITER: &[u8] = b"writer";
/// The tag of a `wrote` line.
pub const WROTE: &[u8] = b"wrote";
/// The tag of a `failed` line.
pub const FAILED: &[u8] = b"failed";

/// One line of the report channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// The dump's file is open and about to be written.
    Started {
        /// The dumped process.
        pid: u32,
        /// Its executable.
        exe: &'a str,
        /// The dump's absolute path.
        path: &'a str,
    },
    /// A forked writer writes the dump `pid` last started.
    Writer {
        /// The dumped process.
        pid: u32,
        /// The writer's pid.
        writer: u32,
    },
    /// The dump is complete.
    Wrote {
        /// The dumped process.
        pid: u32,
        /// Its executable.
        exe: &'a str,
        /// The dump's absolute path.
        path: &'a str,
        /// Live allocations in it.
        allocations: u64,
        /// Their bytes.
        bytes: u64,
        /// The file's size.
        file_bytes: u64,
        /// Why it was taken ([`crate::Reason`]'s name).
        reason: &'a str,
    },
    /// The dump failed.
    Failed {
        /// The dumped process.
        pid: u32,
        /// Its executable.
        exe: &'a str,
        /// The dump's absolute path.
        path: &'a str,
        /// What went wrong.
        message: &'a str,
    },
}

impl<'a> Event<'a> {
    /// The event a line holds (without its newline), `None` for anything
    /// else: an unknown tag, a missing field or a number that is not one.
    pub fn parse(line: &'a str) -> Option<Event<'a>> {
        let line = line.strip_suffix('\n').unwrap_or(line);
        let mut f = line.splitn(5, '\t');
        let tag = f.next()?.as_bytes();
        let pid = f.next()?.parse().ok()?;
        if tag == WRITER {
            return Some(Event::Writer { pid, writer: f.next()?.parse().ok()? });
        }
        let exe = f.next()?;
        let path = f.next()?;
        let rest = f.next();
        match tag {
            STARTED => Some(Event::Started { pid, exe, path }),
            FAILED => Some(Event::Failed { pid, exe, path, message: rest? }),
            WROTE => {
                let mut r = rest?.split('\t');
                let allocations = r.next()?.parse().ok()?;
                let bytes = r.next()?.parse().ok()?;
                let file_bytes = r.next()?.parse().ok()?;
                let reason = r.next()?;
                Some(Event::Wrote { pid, exe, path, allocations, bytes, file_bytes, reason })
            }
            _ => None,
        }
    }
}

/// The length of [`socket_name`]'s name.
pub const SOCKET_NAME_LEN: usize = 29;

/// The name of the abstract Unix socket `heapdump run` receives its report
/// lines on, made from the report file's path (`HEAPDUMP_REPORT`):
/// `heapdump-run/` and the path's 64-bit FNV-1a hash in hexadecimal. The
/// runtime sends each line there first (no file system, so a full or gone
/// temporary directory loses nothing) and appends it to the file only when
/// the socket cannot be reached (another network namespace).
pub fn socket_name(path: &[u8]) -> [u8; SOCKET_NAME_LEN] {
    let h = crate::fnv1a64(path);
    let mut out = [0u8; SOCKET_NAME_LEN];
    out[..13].copy_from_slice(b"heapdump-run/");
    for i in 0..16 {
        out[13 + i] = b"0123456789abcdef"[((h >> (60 - 4 * i)) & 0xf) as usize];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_line_is_read_by_its_fields() {
        assert_eq!(
            Event::parse("started\t12\t/bin/x\t/tmp/a.hdump\n"),
            Some(Event::Started { pid: 12, exe: "/bin/x", path: "/tmp/a.hdump" })
        );
        assert_eq!(Event::parse("writer\t12\t13"), Some(Event::Writer { pid: 12, writer: 13 }));
        assert_eq!(
            Event::parse("wrote\t12\t/bin/x\t/tmp/a.hdump\t3\t400\t5000\texit"),
            Some(Event::Wrote {
                pid: 12,
                exe: "/bin/x",
                path: "/tmp/a.hdump",
                allocations: 3,
                bytes: 400,
                file_bytes: 5000,
                reason: "exit"
            })
        );
        assert_eq!(
            Event::parse("failed\t12\t/bin/x\t/tmp/a.hdump\texit dump failed: write error:\tNo space"),
            Some(Event::Failed { pid: 12, exe: "/bin/x", path: "/tmp/a.hdump", message: "exit dump failed: write error:\tNo space" })
        );
    }

    #[test]
    fn a_line_that_is_not_whole_is_no_event() {
        for l in [
            "",
            "started",
            "started\tx\t/bin/x\t/p",
            "started\t1\t/bin/x",
            "wrote\t1\t/x\t/p\t1\t2\t3",
            "wrote\t1\t/x\t/p\ta\t2\t3\texit",
            "writer\t1",
            "other\t1\t2\t3",
        ] {
            assert_eq!(Event::parse(l), None, "{l:?}");
        }
    }

    #[test]
    fn the_socket_is_named_by_the_path() {
        let a = socket_name(b"/tmp/heapdump-run-1-00/report.tsv");
        assert!(a.starts_with(b"heapdump-run/") && a[13..].iter().all(u8::is_ascii_hexdigit));
        assert_ne!(a, socket_name(b"/tmp/heapdump-run-1-01/report.tsv"));
    }
}
