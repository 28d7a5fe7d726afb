//! Statically linked programs taken from outside (`heapdump attach`,
//! `heapdump core`): glibc's malloc is in the executable itself (`gcc
//! -static`, `gcc -static-pie`), found there by glibc's banner or, in a
//! program that never asks glibc its version (most), by its tunables, its
//! version then inferred from the strings glibc links in, and walked with
//! every check a libc.so.6 gets. Strings that are missing, contradict each
//! other or name a glibc outside 2.30 to 2.41 are refused in one line, as
//! are musl programs, naming musl.
//!
//! valgrind cannot intercept malloc in a static program (it reports no
//! allocation at all): the classes are checked against valgrind on the
//! same program built dynamically (which attach_and_core.rs also
//! captures with attach), less what only a static program allocates
//! (glibc's start-up of a static program keeps its loader's lists in
//! blocks of the heap, which ld.so keeps outside it).

use crate::common::*;
use crate::valgrind::{ours, valgrind_summary};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `heapdump attach PID --mode MODE -o OUT`.
fn attach(pid: i32, out: &Path, mode: &str) -> Output {
    heapdump().args(["attach", &pid.to_string(), "--mode", mode, "-o"]).arg(out).output().unwrap()
}

/// gcore's core file of `pid`, then `heapdump core CORE -o OUT`.
fn gcore_then_core(d: &Scratch, pid: i32, out: &Path) -> Output {
    let core = d.path("core");
    let o = Command::new("gcore").arg("-o").arg(&core).arg(pid.to_string()).output().expect("gcore (gdb) is installed");
    ok(&o);
    let core = PathBuf::from(format!("{}.{pid}", core.display()));
    heapdump().arg("core").arg(&core).arg("-o").arg(out).output().unwrap()
}

/// The still reachable blocks of `dump` that glibc's start-up of a static
/// program allocated: reached first from its loader's data in the
/// executable (`_dl_main_map`, `_dl_init_all_dirs`, `__rtld_search_dirs`,
/// `_dlfo_nodelete_mappings`, …), which a dynamic program's ld.so keeps
/// in memory of its own, outside the heap.
fn startup_blocks(dump: &Path, exe: &Path) -> usize {
    let mut n = 0;
    for (a, _) in blocks(dump) {
        let o = heapdump().arg("path").arg(dump).arg(format!("{a:#x}")).arg("--json").output().unwrap();
        if !o.status.success() {
            continue; // lost: no path from a root
        }
        let hops: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let from = hops[0]["from"].as_str().unwrap_or("");
        let loader = ["static _dl", "static __rtld", "static _dlfo"].iter().any(|p| from.starts_with(p));
        if loader && from.contains(&format!(" in {} ", exe.display())) {
            n += 1;
        }
    }
    n
}

/// The classes of a static program's dump against valgrind's of the same
/// program (`dynamic`: of its dynamic build): lost blocks exactly, their
/// bytes between the sizes asked for and those rounded up to glibc's
/// usable sizes; still reachable blocks exactly, once glibc's static
/// start-up's own are set aside when valgrind saw the dynamic build. The
/// possibly lost blocks' bytes are not compared: one is the running
/// thread's DTV, smaller in a static program (fewer modules).
fn same_classes(dump: &Path, exe: &Path, valgrind: [(u64, u64); 4], dynamic: bool, what: &str) {
    let ours = ours(dump);
    for (k, ((ob, on), (vb, vn))) in ours.iter().zip(valgrind.iter()).enumerate().take(3) {
        let class = ["definitely lost", "indirectly lost", "possibly lost"][k];
        assert_eq!(on, vn, "{what}: {class} blocks (ours {ours:?}, valgrind {valgrind:?})");
        if k < 2 {
            assert!(ob >= vb && *ob <= vb + 24 * vn, "{what}: {class} bytes {ob} against valgrind's {vb} in {vn} blocks");
        }
    }
    let startup = if dynamic { startup_blocks(dump, exe) as u64 } else { 0 };
    assert!(!dynamic || startup > 0, "{what}: glibc's static start-up keeps blocks of the heap ({ours:?})");
    assert_eq!(ours[3].1, valgrind[3].1 + startup, "{what}: still reachable blocks, {startup} of them glibc's start-up's");
}

