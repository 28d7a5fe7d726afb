use crate::build::Spec;
use heapdump_analyze::leaks::{self, LeakKind, NoContents};
use heapdump_analyze::{dominators, paths, BlockId, Heap};
use heapdump_format::raw;

fn id(h: &Heap, addr: u64) -> BlockId {
    h.find_start(addr).unwrap()
}

fn kind(h: &Heap, l: &leaks::Leaks, addr: u64) -> LeakKind {
    l.kind[id(h, addr).index()]
}

/// A heap built directly: `blocks`, `edges` (source, target, offset,
/// offset into the target) and roots in one stack region.
fn heap_of(blocks: Vec<heapdump_analyze::Block>, edges: &[(u32, u32, u64, u64)], roots: Vec<heapdump_analyze::Root>) -> Heap {
    let region = heapdump_analyze::RootRegion {
        kind: heapdump_analyze::RootKind::Stack,
        address: 0,
        tid: 1,
        owner: "main".into(),
        name: "".into(),
        libc: false,
    };
    Heap::from_parts(
        heapdump_format::Header::new(heapdump_format::Mode::Compact, heapdump_format::Reason::Api, 4096, 1, 0),
        blocks,
        edges,
        roots,
        vec![region],
    )
}

const A: u64 = 0x1000;
const B: u64 = 0x2000;
const C: u64 = 0x3000;
const D: u64 = 0x4000;
const E: u64 = 0x5000;

#[test]
fn chain_from_a_stack_root() {
    let mut s = Spec::default();
    s.block(A, 16).block(B, 32).block(C, 64).ptr(A, 8, B).ptr(B, 0, C);
    s.stack.push(A);
    let (_f, h) = s.load();
    let l = leaks::analyze(&h, &NoContents);
    assert_eq!(l.still_reachable.blocks, 3);
    assert_eq!(l.still_reachable.bytes, 112);
    assert_eq!(l.definitely_lost.blocks + l.possibly_lost.blocks + l.indirectly_lost.blocks, 0);
    let d = dominators::compute(&h, &[]);
    assert_eq!(d.idom(id(&h, A)), None);
    assert_eq!(d.idom(id(&h, B)), Some(id(&h, A)));
    assert_eq!(d.idom(id(&h, C)), Some(id(&h, B)));
    assert_eq!(d.retained[id(&h, A).index()], 112);
    assert_eq!(d.retained[id(&h, C).index()], 64);
    let p = paths::shortest(&h, id(&h, C), None).unwrap();
    assert_eq!(p.steps.len(), 3);
    assert_eq!(p.steps[1].offset, 8);
    assert!(matches!(p.start, paths::PathStart::Root(r) if h.root_source(&r).to_string().starts_with("stack of thread 7 (main)")));
}

#[test]
fn a_lost_cycle_has_one_definitely_lost_block() {
    let mut s = Spec::default();
    s.block(A, 16).block(B, 24).ptr(A, 0, B).ptr(B, 0, A);
    let (_f, h) = s.load();
    let l = leaks::analyze(&h, &NoContents);
    assert_eq!(kind(&h, &l, A), LeakKind::DefinitelyLost);
    assert_eq!(kind(&h, &l, B), LeakKind::IndirectlyLost);
    assert_eq!((l.definitely_lost.bytes, l.indirectly_lost.bytes), (16, 24));
}

#[test]
fn a_long_lost_list_laid_out_backwards_has_one_head() {
    // Each block points to the one below it: walking in address order, every
    // block first leads its own clique and is then taken in by the next.
    // (Relabelling each absorbed clique in place made this quadratic.)
    const N: u64 = 300_000;
    let mut s = Spec::default();
    for i in 0..N {
        s.block(0x10_0000 + i * 64, 32);
        if i > 0 {
            s.ptr(0x10_0000 + i * 64, 0, 0x10_0000 + (i - 1) * 64);
        }
    }
    let (_f, h) = s.load();
    let l = leaks::analyze(&h, &NoContents);
    let head = id(&h, 0x10_0000 + (N - 1) * 64);
    assert_eq!((l.definitely_lost.blocks, l.indirectly_lost.blocks), (1, N - 1));
    assert_eq!(l.kind[head.index()], LeakKind::DefinitelyLost);
    assert!((0..h.len()).all(|b| l.leader_of(BlockId(b as u32)) == Some(head)), "every block's clique is led by the list's head");
}

#[test]
fn a_lost_pointer_into_a_lost_cycle_leads_the_clique() {
    // C (highest address) points into the cycle A <-> B: C is the head,
    // A (a former clique leader) is demoted.
    let mut s = Spec::default();
    s.block(A, 16).block(B, 16).block(C, 100).ptr(A, 0, B).ptr(B, 0, A).ptr(C, 0, A);
    let (_f, h) = s.load();
    let l = leaks::analyze(&h, &NoContents);
    assert_eq!(kind(&h, &l, C), LeakKind::DefinitelyLost);
    assert_eq!(kind(&h, &l, A), LeakKind::IndirectlyLost);
    assert_eq!(kind(&h, &l, B), LeakKind::IndirectlyLost);
    assert_eq!(l.leader_of(id(&h, A)), Some(id(&h, C)));
    assert_eq!(l.leader_of(id(&h, B)), Some(id(&h, C)));
    let d = dominators::compute(&h, &[id(&h, C)]);
    assert_eq!(d.retained[id(&h, C).index()], 132, "the lost structure's head retains all of it");
}

