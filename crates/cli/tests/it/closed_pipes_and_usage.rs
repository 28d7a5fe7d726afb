//! A reader that goes away (`| head -1`) ends every command quietly, and
//! arguments that do not parse are bad usage (exit 2, one line) in every
//! command.

use crate::common::*;
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::process::Stdio;

/// Every command that writes on standard output, with its arguments.
fn stdout_commands(d: &Scratch, dump: &std::path::Path) -> Vec<Vec<OsString>> {
    let r = json(&["retained".as_ref(), "--json".as_ref(), "-n".as_ref(), "1".as_ref(), dump.as_os_str()]);
    let address = r[0]["address"].as_str().unwrap().to_string();
    let with_dump = |args: &[&str]| -> Vec<OsString> {
        let mut v: Vec<OsString> = vec![args[0].into(), dump.into()];
        v.extend(args[1..].iter().map(OsString::from));
        v
    };
    let mut all: Vec<Vec<OsString>> = ["bash", "zsh", "fish"].iter().map(|s| vec!["completions".into(), (*s).into()]).collect();
    all.push(vec!["man".into()]);
    all.push(vec!["--help".into()]);
    // Text tables, JSON documents and exports streamed to `-o -`.
    for args in [
        &["top"][..],
        &["top", "--tree"],
        &["leaks"],
        &["leaks", "--json"],
        &["summary"],
        &["summary", "--json"],
        &["retained"],
        &["path", &address],
        &["path", &address, "--all", "--json"],
        &["export", "--format", "folded", "-o", "-"],
        &["export", "--format", "pprof", "-o", "-"],
    ] {
        all.push(with_dump(args));
    }
    all.push(vec!["diff".into(), dump.into(), dump.into()]);
    all.push(vec!["demo".into()]);
    let _ = d;
    all
}

