//! The analysis cache end to end: a second question answered from it, a
//! damaged one rebuilt, one that cannot be written said so with the answer
//! standing, a question asked while it is written waiting for it; and
//! caches that lie: each of the five cache files of a traced program's
//! dump replaced by another dump's (its key rewritten to this dump's) or
//! with an index past the end, the CRC made right. Every command that
//! reads them answers exactly as with `--no-cache`, exits 0, and leaves
//! good files behind. (The field by field forger is heapdump-analyze's
//! `tests/it/cache_lies.rs`.)

use crate::common::*;
use std::path::{Path, PathBuf};

const EXTENSIONS: [&str; 5] = ["hdcache", "hdgraph", "hdtree", "hdreach", "hdnames"];

/// The JSON answers of the commands that read the caches, and what the
/// caches did (stderr's `cache:` lines): under `cache_home`, or with
/// `--no-cache`.
fn answers(dump: &Path, addr: &str, cache_home: Option<&Path>) -> (Vec<String>, String) {
    let d = dump.as_os_str();
    let a = std::ffi::OsStr::new(addr);
    let commands: [Vec<&std::ffi::OsStr>; 7] = [
        vec!["top".as_ref(), "--json".as_ref(), d],
        vec!["top".as_ref(), "--by".as_ref(), "type".as_ref(), "--json".as_ref(), d],
        vec!["leaks".as_ref(), "--json".as_ref(), d],
        vec!["retained".as_ref(), "--json".as_ref(), d],
        vec!["retained".as_ref(), "--by".as_ref(), "site".as_ref(), "--json".as_ref(), d],
        vec!["path".as_ref(), "--json".as_ref(), d, a],
        vec!["path".as_ref(), "--all".as_ref(), "--json".as_ref(), d, a],
    ];
    let (mut out, mut events) = (Vec::new(), String::new());
    for args in commands {
        let mut c = heapdump();
        c.env("HEAPDUMP_CACHE_REPORT", "1");
        match cache_home {
            Some(h) => c.env("XDG_CACHE_HOME", h),
            None => c.arg("--no-cache"),
        };
        let o = c.args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        out.push(ok(&o));
        events.extend(err.lines().filter(|l| l.contains("cache: ")).map(|l| format!("{l}\n")));
    }
    (out, events)
}

/// What `ask` said on stderr for `args`.
fn err_of(ask: &impl Fn(&[&str]) -> (String, String), args: &[&str]) -> String {
    ask(args).1
}

/// The cache files under `cache_home`, by extension.
fn files(cache_home: &Path) -> Vec<(&'static str, PathBuf)> {
    let dir = cache_home.join("heapdump/analysis");
    let all: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    EXTENSIONS
        .iter()
        .map(|&x| (x, all.iter().find(|p| p.extension().is_some_and(|e| e == x)).unwrap_or_else(|| panic!("no {x} in {all:?}")).clone()))
        .collect()
}

/// The length of a cache file's contents: its seal follows (a CRC-32 per
/// 64 KiB of them, their length, a CRC-32 of both).
fn body_len(b: &[u8]) -> usize {
    u64::from_le_bytes(b[b.len() - 12..b.len() - 4].try_into().unwrap()) as usize
}

/// The seal of a cache file made right for its contents, as a forger
/// would.
fn recrc(b: &mut [u8]) {
    let n = body_len(b);
    for (i, c) in (0..n).step_by(64 << 10).enumerate() {
        let crc = crc32fast::hash(&b[c..(c + (64 << 10)).min(n)]);
        b[n + 4 * i..n + 4 * i + 4].copy_from_slice(&crc.to_le_bytes());
    }
    let t = b.len() - 4;
    let crc = crc32fast::hash(&b[n..t]);
    b[t..].copy_from_slice(&crc.to_le_bytes());
}

/// Where a file's key starts: after the magic, and a part's counted name.
fn key_at(ext: &str) -> usize {
    if ext == "hdcache" || ext == "hdgraph" {
        8
    } else {
        16 + ext.len()
    }
}

