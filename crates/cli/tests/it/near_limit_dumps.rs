//! Near the memory limit: a program that grows until `malloc` fails under
//! `prlimit --as` (tests never create or change cgroups: the machines are
//! shared) is dumped when its address space first crosses the share asked,
//! before the allocation-failure dump; and tracing it does not take the
//! room the limit leaves it.

use crate::common::*;
use std::process::Command;

const LIMIT: u64 = 512 << 20;

fn prlimit_as() -> Command {
    let mut c = Command::new("prlimit");
    c.arg(format!("--as={LIMIT}")).arg("--");
    c
}

/// `heapdump run OPTIONS -o OUT -- PROGRAM ARGS` under the limit, the
/// program compiled from `source` (with `-O1 -g`), which must exit well:
/// its standard output, the run's standard error, and where it dumped.
fn run_limited(d: &Scratch, source: &str, options: &[&str], args: &[&str]) -> (String, String, std::path::PathBuf) {
    ensure_preload();
    let prog = compile(d, source, &["-O1", "-g"]);
    let out = d.path("d.hdump");
    let o = prlimit_as()
        .arg(env!("CARGO_BIN_EXE_heapdump"))
        .arg("run")
        .args(options)
        .arg("-o")
        .arg(&out)
        .arg("--")
        .arg(&prog)
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");
    (String::from_utf8_lossy(&o.stdout).into_owned(), err, out)
}

#[test]
fn a_program_growing_to_its_limit_is_dumped_at_the_share_asked() {
    let d = Scratch::new("near");
    let (_, err, _) = run_limited(&d, "near_limit.c", &["--near-limit", "60"], &[]);
    let dumps: Vec<(String, std::path::PathBuf)> = err
        .lines()
        .filter_map(|l| l.strip_prefix("heapdump: wrote "))
        .map(|l| {
            let (path, rest) = l.split_once(" (").unwrap();
            (rest.split(',').next().unwrap().to_string(), std::path::PathBuf::from(path))
        })
        .collect();
    let reasons: Vec<&str> = dumps.iter().map(|d| d.0.as_str()).collect();
    assert_eq!(reasons.first(), Some(&"near_limit"), "{err}");
    let failure = reasons.iter().position(|&r| r == "alloc_failure").unwrap_or_else(|| panic!("{err}"));
    let near = reasons[..failure].iter().filter(|&&r| r == "near_limit").count();
    assert!((2..=8).contains(&near), "{near} near-limit dumps before the failure, at 60% then half the headroom each: {err}");
    // The first at the share asked (the check comes every sixteenth of the
    // headroom the heap grows, and every 100 ms).
    let s = json(&["summary".as_ref(), "--json".as_ref(), dumps[0].1.as_os_str()]);
    assert_eq!(s["limit"]["kind"], "RLIMIT_AS", "{s}");
    assert_eq!(s["limit"]["bytes"], LIMIT, "{s}");
    let share = s["limit"]["used"].as_f64().unwrap() / LIMIT as f64;
    assert!((0.60..0.70).contains(&share), "dumped at {share:.3} of the limit: {s}");
    // The culprit is named: the growing site holds the memory.
    let top = json(&["top".as_ref(), "--json".as_ref(), dumps[0].1.as_os_str()]);
    assert!(top[0]["key"].as_str().unwrap().contains("grow"), "{top}");
    let retained = json(&["retained".as_ref(), "--json".as_ref(), dumps[0].1.as_os_str()]);
    assert!(retained[0]["site"].as_str().unwrap_or("").contains("grow"), "{retained}");
}

/// A program refused an allocation with no address space left at all
/// still gets its allocation-failure dump: the runtime held room back for
/// it (without it the dump could not map its index, and a program of 1
/// MiB blocks lost its dump about once in 12 runs).
#[test]
fn the_allocation_failure_dump_has_room_when_nothing_is_left() {
    let d = Scratch::new("noroom");
    let (stdout, err, out) = run_limited(&d, "no_room.c", &["--no-at-exit"], &[]);
    assert_eq!(stdout.trim(), "refused", "{err}");
    assert!(err.lines().any(|l| l.starts_with("heapdump: wrote ") && l.contains("(alloc_failure,")), "{err}");
    let top = json(&["top".as_ref(), "--json".as_ref(), out.as_os_str()]);
    assert!(top.as_array().unwrap().iter().any(|r| r["key"].as_str().unwrap_or("").contains("hold") && r["allocations"] == 100), "{top}");
}

#[test]
fn a_near_limit_dump_that_would_take_what_is_left_is_skipped_and_said() {
    // A million small blocks: a dump maps some 26 MB for them. Near the
    // end of the headroom that is more than half of what is left: the
    // dump is skipped (it would bring the program to its limit itself).
    let d = Scratch::new("skip");
    let (_, err, _) = run_limited(&d, "near_limit.c", &["--no-at-exit", "--near-limit", "50"], &["many"]);
    assert!(
        err.lines().any(|l| l.starts_with("heapdump: wrote ") && l.contains("(near_limit,")),
        "the first near-limit dump is taken: {err}"
    );
    assert!(err.contains("near_limit dump failed: skipped: the dump would take more than half the memory the limit leaves"), "{err}");
}

#[test]
fn tracing_leaves_a_program_the_room_its_address_space_limit_gives() {
    // The runtime's tables reserved the largest address ranges the kernel
    // would grant (halving until one fit): under a 512 MiB RLIMIT_AS the
    // traced program could grow to 53 MiB, against 507 untraced.
    ensure_preload();
    let d = Scratch::new("room");
    let prog = compile(&d, "near_limit.c", &["-O1"]);
    let mib = |o: std::process::Output| -> u64 { String::from_utf8_lossy(&o.stdout).trim().parse().unwrap() };
    let alone = mib(prlimit_as().arg(&prog).output().unwrap());
    let traced = mib(prlimit_as().arg(env!("CARGO_BIN_EXE_heapdump")).args(["run", "--no-at-exit", "--"]).arg(&prog).output().unwrap());
    assert!(alone > 400, "untraced: {alone} MiB");
    assert!(traced * 10 >= alone * 8, "traced: {traced} MiB, untraced: {alone} MiB");
}
