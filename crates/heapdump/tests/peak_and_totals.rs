//! What was live at the peak, and the totals since the start, in a Rust
//! program with `Tracked` (#41): a 48 MiB buffer that lives briefly, then
//! a churn of exactly 100000 boxes each freed before the next allocation
//! (temporaries), then 1000 kept. The dump's SITE_TOTALS record has the
//! buffer's site with its 48 MiB at the peak though nothing of it is live,
//! and the churn's allocations and temporaries exactly.
//!
//! No libtest harness (`harness = false`: the reason is in Cargo.toml): `main`
//! lists the tests and runs them one at a time on the main thread; a test
//! missing from that list never runs.

mod common;

use heapdump_format::{Dump, Record, SiteTotal};
use std::alloc::System;

#[global_allocator]
static ALLOC: heapdump::Tracked<System> = heapdump::Tracked::new(System);

fn main() {
    common::run(&[("peak_and_totals_of_a_phase", peak_and_totals_of_a_phase), ("child_phases", child_phases)]);
}

#[inline(never)]
fn big_buffer() -> Vec<u8> {
    vec![1u8; 48 << 20]
}

#[inline(never)]
fn churn_one(i: u64) -> Box<[u64; 8]> {
    Box::new([i; 8])
}

#[inline(never)]
fn keep_one(i: u64) -> Box<[u64; 4]> {
    Box::new([i; 4])
}

/// The program: the phases, then a dump.
fn child_phases() {
    let b = big_buffer();
    assert_eq!(b[12345], 1);
    drop(b);
    let mut sum = 0;
    for i in 0..100_000 {
        let x = std::hint::black_box(churn_one(i));
        sum += x[0];
        drop(x);
    }
    let kept: Vec<Box<[u64; 4]>> = (0..1000).map(keep_one).collect::<Vec<_>>();
    std::hint::black_box((sum, &kept));
    let out = std::env::var("PEAK_DUMP").unwrap();
    heapdump::dump(&out, heapdump::Mode::Compact).unwrap();
}

fn peak_and_totals_of_a_phase() {
    let dir = common::scratch("peak");
    let out = dir.join("phases.hdump");
    let o = common::child("child_phases", &[("HEAPDUMP_BACKTRACE", "all"), ("HEAPDUMP_SIGNAL", "0"), ("PEAK_DUMP", out.to_str().unwrap())]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let bytes = std::fs::read(&out).unwrap();
    let dump = Dump::parse(&bytes).unwrap();
    let mut rows: Vec<SiteTotal> = Vec::new();
    let mut peak = 0;
    for r in dump.records() {
        if let (_, Record::SiteTotals(t)) = r.unwrap() {
            peak = t.peak_bytes;
            rows = t.rows().collect();
        }
    }
    assert!(peak >= 48 << 20, "the recorded peak holds the buffer: {peak}");
    // The buffer's site: 48 MiB, one block, at the peak; freed since.
    let buf = rows.iter().find(|r| r.bytes == 48 << 20).unwrap_or_else(|| panic!("{rows:?}"));
    assert_eq!((buf.allocations, buf.peak_count, buf.peak_bytes), (1, 1, 48 << 20), "{rows:?}");
    // The churn: exactly 100000 boxes of 64 bytes, every one a temporary.
    let churn = rows.iter().find(|r| r.allocations == 100_000).unwrap_or_else(|| panic!("{rows:?}"));
    assert_eq!((churn.bytes, churn.temporary), (6_400_000, 100_000), "{rows:?}");
    // Kept boxes are not temporaries.
    let kept = rows.iter().find(|r| r.allocations == 1000 && r.bytes == 32_000).unwrap_or_else(|| panic!("{rows:?}"));
    assert_eq!(kept.temporary, 0, "{rows:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