#[test]
fn diamond_dominators() {
    let mut s = Spec::default();
    s.block(A, 16).block(B, 20).block(C, 30).block(D, 40);
    s.ptr(A, 0, B).ptr(A, 8, C).ptr(B, 0, D).ptr(C, 0, D);
    s.statics.push(A);
    let (_f, h) = s.load();
    let d = dominators::compute(&h, &[]);
    assert_eq!(d.idom(id(&h, D)), Some(id(&h, A)));
    assert_eq!(d.idom(id(&h, B)), Some(id(&h, A)));
    assert_eq!(d.retained[id(&h, A).index()], 106);
    assert_eq!(d.retained[id(&h, B).index()], 20);
    assert_eq!(d.dominated[id(&h, A).index()], 4);
    let l = leaks::analyze(&h, &NoContents);
    assert_eq!(l.still_reachable.blocks, 4);
    let p = paths::shortest(&h, id(&h, D), None).unwrap();
    assert_eq!(p.steps.len(), 3);
    assert!(matches!(p.start, paths::PathStart::Root(r) if h.root_source(&r).to_string().starts_with("static .data")));
}

#[test]
fn interior_pointers_make_blocks_possibly_lost() {
    // Stack -> inside E (offset 40); E -> F by a start pointer; F is only
    // possibly lost too (its chain has an interior pointer).
    let mut s = Spec::default();
    s.block(E, 64).block(E + 0x1000, 16).ptr(E, 0, E + 0x1000);
    s.stack.push(E + 40);
    let (_f, h) = s.load();
    let l = leaks::analyze(&h, &NoContents);
    assert_eq!(kind(&h, &l, E), LeakKind::PossiblyLost);
    assert_eq!(kind(&h, &l, E + 0x1000), LeakKind::PossiblyLost);
    // A second, start pointer from a root upgrades both.
    s.statics.push(E);
    let (_f, h) = s.load();
    let l = leaks::analyze(&h, &NoContents);
    assert_eq!(l.still_reachable.blocks, 2);
}

#[test]
fn heuristics_explain_normal_interior_pointers() {
    let mut s = Spec::default();
    // length64: first word = size - 8, pointer 8 bytes in.
    s.block(A, 72);
    s.first_words.push((A, 64));
    // hashbrown: 8 buckets of 8-byte entries (64 bytes) then 8 + 16 control
    // bytes, a layout the compact dump's writer proved (flags) or not.
    s.block(B, 64 + 8 + 16);
    s.stack.extend([A + 8, B + 64]);
    let (f, h) = s.load();
    let file = heapdump_analyze::DumpFile::open(&f.0).unwrap();
    let c = heapdump_analyze::DumpContents::build(&file, &h);
    let l = leaks::analyze(&h, &c);
    assert_eq!(kind(&h, &l, B), LeakKind::PossiblyLost, "sizes alone prove no table");
    // Bits from a writer that did not prove the table's room: no proof
    // (such writers took zeroed C structs for tables).
    s.flags.push((B, 3 << raw::ALLOC_HASHBROWN_SHIFT));
    let (_f, h) = s.load();
    assert_eq!(kind(&h, &leaks::analyze(&h, &NoContents), B), LeakKind::PossiblyLost, "layout bits without the room bit");
    s.flags[0].1 = 3 << raw::ALLOC_HASHBROWN_SHIFT | raw::ALLOC_HASHBROWN_ROOM;
    let (f, h) = s.load();
    let file = heapdump_analyze::DumpFile::open(&f.0).unwrap();
    let c = heapdump_analyze::DumpContents::build(&file, &h);
    let l = leaks::analyze(&h, &c);
    assert_eq!(l.still_reachable.blocks, 2, "{:?}", l.kind);
    let names: Vec<&str> = l.via_heuristic.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["length64", "hashbrown"]);
    // A proof for another bucket count is no proof for this offset.
    s.flags[0].1 = 2 << raw::ALLOC_HASHBROWN_SHIFT | raw::ALLOC_HASHBROWN_ROOM;
    let (_f, h) = s.load();
    let l = leaks::analyze(&h, &NoContents);
    assert_eq!(kind(&h, &l, B), LeakKind::PossiblyLost);
    // Without contents the length64 block stays possibly lost.
    let l = leaks::analyze(&h, &NoContents);
    assert_eq!(kind(&h, &l, A), LeakKind::PossiblyLost);
}

