//! The viewer's default tab (`/api/suspects`) from the cache (issue #43):
//! the sites below each suspect walked in the kept tree (each top's
//! subtree a level at a time, the one the walk stops inside in the tree's
//! order), the lost groups' blocks read from the kept classes, never the
//! whole classes or tree. On a heap of many sites whose arrays span
//! several of the seal's 64 KiB chunks (a lost table, 8,000 lost
//! structures, possibly lost blocks, reachable blocks of the lost
//! leaders' site under the root: every suspect lost, so that none needs
//! a path from a root, which reads the classes whole): the suspects from the cache are those
//! computed with no cache for walks stopped anywhere (whole, part way,
//! after a few blocks); a bit flipped in a file, and lies under a good
//! seal (a leak class, a leader, a dominated count, a child's dominator,
//! two children swapped, a possibly lost block said reachable), are
//! refused where they are read or change nothing, never a wrong suspect.

use crate::build::Spec;
use crate::seal::{body_len, reseal};
use heapdump_analyze::cache::CacheFile;
use heapdump_analyze::{Analysis, DumpFile, Heap};
use std::path::{Path, PathBuf};

const VERSION: &str = "kept-suspects";

/// Lost structures: a definitely lost leader each, holding one or two
/// blocks.
const LOST: u64 = 8_000;
/// The table's entries, each holding one block (the table is lost).
const TABLE: u64 = 300;
/// Possibly lost blocks (the stack points inside each), each holding
/// one block.
const POSSIBLY: u64 = 40;
/// Reachable blocks of the leaders' site held by the stack.
const HELD: u64 = 8;

/// The walks' lengths tried: whole, part way through the table, a few.
const WALKS: [usize; 3] = [2_000_000, 333, 7];

const TABLE_AT: u64 = 0x10_0000;
fn entry(i: u64) -> u64 {
    0x20_0000 + i * 0x400
}
fn payload(i: u64) -> u64 {
    0x40_0000 + i * 0x100
}
fn held(i: u64) -> u64 {
    0x58_0000 + i * 0x100
}
fn possibly(i: u64) -> u64 {
    0x5C_0000 + i * 0x100
}
fn leader(i: u64) -> u64 {
    0x100_0000 + i * 0x100
}
fn middle(i: u64) -> u64 {
    0x200_0000 + i * 0x100
}
fn tail(i: u64) -> u64 {
    0x300_0000 + i * 0x100
}

/// The heap: sites 2 (the table), 3 (the leaders, the held blocks), 4
/// (the lost middles, a third of the entries), 5 (the payloads, the possibly lost blocks' own, a third
/// of the entries), 6 (the lost tails, the possibly lost blocks, a third
/// of the entries); sizes vary so that every walk's bytes say which
/// blocks it took.
fn spec() -> Spec {
    let mut s = Spec {
        site: vec![0x40_1000],
        more_sites: (2..=6).map(|id| (id, vec![0x40_1000 + 0x10 * u64::from(id)])).collect(),
        ..Default::default()
    };
    let at = |s: &mut Spec, addr: u64, size: u64, site: u32| {
        s.block(addr, size);
        s.block_sites.push((addr, site));
    };
    at(&mut s, TABLE_AT, 8 * TABLE, 2);
    for i in 0..TABLE {
        at(&mut s, entry(i), 256 + (i * 13) % 64, 4 + (i % 3) as u32);
        at(&mut s, payload(i), 16 + (i * 7) % 48, 5);
        s.ptr(TABLE_AT, 8 * i, entry(i));
        s.ptr(entry(i), 0, payload(i));
    }
    for i in 0..HELD {
        at(&mut s, held(i), 40 + i, 3);
    }
    for i in 0..POSSIBLY {
        at(&mut s, possibly(i), 32 + i % 16, 6);
        at(&mut s, possibly(i) + 0x80, 8 + i, 5);
        s.ptr(possibly(i), 0, possibly(i) + 0x80);
    }
    for i in 0..LOST {
        at(&mut s, leader(i), 24 + (i * 5) % 40, 3);
        at(&mut s, middle(i), 16 + (i * 11) % 48, 4);
        s.ptr(leader(i), 0, middle(i));
        if i % 3 == 0 {
            at(&mut s, tail(i), 8 + i % 32, 6);
            s.ptr(middle(i), 0, tail(i));
        }
        // Every fifth leader also holds the next one's middle: that
        // middle is then dominated by no leader (a child of the root).
        if i % 5 == 0 && i + 1 < LOST {
            s.ptr(leader(i), 8, middle(i + 1));
        }
    }
    s.stack = (0..HELD).map(held).chain((0..POSSIBLY).map(|i| possibly(i) + 8)).collect();
    s
}

