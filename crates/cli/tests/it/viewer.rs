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
        Viewer::start_as(heapdump(), dump, extra)
    }

    /// [`Viewer::start`] from command `c` (`heapdump` with its own
    /// environment, say).
    fn start_as(mut c: std::process::Command, dump: &Path, extra: &[&str]) -> Viewer {
        let mut child = c.arg("serve").arg(dump).args(extra).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
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
/// Where the headless browser's screenshots go, for a person to look at.
fn shots() -> std::path::PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("viewer")
}

/// `script` (a puppeteer program) run by node against the viewer `v` in
/// headless Chromium, with a profile of its own in `d`, screenshots under
/// [`shots`] and `extra` arguments after those: its JSON answer.
fn in_chromium(d: &Scratch, v: &Viewer, script: &str, extra: &[&std::ffi::OsStr]) -> Value {
    let chromium = std::process::Command::new("sh").arg("-c").arg("command -v chromium").output().unwrap();
    let chromium = ok(&chromium).trim().to_string();
    let (url, profile, shots) = (v.url(), d.path("profile"), shots());
    let mut args: Vec<&std::ffi::OsStr> = vec![chromium.as_ref(), url.as_ref(), profile.as_os_str(), shots.as_os_str()];
    args.extend_from_slice(extra);
    node_json(d, "puppeteer-core", script, &args)
}

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
    let shots = shots();
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
    let r = in_chromium(&d, &v, include_str!("viewer.js"), &[head.as_ref()]);
    assert_eq!(r["errors"], serde_json::json!([]), "the page ran without errors");

    // The header: the summary's and the leak summary's figures.
    let s = cli(&["summary"], &dump);
    let header = &r["header"];
    // Shown in KiB and MiB, the exact figures kept beside them.
    assert_eq!(header["bytes"]["value"].as_str().unwrap(), s["bytes"].to_string(), "{header}");
    assert!(header["bytes"]["text"].as_str().unwrap().ends_with("iB"), "{header}");
    assert_eq!(header["allocations"]["value"].as_str().unwrap(), s["allocations"].to_string());
    let l = cli(&["leaks"], &dump);
    for k in ["definitely_lost", "indirectly_lost", "possibly_lost", "still_reachable"] {
        assert_eq!(header[k]["value"].as_str().unwrap(), format!("{} bytes in {} blocks", l[k]["bytes"], l[k]["blocks"]), "{k}");
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
    let kid = levels[2]["children"].as_array().unwrap().iter().find(|c| c["kind"] == "node").unwrap();
    assert_eq!(block["address"], kid["address"]);
    assert_eq!(block["facts"]["retained"].as_str().unwrap(), kid["retained"].to_string(), "{block}");
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

/// tests/c/viewer_shapes.c's dump (full, so the stack names its frames),
/// taken while `handle_request` is on the stack.
fn shapes_dump(d: &Scratch) -> std::path::PathBuf {
    let prog = compile(d, "viewer_shapes.c", &["-O0", "-g"]);
    let (o, dumps) = run_traced(&d.path("shapes.hdump"), &prog, &[], &["--mode", "full", "--no-at-exit"]);
    ok(&o);
    dumps.into_iter().next().expect("the program dumped on its signal")
}

/// The first screen and the structures of issue #39: a list of 40000
/// nodes is one row, 400 siblings of one site one group, roots are named,
/// a search finds by static, frame and site, columns sort, and a block of
/// 100,000 pointers pages to its end. In headless Chromium, with the JSON
/// routes behind it checked against the command line.
#[test]
fn the_viewer_groups_collapses_names_finds_and_pages() {
    let d = Scratch::new("viewer-shapes");
    let dump = shapes_dump(&d);
    let v = Viewer::start(&dump, &[]);

    // The routes. The root: the list as one row, the 400 entries as one
    // group, the frame's buffer named by its frame.
    let root = v.json("/api/rows", "parent=root&n=1000");
    let rows = root["rows"].as_array().unwrap();
    let list = rows.iter().find(|r| r["kind"] == "chain").expect("the list is one row");
    assert_eq!(list["count"], 40000);
    assert!(list["name"].as_str().unwrap().contains("40000") && list["name"].as_str().unwrap().contains("static `cache_head`"), "{list}");
    let group = rows.iter().find(|r| r["kind"] == "group" && r["count"] == 400).expect("the 400 entries are one group");
    assert_eq!(group["held_by"], "static slots");
    assert_eq!((group["bytes"].as_u64(), group["retained"].as_u64()), (Some(400 * 96), Some(400 * 96)));
    assert!(rows.iter().any(|r| r["held_by"] == "thread viewer_shapes, frame handle_request" && r["bytes"] == 3000), "{root}");
    assert!(rows.iter().any(|r| r["held_by"] == "static fanout"), "{root}");
    // The rows still add up to the heap: nothing is counted twice.
    let total = cli(&["summary"], &dump)["bytes"].as_u64().unwrap();
    assert_eq!(rows.iter().map(|r| r["retained"].as_u64().unwrap()).sum::<u64>(), total);
    // A group's members, a list's nodes and a node's payload, each paged
    // and bounded.
    let k = group["group"].as_u64().unwrap();
    let mut members = 0;
    loop {
        let page = v.json("/api/rows", &format!("parent=root&group={k}&offset={members}&n=150"));
        let got = page["rows"].as_array().unwrap();
        assert!(got.iter().all(|m| m["kind"] == "node" && m["bytes"] == 96));
        if got.is_empty() {
            break;
        }
        members += got.len();
    }
    assert_eq!(members, 400);
    let head = list["address"].as_str().unwrap();
    let nodes = v.json("/api/rows", &format!("chain={head}&n=100000"));
    assert_eq!((nodes["total"].as_u64(), nodes["rows"].as_array().unwrap().len()), (Some(40000), 1000), "pages are bounded");
    let first = &nodes["rows"][0];
    assert_eq!(first["address"], list["address"]);
    let payload = v.json("/api/rows", &format!("payload={head}"));
    assert_eq!(payload["total"], 1, "a node holds its string besides the next node: {payload}");
    assert_eq!(first["retained"].as_u64().unwrap(), 32 + payload["rows"][0]["bytes"].as_u64().unwrap());
    // The block of 100,000 pointers, a page at a time to its end.
    let fan = rows.iter().find(|r| r["held_by"] == "static fanout").unwrap()["address"].as_str().unwrap().to_string();
    let last = v.json("/api/pointers", &format!("address={fan}&offset=99990&n=1000"));
    assert_eq!((last["total"].as_u64(), last["pointers"].as_array().unwrap().len()), (Some(100000), 10));
    assert_eq!(last["pointers"][9]["offset"], 8 * 99999);
    // The block the 400 entries share: `path --all`'s rows, paged.
    let owner = rows.iter().find(|r| r["held_by"] == "static owner").unwrap()["address"].as_str().unwrap().to_string();
    let all = cli(&["path", "--all", "-n", "1000", &owner], &dump);
    assert_eq!(all.as_array().unwrap().len(), 401);
    let rest = v.json("/api/holders", &format!("address={owner}&offset=300&n=1000"));
    assert_eq!(rest.as_array().unwrap()[..], all.as_array().unwrap()[300..]);
    assert_eq!(v.get("/api/rows", "parent=root&group=99").0, 404);
    assert_eq!(v.get("/api/rows", "sort=colour").0, 400);
    assert_eq!(v.get("/api/blocks", "by=colour&key=x").0, 400);

    // The page.
    let shots = shots();
    let r = in_chromium(&d, &v, include_str!("viewer_shapes.js"), &[]);
    assert_eq!(r["errors"], serde_json::json!([]), "the page ran without errors");
    // The first screen: the suspects, the list first, then the fan, then
    // the lost buffers, each with its path or its sites.
    assert_eq!(r["view"], "suspects");
    let s = r["suspects"].as_array().unwrap();
    assert!(s.len() >= 3, "{s:?}");
    assert_eq!(s[0]["kind"], "retains");
    assert!(s[0]["text"].as_str().unwrap().contains("a list of 40000"), "{}", s[0]);
    assert_eq!(s[0]["bytes"], list["retained"]);
    assert!(s[0]["path"].as_u64().unwrap() >= 2 && s[0]["sites"].as_u64().unwrap() >= 2, "{}", s[0]);
    let lost = s.iter().find(|x| x["kind"] == "lost").expect("the lost buffers are a suspect");
    assert!(lost["text"].as_str().unwrap().contains("handle_bad_request"), "{lost}");
    // Bytes in KiB and MiB, the exact figure kept beside.
    assert_eq!(r["header"]["bytes"]["value"].as_str().unwrap(), total.to_string());
    assert!(r["header"]["bytes"]["text"].as_str().unwrap().ends_with(" MiB"), "{}", r["header"]);
    // The tree as the routes gave it, the group opened and paged.
    let shown = r["root"].as_array().unwrap();
    assert_eq!(shown.len(), rows.len());
    assert!(shown.iter().any(|x| x["kind"] == "chain" && x["what"].as_str().unwrap().contains("a list of 40000")));
    assert!(shown.iter().any(|x| x["held"] == "held by thread viewer_shapes, frame handle_request"));
    assert_eq!(r["groupFirst"].as_array().unwrap().len(), 50);
    assert_eq!(r["groupMore"].as_array().unwrap().len(), 100);
    assert!(r["groupFirst"].as_array().unwrap().iter().all(|x| x["held"].as_str().unwrap().starts_with("held by static slots")));
    assert_eq!(r["listNodes"].as_array().unwrap().len(), 50);
    assert_eq!(r["listMore"], "show 50 more of 39,950");
    assert_eq!(r["payload"].as_array().unwrap().len(), 1);
    let counts: Vec<u64> = r["byCount"].as_array().unwrap().iter().map(|x| x["count"].as_u64().unwrap()).collect();
    assert!(counts.windows(2).all(|w| w[0] >= w[1]) && counts[0] == 40000, "sorted by blocks: {counts:?}");
    // Searches: by a static's name, a frame's function, a site.
    let found = |k: &str| r[k]["blocks"].as_array().unwrap().iter().map(|row| row[2].as_str().unwrap().to_string()).collect::<Vec<_>>();
    assert_eq!(found("searchStatic"), vec![head.to_string()]);
    assert!(!found("searchFrame").is_empty());
    assert!(
        r["searchSite"]["groups"].as_array().unwrap().iter().any(|g| g[3].as_str().unwrap().starts_with("table_put")),
        "{}",
        r["searchSite"]
    );
    assert_eq!(r["blocksOf"], 50);
    // "Show more" on the block of 100,000 pointers.
    let p = r["pointers"].as_array().unwrap();
    assert_eq!(p[0]["title"], "Points to (100,000)");
    let shown: Vec<u64> = p.iter().map(|x| x["rows"].as_u64().unwrap()).collect();
    assert_eq!(shown, vec![100, 1100, 2100]);
    assert_eq!(p[2]["last"], (8 * 2099).to_string());
    assert_eq!(p[2]["more"], "show 1,000 more of 97,900");
    assert_eq!(r["holders"], serde_json::json!([100, 401]), "Held by (401): show more");
    for name in ["first-screen", "grouped-node", "list-opened"] {
        assert!(shots.join(format!("{name}.png")).exists(), "screenshot {name}");
    }
}

/// `summary`'s last lines and the report open on the suspects the viewer
/// shows: one computation, three views.
#[test]
fn summary_and_report_name_the_suspects() {
    let d = Scratch::new("suspects-views");
    let dump = shapes_dump(&d);
    let text = ok(&heapdump().arg("summary").arg(&dump).output().unwrap());
    let tail: Vec<&str> = text.lines().rev().take(9).collect::<Vec<_>>().into_iter().rev().collect();
    let tail = tail.join("\n");
    assert!(text.contains("suspects (what to look at first):"), "{text}");
    assert!(tail.contains("1. retains") && tail.contains("a list of 40000") && tail.contains("held by static `cache_head`"), "{tail}");
    assert!(tail.contains("path: static cache_head"), "{tail}");
    assert!(tail.contains(". lost ") && tail.contains("blocks of 512 B lost") && tail.contains("handle_bad_request"), "{tail}");
    // `summary --json` keeps its keys.
    let j = cli(&["summary"], &dump);
    for k in ["allocations", "bytes", "mode", "pid", "threads", "roots", "reason"] {
        assert!(j.get(k).is_some(), "{k}");
    }
    let report = d.path("r.html");
    ok(&heapdump().arg("report").arg(&dump).arg("-o").arg(&report).output().unwrap());
    let html = std::fs::read_to_string(&report).unwrap();
    let at = html.find("id=\"suspects\"").expect("the report has the suspects");
    assert!(at < html.find("id=\"leaks\"").unwrap(), "before the details");
    let section = &html[at..html.find("id=\"leaks\"").unwrap()];
    assert!(section.contains("retains 2.4 MiB") && section.contains("a list of 40000"), "{section}");
    assert!(section.contains("handle_bad_request"), "{section}");
}

/// Against a baseline, what grew is a suspect: the site that added the
/// bytes, with a block of it to open and its path (tests/c/grows.c: 300
/// blocks of 256 bytes from `growing` after the first dump).
#[test]
fn what_grew_since_the_baseline_is_a_suspect() {
    let d = Scratch::new("suspects-grew");
    let prog = compile(&d, "grows.c", &["-O1", "-g"]);
    let first = d.path("g.hdump");
    let (o, dumps) = run_traced(&first, &prog, &[first.to_str().unwrap()], &[]);
    ok(&o);
    assert_eq!(dumps.len(), 2, "{dumps:?}");
    let v = Viewer::start(&dumps[1], &["--baseline", dumps[0].to_str().unwrap()]);
    let s = v.json("/api/suspects", "");
    let grew = s.as_array().unwrap().iter().find(|x| x["kind"] == "grew").expect("a growth suspect");
    assert_eq!((grew["bytes"].as_u64(), grew["blocks"].as_u64()), (Some(300 * 256), Some(300)), "{grew}");
    assert!(grew["what"].as_str().unwrap().contains("growing"), "{grew}");
    assert_eq!(grew["share"], 100.0);
    let at = grew["address"].as_str().unwrap();
    assert_eq!(v.json("/api/block", &format!("address={at}"))["size"], 256);
    assert_eq!(grew["path"], v.json("/api/path", &format!("address={at}")), "its path, as `path` gives it");
    let html = d.path("r.html");
    ok(&heapdump().arg("report").arg(&dumps[1]).arg("--baseline").arg(&dumps[0]).arg("-o").arg(&html).output().unwrap());
    let h = std::fs::read_to_string(&html).unwrap();
    assert!(h.contains("<b>grew by 75.0 KiB</b> (100.0% of the growth)"), "the report's suspects");
}

/// `serve DUMP --series ...` that must be refused before it serves: the
/// exit code and stderr (killed, and the test failed, if it serves).
fn serve_refused(args: &[&std::ffi::OsStr]) -> (Option<i32>, String) {
    let mut child = heapdump().arg("serve").args(args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > std::time::Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("serve {args:?} served instead of refusing");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let o = child.wait_with_output().unwrap();
    (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// Across a series (tests/c/growing_service.c's four dumps, `serve NEWEST
/// --series OLDER...`): `/api/growth` is `growth --json`'s rows, the
/// growing cache is the first suspect, and in headless Chromium the
/// Growth tab shows `static cache_head` first with a chart of its four
/// dumps rising, never the stable table, and its path opens its block.
/// A series of another process, out of order, or with `--baseline` is
/// refused in one line.
#[test]
fn the_viewer_shows_the_structures_growing_across_a_series() {
    let d = Scratch::new("viewer-series");
    let dumps = crate::growth_across_dumps::service_dumps(&d);
    let os = |p: &std::path::PathBuf| p.to_str().unwrap().to_string();
    let older: Vec<String> = dumps[..3].iter().map(os).collect();
    let mut args: Vec<&str> = vec!["--series"];
    args.extend(older.iter().map(String::as_str));
    let v = Viewer::start(&dumps[3], &args);

    // The route: growth's rows over the three older dumps and the newest.
    let mut cmd: Vec<&std::ffi::OsStr> = vec!["growth".as_ref(), "--json".as_ref(), "-n".as_ref(), "100".as_ref()];
    cmd.extend(dumps.iter().map(|p| p.as_os_str()));
    let want = json(&cmd);
    let g = v.json("/api/growth", "n=100");
    assert_eq!(g["rows"], want, "the viewer's rows are growth's");
    assert_eq!(g["dumps"].as_array().unwrap().len(), 4, "the newest dump is the last point: {}", g["dumps"]);
    assert_eq!(g["rows"][0]["key"], "static cache_head");
    assert_eq!(v.json("/api/growth", "n=1")["rows"], serde_json::json!([want[0]]), "paged by n");
    assert_eq!(v.get("/api/diff", "").0, 404, "a series is not a baseline");
    // The first suspect: the growing cache, with its head to open.
    let s = v.json("/api/suspects", "");
    let first = &s[0];
    assert_eq!(first["kind"], "grew", "{first}");
    assert!(first["what"].as_str().unwrap().starts_with("static cache_head, growing at 3 of 3 steps"), "{first}");
    let cache = &want[0];
    let gained = cache["bytes"][3].as_u64().unwrap() - cache["bytes"][0].as_u64().unwrap();
    assert_eq!(first["bytes"].as_u64(), Some(gained), "{first}");
    assert!(first["sites"].as_array().unwrap().iter().all(|x| x["site"].as_str().unwrap().starts_with("cache_put")), "{first}");
    let head = first["address"].as_str().unwrap();
    assert_eq!(v.json("/api/block", &format!("address={head}"))["site"].as_str().map(|x| x.starts_with("cache_put")), Some(true));

    // A series ending with the served dump itself takes it once.
    {
        let mut args = args.clone();
        let newest = os(&dumps[3]);
        args.push(&newest);
        let v2 = Viewer::start(&dumps[3], &args);
        assert_eq!(v2.json("/api/growth", "n=100")["rows"], want);
    }

    // In headless Chromium.
    let shots = shots();
    let r = in_chromium(&d, &v, include_str!("viewer_series.js"), &[]);
    assert_eq!(r["errors"], serde_json::json!([]), "the page ran without errors");
    assert_eq!(r["growthTabHidden"], false);
    assert_eq!(r["suspects"][0]["kind"], "grew");
    assert!(r["suspects"][0]["text"].as_str().unwrap().contains("cache_head"), "{}", r["suspects"][0]);
    let rows = r["rows"].as_array().unwrap();
    assert_eq!(rows.len(), want.as_array().unwrap().len(), "one card a growing structure");
    let top = &rows[0];
    assert_eq!(top["key"], "static cache_head", "the cache first");
    let points = top["points"].as_array().unwrap();
    assert_eq!(points.len(), 4, "a point a dump: {top}");
    let ys: Vec<f64> = points.iter().map(|p| p["cy"].as_f64().unwrap()).collect();
    assert!(ys.windows(2).all(|w| w[1] < w[0]), "the chart rises (y goes up the page): {ys:?}");
    let bytes: Vec<u64> = points.iter().map(|p| p["bytes"].as_u64().unwrap()).collect();
    assert_eq!(serde_json::json!(bytes), cache["bytes"]);
    assert!(points[3]["title"].as_str().unwrap().ends_with("KiB"), "{}", points[3]);
    let text = top["text"].as_str().unwrap();
    assert!(text.contains("grew at 3 of 3 steps") && text.contains("per hour") && text.contains("KiB"), "{text}");
    assert!(!top["pathLinks"].as_array().unwrap().is_empty() && !top["sites"].as_array().unwrap().is_empty(), "{top}");
    assert!(top["sites"][0][2].as_str().unwrap().starts_with("cache_put"), "{top}");
    for row in rows {
        let all = row.to_string();
        assert!(!all.contains("table") && !all.contains("build_table") && !all.contains("churn"), "only growth: {row}");
    }
    // The path's last link: the cache's head in the newest dump.
    let block = &r["block"];
    assert!(block["heading"].as_str().unwrap().starts_with("Block 0x"), "{block}");
    assert!(block["hash"].as_str().unwrap().starts_with("#block=0x"), "{block}");
    assert!(shots.join("growth-series.png").exists());
    drop(v);

    // Refused before serving, in one line.
    let (code, err) = serve_refused(&[dumps[1].as_os_str(), "--series".as_ref(), dumps[2].as_os_str()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("oldest first") && err.trim_end().lines().count() == 1, "{err}");
    let other = demo_dump(&d);
    let (code, err) = serve_refused(&[dumps[3].as_os_str(), "--series".as_ref(), other.as_os_str()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("one process") && err.trim_end().lines().count() == 1, "{err}");
    let (code, err) =
        serve_refused(&[dumps[3].as_os_str(), "--baseline".as_ref(), dumps[0].as_os_str(), "--series".as_ref(), dumps[1].as_os_str()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--series") && err.contains("--baseline"), "{err}");
}

/// A kept graph's edges are checked when first read, not when the viewer
/// opens (the summary, the leaks and the tree's pages read none: at 10^8
/// blocks 1.4 GB of the graph's 3.0 GB). Damaged there, the viewer opens
/// from the caches and answers those as from good ones; the first
/// question that reads an edge (the suspects' paths, a block's pointers)
/// ends it with a one-line error naming the file, exit status 1, no
/// answer; the file is removed and the next opening rebuilds it and
/// answers as before. (The viewer used to check the whole graph at
/// opening and rebuild it.)
#[test]
fn a_kept_graph_damaged_in_its_edges_ends_the_viewer_when_they_are_read() {
    let d = Scratch::new("viewer-late-edges");
    let prog = d.path("mostly_lost");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../benches/c/mostly_lost.c");
    ok(&std::process::Command::new("gcc").args(["-O2", "-o"]).arg(&prog).arg(&src).output().unwrap());
    let dump = d.path("lost.hdump");
    ensure_preload();
    // 40,000 nodes of two pointers each: their targets (4 bytes each) take
    // the bytes from about 20 to 28 per block of the graph's file.
    let n = 40_000usize;
    let run = heapdump()
        .args(["run", "--mode", "compact", "--no-at-exit", "-o"])
        .arg(&dump)
        .arg("--")
        .arg(&prog)
        .arg(n.to_string())
        .arg(&dump)
        .output();
    ok(&run.unwrap());
    let home = d.path("xdg");
    let with_home = || {
        let mut c = heapdump();
        c.env("XDG_CACHE_HOME", &home);
        c
    };
    ok(&with_home().args(["retained", "--json"]).arg(&dump).output().unwrap());
    let first_page = |v: &Viewer| -> Vec<Value> {
        ["/api/summary", "/api/leaks"].iter().map(|p| v.json(p, "")).chain([v.json("/api/tree", "parent=root&n=5")]).collect()
    };
    let (truth, addr, block, suspects) = {
        let v = Viewer::start_as(with_home(), &dump, &[]);
        let page = first_page(&v);
        let addr = page[2]["nodes"][0]["address"].as_str().unwrap().to_string();
        let block = v.json("/api/block", &format!("address={addr}"));
        assert!(block["pointers_total"].as_u64().unwrap() > 0, "{block}");
        let suspects = v.json("/api/suspects", "");
        (page, addr, block, suspects)
    };
    let graph = std::fs::read_dir(home.join("heapdump/analysis"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "hdgraph"))
        .expect("the kept graph");
    let mut bytes = std::fs::read(&graph).unwrap();
    let at = 24 * n + (16 << 10);
    bytes[at] ^= 0x10;
    std::fs::write(&graph, &bytes).unwrap();
    let mut v = Viewer::start_as(with_home(), &dump, &[]);
    assert_eq!(first_page(&v), truth, "the first page from the damaged graph's blocks, as from the good one");
    let (status, body) = v.get("/api/suspects", "");
    assert_eq!(status, 0, "an answer read from a damaged table: {body}");
    let exit = v.child.wait().unwrap();
    let mut err = String::new();
    v.child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let lines: Vec<&str> = err.lines().filter(|l| !l.contains("token")).collect();
    assert_eq!(exit.code(), Some(1), "{err}");
    assert_eq!(
        lines,
        [format!(
            "heapdump: error: the kept graph {} is damaged (checksum differs): removed, the next opening rebuilds it",
            graph.display()
        )],
        "{err}"
    );
    assert!(!graph.exists(), "the damaged file is removed");
    let v = Viewer::start_as(with_home(), &dump, &[]);
    assert_eq!(first_page(&v), truth);
    assert_eq!(v.json("/api/block", &format!("address={addr}")), block, "rebuilt: the block's pointers as before");
    assert_eq!(v.json("/api/suspects", ""), suspects, "rebuilt: the suspects as before");
}
