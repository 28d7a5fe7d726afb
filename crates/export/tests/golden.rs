//! Every export of one small dump, compared byte for byte with the files
//! under `tests/golden/`: a change to what an export writes shows here as
//! a diff to read (the consumers' own checks, `go tool pprof`, memlab,
//! DevTools, graphviz, run in the command line's suite). After a change
//! that is meant, `HEAPDUMP_BLESS=1 cargo test -p heapdump-export` writes
//! the new files; review them before committing.

use heapdump_analyze::{Analysis, DumpFile, Heap};
use heapdump_format::{
    raw, AllocInfo, Backtrace, Contents, Header, Mode, ModuleInfo, ProcessInfo, Reason, Segment, StaticInfo, ThreadInfo, Writer,
};
use std::path::{Path, PathBuf};

/// The heap: a list kept from the stack (three nodes, site 1), a block
/// kept from a static through an interior pointer only (possibly lost,
/// site 2), a lost head holding two blocks (site 3), a lost cycle of two
/// (site 3), and a reachable buffer (site 4). Sites are return addresses
/// in a module the analysis cannot open, so they are named by module and
/// offset, as for a stripped library.
fn write_dump(path: &Path) {
    let mut buf = vec![0u8; 4096];
    let mut w =
        Writer::new(Vec::new(), &mut buf, &Header::new(Mode::Compact, Reason::Signal, 4096, 4242, 1_700_000_000_000_000_000)).unwrap();
    w.process(&ProcessInfo {
        backtrace: Backtrace::All,
        max_frames: 64,
        sample_mean: 0,
        exe: b"/usr/bin/golden",
        cmdline: b"golden\0--serve\0",
        flags: 0,
    })
    .unwrap();
    let seg = [Segment { vaddr: 0x40_0000, memsz: 0x1_0000, file_offset: 0, flags: raw::SEG_X | raw::SEG_R }];
    w.module(&ModuleInfo { bias: 0, path: b"/nonexistent/libgolden.so", build_id: &[0xab, 0xcd], segments: &seg }).unwrap();
    w.site(1, &[0x40_1010, 0x40_2020, 0x40_3030]).unwrap();
    w.site(2, &[0x40_1110, 0x40_3030]).unwrap();
    w.site(3, &[0x40_1210, 0x40_2220, 0x40_3030]).unwrap();
    w.site(4, &[0x40_1310, 0x40_3030]).unwrap();
    let (list, kept_inside, head, cycle, buffer) = (0x10_0000u64, 0x20_0000u64, 0x30_0000u64, 0x40_0000u64, 0x50_0000u64);
    let stack = [(0u64, list), (16, buffer)];
    let t = ThreadInfo {
        tid: 4242,
        flags: raw::THREAD_CURRENT,
        stack_start: 0x7000_0000,
        stack_end: 0x7000_0200,
        tls: 0,
        name: b"golden",
        regs: &[0; 17],
    };
    w.thread(&t, Contents::Compact { count: stack.len() as u64, pointers: stack.iter().copied() }).unwrap();
    let statics = [(8u64, kept_inside + 16)];
    let s = StaticInfo { address: 0x60_0000, size: 64, module: 0, name: b".data+.bss" };
    w.static_root(&s, Contents::Compact { count: statics.len() as u64, pointers: statics.iter().copied() }).unwrap();
    // (address, size, site, pointers as (offset, value)).
    type Block = (u64, u64, u32, Vec<(u64, u64)>);
    let mut blocks: Vec<Block> = vec![
        (list, 48, 1, vec![(0, list + 0x100)]),
        (list + 0x100, 48, 1, vec![(0, list + 0x200)]),
        (list + 0x200, 48, 1, vec![]),
        (kept_inside, 200, 2, vec![]),
        (head, 64, 3, vec![(0, head + 0x100), (8, head + 0x200)]),
        (head + 0x100, 32, 3, vec![]),
        (head + 0x200, 32, 3, vec![]),
        (cycle, 40, 3, vec![(0, cycle + 0x100)]),
        (cycle + 0x100, 40, 3, vec![(0, cycle)]),
        (buffer, 4096, 4, vec![]),
    ];
    blocks.sort_by_key(|b| b.0);
    for (address, size, site, ptrs) in blocks {
        let first_word = ptrs.first().map_or(0, |p| p.1);
        let info = AllocInfo { address, size, site, align_log2: 4, flags: 0, first_word };
        w.alloc(&info, Contents::Compact { count: ptrs.len() as u64, pointers: ptrs.into_iter() }).unwrap();
    }
    let (bytes, _) = w.finish(1234).unwrap();
    std::fs::write(path, bytes).unwrap();
}

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// Compares `got` with the golden file `name`, or writes it when blessing.
fn check(name: &str, got: &[u8]) -> Option<String> {
    let path = golden_dir().join(name);
    if std::env::var_os("HEAPDUMP_BLESS").is_some() {
        std::fs::create_dir_all(golden_dir()).unwrap();
        std::fs::write(&path, got).unwrap();
        return None;
    }
    let want = match std::fs::read(&path) {
        Ok(w) => w,
        Err(e) => return Some(format!("{name}: {e} (HEAPDUMP_BLESS=1 writes it)")),
    };
    if want == got {
        return None;
    }
    let (w, g) = (String::from_utf8_lossy(&want), String::from_utf8_lossy(got));
    let line = w.lines().zip(g.lines()).position(|(a, b)| a != b).unwrap_or_else(|| w.lines().count().min(g.lines().count()));
    Some(format!(
        "{name} differs from {} at line {}:\n  golden: {}\n  now:    {}\n(HEAPDUMP_BLESS=1 writes the new file: review it before committing)",
        path.display(),
        line + 1,
        w.lines().nth(line).unwrap_or("<end>"),
        g.lines().nth(line).unwrap_or("<end>")
    ))
}

