//! Caches that lie (issue #36): a forger that knows the five cache files'
//! layouts (`cache.rs`, `graph_cache.rs` and the parts `analysis.rs`
//! keeps) rewrites one field, or puts another dump's file under this
//! dump's key, and makes the CRC right again. Each time the analysis must
//! give exactly the answers it gives with no cache, without a panic, and
//! a file that lies is refused, rebuilt, and read back good.
//!
//! Fields are lied about where a lie can be told from the truth: counts,
//! lengths, totals and the analysis' own indices (leaders, dominators,
//! children, paths) by any other value; the graph's indices (edge
//! targets, roots, edge starts, block addresses) by values out of range,
//! out of order or overlapping. An edge retargeted to another block that
//! exists, or a block's site, is another heap, not a lie a cache can be
//! caught in: the graph is the dump's only as far as its trailer and
//! header say.

use crate::build::Spec;
use crate::seal::{body_len, reseal};
use heapdump_analyze::cache::CacheFile;
use heapdump_analyze::group::GroupBy;
use heapdump_analyze::{Analysis, BlockId, DumpFile, Heap};
use proptest::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const VERSION: &str = "cache-lies";
const FILES: [&str; 5] = ["hdcache", "hdgraph", "hdtree", "hdreach", "hdnames"];
const INTERIOR: u64 = 1 << 31;

/// Reachable blocks (two roots on one, two pointers from one block to
/// another, an interior pointer between blocks, two chains of one length
/// to one block), a possibly lost one, a lost cycle holding another block
/// and a lost block alone. `extra` changes one size (another dump of the
/// same shape).
fn spec(extra: u64) -> Spec {
    let mut s = Spec::default();
    for (a, n) in [(0x1000, 64), (0x2000, 32), (0x3000, 48), (0x4000, 16), (0x5000, 64), (0x6000, 8), (0x7000, 40), (0x8000, 24)] {
        s.block(a, n);
    }
    s.block(0x9000, 100 + extra).block(0xa000, 8).block(0xb000, 200);
    s.ptr(0x1000, 0, 0x2000).ptr(0x1000, 8, 0x3000).ptr(0x1000, 16, 0x2000);
    s.ptr(0x2000, 0, 0x4000).ptr(0x2000, 8, 0x3010).ptr(0x3000, 0, 0x4000);
    s.ptr(0x5000, 0, 0x6000);
    s.ptr(0x7000, 0, 0x8000).ptr(0x8000, 0, 0x7000).ptr(0x8000, 8, 0x9000);
    s.ptr(0xb000, 0, 0xb000).ptr(0xb000, 8, 0x1000);
    s.stack = vec![0x1000, 0x5008];
    s.statics = vec![0x1000, 0xb000];
    s
}

struct Dump {
    file: DumpFile,
    heap: Heap,
}

fn dump(label: &str, spec: &Spec) -> Dump {
    let path = scratch(label).join("d.hdump");
    std::fs::write(&path, spec.write()).unwrap();
    let file = DumpFile::open(&path).unwrap();
    let heap = Heap::load(&file, &mut |_, _| {}).unwrap();
    Dump { file, heap }
}