/// The version a report line names ("… arenas of glibc 2.36, …").
fn version_said(line: &str) -> (u32, u32) {
    let v = line.split(" arenas of glibc ").nth(1).and_then(|r| r.split(',').next()).unwrap_or_else(|| panic!("{line}"));
    let (a, b) = v.split_once('.').unwrap_or_else(|| panic!("{line}"));
    (a.parse().unwrap(), b.parse().unwrap())
}

#[test]
fn static_and_static_pie_programs_give_valgrinds_leak_classes() {
    let d = Scratch::new("static-vg");
    // valgrind on the same program built dynamically; built static, it sees
    // no allocation (its malloc cannot be replaced), as checked here.
    let dynamic = stopping_program(&d, "gcc", "static_leaks.c", &[], "dynamic");
    let expected = valgrind_summary(&dynamic);
    assert_eq!(expected.map(|c| c.1), [4, 3, 2, 7], "valgrind on the dynamic build: {expected:?}");
    // With glibc's banner (the program asks glibc its version), then
    // without (the same program, asking nothing): its version inferred
    // from its strings, at the same side of each boundary of the layout
    // as the banner's (safe-linking from 2.32, mp_'s huge page fields from
    // 2.35), and the same blocks.
    let mut banner = None;
    for (source, plain) in [("static_leaks.c", false), ("static_leaks_plain.c", true)] {
        for (flag, name) in [("-static", "static"), ("-static-pie", "static-pie")] {
            let name = &format!("{name}{}", if plain { "-plain" } else { "" });
            let exe = stopping_program(&d, "gcc", source, &[flag], name);
            let holds_banner = std::fs::read(&exe).unwrap().windows(16).any(|w| w == b"release version ");
            assert_eq!(holds_banner, !plain, "{name}: glibc's banner is linked in only when the program asks");
            let o = Command::new("valgrind").args(["--leak-check=full", "--run-libc-freeres=no"]).arg(&exe).output().unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            let dynamic = err.contains("total heap usage: 0 allocs");
            let seen = if dynamic { expected } else { valgrind_summary(&exe) };
            let p = Stopped::start(Command::new(&exe));
            let known = banner;
            let note = |o: &Output, how: &str| {
                let err = String::from_utf8_lossy(&o.stderr);
                let said: Vec<&str> = err.lines().filter(|l| l.contains("glibc's version inferred")).collect();
                if !plain {
                    assert!(said.is_empty(), "{name}, {how}: the banner says the version: {err}");
                    return;
                }
                let tail = format!(" or later (no version banner in {})", exe.display());
                let [line] = said[..] else { panic!("{name}, {how}: one note on the inference: {err}") };
                let v = line
                    .strip_prefix("heapdump: warning: glibc's version inferred from its strings: 2.")
                    .and_then(|r| r.strip_suffix(&tail));
                let minor: u32 = v.and_then(|m| m.parse().ok()).unwrap_or_else(|| panic!("{name}, {how}: {line}"));
                let (_, real) = known.expect("the banner's build ran first");
                assert!(
                    minor <= real && (minor >= 32) == (real >= 32) && (minor >= 35) == (real >= 35),
                    "{name}, {how}: {line}, the banner said 2.{real}"
                );
            };
            for mode in ["compact", "full"] {
                let out = d.path(&format!("{name}-{mode}.hdump"));
                let o = attach(p.pid, &out, mode);
                let line = ok(&o);
                note(&o, &format!("attach --mode {mode}"));
                // The main arena and the running thread's own, in the
                // executable's glibc.
                assert!(line.contains(" 2 arenas of glibc 2."), "{name}: {line}");
                if !plain {
                    banner.get_or_insert(version_said(&line));
                } else {
                    // Only the oldest version its strings allow is known.
                    assert!(line.contains(" or later, "), "{name}: an inferred version said as certain: {line}");
                }
                same_classes(&out, &exe, seen, dynamic, &format!("{name}, attach --mode {mode}"));
            }
            let out = d.path(&format!("{name}-core.hdump"));
            let o = gcore_then_core(&d, p.pid, &out);
            ok(&o);
            note(&o, "core");
            same_classes(&out, &exe, seen, dynamic, &format!("{name}, gcore then core"));
            let attached: BTreeSet<(u64, u64)> = blocks(&d.path(&format!("{name}-compact.hdump"))).into_iter().collect();
            let cored: BTreeSet<(u64, u64)> = blocks(&out).into_iter().collect();
            assert_eq!(attached, cored, "{name}: attach and core see the same blocks");
        }
    }
}

