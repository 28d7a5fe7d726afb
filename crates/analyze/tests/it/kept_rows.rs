//! The viewer's grouped tree (`/api/rows`) from the cache (issue #43):
//! the root's groups kept apart (part `hdrows`: a group's figures, then
//! its members), read a page at a time with the kept tree. On a heap whose
//! root has a group of many lost blocks (its members spanning two of the
//! seal's chunks) and a list held by the stack: the rows read from the
//! cache, in every order, a group's pages and a list's, are those computed
//! with no cache; a bit flipped in the part (its groups, its members) or
//! figures that lie under a good seal are refused where they are read,
//! the rows still exact, the part kept again.

use crate::build::Spec;
use crate::seal::{body_len, reseal};
use heapdump_analyze::cache::CacheFile;
use heapdump_analyze::explore::{RowKind, RowOrder, RowsOf};
use heapdump_analyze::{Analysis, DumpFile, Heap};
use std::path::{Path, PathBuf};

const VERSION: &str = "kept-rows";

/// Lost blocks under the root: more than the 4096 members whose sums are
/// checked exactly, 80 KB of members (two chunks).
const LOST: u64 = 20_000;
/// A list's nodes, each holding a payload block.
const LIST: u64 = 12;
/// The lost blocks the root holds (the others are held by the block
/// before them).
const ROOTS: u64 = LOST - LOST / 10;

fn lost(i: u64) -> u64 {
    0x100_0000 + i * 64
}

/// A list of `LIST` nodes held by the stack (each node a payload), and
/// `LOST` lost blocks of varied sizes, every tenth holding the next.
fn spec() -> Spec {
    let mut s = Spec::default();
    for i in 0..LIST {
        let (node, payload) = (0x10_0000 + i * 64, 0x20_0000 + i * 64);
        s.block(node, 48);
        s.block(payload, 32);
        if i + 1 < LIST {
            s.ptr(node, 0, node + 64);
        }
        s.ptr(node, 8, payload);
    }
    for i in 0..LOST {
        s.block(lost(i), 16 + (i * 7) % 40);
        if i % 10 == 0 && i + 1 < LOST {
            s.ptr(lost(i), 0, lost(i + 1));
        }
    }
    s.stack = vec![0x10_0000];
    s
}