#[test]
fn every_export_matches_its_golden_file() {
    let dir = std::env::temp_dir().join(format!("heapdump-golden-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dump = dir.join("golden.hdump");
    write_dump(&dump);
    let file = DumpFile::open(&dump).unwrap();
    let heap = Heap::load(&file, &mut |_, _| {}).unwrap();
    // The graph as the cache keeps it and gives it back: every export of it
    // must be the same bytes.
    let cache = heapdump_analyze::cache::CacheFile::for_file(&dir, &file, "golden").expect("a complete, intact dump");
    cache.write_graph(&heap).wait().unwrap();
    let from_cache = cache.read_graph().unwrap().expect("the graph just written");
    let a = Analysis::new(&file, &heap);
    // The heap is what the test says it is, before any file is compared.
    let l = a.leaks();
    assert_eq!((l.definitely_lost.blocks, l.indirectly_lost.blocks, l.possibly_lost.blocks), (2, 3, 1));
    let cached = Analysis::new(&file, &from_cache);
    let mut failures = Vec::new();
    let mut out = |name: &str, write: &dyn Fn(&Analysis<'_>, &mut Vec<u8>) -> std::io::Result<()>| {
        let mut v = Vec::new();
        write(&a, &mut v).unwrap();
        let mut again = Vec::new();
        write(&cached, &mut again).unwrap();
        if again != v {
            failures.push(format!("{name}: the cached graph gives other bytes"));
        }
        failures.extend(check(name, &v));
    };
    out("export.json", &|a, w| heapdump_export::write_json(a, w));
    out("heap.folded", &|a, w| heapdump_export::write_folded(a, w));
    out("heap.svg", &|a, w| heapdump_export::write_svg(a, w));
    out("heap.heapsnapshot", &|a, w| heapdump_export::write_heapsnapshot(a, w));
    out("top.dot", &|a, w| heapdump_export::write_dot(a, &heapdump_export::GraphOptions::default(), w));
    out("top.mmd", &|a, w| heapdump_export::write_mermaid(a, &heapdump_export::GraphOptions::default(), w));
    let around = heapdump_export::GraphOptions { address: Some(0x10_0100), depth: 2, max_nodes: 50 };
    out("around.dot", &|a, w| heapdump_export::write_dot(a, &around, w));
    out("report.html", &|a, w| heapdump_export::write_html(a, None, w));
    // pprof is gzipped protobuf: the profile itself is compared, as text.
    out("pprof.txt", &|a, w| {
        use std::io::Write;
        write!(w, "{:#?}", heapdump_export::profile(a))
    });
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
