//! The local viewer (`heapdump serve`): its JSON routes answer as the
//! command line's `--json` does, nothing is served without the token or
//! outside the routes, a malformed request does not stop it, and the page
//! works in real headless Chromium.

use crate::common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Stdio};

/// A running `heapdump serve`, stopped when dropped.
struct Viewer {
    child: Child,
    port: u16,
    token: String,
}

impl Viewer {
    fn start(dump: &Path, extra: &[&str]) -> Viewer {
        let mut child = heapdump().arg("serve").arg(dump).args(extra).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        // heapdump: serving DUMP at http://127.0.0.1:PORT/?token=TOKEN
        let url = line.split_whitespace().last().unwrap_or_default().to_string();
        let rest = url.strip_prefix("http://127.0.0.1:").unwrap_or_else(|| panic!("no address in {line:?}"));
        let (port, token) = rest.split_once("/?token=").unwrap();
        Viewer { child, port: port.parse().unwrap(), token: token.to_string() }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/?token={}", self.port, self.token)
    }

    /// Sends `request` as it is; the status and the body.
    fn raw(&self, request: &[u8]) -> (u16, String) {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(120))).unwrap();
        s.write_all(request).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        let text = String::from_utf8_lossy(&out).into_owned();
        let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let chunked = head.lines().any(|l| l.to_ascii_lowercase().starts_with("transfer-encoding: chunked"));
        (status, if chunked { dechunk(body) } else { body.to_string() })
    }

    /// GET `path` with `query` and the token.
    fn get(&self, path: &str, query: &str) -> (u16, String) {
        let sep = if query.is_empty() { "" } else { "&" };
        self.get_as(&format!("{path}?{query}{sep}token={}", self.token), &format!("127.0.0.1:{}", self.port))
    }

    fn get_as(&self, target: &str, host: &str) -> (u16, String) {
        self.raw(format!("GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes())
    }

    fn json(&self, path: &str, query: &str) -> Value {
        let (status, body) = self.get(path, query);
        assert_eq!(status, 200, "{path}?{query}: {body}");
        serde_json::from_str(&body).unwrap()
    }
}

/// The body of a chunked response.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].strip_prefix("\r\n").unwrap_or(&rest[n..]);
    }
    out
}

impl Drop for Viewer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `heapdump SUBCOMMAND DUMP ARGS... --json`.
fn cli(args: &[&str], dump: &Path) -> Value {
    let mut a: Vec<&std::ffi::OsStr> = vec![args[0].as_ref(), dump.as_os_str()];
    a.extend(args[1..].iter().map(|s| <str as AsRef<std::ffi::OsStr>>::as_ref(s)));
    a.push("--json".as_ref());
    json(&a)
}

