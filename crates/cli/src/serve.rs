//! `heapdump serve`: the local viewer. One analysis session answers every
//! request, a page at a time (the dominator tree's children on demand), on
//! 127.0.0.1 only, behind a random per-run token; the page, its script and
//! its styles are in the binary, nothing is fetched from the network. The
//! JSON routes return what the command line's `--json` returns, so scripts
//! can query a running viewer.
//!
//! The server is small and bounded, because any local process can reach
//! the port, token or not: one thread waits on every connection at once
//! (`poll`) and answers the requests in turn, each connection holding at
//! most `MAX_HEAD + MAX_BODY` bytes of what it sent. A request line over
//! `MAX_LINE` is refused with 414, a head over `MAX_HEAD` (or with more
//! than `MAX_HEADERS` fields) with 431, a body over `MAX_BODY` with 413
//! (before a byte of it is read) and a body of no declared length with
//! 411, and the connection closed; a request must arrive whole within
//! `IDLE` of the connection opening or of the previous answer (408,
//! then closed: a client trickling its header byte by byte holds nothing
//! for long). At most `MAX_CONNECTIONS` are open: the next one closes the
//! one that has waited longest, so idle connections never keep the
//! token's holder out.

use crate::request::{Parse, Request, MAX_BODY, MAX_HEAD};
use crate::views;
use anyhow::{anyhow, Result};
use heapdump_analyze::explore::{RowOrder, RowsOf};
use heapdump_analyze::group::{Diff, GroupBy};
use heapdump_analyze::suspects::Suspect;
use heapdump_analyze::{Analysis, AnalyzeError};
use rustix::event::{PollFd, PollFlags};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

const INDEX: &str = include_str!("viewer/index.html");
const SCRIPT: &str = include_str!("viewer/app.js");
const STYLE: &str = include_str!("viewer/app.css");

/// The most rows or children one request returns.
const MAX_ROWS: usize = 1000;

/// The most connections open at once.
const MAX_CONNECTIONS: usize = 128;
/// The most connections taken from the listener between two reads of the
/// open ones, below `MAX_CONNECTIONS` so that a new connection is read
/// before a burst of newer ones can push it out.
const ACCEPT_BATCH: usize = 32;
/// How long a whole request may take to arrive, from the connection's
/// opening or the end of the previous answer.
const IDLE: Duration = Duration::from_secs(10);
/// How long an answer may go without the client taking any of it.
const SEND: Duration = Duration::from_secs(10);
/// After an answer that closes the connection, what the client still
/// sends is read and dropped for this long (or this much) before closing,
/// so that the answer is not lost to a reset.
const LINGER: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 256 * 1024;

/// The most structures of a series the Growth tab can show (worked out
/// once, at the start).
const SERIES_ROWS: usize = 100;

