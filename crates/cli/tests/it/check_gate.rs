//! `heapdump check`, the leak gate for CI: the exit status a CI job reads
//! (the program's own failure first, then 23 or --error-exitcode for a
//! leak, else 0), valgrind's loss records on stderr, nothing on stdout
//! when clean, a JUnit file a CI system reads (parsed by Python's XML
//! parser), one verdict per process of a runner that forks per test.

use crate::common::*;
use crate::valgrind::valgrind_summary;
use std::path::Path;
use std::process::Output;

fn check(args: &[&std::ffi::OsStr]) -> Output {
    ensure_preload();
    heapdump().arg("check").args(args).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// (bytes, blocks) of check's closing line "lost in K of N processes".
fn lost_line(err: &str) -> Option<(u64, u64)> {
    let l = err.lines().find(|l| l.starts_with("heapdump: check: ") && l.contains(" lost in "))?;
    let w: Vec<&str> = l.split_whitespace().collect();
    Some((w[2].parse().ok()?, w[5].parse().ok()?))
}

/// The test cases of a JUnit file as Python's XML parser reads them:
/// (name, failure text when it failed), and the suite's counts.
fn junit_cases(path: &Path) -> (Vec<(String, Option<String>)>, serde_json::Value) {
    let script = "import json, sys, xml.etree.ElementTree as ET\n\
                  root = ET.parse(sys.argv[1]).getroot()\n\
                  suite = root.find('testsuite')\n\
                  cases = [[c.get('name'), (c.find('failure').get('message') + '\\n' + c.find('failure').text) if c.find('failure') is not None else None] for c in suite.iter('testcase')]\n\
                  print(json.dumps({'cases': cases, 'tests': suite.get('tests'), 'failures': suite.get('failures'), 'errors': suite.get('errors')}))";
    let o = tool("python3").arg("-c").arg(script).arg(path).output().unwrap();
    let j: serde_json::Value = serde_json::from_str(&ok(&o)).unwrap();
    let cases =
        j["cases"].as_array().unwrap().iter().map(|c| (c[0].as_str().unwrap().to_string(), c[1].as_str().map(str::to_string))).collect();
    (cases, j)
}

#[test]
fn the_suites_leak_program_fails_with_valgrinds_lost_bytes_and_stacks() {
    let d = Scratch::new("check-leaks");
    let prog = compile(&d, "leaks.c", &["-O0", "-g"]);
    let vg = valgrind_summary(&prog);
    let o = check(&["--".as_ref(), prog.as_os_str()]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(23), "LeakSanitizer's status for a leak:\n{err}");
    assert!(o.stdout.is_empty(), "nothing of ours on stdout: {}", text(&o.stdout));
    let expected = (vg[0].0 + vg[1].0, vg[0].1 + vg[1].1);
    assert_eq!(lost_line(&err), Some(expected), "definitely + indirectly lost (bytes, blocks) vs valgrind's {vg:?}:\n{err}");
    // valgrind's loss records: the list head with what it holds, its stack.
    assert!(err.contains("144 (48 direct, 96 indirect) bytes in 1 blocks are definitely lost"), "{err}");
    assert!(err.lines().any(|l| l.ends_with("at make (tests/c/leaks.c:19)") || l.contains("   at make")), "{err}");
    assert!(err.contains("    by main"), "{err}");
    // The possibly lost block fails only with --kind possible.
    assert!(!err.contains("possibly lost"), "{err}");
    let o = check(&["--kind".as_ref(), "possible".as_ref(), "--".as_ref(), prog.as_os_str()]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(23));
    let with_possible = (expected.0 + vg[2].0, expected.1 + vg[2].1);
    assert_eq!(lost_line(&err), Some(with_possible), "{err}");
    assert!(err.contains("200 bytes in 1 blocks are possibly lost"), "{err}");
}

#[test]
fn a_clean_program_exits_0_with_nothing_on_stdout_or_stderr() {
    let d = Scratch::new("check-clean");
    let prog = compile(&d, "test_runner.c", &["-O0", "-g"]);
    let junit = d.path("clean.xml");
    // Its temporary directory under one of the test's own.
    let tmp = d.path("tmp");
    std::fs::create_dir(&tmp).unwrap();
    ensure_preload();
    let o =
        heapdump().env("TMPDIR", &tmp).arg("check").arg("--junit").arg(&junit).arg("--").arg(&prog).args(["0", "clean"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(o.stdout.is_empty(), "stdout: {}", text(&o.stdout));
    assert!(o.stderr.is_empty(), "stderr: {}", text(&o.stderr));
    let (cases, j) = junit_cases(&junit);
    assert_eq!(cases.len(), 2, "the runner and its one test process: {cases:?}");
    assert!(cases.iter().all(|c| c.1.is_none()), "{cases:?}");
    assert_eq!((j["tests"].as_str(), j["failures"].as_str()), (Some("2"), Some("0")));
    // The dumps went to a private directory that is gone.
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0, "nothing left in TMPDIR");
}

#[test]
fn the_programs_own_failure_is_the_status_then_the_chosen_exit_code() {
    let d = Scratch::new("check-status");
    let prog = compile(&d, "test_runner.c", &["-O0", "-g"]);
    // A failing program that also leaks: its own status wins.
    let o = check(&["--".as_ref(), prog.as_os_str(), "5".as_ref(), "leak_list".as_ref()]);
    assert_eq!(o.status.code(), Some(5), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("leak_list"), "the leak is still reported: {}", text(&o.stderr));
    let o = check(&["--error-exitcode".as_ref(), "7".as_ref(), "--".as_ref(), prog.as_os_str(), "0".as_ref(), "leak_buffer".as_ref()]);
    assert_eq!(o.status.code(), Some(7), "{}", text(&o.stderr));
    let o = check(&["--".as_ref(), d.path("no-such-program").as_os_str()]);
    assert_eq!(o.status.code(), Some(127), "{}", text(&o.stderr));
    // 0 is not a failure status.
    let o = check(&["--error-exitcode".as_ref(), "0".as_ref(), "--".as_ref(), prog.as_os_str(), "0".as_ref()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
}

#[test]
fn a_runner_forking_per_test_gets_one_verdict_per_process() {
    let d = Scratch::new("check-fork");
    let prog = compile(&d, "test_runner.c", &["-O0", "-g"]);
    let junit = d.path("runner.xml");
    let out = d.path("kept.hdump");
    let tests = ["clean", "leak_list", "clean", "leak_buffer"];
    let mut args: Vec<&std::ffi::OsStr> =
        vec!["--junit".as_ref(), junit.as_os_str(), "-o".as_ref(), out.as_os_str(), "--".as_ref(), prog.as_os_str(), "0".as_ref()];
    args.extend(tests.iter().map(std::ffi::OsStr::new));
    let o = check(&args);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(23), "{err}");
    assert!(o.stdout.is_empty());
    // The list (64 + 2 x 64 indirectly) and the buffer, each in its own process.
    assert_eq!(lost_line(&err), Some((192 + 4000, 4)), "{err}");
    assert!(err.contains("lost in 2 of 5 processes"), "{err}");
    let (cases, j) = junit_cases(&junit);
    assert_eq!(cases.len(), 5, "the runner and one process per test: {cases:?}");
    assert_eq!((j["failures"].as_str(), j["errors"].as_str()), (Some("2"), Some("0")));
    let failed: Vec<&String> = cases.iter().filter_map(|c| c.1.as_ref()).collect();
    assert!(failed
        .iter()
        .any(|f| f.contains("192 (64 direct, 128 indirect) bytes in 1 blocks are definitely lost") && f.contains("at leak_list")));
    assert!(failed.iter().any(|f| f.contains("4000 bytes in 1 blocks are definitely lost") && f.contains("at leak_buffer")));
    assert!(failed.iter().all(|f| !(f.contains("leak_list") && f.contains("leak_buffer"))), "one process, one verdict: {failed:?}");
    // -o keeps the five dumps.
    let kept = std::fs::read_dir(&d.0).unwrap().filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "hdump")).count();
    assert_eq!(kept, 5);
}

#[test]
fn suppressions_silence_what_they_match_and_nothing_else() {
    let d = Scratch::new("check-supp");
    let prog = compile(&d, "test_runner.c", &["-O0", "-g"]);
    let run = |supps: &[&Path], extra: &[&str]| {
        let mut args: Vec<&std::ffi::OsStr> = vec![];
        for s in supps {
            args.push("--suppressions".as_ref());
            args.push(s.as_os_str());
        }
        args.extend(extra.iter().map(std::ffi::OsStr::new));
        args.extend(["--".as_ref(), prog.as_os_str(), "0".as_ref(), "leak_list".as_ref(), "leak_buffer".as_ref(), "possible".as_ref()]);
        check(&args)
    };
    let vg = d.path("list.supp");
    std::fs::write(&vg, "{\n   the-list\n   Memcheck:Leak\n   match-leak-kinds: definite,indirect\n   fun:calloc\n   fun:leak_list\n}\n")
        .unwrap();
    let lsan = d.path("buffer.supp");
    std::fs::write(&lsan, "leak:leak_buffer\n").unwrap();
    let o = run(&[&vg], &[]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(23), "{err}");
    assert!(err.contains("at leak_buffer") && !err.contains("at leak_list"), "{err}");
    let o = run(&[&vg, &lsan], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(o.stdout.is_empty() && o.stderr.is_empty(), "{}", text(&o.stderr));
    // The possibly lost block counts with --kind possible only.
    let o = run(&[&vg, &lsan], &["--kind", "possible"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(23), "{err}");
    assert!(err.contains("512 bytes in 1 blocks are possibly lost") && err.contains("at possible"), "{err}");
    // A damaged file is a usage error, before the program runs.
    let bad = d.path("bad.supp");
    std::fs::write(&bad, "leak:\n").unwrap();
    let o = run(&[&bad], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert_eq!(text(&o.stderr).lines().count(), 1, "{}", text(&o.stderr));
}

#[test]
fn a_real_program_passes_with_its_suppression_file() {
    // Debian's perl frees little at exit (gawk and git free everything on
    // the paths tried: `check` passes them as they are).
    let perl = Path::new("/usr/bin/perl");
    assert!(perl.exists(), "scripts/test.sh installs perl");
    let script = "my %h; $h{$_} = $_ x 3 for 1..1000; print scalar(keys %h), qq(\\n)";
    let o = check(&["--".as_ref(), perl.as_os_str(), "-e".as_ref(), script.as_ref()]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(23), "{err}");
    assert_eq!(text(&o.stdout), "1000\n", "the program's own output, nothing else");
    assert!(err.contains("by perl_construct"), "{err}");
    let d = Scratch::new("check-perl");
    let supp = d.path("perl.supp");
    std::fs::write(
        &supp,
        "# what perl leaves at exit by design\nleak:perl_construct\nleak:perl_parse\n{\n   locales\n   Memcheck:Leak\n   ...\n   fun:Perl_init_i18nl10n\n}\n",
    )
    .unwrap();
    let junit = d.path("perl.xml");
    let o = check(&[
        "--suppressions".as_ref(),
        supp.as_os_str(),
        "--junit".as_ref(),
        junit.as_os_str(),
        "--".as_ref(),
        perl.as_os_str(),
        "-e".as_ref(),
        script.as_ref(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "1000\n");
    assert!(o.stderr.is_empty(), "{}", text(&o.stderr));
    let (cases, _) = junit_cases(&junit);
    assert_eq!(cases.len(), 1);
    assert!(cases[0].0.starts_with("perl[") && cases[0].1.is_none(), "{cases:?}");
}
