use crate::model;
use heapdump_format::*;
use proptest::prelude::*;

/// Reads everything the reader will give; returns the records seen before
/// the first error and the error.
fn read_all(bytes: &[u8]) -> (usize, Option<Error>) {
    let d = match Dump::parse(bytes) {
        Ok(d) => d,
        Err(e) => return (0, Some(e)),
    };
    let mut n = 0;
    for r in d.records() {
        match r {
            Ok((_, Record::Allocs(a))) => {
                // The entries are checked as they are read.
                for e in a.entries() {
                    match e {
                        Ok(e) => assert!(e.links.clone().all(|l| l.offset + 8 <= e.size)),
                        Err(e) => return (n, Some(e)),
                    }
                }
                n += 1
            }
            Ok(_) => n += 1,
            Err(e) => return (n, Some(e)),
        }
    }
    (n, None)
}

fn sample() -> Vec<u8> {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    loop {
        let d = model::dump().new_tree(&mut runner).unwrap().current();
        if d.allocs.len() >= 5 && d.dense.len() >= 5 && d.batch > 0 && !d.threads.is_empty() && !d.modules.is_empty() {
            return model::write(&d);
        }
    }
}

#[test]
fn truncated_at_every_offset_is_a_truncation_with_an_intact_prefix() {
    let full = sample();
    let (all, err) = read_all(&full);
    assert!(err.is_none());
    for cut in 0..full.len() {
        let (n, err) = read_all(&full[..cut]);
        let err = err.unwrap_or_else(|| panic!("cut at {cut} of {} read without error", full.len()));
        if cut == 0 {
            assert_eq!(err, Error::NotADump);
            continue;
        }
        assert!(err.is_truncation(), "cut at {cut}: expected truncation, got {err}");
        assert!(err.offset() <= cut as u64, "cut at {cut}: error offset {} past the data", err.offset());
        assert!(n < all, "a truncated dump cannot yield the trailer");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Any single corrupted byte is detected: by the header checks, by the
    /// record checks, or by the trailer's checksum and counts.
    #[test]
    fn every_single_byte_corruption_is_detected(pos in any::<prop::sample::Index>(), xor in 1u8..) {
        let mut bytes = sample_cached().clone();
        let i = pos.index(bytes.len());
        bytes[i] ^= xor;
        let (_, err) = read_all(&bytes);
        prop_assert!(err.is_some(), "flip of byte {} by {:#x} went unnoticed", i, xor);
    }

    /// Random garbage never panics, and neither do many random flips.
    #[test]
    fn hostile_bytes_never_panic(mut bytes in proptest::collection::vec(any::<u8>(), 0..512), flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..32)) {
        let _ = read_all(&bytes);
        let mut d = sample_cached().clone();
        for (i, b) in flips {
            let i = i.index(d.len());
            d[i] = b;
        }
        let _ = read_all(&d);
        // A valid header followed by garbage.
        let mut g = d[..raw::FILE_HEADER_SIZE].to_vec();
        g.append(&mut bytes);
        let _ = read_all(&g);
    }
}

fn sample_cached() -> &'static Vec<u8> {
    static S: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    S.get_or_init(sample)
}

#[test]
fn huge_declared_lengths_are_rejected_without_allocating() {
    // A record claiming 2^64-1 bytes, and a compact alloc claiming 2^60 pointers.
    let mut v = sample_cached()[..raw::FILE_HEADER_SIZE].to_vec();
    v.extend_from_slice(&raw::tag::ALLOC.to_le_bytes());
    v.extend_from_slice(&u64::MAX.to_le_bytes());
    v.extend_from_slice(&[0; 64]);
    let (_, e) = read_all(&v);
    assert!(matches!(e, Some(Error::Truncated { offset: 32, .. })), "{e:?}");

    let mut buf = [0u8; 256];
    let mut w = Writer::new(Vec::new(), &mut buf, &Header::new(Mode::Compact, Reason::Api, 4096, 1, 0)).unwrap();
    let info = AllocInfo { address: 0x1000, size: 64, site: 0, align_log2: 3, flags: 0, first_word: 0 };
    w.alloc(&info, Contents::Compact { count: 0, pointers: std::iter::empty() }).unwrap();
    let (mut bytes, _) = w.finish(0).unwrap();
    // pointer count field: header 32 + record header 12 + fixed 24 + first word 8.
    let at = 32 + 12 + 24 + 8;
    bytes[at..at + 8].copy_from_slice(&(1u64 << 60).to_le_bytes());
    let (_, e) = read_all(&bytes);
    assert_eq!(e, Some(Error::Malformed { offset: 32, what: "pointer count disagrees with the record length" }));
}

