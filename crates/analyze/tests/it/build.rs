//! Writes small dumps with the real writer.

use heapdump_analyze::{DumpFile, Heap};
use heapdump_format::*;

/// A heap to write: blocks (address, size), pointers (from, offset, value),
/// stack words and static words (values).
#[derive(Default)]
pub struct Spec {
    pub blocks: Vec<(u64, u64)>,
    pub ptrs: Vec<(u64, u64, u64)>,
    pub stack: Vec<u64>,
    pub statics: Vec<u64>,
    pub first_words: Vec<(u64, u64)>,
    /// ALLOC flags by block address (0 when not listed).
    pub flags: Vec<(u64, u8)>,
    /// A module (path, start, length of its executable segment) and the
    /// frames of site 1, which every block then has.
    pub module: Option<(&'static str, u64, u64)>,
    /// More modules after it: (path, start, length).
    pub more_modules: Vec<(String, u64, u64)>,
    pub site: Vec<u64>,
    /// More sites (id, frames), and the blocks allocated at each (by
    /// address; the others at site 1 when `site` is given, else none).
    pub more_sites: Vec<(u32, Vec<u64>)>,
    pub block_sites: Vec<(u64, u32)>,
}

impl Spec {
    pub fn block(&mut self, addr: u64, size: u64) -> &mut Self {
        self.blocks.push((addr, size));
        self
    }
    pub fn ptr(&mut self, from: u64, offset: u64, to: u64) -> &mut Self {
        self.ptrs.push((from, offset, to));
        self
    }

    pub fn write(&self) -> Vec<u8> {
        self.write_as(false)
    }

    /// The same heap with its allocations in ALLOCS records (format 1.2),
    /// as the runtime writes compact dumps: in address order, pointers by
    /// ordinal (a value inside no block is no pointer).
    pub fn write_dense(&self) -> Vec<u8> {
        self.write_as(true)
    }

    fn write_as(&self, dense: bool) -> Vec<u8> {
        let mut buf = vec![0u8; 4096];
        let mut batch = vec![0u8; 256];
        let mut w = Writer::new(Vec::new(), &mut buf, &Header::new(Mode::Compact, Reason::Api, 4096, 1, 0)).unwrap();
        w.process(&Process { backtrace: Backtrace::Off, max_frames: 0, sample_mean: 0, exe: b"/bin/test", cmdline: b"test\0", flags: 0 })
            .unwrap();
        if let Some((path, start, len)) = self.module {
            let seg = [Segment { vaddr: start, memsz: len, file_offset: 0, flags: raw::SEG_X | raw::SEG_R }];
            w.module(&ModuleInfo { bias: 0, path: path.as_bytes(), build_id: &[], segments: &seg }).unwrap();
        }
        for (path, start, len) in &self.more_modules {
            let seg = [Segment { vaddr: *start, memsz: *len, file_offset: 0, flags: raw::SEG_X | raw::SEG_R }];
            w.module(&ModuleInfo { bias: 0, path: path.as_bytes(), build_id: &[], segments: &seg }).unwrap();
        }
        if !self.site.is_empty() {
            w.site(1, &self.site).unwrap();
        }
        for (id, frames) in &self.more_sites {
            w.site(*id, frames).unwrap();
        }
        let block_sites: std::collections::HashMap<u64, u32> = self.block_sites.iter().copied().collect();
        let stack: Vec<(u64, u64)> = self.stack.iter().enumerate().map(|(i, &v)| (i as u64 * 8, v)).collect();
        let t = ThreadInfo {
            tid: 7,
            flags: raw::THREAD_CURRENT,
            stack_start: 0x7000_0000,
            stack_end: 0x7000_0000 + 8 * 64,
            tls: 0,
            name: b"main",
            regs: &[0; 17],
        };
        w.thread(&t, Contents::Compact { count: stack.len() as u64, pointers: stack.iter().copied() }).unwrap();
        let st: Vec<(u64, u64)> = self.statics.iter().enumerate().map(|(i, &v)| (i as u64 * 8, v)).collect();
        let s = StaticInfo { address: 0x60_0000, size: 8 * 64, module: raw::NO_MODULE, name: b".data" };
        w.static_root(&s, Contents::Compact { count: st.len() as u64, pointers: st.iter().copied() }).unwrap();
        let mut by_block: std::collections::HashMap<u64, Vec<(u64, u64)>> = std::collections::HashMap::new();
        for &(from, offset, to) in &self.ptrs {
            by_block.entry(from).or_default().push((offset, to));
        }
        let mut sorted = self.blocks.clone();
        sorted.sort();
        let ordinal = |v: u64| {
            let i = sorted.partition_point(|b| b.0 <= v).checked_sub(1)?;
            let (a, n) = sorted[i];
            (v == a || v < a + n).then_some((i as u64, v - a))
        };
        if dense {
            w.set_batch_buffer(&mut batch).unwrap();
        }
        for &(addr, size) in if dense { &sorted } else { &self.blocks } {
            let mut p = by_block.remove(&addr).unwrap_or_default();
            p.sort();
            let first_word = self.first_words.iter().find(|x| x.0 == addr).map_or(0, |x| x.1);
            let site = block_sites.get(&addr).copied().unwrap_or(if self.site.is_empty() { 0 } else { 1 });
            let flags = self.flags.iter().find(|x| x.0 == addr).map_or(0, |x| x.1);
            let info = AllocInfo { address: addr, size, site, align_log2: 4, flags, first_word };
            if dense {
                let links: Vec<Link> =
                    p.iter().filter_map(|&(o, v)| ordinal(v).map(|(target, delta)| Link { offset: o, target, delta })).collect();
                w.dense_alloc(&info, links.len() as u64, links.into_iter()).unwrap();
            } else {
                w.alloc(&info, Contents::Compact { count: p.len() as u64, pointers: p.into_iter() }).unwrap();
            }
        }
        w.finish(0).unwrap().0
    }