/// Serves `dump` until the process is stopped; with `series` (older dumps
/// of the same process, oldest first), the growth across them and `dump`,
/// the last point (a series ending with `dump` itself takes it once).
pub fn serve(dump: &Path, baseline: Option<&Path>, series: &[std::path::PathBuf], port: u16) -> Result<std::process::ExitCode> {
    // The summary, the leaks and the tree's pages read no edge: a kept graph's
    // edges are checked when first read, not before the address is out.
    views::set_edges_checked_when_read(true);
    let loaded = views::load(dump)?;
    let base = baseline.map(views::load).transpose()?;
    let growth = if series.is_empty() {
        None
    } else {
        let same = |p: &Path| p == dump || std::fs::canonicalize(p).ok().zip(std::fs::canonicalize(dump).ok()).is_some_and(|(a, b)| a == b);
        let older = match series.split_last() {
            Some((last, rest)) if same(last) => rest,
            _ => series,
        };
        // The older dumps are needed only for this, and let go after it.
        let older = older.iter().map(|p| views::load(p)).collect::<Result<Vec<_>>>()?;
        let mut dumps: Vec<&heapdump_analyze::Dump> = older.iter().map(|l| &**l).collect();
        dumps.push(&loaded);
        let g = heapdump_analyze::growth(&dumps, SERIES_ROWS)?;
        let mut names: Vec<String> = older.iter().map(|l| l.path().display().to_string()).collect();
        names.push(dump.display().to_string());
        Some(Series { dumps: names, growth: g })
    };
    // Kept at once, and waited for: the viewer runs on (no writer left
    // unreaped).
    loaded.settle();
    if let Some(b) = &base {
        b.settle();
    }
    let diff = base.as_ref().map(|b| loaded.diff(b));
    let a = views::session(&loaded);
    let listener = TcpListener::bind(("127.0.0.1", port)).map_err(|e| anyhow!("cannot listen on 127.0.0.1:{port}: {e}"))?;
    listener.set_nonblocking(true).map_err(|e| anyhow!("cannot listen on 127.0.0.1:{port}: {e}"))?;
    let port = listener.local_addr().map_or(port, |s| s.port());
    let token = token()?;
    let site = Site {
        a: &a,
        diff: diff.as_ref(),
        series: growth.as_ref(),
        token: &token,
        port,
        name: dump.display().to_string(),
        suspects: std::cell::OnceCell::new(),
    };
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "heapdump: serving {} at http://127.0.0.1:{port}/?token={token}", dump.display())?;
        out.flush()?;
    }
    eprintln!("heapdump: the token in the address is this viewer's key: share it with no one; Ctrl-C stops the viewer");
    run(&listener, &site)
}

/// Waits on the listener and every connection, and moves each on as far
/// as it can go; never returns but on a failure to wait.
fn run(listener: &TcpListener, site: &Site) -> Result<std::process::ExitCode> {
    let mut conns: Vec<Conn> = Vec::new();
    loop {
        let now = Instant::now();
        // Until the next deadline; with no connection, until one comes.
        let wait = conns.iter().map(|c| c.deadline.saturating_duration_since(now)).min();
        let ready: Vec<PollFlags> = {
            let mut fds = Vec::with_capacity(conns.len() + 1);
            fds.push(PollFd::new(listener, PollFlags::IN));
            fds.extend(conns.iter().map(|c| PollFd::new(&c.stream, c.interest())));
            let timeout = wait.and_then(|w| rustix::event::Timespec::try_from(w).ok());
            match rustix::event::poll(&mut fds, timeout.as_ref()) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(anyhow!("the viewer cannot wait for its connections: {e}")),
            }
            fds.iter().map(|f| f.revents()).collect()
        };
        for (c, r) in conns.iter_mut().zip(&ready[1..]) {
            if !r.is_empty() {
                c.advance(site);
            }
        }
        // Only then the deadlines, each after a last look: what arrived
        // while an answer was being worked out is read, not dropped.
        for c in conns.iter_mut().filter(|c| Instant::now() >= c.deadline) {
            c.advance(site);
            if Instant::now() >= c.deadline {
                c.expire();
            }
        }
        conns.retain(|c| c.phase != Phase::Closed);
        if !ready[0].is_empty() {
            accept(listener, &mut conns);
        }
    }
}

/// Takes up to `ACCEPT_BATCH` new connections, closing the ones that
/// waited longest when there are too many.
fn accept(listener: &TcpListener, conns: &mut Vec<Conn>) {
    for _ in 0..ACCEPT_BATCH {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return,
            // Out of file descriptors: make room, take it next time.
            Err(e) if matches!(rustix::io::Errno::from_io_error(&e), Some(rustix::io::Errno::MFILE | rustix::io::Errno::NFILE)) => {
                evict(conns);
                return;
            }
            // A connection reset before it was taken: the next one.
            Err(_) => continue,
        };
        if stream.set_nonblocking(true).is_err() {
            continue;
        }
        if conns.len() >= MAX_CONNECTIONS {
            evict(conns);
        }
        conns.push(Conn::new(stream));
    }
}

/// Closes the connection that is finished or has waited longest.
fn evict(conns: &mut Vec<Conn>) {
    if let Some(i) = (0..conns.len()).min_by_key(|&i| (conns[i].phase != Phase::Lingering, conns[i].since)) {
        conns.swap_remove(i);
    }
}