#[test]
fn ten_million_long_chain_does_not_overflow_the_stack() {
    let n = 10_000_000u32;
    let blocks: Vec<heapdump_analyze::Block> = (0..n)
        .map(|i| heapdump_analyze::Block { addr: 0x10_0000 + u64::from(i) * 32, size: 24, site: heapdump_analyze::SiteId(0), flags: 0 })
        .collect();
    let edges: Vec<(u32, u32, u64, u64)> = (0..n - 1).map(|i| (i, i + 1, 0, 0)).collect();
    let root = heapdump_analyze::Root { region: 0, offset: 0, target: BlockId(0), interior: false, into: 0 };
    let h = heap_of(blocks, &edges, vec![root]);
    let l = leaks::analyze(&h, &NoContents);
    assert_eq!(l.still_reachable.blocks, u64::from(n));
    let d = dominators::compute(&h, &[]);
    assert_eq!(d.retained[0], 24 * u64::from(n));
    assert_eq!(d.retained[(n - 1) as usize], 24);
    assert_eq!(d.idom(BlockId(n - 1)), Some(BlockId(n - 2)));
    let p = paths::shortest(&h, BlockId(n - 1), None).unwrap();
    assert_eq!(p.steps.len(), n as usize);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(40))]
    /// Loading resolves every pointer to its block, start or interior, in
    /// both halves of the file (pass 2 splits the records between threads),
    /// whether the ALLOC records come in address order (as the writer
    /// emits them) or not.
    #[test]
    fn every_pointer_is_resolved_to_its_block(
        n in 2usize..400,
        ptrs in proptest::collection::vec((0usize..400, 0u64..8, 0usize..400, 0u64..64), 0..1500),
        stack in proptest::collection::vec((0usize..400, 0u64..64), 0..20),
        (reverse, rotate) in (proptest::bool::ANY, 0usize..400),
    ) {
        let addr = |i: usize| 0x10_0000 + (i % n) as u64 * 0x100;
        let mut spec = Spec::default();
        for i in record_order(n, reverse, rotate) {
            spec.block(addr(i), 64);
        }
        let mut want: std::collections::BTreeMap<u64, std::collections::BTreeSet<(u64, u64)>> = Default::default();
        for &(from, slot, to, into) in &ptrs {
            // One pointer per slot of a block.
            if want.entry(addr(from)).or_default().iter().any(|p| p.0 == slot * 8) {
                continue;
            }
            want.get_mut(&addr(from)).unwrap().insert((slot * 8, addr(to) + into));
            spec.ptr(addr(from), slot * 8, addr(to) + into);
        }
        spec.stack = stack.iter().map(|&(to, into)| addr(to) + into).collect();
        let (_p, h) = spec.load();
        proptest::prop_assert_eq!(h.len(), n);
        for i in 0..n {
            let b = h.find_start(addr(i)).unwrap();
            let got: std::collections::BTreeSet<(u64, u64)> =
                h.edges(b).map(|e| (e.offset, h.block(e.target).addr + e.into)).collect();
            proptest::prop_assert_eq!(&got, &want.get(&addr(i)).cloned().unwrap_or_default());
            for e in h.edges(b) {
                proptest::prop_assert_eq!(e.interior, e.into != 0);
            }
        }
        let roots: Vec<u64> = h.roots.iter().filter(|r| r.offset != u64::MAX).map(|r| h.block(r.target).addr + r.into).collect();
        proptest::prop_assert_eq!(roots, spec.stack.clone());
    }
}

/// The order ALLOC records are written in: address order, or reversed
/// and/or rotated (a dump from some other writer).
fn record_order(n: usize, reverse: bool, rotate: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    if reverse {
        order.reverse();
    }
    order.rotate_left(rotate % n);
    order
}

