//! Leak reports checked against valgrind memcheck on the same programs.

use crate::common::*;
use std::path::Path;

/// (bytes, blocks) per class from valgrind's LEAK SUMMARY.
///
/// The program gets the environment `heapdump run` gives it (the same
/// variables, so glibc's `environ` array, which `setenv` reallocates, has
/// the same size under both tools; both add one `LD_PRELOAD`).
pub fn valgrind_summary(prog: &Path) -> [(u64, u64); 4] {
    valgrind_summary_args(prog, &[])
}

/// valgrind with the variables `heapdump run` sets.
fn valgrind() -> std::process::Command {
    let mut c = std::process::Command::new("valgrind");
    c.envs([
        ("HEAPDUMP_MODE", "compact"),
        ("HEAPDUMP_AT_EXIT", "1"),
        ("HEAPDUMP_FORK", "0"),
        ("HEAPDUMP_REPORT", "/dev/null"),
        ("HEAPDUMP_OUTPUT", "/dev/null"),
        ("HEAPDUMP_SIGNAL", "SIGUSR2"),
    ])
    .env_remove("HEAPDUMP_THRESHOLD")
    .env_remove("HEAPDUMP_BACKTRACE");
    c
}

pub fn valgrind_summary_args(prog: &Path, args: &[&str]) -> [(u64, u64); 4] {
    summary_of(valgrind(), prog, args)
}

/// valgrind's classes for `prog` with glibc's malloc and libstdc++ loaded,
/// as libjemalloc2 and libtcmalloc_minimal load it (its emergency
/// exception pool is a live block the program under them has too).
pub fn valgrind_summary_with_libstdcxx(prog: &Path) -> [(u64, u64); 4] {
    let mut v = valgrind();
    v.env("LD_PRELOAD", "libstdc++.so.6");
    summary_of(v, prog, &[])
}

fn summary_of(mut v: std::process::Command, prog: &Path, args: &[&str]) -> [(u64, u64); 4] {
    let o = v
        .args(["--leak-check=full", "--show-leak-kinds=all", "--run-libc-freeres=no", "--run-cxx-freeres=no"])
        .arg(prog)
        .args(args)
        .output()
        .expect("valgrind is installed (scripts/test.sh installs it)");
    let err = String::from_utf8_lossy(&o.stderr);
    let mut out = [(0, 0); 4];
    let in_use_none = err.contains("All heap blocks were freed");
    for (i, name) in ["definitely lost:", "indirectly lost:", "possibly lost:", "still reachable:"].iter().enumerate() {
        match summary_line(&err, name) {
            Some(c) => out[i] = c,
            None => assert!(in_use_none, "no {name} line in valgrind's output:\n{err}"),
        }
    }
    out
}

