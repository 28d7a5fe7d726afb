//! `heapdump serve`: the local viewer. One analysis session answers every
//! request, a page at a time (the dominator tree's children on demand), on
//! 127.0.0.1 only, behind a random per-run token; the page, its script and
//! its styles are in the binary, nothing is fetched from the network. The
//! JSON routes return what the command line's `--json` returns, so scripts
//! can query a running viewer.

use crate::views;
use anyhow::{anyhow, Result};
use heapdump_analyze::group::{Diff, GroupBy};
use heapdump_analyze::{Analysis, AnalyzeError, DumpFile, Summary};
use std::io::Write;
use std::path::Path;

const INDEX: &str = include_str!("viewer/index.html");
const SCRIPT: &str = include_str!("viewer/app.js");
const STYLE: &str = include_str!("viewer/app.css");

/// The most rows or children one request returns.
const MAX_ROWS: usize = 1000;

/// Serves `dump` until the process is stopped.
pub fn serve(dump: &Path, baseline: Option<&Path>, port: u16) -> Result<std::process::ExitCode> {
    let mut loaded = views::load(dump)?;
    let mut base = baseline.map(views::load).transpose()?;
    // Kept at once: the viewer runs on (see `views::finish`).
    loaded.keep_graph();
    if let Some(b) = base.as_mut() {
        b.keep_graph();
    }
    let (file, heap) = (&loaded.file, &loaded.heap);
    let diff = base.as_ref().map(|b| heapdump_analyze::group::diff((&b.file, &b.heap), (file, heap)));
    let a = views::session(file, heap);
    views::finish(true);
    let server = tiny_http::Server::http(("127.0.0.1", port)).map_err(|e| anyhow!("cannot listen on 127.0.0.1:{port}: {e}"))?;
    let port = server.server_addr().to_ip().map_or(port, |s| s.port());
    let token = token()?;
    let site = Site { a: &a, file, diff: diff.as_ref(), token: &token, port, name: dump.display().to_string() };
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "heapdump: serving {} at http://127.0.0.1:{port}/?token={token}", dump.display())?;
        out.flush()?;
    }
    eprintln!("heapdump: the token in the address is this viewer's key: share it with no one; Ctrl-C stops the viewer");
    for req in server.incoming_requests() {
        let resp = site.answer(req.method(), req.url(), req.headers());
        // A client that went away is its own business: keep serving.
        let _ = req.respond(resp.into_http());
    }
    Ok(std::process::ExitCode::SUCCESS)
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
    file: &'a DumpFile,
    diff: Option<&'a Diff>,
    token: &'a str,
    port: u16,
    name: String,
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

    fn into_http(self) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
        let header = |k: &str, v: &str| tiny_http::Header::from_bytes(k.as_bytes(), v.as_bytes()).expect("ASCII header");
        // The flamegraph is inferno's interactive SVG: its own inline
        // script and styles, nothing else.
        let csp = if self.kind == "image/svg+xml" {
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'"
        } else {
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; frame-src 'self'; object-src 'self'"
        };
        tiny_http::Response::from_data(self.body)
            .with_status_code(self.status)
            .with_header(header("Content-Type", self.kind))
            .with_header(header("Cache-Control", "no-store"))
            .with_header(header("X-Content-Type-Options", "nosniff"))
            .with_header(header("Referrer-Policy", "no-referrer"))
            .with_header(header("X-Frame-Options", "SAMEORIGIN"))
            .with_header(header("Content-Security-Policy", csp))
    }
}

impl Site<'_, '_> {
    fn answer(&self, method: &tiny_http::Method, url: &str, headers: &[tiny_http::Header]) -> Reply {
        // Another site in the user's browser may not reach the viewer by
        // a name that resolves to 127.0.0.1 (DNS rebinding).
        let host = headers.iter().find(|h| h.field.equiv("Host")).map(|h| h.value.as_str());
        let ok_host = |h: &str| h == format!("127.0.0.1:{}", self.port) || h == format!("localhost:{}", self.port);
        if !host.is_some_and(ok_host) {
            return Reply::error(403, "forbidden: the viewer answers requests for 127.0.0.1 only");
        }
        if *method != tiny_http::Method::Get {
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
                    Some(AnalyzeError::NoSuchAllocation { .. } | AnalyzeError::NoPath { .. }) => 404,
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
            "/api/summary" => Reply::json(&Summary::of(self.file)?),
            "/api/leaks" => Reply::json(&a.leak_report()),
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
            "/api/path" => Reply::json(&a.path(address(q.require("address")?)?)?.steps),
            "/api/holders" => Reply::json(&a.holders(address(q.require("address")?)?, n)?.1),
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