/// Dominators the slow way (Cooper–Harvey–Kennedy's data flow over
/// dominator sets), with the virtual root's children chosen as the
/// analysis chooses them: root targets, then lost heads, then whatever is
/// still unreached, in block order.
fn naive_idoms(n: usize, edges: &[(usize, usize)], roots: &[usize], heads: &[usize]) -> Vec<Option<usize>> {
    let succ: Vec<Vec<usize>> = (0..n).map(|i| edges.iter().filter(|e| e.0 == i).map(|e| e.1).collect()).collect();
    let mut children: Vec<usize> = Vec::new();
    let mut reached = vec![false; n];
    let mark = |s: usize, reached: &mut Vec<bool>| {
        let mut st = vec![s];
        while let Some(v) = st.pop() {
            if !reached[v] {
                reached[v] = true;
                st.extend(&succ[v]);
            }
        }
    };
    for &r in roots.iter().chain(heads) {
        if !children.contains(&r) {
            children.push(r);
        }
    }
    for &c in &children.clone() {
        mark(c, &mut reached);
    }
    for v in 0..n {
        if !reached[v] {
            children.push(v);
            mark(v, &mut reached);
        }
    }
    // Node n is the virtual root. dom[v] = set of dominators of v.
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n + 1];
    for &(a, b) in edges {
        preds[b].push(a);
    }
    for &c in &children {
        preds[c].push(n);
    }
    let all: std::collections::BTreeSet<usize> = (0..=n).collect();
    let mut dom: Vec<std::collections::BTreeSet<usize>> = vec![all; n + 1];
    dom[n] = [n].into_iter().collect();
    let mut changed = true;
    while changed {
        changed = false;
        for v in 0..n {
            let mut d: Option<std::collections::BTreeSet<usize>> = None;
            for &p in &preds[v] {
                d = Some(match d {
                    None => dom[p].clone(),
                    Some(x) => x.intersection(&dom[p]).copied().collect(),
                });
            }
            let mut d = d.unwrap_or_default();
            d.insert(v);
            if d != dom[v] {
                dom[v] = d;
                changed = true;
            }
        }
    }
    // idom: the strict dominator dominated by all other strict dominators.
    (0..n)
        .map(|v| {
            let strict: Vec<usize> = dom[v].iter().copied().filter(|&d| d != v).collect();
            let idom = strict.iter().copied().find(|&d| strict.iter().all(|&o| dom[d].contains(&o)))?;
            (idom != n).then_some(idom)
        })
        .collect()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
    /// The dominator tree (the predecessor lists built on a second thread
    /// while the walk from the roots, then the leaks, run) equals the slow
    /// data-flow answer on random graphs with roots, lost cycles and lost
    /// chains.
    #[test]
    fn dominators_match_a_data_flow_oracle(
        n in 1usize..24,
        edges in proptest::collection::vec((0usize..24, 0usize..24), 0..60),
        roots in proptest::collection::vec(0usize..24, 0..4),
        (reverse, rotate) in (proptest::bool::ANY, 0usize..24),
    ) {
        let addr = |i: usize| 0x10_0000 + i as u64 * 0x100;
        let mut spec = Spec::default();
        for i in record_order(n, reverse, rotate) {
            spec.block(addr(i), 64);
        }
        let mut es: Vec<(usize, usize)> = Vec::new();
        for &(a, b) in &edges {
            let (a, b) = (a % n, b % n);
            let slot = es.iter().filter(|e| e.0 == a).count() as u64;
            if slot < 8 {
                spec.ptr(addr(a), slot * 8, addr(b));
                es.push((a, b));
            }
        }
        let roots: Vec<usize> = roots.iter().map(|r| r % n).collect();
        spec.stack = roots.iter().map(|&r| addr(r)).collect();
        let (_p, h) = spec.load();
        let (l, d) = dominators::with_leaks(&h, &NoContents);
        let heads: Vec<usize> = l.heads().iter().map(|b| (h.block(*b).addr - 0x10_0000) as usize / 0x100).collect();
        let want = naive_idoms(n, &es, &roots, &heads);
        for (i, want) in want.iter().enumerate() {
            let got = d.idom(id(&h, addr(i))).map(|b| (h.block(b).addr - 0x10_0000) as usize / 0x100);
            proptest::prop_assert_eq!(got, *want, "idom of block {}", i);
        }
    }
}

/// A hostile dump naming a device as a module: symbolizing its frames
/// gives up on it (one problem line) instead of reading forever.
#[test]
fn a_module_that_is_not_a_file_is_refused() {
    let mut s = Spec::default();
    s.block(A, 16);
    s.module = Some(("/dev/zero", 0x40_0000, 0x1000));
    s.site = vec![0x40_0100, 0x40_0200];
    let (_f, h) = s.load();
    let mut sym = heapdump_analyze::symbols::Symbolizer::new(&h);
    let label = sym.site_label(heapdump_analyze::SiteId(1));
    assert!(label.contains("zero"), "{label}");
    let problems = sym.problems();
    assert!(problems.iter().any(|p| p.contains("/dev/zero") && p.contains("not a regular file")), "{problems:?}");
}

/// Kernel files a hostile dump may name as modules: `/proc/kmsg` blocked
/// every command forever, `/proc/self/pagemap` took 24 GB. Each is refused
/// with one problem line, in bounded time (checked on a thread).
#[test]
fn kernel_files_named_as_modules_are_refused() {
    for path in ["/proc/kmsg", "/proc/self/pagemap", "/sys/kernel/mm/transparent_hugepage/enabled", "/proc/self/mem"] {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut s = Spec::default();
            s.block(A, 16);
            s.module = Some((path, 0x40_0000, 0x1000));
            s.site = vec![0x40_0100];
            let (_f, h) = s.load();
            let mut sym = heapdump_analyze::symbols::Symbolizer::new(&h);
            let _ = sym.site_label(heapdump_analyze::SiteId(1));
            let _ = tx.send(sym.problems());
        });
        let problems = rx.recv_timeout(std::time::Duration::from_secs(30)).unwrap_or_else(|_| panic!("{path}: still reading after 30 s"));
        assert!(problems.iter().any(|p| p.contains(path) && p.contains("not a regular file")), "{path}: {problems:?}");
    }
}