/// A block for `path`: the last of the largest retainers (a leaf, whose
/// chain the kept breadth-first tree gives).
fn block(dump: &Path) -> String {
    let o = heapdump().args(["--no-cache", "retained", "--json"]).arg(dump).output().unwrap();
    let rows: serde_json::Value = serde_json::from_str(&ok(&o)).unwrap();
    rows.as_array().unwrap().last().unwrap()["address"].as_str().unwrap().to_string()
}

#[test]
fn every_command_answers_as_without_a_cache_when_a_cache_lies() {
    let (d, dump) = traced("cache-lies", "leaks_tree.c", &["-O0", "-g"]);
    let (other_dir, other_dump) = traced("cache-lies-other", "leaks.c", &["-O0", "-g"]);
    let addr = block(&dump);
    let (truth, _) = answers(&dump, &addr, None);
    let home = d.path("xdg");
    let (first, _) = answers(&dump, &addr, Some(&home));
    assert_eq!(first, truth, "the first analysis");
    let good: Vec<(&str, PathBuf, Vec<u8>)> = files(&home).into_iter().map(|(x, p)| (x, p.clone(), std::fs::read(&p).unwrap())).collect();
    let other_home = other_dir.path("xdg");
    answers(&other_dump, &block(&other_dump), Some(&other_home));
    let mut lies: Vec<(&str, String, Vec<u8>)> = Vec::new();
    for (ext, p) in files(&other_home) {
        let mut b = std::fs::read(p).unwrap();
        let mine = &good.iter().find(|g| g.0 == ext).unwrap().2;
        let at = key_at(ext);
        b[at..at + 40].copy_from_slice(&mine[at..at + 40]);
        recrc(&mut b);
        lies.push((ext, format!("another dump's {ext}, its key rewritten"), b));
    }
    // The last word of each: an index (a dominated count, a child, the
    // pointer taken to the last block) set past the end.
    for ext in ["hdcache", "hdtree", "hdreach"] {
        let mut b = good.iter().find(|g| g.0 == ext).unwrap().2.clone();
        let n = body_len(&b);
        b[n - 4..n].copy_from_slice(&u32::MAX.to_le_bytes());
        recrc(&mut b);
        lies.push((ext, format!("{ext}'s last index past the end"), b));
    }
    for (ext, what, bytes) in lies {
        for (_, p, g) in &good {
            std::fs::write(p, g).unwrap();
        }
        let (path, lied) = good.iter().find(|g| g.0 == ext).map(|g| (g.1.display().to_string(), g.2 != bytes)).unwrap();
        std::fs::write(&path, &bytes).unwrap();
        let (got, events) = answers(&dump, &addr, Some(&home));
        assert!(got == truth, "{what}: the answers differ from --no-cache's\n{events}");
        if lied {
            assert!(events.contains(&format!("rebuilt {path} (")), "{what}: not refused\n{events}");
        }
        let (again, events) = answers(&dump, &addr, Some(&home));
        assert!(again == truth, "{what}: the answers after the rebuild");
        assert!(!events.contains("rebuilt") && !events.contains("wrote"), "{what}: good files left behind\n{events}");
    }
}

