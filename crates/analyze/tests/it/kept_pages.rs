//! The viewer's pages from the cache (issue #43): the first page (the
//! leak report, the dominator tree's top) and a node's expansion read
//! from the cache a node at a time, each chunk checked when first read.
//! On a heap whose arrays span many of the seal's 64 KiB chunks: the
//! pages read from the cache are those computed with no cache, without
//! the analysis' file being read whole; a byte flipped deep in a file
//! (an array's middle, the seal's table) or an entry that lies under a
//! good seal is refused where it is read, and the pages are still exact.

use crate::build::Spec;
use crate::seal::{body_len, reseal};
use heapdump_analyze::cache::CacheFile;
use heapdump_analyze::{Analysis, DumpFile, Heap};
use std::path::{Path, PathBuf};

const VERSION: &str = "kept-pages";

/// Blocks this many: the analysis' arrays are 60 KB to 480 KB, many
/// chunks each.
const HALF: u64 = 30_000;

/// Two binary trees of `HALF` blocks each: one held by a stack word, one
/// lost (its head definitely lost, the rest indirectly); block `i` of a
/// tree points to `2i + 1` and `2i + 2`; sizes vary so that siblings'
/// retained sizes differ.
fn spec() -> Spec {
    let mut s = Spec::default();
    let addr = |tree: u64, i: u64| 0x10_0000 + tree * 0x100_0000 + i * 64;
    for tree in 0..2 {
        for i in 0..HALF {
            s.block(addr(tree, i), 16 + (i * 7 + tree) % 40);
            for (k, c) in [2 * i + 1, 2 * i + 2].into_iter().enumerate() {
                if c < HALF {
                    s.ptr(addr(tree, i), 8 * k as u64, addr(tree, c));
                }
            }
        }
    }
    s.stack = vec![addr(0, 0)];
    s
}

fn scratch(label: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hd-kept-pages-{}-{label}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// What the viewer shows: the leak report, the root's first page and a
/// later one, and three levels of expansions of the largest nodes (and a
/// second page of a node's children).
fn pages(a: &Analysis<'_>, kept: bool) -> String {
    let report = if kept { a.leak_report_kept() } else { a.leak_report() };
    let mut out = vec![format!("{report:?}")];
    let root = a.tree_children(None, 0, 50).unwrap();
    out.push(format!("{root:?}"));
    out.push(format!("{:?}", a.tree_children(None, 1, 1).unwrap()));
    let mut level: Vec<u64> = root.nodes.iter().filter(|n| n.children > 0).map(|n| n.address.0).take(3).collect();
    for _ in 0..3 {
        let mut next = Vec::new();
        for p in &level {
            let page = a.tree_children(Some(*p), 0, 50).unwrap();
            out.push(format!("{page:?}"));
            out.push(format!("{:?}", a.tree_children(Some(*p), 1, 5).unwrap()));
            next.extend(page.nodes.iter().filter(|n| n.children > 0).map(|n| n.address.0).take(1));
        }
        level = next;
    }
    out.join("\n")
}

/// The pages from `dir`'s caches, and what the caches did.
fn ask(file: &DumpFile, heap: &Heap, dir: &Path) -> (String, Vec<String>) {
    let cache = CacheFile::for_file(dir, file, VERSION).unwrap();
    let a = Analysis::new(file, heap).with_cache(cache);
    let out = pages(&a, true);
    (out, a.cache_events())
}

/// Where the retained sizes are in the analysis' file: after the magic,
/// the key, the block count, the classes, the leaders, the counts, the
/// heuristics and the flag, then the dominators (see `cache.rs`).
fn retained_at(b: &[u8], n: usize) -> usize {
    let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap()) as usize;
    let align = |at: usize| at + (8 - at % 8) % 8;
    let mut at = 8 + 40 + 8 + n;
    at = align(at + 8) + 4 * u64_at(at);
    at += 64;
    at += 8 + 17 * u64_at(at) + 1;
    at = align(at + 8) + 4 * u64_at(at);
    align(at + 8)
}

