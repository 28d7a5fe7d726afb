//! The summary kept in the cache (part `hdsummary`), for the viewer's
//! first page: the walk of a dump's records reads the whole dump (1.7 GB
//! at 100 M blocks), the kept summary a few hundred bytes. It must say
//! exactly what the walk says, and a kept summary that lies (another
//! dump's, damaged, resealed by a forger) is refused and rebuilt.

use crate::build::Spec;
use crate::seal::body_len;
use heapdump_analyze::cache::CacheFile;
use heapdump_analyze::{Analysis, DumpFile, Heap, Summary};
use std::path::{Path, PathBuf};

const VERSION: &str = "kept-summary";

fn scratch(label: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hd-kept-summary-{}-{label}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The summary from `dir`'s caches, and what the caches did.
fn ask(file: &DumpFile, heap: &Heap, dir: &Path) -> (Summary, Vec<String>) {
    let a = Analysis::new(file, heap).with_cache(CacheFile::for_file(dir, file, VERSION).unwrap());
    let s = a.summary_kept().unwrap();
    (s, a.cache_events())
}

/// `body` sealed as the caches seal a file of less than 64 KiB: its CRC,
/// its length, the CRC of both.
fn sealed(body: &[u8]) -> Vec<u8> {
    let mut b = body.to_vec();
    let mut tail = crc32fast::hash(body).to_le_bytes().to_vec();
    tail.extend_from_slice(&(body.len() as u64).to_le_bytes());
    let crc = crc32fast::hash(&tail);
    b.extend_from_slice(&tail);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

#[test]
fn the_kept_summary_is_the_records_own_and_a_lying_one_is_rebuilt() {
    let dir = scratch("summary");
    let path = dir.join("d.hdump");
    let mut spec = Spec::default();
    spec.block(0x1000, 64).block(0x2000, 32).ptr(0x1000, 8, 0x2000);
    spec.stack = vec![0x1000];
    spec.module = Some(("/lib/x86_64-linux-gnu/libc.so.6", 0x7000_0000, 0x1000));
    std::fs::write(&path, spec.write()).unwrap();
    let file = DumpFile::open(&path).unwrap();
    let heap = Heap::load(&file, &mut |_, _| {}).unwrap();
    let truth = Summary::of(&file).unwrap();
    assert_eq!(truth.allocator.as_deref(), Some("glibc"), "{truth:?}");
    let caches = dir.join("caches");
    std::fs::create_dir_all(&caches).unwrap();
    let (first, events) = ask(&file, &heap, &caches);
    assert_eq!(first, truth);
    assert!(events.iter().any(|e| e.starts_with("wrote") && e.ends_with(".hdsummary")), "{events:?}");
    let (second, events) = ask(&file, &heap, &caches);
    assert_eq!(second, truth, "from the cache");
    assert!(events.iter().any(|e| e.starts_with("hit") && e.ends_with(".hdsummary")), "{events:?}");
    for e in std::fs::read_dir(&caches).unwrap() {
        let p = e.unwrap().path();
        assert!(heapdump_analyze::cache::bounded(&p), "{} is not evicted with the caches", p.display());
    }
    let part = CacheFile::for_file(&caches, &file, VERSION).unwrap().part_path("hdsummary");
    let good = std::fs::read(&part).unwrap();
    // The part: magic, counted name, key (five words), the counted JSON.
    let json_at = 8 + 8 + "hdsummary".len() + 40 + 8;
    let head = &good[..json_at - 8];
    let json: serde_json::Value = serde_json::from_slice(&good[json_at..body_len(&good)]).unwrap();
    let forged = |edit: &dyn Fn(&mut serde_json::Value)| -> Vec<u8> {
        let mut j = json.clone();
        edit(&mut j);
        let text = serde_json::to_vec(&j).unwrap();
        let mut body = head.to_vec();
        body.extend_from_slice(&(text.len() as u64).to_le_bytes());
        body.extend_from_slice(&text);
        sealed(&body)
    };
    let mut flipped = good.clone();
    flipped[json_at + 3] ^= 0x20;
    let lies: Vec<(&str, Vec<u8>, &str)> = vec![
        ("a bit flipped", flipped, "checksum differs"),
        ("another pid", forged(&|j| j["pid"] = (truth.pid + 1).into()), "the summary of another dump"),
        ("an allocation more", forged(&|j| j["allocations"] = (truth.allocations + 1).into()), "the summary of another dump"),
        ("another file's length", forged(&|j| j["file_bytes"] = (truth.file_bytes + 8).into()), "the summary of another dump"),
        ("a warning of its own", forged(&|j| j["warnings"] = serde_json::json!(["mine"])), "the summary of another dump"),
        ("not a summary", forged(&|j| *j = serde_json::json!({"pid": 1})), "the summary of another dump"),
    ];
    for (what, bytes, why) in lies {
        std::fs::write(&part, &bytes).unwrap();
        let (got, events) = ask(&file, &heap, &caches);
        assert_eq!(got, truth, "{what}");
        assert!(events.iter().any(|e| e.starts_with("rebuilt") && e.contains(why)), "{what}: not refused for {why:?}: {events:?}");
        assert!(std::fs::read(&part).unwrap() == good, "{what}: the part kept again");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
