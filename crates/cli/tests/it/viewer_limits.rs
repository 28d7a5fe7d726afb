//! The viewer (`heapdump serve`) against any local process (issue #36):
//! a request line, a header or a body that never ends is refused with
//! 414, 431 or 413 after a few KiB, without the viewer's memory growing;
//! hundreds of idle connections (each holding what it may) and a client that trickles its header
//! byte by byte neither hold memory nor keep the token's holder waiting,
//! and they are closed.

use crate::common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const MIB: u64 = 1 << 20;

/// What an endless stream sends at most before the test gives up on the
/// viewer cutting it off.
const ENDLESS: u64 = 64 * MIB;

/// How much the viewer's resident memory may grow under an attack: its
/// buffers are a few KiB a connection, the rest is the allocator's slack.
const GROWTH: u64 = 4 * MIB;

/// A running `heapdump serve`, stopped when dropped.
struct Viewer {
    child: Child,
    port: u16,
    token: String,
    /// `heapdump summary --json` of the dump served.
    summary: Value,
}

impl Viewer {
    fn start(d: &Scratch) -> Viewer {
        let dump = demo_dump(d);
        let mut child = heapdump().arg("serve").arg(&dump).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        // heapdump: serving DUMP at http://127.0.0.1:PORT/?token=TOKEN
        let url = line.split_whitespace().last().unwrap_or_default().to_string();
        let rest = url.strip_prefix("http://127.0.0.1:").unwrap_or_else(|| panic!("no address in {line:?}"));
        let (port, token) = rest.split_once("/?token=").unwrap();
        let summary = summary_json(&dump);
        Viewer { child, port: port.parse().unwrap(), token: token.to_string(), summary }
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The token's holder asks for the summary, on a connection of its
    /// own: the viewer answers, and with the dump's summary.
    fn assert_answers(&self, when: &str) {
        let mut s = self.connect();
        let req = format!("GET /api/summary?token={} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", self.token, self.host());
        s.write_all(req.as_bytes()).unwrap();
        let mut out = Vec::new();
        let r = s.read_to_end(&mut out);
        let text = String::from_utf8_lossy(&out);
        assert!(r.is_ok(), "{when}: the viewer did not answer the token's holder within a minute ({r:?}, {text:?})");
        assert_eq!(status(&out), 200, "{when}: {text}");
        let body = text.split_once("\r\n\r\n").map_or("", |x| x.1);
        let got: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{when}: {e}: {body:?}"));
        assert_eq!(got, self.summary, "{when}: the summary the command line gives");
    }

    /// The viewer's resident and peak resident memory, in bytes.
    fn memory(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kib = |k: &str| {
            let line =
                status.lines().find(|l| l.starts_with(k)).unwrap_or_else(|| panic!("the viewer has died (no {k} in its status): {status}"));
            line[k.len()..].trim().trim_end_matches("kB").trim().parse::<u64>().unwrap() * 1024
        };
        (kib("VmRSS:"), kib("VmHWM:"))
    }

    /// How many files the viewer holds open (its sockets among them).
    fn open_files(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id())).unwrap().count()
    }

    fn threads(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status.lines().find_map(|l| l.strip_prefix("Threads:")).unwrap().trim().parse().unwrap()
    }

    /// Sends `head`, then `filler` without end (until the viewer stops
    /// reading or `ENDLESS` bytes went), reading what the viewer answers
    /// meanwhile. The answer, the bytes sent, and the growth of the
    /// viewer's resident and peak memory measured with the connection
    /// still open.
    fn stream_endless(&self, head: &str, filler: u8) -> Endless {
        let (rss0, hwm0) = self.memory();
        let mut s = self.connect();
        let mut r = s.try_clone().unwrap();
        let reader = std::thread::spawn(move || {
            let mut out = Vec::new();
            let _ = r.read_to_end(&mut out);
            out
        });
        let chunk = vec![filler; 64 * 1024];
        let mut sent = 0;
        if s.write_all(head.as_bytes()).is_ok() {
            sent = head.len() as u64;
        }
        while sent > 0 && sent < ENDLESS {
            match s.write(&chunk) {
                Ok(n) => sent += n as u64,
                Err(_) => break,
            }
        }
        let (rss1, hwm1) = self.memory();
        // The old viewer never answers: let the reader go.
        let _ = s.shutdown(Shutdown::Both);
        let answer = reader.join().unwrap();
        Endless { answer, sent, rss: rss1.saturating_sub(rss0), hwm: hwm1.saturating_sub(hwm0) }
    }
}

