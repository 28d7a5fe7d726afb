//! Captures from outside as production meets them: a program in a
//! container (its own mount and PID namespaces, files that exist only
//! there), attached from the host and from inside; a program mapping a
//! large data file beside its heap; core files crafted to lie about their
//! sizes and files; a program under `heapdump run`, whose runtime thread
//! is no thread of the program's.

use crate::common::*;
use crate::valgrind::{ours, valgrind_summary};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A test program with `stop_at_end.c` linked in.
fn program(d: &Scratch, source: &str, extra: &[&str]) -> PathBuf {
    let stop = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/stop_at_end.c");
    let mut flags = vec!["-O0", "-g", stop.to_str().unwrap()];
    flags.extend_from_slice(extra);
    compile(d, source, &flags)
}

/// The descendant of `root` whose pid in its own PID namespace is `ns_pid`.
fn descendant_with_ns_pid(root: u32, ns_pid: i32) -> i32 {
    let mut todo = vec![root as i32];
    while let Some(p) = todo.pop() {
        let status = std::fs::read_to_string(format!("/proc/{p}/status")).unwrap_or_default();
        let own = status.lines().find_map(|l| l.strip_prefix("NSpid:")).and_then(|l| l.split_ascii_whitespace().last()?.parse().ok());
        if own == Some(ns_pid) && p != root as i32 {
            return p;
        }
        for t in std::fs::read_dir(format!("/proc/{p}/task")).into_iter().flatten().flatten() {
            let kids = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            todo.extend(kids.split_ascii_whitespace().filter_map(|k| k.parse::<i32>().ok()));
        }
    }
    panic!("no descendant of {root} is process {ns_pid} of its namespace");
}

/// The C library the test programs link.
fn host_libc() -> PathBuf {
    let o = Command::new("gcc").arg("-print-file-name=libc.so.6").output().unwrap();
    let p = PathBuf::from(ok(&o).trim());
    assert!(p.is_absolute() && p.exists(), "gcc does not say where libc.so.6 is: {}", p.display());
    p.canonicalize().unwrap()
}

/// A container's layout: `ns_globals` built to find its C library in
/// `inside/lib`, and `inside` itself, a directory that on the host holds
/// decoys of the same names (another program; no C library), and inside
/// the namespace a private tmpfs with the real program and a copy of the
/// C library. Returns the program as built, the directory and the shell
/// lines that set the namespace's side up.
fn container_layout(d: &Scratch) -> (PathBuf, PathBuf, String) {
    let inside = d.path("inside");
    std::fs::create_dir_all(inside.join("lib")).unwrap();
    let build = Scratch::new("ns-build");
    let rpath = format!("-Wl,-rpath,{}/lib", inside.display());
    let prog = program(&build, "ns_globals.c", &[&rpath]);
    let kept = d.path("ns_globals.built");
    std::fs::copy(&prog, &kept).unwrap();
    // The host's file of the same name is another program.
    let decoy = compile(&build, "live_threads.c", &["-O0"]);
    std::fs::copy(&decoy, inside.join("ns_globals")).unwrap();
    let setup = format!(
        "set -e; mount -t tmpfs tmpfs {i}; mkdir {i}/lib; cp {k} {i}/ns_globals; cp {libc} {i}/lib/libc.so.6; set +e",
        i = inside.display(),
        k = kept.display(),
        libc = host_libc().display()
    );
    (kept, inside, setup)
}

#[test]
fn a_container_s_program_is_read_through_its_own_view_from_the_host() {
    // Its binary and its C library exist only in its mount namespace: the
    // host has another program under the binary's name and nothing under
    // the library's. Its globals hold 100 of its 110 blocks.
    let d = Scratch::new("ns-host");
    let (built, inside, setup) = container_layout(&d);
    let expected = valgrind_summary(&built);
    assert_eq!((expected[0].1, expected[3].1), (10, 100), "the program's own classes: {expected:?}");
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--pid", "--fork", "sh", "-c"]).arg(format!("{setup}; {}/ns_globals", inside.display()));
    cmd.env("STOP_AT_END", "1");
    let p = Stopped::start_in(cmd, |c, ns| descendant_with_ns_pid(c.id(), ns));
    let exe = std::fs::read_link(format!("/proc/{}/exe", p.pid)).unwrap();
    assert_eq!(exe, inside.join("ns_globals"), "the program runs from the namespace's layout");
    for mode in ["compact", "full"] {
        let out = d.path(&format!("host-{mode}.hdump"));
        let o = heapdump().args(["attach", &p.pid.to_string(), "--mode", mode, "-o"]).arg(&out).output().unwrap();
        ok(&o);
        same_classes(ours(&out), expected, &format!("attach --mode {mode} from the host"));
    }
}

