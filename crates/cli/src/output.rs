//! Printing: JSON documents and aligned tables, with byte sizes made
//! readable; and the usage error (exit 2) every command may report.

use std::io::Write;

/// Usage errors (exit 2) are reported as this type.
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// Prints one JSON document on stdout.
pub fn json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}

/// Whether standard output is a pipe or socket whose reader has gone
/// (`| head -1` done): the kernel says so on the writer's end (POLLERR,
/// POLLHUP) without a write.
pub fn stdout_reader_gone() -> bool {
    use rustix::event::{poll, PollFd, PollFlags};
    use std::os::fd::AsFd;
    let out = std::io::stdout();
    let fd = out.as_fd();
    let mut fds = [PollFd::new(&fd, PollFlags::OUT)];
    let zero = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };
    match poll(&mut fds, Some(&zero)) {
        Ok(_) => fds[0].revents().intersects(PollFlags::ERR | PollFlags::HUP),
        Err(_) => false,
    }
}

/// Bytes as a short human figure: `512 B`, `1.5 KiB`, `3.2 MiB`.
pub fn bytes(n: u64) -> String {
    heapdump_export::human_bytes(n)
}

/// A table with a header row; numeric columns right-aligned.
pub struct Table {
    header: Vec<String>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// Columns named in `header`; a name starting with `>` is right-aligned.
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|h| h.trim_start_matches('>').to_string()).collect(),
            right: header.iter().map(|h| h.starts_with('>')).collect(),
            rows: vec![],
        }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Writes the table.
    pub fn print(&self, out: &mut impl Write) -> std::io::Result<()> {
        let n = self.header.len();
        let mut w: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(n) {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let line = |cells: &[String], out: &mut dyn Write| -> std::io::Result<()> {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate().take(n) {
                let pad = w[i].saturating_sub(c.chars().count());
                let last = i + 1 == n;
                if self.right[i] {
                    s.push_str(&" ".repeat(pad));
                    s.push_str(c);
                } else {
                    s.push_str(c);
                    if !last {
                        s.push_str(&" ".repeat(pad));
                    }
                }
                if !last {
                    s.push_str("  ");
                }
            }
            writeln!(out, "{}", s.trim_end())
        };
        line(&self.header, out)?;
        for r in &self.rows {
            line(r, out)?;
        }
        Ok(())
    }
}
