//! Feeds arbitrary bytes to the reader: it must never panic, hang or
//! allocate, and everything it yields must be internally consistent.
#![no_main]

use heapdump_format::{ContentsRef, Dump, Record};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(dump) = Dump::parse(data) else { return };
    let mut last = 0u64;
    for r in dump.records() {
        let Ok((offset, rec)) = r else { break };
        assert!(offset >= last && offset < data.len() as u64);
        last = offset;
        match rec {
            Record::Alloc(a) => {
                for (off, _) in a.contents.words(a.address) {
                    assert!(off + 8 <= a.size);
                }
                if let ContentsRef::Full(b) = a.contents {
                    assert_eq!(b.len() as u64, a.size);
                }
            }
            Record::Thread(t) => {
                let _ = t.regs().count();
                for (off, _) in t.contents.words(t.stack_start) {
                    assert!(off + 8 <= t.stack_end - t.stack_start);
                }
            }
            Record::Module(m) => {
                let _ = m.segments().count();
            }
            Record::Site(s) => {
                let _ = s.frames().count();
            }
            Record::Static(s) => {
                for (off, _) in s.contents.words(s.address) {
                    assert!(off + 8 <= s.size);
                }
            }
            Record::Allocs(a) => {
                let mut prev = None;
                for e in a.entries() {
                    let Ok(e) = e else { break };
                    assert!(prev.is_none_or(|p| e.address > p));
                    prev = Some(e.address);
                    assert!(e.links.len() as u64 <= e.size / 8);
                    for l in e.links {
                        assert!(l.offset + 8 <= e.size);
                    }
                }
            }
            _ => {}
        }
    }
});
