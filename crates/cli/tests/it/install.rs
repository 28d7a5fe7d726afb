//! Installing heapdump: one executable that works wherever it is copied
//! (it carries the preload library), says which format it writes, and
//! generates its shell completions and manual page.

use crate::common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Command;

#[test]
fn a_heapdump_copied_alone_traces_with_the_library_it_carries() {
    // A copied binary used to fail: "libheapdump_preload.so not found next
    // to …: build it with …".
    let d = Scratch::new("install");
    let bin = d.path("bin");
    std::fs::create_dir(&bin).unwrap();
    let hd = bin.join("heapdump");
    std::fs::copy(env!("CARGO_BIN_EXE_heapdump"), &hd).unwrap();
    let prog = compile(&d, "leaks.c", &["-O0"]);
    let cache = d.path("cache");
    // A library planted beside the copy's directory (a copy in /tmp would
    // have picked up /tmp/libheapdump_preload.so) is never loaded.
    std::fs::write(d.path("libheapdump_preload.so"), b"planted").unwrap();
    let run = |out: &str| {
        Command::new(&hd)
            .env_remove("HEAPDUMP_PRELOAD")
            .env("XDG_CACHE_HOME", &cache)
            .args(["run", "-o"])
            .arg(d.path(out))
            .arg("--")
            .arg(&prog)
            .output()
            .unwrap()
    };
    let o = run("a.hdump");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(d.path("a.hdump").exists());
    // Nor one beside it in a directory others may write to.
    std::fs::write(bin.join("libheapdump_preload.so"), b"planted").unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = run("a2.hdump");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::remove_file(bin.join("libheapdump_preload.so")).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = cache.join("heapdump");
    let m = std::fs::metadata(&dir).unwrap();
    assert_eq!((m.mode() & 0o777, m.uid()), (0o700, rustix_uid()), "the cache directory is private");
    let libs: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(libs.len(), 1, "{libs:?}");
    let lib = &libs[0];
    let name = lib.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("libheapdump_preload-") && name.ends_with(".so"), "named by its contents: {name}");
    assert_eq!(std::fs::metadata(lib).unwrap().mode() & 0o022, 0, "writable by no one else");
    // Built with panic = "abort": nothing in it can unwind into the host
    // (the unwinding runtime's entry is not even linked).
    let nm = Command::new("nm").args(["-D", "--undefined-only"]).arg(lib).output().unwrap();
    let undefined = String::from_utf8_lossy(&nm.stdout);
    assert!(nm.status.success() && undefined.contains("dlsym"), "nm read the library: {undefined}");
    assert!(!undefined.contains("_Unwind_RaiseException"), "the embedded library can unwind: {undefined}");
    let good = std::fs::read(lib).unwrap();
    // A damaged copy is replaced, never loaded.
    std::fs::set_permissions(lib, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(lib, b"not a library").unwrap();
    let o = run("b.hdump");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(lib).unwrap(), good);
    // A cache directory others may write to is refused, in one line.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = run("c.hdump");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.lines().count() == 1 && err.contains("is not a private directory"), "{err}");
}

fn rustix_uid() -> u32 {
    let o = Command::new("id").arg("-u").output().unwrap();
    String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
}

#[test]
fn version_names_the_dump_format_it_writes() {
    let o = heapdump().arg("--version").output().unwrap();
    let v = ok(&o);
    let (major, minor) = (heapdump_format::raw::MAJOR, heapdump_format::raw::MINOR);
    assert!(v.starts_with(&format!("heapdump {}", env!("CARGO_PKG_VERSION"))), "{v}");
    assert!(
        v.contains(&format!("writes dump format {major}.{minor}")) && v.contains(&format!("reads {major}.0 to {major}.{minor}")),
        "{v}"
    );
}

#[test]
fn completions_and_the_manual_page_are_generated() {
    for shell in ["bash", "zsh", "fish"] {
        let o = heapdump().args(["completions", shell]).output().unwrap();
        let text = ok(&o);
        for word in ["leaks", "retained", "near-limit", "no-on-fatal"] {
            assert!(text.contains(word), "{shell} completions lack {word}");
        }
        // Parsed by the shell itself where it is installed.
        let check: Option<(&str, &[&str])> = match shell {
            "bash" => Some(("bash", &["-n"])),
            "zsh" => Some(("zsh", &["-n"])),
            _ => Some(("fish", &["--no-execute"])),
        };
        if let Some((sh, args)) = check {
            let path = std::env::temp_dir().join(format!("hd-completion-{}.{shell}", std::process::id()));
            std::fs::write(&path, &text).unwrap();
            if let Ok(o) = Command::new(sh).args(args).arg(&path).output() {
                assert!(o.status.success(), "{sh} rejects the script: {}", String::from_utf8_lossy(&o.stderr));
            }
            let _ = std::fs::remove_file(&path);
        }
    }
    assert_eq!(heapdump().args(["completions", "tcsh"]).output().unwrap().status.code(), Some(2));
    let man = ok(&heapdump().arg("man").output().unwrap());
    assert!(man.contains(".TH heapdump 1"), "{}", &man[..man.len().min(300)]);
    for sub in ["run", "summary", "leaks", "retained", "export", "report", "completions"] {
        assert!(man.contains(sub), "the manual lacks {sub}");
    }
}
