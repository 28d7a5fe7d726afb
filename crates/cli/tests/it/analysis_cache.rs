//! Caches that lie (issue #36), end to end: each of the five cache files
//! of a traced program's dump replaced by another dump's (its key
//! rewritten to this dump's) or with an index past the end, the CRC made
//! right. Every command that reads them answers exactly as with
//! `--no-cache`, exits 0, and leaves good files behind. (The field by
//! field forger is heapdump-analyze's `tests/it/cache_lies.rs`.)

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

/// The cache files under `cache_home`, by extension.
fn files(cache_home: &Path) -> Vec<(&'static str, PathBuf)> {
    let dir = cache_home.join("heapdump/analysis");
    let all: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    EXTENSIONS
        .iter()
        .map(|&x| (x, all.iter().find(|p| p.extension().is_some_and(|e| e == x)).unwrap_or_else(|| panic!("no {x} in {all:?}")).clone()))
        .collect()
}

fn recrc(b: &mut [u8]) {
    let n = b.len() - 4;
    let crc = crc32fast::hash(&b[..n]);
    b[n..].copy_from_slice(&crc.to_le_bytes());
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
        let n = b.len() - 4;
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