fn scratch(label: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hd-kept-rows-{}-{label}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// What the tree tab shows: the root's rows in each order, each group's
/// pages (first, middle, last; another order), the list's nodes and a
/// node's payload, a member's children, and a group that is not there.
fn rows(a: &Analysis<'_>) -> String {
    let mut out = Vec::new();
    for order in [RowOrder::Retained, RowOrder::Bytes, RowOrder::Count, RowOrder::Name] {
        out.push(format!("{:?}", a.tree_rows(RowsOf::Children(None), order, 0, 50).unwrap()));
    }
    out.push(format!("{:?}", a.tree_rows(RowsOf::Children(None), RowOrder::Retained, 1, 1).unwrap()));
    let root = a.tree_rows(RowsOf::Children(None), RowOrder::Retained, 0, 50).unwrap();
    assert!(root.rows.iter().any(|r| r.kind == RowKind::Group && r.count == ROOTS), "{root:?}");
    assert!(root.rows.iter().any(|r| r.kind == RowKind::Chain && r.count == LIST), "{root:?}");
    for r in &root.rows {
        match r.kind {
            RowKind::Group => {
                let g = r.group.unwrap();
                for (offset, n) in [(0, 50), (r.count as usize / 2, 20), (r.count as usize - 3, 10)] {
                    out.push(format!("{:?}", a.tree_rows(RowsOf::Group(None, g), RowOrder::Retained, offset, n).unwrap()));
                }
                out.push(format!("{:?}", a.tree_rows(RowsOf::Group(None, g), RowOrder::Bytes, 7, 5).unwrap()));
            }
            RowKind::Chain => {
                out.push(format!("{:?}", a.tree_rows(RowsOf::Chain(r.address.0), RowOrder::Retained, 0, 50).unwrap()));
                out.push(format!("{:?}", a.tree_rows(RowsOf::Chain(r.address.0), RowOrder::Retained, 3, 2).unwrap()));
                out.push(format!("{:?}", a.tree_rows(RowsOf::Payload(r.address.0), RowOrder::Retained, 0, 50).unwrap()));
            }
            RowKind::Node => {
                out.push(format!("{:?}", a.tree_rows(RowsOf::Children(Some(r.address.0)), RowOrder::Retained, 0, 50).unwrap()))
            }
        }
    }
    out.push(format!("{:?}", a.tree_rows(RowsOf::Children(Some(lost(10))), RowOrder::Retained, 0, 50).unwrap()));
    out.push(format!("{:?}", a.tree_rows(RowsOf::Group(None, 99), RowOrder::Retained, 0, 50).map_err(|e| e.to_string())));
    out.join("\n")
}

/// The rows from `dir`'s caches, and what the caches did.
fn ask(file: &DumpFile, heap: &Heap, dir: &Path) -> (String, Vec<String>) {
    let a = Analysis::new(file, heap).with_cache(CacheFile::for_file(dir, file, VERSION).unwrap());
    let out = rows(&a);
    (out, a.cache_events())
}

/// Where the groups start in the part (after the magic, its counted
/// name, the key and the count), and how many bytes each takes.
const GROUPS_AT: usize = 8 + 8 + 6 + 40 + 8;
const GROUP: usize = 41;

#[test]
fn the_grouped_tree_from_the_cache_is_exact_and_damage_is_refused_where_it_is_read() {
    let dir = scratch("rows");
    let path = dir.join("d.hdump");
    std::fs::write(&path, spec().write()).unwrap();
    let file = DumpFile::open(&path).unwrap();
    let heap = Heap::load(&file, &mut |_, _| {}).unwrap();
    let truth = rows(&Analysis::new(&file, &heap));
    let caches = dir.join("caches");
    std::fs::create_dir_all(&caches).unwrap();
    // The first viewer computes and keeps (the tree, the root's groups);
    // the second reads the rows from the kept tree and groups.
    let (first, _) = ask(&file, &heap, &caches);
    assert_eq!(first, truth);
    let cache = CacheFile::for_file(&caches, &file, VERSION).unwrap();
    let part = cache.part_path("hdrows");
    assert!(part.exists(), "the root's groups kept");
    let (second, events) = ask(&file, &heap, &caches);
    assert_eq!(second, truth, "from the kept tree and groups");
    assert!(!events.iter().any(|e| e.contains(".hdcache") || e.starts_with("rebuilt") || e.starts_with("wrote")), "{events:?}");
    // Every file the caches wrote counts against the directory's bound
    // (the groups' part once did not: 311 MB at 100 M blocks, never
    // evicted).
    for e in std::fs::read_dir(&caches).unwrap() {
        let p = e.unwrap().path();
        assert!(heapdump_analyze::cache::bounded(&p), "{} is not evicted with the caches", p.display());
    }
    let good = std::fs::read(&part).unwrap();
    let ng = u64::from_le_bytes(good[GROUPS_AT - 8..GROUPS_AT].try_into().unwrap()) as usize;
    assert_eq!(ng, 2, "a group of lost blocks and the list");
    let members_at = {
        let at = GROUPS_AT + GROUP * ng + 8;
        at + (8 - at % 8) % 8
    };
    let mut lies: Vec<(&str, Vec<u8>, &str)> = Vec::new();
    // A bit flipped among the members the middle page reads (the second
    // chunk): its CRC differs.
    let mut b = good.clone();
    b[members_at + 4 * (ROOTS as usize / 2 + 5)] ^= 0x10;
    lies.push(("a member's bit", b, "checksum differs"));
    // A bit of a group's figures.
    let mut b = good.clone();
    b[GROUPS_AT + 9] ^= 0x01;
    lies.push(("a group's count's bit", b, "checksum differs"));
    // The seal's table.
    let mut b = good.clone();
    let t = body_len(&b) + 4;
    b[t] ^= 1;
    lies.push(("the seal's table", b, "checksum differs"));
    // Under a good seal: a byte of retained size moved from one group to
    // the other (the totals still add up).
    let mut b = good.clone();
    for (g, d) in [(0usize, -1i64), (1, 1)] {
        let r = GROUPS_AT + GROUP * g + 9 + 8;
        let v = (u64::from_le_bytes(b[r..r + 8].try_into().unwrap()) as i64 + d) as u64;
        b[r..r + 8].copy_from_slice(&v.to_le_bytes());
    }
    reseal(&mut b);
    lies.push(("a byte moved between groups, resealed", b, "the root's groups of another tree"));
    // Under a good seal: two members of the large group swapped (out of
    // the children's order).
    let mut b = good.clone();
    let m = members_at + 4 * 20;
    let (x, y) = (b[m..m + 4].to_vec(), b[m + 4..m + 8].to_vec());
    b[m..m + 4].copy_from_slice(&y);
    b[m + 4..m + 8].copy_from_slice(&x);
    reseal(&mut b);
    lies.push(("two members swapped, resealed", b, "the root's groups of another tree"));
    // Under a good seal: the large group's member from the list's group.
    let mut b = good.clone();
    let last = members_at + 4 * ROOTS as usize;
    let list_head = b[last..last + 4].to_vec();
    b[members_at + 4 * 30..members_at + 4 * 31].copy_from_slice(&list_head);
    reseal(&mut b);
    lies.push(("a member of another group, resealed", b, "the root's groups of another tree"));
    for (what, bytes, why) in lies {
        std::fs::write(&part, &bytes).unwrap();
        let (got, events) = ask(&file, &heap, &caches);
        assert!(got == truth, "{what}: the rows differ from the computed ones\n{events:?}");
        assert!(events.iter().any(|e| e.starts_with("rebuilt") && e.contains(why)), "{what}: not refused for {why:?}: {events:?}");
        // Kept again: the next viewer reads a good part.
        assert!(std::fs::read(&part).unwrap() == good, "{what}: the part kept again");
        let (again, events) = ask(&file, &heap, &caches);
        assert_eq!(again, truth, "{what}: after the rebuild");
        assert!(!events.iter().any(|e| e.starts_with("rebuilt")), "{what}: {events:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