    pub fn load(&self) -> (tempfile_path::TempPath, Heap) {
        let path = tempfile_path::TempPath::new();
        std::fs::write(&path.0, self.write()).unwrap();
        let f = DumpFile::open(&path.0).unwrap();
        let h = Heap::load(&f, &mut |_, _| {}).unwrap();
        // Every heap of the tests is also written the 1.2 way: it must load
        // to the same graph.
        let dense = tempfile_path::TempPath::new();
        std::fs::write(&dense.0, self.write_dense()).unwrap();
        let df = DumpFile::open(&dense.0).unwrap();
        let d = Heap::load(&df, &mut |_, _| {}).unwrap();
        assert_eq!(graph(&d), graph(&h), "ALLOCS and ALLOC records load to different graphs");
        // And to the same leak classes, heuristics (which read first words)
        // included.
        let (ld, lh) = (heapdump_analyze::leaks::of_dump(&df, &d), heapdump_analyze::leaks::of_dump(&f, &h));
        assert_eq!((&ld.kind, format!("{:?}", ld.via_heuristic)), (&lh.kind, format!("{:?}", lh.via_heuristic)));
        (path, h)
    }
}

/// Blocks, their edges and the roots, comparable.
pub fn graph(h: &Heap) -> (Vec<heapdump_analyze::Block>, Vec<Vec<heapdump_analyze::Edge>>, Vec<heapdump_analyze::Root>) {
    let blocks: Vec<_> = h.blocks().collect();
    let edges = (0..h.len()).map(|b| h.edges(heapdump_analyze::BlockId(b as u32)).collect()).collect();
    (blocks, edges, h.roots.clone())
}

pub mod tempfile_path {
    use std::sync::atomic::{AtomicU64, Ordering};
    pub struct TempPath(pub std::path::PathBuf);
    static N: AtomicU64 = AtomicU64::new(0);
    impl TempPath {
        pub fn new() -> TempPath {
            TempPath(std::env::temp_dir().join(format!("hd-analyze-{}-{}.hdump", std::process::id(), N.fetch_add(1, Ordering::Relaxed))))
        }
    }
    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}
