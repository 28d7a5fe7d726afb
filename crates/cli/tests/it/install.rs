//! Installing heapdump: one executable that works wherever it is copied
//! (it carries the preload library), says which format it writes, and
//! generates its shell completions and manual page.

use crate::common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Command;

#[test]
fn a_heapdump_copied_alone_traces_with_the_library_it_carries() {
    // The failure guarded: a copied binary saying "libheapdump_preload.so
    // not found next to …: build it with …".
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
    // A cache directory others may write to is not used (nor written to):
    // the library goes to the program in a sealed memory file instead.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(lib, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(lib, b"left alone").unwrap();
    let o = run("c.hdump");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(d.path("c.hdump").exists());
    assert_eq!(std::fs::read(lib).unwrap(), b"left alone", "the unsafe cache was written to");
}

/// Runs `args` as the user `uid` (no groups), as `setpriv` does.
fn as_user(uid: u32, args: &[&std::ffi::OsStr]) -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid", &uid.to_string(), "--regid", &uid.to_string(), "--clear-groups", "--"]).args(args);
    c
}

/// Every path under `dir` and its owner.
fn owners(dir: &std::path::Path) -> Vec<(std::path::PathBuf, u32)> {
    let mut out = vec![];
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let Ok(m) = e.path().symlink_metadata() else { continue };
            if m.is_dir() {
                todo.push(e.path());
            }
            out.push((e.path(), m.uid()));
        }
    }
    out
}

#[test]
fn another_user_swapping_the_cache_base_never_gets_a_library_loaded() {
    // Reproduced as the issue did: user nobody owns a directory open to
    // all that holds the cache base, and swaps a directory of its own
    // (holding its library under the cache's very name) with the cache
    // base again and again while another user runs a copied heapdump.
    // That user's run loaded the other's library on the 9th run; root's
    // wrote its temporary file into the other's directory.
    if rustix_uid() != 0 {
        eprintln!("skipped: needs root to act as two users");
        return;
    }
    let d = Scratch::new("swap");
    std::fs::set_permissions(&d.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let hd = d.path("heapdump");
    std::fs::copy(env!("CARGO_BIN_EXE_heapdump"), &hd).unwrap();
    let mark = d.path("marks/evil-ran");
    std::fs::create_dir(d.path("marks")).unwrap();
    std::fs::set_permissions(d.path("marks"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let evil = compile(&d, "evil_lib.c", &["-shared", "-fPIC", &format!("-DEVIL_MARK=\"{}\"", mark.display())]);
    let swap = compile(&d, "swap_dirs.c", &["-O1"]);
    // The cache's name for the library, from a run with a private cache.
    let private = d.path("private-cache");
    let o = Command::new(&hd)
        .env("XDG_CACHE_HOME", &private)
        .args(["run", "-o"])
        .arg(d.path("p.hdump"))
        .args(["--", "/bin/true"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let name = std::fs::read_dir(private.join("heapdump")).unwrap().next().unwrap().unwrap().file_name();
    // The other user's directory: open to all, with its own tree ready to
    // swap in, the library in place under the cache's name.
    let open = d.path("shared");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let nobody = 65534;
    for sub in [".cache", "evil", "evil/heapdump"] {
        std::fs::create_dir(open.join(sub)).unwrap();
        std::fs::set_permissions(open.join(sub), std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    std::fs::copy(&evil, open.join("evil/heapdump").join(&name)).unwrap();
    std::fs::set_permissions(open.join("evil/heapdump").join(&name), std::fs::Permissions::from_mode(0o755)).unwrap();
    for (p, _) in owners(&open).into_iter().chain([(open.clone(), 0)]) {
        std::os::unix::fs::lchown(&p, Some(nobody), Some(nobody)).unwrap();
    }
    let out = d.path("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).unwrap();
    let attacker = as_user(
        nobody,
        &[swap.as_os_str(), open.join(".cache").as_os_str(), open.join("evil").as_os_str(), d.path("marks/stop").as_os_str()],
    )
    .stdout(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let user = 1001;
    let base = open.join(".cache");
    for i in 0..40 {
        let dump = out.join(format!("r{i}.hdump"));
        let args = [hd.as_os_str(), "run".as_ref(), "-o".as_ref(), dump.as_os_str(), "--".as_ref(), "/bin/true".as_ref()];
        // Another user on odd runs, root on even ones.
        let mut c = if i % 2 == 1 { as_user(user, &args) } else { Command::new(args[0]) };
        if i % 2 == 0 {
            c.args(&args[1..]);
        }
        let o = c.env("XDG_CACHE_HOME", &base).env_remove("HEAPDUMP_PRELOAD").output().unwrap();
        assert!(o.status.success() && dump.exists(), "run {i}: {:?} {}", o.status, String::from_utf8_lossy(&o.stderr));
        assert!(!mark.exists(), "run {i} loaded the other user's library: {}", std::fs::read_to_string(&mark).unwrap_or_default());
    }
    std::fs::write(d.path("marks/stop"), b"").unwrap();
    let o = attacker.wait_with_output().unwrap();
    let swaps: u64 = String::from_utf8_lossy(&o.stdout).split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(swaps > 0, "the other user's swaps did not run: {:?}", String::from_utf8_lossy(&o.stdout));
    // Nothing of heapdump's was written into the other user's directory.
    let theirs = owners(&open);
    assert!(theirs.iter().all(|(_, u)| *u == nobody), "written into another user's directory: {theirs:?}");
    assert!(!mark.exists());
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