pub fn ours(dump: &Path) -> [(u64, u64); 4] {
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

/// How many more environment variables a program gets under `heapdump
/// run` than under valgrind (which adds its own: GLIBCXX_FORCE_NEW, …),
/// counted with env(1) under both.
fn extra_variables_under_run() -> i64 {
    let d = Scratch::new("envcount");
    let vg = valgrind().args(["-q", "/usr/bin/env"]).output().unwrap();
    let (o, _) = run_traced(&d.path("e.hdump"), Path::new("/usr/bin/env"), &[], &["--no-at-exit"]);
    let count = |b: &[u8]| String::from_utf8_lossy(b).lines().count() as i64;
    count(&o.stdout) - count(&vg.stdout)
}

#[test]
fn setenv_in_the_program_matches_valgrind() {
    // A runtime that calls setenv() at start-up makes glibc keep the root
    // of its variable tree in an untracked block, and the program's own
    // nodes come out lost (24 B definitely + 24 B possibly lost). glibc's environ
    // array, reallocated by the first setenv, holds one pointer per
    // variable: its size differs by the variables each tool adds.
    let extra = extra_variables_under_run();
    for mode in ["compact", "full"] {
        compare_adjusted("setenv.c", &["-O0"], mode, |e| e[3].0 = (e[3].0 as i64 + 8 * extra) as u64);
    }
}

#[test]
fn a_list_leaked_by_an_ended_thread_is_lost() {
    // glibc caches an ended thread's stack; scanned as a root, it would
    // leave the list still reachable. The DTV difference is the one
    // of `a_threaded_program_matches_valgrind`.
    for mode in ["compact", "full"] {
        compare_adjusted("dead_thread.c", &["-O0", "-pthread"], mode, |e| e[2].0 += 16 * e[2].1);
    }
}

#[test]
fn a_map_leaked_in_a_std_thread_is_lost() {
    for mode in ["compact", "full"] {
        compare_adjusted("thread_map.cpp", &["-O1", "-pthread"], mode, |e| e[2].0 += 16 * e[2].1);
    }
}

#[test]
fn a_pool_merged_with_a_mapped_block_is_scanned() {
    // The program checks that glibc's mapping of its 1 MiB block and its
    // own pool are adjacent (exit 2 if not): the kernel merges them, and
    // skipping the merged mapping whole would leave the 100 blocks only
    // the pool points to definitely lost.
    for mode in ["compact", "full"] {
        compare("anon_pool.c", &["-O0"], mode);
    }
}

#[test]
fn a_dump_written_by_format_1_1_is_still_read() {
    // tests/data/leaks_tree-1.1-compact.hdump: `heapdump run --mode compact`
    // of leaks_tree.c (-O0) by the runtime of format 1.1, whose compact
    // dumps held one ALLOC record per allocation (1.2 writes ALLOCS). Its
    // leak classes are valgrind's on the same program, built here.
    let old = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/leaks_tree-1.1-compact.hdump");
    let bytes = std::fs::read(&old).unwrap();
    assert_eq!((u16::from_le_bytes([bytes[8], bytes[9]]), u16::from_le_bytes([bytes[10], bytes[11]])), (1, 1), "a 1.1 dump");
    let d = Scratch::new("old-format");
    let prog = compile(&d, "leaks_tree.c", &["-O0"]);
    assert_eq!(ours(&old), valgrind_summary(&prog), "[definitely, indirectly, possibly, still reachable] (bytes, blocks)");
}

#[test]
fn allocations_since_start_match_valgrinds_totals() {
    // summary's total_allocations and total_bytes (format 1.2's HISTORY
    // record) against valgrind's "total heap usage: N allocs, F frees, B
    // bytes allocated", for a single-threaded and a threaded program.
    // Each thread's TLS vector (glibc's DTV, a calloc at thread start) has
    // one more slot under `heapdump run`: the preload library is a TLS
    // module. 16 bytes more per thread the program starts (4 in threads.c).
    for (source, flags, dtv) in [("leaks.c", &["-O0"][..], 0), ("threads.c", &["-O1", "-pthread"][..], 4 * 16)] {
        let d = Scratch::new("totals");
        let prog = compile(&d, source, flags);
        let o = valgrind().args(["--run-libc-freeres=no", "--run-cxx-freeres=no"]).arg(&prog).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        let line = err.lines().find(|l| l.contains("total heap usage:")).unwrap_or_else(|| panic!("{err}"));
        let nums: Vec<u64> =
            line.split("usage:").nth(1).unwrap().split_whitespace().filter_map(|w| w.replace(',', "").parse().ok()).collect();
        let (allocs, bytes) = (nums[0], nums[2]);
        let (out, dumps) = run_traced(&d.path("t.hdump"), &prog, &[], &[]);
        ok(&out);
        let s = json(&["summary".as_ref(), "--json".as_ref(), dumps[0].as_os_str()]);
        assert_eq!(
            (s["total_allocations"].as_u64(), s["total_bytes"].as_u64()),
            (Some(allocs), Some(bytes + dtv)),
            "{source}: {line}\n{s}"
        );
        let peak = s["peak_bytes"].as_u64().unwrap();
        assert!(peak >= s["bytes"].as_u64().unwrap() && peak <= bytes, "{source}: peak {peak}: {s}");
    }
}

/// valgrind's LEAK SUMMARY with a suppression file: the four classes and
/// the suppressed line, (bytes, blocks) each.
fn valgrind_suppressed(prog: &Path, supp: &Path) -> [(u64, u64); 5] {
    let o = valgrind()
        .args(["--leak-check=full", "--show-leak-kinds=all", "--run-libc-freeres=no", "--run-cxx-freeres=no"])
        .arg(format!("--suppressions={}", supp.display()))
        .arg(prog)
        .output()
        .expect("valgrind is installed (scripts/test.sh installs it)");
    let err = String::from_utf8_lossy(&o.stderr);
    let mut out = [(0, 0); 5];
    for (i, name) in ["definitely lost:", "indirectly lost:", "possibly lost:", "still reachable:", "suppressed:"].iter().enumerate() {
        out[i] = summary_line(&err, name).unwrap_or_else(|| panic!("no {name} in:\n{err}"));
    }
    out
}

/// (bytes, blocks) of valgrind's summary line `name`.
fn summary_line(err: &str, name: &str) -> Option<(u64, u64)> {
    let line = err.lines().filter(|l| l.contains("==")).find(|l| l.contains(name))?;
    let nums: Vec<u64> = line.split(name).nth(1)?.split_whitespace().filter_map(|w| w.replace(',', "").parse().ok()).collect();
    Some((*nums.first()?, *nums.get(1)?))
}

#[test]
fn suppressions_match_valgrinds_and_say_which_matched_nothing() {
    let (d, dump) = traced("supp", "leaks.c", &["-O0", "-g"]);
    let prog = d.path("leaks");
    // valgrind's format, with a wildcard and `...`: every block calloc'd
    // in `make` that is definitely or indirectly lost (the list head, its
    // two nodes, the cycle); then one that matches nothing.
    let supp = d.path("leaks.supp");
    std::fs::write(
        &supp,
        "# two suppressions\n{\n   lists-made-in-make\n   Memcheck:Leak\n   match-leak-kinds: definite,indirect\n   fun:c*lloc\n   ...\n   fun:make\n}\n\
         {\n   gone-long-ago\n   Memcheck:Leak\n   fun:malloc\n   fun:no_such_function\n}\n",
    )
    .unwrap();
    let vg = valgrind_suppressed(&prog, &supp);
    let j = json(&["leaks".as_ref(), "--json".as_ref(), "--suppressions".as_ref(), supp.as_os_str(), dump.as_os_str()]);
    let get = |k: &str| (j[k]["bytes"].as_u64().unwrap(), j[k]["blocks"].as_u64().unwrap());
    let mine = [get("definitely_lost"), get("indirectly_lost"), get("possibly_lost"), get("still_reachable"), get("suppressed")];
    assert_eq!(mine, vg, "heapdump vs valgrind with suppressions: [definite, indirect, possible, reachable, suppressed]");
    assert!(vg[4].1 >= 5, "the suppression matched the lists: {vg:?}");
    assert_eq!(j["unused_suppressions"], serde_json::json!(["gone-long-ago"]));
    let groups = j["groups"].as_array().unwrap();
    assert!(groups.iter().all(|g| g["bytes"] != 48 || g["kind"] != "definitely_lost"), "suppressed groups are not listed: {groups:?}");
    // The text says it too.
    let o = heapdump().args(["leaks", "--suppressions"]).arg(&supp).arg(&dump).output().unwrap();
    let text = ok(&o);
    assert!(text.contains(&format!("suppressed: {} bytes in {} blocks", vg[4].0, vg[4].1)), "{text}");
    assert!(text.contains("unused suppressions (they matched nothing): gone-long-ago"), "{text}");
    // LeakSanitizer's format: `leak:make` takes every lost block of `make`.
    let lsan = d.path("lsan.supp");
    std::fs::write(&lsan, "leak:make\nleak:^never_called$\n").unwrap();
    let j = json(&["leaks".as_ref(), "--json".as_ref(), "--suppressions".as_ref(), lsan.as_os_str(), dump.as_os_str()]);
    let lost: u64 = ["definitely_lost", "indirectly_lost", "possibly_lost"].iter().map(|k| j[k]["blocks"].as_u64().unwrap()).sum();
    assert_eq!(lost, 0, "every lost block was allocated in make: {j}");
    assert_eq!(j["unused_suppressions"], serde_json::json!(["^never_called$"]));
    // A damaged file: one line, exit 2, which line.
    let bad = d.path("bad.supp");
    std::fs::write(&bad, "{\n   x\n   Memcheck:Leak\n   fun:malloc\n   bogus line\n}\n").unwrap();
    let o = heapdump().args(["leaks", "--suppressions"]).arg(&bad).arg(&dump).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.lines().count() == 1 && err.contains("bad.supp: line 5"), "{err}");
}

#[test]
fn leaks_kind_lists_the_groups_of_one_kind() {
    let (_d, dump) = traced("kind", "leaks.c", &["-O0", "-g"]);
    for (kind, key) in
        [("definite", "definitely_lost"), ("indirect", "indirectly_lost"), ("possible", "possibly_lost"), ("reachable", "still_reachable")]
    {
        let j = json(&[
            "leaks".as_ref(),
            "--json".as_ref(),
            "--kind".as_ref(),
            kind.as_ref(),
            "-n".as_ref(),
            "1000".as_ref(),
            dump.as_os_str(),
        ]);
        let groups = j["groups"].as_array().unwrap();
        assert!(!groups.is_empty(), "{kind}: leaks.c has blocks of every kind");
        assert!(groups.iter().all(|g| g["kind"] == key), "{kind}: {groups:?}");
        // The groups add up to the class (indirect bytes counted with
        // their leaders only when definite ones are listed).
        let direct: u64 = groups.iter().map(|g| g["bytes"].as_u64().unwrap()).sum();
        assert_eq!(direct, j[key]["bytes"].as_u64().unwrap(), "{kind}");
    }
}
