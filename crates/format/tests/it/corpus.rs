//! The fuzz corpus (`fuzz/corpus/reader`) replayed as a regression test,
//! so what the fuzzer once found stays fixed without running the fuzzer.
//! `HEAPDUMP_WRITE_SEEDS=1` regenerates the hand-made seeds.

use crate::model;
use heapdump_format::*;
use std::path::PathBuf;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/reader")
}

#[test]
fn seeds_are_written_on_request() {
    if std::env::var_os("HEAPDUMP_WRITE_SEEDS").is_none() {
        return;
    }
    use proptest::strategy::{Strategy, ValueTree};
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    std::fs::create_dir_all(corpus_dir()).unwrap();
    for i in 0..8 {
        let d = model::dump().new_tree(&mut runner).unwrap().current();
        std::fs::write(corpus_dir().join(format!("seed-1.2-{i}-{}.hdump", d.mode.as_str())), model::write(&d)).unwrap();
    }
}

#[test]
fn every_corpus_file_reads_without_panic() {
    let Ok(dir) = std::fs::read_dir(corpus_dir()) else {
        panic!("fuzz corpus missing at {}", corpus_dir().display());
    };
    let mut n = 0;
    let mut valid = 0;
    let mut dense = 0;
    for e in dir {
        let bytes = std::fs::read(e.unwrap().path()).unwrap();
        n += 1;
        let Ok(d) = Dump::parse(&bytes) else { continue };
        let mut complete = false;
        for r in d.records() {
            match r {
                Ok((_, Record::End(_))) => complete = true,
                Ok((_, Record::Alloc(a))) => {
                    for (off, _) in a.contents.words(a.address) {
                        assert!(off + 8 <= a.size);
                    }
                }
                Ok((_, Record::Allocs(a))) => {
                    dense += 1;
                    for e in a.entries() {
                        let Ok(e) = e else { break };
                        assert!(e.links.clone().all(|l| l.offset + 8 <= e.size));
                    }
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
        valid += complete as usize;
    }
    assert!(n >= 8, "the corpus holds at least the eight seeds, found {n}");
    assert!(valid >= 8, "the eight seeds are complete valid dumps, {valid} were");
    assert!(dense >= 8, "the 1.2 seeds hold ALLOCS records, {dense} found");
}
