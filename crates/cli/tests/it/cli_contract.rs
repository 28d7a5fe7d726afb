//! The command line's contract: JSON keys, exit codes, damaged or special
//! files given as input, exports written through special files and to
//! standard output, and the demo's suggested commands working.

use crate::common::*;
use std::path::Path;
use std::process::Command;

#[test]
fn json_documents_have_the_documented_keys() {
    let d = Scratch::new("json");
    let p = demo_dump(&d);
    let s = json(&["summary".as_ref(), "--json".as_ref(), p.as_os_str()]);
    for k in [
        "allocations",
        "bytes",
        "mode",
        "pid",
        "threads",
        "threads_not_stopped",
        "roots",
        "reason",
        "pause_us",
        "peak_bytes",
        "total_allocations",
        "total_bytes",
    ] {
        assert!(!s[k].is_null(), "summary lacks {k}");
    }
    // Present, null unless the dump was taken for a signal or a limit (or,
    // for `peak`, unless the runtime recorded one).
    for k in ["signal", "limit", "peak"] {
        assert!(s.as_object().unwrap().contains_key(k), "summary lacks {k}");
    }
    assert!(s["peak_bytes"].as_u64() >= s["bytes"].as_u64() && s["total_bytes"].as_u64() >= s["peak_bytes"].as_u64(), "{s}");
    assert_eq!(s["mode"], "full");
    assert_eq!(s["reason"], "api");
    let l = json(&["leaks".as_ref(), "--json".as_ref(), p.as_os_str()]);
    for k in ["definitely_lost", "indirectly_lost", "possibly_lost", "still_reachable"] {
        assert!(l[k]["bytes"].is_u64() && l[k]["blocks"].is_u64(), "leaks lacks {k}");
    }
    // The demo leaks 50 forgotten 4 KiB buffers and 500 sessions' cycles
    // (a few may stay reachable through stale words on the stack).
    assert!(l["definitely_lost"]["blocks"].as_u64().unwrap() >= 540, "{}", l["definitely_lost"]);
    let total: u64 =
        ["definitely_lost", "indirectly_lost", "possibly_lost", "still_reachable"].iter().map(|k| l[k]["bytes"].as_u64().unwrap()).sum();
    assert_eq!(total, s["bytes"].as_u64().unwrap(), "the classes partition the heap");
    let r = json(&["retained".as_ref(), "--json".as_ref(), "-n".as_ref(), "5".as_ref(), p.as_os_str()]);
    let rows = r.as_array().unwrap();
    assert_eq!(rows.len(), 5);
    for w in rows.windows(2) {
        assert!(w[0]["retained"].as_u64() >= w[1]["retained"].as_u64(), "ordered by retained");
    }
    for row in rows {
        assert!(row["address"].as_str().unwrap().starts_with("0x"));
        assert!(row["size"].is_u64() && row["site"].is_string());
    }
    // The catalogue's table retains most of the heap.
    assert!(rows[0]["retained"].as_u64().unwrap() > s["bytes"].as_u64().unwrap() / 2);
    assert!(rows[0]["site"].as_str().unwrap().contains("build_catalogue"), "{}", rows[0]["site"]);
    let t = json(&["top".as_ref(), "--json".as_ref(), p.as_os_str()]);
    let rows = t.as_array().unwrap();
    assert!(rows.iter().all(|r| r["key"].is_string() && r["allocations"].is_u64() && r["bytes"].is_u64()));
    for w in rows.windows(2) {
        assert!(w[0]["bytes"].as_u64() >= w[1]["bytes"].as_u64());
    }
    let addr = r[0]["address"].as_str().unwrap().to_string();
    let path = json(&["path".as_ref(), p.as_os_str(), addr.as_ref(), "--json".as_ref()]);
    let steps = path.as_array().unwrap();
    assert!(!steps.is_empty());
    assert_eq!(steps.last().unwrap()["to"], addr.as_str());
    assert!(steps[0]["from"].as_str().unwrap().contains("thread") || steps[0]["from"].as_str().unwrap().contains("static"));
    let diff = json(&["diff".as_ref(), p.as_os_str(), p.as_os_str(), "--json".as_ref()]);
    assert_eq!(diff["new"]["blocks"], 0);
    assert_eq!(diff["gone"]["blocks"], 0);
}

