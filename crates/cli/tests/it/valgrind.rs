//! Leak reports checked against valgrind memcheck on the same programs.

use crate::common::*;
use std::path::Path;

/// (bytes, blocks) per class from valgrind's LEAK SUMMARY.
fn valgrind_summary(prog: &Path) -> [(u64, u64); 4] {
    let o = std::process::Command::new("valgrind")
        .args(["--leak-check=full", "--show-leak-kinds=all", "--run-libc-freeres=no", "--run-cxx-freeres=no"])
        .arg(prog)
        .output()
        .expect("valgrind is installed (scripts/test.sh installs it)");
    let err = String::from_utf8_lossy(&o.stderr);
    let mut out = [(0, 0); 4];
    let in_use_none = err.contains("All heap blocks were freed");
    for (i, name) in ["definitely lost:", "indirectly lost:", "possibly lost:", "still reachable:"].iter().enumerate() {
        match err.lines().find(|l| l.contains(name)) {
            Some(line) => {
                let rest = line.split(name).nth(1).unwrap();
                let nums: Vec<u64> = rest.split_whitespace().filter_map(|w| w.replace(',', "").parse().ok()).collect();
                out[i] = (nums[0], nums[1]);
            }
            None => assert!(in_use_none, "no {name} line in valgrind's output:\n{err}"),
        }
    }
    out
}

fn ours(dump: &Path) -> [(u64, u64); 4] {
    let j = json(&["leaks".as_ref(), "--json".as_ref(), dump.as_os_str()]);
    let get = |k: &str| (j[k]["bytes"].as_u64().unwrap(), j[k]["blocks"].as_u64().unwrap());
    [get("definitely_lost"), get("indirectly_lost"), get("possibly_lost"), get("still_reachable")]
}

fn compare(source: &str, flags: &[&str], mode: &str) {
    compare_adjusted(source, flags, mode, |_| {});
}

fn compare_adjusted(source: &str, flags: &[&str], mode: &str, adjust: impl Fn(&mut [(u64, u64); 4])) {
    let d = Scratch::new("vg");
    let prog = compile(&d, source, flags);
    let mut expected = valgrind_summary(&prog);
    adjust(&mut expected);
    let (o, dumps) = run_traced(&d.path("v.hdump"), &prog, &[], &["--mode", mode]);
    ok(&o);
    assert_eq!(
        ours(&dumps[0]),
        expected,
        "{source} ({mode}): heapdump vs valgrind as [definitely, indirectly, possibly, still reachable] (bytes, blocks)"
    );
}

#[test]
fn every_leak_kind_matches_valgrind() {
    compare("leaks.c", &["-O0"], "compact");
    compare("leaks.c", &["-O0"], "full");
}

#[test]
fn every_leak_kind_matches_valgrind_optimised() {
    compare("leaks.c", &["-O2"], "compact");
}

#[test]
fn lost_trees_match_valgrind() {
    compare("leaks_tree.c", &["-O0"], "compact");
    compare("leaks_tree.c", &["-O1"], "full");
}

#[test]
fn a_threaded_program_matches_valgrind() {
    // Joined threads leave their DTV (glibc's per-thread TLS vector) in
    // glibc's stack cache, pointed to from inside: possibly lost for both
    // tools. glibc sizes it by the number of TLS modules, and the preload
    // library is one more: 16 more bytes per DTV than under valgrind.
    compare_adjusted("threads.c", &["-O1", "-pthread"], "compact", |e| e[2].0 += 16 * e[2].1);
}