#[test]
fn the_viewer_answers_as_the_command_line_and_only_with_its_token() {
    let d = Scratch::new("viewer-routes");
    let dump = demo_dump(&d);
    let v = Viewer::start(&dump, &[]);
    // The JSON routes are the command line's --json documents.
    assert_eq!(v.json("/api/summary", ""), cli(&["summary"], &dump));
    assert_eq!(v.json("/api/leaks", ""), cli(&["leaks"], &dump));
    assert_eq!(v.json("/api/top", "by=type&n=50"), cli(&["top", "--by", "type", "-n", "50"], &dump));
    assert_eq!(v.json("/api/top", "by=size"), cli(&["top", "--by", "size"], &dump));
    let retained = cli(&["retained", "-n", "30"], &dump);
    assert_eq!(v.json("/api/retained", "n=30"), retained);
    assert_eq!(v.json("/api/retained", "by=site&n=30"), cli(&["retained", "--by", "site", "-n", "30"], &dump));
    let a = retained[3]["address"].as_str().unwrap();
    assert_eq!(v.json("/api/path", &format!("address={a}")), cli(&["path", a], &dump));
    assert_eq!(v.json("/api/holders", &format!("address={a}&n=5")), cli(&["path", "--all", "-n", "5", a], &dump));

    // The tree: the root's children, largest first, retain the whole
    // heap between them; the largest is `retained`'s first row; a node's
    // children page through all of them.
    let total = cli(&["summary"], &dump)["bytes"].as_u64().unwrap();
    let root = v.json("/api/tree", "parent=root&n=1000");
    let nodes = root["nodes"].as_array().unwrap();
    assert_eq!(nodes.len() as u64, root["total"].as_u64().unwrap(), "the demo's roots fit one page of 1000");
    assert_eq!(nodes.iter().map(|n| n["retained"].as_u64().unwrap()).sum::<u64>(), total);
    assert!(nodes.windows(2).all(|w| w[0]["retained"].as_u64() >= w[1]["retained"].as_u64()));
    assert_eq!((&nodes[0]["address"], &nodes[0]["retained"]), (&retained[0]["address"], &retained[0]["retained"]));
    let big = nodes.iter().find(|n| n["children"].as_u64().unwrap() > 10).unwrap();
    let b = big["address"].as_str().unwrap();
    let mut seen = Vec::new();
    loop {
        let page = v.json("/api/tree", &format!("parent={b}&offset={}&n=7", seen.len()));
        let got = page["nodes"].as_array().unwrap().clone();
        if got.is_empty() {
            break;
        }
        seen.extend(got);
    }
    assert_eq!(seen.len() as u64, big["children"].as_u64().unwrap());
    let under: u64 = seen.iter().map(|n| n["retained"].as_u64().unwrap()).sum();
    assert_eq!(under + big["size"].as_u64().unwrap(), big["retained"].as_u64().unwrap(), "a node retains itself and its children");
    // A block's page: what it points to are its children's parent's
    // pointers; who holds it are `path --all`'s answers.
    let page = v.json("/api/block", &format!("address={b}&n=1000"));
    assert_eq!(page["retained"], big["retained"]);
    assert_eq!(page["dominator"], "root");
    let contents = page["contents"].as_str().unwrap();
    assert_eq!(contents.len() as u64, 2 * big["size"].as_u64().unwrap().min(4096), "a full dump shows the bytes");
    let holders = cli(&["path", "--all", "-n", "1000", b], &dump);
    assert_eq!(page["holders"], holders);
    assert_eq!(page["path"], cli(&["path", b], &dump));

    // Only with the token, only the routes, only GET, only for 127.0.0.1.
    let host = format!("127.0.0.1:{}", v.port);
    assert_eq!(v.get_as("/api/summary", &host).0, 403, "no token");
    assert_eq!(v.get_as("/api/summary?token=0123", &host).0, 403, "a wrong token");
    assert_eq!(v.get_as(&format!("/?token={}x", v.token), &host).0, 403, "a longer token");
    assert_eq!(v.get_as("/", &host).0, 403, "the page itself");
    assert_eq!(v.get("/etc/passwd", "").0, 404);
    assert_eq!(v.get("/../../../../etc/passwd", "").0, 404);
    assert_eq!(v.get("/api/nothing", "").0, 404);
    assert_eq!(v.get("/api/diff", "").0, 404, "no baseline");
    assert_eq!(v.get_as(&format!("/api/summary?token={}", v.token), "attacker.example:80").0, 403, "another host name");
    let post = format!("POST /api/summary?token={} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", v.token);
    assert_eq!(v.raw(post.as_bytes()).0, 405);
    assert_eq!(v.get("/api/block", "address=zzz").0, 400);
    assert_eq!(v.get("/api/block", "").0, 400);
    assert_eq!(v.get("/api/tree", "n=many").0, 400);
    assert_eq!(v.get("/api/block", "address=0x10").0, 404, "no allocation there");
    // Malformed requests, and a client that goes away mid-request, do
    // not stop the server.
    for junk in [&b"GARBAGE\r\n\r\n"[..], b"GET\r\n\r\n", b"\x00\x01\x02\xff\r\n\r\n", b"GET / HTTP/1.1\r\nHost"] {
        let mut s = TcpStream::connect(("127.0.0.1", v.port)).unwrap();
        s.write_all(junk).unwrap();
        drop(s);
    }
    let (status, body) = v.get("/api/summary", "");
    assert_eq!(status, 200, "{body}");
    let (status, page) = v.get("/", "");
    assert_eq!(status, 200);
    assert!(page.contains(&v.token) && page.contains("<script src=\"/app.js"), "the page carries the token to its script");
}

#[test]
fn the_viewer_shows_growth_since_a_baseline() {
    let d = Scratch::new("viewer-baseline");
    let new = demo_dump(&d);
    let old = d.path("old.hdump");
    std::fs::copy(&new, &old).unwrap();
    let new2 = {
        let d2 = Scratch::new("viewer-baseline-2");
        let p = demo_dump(&d2);
        let to = d.path("new.hdump");
        std::fs::copy(p, &to).unwrap();
        to
    };
    let v = Viewer::start(&new2, &["--baseline", old.to_str().unwrap()]);
    let o = heapdump().args(["diff", "--json"]).arg(&old).arg(&new2).output().unwrap();
    let want: Value = serde_json::from_str(&ok(&o)).unwrap();
    assert_eq!(v.json("/api/diff", ""), want);
}

