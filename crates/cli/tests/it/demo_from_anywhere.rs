//! `heapdump demo` from wherever heapdump lies: alone (installed), its
//! program beside it but not on PATH (the README's build), or on PATH. It
//! says how to get its program, the commands it suggests run as printed,
//! and its dump is named after the program it dumped.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `heapdump demo` run as `exe`, in `dir`, with only the system's PATH
/// plus `path_first`.
fn demo(exe: &Path, dir: &Path, path_first: Option<&Path>) -> Output {
    let path = match path_first {
        Some(p) => format!("{}:/usr/bin:/bin", p.display()),
        None => "/usr/bin:/bin".into(),
    };
    Command::new(exe)
        .arg("demo")
        .current_dir(dir)
        .env("PATH", path)
        .env("XDG_CACHE_HOME", Path::new(env!("CARGO_TARGET_TMPDIR")).join("xdg-cache"))
        .output()
        .unwrap()
}

/// The commands the demo suggests, each split into words (no word of
/// them holds a space here).
fn suggested(out: &str) -> Vec<Vec<String>> {
    out.lines()
        .skip_while(|l| !l.contains("Go on with:"))
        .skip(1)
        .map(|l| l.split('#').next().unwrap().split_whitespace().map(String::from).collect())
        .collect()
}

#[test]
fn the_demo_says_how_to_get_its_program_and_prints_commands_that_run() {
    let d = Scratch::new("demo-anywhere");
    let bin = d.path("bin");
    let work = d.path("work");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    let exe = bin.join("heapdump");
    std::fs::copy(env!("CARGO_BIN_EXE_heapdump"), &exe).unwrap();

    // Installed alone (`cargo install --path crates/cli`): the error names
    // the package the program is in, and how to build or install it.
    let o = demo(&exe, &work, Some(&bin));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("-p heapdump-demo") && err.contains("--path crates/demo"), "{err}");
    assert!(!err.contains("-p heapdump-cli"), "{err}");

    // Its program beside it, heapdump not on PATH (the README's build):
    // the suggested commands name this executable, and run as printed.
    std::fs::copy(sibling_bin("heapdump-demo"), bin.join("heapdump-demo")).unwrap();
    let o = demo(&exe, &work, None);
    let out = ok(&o);
    let next = suggested(&out);
    assert!(next.len() >= 7, "{out}");
    for cmd in &next {
        assert_eq!(PathBuf::from(&cmd[0]), exe, "{cmd:?}");
    }
    for cmd in next.iter().filter(|c| c[1] == "summary" || c[1] == "path") {
        let o = Command::new(&cmd[0]).args(&cmd[1..]).current_dir(&work).env("PATH", "/usr/bin:/bin").output().unwrap();
        assert!(!ok(&o).is_empty(), "{cmd:?} printed nothing");
    }
    // The dump is named after the program's pid, which its summary says.
    let dumps: Vec<String> = std::fs::read_dir(&work)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".hdump"))
        .collect();
    assert_eq!(dumps.len(), 1, "{dumps:?}");
    let pid: u64 = dumps[0].strip_prefix("heapdump-demo.").and_then(|n| n.strip_suffix(".hdump")).unwrap().parse().unwrap();
    let s = json(&["summary".as_ref(), "--json".as_ref(), work.join(&dumps[0]).as_os_str()]);
    assert_eq!(s["pid"].as_u64(), Some(pid), "the dump's name and its summary's pid");
    assert!(
        out.contains(&format!("pid               {pid}")) || out.lines().any(|l| l.starts_with("pid") && l.ends_with(&pid.to_string())),
        "{out}"
    );

    // On PATH: the commands say plain `heapdump`.
    let o = demo(&exe, &work, Some(&bin));
    for cmd in suggested(&ok(&o)) {
        assert_eq!(cmd[0], "heapdump", "{cmd:?}");
    }
}