/// `exe` with each of `edits` (a string and what replaces it, of the same
/// length) made wherever the string is, as `to`.
fn edited(exe: &Path, to: &Path, edits: &[(&[u8], &[u8])]) -> PathBuf {
    let mut bytes = std::fs::read(exe).unwrap();
    for (from, with) in edits {
        assert_eq!(from.len(), with.len());
        let mut n = 0;
        for i in 0..bytes.len().saturating_sub(from.len()) {
            if &bytes[i..i + from.len()] == *from {
                bytes[i..i + from.len()].copy_from_slice(with);
                n += 1;
            }
        }
        assert!(n > 0, "{} holds {:?}", exe.display(), String::from_utf8_lossy(from));
    }
    std::fs::write(to, bytes).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755)).unwrap();
    to.to_path_buf()
}

#[test]
fn static_glibc_programs_whose_strings_do_not_say_a_known_glibc_are_refused_in_one_line() {
    // Without the banner, glibc's version is what the strings it links in
    // say: a program whose strings miss what every glibc from 2.30 to 2.41
    // holds, contradict each other, or name a newer glibc is refused, its
    // heap layout not guessed. The programs run as built (a tunable's
    // name or a message changed changes nothing they do).
    let d = Scratch::new("static-markers");
    let exe = stopping_program(&d, "gcc", "leaks.c", &["-static"], "leaks-static");
    let missing = edited(&exe, &d.path("missing"), &[(b"glibc.malloc.mxfast\0", b"glibc.malloc.mxfasT\0")]);
    let contradicting = edited(
        &exe,
        &d.path("contradicting"),
        &[(b"malloc(): unaligned tcache chunk detected\0", b"malloc(): unaligned tcache chunk detecteD\0")],
    );
    let newer = stopping_program(&d, "gcc", "glibc_242_marker.c", &["-static"], "newer");
    let cases = [
        (&missing, "holds neither its version banner nor \"glibc.malloc.mxfast\", which every glibc from 2.30 to 2.41 holds"),
        (&contradicting, "its strings contradict each other: \"glibc.malloc.hugetlb\" (glibc 2.35 and later) without \"malloc(): unaligned tcache chunk detected\" (glibc 2.32 and later)"),
        (&newer, "is statically linked with glibc 2.42 or later (no version banner, but it holds malloc's \"max tcache size too large\")"),
    ];
    for (exe, says) in cases {
        let p = Stopped::start(Command::new(exe));
        let out = d.path("n.hdump");
        for (o, how) in [(attach(p.pid, &out, "compact"), "attach"), (gcore_then_core(&d, p.pid, &out), "core")] {
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(1), "{how} {}: {err}", exe.display());
            assert!(
                err.starts_with(&format!("heapdump: error: {} is statically linked with glibc", exe.display())) && err.contains(says),
                "{how}: {err}"
            );
            assert_eq!(err.lines().count(), 1, "{how}: {err}");
            assert!(!out.exists(), "{how}: no dump left behind");
        }
    }
}

/// A static musl program that never calls free links musl's bump
/// allocator (lite_malloc), whose blocks carry no header: refused in one
/// line that says so. The same program linked dynamically has mallocng
/// (musl_heap_walk.rs reads it): its block is found.
#[test]
fn a_static_musl_program_without_free_is_refused_naming_musls_bump_allocator() {
    let d = Scratch::new("static-musl");
    let exe = stopping_program(&d, "musl-gcc", "musl_marker.c", &["-static"], "musl");
    let p = Stopped::start(Command::new(&exe));
    let out = d.path("m.hdump");
    let attached = attach(p.pid, &out, "compact");
    let cored = gcore_then_core(&d, p.pid, &out);
    for (o, how) in [(attached, "attach"), (cored, "core")] {
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{how}: {err}");
        assert!(
            err.contains("statically linked without glibc") && err.contains("bump allocator") && err.lines().count() == 1,
            "{how}: {err}"
        );
        assert!(!out.exists(), "{how}: no dump left behind");
    }
    drop(p);
    let exe = stopping_program(&d, "musl-gcc", "musl_marker.c", &[], "musl-dynamic");
    let p = Stopped::start(Command::new(&exe));
    let o = attach(p.pid, &out, "compact");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(blocks(&out).iter().any(|&(_, size)| size == 4242), "the kept block, its size exact");
}