impl Drop for Viewer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Endless {
    answer: Vec<u8>,
    sent: u64,
    rss: u64,
    hwm: u64,
}

impl Endless {
    /// The viewer stopped it early, with `want`, its memory unmoved.
    fn assert_refused(&self, want: u16, what: &str) {
        eprintln!(
            "{what}: {} KiB sent, RSS +{} KiB, peak RSS +{} KiB, answer {}",
            self.sent / 1024,
            self.rss / 1024,
            self.hwm / 1024,
            status(&self.answer)
        );
        assert!(self.rss < GROWTH, "{what}: the viewer's RSS grew by {} KiB", self.rss / 1024);
        assert!(self.hwm < GROWTH, "{what}: the viewer's peak RSS grew by {} KiB", self.hwm / 1024);
        assert!(self.sent < ENDLESS, "{what}: the viewer read all {} MiB", self.sent / MIB);
        assert_eq!(status(&self.answer), want, "{what}: {:?}", String::from_utf8_lossy(&self.answer));
    }
}

fn summary_json(dump: &Path) -> Value {
    let o = heapdump().arg("summary").arg(dump).arg("--json").output().unwrap();
    serde_json::from_str(&ok(&o)).unwrap()
}

/// The status code of an HTTP answer, 0 when there is none.
fn status(answer: &[u8]) -> u16 {
    let text = String::from_utf8_lossy(answer);
    let mut words = text.split_whitespace();
    match words.next() {
        Some(v) if v.starts_with("HTTP/1.") => words.next().and_then(|c| c.parse().ok()).unwrap_or(0),
        _ => 0,
    }
}

#[test]
fn an_endless_header_line_is_refused_and_memory_stays_flat() {
    let d = Scratch::new("limits-header");
    let v = Viewer::start(&d);
    v.assert_answers("before");
    // No token needed: the header comes before anything is checked.
    let e = v.stream_endless(&format!("GET / HTTP/1.1\r\nHost: {}\r\nX-Endless: ", v.host()), b'a');
    e.assert_refused(431, "an endless header line");
    // Many headers, each short, add up as well.
    let many = "X-A: b\r\n".repeat(8192);
    let e = v.stream_endless(&format!("GET / HTTP/1.1\r\nHost: {}\r\n{many}", v.host()), b' ');
    e.assert_refused(431, "a thousand headers");
    v.assert_answers("after");
}

#[test]
fn an_endless_request_line_is_refused_and_memory_stays_flat() {
    let d = Scratch::new("limits-line");
    let v = Viewer::start(&d);
    let e = v.stream_endless(&format!("GET /api/summary?token={}&x=", v.token), b'a');
    e.assert_refused(414, "an endless request line");
    v.assert_answers("after");
}

#[test]
fn an_oversized_body_is_refused_and_memory_stays_flat() {
    let d = Scratch::new("limits-body");
    let v = Viewer::start(&d);
    let host = v.host();
    // Declared: refused before a byte of it is read, token or not.
    let head = format!("POST /api/summary HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\n\r\n", 1u64 << 40);
    v.stream_endless(&head, b'a').assert_refused(413, "a body of 1 TiB");
    let head = format!("GET /api/summary?token={} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\n\r\n", v.token, 1u64 << 30);
    v.stream_endless(&head, b'a').assert_refused(413, "a GET's body of 1 GiB, with the token");
    // Undeclared: a chunked body of no known length is not taken.
    let head = format!("POST /api/summary HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n1000000\r\n");
    v.stream_endless(&head, b'a').assert_refused(411, "a chunked body");
    // A small body is read and passed over: the connection goes on.
    let mut s = v.connect();
    let req = format!(
        "GET /api/summary?token={t} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 5\r\n\r\nhello\
         GET /api/summary?token={t} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n",
        t = v.token
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out);
    assert_eq!(text.matches("HTTP/1.1 200 OK\r\n").count(), 2, "two answers on one connection: {text}");
    v.assert_answers("after");
}

