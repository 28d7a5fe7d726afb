use crate::model::{self, MDump};
use heapdump_format::*;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Whatever heap is written comes back equal, in both modes, and the
    /// trailer's totals describe it.
    #[test]
    fn write_then_read_is_identity(d in model::dump()) {
        let bytes = model::write(&d);
        let (back, trailer) = model::read(&bytes).unwrap();
        prop_assert_eq!(&back.dense, &d.dense);
        prop_assert_eq!(&back, &MDump { batch: back.batch, ..d.clone() });
        prop_assert_eq!(trailer.allocations, (d.allocs.len() + d.dense.len()) as u64);
        prop_assert_eq!(trailer.alloc_bytes, d.allocs.iter().chain([]).map(|a| a.size).sum::<u64>() + d.dense.iter().map(|a| a.size).sum::<u64>());
        prop_assert_eq!(trailer.pointers, d.allocs.iter().map(|a| a.region.pointers.len() as u64).sum::<u64>() + d.dense.iter().map(|a| a.links.len() as u64).sum::<u64>());
        prop_assert_eq!(trailer.threads as usize, d.threads.len());
        prop_assert_eq!(trailer.statics as usize, d.statics.len());
        prop_assert_eq!(trailer.modules as usize, d.modules.len());
        prop_assert_eq!(trailer.sites as usize, d.sites.len());
    }
}

#[test]
fn header_fields_round_trip() {
    let mut buf = [0u8; 512];
    let h = Header::new(Mode::Compact, Reason::Threshold, 16384, 777, 123_456_789);
    let w = Writer::new(Vec::new(), &mut buf, &h).unwrap();
    let (bytes, _) = w.finish(5).unwrap();
    let d = Dump::parse(&bytes).unwrap();
    assert_eq!(*d.header(), h);
    let recs: Vec<_> = d.records().collect::<Result<_, _>>().unwrap();
    assert_eq!(recs.len(), 1);
    assert!(matches!(recs[0].1, Record::End(Trailer { pause_ns: 5, .. })));
}

#[test]
fn large_contents_bypass_the_staging_buffer_intact() {
    // Contents far larger than the staging buffer go straight to the sink;
    // the checksum must still cover them in order.
    let mut buf = [0u8; 256];
    let big: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut w = Writer::new(Vec::new(), &mut buf, &Header::new(Mode::Full, Reason::Api, 4096, 1, 0)).unwrap();
    for i in 0..3u64 {
        let info = AllocInfo { address: 0x10000 + i * 0x100000, size: big.len() as u64, site: 0, align_log2: 4, flags: 0, first_word: 0 };
        w.alloc(&info, Contents::full(&big)).unwrap();
    }
    let (bytes, _) = w.finish(0).unwrap();
    let d = Dump::parse(&bytes).unwrap();
    let mut n = 0;
    for r in d.records() {
        if let Record::Alloc(a) = r.unwrap().1 {
            match a.contents {
                ContentsRef::Full(b) => assert_eq!(b, &big[..]),
                ContentsRef::Compact { .. } => panic!("full dump yielded compact contents"),
            }
            n += 1;
        }
    }
    assert_eq!(n, 3);
}

#[test]
fn writer_rejects_contents_that_disagree_with_the_record() {
    let mut buf = [0u8; 256];
    let mut w = Writer::new(Vec::new(), &mut buf, &Header::new(Mode::Compact, Reason::Api, 4096, 1, 0)).unwrap();
    let info = AllocInfo { address: 0x1000, size: 64, site: 0, align_log2: 3, flags: 0, first_word: 0 };
    // Full contents in a compact dump.
    assert_eq!(w.alloc(&info, Contents::full(&[0; 64])), Err(WriteError::ModeMismatch));
    // An iterator yielding fewer pairs than declared poisons the writer.
    let r = w.alloc(&info, Contents::Compact { count: 3, pointers: [(0u64, 1u64)].into_iter() });
    assert_eq!(r, Err(WriteError::LengthMismatch { what: "fewer pointers than declared" }));
    assert_eq!(w.site(1, &[1]), Err(WriteError::Poisoned));
    assert!(w.finish(0).is_err());
}