/// 3,000 MODULE records naming one file: it is opened once (it was loaded
/// 3,000 times, 15 GB, then an abort).
#[test]
fn a_file_named_by_many_modules_is_opened_once() {
    let exe = std::env::current_exe().unwrap().to_str().unwrap().to_string();
    let mut s = Spec::default();
    s.block(A, 16);
    s.more_modules = (0..3000u64).map(|i| (exe.clone(), 0x1000_0000 + i * 0x1_0000, 0x1000)).collect();
    s.site = (0..3000u64).map(|i| 0x1000_0000 + i * 0x1_0000 + 0x10).collect();
    let (_f, h) = s.load();
    let mut sym = heapdump_analyze::symbols::Symbolizer::new(&h);
    let frames: usize = (0..3000u64).map(|i| sym.frames(0x1000_0000 + i * 0x1_0000 + 0x10).len()).sum();
    assert!(frames >= 3000);
    assert_eq!(sym.files_opened(), 1);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(60))]
    /// Whatever the layout (blocks close together or far apart, in one
    /// arena or scattered over the address space, tiny or huge, empty), a
    /// word resolves to the block holding it, and to nothing between
    /// blocks, before the first or past the last: checked against a scan
    /// of every block.
    #[test]
    fn a_word_resolves_to_its_holder_in_any_layout(
        layout in proptest::collection::vec((0usize..6, 0usize..5), 1..300),
        probes in proptest::collection::vec((0usize..300, 0usize..4, 0u64..1 << 20), 1..200),
    ) {
        // Gaps before each block, and sizes.
        const GAPS: [u64; 6] = [0, 16, 4096, (1 << 20) - 16, 3 << 20, 1 << 40];
        const SIZES: [u64; 5] = [0, 8, 48, 1 << 16, 3 << 20];
        let mut blocks: Vec<(u64, u64)> = Vec::new();
        let mut at = 0x10_0000u64;
        for &(gap, size) in &layout {
            at += GAPS[gap];
            blocks.push((at, SIZES[size]));
            at += SIZES[size].max(8);
        }
        // One source block at a low address holds every probe word: a
        // block's start, its inside, just past its end, or far before it.
        let values: Vec<u64> = probes
            .iter()
            .map(|&(b, how, d)| {
                let (addr, size) = blocks[b % blocks.len()];
                match how {
                    0 => addr,
                    1 => addr + d % size.max(1),
                    2 => addr + size + d % 8,
                    _ => addr.saturating_sub(1 + d),
                }
            })
            .collect();
        let source = 0x1000u64;
        let mut spec = Spec::default();
        spec.block(source, 8 * values.len() as u64);
        for &(addr, size) in &blocks {
            spec.block(addr, size);
        }
        for (i, &v) in values.iter().enumerate() {
            spec.ptr(source, 8 * i as u64, v);
        }
        // The stack holds 64 words: the first probes are roots too.
        spec.stack = values.iter().take(64).copied().collect();
        let (_p, h) = spec.load();
        let all: Vec<(u64, u64)> = std::iter::once((source, 8 * values.len() as u64)).chain(blocks.iter().copied()).collect();
        let holder = |v: u64| all.iter().find(|&&(a, s)| v == a || (v > a && v < a + s)).map(|&(a, _)| (a, v - a));
        let want: Vec<(u64, u64, u64)> =
            values.iter().enumerate().filter_map(|(i, &v)| holder(v).map(|(a, into)| (8 * i as u64, a, into))).collect();
        let got: Vec<(u64, u64, u64)> = h.edges(id(&h, source)).map(|e| (e.offset, h.block(e.target).addr, e.into)).collect();
        proptest::prop_assert_eq!(&got, &want);
        let roots: Vec<(u64, u64)> = h.roots.iter().filter(|r| r.offset != u64::MAX).map(|r| (h.block(r.target).addr, r.into)).collect();
        let want_roots: Vec<(u64, u64)> = spec.stack.iter().filter_map(|&v| holder(v)).collect();
        proptest::prop_assert_eq!(roots, want_roots);
    }
}