#[test]
fn a_container_s_program_is_attached_from_inside_its_namespace() {
    // heapdump runs in the container too, and names the process by the
    // pid it has there.
    let d = Scratch::new("ns-inside");
    let (built, inside, setup) = container_layout(&d);
    let expected = valgrind_summary(&built);
    let out = d.path("inside.hdump");
    let script = format!(
        "{setup}; STOP_AT_END=1 {i}/ns_globals 2>/dev/null & p=$!; \
         n=0; until grep -q '^State:.*T' /proc/$p/status; do sleep 0.02; n=$((n+1)); [ $n -lt 1000 ] || break; done; \
         echo \"pid $p\"; XDG_CACHE_HOME={d}/xdg {hd} attach $p -o {out}; r=$?; kill -CONT $p; wait $p; exit $r",
        i = inside.display(),
        d = d.0.display(),
        hd = env!("CARGO_BIN_EXE_heapdump"),
        out = out.display()
    );
    let o = Command::new("unshare").args(["--mount", "--pid", "--fork", "--mount-proc", "sh", "-c"]).arg(&script).output().unwrap();
    let said = ok(&o);
    let pid: i32 = said.lines().find_map(|l| l.strip_prefix("pid ")).unwrap().parse().unwrap();
    assert!(pid < 10, "the pid is the namespace's own: {said}");
    assert!(said.contains(&format!("(process {pid}:")), "{said}");
    same_classes(ours(&out), expected, "attach from inside the namespace");
}

