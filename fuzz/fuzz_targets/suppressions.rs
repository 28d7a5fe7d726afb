//! Feeds arbitrary text to the suppression parser (valgrind's and
//! LeakSanitizer's formats, `leaks --suppressions FILE`), then matches
//! what it accepted against stacks as deep as the runtime records (32
//! frames), some named by the input's own lines: it must never panic
//! and never take long, whatever the patterns (`...`, `*`).
#![no_main]

use heapdump_analyze::leaks::LeakKind;
use heapdump_analyze::suppress::{wildcard, Suppressions};
use heapdump_analyze::symbols::Frame;
use libfuzzer_sys::fuzz_target;

fn frame(i: usize, function: &str) -> Frame {
    Frame {
        address: 0x1000 + i as u64 * 16,
        function: Some(function.to_string()),
        module: Some(format!("/usr/lib/lib{}.so", i % 3)),
        ..Default::default()
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // The wildcard matcher alone: a pattern line against each other line.
    let lines: Vec<&str> = text.lines().take(8).collect();
    if let Some((p, rest)) = lines.split_first() {
        for t in rest {
            let _ = wildcard(p, t);
        }
    }
    let Ok(mut s) = Suppressions::parse(&text) else { return };
    const NAMES: [&str; 4] = ["malloc", "operator new(unsigned long)", "std::vector<int>::push_back(int const&)", "main"];
    let mut frames: Vec<Frame> = (0..32).map(|i| frame(i, NAMES[i % NAMES.len()])).collect();
    for (i, l) in text.lines().filter_map(|l| l.trim().strip_prefix("fun:")).take(32).enumerate() {
        frames[i] = frame(i, l);
    }
    for kind in [LeakKind::DefinitelyLost, LeakKind::IndirectlyLost, LeakKind::PossiblyLost, LeakKind::StillReachable] {
        let _ = s.matching(kind, &frames);
        let _ = s.matching(kind, &frames[..3]);
    }
    let counts = s.counts();
    let unused = s.unused();
    assert!(unused.len() <= counts.len());
});