/// A STATIC record's name is held once: 3,000 records with 64 KB names
/// took three times the dump's size (the name copied as owner and name).
#[test]
fn a_static_regions_name_is_held_once() {
    let mut s = Spec::default();
    s.block(A, 16);
    s.statics.push(A);
    let (_f, h) = s.load();
    let statics: Vec<_> = h.root_regions.iter().filter(|r| r.kind == heapdump_analyze::RootKind::Static).collect();
    assert!(!statics.is_empty());
    for r in statics {
        assert!(std::sync::Arc::ptr_eq(&r.owner, &r.name), "{r:?}");
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(60))]
    /// A group's retained size (`retained --by site|type`) is the bytes of
    /// the blocks some member of the group dominates (itself included),
    /// each once: checked against that definition, block by block, up the
    /// dominator chain, on random graphs.
    #[test]
    fn grouped_retained_sizes_count_each_byte_once(
        n in 1u32..300,
        edges in proptest::collection::vec((0u32..300, 0u32..300), 0..900),
        roots in proptest::collection::vec(0u32..300, 1..6),
        groups in 1u32..6,
        salt in 0u32..1000,
    ) {
        let blocks: Vec<heapdump_analyze::Block> = (0..n)
            .map(|i| heapdump_analyze::Block { addr: 0x10_0000 + u64::from(i) * 64, size: 8 + u64::from(i % 7) * 8, site: heapdump_analyze::SiteId(0), flags: 0 })
            .collect();
        let edges: Vec<(u32, u32, u64, u64)> = edges.iter().map(|&(a, b)| (a % n, b % n, 0, 0)).collect();
        let roots: Vec<heapdump_analyze::Root> = roots
            .iter()
            .map(|&r| heapdump_analyze::Root { region: 0, offset: 0, target: BlockId(r % n), interior: false, into: 0 })
            .collect();
        let h = heap_of(blocks, &edges, roots);
        let l = leaks::analyze(&h, &NoContents);
        let d = dominators::compute(&h, &l.heads());
        let group_of: Vec<u32> = (0..n).map(|i| (i.wrapping_mul(2654435761).wrapping_add(salt) >> 7) % groups).collect();
        let got = d.retained_by_group(groups as usize, &group_of);
        for g in 0..groups {
            let want: u64 = (0..n)
                .filter(|&v| {
                    let mut x = Some(BlockId(v));
                    while let Some(b) = x {
                        if group_of[b.index()] == g {
                            return true;
                        }
                        x = d.idom(b);
                    }
                    false
                })
                .map(|v| h.size(BlockId(v)))
                .sum();
            proptest::prop_assert_eq!(got[g as usize], want, "group {}", g);
        }
    }
}