#[test]
fn disk_full_is_reported_as_enospc() {
    use std::os::fd::AsRawFd;
    let f = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let mut buf = [0u8; 4096];
    let mut w = Writer::new(FdSink::new(f.as_raw_fd()), &mut buf, &Header::new(Mode::Full, Reason::Api, 4096, 1, 0)).unwrap();
    let big = vec![0u8; 1 << 16];
    let info = AllocInfo { address: 0x1000, size: big.len() as u64, site: 0, align_log2: 3, flags: 0, first_word: 0 };
    let err = w.alloc(&info, Contents::full(&big)).unwrap_err();
    assert_eq!(err, WriteError::Sink { errno: libc_enospc() });
    assert_eq!(err.to_string(), "write failed: no space left on device (errno 28)");
}

fn libc_enospc() -> i32 {
    28
}

#[test]
fn fd_sink_writes_everything_through_a_pipe() {
    // A pipe accepts at most its capacity per write: short writes must be continued.
    let mut fds = [0i32; 2];
    // SAFETY: fds has room for the two descriptors pipe(2) writes.
    assert_eq!(unsafe { pipe(fds.as_mut_ptr()) }, 0);
    let reader = std::thread::spawn(move || {
        use std::io::Read;
        use std::os::fd::FromRawFd;
        // SAFETY: fds[0] is a fresh descriptor owned by this thread from now on.
        let mut f = unsafe { std::fs::File::from_raw_fd(fds[0]) };
        let mut v = Vec::new();
        f.read_to_end(&mut v).unwrap();
        v
    });
    let data: Vec<u8> = (0..1_000_000u32).map(|i| i as u8).collect();
    let mut sink = FdSink::new(fds[1]);
    sink.write_all(&data).unwrap();
    // SAFETY: fds[1] is ours and no longer used.
    unsafe { close(fds[1]) };
    assert_eq!(reader.join().unwrap(), data);
}

extern "C" {
    fn pipe(fds: *mut i32) -> i32;
    fn close(fd: i32) -> i32;
}

/// An entry too large for the batch buffer, written with its links'
/// encoded length given, is the same bytes as when the writer measures
/// them; a length or a count the links disagree with poisons the writer.
#[test]
fn a_large_entry_told_its_length_is_written_alike() {
    let info = AllocInfo { address: 0x10_0000, size: 8 * 5000, site: 7, align_log2: 3, flags: 0, first_word: 0 };
    let links: Vec<Link> =
        (0..5000u64).filter(|k| k % 3 != 1).map(|k| Link { offset: 8 * k, target: (k * 7919) % 4000, delta: k % 5 }).collect();
    let count = links.len() as u64;
    let (mut next, mut len) = (0u64, 0u64);
    for l in &links {
        len += l.encoded_len(next, 0);
        next = l.offset + 8;
    }
    let write = |given: Option<u64>, count: u64| {
        let (mut buf, mut batch) = ([0u8; 4096], [0u8; 1024]);
        let mut w = Writer::new(Vec::new(), &mut buf, &Header::new(Mode::Compact, Reason::Api, 4096, 1, 0)).unwrap();
        w.set_batch_buffer(&mut batch).unwrap();
        let r = w.dense_alloc_sized(&info, count, given, links.iter().copied());
        (r, w.finish(0).map(|(b, _)| b))
    };
    let (r, measured) = write(None, count);
    r.unwrap();
    let (r, told) = write(Some(len), count);
    r.unwrap();
    let measured = measured.unwrap();
    assert_eq!(told.unwrap(), measured, "the same bytes, told or measured");
    // Encoded apart (by another thread, in the runtime), then written.
    let mut enc = LinkEncoder::new(0, info.size);
    let mut out = vec![0u8; 64 << 10];
    for l in &links {
        assert!(enc.push(&mut out, l).unwrap());
    }
    assert_eq!((enc.count(), enc.len() as u64), (count, len));
    let (mut buf, mut batch) = ([0u8; 4096], [0u8; 1024]);
    let mut w = Writer::new(Vec::new(), &mut buf, &Header::new(Mode::Compact, Reason::Api, 4096, 1, 0)).unwrap();
    w.set_batch_buffer(&mut batch).unwrap();
    // Another allocation's encoding is refused.
    assert!(w.dense_alloc_encoded(&AllocInfo { size: 8, ..info }, &enc, &out[..enc.len()]).is_err());
    w.dense_alloc_encoded(&info, &enc, &out[..enc.len()]).unwrap();
    assert_eq!(w.finish(0).unwrap().0, measured, "the same bytes, encoded apart");
    // Out of order: refused, nothing written; no room: false.
    let before = enc.len();
    assert!(enc.push(&mut out, &links[0]).is_err());
    assert_eq!(enc.len(), before);
    let mut small = LinkEncoder::new(0, info.size);
    assert_eq!(small.push(&mut [0u8; 4], &links[0]), Ok(false));
    let d = Dump::parse(&measured).unwrap();
    let entries: Vec<DenseAlloc> = d
        .records()
        .filter_map(|r| match r.unwrap().1 {
            Record::Allocs(a) => Some(a.entries().map(|e| e.unwrap()).collect::<Vec<_>>()),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].links.collect::<Vec<_>>(), links);
    for (given, count) in [(Some(len - 1), count), (Some(len + 1), count), (Some(len), count + 1), (Some(len), count - 1)] {
        let (r, finished) = write(given, count);
        assert!(matches!(r, Err(WriteError::LengthMismatch { .. })), "{given:?} {count}: {r:?}");
        assert!(finished.is_err(), "a poisoned writer does not finish");
    }
}