#[test]
fn the_viewers_pages_from_the_cache_are_exact_and_damage_is_refused_where_it_is_read() {
    let dir = scratch("pages");
    let path = dir.join("d.hdump");
    std::fs::write(&path, spec().write()).unwrap();
    let file = DumpFile::open(&path).unwrap();
    let heap = Heap::load(&file, &mut |_, _| {}).unwrap();
    let n = heap.len();
    assert_eq!(n as u64, 2 * HALF);
    let truth = pages(&Analysis::new(&file, &heap), false);
    let caches = dir.join("caches");
    std::fs::create_dir_all(&caches).unwrap();
    // The first viewer computes and keeps; the second reads the pages
    // from the kept tree and report, not the analysis' file whole.
    let (first, _) = ask(&file, &heap, &caches);
    assert_eq!(first, truth);
    let (second, events) = ask(&file, &heap, &caches);
    assert_eq!(second, truth, "from the kept tree");
    let cache = CacheFile::for_file(&caches, &file, VERSION).unwrap();
    let analysis = cache.path().to_path_buf();
    assert!(events.contains(&format!("hit {}", cache.part_path("hdreport").display())), "{events:?}");
    assert!(!events.iter().any(|e| e.contains(".hdcache") || e.starts_with("rebuilt") || e.starts_with("wrote")), "{events:?}");
    // A block's page: its dominance from the kept tree too.
    let block = |a: &Analysis<'_>| {
        let b = a.block_page(top_of(a), 4).unwrap();
        (b.retained, b.dominated, b.dominator, b.class)
    };
    let kept = Analysis::new(&file, &heap).with_cache(CacheFile::for_file(&caches, &file, VERSION).unwrap());
    assert_eq!(block(&kept), block(&Analysis::new(&file, &heap)));
    let events = kept.cache_events();
    assert!(!events.iter().any(|e| e.contains(".hdcache") || e.starts_with("rebuilt")), "the classes not read whole: {events:?}");
    let good = std::fs::read(&analysis).unwrap();
    let tree = cache.part_path("hdtree");
    let good_tree = std::fs::read(&tree).unwrap();
    assert!(body_len(&good) > 8 * (64 << 10), "the file spans many chunks");
    // The damages: each written over the good files, the pages read, then
    // the files put back.
    let at = retained_at(&good, n);
    let mut lies: Vec<(&str, PathBuf, Vec<u8>, &str)> = Vec::new();
    // A bit flipped in the middle of the retained sizes (every node
    // shown reads some of them): its chunk's CRC differs.
    let mut b = good.clone();
    b[at + 4 * n] ^= 0x10;
    lies.push(("a retained size's bit", analysis.clone(), b, "checksum differs"));
    // The seal's table itself.
    let mut b = good.clone();
    let t = body_len(&b) + 8;
    b[t] ^= 1;
    lies.push(("the seal's table", analysis.clone(), b, "checksum differs"));
    // The children lists' middle.
    let mut b = good_tree.clone();
    let mid = body_len(&b) / 2;
    b[mid] ^= 0x04;
    lies.push(("a child's bit", tree.clone(), b, "checksum differs"));
    // Under a good seal: the largest node's retained size one more.
    let computed = Analysis::new(&file, &heap);
    let top = computed.tree_children(None, 0, 1).unwrap().nodes[0].address.0;
    let largest = heap.find(top).unwrap().0 .0 as usize;
    let mut b = good.clone();
    let r = at + 8 * largest;
    let v = u64::from_le_bytes(b[r..r + 8].try_into().unwrap()) + 1;
    b[r..r + 8].copy_from_slice(&v.to_le_bytes());
    reseal(&mut b);
    lies.push(("the largest node's retained size, resealed", analysis.clone(), b, "bad retained size"));
    for (what, file_path, bytes, why) in lies {
        std::fs::write(&analysis, &good).unwrap();
        std::fs::write(&tree, &good_tree).unwrap();
        std::fs::write(&file_path, &bytes).unwrap();
        let (got, events) = ask(&file, &heap, &caches);
        assert!(got == truth, "{what}: the pages differ from the computed ones\n{events:?}");
        assert!(events.iter().any(|e| e.starts_with("rebuilt") && e.contains(why)), "{what}: not refused for {why:?}: {events:?}");
        // Rebuilt: the next viewer reads good files again.
        let (again, events) = ask(&file, &heap, &caches);
        assert_eq!(again, truth, "{what}: after the rebuild");
        assert!(!events.iter().any(|e| e.starts_with("rebuilt")), "{what}: {events:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The address of the root page's first (largest) node.
fn top_of(a: &Analysis<'_>) -> u64 {
    a.tree_children(None, 0, 1).unwrap().nodes[0].address.0
}

/// The viewer's default tab (`/api/suspects`) takes its lost groups from
/// the kept leak report, as the first page does: the same suspects as
/// computed with no cache, and a report whose bytes lie under a good seal
/// (a bit flipped at each of many places, the seal made right) is refused
/// or harmless, never a wrong suspect (fails before: the suspects
/// recomputed the report whole, never reading the kept one).
#[test]
fn the_suspects_from_the_kept_report_are_exact_and_its_lies_are_refused() {
    let dir = scratch("suspects");
    let path = dir.join("d.hdump");
    std::fs::write(&path, spec().write()).unwrap();
    let file = DumpFile::open(&path).unwrap();
    let heap = Heap::load(&file, &mut |_, _| {}).unwrap();
    let show = |a: &Analysis<'_>| format!("{:?}", a.suspects(None));
    let truth = show(&Analysis::new(&file, &heap));
    assert!(truth.contains("Lost"), "{truth}");
    let caches = dir.join("caches");
    std::fs::create_dir_all(&caches).unwrap();
    let cached = || Analysis::new(&file, &heap).with_cache(CacheFile::for_file(&caches, &file, VERSION).unwrap());
    // The first viewer keeps the report; the second reads it.
    assert_eq!(show(&cached()), truth);
    let a = cached();
    assert_eq!(show(&a), truth, "from the kept report");
    let report = CacheFile::for_file(&caches, &file, VERSION).unwrap().part_path("hdreport");
    assert!(a.cache_events().contains(&format!("hit {}", report.display())), "{:?}", a.cache_events());
    let good = std::fs::read(&report).unwrap();
    let n = body_len(&good);
    for at in (0..n).step_by((n / 40).max(1)) {
        let mut b = good.clone();
        b[at] ^= 0x01;
        reseal(&mut b);
        std::fs::write(&report, &b).unwrap();
        assert_eq!(show(&cached()), truth, "byte {at} of {n} flipped and resealed");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