/// Where a connection is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    /// Waiting for a whole request.
    Reading,
    /// Sending an answer.
    Writing,
    /// Answered and closing: what comes is read and dropped.
    Lingering,
    Closed,
}

/// One client's connection.
struct Conn {
    stream: TcpStream,
    /// Received and not yet answered: at most `MAX_HEAD + MAX_BODY` bytes.
    input: Vec<u8>,
    /// The answer being sent, and how much of it went.
    output: Vec<u8>,
    sent: usize,
    /// Close once the answer is sent.
    close: bool,
    phase: Phase,
    /// When the phase began or last made progress: the oldest is evicted
    /// first.
    since: Instant,
    /// When the phase must be over.
    deadline: Instant,
    /// What `Lingering` has dropped.
    drained: usize,
}

impl Conn {
    fn new(stream: TcpStream) -> Conn {
        let now = Instant::now();
        Conn {
            stream,
            input: Vec::new(),
            output: Vec::new(),
            sent: 0,
            close: false,
            phase: Phase::Reading,
            since: now,
            deadline: now + IDLE,
            drained: 0,
        }
    }

    fn interest(&self) -> PollFlags {
        match self.phase {
            Phase::Writing => PollFlags::OUT,
            _ => PollFlags::IN,
        }
    }

    /// Its time is up.
    fn expire(&mut self) {
        match self.phase {
            // Part of a request: say why it ends.
            Phase::Reading if !self.input.is_empty() => {
                self.input = Vec::new();
                self.reply(Reply::error(408, "the request did not arrive in time"), true);
            }
            _ => self.phase = Phase::Closed,
        }
    }

    /// Reads, answers and writes as far as the socket allows.
    fn advance(&mut self, site: &Site) {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match self.phase {
                Phase::Closed => return,
                Phase::Writing => match self.stream.write(&self.output[self.sent..]) {
                    Ok(0) => self.phase = Phase::Closed,
                    Ok(n) => {
                        let now = Instant::now();
                        self.sent += n;
                        self.since = now;
                        self.deadline = now + SEND;
                        if self.sent == self.output.len() {
                            self.output = Vec::new();
                            self.sent = 0;
                            if self.close {
                                let _ = self.stream.shutdown(Shutdown::Write);
                                self.phase = Phase::Lingering;
                                self.deadline = now + LINGER;
                            } else {
                                self.phase = Phase::Reading;
                                self.deadline = now + IDLE;
                                // A request sent behind the last one.
                                self.take_request(site);
                            }
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => self.phase = Phase::Closed,
                },
                Phase::Lingering => match self.stream.read(&mut chunk) {
                    Ok(n) if n > 0 && self.drained + n <= LINGER_BYTES => self.drained += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    _ => self.phase = Phase::Closed,
                },
                Phase::Reading => {
                    // Never more than a whole request may hold.
                    let room = (MAX_HEAD + MAX_BODY + 1 - self.input.len()).min(chunk.len());
                    match self.stream.read(&mut chunk[..room]) {
                        // The client is gone or has said all it will.
                        Ok(0) => self.phase = Phase::Closed,
                        Ok(n) => {
                            self.input.extend_from_slice(&chunk[..n]);
                            self.take_request(site);
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(_) => self.phase = Phase::Closed,
                    }
                }
            }
        }
    }

    /// Answers the request at the start of `input` if it is whole, or
    /// refuses it as soon as it is too large.
    fn take_request(&mut self, site: &Site) {
        let (reply, close) = match Request::parse(&self.input) {
            Parse::Partial => return,
            Parse::Refused(status, why) => (Reply::error(status, &why), true),
            Parse::Whole(req, len) => {
                let reply = site.answer(req.method, req.target, req.host);
                let close = req.close;
                self.input.drain(..len);
                (reply, close)
            }
        };
        if close {
            self.input = Vec::new();
        }
        self.reply(reply, close);
    }

    fn reply(&mut self, reply: Reply, close: bool) {
        let now = Instant::now();
        self.output = reply.into_http(close);
        self.sent = 0;
        self.close = close;
        self.phase = Phase::Writing;
        self.since = now;
        self.deadline = now + SEND;
    }
}

/// 128 random bits, hexadecimal.
fn token() -> Result<String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| anyhow!("no random token for the viewer: {e}"))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// The viewer's state: the analysis and what the page needs.
struct Site<'a, 'h> {
    a: &'a Analysis<'h>,
    diff: Option<&'a Diff>,
    /// The growth across a series of dumps (`--series`).
    series: Option<&'a Series>,
    token: &'a str,
    port: u16,
    name: String,
    /// The first screen's suspects, worked out once.
    suspects: std::cell::OnceCell<Vec<Suspect>>,
}

/// `/api/growth`'s answer: `growth --json`'s rows and what the command's
/// text says above them, with the dumps' names, oldest first.
#[derive(serde::Serialize)]
struct Series {
    dumps: Vec<String>,
    #[serde(flatten)]
    growth: heapdump_analyze::Growth,
}

/// An answer, before it becomes HTTP.
struct Reply {
    status: u16,
    kind: &'static str,
    body: Vec<u8>,
}

impl Reply {
    fn json<T: serde::Serialize>(v: &T) -> Reply {
        match serde_json::to_vec(v) {
            Ok(body) => Reply { status: 200, kind: "application/json", body },
            Err(e) => Reply::error(500, &format!("cannot encode the answer: {e}")),
        }
    }