/// Allocations encoded apart (as the runtime's scanning helper does) and
/// written as records of their own between ones the writer gathered read
/// back as the same allocations, ordinals and pointers as when the writer
/// gathers them all; out of order, they are refused.
#[test]
fn allocations_encoded_apart_read_back_alike() {
    let alloc = |i: u64| AllocInfo {
        address: 0x10_0000 + 0x40 * i,
        size: 48,
        site: (i % 3) as u32,
        align_log2: 4,
        flags: 0,
        first_word: i * 0x1111,
    };
    let links =
        |i: u64| -> Vec<Link> { (0..i % 4).map(|k| Link { offset: 8 * k, target: (i * 31 + k * 7) % 100, delta: k % 2 * 8 }).collect() };
    let read = |bytes: &[u8]| -> Vec<(u64, u64, FirstWord, Vec<Link>)> {
        let d = Dump::parse(bytes).unwrap();
        d.records()
            .filter_map(|r| match r.unwrap().1 {
                Record::Allocs(a) => {
                    Some(a.entries().map(|e| e.unwrap()).map(|e| (e.address, e.size, e.first_word, e.links.collect())).collect::<Vec<_>>())
                }
                _ => None,
            })
            .flatten()
            .collect()
    };
    let header = Header::new(Mode::Compact, Reason::Api, 4096, 1, 0);
    // All gathered by the writer.
    let (mut buf, mut batch) = ([0u8; 4096], [0u8; 512]);
    let mut w = Writer::new(Vec::new(), &mut buf, &header).unwrap();
    w.set_batch_buffer(&mut batch).unwrap();
    for i in 0..100 {
        w.dense_alloc(&alloc(i), i % 4, links(i).into_iter()).unwrap();
    }
    let (whole, _) = w.finish(0).unwrap();
    // 0..30 gathered, 30..70 encoded apart (two runs, the first cut where
    // its buffer is full), 70..100 gathered.
    let (mut buf, mut batch) = ([0u8; 4096], [0u8; 512]);
    let mut w = Writer::new(Vec::new(), &mut buf, &header).unwrap();
    w.set_batch_buffer(&mut batch).unwrap();
    for i in 0..30 {
        w.dense_alloc(&alloc(i), i % 4, links(i).into_iter()).unwrap();
    }
    let mut i = 30;
    while i < 70 {
        let mut out = [0u8; 700];
        let mut enc = DenseEncoder::new(i);
        while i < 70 && enc.push(&mut out, &alloc(i), &links(i)).unwrap() {
            i += 1;
        }
        let e = enc.encoded();
        assert!(e.count > 0);
        // Not the next ordinal: refused, nothing written.
        let wrong = Encoded { first: e.first + 1, ..e };
        assert!(w.allocs_encoded(&wrong, &out[..e.len]).is_err());
        w.allocs_encoded(&e, &out[..e.len]).unwrap();
    }
    for i in 70..100 {
        w.dense_alloc(&alloc(i), i % 4, links(i).into_iter()).unwrap();
    }
    // Behind the last one written: refused.
    let mut out = [0u8; 100];
    let mut enc = DenseEncoder::new(100);
    assert!(enc.push(&mut out, &alloc(5), &[]).unwrap());
    assert!(w.allocs_encoded(&enc.encoded(), &out[..enc.encoded().len]).is_err());
    let (apart, _) = w.finish(0).unwrap();
    let (a, b) = (read(&whole), read(&apart));
    assert_eq!(a.len(), 100);
    assert_eq!(a, b);
    // A pointer outside its allocation is refused by the encoder.
    let mut enc = DenseEncoder::new(0);
    assert!(enc.push(&mut out, &alloc(1), &[Link { offset: 48, target: 0, delta: 0 }]).is_err());
    assert_eq!(enc.encoded().count, 0);
}

