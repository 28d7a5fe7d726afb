//! The report channel of `heapdump run`: the dumps a program's processes
//! take are listed whatever the program does to its environment, however
//! full the temporary directory is, and only the traced tree is heard.

use crate::common::*;
use std::path::Path;
use std::process::{Command, Stdio};

/// The `wrote` lines `run` printed.
fn wrote(stderr: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stderr).lines().filter(|l| l.starts_with("heapdump: wrote ")).map(str::to_string).collect()
}

#[test]
fn a_program_that_clears_its_environment_still_has_its_dump_listed() {
    // The failure guarded: "heapdump: no dump was written", though the
    // dump was.
    ensure_preload();
    let d = Scratch::new("clearenv");
    let prog = compile(&d, "clears_env.c", &["-O0"]);
    let dump = d.path("c.hdump");
    for round in 0..3 {
        let _ = std::fs::remove_file(&dump);
        let o = heapdump().args(["run", "-o"]).arg(&dump).arg("--").arg(&prog).output().unwrap();
        let lines = wrote(&o.stderr);
        assert!(o.status.success(), "round {round}: {}", String::from_utf8_lossy(&o.stderr));
        assert!(dump.exists(), "round {round}: no dump written");
        assert_eq!(lines.len(), 1, "round {round}: {}", String::from_utf8_lossy(&o.stderr));
        assert!(lines[0].contains(dump.to_str().unwrap()) && lines[0].contains("(exit, by clears_env["), "{}", lines[0]);
        assert!(!String::from_utf8_lossy(&o.stderr).contains("no dump was written"));
    }
}

#[test]
fn a_full_temporary_directory_loses_no_report() {
    // A report file in a full $TMPDIR can be neither made ("cannot make a
    // private directory") nor grown: the datagram socket needs no disk.
    if !is_root() {
        eprintln!("skipped: mounting a small full tmpfs needs root");
        return;
    }
    ensure_preload();
    let d = Scratch::new("fulltmp");
    let prog = compile(&d, "leaks.c", &["-O0"]);
    let tmp = d.path("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let dump = d.path("f.hdump");
    // In a mount namespace of its own: a 64 KiB tmpfs as $TMPDIR, filled
    // to the last block and inode, then `heapdump run`.
    let script = format!(
        "mount -t tmpfs -o size=64k,nr_inodes=8 tmpfs {tmp} && \
         (dd if=/dev/zero of={tmp}/fill bs=4k 2>/dev/null; for i in 1 2 3 4 5 6 7 8; do touch {tmp}/f$i 2>/dev/null; done; true) && \
         TMPDIR={tmp} \"$@\"",
        tmp = tmp.display()
    );
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "sh", "-c", &script, "sh"]);
    c.arg(env!("CARGO_BIN_EXE_heapdump")).args(["run", "-o"]).arg(&dump).arg("--").arg(&prog);
    c.env("XDG_CACHE_HOME", std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("xdg-cache"));
    let o = c.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(dump.exists(), "{err}");
    let lines = wrote(&o.stderr);
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("allocations"), "{}", lines[0]);
}

#[test]
fn another_users_forged_report_lines_are_not_heard() {
    // The socket is abstract, so anyone local can send to it: a line from
    // another user (not of the traced tree) must not be listed.
    if !is_root() {
        eprintln!("skipped: needs root to act as another user");
        return;
    }
    ensure_preload();
    let d = Scratch::new("heard");
    let prog = compile(&d, "clears_env.c", &["-O0"]);
    let dump = d.path("g.hdump");
    let run = heapdump().args(["run", "-o"]).arg(&dump).arg("--").arg(&prog).arg("1500").stderr(Stdio::piped()).spawn().unwrap();
    // The socket's name, from the kernel's list of Unix sockets: the one
    // whose inode is among run's descriptors.
    let mut name = None;
    for _ in 0..200 {
        let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{}/fd", run.id()))
            .map(|rd| rd.flatten().filter_map(|e| std::fs::read_link(e.path()).ok()).collect::<Vec<_>>())
            .unwrap_or_default()
            .iter()
            .filter_map(|l| l.to_str()?.strip_prefix("socket:[")?.strip_suffix(']').map(str::to_string))
            .collect();
        let t = std::fs::read_to_string("/proc/net/unix").unwrap();
        name = t
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|f| f.len() > 7 && inodes.iter().any(|i| i == f[6]) && f[7].starts_with("@heapdump-run/"))
            .map(|f| f[7][1..].to_string());
        if name.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let name = name.expect("run's report socket is bound");
    let forged = format!("wrote\\t{}\\t/bin/forged\\t/tmp/forged.hdump\\t1\\t2\\t3\\texit\\n", run.id() + 1);
    let py = format!("import socket; s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.sendto(b'{forged}', b'\\0{name}')");
    let sent = Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups", "/usr/bin/python3", "-c", &py])
        .output()
        .unwrap();
    assert!(sent.status.success(), "the forged line could not be sent: {}", String::from_utf8_lossy(&sent.stderr));
    let o = run.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("/tmp/forged.hdump"), "another user's line was listed: {err}");
    assert_eq!(wrote(&o.stderr).len(), 1, "{err}");
}

fn is_root() -> bool {
    let o = Command::new("id").arg("-u").output().unwrap();
    String::from_utf8_lossy(&o.stdout).trim() == "0"
}

#[test]
fn the_report_channel_is_private() {
    // A report file at a name another local user can predict
    // ($TMPDIR/heapdump-run-<pid>.tsv) could be a symlink or a FIFO they
    // planted: the channel's directory is private and gone after the run.
    ensure_preload();
    let o = heapdump()
        .args([
            "run",
            "--no-at-exit",
            "--",
            "/bin/sh",
            "-c",
            "d=$(dirname \"$HEAPDUMP_REPORT\"); stat -c '%a %u' \"$d\"; id -u; echo \"$HEAPDUMP_REPORT\"",
        ])
        .output()
        .unwrap();
    let out = ok(&o);
    let lines: Vec<&str> = out.lines().collect();
    let (mode_uid, uid, report) = (lines[0], lines[1], lines[2]);
    assert_eq!(mode_uid, format!("700 {uid}"), "the report's directory is private: {out}");
    assert!(!Path::new(report).exists(), "removed after the run");
    assert!(!Path::new(report).parent().unwrap().exists(), "its directory too");
    // As root (CI), a second user tries what the attack did: a symlink to a
    // root-owned file and a FIFO at the report path, while the program runs.
    if uid != "0" {
        return;
    }
    let d = Scratch::new("channel");
    let victim = d.path("victim");
    std::fs::write(&victim, "root's\n").unwrap();
    let as_nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups --";
    let script = format!(
        "{as_nobody} ln -s {v} \"$HEAPDUMP_REPORT\" 2>/dev/null && echo symlink planted; \
         {as_nobody} mkfifo \"$HEAPDUMP_REPORT.fifo\" 2>/dev/null && echo fifo planted; \
         {as_nobody} ls \"$(dirname \"$HEAPDUMP_REPORT\")\" >/dev/null 2>&1 && echo listed; echo done",
        v = victim.display()
    );
    let o = heapdump().args(["run", "--no-at-exit", "--", "/bin/sh", "-c", &script]).output().unwrap();
    assert_eq!(ok(&o).trim(), "done", "user nobody reached the report channel");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's\n");
}