#[test]
fn a_second_question_is_answered_from_the_cache_and_a_bad_cache_is_rebuilt() {
    use std::os::unix::fs::PermissionsExt;
    let (d, dump) = traced("cache", "leaks_tree.c", &["-O0", "-g"]);
    let cache_home = d.path("xdg");
    let ask = |args: &[&str]| {
        let o = heapdump().env("XDG_CACHE_HOME", &cache_home).env("HEAPDUMP_CACHE_REPORT", "1").args(args).arg(&dump).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        (ok(&o), err)
    };
    // What happened to each part: "hit", "miss", "wrote", "rebuilt" and
    // the file's kind (the leak classes and dominators, the dominator
    // tree's children, the blocks vtables name).
    let parts = |err: &str| -> Vec<String> {
        err.lines()
            .filter_map(|l| l.strip_prefix("heapdump: cache: "))
            .map(|l| {
                let mut w = l.split(' ');
                let verb = w.next().unwrap();
                let path = std::path::PathBuf::from(w.next().unwrap());
                format!("{verb} {}", path.extension().unwrap().to_str().unwrap())
            })
            .collect()
    };
    let events =
        |err: &str| -> Vec<String> { parts(err).into_iter().filter_map(|p| p.strip_suffix(" hdcache").map(str::to_string)).collect() };
    let graph = |err: &str| -> Vec<String> {
        err.lines().filter_map(|l| l.strip_prefix("heapdump: graph cache: ")).map(|l| l.split(' ').next().unwrap().to_string()).collect()
    };
    let (first, err) = ask(&["retained", "--json"]);
    assert_eq!(parts(&err), ["miss hdcache", "wrote hdcache", "miss hdtree", "wrote hdtree", "miss hdnames", "wrote hdnames"], "{err}");
    assert_eq!(graph(&err), ["miss", "wrote"], "{err}");
    let (second, err) = ask(&["retained", "--json"]);
    assert_eq!(parts(&err), ["hit hdcache", "hit hdtree", "hit hdnames"], "nothing computed again: {err}");
    assert_eq!(graph(&err), ["hit"], "the loaded graph too: {err}");
    assert_eq!(first, second, "the cache gives the same answer");
    // A copy of the dump altered since (a byte of its middle: its bytes
    // no longer match its trailer's checksum, which still names the kept
    // graph) is not answered from that graph: it is read, and refused
    // (for its checksum, or for a record the byte broke, depending on
    // where the middle falls).
    let altered = d.path("altered.hdump");
    let mut bytes = std::fs::read(&dump).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    std::fs::write(&altered, &bytes).unwrap();
    // `retained` on a damaged dump: refused with one error line; what it
    // said on stderr.
    let refused = |path: &Path| -> String {
        let o = heapdump()
            .env("XDG_CACHE_HOME", &cache_home)
            .env("HEAPDUMP_CACHE_REPORT", "1")
            .args(["retained", "--json"])
            .arg(path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(!o.status.success() && err.contains("heapdump: error:"), "{}: {err}", path.display());
        err
    };
    let err = refused(&altered);
    assert!(!graph(&err).contains(&"hit".to_string()), "{err}");
    // The dump's checksum: hashed by each question until the file has
    // settled (2 s after its last change), then remembered by the file's
    // identity and recalled, the 1.7 GB of a dump of 100 M blocks not read
    // again; a change to the file in place (a byte flipped, even put back)
    // makes it hashed again, and a damaged dump is refused, never
    // answered from the graph its unchanged self left.
    let checksum = |err: &str| -> Vec<String> {
        err.lines().filter_map(|l| l.strip_prefix("heapdump: dump checksum: ")).map(str::to_string).collect()
    };
    let good = std::fs::read(&dump).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2100));
    assert_eq!(checksum(&err_of(&ask, &["leaks", "--json"])), ["hashed and remembered"]);
    let (again, err) = ask(&["retained", "--json"]);
    assert_eq!((checksum(&err), graph(&err)), (vec!["recalled".to_string()], vec!["hit".to_string()]), "{err}");
    assert_eq!(again, first);
    let mut bytes = good.clone();
    bytes[mid] ^= 1;
    std::fs::write(&dump, &bytes).unwrap();
    let err = refused(&dump);
    assert!(!graph(&err).contains(&"hit".to_string()) && checksum(&err).is_empty(), "{err}");
    std::fs::write(&dump, &good).unwrap();
    let (back, err) = ask(&["retained", "--json"]);
    // (Remembered too, should this question start 2 s after the write.)
    assert!(checksum(&err).len() == 1 && checksum(&err)[0].starts_with("hashed"), "{err}");
    assert_eq!(graph(&err), ["hit"], "{err}");
    assert_eq!(back, first);
    // Paths: the tree of what the roots reach is kept too, and every
    // holder of `path --all` is answered from it.
    let rows: serde_json::Value = serde_json::from_str(&first).unwrap();
    let addr = rows.as_array().unwrap().last().unwrap()["address"].as_str().unwrap().to_string();
    let ask_path = || {
        let o = heapdump()
            .env("XDG_CACHE_HOME", &cache_home)
            .env("HEAPDUMP_CACHE_REPORT", "1")
            .args(["path", "--all", "--json"])
            .arg(&dump)
            .arg(&addr)
            .output()
            .unwrap();
        (ok(&o), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (path_first, err) = ask_path();
    assert!(parts(&err).ends_with(&["miss hdreach".to_string(), "wrote hdreach".to_string()]), "{err}");
    let (path_second, err) = ask_path();
    assert!(parts(&err).contains(&"hit hdreach".to_string()) && !parts(&err).iter().any(|p| p.starts_with("wrote")), "{err}");
    assert_eq!(path_first, path_second);
    let o = heapdump().args(["--no-cache", "path", "--all", "--json"]).arg(&dump).arg(&addr).output().unwrap();
    assert_eq!(ok(&o), path_first, "with and without the cache");
    let (leaks_cached, err) = ask(&["leaks", "--json"]);
    assert_eq!(events(&err), ["hit"], "{err}");
    let o = heapdump().args(["--no-cache", "leaks", "--json"]).arg(&dump).env("XDG_CACHE_HOME", d.path("other")).output().unwrap();
    assert_eq!(ok(&o), leaks_cached, "with and without the cache");
    assert!(!d.path("other/heapdump/analysis").exists(), "--no-cache writes nothing");
    // Private: the directory 0700, the file 0600.
    let dir = cache_home.join("heapdump/analysis");
    assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
    let files: Vec<_> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().unwrap() == "hdcache").collect();
    assert_eq!(files.len(), 1, "{files:?}");
    // The kept graph, damaged, is refused and rebuilt too.
    let graph_file = files[0].with_extension("hdgraph");
    let mut g = std::fs::read(&graph_file).unwrap();
    let at = g.len() / 3;
    g[at] ^= 1;
    std::fs::write(&graph_file, &g).unwrap();
    let (again, err) = ask(&["retained", "--json"]);
    assert_eq!(graph(&err), ["rebuilt", "wrote"], "{err}");
    assert_eq!(again, first);
    assert_eq!(std::fs::metadata(&files[0]).unwrap().permissions().mode() & 0o777, 0o600);
    // A damaged cache is detected, rebuilt, and the answer unchanged.
    let mut bytes = std::fs::read(&files[0]).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&files[0], &bytes).unwrap();
    let (third, err) = ask(&["retained", "--json"]);
    assert_eq!(events(&err), ["rebuilt", "wrote"], "{err}");
    assert!(err.contains("checksum differs"), "{err}");
    assert_eq!(third, first);
    // Cut short, too.
    std::fs::write(&files[0], &bytes[..100]).unwrap();
    let (_, err) = ask(&["retained", "--json"]);
    assert_eq!(events(&err), ["rebuilt", "wrote"], "{err}");
    // Four analyses at once leave one good cache.
    std::fs::remove_file(&files[0]).unwrap();
    let kids: Vec<_> = (0..4)
        .map(|_| {
            heapdump()
                .env("XDG_CACHE_HOME", &cache_home)
                .args(["retained", "--json"])
                .arg(&dump)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for k in kids {
        let o = k.wait_with_output().unwrap();
        assert_eq!(ok(&o), first);
    }
    let (_, err) = ask(&["retained", "--json"]);
    assert_eq!(events(&err), ["hit"], "{err}");
    // The tree's part, damaged, is rebuilt and gives the same answer.
    let tree_file = files[0].with_extension("hdtree");
    let mut t = std::fs::read(&tree_file).unwrap();
    let at = t.len() - 9;
    t[at] ^= 4;
    std::fs::write(&tree_file, &t).unwrap();
    let (fourth, err) = ask(&["retained", "--json"]);
    assert!(parts(&err).contains(&"rebuilt hdtree".to_string()) && parts(&err).contains(&"wrote hdtree".to_string()), "{err}");
    assert_eq!(fourth, first);
    // Another dump's part is refused by its key, not trusted.
    let (other_dir, other_dump) = traced("cache-other", "leaks.c", &["-O0", "-g"]);
    let o = heapdump().env("XDG_CACHE_HOME", other_dir.path("xdg")).args(["retained", "--json"]).arg(&other_dump).output().unwrap();
    ok(&o);
    let other_tree: Vec<_> = std::fs::read_dir(other_dir.path("xdg/heapdump/analysis"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().unwrap() == "hdtree")
        .collect();
    std::fs::copy(&other_tree[0], &tree_file).unwrap();
    let (fifth, err) = ask(&["retained", "--json"]);
    assert!(err.contains("written for another dump or tool version"), "{err}");
    assert_eq!(fifth, first);
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(
        left.len(),
        6,
        "the analysis, the graph, the tree, the names, the paths and the dumps checked, no temporary file left: {left:?}"
    );
}

/// The caches are written by forked children while the answer is
/// computed: a file they could not write is said so, with the system's
/// reason, the answer unchanged and the exit status a success; once the
/// way is clear, they are written and found.
#[test]
fn a_cache_that_cannot_be_written_is_said_so_and_the_answer_stands() {
    let (d, dump) = traced("cache-blocked", "leaks_tree.c", &["-O0", "-g"]);
    let cache_home = d.path("xdg");
    let ask = || {
        let o = heapdump()
            .env("XDG_CACHE_HOME", &cache_home)
            .env("HEAPDUMP_CACHE_REPORT", "1")
            .args(["retained", "--json"])
            .arg(&dump)
            .output()
            .unwrap();
        (ok(&o), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (first, err) = ask();
    let wrote: Vec<std::path::PathBuf> = err
        .lines()
        .filter_map(|l| l.strip_prefix("heapdump: cache: wrote ").or_else(|| l.strip_prefix("heapdump: graph cache: wrote ")))
        .map(std::path::PathBuf::from)
        .collect();
    assert_eq!(wrote.len(), 4, "the analysis, the tree, the names and the graph: {err}");
    // Each file's name taken by a directory holding something: the
    // writer's rename fails.
    for p in &wrote {
        std::fs::remove_file(p).unwrap();
        std::fs::create_dir(p).unwrap();
        std::fs::write(p.join("keep"), b"x").unwrap();
    }
    let (blocked, err) = ask();
    assert_eq!(blocked, first, "the same answer");
    for p in &wrote {
        let line =
            err.lines().find(|l| l.contains("not written") && l.contains(&*p.to_string_lossy())).unwrap_or_else(|| panic!("{p:?}: {err}"));
        assert!(line.contains("Is a directory"), "the reason: {line}");
    }
    let dir = wrote[0].parent().unwrap();
    let temporary: Vec<_> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name()).filter(|n| n.to_string_lossy().ends_with(".tmp")).collect();
    assert!(temporary.is_empty(), "no temporary file left: {temporary:?}");
    for p in &wrote {
        std::fs::remove_dir_all(p).unwrap();
    }
    let (_, err) = ask();
    assert_eq!(err.lines().filter(|l| l.contains(": wrote ")).count(), 4, "{err}");
    let (again, err) = ask();
    assert_eq!(again, first);
    assert_eq!(err.lines().filter(|l| l.contains(": hit ")).count(), 4, "all found: {err}");
}

/// A command leaves the cache files it is still writing to finish on
/// their own once its answer is out; a question asked meanwhile waits for
/// the writer (its temporary file, named after the cache file, locked
/// while it writes) and reads what it wrote, rather than computing it
/// again.
#[test]
fn a_question_asked_while_the_cache_is_written_waits_for_it() {
    let (d, dump) = traced("cache-wait", "leaks_tree.c", &["-O0", "-g"]);
    let cache_home = d.path("xdg");
    let ask = |report: bool| {
        let mut c = heapdump();
        c.env("XDG_CACHE_HOME", &cache_home).args(["top", "--json"]).arg(&dump);
        if report {
            c.env("HEAPDUMP_CACHE_REPORT", "1");
        }
        let o = c.output().unwrap();
        (ok(&o), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (first, err) = ask(true);
    let graph = err.lines().find_map(|l| l.strip_prefix("heapdump: graph cache: wrote ")).map(std::path::PathBuf::from).expect(&err);
    let temporary = |n: u32| graph.with_file_name(format!(".{}.{n}.0.tmp", graph.file_name().unwrap().to_string_lossy()));
    // The graph moved aside, and a writer holding the lock on its
    // temporary file that puts the graph back in half a second.
    let aside = d.path("graph.aside");
    std::fs::rename(&graph, &aside).unwrap();
    let tmp = temporary(1);
    std::fs::write(&tmp, b"").unwrap();
    let mut writer = std::process::Command::new("flock")
        .arg(&tmp)
        .args(["sh", "-c"])
        .arg(format!("sleep 0.5; mv '{}' '{}'", aside.display(), graph.display()))
        .spawn()
        .unwrap();
    // Until flock holds the lock, a question would not wait.
    while std::process::Command::new("flock").args(["-n", "-s"]).arg(&tmp).arg("true").status().unwrap().success() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let (second, err) = ask(true);
    writer.wait().unwrap();
    assert!(err.contains("graph cache: hit"), "waited for the writer: {err}");
    assert_eq!(second, first);
    // A temporary file no writer holds (one that died) is not waited for.
    std::fs::remove_file(&graph).unwrap();
    let (_, err) = ask(true);
    assert!(err.contains("graph cache: miss"), "{err}");
    std::fs::remove_file(&tmp).unwrap();
    // Without the report, the command does not wait for its writers: the
    // next question, asked at once, still finds every file.
    std::fs::remove_file(&graph).unwrap();
    let (third, err) = ask(false);
    assert!(err.is_empty(), "{err}");
    let (fourth, err) = ask(true);
    assert!(err.contains("graph cache: hit"), "{err}");
    assert_eq!((third, fourth), (first.clone(), first));
}

/// `HEAPDUMP_PHASES=1` has the analysis say on stderr when each of its
/// long phases ended, each thread's in order, the answer unchanged; unset,
/// stderr says nothing of them.
#[test]
fn the_phases_are_said_when_asked_and_only_then() {
    let d = Scratch::new("phases");
    let dump = demo_dump(&d);
    let ask = |phases: bool| {
        let mut c = heapdump();
        if phases {
            c.env("HEAPDUMP_PHASES", "1");
        }
        let o = c.args(["retained", "--no-cache", "--json"]).arg(&dump).output().unwrap();
        (ok(&o), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (plain, quiet) = ask(false);
    assert!(!quiet.contains("phase"), "{quiet}");
    let (answer, said) = ask(true);
    assert_eq!(answer, plain, "the answer is the same with the phases said");
    let mut last: std::collections::HashMap<String, f64> = Default::default();
    let mut named = Vec::new();
    for line in said.lines().filter(|l| l.starts_with("heapdump: phase ")) {
        // "heapdump: phase   0.123 s leak classes (helper) cpu 0.10 s user 0.02 s system"
        let rest = line["heapdump: phase ".len()..].trim_start();
        let (secs, rest) = rest.split_once(" s ").unwrap_or_else(|| panic!("{line}"));
        let (rest, cpu) = rest.rsplit_once(") cpu ").unwrap_or_else(|| panic!("{line}"));
        let (what, thread) = rest.rsplit_once(" (").unwrap_or_else(|| panic!("{line}"));
        let cpu: Vec<f64> = cpu.split(' ').filter_map(|w| w.parse().ok()).collect();
        assert_eq!(cpu.len(), 2, "user and system time in {line}");
        let t: f64 = secs.parse().unwrap_or_else(|_| panic!("{line}"));
        let before = last.insert(thread.to_string(), t).unwrap_or(0.0);
        assert!(t >= before, "{thread}'s phases out of order: {said}");
        named.push(what.to_string());
    }
    for want in ["load begins", "loaded", "leak classes", "predecessor lists", "walk from the leaders", "retained sums", "children lists"] {
        assert!(named.iter().any(|n| n == want), "no phase {want:?} in {said}");
    }
}