fn scratch(label: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hd-cache-lies-{}-{label}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Every answer the caches feed: leaks, retained (by block and by site),
/// top, the dominator tree's children, every block's path and holders.
fn answers(a: &Analysis<'_>) -> String {
    let h = a.heap();
    let mut out = vec![
        format!("{:?}", a.leak_report()),
        format!("{:?}", a.retainers(100)),
        format!("{:?}", a.retained_by(GroupBy::Site)),
        format!("{:?}", a.top(GroupBy::Site)),
        format!("{:?}", a.dominated_by(None)),
    ];
    for b in 0..h.len() {
        let id = BlockId(b as u32);
        let addr = h.block(id).addr;
        out.push(format!("{:?} {:?}", a.dominated_by(Some(id)), a.type_of_block(id)));
        out.push(format!("{:?}", a.path(addr).map(|p| (p.start, p.steps, p.class)).ok()));
        out.push(format!("{:?}", a.holders(addr, 100).map(|(_, hs, n)| (hs, n)).ok()));
    }
    out.join("\n")
}

/// The answers with no cache.
fn truth(d: &Dump) -> String {
    answers(&Analysis::new(&d.file, &d.heap))
}

/// What a command does: the kept graph when it is good (else the dump
/// loaded, and its graph kept), then the analysis with its cache. The
/// answers and what the cache did.
fn ask(d: &Dump, dir: &Path) -> (String, Vec<String>) {
    let cache = CacheFile::for_file(dir, &d.file, VERSION).unwrap();
    let mut events = Vec::new();
    let heap = match cache.read_graph() {
        Ok(Some(h)) => {
            events.push(format!("hit {}", cache.graph_path().display()));
            h
        }
        other => {
            events.push(match other {
                Err(why) => format!("rebuilt {} ({why})", cache.graph_path().display()),
                _ => format!("miss {}", cache.graph_path().display()),
            });
            let h = Heap::load(&d.file, &mut |_, _| {}).unwrap();
            cache.write_graph(&h).wait().unwrap();
            events.push(format!("wrote {}", cache.graph_path().display()));
            h
        }
    };
    let a = Analysis::new(&d.file, &heap).with_cache(cache);
    let out = answers(&a);
    events.extend(a.cache_events());
    (out, events)
}

/// The good caches of `d`, written by a first analysis, in a directory of
/// their own; each file's path by its extension.
fn good_caches(d: &Dump, label: &str) -> (PathBuf, Vec<(&'static str, PathBuf)>) {
    let dir = scratch(label);
    let (first, _) = ask(d, &dir);
    assert_eq!(first, truth(d), "the first analysis");
    let (again, events) = ask(d, &dir);
    assert_eq!(again, first);
    assert!(events.iter().all(|e| e.starts_with("hit")), "every file kept and read back: {events:?}");
    let cache = CacheFile::for_file(&dir, &d.file, VERSION).unwrap();
    (dir, FILES.iter().map(|&x| (x, cache.part_path(x))).collect())
}

/// One field of a cache file: where, how wide, what, and the values
/// that are lies.
#[derive(Clone, Debug)]
struct Field {
    at: usize,
    width: usize,
    what: String,
    lies: Vec<u64>,
}

/// Walks a file's layout, noting its fields.
struct Forger<'a> {
    b: &'a [u8],
    at: usize,
    fields: Vec<Field>,
}

impl<'a> Forger<'a> {
    fn new(b: &'a [u8]) -> Self {
        Forger { b: &b[..body_len(b)], at: 0, fields: Vec::new() }
    }
    fn read(&self, at: usize, width: usize) -> u64 {
        let mut w = [0u8; 8];
        w[..width].copy_from_slice(&self.b[at..at + width]);
        u64::from_le_bytes(w)
    }
    /// A field read and skipped, lied about by `lies` (`None`: any other
    /// value).
    fn field(&mut self, width: usize, what: &str, lies: Option<Vec<u64>>) -> u64 {
        let v = self.read(self.at, width);
        let max = if width == 8 { u64::MAX } else { (1u64 << (8 * width)) - 1 };
        let lies = lies.unwrap_or_else(|| vec![0, 1, v.wrapping_add(1) & max, v.wrapping_sub(1) & max, max, max >> 1, v ^ 0x80]);
        let lies: Vec<u64> = lies.into_iter().map(|x| x & max).filter(|&x| x != v).collect();
        if !lies.is_empty() {
            self.fields.push(Field { at: self.at, width, what: what.to_string(), lies });
        }
        self.at += width;
        v
    }
    fn skip(&mut self, n: usize) {
        self.at += n;
    }
    /// A count, any change a lie.
    fn count(&mut self, what: &str) -> usize {
        self.field(8, &format!("{what} count"), None) as usize
    }
    fn counted(&mut self, what: &str) {
        let n = self.count(what);
        self.skip(n);
    }
    /// A slab's count and padding; its items' offset and count.
    fn slab(&mut self, what: &str, size: usize) -> (usize, usize) {
        let n = self.count(what);
        self.at += (8 - self.at % 8) % 8;
        let start = self.at;
        self.at += n * size;
        (start, n)
    }
    /// A slab of `u32`s, each lied about by `lies(i, value)`.
    fn slab32(&mut self, what: &str, lies: impl Fn(usize, u64) -> Option<Vec<u64>>) -> Vec<u64> {
        let (start, n) = self.slab(what, 4);
        let end = self.at;
        self.at = start;
        let mut values = Vec::new();
        for i in 0..n {
            let v = self.read(self.at, 4);
            values.push(v);
            self.field(4, &format!("{what}[{i}]"), lies(i, v));
        }
        assert_eq!(self.at, end);
        values
    }
    fn key(&mut self) {
        for i in 0..5 {
            self.field(8, &format!("key[{i}]"), None);
        }
    }
    fn done(self) -> Vec<Field> {
        assert_eq!(self.at, self.b.len(), "the forger read the whole file");
        self.fields
    }
}

/// The fields of one cache file and the lies about them.
fn fields(ext: &str, b: &[u8]) -> Vec<Field> {
    let mut f = Forger::new(b);
    f.skip(8);
    if ext != "hdcache" && ext != "hdgraph" {
        f.counted("part name");
    }
    f.key();
    match ext {
        "hdcache" => {
            let n = f.field(8, "block count", None) as usize;
            for i in 0..n {
                f.field(1, &format!("class[{i}]"), Some(vec![0, 1, 2, 3, 4, 255]));
            }
            f.slab32("leader", |_, _| None);
            for i in 0..8 {
                f.field(8, &format!("total[{i}]"), None);
            }
            let nh = f.count("heuristics");
            for i in 0..nh {
                f.field(1, &format!("heuristic[{i}]"), None);
                f.field(8, &format!("heuristic[{i}] bytes"), None);
                f.field(8, &format!("heuristic[{i}] blocks"), None);
            }
            if f.field(1, "dominators flag", None) == 1 {
                f.slab32("idom", |_, _| None);
                let (start, n) = f.slab("retained", 8);
                let end = f.at;
                f.at = start;
                for i in 0..n {
                    f.field(8, &format!("retained[{i}]"), None);
                }
                f.at = end;
                f.slab32("dominated", |_, _| None);
            }
        }
        "hdtree" => {
            f.slab32("children start", |_, _| None);
            f.slab32("children", |_, _| None);
        }
        "hdreach" => {
            // Which rule chose the paths (start pointers first): another
            // word is a tree another build kept.
            f.field(8, "paths' rule", None);
            f.slab32("pred", |_, _| None);
            f.slab32("via", |_, _| None);
        }
        "hdnames" => {
            let n = f.count("names");
            for i in 0..n {
                f.field(4, &format!("named block {i}"), Some(vec![u64::from(u32::MAX), 1 << 20]));
                f.counted("name");
            }
        }
        "hdgraph" => graph_fields(&mut f),
        _ => unreachable!(),
    }
    f.done()
}

fn graph_fields(f: &mut Forger<'_>) {
    f.field(4, "version", None);
    f.field(1, "pointer size", None);
    f.field(1, "mode", None);
    f.field(1, "reason", None);
    f.field(4, "page size", None);
    f.field(4, "pid", None);
    f.field(8, "time", None);
    f.counted("exe");
    let n = f.count("cmdline");
    for _ in 0..n {
        f.counted("argument");
    }
    f.field(1, "backtrace", Some(vec![200]));
    f.skip(8);
    let n = f.count("modules");
    for _ in 0..n {
        f.counted("module path");
        f.counted("build id");
        f.skip(8);
        let s = f.count("segments");
        f.skip(28 * s);
    }
    let n = f.count("threads");
    for _ in 0..n {
        f.skip(4);
        f.counted("thread name");
        f.skip(4 + 16);
    }
    let n = f.count("sites");
    for _ in 0..n {
        f.skip(4);
        let k = f.count("frames");
        f.skip(8 * k);
    }
    // Blocks: an address out of order or overlapping its neighbour; a
    // size that breaks the trailer's total.
    let (start, blocks) = f.slab("blocks", 16);
    // Their sizes, as packed (the test's blocks are all small).
    let sizes: Vec<u64> = (0..blocks).map(|i| f.read(start + 16 * i + 8, 8) & 0xffff_ffff).collect();
    let size = |b: u64| sizes.get(b as usize).copied().unwrap_or(1);
    let end = f.at;
    f.at = start;
    let addr = |i: usize| f.read(start + 16 * i, 8);
    let addrs: Vec<u64> = (0..blocks).map(addr).collect();
    for i in 0..blocks {
        // Past the end of the address space, before or into the one before,
        // at or into the one after.
        let mut lies = vec![u64::MAX];
        if i > 0 {
            lies.extend([0, addrs[i - 1], addrs[i - 1] + 1]);
        }
        if i + 1 < blocks {
            lies.extend([addrs[i + 1], addrs[i + 1] - 1]);
        }
        f.field(8, &format!("block[{i}] address"), Some(lies));
        let rest = f.read(f.at, 8);
        f.field(8, &format!("block[{i}] size"), Some(vec![rest + 1, rest - 1, rest | 0xffff_ffff]));
    }
    f.at = end;
    let n = f.count("wide blocks");
    for i in 0..n {
        f.field(4, &format!("wide[{i}]"), Some(vec![blocks as u64, u64::from(u32::MAX)]));
        f.skip(12);
    }
    // Edge starts: out of order, past the end.
    let (s0, nstarts) = f.slab("edge starts", 4);
    let starts: Vec<u64> = (0..nstarts).map(|i| f.read(s0 + 4 * i, 4)).collect();
    let edges = *starts.last().unwrap();
    f.at = s0;
    for i in 0..nstarts {
        let mut lies = vec![edges + 1, u64::from(u32::MAX)];
        if i > 0 {
            lies.push(starts[i - 1].wrapping_sub(1));
        }
        if i + 1 < nstarts {
            lies.push(starts[i + 1] + 1);
        }
        f.field(4, &format!("edge start[{i}]"), Some(lies));
    }
    let targets = f.slab32("edge targets", |_, v| {
        Some(vec![blocks as u64, (blocks as u64) | INTERIOR, u64::from(u32::MAX), (v & INTERIOR) | (INTERIOR - 1)])
    });
    let (d0, nd) = f.slab("edge offsets", 1);
    let end = f.at;
    f.at = d0;
    for i in 0..nd {
        let v = f.read(f.at, 1);
        f.field(1, &format!("edge offset[{i}]"), Some(if v == 255 { vec![0, 1] } else { vec![255] }));
    }
    f.at = end;
    let (a0, na) = f.slab("edge offsets kept aside", 16);
    let end = f.at;
    f.at = a0;
    for i in 0..na {
        f.field(4, &format!("anchor[{i}] edge"), None);
        f.skip(12);
    }
    f.at = end;
    let n = f.count("interior edges");
    let plain = targets.iter().position(|t| t & INTERIOR == 0).map_or(edges, |k| k as u64);
    for i in 0..n {
        let k = f.field(4, &format!("interior edge[{i}]"), Some(vec![edges, u64::from(u32::MAX), plain]));
        let into_size = targets.get(k as usize).map_or(1, |&t| size(t & !INTERIOR));
        f.field(8, &format!("interior edge[{i}] into"), Some(vec![0, into_size, u64::MAX]));
    }
    if f.field(1, "block order flag", None) == 1 {
        f.slab32("block order", |_, _| Some(vec![blocks as u64, u64::from(u32::MAX), 0]));
    }
    let n = f.count("roots");
    let regions_at = f.at + 25 * n;
    let regions = f.read(regions_at, 8);
    for i in 0..n {
        f.field(4, &format!("root[{i}] region"), Some(vec![regions, u64::from(u32::MAX)]));
        f.skip(8);
        let t = f.field(4, &format!("root[{i}] target"), Some(vec![blocks as u64, u64::from(u32::MAX)]));
        let interior = f.read(f.at, 1);
        f.field(1, &format!("root[{i}] interior"), Some(vec![interior ^ 1, 2]));
        f.field(8, &format!("root[{i}] into"), Some(vec![size(t), u64::MAX]));
    }
    let n = f.count("root regions");
    for _ in 0..n {
        f.field(1, "root kind", Some(vec![3, 255]));
        f.skip(8 + 4);
        f.counted("owner");
        f.counted("region name");
        f.skip(1);
    }
    if f.field(1, "trailer flag", None) == 1 {
        for w in ["records", "allocations", "bytes", "sites", "pointers", "pause"] {
            f.field(8, &format!("trailer {w}"), None);
        }
        for w in ["threads", "statics", "modules", "checksum"] {
            f.field(4, &format!("trailer {w}"), None);
        }
    }
    if f.field(1, "signal flag", None) == 1 {
        f.skip(4 * 3 + 8 + 4);
    }
    if f.field(1, "truncated flag", None) == 1 {
        f.counted("truncated");
    }
    f.skip(1);
    if f.field(1, "first words flag", None) == 1 {
        f.slab("first words", 16);
    }
}

/// `b` with `field` set to `value` and the CRC made right.
fn forged(b: &[u8], field: &Field, value: u64) -> Vec<u8> {
    let mut out = b.to_vec();
    out[field.at..field.at + field.width].copy_from_slice(&value.to_le_bytes()[..field.width]);
    reseal(&mut out);
    out
}

/// The good caches of the test dump, made once.
struct Fixture {
    dump: Dump,
    truth: String,
    good: Vec<(&'static str, Vec<u8>)>,
    fields: Vec<(&'static str, Field)>,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dump = dump("fixture", &spec(0));
        let truth = truth(&dump);
        let (_, files) = good_caches(&dump, "fixture-caches");
        let good: Vec<(&'static str, Vec<u8>)> = files.iter().map(|(x, p)| (*x, std::fs::read(p).unwrap())).collect();
        let fields = good.iter().flat_map(|(x, b)| fields(x, b).into_iter().map(move |f| (*x, f))).collect();
        Fixture { dump, truth, good, fields }
    })
}

/// Puts the good caches in a fresh directory, `ext`'s replaced by
/// `bytes`; asks every question; checks the answers are the truth, the
/// lie was refused and rebuilt (when the file differs from the good
/// one), and that every file now reads back good.
fn refused(label: &str, ext: &str, bytes: &[u8], what: &str) {
    let f = fixture();
    let dir = scratch(label);
    let cache = CacheFile::for_file(&dir, &f.dump.file, VERSION).unwrap();
    for (x, b) in &f.good {
        std::fs::write(cache.part_path(x), if *x == ext { bytes } else { b }).unwrap();
    }
    let (got, events) = ask(&f.dump, &dir);
    assert!(got == f.truth, "{what}: the answers differ from those without a cache\n{events:?}");
    let path = cache.part_path(ext).display().to_string();
    let lied = f.good.iter().any(|(x, b)| *x == ext && b != bytes);
    if lied {
        assert!(
            events.iter().any(|e| e.starts_with(&format!("rebuilt {path} ("))) && events.contains(&format!("wrote {path}")),
            "{what}: the lie was not refused and rebuilt: {events:?}"
        );
    }
    let (again, events) = ask(&f.dump, &dir);
    assert!(again == f.truth, "{what}: answers after the rebuild");
    assert!(events.iter().all(|e| e.starts_with("hit")), "{what}: the rebuilt caches read back good: {events:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each file's every field, set to each of its lies: refused, rebuilt,
/// the same answers.
#[test]
fn every_field_of_every_cache_file_lied_about_is_refused() {
    let f = fixture();
    for ext in FILES {
        assert!(f.good.iter().any(|(x, _)| *x == ext), "{ext} kept");
    }
    let mut told = 0;
    for (i, (ext, field)) in f.fields.iter().enumerate() {
        let good = &f.good.iter().find(|(x, _)| x == ext).unwrap().1;
        for &v in &field.lies {
            refused(&format!("each-{i}"), ext, &forged(good, field, v), &format!("{ext} {} = {v:#x}", field.what));
            told += 1;
        }
    }
    assert!(told > 1000, "{told} lies");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]
    /// Any field, any of its lies, sometimes two fields at once.
    #[test]
    fn lying_fields_are_refused(picks in proptest::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>()), 1..3)) {
        let f = fixture();
        let (ext, _) = f.fields[picks[0].0.index(f.fields.len())];
        let mut bytes = f.good.iter().find(|(x, _)| *x == ext).unwrap().1.clone();
        let mut what = Vec::new();
        let (mut sizes_only, mut size_delta) = (true, 0u64);
        for (fi, vi) in &picks {
            // Fields of the first one's file.
            let same: Vec<&Field> = f.fields.iter().filter(|(x, _)| *x == ext).map(|(_, fl)| fl).collect();
            let field = same[fi.index(same.len())];
            let v = field.lies[vi.index(field.lies.len())];
            let was = bytes[field.at..field.at + field.width].iter().rev().fold(0u64, |a, &b| a << 8 | u64::from(b));
            sizes_only &= field.what.starts_with("block[") && field.what.ends_with("] size");
            size_delta = size_delta.wrapping_add(v.wrapping_sub(was));
            bytes = forged(&bytes, field, v);
            what.push(format!("{} = {v:#x}", field.what));
        }
        // Two block sizes moved by as much in opposite ways keep every
        // check the graph's file can be held to without reading the dump
        // (addresses in order, no overlap, the total the dump's trailer
        // says): a known limit, in README's cache section, not a refusal
        // this test can ask for.
        prop_assume!(!(sizes_only && picks.len() > 1 && size_delta == 0));
        refused(&format!("sweep-{}", std::process::id()), ext, &bytes, &format!("{ext} {}", what.join(", ")));
    }
}

/// Another dump's files (of as many blocks, one size differing; and of
/// another shape), their key rewritten to this dump's and their CRC made
/// right: refused, or byte for byte this dump's own.
#[test]
fn another_dumps_cache_under_this_dumps_key_is_refused() {
    let f = fixture();
    for (label, other) in [
        ("same-shape", spec(8)),
        ("other-shape", {
            let mut s = spec(0);
            s.block(0xc000, 24).ptr(0x1000, 24, 0xc000);
            s
        }),
    ] {
        let d = dump(&format!("other-{label}"), &other);
        let (_, files) = good_caches(&d, &format!("other-{label}-caches"));
        for (ext, p) in files {
            let mut b = std::fs::read(p).unwrap();
            let good = &f.good.iter().find(|(x, _)| *x == ext).unwrap().1;
            // The key follows the magic (and a part's counted name).
            let at = if ext == "hdcache" || ext == "hdgraph" { 8 } else { 8 + 8 + ext.len() };
            b[at..at + 40].copy_from_slice(&good[at..at + 40]);
            reseal(&mut b);
            refused(&format!("other-{label}-{ext}"), ext, &b, &format!("{label} dump's {ext}"));
        }
    }
}

/// The lies the issue names that take two fields: a graph whose blocks
/// overlap, whose edge starts go backwards (every index in range), whose
/// block count and total are not the dump's (its trailer rewritten to
/// match them).
#[test]
fn lies_told_consistently_are_refused() {
    let f = fixture();
    let good = |ext: &str| f.good.iter().find(|(x, _)| *x == ext).unwrap().1.clone();
    let find = |ext: &str, what: &str| f.fields.iter().find(|(x, fl)| *x == ext && fl.what == what).unwrap().1.clone();
    // Overlapping blocks: the second starts inside the first.
    let a0 = find("hdgraph", "block[0] address");
    let g = good("hdgraph");
    let first = u64::from_le_bytes(g[a0.at..a0.at + 8].try_into().unwrap());
    refused("overlap", "hdgraph", &forged(&g, &find("hdgraph", "block[1] address"), first + 8), "overlapping blocks");
    // The edge starts swapped: every index in range, out of order.
    let (s1, s2) = (find("hdgraph", "edge start[1]"), find("hdgraph", "edge start[2]"));
    let v1 = u64::from(u32::from_le_bytes(g[s1.at..s1.at + 4].try_into().unwrap()));
    let v2 = u64::from(u32::from_le_bytes(g[s2.at..s2.at + 4].try_into().unwrap()));
    assert_ne!(v1, v2);
    refused("starts", "hdgraph", &forged(&forged(&g, &s1, v2), &s2, v1), "edge starts out of order");
    // The trailer's allocations and bytes lowered with the last block's
    // size: a block count and total not the dump's, yet agreeing.
    let (allocs, bytes) = (find("hdgraph", "trailer allocations"), find("hdgraph", "trailer bytes"));
    let n = u64::from_le_bytes(g[allocs.at..allocs.at + 8].try_into().unwrap());
    let total = u64::from_le_bytes(g[bytes.at..bytes.at + 8].try_into().unwrap());
    refused("trailer", "hdgraph", &forged(&forged(&g, &allocs, n + 1), &bytes, total + 1), "a trailer not the dump's");
}