fn scratch(label: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hd-kept-suspects-{}-{label}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The suspects for each walk's length.
fn suspects(a: &Analysis<'_>) -> String {
    WALKS.iter().map(|&w| format!("{:?}", a.suspects_walking(None, w))).collect::<Vec<_>>().join("\n")
}

/// The suspects from `dir`'s caches, and what the caches did.
fn ask(file: &DumpFile, heap: &Heap, dir: &Path) -> (String, Vec<String>) {
    let a = Analysis::new(file, heap).with_cache(CacheFile::for_file(dir, file, VERSION).unwrap());
    let out = suspects(&a);
    (out, a.cache_events())
}

/// Where the analysis' arrays start in its file (see `cache.rs`): the
/// leak classes (a byte a block), the leaders, the immediate dominators,
/// the retained sizes, the dominated counts.
struct Arrays {
    kind: usize,
    leader: usize,
    idom: usize,
    dominated: usize,
}

fn arrays(b: &[u8], n: usize) -> Arrays {
    let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap()) as usize;
    let align = |at: usize| at + (8 - at % 8) % 8;
    let kind = 8 + 40 + 8;
    let leader = align(kind + n + 8);
    let mut at = leader + 4 * n + 64;
    at += 8 + 17 * u64_at(at) + 1;
    let idom = align(at + 8);
    let retained = align(idom + 4 * n + 8);
    let dominated = align(retained + 8 * n + 8);
    Arrays { kind, leader, idom, dominated }
}