/// Loading notes the blocks whose first word lies in a module's segment
/// (the vtable scan's only candidates, so that naming types reads the dump
/// no second time), from ALLOC and ALLOCS records alike, segments that
/// overlap and their ends included; the graph's cache keeps them.
#[test]
fn first_words_inside_modules_are_noted_as_the_dump_loads() {
    let mut s = Spec { module: Some(("/nonexistent/app", 0x40_0000, 0x1000)), ..Default::default() };
    // One inside the other (as no loader maps them, but a damaged dump may).
    s.more_modules.push(("/nonexistent/lib.so".into(), 0x40_0100, 0x100));
    s.more_modules.push(("/nonexistent/far.so".into(), 0x7f00_0000, 0x100));
    let words = [0x40_0000, 0x40_0fff, 0x40_1000, 0x3f_ffff, 0x7f00_00ff, 0x7f00_0100, 0, 0x40_0abc, 0x40_0150];
    let inside = [true, true, false, false, true, false, false, true, true];
    let mut want = Vec::new();
    for (i, (&w, &is_in)) in words.iter().zip(&inside).enumerate() {
        let addr = 0x10_0000 + i as u64 * 0x100;
        s.block(addr, 64);
        s.first_words.push((addr, w));
        if is_in {
            want.push([addr, w]);
        }
    }
    let dir = std::env::temp_dir().join(format!("hd-module-words-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (how, bytes) in [("ALLOC", s.write()), ("ALLOCS", s.write_dense())] {
        let path = crate::build::tempfile_path::TempPath::new();
        std::fs::write(&path.0, bytes).unwrap();
        let file = heapdump_analyze::DumpFile::open(&path.0).unwrap();
        let h = Heap::load(&file, &mut |_, _| {}).unwrap();
        assert_eq!(h.module_words(), Some(&want[..]), "{how}");
        let cache = heapdump_analyze::cache::CacheFile::for_file(&dir, &file, how).unwrap();
        cache.write_graph(&h).wait().unwrap();
        let kept = cache.read_graph().unwrap().expect("the graph just kept");
        assert_eq!(kept.module_words(), Some(&want[..]), "{how}, from the cache");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The one door: `open` gives the same graph as loading, its analysis the
/// answers of an analysis made by hand, a verdict for a complete dump, and
/// the diff against another dump; without the caches, nothing is written.
#[test]
fn open_answers_as_the_parts_do() {
    let base = || {
        let mut s = Spec::default();
        s.block(0x1000, 64).block(0x2000, 32);
        s.stack.push(0x1000);
        s
    };
    let old = base();
    let mut new = base();
    new.block(0x3000, 128).ptr(0x1000, 8, 0x3000);
    let (old_path, new_path) = (crate::build::tempfile_path::TempPath::new(), crate::build::tempfile_path::TempPath::new());
    std::fs::write(&old_path.0, old.write()).unwrap();
    std::fs::write(&new_path.0, new.write()).unwrap();
    let o = heapdump_analyze::Options::default().cache(false);
    let (d_old, d_new) = (heapdump_analyze::open(&old_path.0, &o).unwrap(), heapdump_analyze::open(&new_path.0, &o).unwrap());
    let file = heapdump_analyze::DumpFile::open(&new_path.0).unwrap();
    let heap = Heap::load(&file, &mut |_, _| {}).unwrap();
    assert_eq!(d_new.heap().len(), heap.len());
    let (by_door, by_hand) = (d_new.analysis(), heapdump_analyze::Analysis::new(&file, &heap));
    assert_eq!(format!("{:?}", by_door.leak_report()), format!("{:?}", by_hand.leak_report()));
    assert_eq!(format!("{:?}", by_door.retainers(10)), format!("{:?}", by_hand.retainers(10)));
    assert!(by_door.leak_verdict().is_ok(), "a complete dump gives a verdict");
    let r = by_door.retainers(1);
    assert_eq!((r[0].address, r[0].address.to_string()), (heapdump_analyze::Address(0x1000), "0x1000".to_string()));
    let d = d_new.diff(&d_old);
    assert_eq!((d.new.blocks, d.new.bytes, d.gone.blocks), (1, 128, 0));
    assert_eq!(d, heapdump_analyze::group::diff((d_old.file(), d_old.heap()), (&file, &heap)));
}

/// The leak hunt's heap of issue 43 (benches/c/mostly_lost.c's shape) at
/// 100 K blocks: each node two pointers to random earlier nodes, only the
/// last 64 held from the stack, so most of it is lost in millions of small
/// structures at full size. Its classes, leaders, indirect credits and
/// dominator tree equal the straightforward answers: reachability by a
/// plain search, "lost with a lost pointer to it" for indirectly lost (the
/// graph has no cycle), and Cooper–Harvey–Kennedy's iterative dominators.
/// The blocks come from four sites in turn, so that the report's groups
/// (credited on two threads past 64 K blocks) each sum their own leaders'.
#[test]
fn a_mostly_lost_heap_matches_the_straightforward_answers() {
    let (n, kept) = (100_000usize, 64usize);
    let addr = |i: usize| 0x10_0000 + i as u64 * 0x40;
    let site_of = |i: usize| 1 + (i % 4) as u32;
    let mut spec = Spec {
        site: vec![0x40_1000],
        more_sites: (2..=4).map(|id| (id, vec![0x40_1000 + 0x10 * u64::from(id)])).collect(),
        ..Default::default()
    };
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut x: u64 = 88172645463325252;
    for (i, out) in succ.iter_mut().enumerate() {
        spec.block(addr(i), 48);
        if site_of(i) != 1 {
            spec.block_sites.push((addr(i), site_of(i)));
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if i > 0 {
            for (slot, t) in [(x % i as u64) as usize, ((x >> 20) % i as u64) as usize].into_iter().enumerate() {
                spec.ptr(addr(i), slot as u64 * 8, addr(t));
                out.push(t);
            }
        }
    }
    let roots: Vec<usize> = (n - kept..n).collect();
    spec.stack = roots.iter().map(|&r| addr(r)).collect();
    let path = crate::build::tempfile_path::TempPath::new();
    std::fs::write(&path.0, spec.write()).unwrap();
    let file = heapdump_analyze::DumpFile::open(&path.0).unwrap();
    let h = Heap::load(&file, &mut |_, _| {}).unwrap();
    assert_eq!(h.len(), n);
    // Block ids are address order, as the nodes' indexes are.
    assert!((0..n).all(|i| h.block(BlockId(i as u32)).addr == addr(i)));
    let (l, d) = dominators::with_leaks(&h, &NoContents);

    // Classes.
    let mut reached = vec![false; n];
    let mut stack: Vec<usize> = roots.clone();
    while let Some(v) = stack.pop() {
        if !std::mem::replace(&mut reached[v], true) {
            stack.extend(&succ[v]);
        }
    }
    let mut lost_pred = vec![false; n];
    for v in (0..n).filter(|&v| !reached[v]) {
        for &t in &succ[v] {
            lost_pred[t] = true;
        }
    }
    let want = |v: usize| match (reached[v], lost_pred[v]) {
        (true, _) => LeakKind::StillReachable,
        (false, true) => LeakKind::IndirectlyLost,
        (false, false) => LeakKind::DefinitelyLost,
    };
    let lost = (0..n).filter(|&v| !reached[v]).count();
    assert!(lost > n / 2, "the heap is mostly lost ({lost} of {n})");
    for v in 0..n {
        assert_eq!(l.kind[v], want(v), "class of node {v}");
    }
    // Leaders: a definitely lost block leads itself; every indirectly lost
    // block's leader is definitely lost and reaches it (checked for a
    // sample: a search each).
    for v in 0..n {
        let leader = l.leader_of(BlockId(v as u32)).map(|b| b.index());
        match l.kind[v] {
            LeakKind::DefinitelyLost => assert_eq!(leader, Some(v), "a head leads itself"),
            LeakKind::IndirectlyLost => assert_eq!(l.kind[leader.unwrap()], LeakKind::DefinitelyLost, "leader of {v}"),
            _ => assert_eq!(leader, None),
        }
    }
    for v in (0..n).filter(|&v| l.kind[v] == LeakKind::IndirectlyLost).step_by(499) {
        let from = l.leader_of(BlockId(v as u32)).unwrap().index();
        let mut seen = std::collections::HashSet::new();
        let mut stack = vec![from];
        while let Some(u) = stack.pop() {
            if seen.insert(u) {
                stack.extend(&succ[u]);
            }
        }
        assert!(seen.contains(&v), "the leader of node {v} (node {from}) reaches it");
    }
    // The report credits every indirectly lost block to its leader's group:
    // a group of definitely lost blocks a site, each with the blocks its
    // own leaders lead (the groups compared as a set of sums: their order
    // is by size).
    let report = heapdump_analyze::Analysis::new(&file, &h).leak_report();
    let mut want_groups = [[0u64; 4]; 4];
    for v in 0..n {
        match l.kind[v] {
            LeakKind::DefinitelyLost => {
                let w = &mut want_groups[site_of(v) as usize - 1];
                w[0] += 1;
                w[1] += 48;
            }
            LeakKind::IndirectlyLost => {
                let w = &mut want_groups[site_of(l.leader_of(BlockId(v as u32)).unwrap().index()) as usize - 1];
                w[2] += 1;
                w[3] += 48;
            }
            _ => {}
        }
    }
    let mut got: Vec<[u64; 4]> = report
        .groups
        .iter()
        .inspect(|g| assert_eq!(g.kind, LeakKind::DefinitelyLost))
        .map(|g| [g.blocks, g.bytes, g.indirect_blocks, g.indirect_bytes])
        .collect();
    let mut want_groups = want_groups.to_vec();
    got.sort_unstable();
    want_groups.sort_unstable();
    assert_eq!(got, want_groups, "each site's group: its blocks and what its leaders lead");
    assert!(want_groups.iter().all(|w| w[2] > 0), "every site's leaders lead blocks: {want_groups:?}");
    assert_eq!(report.indirectly_lost.blocks, (0..n).filter(|&v| want(v) == LeakKind::IndirectlyLost).count() as u64);

    // Dominators: the virtual root (node n) points at the roots and at the
    // definitely lost blocks, which between them reach every block.
    let root = n;
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n + 1];
    for (v, ts) in succ.iter().enumerate() {
        for &t in ts {
            preds[t].push(v);
        }
    }
    let tops: Vec<usize> = roots.iter().copied().chain((0..n).filter(|&v| want(v) == LeakKind::DefinitelyLost)).collect();
    for &t in &tops {
        preds[t].push(root);
    }
    // Reverse postorder from the virtual root.
    let mut order: Vec<usize> = Vec::with_capacity(n + 1);
    let mut visited = vec![false; n + 1];
    let mut walk: Vec<(usize, usize)> = vec![(root, 0)];
    visited[root] = true;
    let out_of = |v: usize| if v == root { &tops } else { &succ[v] };
    while let Some(&mut (v, ref mut k)) = walk.last_mut() {
        if let Some(&t) = out_of(v).get(*k) {
            *k += 1;
            if !std::mem::replace(&mut visited[t], true) {
                walk.push((t, 0));
            }
        } else {
            order.push(v);
            walk.pop();
        }
    }
    assert_eq!(order.len(), n + 1, "every block is under the virtual root");
    order.reverse();
    let mut rpo = vec![0usize; n + 1];
    for (k, &v) in order.iter().enumerate() {
        rpo[v] = k;
    }
    let mut idom: Vec<Option<usize>> = vec![None; n + 1];
    idom[root] = Some(root);
    let mut changed = true;
    while changed {
        changed = false;
        for &v in &order[1..] {
            let mut new: Option<usize> = None;
            for &p in &preds[v] {
                if idom[p].is_none() {
                    continue;
                }
                new = Some(match new {
                    None => p,
                    Some(mut a) => {
                        let mut b = p;
                        while a != b {
                            while rpo[a] > rpo[b] {
                                a = idom[a].unwrap();
                            }
                            while rpo[b] > rpo[a] {
                                b = idom[b].unwrap();
                            }
                        }
                        a
                    }
                });
            }
            if new != idom[v] {
                idom[v] = new;
                changed = true;
            }
        }
    }
    let mut retained = vec![48u64; n + 1];
    for &v in order[1..].iter().rev() {
        let p = idom[v].unwrap();
        if p != root {
            retained[p] += retained[v];
        }
    }
    for v in 0..n {
        let want = idom[v].filter(|&p| p != root);
        assert_eq!(d.idom(BlockId(v as u32)).map(|b| b.index()), want, "idom of node {v}");
        assert_eq!(d.retained[v], retained[v], "retained size of node {v}");
    }
}