#[test]
fn site_totals_round_trip_and_a_short_record_is_malformed() {
    let mut buf = [0u8; 512];
    let h = Header::new(Mode::Compact, Reason::Exit, 4096, 7, 1);
    let rows = [
        SiteTotal { site: 1, allocations: 100_000, bytes: 6_400_000, temporary: 100_000, peak_count: 0, peak_bytes: 0 },
        SiteTotal { site: 33, allocations: 1, bytes: 48 << 20, temporary: 1, peak_count: 1, peak_bytes: 48 << 20 },
    ];
    let mut w = Writer::new(Vec::new(), &mut buf, &h).unwrap();
    // Three announced, two given: the third is padding, left out on reading.
    w.site_totals(49 << 20, 123, 3, |put| {
        for r in &rows {
            put(r).unwrap();
        }
    })
    .unwrap();
    let (bytes, _) = w.finish(0).unwrap();
    let d = Dump::parse(&bytes).unwrap();
    let got: Vec<_> = d.records().collect::<Result<_, _>>().unwrap();
    let Record::SiteTotals(t) = got[0].1 else { panic!("{:?}", got[0].1) };
    assert_eq!((t.peak_bytes, t.peak_time_ns), (49 << 20, 123));
    assert_eq!(t.rows().collect::<Vec<_>>(), rows);
    // A row cut short: the record's length disagrees with its count.
    let mut cut = bytes.clone();
    let at = raw::FILE_HEADER_SIZE + 4;
    let len = u64::from_le_bytes(cut[at..at + 8].try_into().unwrap());
    cut[at..at + 8].copy_from_slice(&(len - 8).to_le_bytes());
    cut.drain(raw::FILE_HEADER_SIZE + 12 + len as usize - 8..raw::FILE_HEADER_SIZE + 12 + len as usize);
    let err = Dump::parse(&cut).unwrap().records().find_map(|r| r.err()).expect("an error");
    assert!(err.to_string().contains("SITE_TOTALS"), "{err}");
}

#[test]
fn memory_round_trips_and_a_short_record_is_malformed() {
    let mut buf = [0u8; 512];
    let h = Header::new(Mode::Compact, Reason::Exit, 4096, 7, 1);
    let mut w = Writer::new(Vec::new(), &mut buf, &h).unwrap();
    w.memory(&MemoryInfo { resident_anon: 64 << 20 }).unwrap();
    let (bytes, _) = w.finish(0).unwrap();
    let d = Dump::parse(&bytes).unwrap();
    let got: Vec<_> = d.records().collect::<Result<_, _>>().unwrap();
    let Record::Memory(m) = got[0].1 else { panic!("{:?}", got[0].1) };
    assert_eq!(m, MemoryInfo { resident_anon: 64 << 20 });
    // Four bytes short: the record's length is not the MEMORY payload's.
    let mut cut = bytes.clone();
    let at = raw::FILE_HEADER_SIZE + 4;
    cut[at..at + 8].copy_from_slice(&4u64.to_le_bytes());
    cut.drain(raw::FILE_HEADER_SIZE + 12 + 4..raw::FILE_HEADER_SIZE + 12 + 8);
    let err = Dump::parse(&cut).unwrap().records().find_map(|r| r.err()).expect("an error");
    assert!(err.to_string().contains("MEMORY"), "{err}");
}