    fn error(status: u16, msg: &str) -> Reply {
        Reply { status, kind: "application/json", body: serde_json::json!({ "error": msg }).to_string().into_bytes() }
    }

    /// The answer as HTTP/1.1, saying whether the connection stays.
    fn into_http(self, close: bool) -> Vec<u8> {
        // The flamegraph is inferno's interactive SVG: its own inline
        // script and styles, nothing else.
        let csp = if self.kind == "image/svg+xml" {
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'"
        } else {
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; frame-src 'self'; object-src 'self'"
        };
        let reason = match self.status {
            200 => "OK",
            400 => "Bad Request",
            403 => "Forbidden",
            404 => "Not Found",
            405 => "Method Not Allowed",
            408 => "Request Timeout",
            411 => "Length Required",
            413 => "Content Too Large",
            414 => "URI Too Long",
            431 => "Request Header Fields Too Large",
            _ => "Internal Server Error",
        };
        let mut out = format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n\
             X-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\nX-Frame-Options: SAMEORIGIN\r\n\
             Content-Security-Policy: {csp}\r\n{}Connection: {}\r\n\r\n",
            self.status,
            self.kind,
            self.body.len(),
            if self.status == 405 { "Allow: GET\r\n" } else { "" },
            if close { "close" } else { "keep-alive" },
        )
        .into_bytes();
        out.extend_from_slice(&self.body);
        out
    }
}

impl Site<'_, '_> {
    fn answer(&self, method: &str, url: &str, host: Option<&str>) -> Reply {
        // Another site in the user's browser may not reach the viewer by
        // a name that resolves to 127.0.0.1 (DNS rebinding).
        let ok_host = |h: &str| h == format!("127.0.0.1:{}", self.port) || h == format!("localhost:{}", self.port);
        if !host.is_some_and(ok_host) {
            return Reply::error(403, "forbidden: the viewer answers requests for 127.0.0.1 only");
        }
        if method != "GET" {
            return Reply::error(405, "only GET");
        }
        let (path, query) = url.split_once('?').unwrap_or((url, ""));
        let q = Query::parse(query);
        if q.get("token").is_none_or(|t| !same(t, self.token)) {
            return Reply::error(403, "forbidden: the token is missing or wrong (use the address `heapdump serve` printed)");
        }
        match self.route(path, &q) {
            Ok(r) => r,
            Err(e) => {
                let status = match e.downcast_ref::<AnalyzeError>() {
                    Some(AnalyzeError::NoSuchAllocation { .. } | AnalyzeError::NoPath { .. } | AnalyzeError::NoSuchGroup { .. }) => 404,
                    _ if e.downcast_ref::<BadRequest>().is_some() => 400,
                    _ => 500,
                };
                Reply::error(status, &format!("{e:#}"))
            }
        }
    }