#[test]
fn bad_input_gets_one_line_and_exit_1() {
    let d = Scratch::new("bad");
    let p = demo_dump(&d);
    let bytes = std::fs::read(&p).unwrap();
    let garbage = d.path("garbage.hdump");
    std::fs::write(&garbage, b"this is not a heap dump at all").unwrap();
    let empty = d.path("empty.hdump");
    std::fs::write(&empty, b"").unwrap();
    let corrupt = d.path("corrupt.hdump");
    let mut c = bytes.clone();
    let mid = c.len() / 2;
    c[mid] ^= 0x40;
    std::fs::write(&corrupt, &c).unwrap();
    for f in [&garbage, &empty, &corrupt, &d.path("missing.hdump")] {
        for sub in ["summary", "leaks", "top", "retained"] {
            let o = heapdump().arg(sub).arg(f).output().unwrap();
            assert_eq!(o.status.code(), Some(1), "{sub} {}", f.display());
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(err.lines().count(), 1, "one line: {err}");
            assert!(err.starts_with("heapdump: error: ") && !err.contains("panicked"), "{err}");
        }
    }
    // A truncated dump is analysed up to the cut, with a warning.
    let cut = d.path("cut.hdump");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let o = heapdump().args(["leaks", "--json"]).arg(&cut).output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stderr).contains("incomplete dump"));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["still_reachable"]["blocks"].as_u64().unwrap() > 0);
    // Usage errors exit 2.
    assert_eq!(heapdump().args(["top", "--by", "colour"]).arg(&p).output().unwrap().status.code(), Some(2));
    assert_eq!(heapdump().args(["frobnicate"]).output().unwrap().status.code(), Some(2));
    // An address that does not parse is bad usage too; one that parses but
    // holds no block is the input's answer (1).
    assert_eq!(heapdump().args(["path"]).arg(&p).arg("0xnothex").output().unwrap().status.code(), Some(2));
    assert_eq!(heapdump().args(["path"]).arg(&p).arg("0x10").output().unwrap().status.code(), Some(1));
}