/// In headless Chromium: the page opens on the demo dump, the tree is
/// expanded three levels, a block is opened, one of its retainers followed,
/// and the flamegraph clicked into; the figures shown are the command
/// line's. Screenshots go under target/tmp for a person to look at.
#[test]
fn the_viewer_works_in_headless_chromium() {
    let d = Scratch::new("viewer-chromium");
    let dump = demo_dump(&d);
    let v = Viewer::start(&dump, &[]);
    let chromium = std::process::Command::new("sh").arg("-c").arg("command -v chromium").output().unwrap();
    let chromium = ok(&chromium).trim().to_string();
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("viewer");
    let profile = d.path("profile");
    // The head of a lost structure (a session of the demo, its orders and
    // their lines below it): deep enough to open three levels.
    let leaks = cli(&["leaks"], &dump);
    let head = leaks["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["kind"] == "definitely_lost" && g["indirect_blocks"].as_u64().unwrap() > 4)
        .expect("the demo leaks structures")["example"]
        .as_str()
        .unwrap()
        .to_string();
    let r = node_json(
        &d,
        "puppeteer-core",
        include_str!("viewer.js"),
        &[chromium.as_ref(), v.url().as_ref(), profile.as_os_str(), shots.as_os_str(), head.as_ref()],
    );
    assert_eq!(r["errors"], serde_json::json!([]), "the page ran without errors");

    // The header: the summary's and the leak summary's figures.
    let s = cli(&["summary"], &dump);
    let header = &r["header"];
    assert!(header["bytes"].as_str().unwrap().contains(&format!("({})", s["bytes"])), "{header}");
    assert_eq!(header["allocations"].as_str().unwrap(), s["allocations"].to_string());
    let l = cli(&["leaks"], &dump);
    for k in ["definitely_lost", "indirectly_lost", "possibly_lost", "still_reachable"] {
        assert_eq!(header[k].as_str().unwrap(), format!("{} bytes in {} blocks", l[k]["bytes"], l[k]["blocks"]), "{k}");
    }

    // The tree: its first node is `retained`'s first row; three levels
    // opened, each level's children largest first and within their
    // parent's retained size.
    let retained = cli(&["retained", "-n", "5"], &dump);
    assert_eq!(r["top"][0]["address"], retained[0]["address"]);
    assert_eq!(r["top"][0]["retained"], retained[0]["retained"]);
    let levels = r["levels"].as_array().unwrap();
    assert_eq!(levels.len(), 3, "three levels opened: {levels:?}");
    for (i, lv) in levels.iter().enumerate() {
        let kids = lv["children"].as_array().unwrap();
        assert!(!kids.is_empty(), "level {i}");
        assert!(kids.windows(2).all(|w| w[0]["retained"].as_u64() >= w[1]["retained"].as_u64()), "level {i}");
        let page = cli(&["path", lv["address"].as_str().unwrap()], &dump);
        assert!(page.is_array(), "each opened node is a live block the command line knows");
    }

    // The block opened: the figures the command line gives for it.
    let block = &r["block"];
    let addr = block["address"].as_str().unwrap();
    let holders = cli(&["path", "--all", "-n", "1000", addr], &dump);
    let want_holders: Vec<&str> =
        holders.as_array().unwrap().iter().filter(|h| !h["size"].is_null()).map(|h| h["from"].as_str().unwrap()).collect();
    let shown: Vec<&str> = block["holders"].as_array().unwrap().iter().map(|h| h.as_str().unwrap()).collect();
    assert_eq!(shown, want_holders, "the retainers shown are path --all's");
    let kid = &levels[2]["children"][0];
    assert_eq!(block["address"], kid["address"]);
    assert!(block["facts"]["retained"].as_str().unwrap().contains(&format!("({})", kid["retained"])), "{block}");
    assert!(block["contents"].as_bool().unwrap(), "a full dump's block shows its bytes");
    // The retainer followed points to the block.
    if !want_holders.is_empty() {
        let ret = &r["retainer"];
        assert_eq!(ret["address"].as_str().unwrap(), want_holders[0]);
        assert!(ret["pointsTo"].as_array().unwrap().iter().any(|p| p == addr), "{ret}");
    }

    // The flamegraph: all of the live bytes, and a click zooms.
    let root = r["flameRoot"].as_str().unwrap();
    let digits: String = root.split('(').nth(1).unwrap().split(' ').next().unwrap().chars().filter(|c| c.is_ascii_digit()).collect();
    assert_eq!(digits, s["bytes"].to_string(), "{root}");
    assert_eq!(r["zoomed"], true, "clicking a frame zooms into it");
    for name in ["tree", "block", "flame"] {
        assert!(shots.join(format!("{name}.png")).exists(), "screenshot {name}");
    }
}