/// Where the children lists are in the tree's part: after the magic,
/// its counted name and the key, the starts, then the lists (each array
/// after its length, at a multiple of 8).
fn list_at(n: usize) -> (usize, usize) {
    let align = |at: usize| at + (8 - at % 8) % 8;
    let start = align(8 + 8 + 6 + 40 + 8);
    (start, align(start + 4 * (n + 2) + 8))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

#[test]
fn the_suspects_from_the_kept_tree_are_exact_and_its_lies_are_refused() {
    let dir = scratch("suspects");
    let path = dir.join("d.hdump");
    std::fs::write(&path, spec().write()).unwrap();
    let file = DumpFile::open(&path).unwrap();
    let heap = Heap::load(&file, &mut |_, _| {}).unwrap();
    let n = heap.len();
    let id = |addr: u64| heap.find(addr).unwrap().0 .0 as usize;
    let truth = suspects(&Analysis::new(&file, &heap));
    // The table retains, the leaders' group retains, and the definitely
    // and possibly lost groups are there; each with sites below it.
    for want in ["Retains", "Lost", "possibly lost", "× "] {
        assert!(truth.contains(want), "{want}: {truth}");
    }
    let caches = dir.join("caches");
    std::fs::create_dir_all(&caches).unwrap();
    // The first viewer computes and keeps; the second walks the kept tree.
    let (first, _) = ask(&file, &heap, &caches);
    assert_eq!(first, truth);
    let (second, events) = ask(&file, &heap, &caches);
    assert_eq!(second, truth, "from the kept tree");
    assert!(!events.iter().any(|e| e.contains(".hdcache") || e.starts_with("rebuilt") || e.starts_with("wrote")), "{events:?}");
    let cache = CacheFile::for_file(&caches, &file, VERSION).unwrap();
    let analysis = cache.path().to_path_buf();
    let tree = cache.part_path("hdtree");
    let (good, good_tree) = (std::fs::read(&analysis).unwrap(), std::fs::read(&tree).unwrap());
    assert!(body_len(&good) > 4 * (64 << 10), "the file spans many chunks");
    let at = arrays(&good, n);
    let (starts, list) = list_at(n);
    let mut lies: Vec<(&str, PathBuf, Vec<u8>, &str)> = Vec::new();
    // A bit of the dominated counts (every walk reads them): its chunk's
    // CRC differs.
    let mut b = good.clone();
    b[at.dominated + 4 * id(leader(LOST - 1))] ^= 0x04;
    lies.push(("a dominated count's bit", analysis.clone(), b, "checksum differs"));
    // Under a good seal: the last leader (the first the lost walk takes)
    // said indirectly lost: its leader says otherwise.
    let mut b = good.clone();
    b[at.kind + id(leader(LOST - 1))] = 3;
    reseal(&mut b);
    lies.push(("the last leader said indirectly lost, resealed", analysis.clone(), b, "bad leader"));
    // Under a good seal: a middle the last leader holds said to lead.
    let mut b = good.clone();
    let m = id(middle(LOST - 1));
    b[at.leader + 4 * m..at.leader + 4 * m + 4].copy_from_slice(&(!(m as u32)).to_le_bytes());
    reseal(&mut b);
    lies.push(("a middle said to lead itself, resealed", analysis.clone(), b, "bad leader"));
    // Under a good seal: a leader's structure one block larger.
    let mut b = good.clone();
    let l = at.dominated + 4 * id(leader(LOST - 3));
    let v = u32_at(&b, l) + 1;
    b[l..l + 4].copy_from_slice(&v.to_le_bytes());
    reseal(&mut b);
    lies.push(("a leader's dominated count one more, resealed", analysis.clone(), b, "bad dominated count"));
    // Under a good seal: a payload said dominated by the entry before its
    // own (it is still listed under its own).
    let mut b = good.clone();
    let p = at.idom + 4 * id(payload(TABLE - 1));
    b[p..p + 4].copy_from_slice(&(id(entry(TABLE - 2)) as u32).to_le_bytes());
    reseal(&mut b);
    lies.push(("a payload under another entry, resealed", analysis.clone(), b, "dominator children of another heap"));
    // Under a good seal: a possibly lost block said reachable (it has no
    // leader either way: only the count of the group's blocks tells).
    let mut b = good.clone();
    b[at.kind + id(possibly(POSSIBLY - 1))] = 0;
    reseal(&mut b);
    lies.push(("a possibly lost block said reachable, resealed", analysis.clone(), b, "leak classes of another report"));
    // Under a good seal: the table's two first entries swapped (the walk
    // stopped part way takes them in the list's order).
    let mut b = good_tree.clone();
    let t = id(TABLE_AT);
    let first = list + 4 * u32_at(&b, starts + 4 * t) as usize;
    let (x, y) = (b[first..first + 4].to_vec(), b[first + 4..first + 8].to_vec());
    b[first..first + 4].copy_from_slice(&y);
    b[first + 4..first + 8].copy_from_slice(&x);
    reseal(&mut b);
    lies.push(("the table's first two entries swapped, resealed", tree.clone(), b, "dominator children of another heap"));
    for (what, file_path, bytes, why) in lies {
        std::fs::write(&analysis, &good).unwrap();
        std::fs::write(&tree, &good_tree).unwrap();
        std::fs::write(&file_path, &bytes).unwrap();
        let (got, events) = ask(&file, &heap, &caches);
        assert!(got == truth, "{what}: the suspects differ from the computed ones\n{events:?}");
        assert!(events.iter().any(|e| e.starts_with("rebuilt") && e.contains(why)), "{what}: not refused for {why:?}: {events:?}");
    }
    // A bit flipped at many places of the classes, leaders and counts,
    // and of the children lists, each resealed: refused or harmless, never
    // a wrong suspect.
    let places: Vec<(PathBuf, usize)> = (0..24)
        .map(|i| (analysis.clone(), at.kind + (at.dominated + 4 * n - at.kind) * i / 24))
        .chain((0..8).map(|i| (tree.clone(), starts + (body_len(&good_tree) - starts) * i / 8)))
        .collect();
    for (file_path, place) in places {
        std::fs::write(&analysis, &good).unwrap();
        std::fs::write(&tree, &good_tree).unwrap();
        let mut b = std::fs::read(&file_path).unwrap();
        b[place] ^= 0x01;
        reseal(&mut b);
        std::fs::write(&file_path, &b).unwrap();
        let (got, events) = ask(&file, &heap, &caches);
        assert!(got == truth, "byte {place} of {} flipped and resealed: a wrong suspect\n{events:?}", file_path.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