#[test]
fn not_a_dump_and_future_versions_are_named() {
    assert_eq!(read_all(b"ELF\x7f not a dump at all, but long enough to have a header").1, Some(Error::NotADump));
    let mut v = sample_cached().clone();
    v[8] = 2;
    v[10] = 0;
    assert_eq!(read_all(&v).1, Some(Error::UnsupportedVersion { major: 2, minor: 0 }));
    assert_eq!(Error::UnsupportedVersion { major: 2, minor: 0 }.to_string(), "unsupported dump format version 2.0 (this reader reads 1.x)");
}

#[test]
fn unknown_records_are_skipped_but_checksummed() {
    // A record with a tag from the future, inserted before the trailer, is
    // skipped by this reader; since it is not one the writer produced, the
    // trailer's count and checksum give it away. Patch them to what a newer
    // writer would have produced and the dump reads cleanly.
    let base = sample_cached().clone();
    let d = Dump::parse(&base).unwrap();
    let end_at = d.records().find_map(|r| match r.unwrap() {
        (off, Record::End(_)) => Some(off as usize),
        _ => None,
    });
    let end_at = end_at.unwrap();
    let mut v = base[..end_at].to_vec();
    v.extend_from_slice(&0x7777u32.to_le_bytes());
    v.extend_from_slice(&5u64.to_le_bytes());
    v.extend_from_slice(b"hello");
    let mut trailer = base[end_at..].to_vec();
    let records = u64::from_le_bytes(trailer[12..20].try_into().unwrap()) + 1;
    trailer[12..20].copy_from_slice(&records.to_le_bytes());
    let crc = crc32(&[&v[..], &trailer[..trailer.len() - 8]].concat());
    trailer[12 + 64..12 + 68].copy_from_slice(&crc.to_le_bytes());
    v.extend_from_slice(&trailer);
    let d = Dump::parse(&v).unwrap();
    let unknown: Vec<_> = d
        .records()
        .map(|r| r.unwrap().1)
        .filter_map(|r| match r {
            Record::Unknown { tag, payload } => Some((tag, payload.to_vec())),
            _ => None,
        })
        .collect();
    assert_eq!(unknown, vec![(0x7777, b"hello".to_vec())]);
}

fn crc32(data: &[u8]) -> u32 {
    // Bitwise CRC-32 (IEEE), independent of the crate the writer uses.
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

#[test]
fn a_damaged_length_in_a_complete_dump_is_not_taken_for_truncation() {
    // Every record length of a complete dump, made to run past the end:
    // the trailer is still there, so this is damage, not a cut.
    let base = sample_cached().clone();
    let d = Dump::parse(&base).unwrap();
    let offsets: Vec<usize> = d.records().map(|r| r.unwrap().0 as usize).collect();
    for &off in &offsets[..offsets.len() - 1] {
        let mut v = base.clone();
        let past_the_end = (v.len() as u64).to_le_bytes();
        v[off + 4..off + 12].copy_from_slice(&past_the_end);
        let (_, e) = read_all(&v);
        assert_eq!(e, Some(Error::Malformed { offset: off as u64, what: "record length runs past the trailer" }), "record at {off}");
    }
    // Cut short, the same file is still a truncation.
    let (_, e) = read_all(&base[..base.len() - 1]);
    assert!(e.unwrap().is_truncation());
}

/// The counts a reader may size its tables from before walking the file:
/// those of the trailer when the file ends with one, nothing when it is
/// cut short (a cut that leaves a whole trailer's worth of bytes at the
/// end does not end with an END record).
#[test]
fn claimed_counts_are_the_trailers_or_nothing() {
    let full = sample();
    let d = Dump::parse(&full).unwrap();
    let trailer = d.records().filter_map(|r| match r {
        Ok((_, Record::End(t))) => Some(t),
        _ => None,
    });
    let t = trailer.last().unwrap();
    assert_eq!(d.claimed_counts(), Some((t.allocations, t.pointers)));
    assert!(t.allocations >= 5);
    for cut in [full.len() - 1, full.len() - 40, full.len() / 2] {
        assert_eq!(Dump::parse(&full[..cut]).unwrap().claimed_counts(), None, "cut at {cut}");
    }
}