    fn route(&self, path: &str, q: &Query) -> Result<Reply> {
        let a = self.a;
        let n = q.number("n", 20)?.min(MAX_ROWS);
        Ok(match path {
            "/" => Reply { status: 200, kind: "text/html; charset=utf-8", body: self.page().into_bytes() },
            "/app.js" => Reply { status: 200, kind: "text/javascript; charset=utf-8", body: SCRIPT.as_bytes().to_vec() },
            "/app.css" => Reply { status: 200, kind: "text/css; charset=utf-8", body: STYLE.as_bytes().to_vec() },
            "/flame.svg" => {
                let mut body = Vec::new();
                heapdump_export::write_svg(a, &mut body)?;
                Reply { status: 200, kind: "image/svg+xml", body }
            }
            "/api/summary" => Reply::json(&crate::views::summary_json(&a.summary_kept()?, || crate::views::peak_json_of(a))?),
            // Kept in the cache: the first page reads it, not the classes.
            "/api/leaks" => Reply::json(&crate::views::leaks_json(&a.leak_report_kept(), a)?),
            "/api/top" => {
                let mut rows = a.top(q.group("by", GroupBy::Site, true)?);
                rows.truncate(n);
                Reply::json(&rows)
            }
            "/api/retained" => match q.get("by").unwrap_or("block") {
                "block" => Reply::json(&a.retainers(n)),
                _ => {
                    let mut rows = a.retained_by(q.group("by", GroupBy::Site, false)?);
                    rows.truncate(n);
                    Reply::json(&rows)
                }
            },
            "/api/tree" => {
                let parent = match q.get("parent").unwrap_or("root") {
                    "root" => None,
                    s => Some(address(s)?),
                };
                Reply::json(&a.tree_children(parent, q.number("offset", 0)?, n)?)
            }
            "/api/block" => Reply::json(&a.block_page(address(q.require("address")?)?, n)?),
            // The tree as the page shows it: siblings grouped by site and
            // type, lists collapsed, roots named; each list paged.
            "/api/rows" => {
                let order = match q.get("sort") {
                    None => RowOrder::Retained,
                    Some(s) => RowOrder::parse(s).ok_or_else(|| BadRequest(format!("parameter sort: unknown column {s:?}")))?,
                };
                let parent = || -> Result<Option<u64>> {
                    match q.get("parent").unwrap_or("root") {
                        "root" => Ok(None),
                        s => address(s).map(Some),
                    }
                };
                let of = if let Some(c) = q.get("chain") {
                    RowsOf::Chain(address(c)?)
                } else if let Some(p) = q.get("payload") {
                    RowsOf::Payload(address(p)?)
                } else if q.get("group").is_some() {
                    RowsOf::Group(parent()?, q.number("group", 0)?)
                } else {
                    RowsOf::Children(parent()?)
                };
                Reply::json(&a.tree_rows(of, order, q.number("offset", 0)?, n)?)
            }
            "/api/search" => Reply::json(&a.search(q.require("q")?, n)),
            "/api/blocks" => {
                let by = match q.require("by")? {
                    b @ ("site" | "type") => b,
                    b => return Err(BadRequest(format!("parameter by: expected site or type, got {b:?}")).into()),
                };
                Reply::json(&a.blocks_of(by, q.require("key")?, q.number("offset", 0)?, n))
            }
            "/api/pointers" => Reply::json(&a.pointer_page(address(q.require("address")?)?, q.number("offset", 0)?, n)?),
            "/api/suspects" => Reply::json(self.suspects.get_or_init(|| {
                // Across a series, the growing structure comes first: it is
                // what the series was given for.
                let grows = self.series.and_then(|s| a.grows(&s.growth));
                grows.into_iter().chain(a.suspects(self.diff)).collect()
            })),
            "/api/path" => Reply::json(&a.path(address(q.require("address")?)?)?.steps),
            // `path --all`'s answer; with `offset`, its rows from there on.
            "/api/holders" => {
                let offset = q.number("offset", 0)?;
                let mut rows = a.holders(address(q.require("address")?)?, offset.saturating_add(n))?.1;
                Reply::json(&rows.split_off(offset.min(rows.len())))
            }
            // The rows from `offset`, at most `n` of them.
            "/api/growth" => match self.series {
                Some(s) => {
                    let offset = q.number("offset", 0)?.min(s.growth.rows.len());
                    let rows = &s.growth.rows[offset..(offset + n).min(s.growth.rows.len())];
                    let g = &s.growth;
                    let g = heapdump_analyze::Growth {
                        pid: g.pid,
                        exe: g.exe.clone(),
                        span_ns: g.span_ns,
                        live: g.live.clone(),
                        rows: rows.to_vec(),
                        growing: g.growing,
                    };
                    Reply::json(&Series { dumps: s.dumps.clone(), growth: g })
                }
                None => Reply::error(404, "no series: start the viewer with --series OLDER.DUMP..."),
            },
            "/api/diff" => match self.diff {
                Some(d) => Reply::json(d),
                None => Reply::error(404, "no baseline: start the viewer with --baseline OLD"),
            },
            _ => Reply::error(404, "not found"),
        })
    }