#[test]
fn five_hundred_idle_connections_neither_block_nor_grow_the_viewer() {
    let d = Scratch::new("limits-idle");
    let v = Viewer::start(&d);
    v.assert_answers("before");
    let (rss0, _) = v.memory();
    let files0 = v.open_files();
    // A fifth say nothing; the others send 15 KiB of a request head, just
    // under what one may send, and stop: 6 MiB in all.
    let head = format!("GET /api/summary HTTP/1.1\r\nHost: {}\r\nX-Wait: {}", v.host(), "w".repeat(15 * 1024));
    let idle: Vec<TcpStream> = (0..500)
        .map(|i| {
            let mut s = v.connect();
            if i % 5 != 0 {
                s.write_all(head.as_bytes()).unwrap();
            }
            s
        })
        .collect();
    // The token's holder, after all of them, is answered at once.
    v.assert_answers("with 500 idle connections open");
    let (rss1, _) = v.memory();
    let (files1, threads) = (v.open_files(), v.threads());
    eprintln!("500 idle connections: {files0} -> {files1} open files, {threads} threads, RSS +{} KiB", rss1.saturating_sub(rss0) / 1024);
    assert!(files1 < files0 + 200, "the viewer holds {files1} files open for 500 idle connections (before: {files0})");
    assert!(threads < 16, "the viewer runs {threads} threads for 500 idle connections");
    assert!(rss1.saturating_sub(rss0) < GROWTH, "the viewer's RSS grew by {} KiB", (rss1 - rss0) / 1024);
    // And again, and from a connection kept alive.
    let mut s = v.connect();
    for _ in 0..3 {
        let req = format!("GET /api/leaks?token={} HTTP/1.1\r\nHost: {}\r\n\r\n", v.token, v.host());
        s.write_all(req.as_bytes()).unwrap();
        let mut head = [0u8; 12];
        s.read_exact(&mut head).unwrap();
        assert_eq!(&head, b"HTTP/1.1 200", "a kept-alive connection is answered");
        // The rest of this answer: its length, then its body.
        let mut r = BufReader::new(&s);
        let mut len = 0;
        loop {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            if let Some(n) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                len = n.trim().parse().unwrap();
            }
            if line == "\r\n" {
                break;
            }
        }
        let mut body = vec![0u8; len];
        r.read_exact(&mut body).unwrap();
        assert!(r.buffer().is_empty());
        let leaks: Value = serde_json::from_slice(&body).unwrap();
        assert!(leaks["definitely_lost"]["bytes"].as_u64().unwrap() > 0, "the demo's leaks: {leaks}");
    }
    drop(idle);
}

#[test]
fn a_trickling_client_is_cut_off_and_others_are_served_meanwhile() {
    let d = Scratch::new("limits-slow");
    let v = Viewer::start(&d);
    // One that says nothing, one that sends a byte of header every 200 ms.
    let opened = std::time::Instant::now();
    let mut silent = v.connect();
    let mut slow = v.connect();
    let mut slow_reader = slow.try_clone().unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let trickle = {
        let done = done.clone();
        let host = v.host();
        std::thread::spawn(move || {
            if slow.write_all(format!("GET / HTTP/1.1\r\nHost: {host}\r\n").as_bytes()).is_err() {
                return;
            }
            while !done.load(Ordering::Relaxed) {
                if slow.write_all(b"X").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    };
    // Meanwhile everyone else is served.
    for i in 0..5 {
        v.assert_answers(&format!("request {i} while a client trickles"));
        std::thread::sleep(Duration::from_millis(300));
    }
    // Both are closed (within the minute the reads wait), the trickling
    // one told why.
    let mut out = Vec::new();
    let r = slow_reader.read_to_end(&mut out);
    eprintln!("the trickling client was cut off after {:?}", opened.elapsed());
    done.store(true, Ordering::Relaxed);
    trickle.join().unwrap();
    // Closed, whether the close came as an end of file or as a reset.
    let closed = r.as_ref().map_or_else(|e| e.kind() == std::io::ErrorKind::ConnectionReset, |_| true);
    assert!(closed, "the trickling client was not cut off within a minute: {r:?}");
    assert_eq!(status(&out), 408, "{:?}", String::from_utf8_lossy(&out));
    let mut out = Vec::new();
    let r = silent.read_to_end(&mut out);
    assert!(r.is_ok(), "the silent client was not cut off within a minute: {r:?}");
    assert!(out.is_empty(), "a connection that asked nothing is closed without an answer: {out:?}");
    v.assert_answers("after");
}