/// Runs `heapdump args` with standard output a pipe whose reader reads
/// `lines` lines and goes away; the exit status and standard error.
fn with_reader_gone(d: &Scratch, args: &[OsString], lines: usize) -> (Option<i32>, String) {
    let mut child =
        heapdump().args(args).current_dir(&d.0).stdout(Stdio::piped()).stderr(Stdio::piped()).stdin(Stdio::null()).spawn().unwrap();
    let out = child.stdout.take().unwrap();
    if lines > 0 {
        let mut r = BufReader::new(out);
        for _ in 0..lines {
            let mut l = String::new();
            let _ = r.read_line(&mut l);
        }
    }
    // Dropped: the reader is gone.
    let o = child.wait_with_output().unwrap();
    (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
fn every_command_ends_quietly_when_its_reader_goes_away() {
    // A small dump: every command answers at once.
    let (d, dump) = traced("pipes", "malloc_and_strdup.c", &["-O0", "-g"]);
    let mut failures = vec![];
    for args in stdout_commands(&d, &dump) {
        // It is a race (what fits in the pipe before the reader goes is
        // written without error): gone at once, and after one line; six
        // times for the commands that write at once (completions, man,
        // help), twice for those that first read a dump.
        let rounds = if args.len() <= 2 && args[0] != "demo" { 6 } else { 2 };
        for round in 0..rounds {
            let (code, err) = with_reader_gone(&d, &args, round % 2);
            // demo writes its own lines on stderr: only a panic counts there.
            let quiet = if args[0] == "demo" { !err.contains("panicked") && !err.contains("Broken pipe") } else { err.is_empty() };
            if code == Some(101) || code.is_none() || !quiet {
                failures.push(format!("heapdump {:?}: exit {code:?}, stderr {:?}", args, &err[..err.len().min(400)]));
                break;
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn arguments_that_do_not_parse_are_bad_usage() {
    let d = Scratch::new("usage");
    let dump = demo_dump(&d);
    let dump = dump.to_str().unwrap();
    for args in [
        &["path", dump, "xyz"][..],
        &["path", dump, "0xzz", "--all"],
        &["path", dump, "xyz", "--json"],
        &["path", "/nonexistent.hdump", "xyz"],
        &["export", dump, "--format", "dot", "--address", "nowhere", "-o", "-"],
        &["top", dump, "-n", "many"],
        &["top", dump, "--depth", "0"],
        &["top", dump, "--depth", "deep"],
        &["leaks", dump, "-n", "-3"],
        &["retained", dump, "-n", "1.5"],
        &["path", dump, "0x10", "--all", "-n", "x"],
        &["export", dump, "--format", "dot", "--depth", "x", "-o", "-"],
        &["export", dump, "--format", "dot", "--max-nodes", "-1", "-o", "-"],
        &["serve", dump, "--port", "70000"],
        &["attach", "not-a-pid"],
    ] {
        let o = heapdump().args(args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "heapdump {args:?}: {err}");
        assert!(o.stdout.is_empty(), "heapdump {args:?} wrote on stdout");
        assert!(err.lines().next().is_some_and(|l| l.contains("error")), "heapdump {args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // Our own usage errors are one line that names the argument.
    let o = heapdump().args(["path", dump, "xyz"]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("\"xyz\"") && err.contains("address"), "{err}");
    // An address that parses but holds nothing is a question about the
    // input (1), not bad usage.
    assert_eq!(heapdump().args(["path", dump, "0x10"]).output().unwrap().status.code(), Some(1));
}

#[test]
fn an_output_that_is_the_input_dump_is_refused_and_the_dump_kept() {
    // `export D -o D` (or `report`, by another name of the same file)
    // wrote the export in the dump's place: the dump was lost.
    let d = Scratch::new("over-input");
    let dump = demo_dump(&d);
    let before = std::fs::read(&dump).unwrap();
    let link = d.path("link.hdump");
    std::os::unix::fs::symlink(&dump, &link).unwrap();
    let (dump_s, link_s) = (dump.to_str().unwrap(), link.to_str().unwrap());
    for args in [
        &["export", dump_s, "--format", "folded", "-o", dump_s][..],
        &["export", dump_s, "--format", "pprof", "-o", link_s],
        &["report", dump_s, "-o", link_s],
        &["report", link_s, "--baseline", dump_s, "-o", dump_s],
    ] {
        let o = heapdump().args(args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "heapdump {args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "heapdump {args:?}: {err}");
        assert!(err.contains("itself"), "heapdump {args:?}: {err}");
        assert_eq!(std::fs::read(&dump).unwrap(), before, "heapdump {args:?} changed the dump");
    }
    // Another file is written as always.
    let o = heapdump().args(["export", dump_s, "--format", "folded", "-o"]).arg(d.path("out.folded")).output().unwrap();
    ok(&o);
}

#[test]
fn a_suppressions_file_that_is_no_file_is_refused_at_once() {
    // `--suppressions /dev/zero` read without end (6 GB in 5 s); a FIFO
    // nobody writes would wait for good. Refused in one line, as dumps are.
    let d = Scratch::new("supp-devices");
    let dump = demo_dump(&d);
    let big = d.path("big.supp");
    std::fs::File::create(&big).unwrap().set_len(64 << 20).unwrap();
    for supp in [std::path::Path::new("/dev/zero"), &big, &d.path("missing.supp")] {
        let o = heapdump().arg("leaks").arg(&dump).arg("--suppressions").arg(supp).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{}: {err}", supp.display());
        assert_eq!(err.lines().count(), 1, "{}: {err}", supp.display());
        assert!(err.contains("cannot read suppressions"), "{}: {err}", supp.display());
    }
}

#[test]
fn an_export_around_no_allocation_says_so_not_that_writing_failed() {
    // `--address` naming no live block failed inside the writer and was
    // said as "writing to standard output: no live allocation ...".
    let d = Scratch::new("export-nowhere");
    let dump = demo_dump(&d);
    for (format, out) in [("dot", "-"), ("mermaid", "x.mmd")] {
        let o = heapdump().arg("export").arg(&dump).args(["--format", format, "--address", "0x1", "-o"]).arg(d.path(out)).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{format}: {err}");
        assert_eq!(err.lines().count(), 1, "{format}: {err}");
        assert!(err.contains("no live allocation contains 0x1") && !err.contains("writing"), "{format}: {err}");
        assert!(!d.path("x.mmd").exists(), "{format}: nothing written");
    }
}

#[test]
fn a_mapped_file_cut_short_ends_the_command_with_one_line() {
    // A dump truncated while the analysis reads it through its mapping
    // (`cp other.hdump app.hdump` truncates in place) is a SIGBUS at the
    // next page read past the new end: the command was killed by it (exit
    // 135). The fault itself is a race; the signal is what it delivers,
    // sent here to a viewer in the middle of its session.
    let d = Scratch::new("sigbus");
    let dump = demo_dump(&d);
    let mut child = heapdump().arg("serve").arg(&dump).args(["--port", "0"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.contains("http://127.0.0.1:"), "{line}");
    let o = std::process::Command::new("kill").args(["-BUS", &child.id().to_string()]).output().unwrap();
    assert!(o.status.success());
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(last.starts_with("heapdump: error:") && last.contains("cut short"), "{err}");
}