    /// The page, with the token and the dump's name in it.
    fn page(&self) -> String {
        INDEX
            .replace("{{TOKEN}}", self.token)
            .replace("{{DUMP}}", &html_escape(&self.name))
            .replace("{{BASELINE}}", if self.diff.is_some() { "1" } else { "0" })
            .replace("{{SERIES}}", if self.series.is_some() { "1" } else { "0" })
    }
}

/// A malformed parameter.
#[derive(Debug)]
struct BadRequest(String);

impl std::fmt::Display for BadRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadRequest {}

/// An address parameter.
fn address(s: &str) -> Result<u64> {
    views::parse_address(s).map_err(|e| BadRequest(format!("{e:#}")).into())
}

/// The query's parameters, percent-decoded.
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(q: &str) -> Query {
        Query(
            q.split('&')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap_or((p, ""));
                    (decode(k), decode(v))
                })
                .collect(),
        )
    }

    fn get(&self, k: &str) -> Option<&str> {
        self.0.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str())
    }

    fn require(&self, k: &str) -> Result<&str> {
        self.get(k).ok_or_else(|| BadRequest(format!("missing parameter {k}")).into())
    }

    fn number(&self, k: &str, default: usize) -> Result<usize> {
        match self.get(k) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| BadRequest(format!("parameter {k}: expected a number, got {v:?}")).into()),
        }
    }

    fn group(&self, k: &str, default: GroupBy, size: bool) -> Result<GroupBy> {
        match self.get(k) {
            None => Ok(default),
            Some("site") => Ok(GroupBy::Site),
            Some("type") => Ok(GroupBy::Type),
            Some("size") if size => Ok(GroupBy::Size),
            Some(v) => Err(BadRequest(format!("parameter {k}: unknown grouping {v:?}")).into()),
        }
    }
}

/// Percent-decoding (`+` as a space), invalid escapes kept as they are.
fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16) {
                Ok(x) => {
                    out.push(x);
                    i += 3;
                    continue;
                }
                Err(_) => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Compares the token in time independent of where they differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_decode_and_tokens_compare() {
        let q = Query::parse("token=ab%20c&n=5&by=type&x");
        assert_eq!(q.get("token"), Some("ab c"));
        assert_eq!(q.number("n", 20).unwrap(), 5);
        assert_eq!(q.get("x"), Some(""));
        assert!(q.number("by", 1).is_err());
        assert_eq!(decode("%zz%4"), "%zz%4");
        assert_eq!(decode("a+b%2B"), "a b+");
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "ab"));
    }
}
