//! Feeds arbitrary bytes to the analysis caches' readers (crates/analyze:
//! `.hdcache`, `.hdgraph`, `.hdtree`, `.hdnames`, `.hdreach`): the first
//! byte picks the file, the rest is its body, written between the real
//! file's magic and key (this dump's) and a right CRC, so that every
//! check past the CRC is reached. Then what the questions `leaks`,
//! `retained`, `top` and `path` read from the caches is asked with the
//! caches on: nothing may panic, and the answers must be exactly those of
//! the analysis without them (a cache is rebuilt, never trusted), unless
//! the graph read back is another heap that no check can tell from this
//! dump's (a block's site or flags, an edge to another block).
//!
//! The dump is crates/cli/tests/data/leaks_tree-1.1-compact.hdump. With
//! `HEAPDUMP_FUZZ_SEEDS=DIR`, the first run writes the five good bodies
//! to DIR as seeds (fuzz/corpus/cache holds them).
#![no_main]

use heapdump_analyze::{open, Dump, Options};
use libfuzzer_sys::fuzz_target;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const EXTENSIONS: [&str; 5] = ["hdcache", "hdgraph", "hdtree", "hdnames", "hdreach"];

struct Setup {
    dump: PathBuf,
    /// Each file: its path, its prefix (magic, a part's name, the key), its
    /// good bytes.
    files: Vec<(PathBuf, usize, Vec<u8>)>,
    truth: Vec<String>,
}

/// Where a file's body starts: after the magic, a part's counted name,
/// and the key (five u64).
fn body_at(ext: &str) -> usize {
    40 + if ext == "hdcache" || ext == "hdgraph" { 8 } else { 16 + ext.len() }
}

/// What the cached parts answer, as text: the graph (blocks and pointers),
/// the leak classes and totals, the dominator tree and its children lists,
/// the paths' tree, whether vtables name blocks. (Not the views' labels
/// nor the sites' types: they need the modules' symbols and debug info,
/// which would make each run take a second.)
fn answers(d: &Dump) -> Vec<String> {
    let a = d.analysis();
    let heap = d.heap();
    let ids = || (0..heap.len() as u32).map(heapdump_analyze::BlockId);
    let mut out = vec![
        format!("{:?}", ids().map(|b| (heap.block(b), heap.edges(b).collect::<Vec<_>>())).collect::<Vec<_>>()),
        format!("{:?}", a.leaks()),
        format!("{:?}", a.dominators().parts()),
        format!("{:?}", a.dominated_by(None)),
        format!("{:?}", a.reach().parts()),
        format!("{:?}", a.has_block_types()),
    ];
    out.extend(ids().map(|b| format!("{:?}", a.dominated_by(Some(b)))));
    out
}

fn setup() -> &'static Setup {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    SETUP.get_or_init(|| {
        let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        let dir = base.join(format!("heapdump-fuzz-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // The caches' directory: set before any thread reads the
        // environment.
        std::env::set_var("XDG_CACHE_HOME", &dir);
        let dump = dir.join("d.hdump");
        std::fs::copy(concat!(env!("CARGO_MANIFEST_DIR"), "/../crates/cli/tests/data/leaks_tree-1.1-compact.hdump"), &dump).unwrap();
        let truth = answers(&open(&dump, &Options::default().cache(false)).unwrap());
        // The first analysis with the caches writes every file; the second
        // writes what only a read graph leaves to write.
        for _ in 0..2 {
            let d = open(&dump, &Options::default()).unwrap();
            assert_eq!(answers(&d), truth, "the caches' own first answers");
            let _ = d.cache_events();
        }
        let cache = dir.join("heapdump/analysis");
        let all: Vec<PathBuf> = std::fs::read_dir(&cache).unwrap().map(|e| e.unwrap().path()).collect();
        let files: Vec<(PathBuf, usize, Vec<u8>)> = EXTENSIONS
            .iter()
            .map(|x| {
                let p = all.iter().find(|p| p.extension().is_some_and(|e| e == *x)).unwrap_or_else(|| panic!("no .{x} in {all:?}"));
                (p.clone(), body_at(x), std::fs::read(p).unwrap())
            })
            .collect();
        if let Some(seeds) = std::env::var_os("HEAPDUMP_FUZZ_SEEDS") {
            std::fs::create_dir_all(&seeds).unwrap();
            for (i, (_, at, good)) in files.iter().enumerate() {
                let mut s = vec![i as u8];
                s.extend_from_slice(&good[*at..good.len() - 4]);
                std::fs::write(Path::new(&seeds).join(format!("good-{}", EXTENSIONS[i])), s).unwrap();
            }
        }
        Setup { dump, files, truth }
    })
}

fuzz_target!(|data: &[u8]| {
    let s = setup();
    let Some((&pick, body)) = data.split_first() else { return };
    let pick = pick as usize % s.files.len();
    for (i, (path, at, good)) in s.files.iter().enumerate() {
        let bytes = if i == pick {
            let mut b = good[..*at].to_vec();
            b.extend_from_slice(body);
            let crc = crc32fast::hash(&b);
            b.extend_from_slice(&crc.to_le_bytes());
            b
        } else {
            good.clone()
        };
        // A new file each time: the analysis maps what it reads.
        let _ = std::fs::remove_file(path);
        std::fs::write(path, bytes).unwrap();
    }
    let d = open(&s.dump, &Options::default()).unwrap();
    let got = answers(&d);
    let _ = d.cache_events();
    // A graph that keeps the trailer's counts and totals and every index
    // in range, with another block's site or flags or an edge to another
    // block, is another heap, not a lie a cache can be caught in (see
    // heapdump-analyze's tests/it/cache_lies.rs): its answers are that
    // heap's.
    if EXTENSIONS[pick] == "hdgraph" && got[0] != s.truth[0] {
        return;
    }
    if got != s.truth {
        for (g, t) in got.iter().zip(&s.truth) {
            assert_eq!(g, t, "a cache's .{} changed an answer", EXTENSIONS[pick]);
        }
    }
});
