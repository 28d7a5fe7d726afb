//! A plain in-memory description of a dump, written with the real writer
//! and compared with what the real reader gives back.

use heapdump_format::*;
use proptest::prelude::*;

#[derive(Clone, Debug, PartialEq)]
pub struct MRegion {
    pub bytes: Vec<u8>,            // full mode
    pub pointers: Vec<(u64, u64)>, // compact mode
}

#[derive(Clone, Debug, PartialEq)]
pub struct MAlloc {
    pub address: u64,
    pub size: u64,
    pub site: u32,
    pub align_log2: u8,
    pub flags: u8,
    pub first_word: u64,
    pub region: MRegion,
}

/// An allocation of an ALLOCS record (compact dumps since 1.2).
#[derive(Clone, Debug, PartialEq)]
pub struct MDense {
    pub address: u64,
    pub size: u64,
    pub site: u32,
    pub align_log2: u8,
    pub flags: u8,
    pub first_word: FirstWord,
    pub links: Vec<Link>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct MThread {
    pub tid: u32,
    pub flags: u32,
    pub stack_start: u64,
    pub size: u64,
    pub name: Vec<u8>,
    pub regs: Vec<u64>,
    pub region: MRegion,
}

#[derive(Clone, Debug, PartialEq)]
pub struct MModule {
    pub bias: u64,
    pub path: Vec<u8>,
    pub build_id: Vec<u8>,
    pub segments: Vec<Segment>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct MDump {
    pub mode: Mode,
    pub reason: Reason,
    pub pid: u32,
    pub exe: Vec<u8>,
    pub cmdline: Vec<u8>,
    pub modules: Vec<MModule>,
    pub threads: Vec<MThread>,
    pub statics: Vec<(u64, MRegion, u64)>, // address, region, size
    pub sites: Vec<(u32, Vec<u64>)>,
    pub allocs: Vec<MAlloc>,
    /// Written after `allocs` with [`Writer::dense_alloc`] (compact only).
    pub dense: Vec<MDense>,
    /// The batch buffer's size (0: none, every entry a record).
    pub batch: usize,
    /// The SIGNAL record (1.2), when the dump was taken for a signal.
    pub signal: Option<SignalInfo>,
    /// The LIMIT record (1.2), when it was taken near a memory limit.
    pub limit: Option<LimitInfo>,
    /// The HISTORY record (1.2).
    pub history: Option<History>,
    pub pause_ns: u64,
}

/// Dense allocations in address order, their pointers naming any of the
/// `total` allocations of the dump.
fn dense(n: usize) -> impl Strategy<Value = Vec<MDense>> {
    let one = (
        prop_oneof![4 => 0u64..64, 1 => 0u64..1 << 20],
        prop_oneof![8 => 0u64..200, 1 => 200u64..4000],
        prop_oneof![3 => 0u32..4, 1 => any::<u32>()],
        0u8..64,
        any::<u8>(),
        prop_oneof![2 => Just(0u64), 2 => 0u64..1000, 1 => any::<u64>()],
        proptest::collection::vec((0u64..512, any::<u64>(), prop_oneof![3 => Just(0u64), 1 => 0u64..1 << 20]), 0..12),
    );
    proptest::collection::vec(one, n).prop_map(|v| {
        let total = v.len() as u64;
        let mut next = 0x5555_0000_0000u64;
        v.into_iter()
            .map(|(gap, size, site, align_log2, flags, w, raw_links)| {
                let address = next + gap;
                next = address + size.max(1);
                let mut words: Vec<u64> = raw_links.iter().map(|l| l.0).filter(|&i| (i + 1) * 8 <= size).collect();
                words.sort_unstable();
                words.dedup();
                let links: Vec<Link> = words
                    .iter()
                    .zip(raw_links.iter())
                    .map(|(&i, &(_, t, delta))| Link { offset: i * 8, target: t % total.max(1), delta })
                    .collect();
                let first_word = if links.first().is_some_and(|l| l.offset == 0) { FirstWord::FirstLink } else { FirstWord::Value(w) };
                MDense { address, size, site, align_log2, flags, first_word, links }
            })
            .collect()
    })
}

fn region(mode: Mode, size: u64) -> impl Strategy<Value = MRegion> {
    let n = size as usize;
    match mode {
        Mode::Full => proptest::collection::vec(any::<u8>(), n).prop_map(|bytes| MRegion { bytes, pointers: vec![] }).boxed(),
        Mode::Compact => {
            let words = (size / 8) as usize;
            proptest::collection::vec((0..words.max(1) as u64, any::<u64>()), 0..=words.min(6))
                .prop_map(move |v| MRegion {
                    bytes: vec![],
                    pointers: if words == 0 { vec![] } else { v.into_iter().map(|(i, val)| (i * 8, val)).collect() },
                })
                .boxed()
        }
    }
}

fn alloc(mode: Mode) -> impl Strategy<Value = MAlloc> {
    (0u64..64, any::<u32>(), 0u8..12, any::<u8>(), any::<u64>(), 1u64 << 12..1u64 << 46).prop_flat_map(
        move |(size, site, align_log2, flags, first_word, address)| {
            region(mode, size).prop_map(move |region| {
                let first_word = if mode == Mode::Full {
                    let mut w = [0u8; 8];
                    let n = region.bytes.len().min(8);
                    w[..n].copy_from_slice(&region.bytes[..n]);
                    u64::from_le_bytes(w)
                } else {
                    first_word
                };
                MAlloc { address, size, site, align_log2, flags, first_word, region }
            })
        },
    )
}

fn thread(mode: Mode) -> impl Strategy<Value = MThread> {
    (any::<u32>(), 0u32..4, 0u64..128, proptest::collection::vec(any::<u8>(), 0..16), proptest::collection::vec(any::<u64>(), 0..=17))
        .prop_flat_map(move |(tid, flags, words, name, regs)| {
            region(mode, words * 8).prop_map(move |region| MThread {
                tid,
                flags,
                stack_start: 0x7fff_0000_0000,
                size: words * 8,
                name: name.clone(),
                regs: regs.clone(),
                region,
            })
        })
}

fn module() -> impl Strategy<Value = MModule> {
    (
        any::<u64>(),
        proptest::collection::vec(any::<u8>(), 0..40),
        proptest::collection::vec(any::<u8>(), 0..20),
        proptest::collection::vec((any::<u64>(), any::<u64>(), any::<u64>(), 0u32..8), 0..4),
    )
        .prop_map(|(bias, path, build_id, segs)| MModule {
            bias,
            path,
            build_id,
            segments: segs.into_iter().map(|(vaddr, memsz, file_offset, flags)| Segment { vaddr, memsz, file_offset, flags }).collect(),
        })
}

pub fn dump() -> impl Strategy<Value = MDump> {
    prop_oneof![Just(Mode::Compact), Just(Mode::Full)].prop_flat_map(|mode| {
        (
            (
                prop_oneof![
                    Just(Reason::Api),
                    Just(Reason::Signal),
                    Just(Reason::Exit),
                    Just(Reason::AllocFailure),
                    Just(Reason::Threshold),
                    Just(Reason::NearLimit),
                    Just(Reason::Crash)
                ],
                any::<u32>(),
            ),
            (proptest::collection::vec(any::<u8>(), 0..30), proptest::collection::vec(any::<u8>(), 0..30)),
            proptest::collection::vec(module(), 0..3),
            proptest::collection::vec(thread(mode), 0..3),
            proptest::collection::vec(
                (1u64 << 20..1u64 << 30, 0u64..10).prop_flat_map(move |(a, w)| region(mode, w * 8).prop_map(move |r| (a, r, w * 8))),
                0..3,
            ),
            proptest::collection::vec((1u32.., proptest::collection::vec(any::<u64>(), 0..8)), 0..5),
            proptest::collection::vec(alloc(mode), 0..20),
            (if mode == Mode::Compact { (0usize..40).boxed() } else { Just(0usize).boxed() }).prop_flat_map(dense),
            (
                prop_oneof![Just(0usize), Just(64), Just(256), Just(4096)],
                proptest::option::of((1u32..=64, any::<i32>(), any::<u32>(), any::<u64>(), any::<u32>())),
                proptest::option::of((1u32..=6, 1u64.., any::<u64>())),
                proptest::option::of((any::<u64>(), any::<u64>(), any::<u64>())),
            ),
            any::<u64>(),
        )
            .prop_map(
                move |(
                    (reason, pid),
                    (exe, cmdline),
                    modules,
                    threads,
                    statics,
                    sites,
                    allocs,
                    dense,
                    (batch, signal, limit, history),
                    pause_ns,
                )| {
                    MDump {
                        mode,
                        reason,
                        pid,
                        exe,
                        cmdline,
                        modules,
                        threads,
                        statics,
                        sites,
                        // Targets among every allocation of the dump, ALLOC ones first.
                        dense: {
                            let total = (allocs.len() + dense.len()) as u64;
                            dense
                                .into_iter()
                                .map(|mut a| {
                                    for l in &mut a.links {
                                        l.target %= total;
                                    }
                                    a
                                })
                                .collect()
                        },
                        allocs,
                        batch,
                        signal: signal.map(|(signal, code, tid, address, sender)| SignalInfo { signal, code, tid, address, sender }),
                        limit: limit.map(|(kind, bytes, used)| LimitInfo { kind, bytes, used }),
                        history: history.map(|(peak_bytes, total_allocations, total_bytes)| History {
                            peak_bytes,
                            total_allocations,
                            total_bytes,
                        }),
                        pause_ns,
                    }
                },
            )
    })
}

fn contents(mode: Mode, r: &MRegion) -> Contents<'_, std::iter::Copied<std::slice::Iter<'_, (u64, u64)>>> {
    match mode {
        Mode::Full => Contents::Full(&r.bytes),
        Mode::Compact => Contents::Compact { count: r.pointers.len() as u64, pointers: r.pointers.iter().copied() },
    }
}

pub fn write(d: &MDump) -> Vec<u8> {
    let mut buf = vec![0u8; 300];
    let header = Header::new(d.mode, d.reason, 4096, d.pid, 1_700_000_000_000_000_000);
    let mut w = Writer::new(Vec::new(), &mut buf, &header).unwrap();
    w.process(&ProcessInfo { backtrace: Backtrace::All, max_frames: 32, sample_mean: 0, exe: &d.exe, cmdline: &d.cmdline, flags: 0 })
        .unwrap();
    if let Some(s) = &d.signal {
        w.signal(s).unwrap();
    }
    if let Some(l) = &d.limit {
        w.limit(l).unwrap();
    }
    if let Some(h) = &d.history {
        w.history(h).unwrap();
    }
    for m in &d.modules {
        w.module(&ModuleInfo { bias: m.bias, path: &m.path, build_id: &m.build_id, segments: &m.segments }).unwrap();
    }
    for t in &d.threads {
        let info = ThreadInfo {
            tid: t.tid,
            flags: t.flags,
            stack_start: t.stack_start,
            stack_end: t.stack_start + t.size,
            tls: 0x1234,
            name: &t.name,
            regs: &t.regs,
        };
        w.thread(&info, contents(d.mode, &t.region)).unwrap();
    }
    for (address, r, size) in &d.statics {
        w.static_root(&StaticInfo { address: *address, size: *size, module: raw::NO_MODULE, name: b".data" }, contents(d.mode, r)).unwrap();
    }
    for (id, frames) in &d.sites {
        w.site(*id, frames).unwrap();
    }
    for a in &d.allocs {
        let info = AllocInfo {
            address: a.address,
            size: a.size,
            site: a.site,
            align_log2: a.align_log2,
            flags: a.flags,
            first_word: a.first_word,
        };
        w.alloc(&info, contents(d.mode, &a.region)).unwrap();
    }
    let mut batch = vec![0u8; d.batch];
    w.set_batch_buffer(&mut batch).unwrap();
    for a in &d.dense {
        let first_word = match a.first_word {
            FirstWord::Value(v) => v,
            FirstWord::FirstLink => 0xdead,
        };
        let info = AllocInfo { address: a.address, size: a.size, site: a.site, align_log2: a.align_log2, flags: a.flags, first_word };
        w.dense_alloc(&info, a.links.len() as u64, a.links.iter().copied()).unwrap();
    }
    let (bytes, n) = w.finish(d.pause_ns).unwrap();
    assert_eq!(n, bytes.len() as u64, "writer's byte count equals the bytes it emitted");
    bytes
}

fn mregion(c: ContentsRef<'_>) -> MRegion {
    match c {
        ContentsRef::Full(b) => MRegion { bytes: b.to_vec(), pointers: vec![] },
        ContentsRef::Compact { pointers: p, .. } => MRegion { bytes: vec![], pointers: p.collect() },
    }
}

/// Reads a dump back into the model; returns the model and the trailer.
pub fn read(bytes: &[u8]) -> Result<(MDump, Trailer), Error> {
    let dump = Dump::parse(bytes)?;
    let h = dump.header();
    let mut d = MDump {
        mode: h.mode,
        reason: h.reason,
        pid: h.pid,
        exe: vec![],
        cmdline: vec![],
        modules: vec![],
        threads: vec![],
        statics: vec![],
        sites: vec![],
        allocs: vec![],
        dense: vec![],
        batch: 0,
        signal: None,
        limit: None,
        history: None,
        pause_ns: 0,
    };
    let mut trailer = None;
    for r in dump.records() {
        match r?.1 {
            Record::Process(p) => {
                d.exe = p.exe.to_vec();
                d.cmdline = p.cmdline.to_vec();
            }
            Record::Module(m) => d.modules.push(MModule {
                bias: m.bias,
                path: m.path.to_vec(),
                build_id: m.build_id.to_vec(),
                segments: m.segments().collect(),
            }),
            Record::Thread(t) => d.threads.push(MThread {
                tid: t.tid,
                flags: t.flags,
                stack_start: t.stack_start,
                size: t.stack_end - t.stack_start,
                name: t.name.to_vec(),
                regs: t.regs().collect(),
                region: mregion(t.contents),
            }),
            Record::Static(s) => d.statics.push((s.address, mregion(s.contents), s.size)),
            Record::Site(s) => d.sites.push((s.id, s.frames().collect())),
            Record::Alloc(a) => d.allocs.push(MAlloc {
                address: a.address,
                size: a.size,
                site: a.site,
                align_log2: a.align_log2,
                flags: a.flags,
                first_word: a.first_word,
                region: mregion(a.contents),
            }),
            Record::Signal(s) => d.signal = Some(s),
            Record::Limit(l) => d.limit = Some(l),
            Record::History(h) => d.history = Some(h),
            Record::Allocs(a) => {
                for e in a.entries() {
                    let e = e?;
                    d.dense.push(MDense {
                        address: e.address,
                        size: e.size,
                        site: e.site,
                        align_log2: e.align_log2,
                        flags: e.flags,
                        first_word: e.first_word,
                        links: e.links.collect(),
                    });
                }
            }
            Record::End(t) => {
                d.pause_ns = t.pause_ns;
                trailer = Some(t);
            }
            Record::Unknown { .. } | Record::Allocator(_) | Record::SiteTotals(_) | Record::Memory(_) => {}
        }
    }
    Ok((d, trailer.expect("a complete read ends with the trailer")))
}