#[test]
fn broken_pipe_exits_quietly() {
    // `leaks --json | head -c 10` said "Broken pipe (os error 32)", exit 1.
    let d = Scratch::new("pipe");
    let p = demo_dump(&d);
    for args in [
        &["top", "-n", "1000"][..],
        &["top", "-n", "1000", "--json"],
        &["summary", "--json"],
        &["leaks", "--json"],
        &["retained", "--json"],
        &["leaks"],
    ] {
        let mut child =
            heapdump().args(args).arg(&p).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{args:?}");
        assert!(o.stderr.is_empty(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    }
}

#[test]
fn special_files_given_as_the_dump_are_refused_at_once() {
    // A FIFO given as the dump hung `summary`; a directory said "No such
    // device (os error 19)".
    let d = Scratch::new("special");
    let fifo = d.path("f.hdump");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    for (path, says) in [(fifo.as_path(), "a FIFO"), (d.0.as_path(), "a directory"), (Path::new("/dev/zero"), "a device")] {
        let o = heapdump().arg("summary").arg(path).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{path:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(says), "{path:?}: {err}");
    }
}

#[test]
fn an_empty_debug_aranges_section_is_no_panic() {
    // `objcopy --update-section .debug_aranges=/dev/null` made 12 of 16
    // commands panic inside gimli ("assertion failed: len <= self.len").
    let d = Scratch::new("aranges");
    let prog = compile(&d, "leaks.c", &["-O0", "-g"]);
    let bad = d.path("leaks_bad");
    let o = Command::new("objcopy").arg("--update-section").arg(".debug_aranges=/dev/null").arg(&prog).arg(&bad).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (o, dumps) = run_traced(&d.path("a.hdump"), &bad, &[], &[]);
    ok(&o);
    for args in [&["leaks"][..], &["top"], &["retained"], &["summary"], &["top", "--by", "type"]] {
        let o = heapdump().args(args).arg(&dumps[0]).output().unwrap();
        let text = ok(&o);
        assert!(!String::from_utf8_lossy(&o.stderr).contains("panicked"), "{args:?}");
        if args == ["leaks"] {
            assert!(text.contains("make (") && text.contains("leaks.c:"), "sites still named, with lines: {text}");
        }
    }
}

#[test]
fn export_writes_through_special_files_and_symlinks() {
    // Renaming a temporary file over whatever is there would turn a FIFO
    // or a symlink into a regular file (as root, `-o /dev/stdout` would
    // replace the device node): `-o` writes through them.
    let d = Scratch::new("through");
    let p = demo_dump(&d);
    let fifo = d.path("out.fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    let o = heapdump().args(["export", "--format", "folded", "-o"]).arg(&fifo).arg(&p).output().unwrap();
    ok(&o);
    let through = reader.join().unwrap();
    assert!(!through.is_empty() && String::from_utf8_lossy(&through).lines().all(|l| l.rsplit(' ').next().unwrap().parse::<u64>().is_ok()));
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo(), "the FIFO is still a FIFO");
    // A symlink is followed: the file it names is replaced, the link stays.
    let real = d.path("real.folded");
    std::fs::write(&real, "old").unwrap();
    let link = d.path("link.folded");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let o = heapdump().args(["export", "--format", "folded", "-o"]).arg(&link).arg(&p).output().unwrap();
    ok(&o);
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read(&real).unwrap(), through);
    // No temporary file is left behind.
    let left: Vec<_> =
        std::fs::read_dir(&d.0).unwrap().filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().ends_with(".tmp")).collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn export_to_standard_output_and_saying_what_was_written() {
    let d = Scratch::new("stdout");
    let p = demo_dump(&d);
    // `-o -`: the data on stdout, nothing on stderr, no file named "-".
    let o = heapdump().args(["export", "--format", "folded", "-o", "-"]).arg(&p).current_dir(&d.0).output().unwrap();
    let out = ok(&o);
    assert!(out.lines().count() > 3 && out.lines().all(|l| l.rsplit(' ').next().unwrap().parse::<u64>().is_ok()), "{out}");
    assert!(o.stderr.is_empty(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!d.path("-").exists());
    // To a file: stdout empty, one line on stderr naming it.
    let f = d.path("x.folded");
    let o = heapdump().args(["export", "--format", "folded", "-o"]).arg(&f).arg(&p).output().unwrap();
    assert!(ok(&o).is_empty());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with(&format!("heapdump: wrote {}", f.display())), "{err}");
    assert_eq!(std::fs::read_to_string(&f).unwrap(), out);
}

#[test]
fn the_demo_runs_and_every_command_it_suggests_works() {
    // The README's first command ends in `heapdump demo`: it must explain
    // its dump, and each command it tells the user to run next must work.
    let d = Scratch::new("demo");
    let o = heapdump().arg("demo").current_dir(&d.0).output().unwrap();
    let out = ok(&o);
    for part in ["== summary", "== leaks", "definitely lost:", "== top retainers", "Go on with:"] {
        assert!(out.contains(part), "{part:?} missing from the demo's output:\n{out}");
    }
    let next: Vec<&str> = out.lines().skip_while(|l| !l.contains("Go on with:")).skip(1).map(str::trim).collect();
    assert!(next.len() >= 7, "{next:?}");
    for line in next {
        let cmd = line.split('#').next().unwrap().trim();
        let args: Vec<&str> = cmd.split_whitespace().collect();
        // `heapdump` when PATH finds this one, else its path.
        assert!(args[0] == "heapdump" || args[0] == env!("CARGO_BIN_EXE_heapdump"), "{line}");
        if args[1] == "serve" {
            continue; // a server: the viewer tests run it
        }
        let o = heapdump().args(&args[1..]).current_dir(&d.0).output().unwrap();
        assert!(o.status.success(), "`{cmd}` failed: {}", String::from_utf8_lossy(&o.stderr));
        assert!(!o.stdout.is_empty(), "`{cmd}` printed nothing");
    }
}