/// Runs `heapdump ARGS` under `/usr/bin/time`: its output and its peak
/// resident memory in bytes.
fn with_peak(args: &[&std::ffi::OsStr]) -> (Output, u64) {
    assert!(Path::new("/usr/bin/time").exists(), "/usr/bin/time is not installed: scripts/test.sh installs it");
    let o = Command::new("/usr/bin/time")
        .args(["-f", "peak-kb %M"])
        .arg(env!("CARGO_BIN_EXE_heapdump"))
        .args(args)
        .env("XDG_CACHE_HOME", Path::new(env!("CARGO_TARGET_TMPDIR")).join("xdg-cache"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    let kb: u64 = err.lines().rev().find_map(|l| l.strip_prefix("peak-kb ")).and_then(|k| k.trim().parse().ok()).expect("time's report");
    (o, kb * 1024)
}

#[test]
fn a_big_mapped_file_beside_the_heap_is_not_read() {
    // 3.9 GB mapped read-only at offset 0 (sparse: no disk is used). The
    // capture reads the heap and the modules' headers from memory only:
    // its memory stays far below the file's size.
    let d = Scratch::new("bigmap");
    let prog = program(&d, "big_mapping.c", &[]);
    let file = d.path("data.bin");
    let size: u64 = 3900 << 20;
    std::fs::File::create(&file).unwrap().set_len(size).unwrap();
    let p = Stopped::start({
        let mut c = Command::new(&prog);
        c.arg(&file);
        c
    });
    let out = d.path("big.hdump");
    let (o, peak) = with_peak(&["attach".as_ref(), p.pid.to_string().as_ref(), "-o".as_ref(), out.as_os_str()]);
    let line = ok(&o);
    assert!(peak < 256 << 20, "heapdump took {} MiB beside a {} MiB file: {line}", peak >> 20, size >> 20);
    let leaks = ours(&out);
    assert_eq!((leaks[0].1, leaks[3].1), (0, 1000), "the 1000 blocks the globals hold: {leaks:?}");
    let s = json(&["summary".as_ref(), "--json".as_ref(), out.as_os_str()]);
    eprintln!("held {} us beside a {} MiB file, {} MiB peak", s["pause_us"], size >> 20, peak >> 20);
}

/// The program headers of an ELF file: (offset of the header, type, flags).
fn program_headers(core: &[u8]) -> Vec<(usize, u32, u32)> {
    let u16_at = |o: usize| u16::from_le_bytes(core[o..o + 2].try_into().unwrap()) as usize;
    let phoff = u64::from_le_bytes(core[0x20..0x28].try_into().unwrap()) as usize;
    (0..u16_at(0x38))
        .map(|i| {
            let h = phoff + i * u16_at(0x36);
            (h, u32::from_le_bytes(core[h..h + 4].try_into().unwrap()), u32::from_le_bytes(core[h + 4..h + 8].try_into().unwrap()))
        })
        .collect()
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// The core with its notes' NT_FILE replaced by `desc`: the notes are
/// written again at the file's end and the PT_NOTE header points there.
fn with_nt_file(core: &[u8], desc: &[u8]) -> Vec<u8> {
    let (h, _, _) = *program_headers(core).iter().find(|p| p.1 == 4).expect("a PT_NOTE");
    let off = u64::from_le_bytes(core[h + 8..h + 16].try_into().unwrap()) as usize;
    let len = u64::from_le_bytes(core[h + 32..h + 40].try_into().unwrap()) as usize;
    let notes = &core[off..off + len];
    let mut out_notes = Vec::new();
    let mut at = 0;
    let pad = |n: usize| n.next_multiple_of(4);
    while at + 12 <= notes.len() {
        let namesz = u32::from_le_bytes(notes[at..at + 4].try_into().unwrap()) as usize;
        let descsz = u32::from_le_bytes(notes[at + 4..at + 8].try_into().unwrap()) as usize;
        let ty = u32::from_le_bytes(notes[at + 8..at + 12].try_into().unwrap());
        let whole = 12 + pad(namesz) + pad(descsz);
        if ty == 0x4649_4c45 {
            out_notes.extend_from_slice(&(namesz as u32).to_le_bytes());
            out_notes.extend_from_slice(&(desc.len() as u32).to_le_bytes());
            out_notes.extend_from_slice(&ty.to_le_bytes());
            out_notes.extend_from_slice(&notes[at + 12..at + 12 + pad(namesz)]);
            out_notes.extend_from_slice(desc);
            out_notes.resize(pad(out_notes.len()), 0);
        } else {
            out_notes.extend_from_slice(&notes[at..at + whole]);
        }
        at += whole;
    }
    let mut out = core.to_vec();
    out.resize(out.len().next_multiple_of(8), 0);
    let new_off = out.len();
    out.extend_from_slice(&out_notes);
    put_u64(&mut out, h + 8, new_off as u64);
    put_u64(&mut out, h + 32, out_notes.len() as u64);
    put_u64(&mut out, h + 40, out_notes.len() as u64);
    out
}

/// An NT_FILE entry: start, end, offset in pages, name.
type FileEntry = (u64, u64, u64, Vec<u8>);

/// The NT_FILE note's entries of a core, and its page size.
fn nt_files(core: &[u8]) -> (Vec<FileEntry>, u64) {
    let (h, _, _) = *program_headers(core).iter().find(|p| p.1 == 4).unwrap();
    let off = u64::from_le_bytes(core[h + 8..h + 16].try_into().unwrap()) as usize;
    let len = u64::from_le_bytes(core[h + 32..h + 40].try_into().unwrap()) as usize;
    let notes = &core[off..off + len];
    let mut at = 0;
    while at + 12 <= notes.len() {
        let namesz = u32::from_le_bytes(notes[at..at + 4].try_into().unwrap()) as usize;
        let descsz = u32::from_le_bytes(notes[at + 4..at + 8].try_into().unwrap()) as usize;
        let ty = u32::from_le_bytes(notes[at + 8..at + 12].try_into().unwrap());
        let d = &notes[at + 12 + namesz.next_multiple_of(4)..][..descsz];
        if ty == 0x4649_4c45 {
            let n = u64::from_le_bytes(d[..8].try_into().unwrap()) as usize;
            let mut names = d[16 + 24 * n..].split(|&c| c == 0);
            let page = u64::from_le_bytes(d[8..16].try_into().unwrap());
            let entries = (0..n)
                .map(|i| {
                    let w = |k: usize| u64::from_le_bytes(d[16 + 24 * i + 8 * k..][..8].try_into().unwrap());
                    (w(0), w(1), w(2), names.next().unwrap().to_vec())
                })
                .collect();
            return (entries, page);
        }
        at += 12 + namesz.next_multiple_of(4) + descsz.next_multiple_of(4);
    }
    panic!("no NT_FILE note");
}

fn nt_file_desc(entries: &[FileEntry], page: u64) -> Vec<u8> {
    let mut d = Vec::new();
    d.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    d.extend_from_slice(&page.to_le_bytes());
    for e in entries {
        for v in [e.0, e.1, e.2] {
            d.extend_from_slice(&v.to_le_bytes());
        }
    }
    for e in entries {
        d.extend_from_slice(&e.3);
        d.push(0);
    }
    d
}

/// `heapdump core` of crafted bytes: its output and peak memory; it must
/// end (a hang is killed after two minutes: the old build ran past one).
fn core_of(d: &Scratch, name: &str, bytes: &[u8]) -> (Output, u64, PathBuf) {
    let path = d.path(name);
    std::fs::write(&path, bytes).unwrap();
    let out = d.path(&format!("{name}.hdump"));
    let (o, peak) = with_peak(&["core".as_ref(), path.as_os_str(), "-o".as_ref(), out.as_os_str()]);
    (o, peak, out)
}

/// Exit 0, or 1 with one line; never a panic (101) or an abort (134).
fn answered(o: &Output, what: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    let err: Vec<&str> = err
        .lines()
        .filter(|l| !l.starts_with("peak-kb ") && !l.starts_with("Command exited") && !l.starts_with("heapdump: warning:"))
        .collect();
    match o.status.code() {
        Some(0) => {}
        Some(1) => assert!(err.len() == 1 && err[0].starts_with("heapdump: "), "{what}: not one line: {err:?}"),
        c => panic!("{what}: exit {c:?}: {err:?}"),
    }
}

#[test]
fn crafted_cores_are_answered_in_one_line_or_rightly() {
    let d = Scratch::new("crafted");
    let prog = program(&d, "leaks.c", &[]);
    let expected = valgrind_summary(&prog);
    let p = Stopped::start(Command::new(&prog));
    let core = d.path("core");
    ok(&Command::new("gcore").arg("-o").arg(&core).arg(p.pid.to_string()).output().expect("gcore (gdb) is installed"));
    let core = std::fs::read(format!("{}.{}", core.display(), p.pid)).unwrap();
    drop(p);
    // Each writable segment in turn claims 1 TiB (held and in memory), or
    // a size that runs past the address space.
    let writable: Vec<usize> = program_headers(&core).iter().filter(|p| p.1 == 1 && p.2 & 2 != 0).map(|p| p.0).collect();
    assert!(writable.len() >= 3, "{writable:?}");
    for (k, &h) in writable.iter().enumerate() {
        for (label, filesz, memsz) in [("1 TiB", 1u64 << 40, 1u64 << 40), ("past the end", 4096, u64::MAX - 4096)] {
            let mut b = core.clone();
            put_u64(&mut b, h + 32, filesz);
            put_u64(&mut b, h + 40, memsz);
            let (o, peak, _) = core_of(&d, &format!("seg{k}.core"), &b);
            let what = format!("writable segment {k} of {} claiming {label}", writable.len());
            answered(&o, &what);
            assert!(peak < 1 << 30, "{what}: {} MiB", peak >> 20);
        }
    }
    let (files, page) = nt_files(&core);
    // A count the note cannot hold.
    let mut desc = nt_file_desc(&files, page);
    put_u64(&mut desc, 0, 1 << 40);
    let (o, _, _) = core_of(&d, "count.core", &with_nt_file(&core, &desc));
    answered(&o, "an NT_FILE claiming 2^40 files");
    assert_eq!(o.status.code(), Some(1));
    // 2^20 files, each a page of a file of its own name: the same answer.
    let mut many = files.clone();
    let base = 0x7e00_0000_0000u64;
    many.extend((0..1u64 << 20).map(|i| (base + 4096 * i, base + 4096 * (i + 1), 0, format!("/nonexistent/f{i}").into_bytes())));
    let (o, _, out) = core_of(&d, "many.core", &with_nt_file(&core, &nt_file_desc(&many, page)));
    answered(&o, "an NT_FILE of 2^20 files");
    assert_eq!(o.status.code(), Some(0), "an NT_FILE of 2^20 files: {}", String::from_utf8_lossy(&o.stderr));
    same_classes(ours(&out), expected, "an NT_FILE of 2^20 files");
    // 200 names (links) of one 1 GB file, each mapped whole: read once, and
    // only its headers.
    let big = d.path("big.bin");
    std::fs::File::create(&big).unwrap().set_len(1 << 30).unwrap();
    let mut named = files.clone();
    for i in 0..200u64 {
        let link = d.path(&format!("link{i}"));
        std::os::unix::fs::symlink(&big, &link).unwrap();
        let at = base + (i << 30);
        named.push((at, at + (1 << 30), 0, link.to_string_lossy().into_owned().into_bytes()));
    }
    let (o, peak, out) = core_of(&d, "named.core", &with_nt_file(&core, &nt_file_desc(&named, page)));
    answered(&o, "200 names of one 1 GB file");
    assert_eq!(o.status.code(), Some(0), "200 names of one 1 GB file: {}", String::from_utf8_lossy(&o.stderr));
    assert!(peak < 256 << 20, "200 names of one 1 GB file: {} MiB", peak >> 20);
    same_classes(ours(&out), expected, "200 names of one 1 GB file");
}

#[test]
fn attach_counts_the_program_s_threads_not_the_runtime_s() {
    // Under `heapdump run`, the runtime's helper thread is held with the
    // others but is not one of the program's: the runtime's own dump of
    // the same moment says how many the program has.
    let d = Scratch::new("rt-thread");
    let prog = program(&d, "live_threads.c", &[]);
    ensure_preload();
    let first = d.path("run.hdump");
    let mut cmd = heapdump();
    cmd.args(["run", "--no-at-exit", "-o"]).arg(&first).arg("--").arg(&prog).env("DUMP_FIRST", &first);
    let p = Stopped::start(cmd);
    let out = d.path("attach.hdump");
    let line = ok(&heapdump().args(["attach", &p.pid.to_string(), "-o"]).arg(&out).output().unwrap());
    let own = json(&["summary".as_ref(), "--json".as_ref(), first.as_os_str()]);
    let attached = json(&["summary".as_ref(), "--json".as_ref(), out.as_os_str()]);
    assert_eq!(own["threads"], 3, "the runtime's dump: main and two workers");
    assert_eq!(attached["threads"], own["threads"], "{line}");
    assert!(line.contains(" 3 threads,"), "{line}");
}

#[test]
fn a_core_whose_files_this_machine_lacks_or_has_changed_still_has_its_globals() {
    // A core names files by the paths its process saw (a container's, or
    // a program rebuilt since): a file here that does not fit the core is
    // said and not used, and the core's own copy of the writable mappings
    // keeps the globals roots. The glibc the core names is this machine's.
    let d = Scratch::new("core-files");
    let prog = program(&d, "ns_globals.c", &[]);
    let expected = valgrind_summary(&prog);
    let p = Stopped::start(Command::new(&prog));
    let core = d.path("core");
    ok(&Command::new("gcore").arg("-o").arg(&core).arg(p.pid.to_string()).output().expect("gcore (gdb) is installed"));
    let core_path = PathBuf::from(format!("{}.{}", core.display(), p.pid));
    drop(p);
    // gdb keeps each module's first page (its ELF headers): without them,
    // as a core written with other settings, the files are needed.
    let mut bytes = std::fs::read(&core_path).unwrap();
    let mut dropped = 0;
    for (h, ty, _) in program_headers(&bytes) {
        let off = u64::from_le_bytes(bytes[h + 8..h + 16].try_into().unwrap()) as usize;
        if ty == 1 && bytes.get(off..off + 4) == Some(b"\x7fELF") {
            bytes[h..h + 4].copy_from_slice(&0u32.to_le_bytes()); // PT_NULL
            dropped += 1;
        }
    }
    assert!(dropped >= 2, "the program's and glibc's headers were in the core");
    let core = d.path("headless.core");
    std::fs::write(&core, &bytes).unwrap();
    // The same file: used, nothing said.
    let out = d.path("same.hdump");
    let o = heapdump().arg("core").arg(&core).arg("-o").arg(&out).output().unwrap();
    ok(&o);
    assert!(!String::from_utf8_lossy(&o.stderr).contains("warning"), "{}", String::from_utf8_lossy(&o.stderr));
    same_classes(ours(&out), expected, "the program's own file");
    // Another program under its name: its data lies 1 MiB further on.
    let src = d.path("decoy.c");
    std::fs::write(&src, "const char ro[1 << 20] = {2};\nchar rw[1 << 16] = {1};\nint main(void) { return rw[0] + ro[5]; }\n").unwrap();
    std::fs::remove_file(&prog).unwrap();
    ok(&Command::new("gcc").arg("-o").arg(&prog).arg(&src).output().unwrap());
    for (case, said) in [("rebuilt", "not the file the process mapped"), ("gone", "not on this machine")] {
        if case == "gone" {
            std::fs::remove_file(&prog).unwrap();
        }
        let out = d.path(&format!("{case}.hdump"));
        let o = heapdump().arg("core").arg(&core).arg("-o").arg(&out).output().unwrap();
        ok(&o);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.lines().any(|l| l.contains(prog.to_str().unwrap()) && l.contains(said)), "{case}: {err}");
        same_classes(ours(&out), expected, &format!("the program's file {case}"));
    }
}

#[test]
fn a_refused_attach_says_what_a_container_needs() {
    let d = Scratch::new("ns-refused");
    let prog = program(&d, "leaks.c", &[]);
    let p = Stopped::start(Command::new(&prog));
    let one_line = |o: &Output, what: &str| {
        assert_eq!(o.status.code(), Some(1), "{what}");
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(err.lines().count(), 1, "{what}: {err}");
        err
    };
    // Another user's process, without CAP_SYS_PTRACE.
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"])
        .arg(env!("CARGO_BIN_EXE_heapdump"))
        .args(["attach", &p.pid.to_string(), "-o", "/nonexistent/x.hdump"])
        .output()
        .unwrap();
    let err = one_line(&o, "as nobody");
    assert!(err.contains("CAP_SYS_PTRACE") && err.contains("kubectl debug --profile=general"), "{err}");
    assert!(err.contains("another user's process"), "{err}");
    // The user's own process that made itself not dumpable (ssh-agent,
    // gpg-agent): refused as well, but not as another user's.
    let src = d.path("undumpable.c");
    std::fs::write(
        &src,
        "#include <signal.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <sys/prctl.h>\n#include <unistd.h>\n\
         int main(void) { void *p = malloc(100); prctl(PR_SET_DUMPABLE, 0); fprintf(stderr, \"stopped %d\\n\", getpid()); \
         raise(SIGSTOP); free(p); return 0; }\n",
    )
    .unwrap();
    let agent = d.path("undumpable");
    ok(&Command::new("gcc").arg("-o").arg(&agent).arg(&src).output().unwrap());
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(d.path(""), std::fs::Permissions::from_mode(0o755)).unwrap();
    let as_nobody = ["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"];
    let mut cmd = Command::new("setpriv");
    cmd.args(as_nobody).arg(&agent);
    let a = Stopped::start_in(cmd, |_, pid| pid);
    let o = Command::new("setpriv")
        .args(as_nobody)
        .arg(env!("CARGO_BIN_EXE_heapdump"))
        .args(["attach", &a.pid.to_string(), "-o", "/nonexistent/x.hdump"])
        .output()
        .unwrap();
    let err = one_line(&o, "its own undumpable process, as nobody");
    assert!(err.contains("made itself not dumpable") && !err.contains("another user's"), "{err}");
    // From a PID namespace of its own, the host's process is not there.
    let o = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(env!("CARGO_BIN_EXE_heapdump"))
        .args(["attach", &p.pid.to_string(), "-o"])
        .arg(d.path("x.hdump"))
        .output()
        .unwrap();
    let err = one_line(&o, "from another PID namespace");
    assert!(err.contains(&format!("no process {} in this PID namespace", p.pid)) && err.contains("--pid=host"), "{err}");
}
