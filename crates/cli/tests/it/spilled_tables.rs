//! A large heap's tables moved to an unnamed file for the dominators
//! (issue 43's memory goal: file-backed pages, not anonymous memory): the
//! answers are those of a heap held in memory, and the file leaves nothing
//! behind, even when the command is killed while it reads from it.

use crate::common::{ensure_preload, heapdump, ok, Scratch};
use std::path::Path;
use std::process::{Command, Stdio};

#[test]
fn a_large_heap_answers_the_same_from_its_tables_file_and_leaves_nothing() {
    let d = Scratch::new("spill");
    // Issue 43's mostly-lost heap, past the size whose tables are moved
    // (2^20 blocks).
    let prog = d.path("mostly_lost");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../benches/c/mostly_lost.c");
    ok(&Command::new("gcc").args(["-O2", "-o"]).arg(&prog).arg(&src).output().unwrap());
    let dump = d.path("lost.hdump");
    ensure_preload();
    let n = "1100000";
    ok(&heapdump()
        .args(["run", "--mode", "compact", "--no-at-exit", "-o"])
        .arg(&dump)
        .arg("--")
        .arg(&prog)
        .arg(n)
        .arg(&dump)
        .output()
        .unwrap());
    // $TMPDIR on disk (the build's directory), where the tables go without
    // caches, against one in memory (tmpfs), which they pass over (for
    // /var/tmp, or memory when that will not take them either).
    let disk = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("spill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&disk);
    std::fs::create_dir_all(&disk).unwrap();
    let in_memory = Path::new("/dev/shm");
    let answer = |tmp: &Path, args: &[&str]| ok(&heapdump().env("TMPDIR", tmp).args(args).arg("--no-cache").arg(&dump).output().unwrap());
    for args in [&["retained"][..], &["summary", "--json"], &["export", "--format", "json", "-o", "-"]] {
        assert_eq!(answer(&disk, args), answer(in_memory, args), "{args:?}");
    }
    assert_eq!(std::fs::read_dir(&disk).unwrap().count(), 0, "nothing left in $TMPDIR");

    // The JSON export asks for the dominators before the leak classes (so
    // that both are computed together, at one peak of memory): its leak
    // classes and top retainers are the commands' own.
    let json_of = |args: &[&str]| -> serde_json::Value { serde_json::from_str(&answer(&disk, args)).unwrap() };
    let leaks = json_of(&["leaks", "--json"]);
    let retained = json_of(&["retained", "--json", "-n", "1"]);
    let doc = json_of(&["export", "--format", "json", "-o", "-"]);
    for class in ["definitely_lost", "indirectly_lost", "possibly_lost", "still_reachable"] {
        assert_eq!(doc["leaks"][class], leaks[class], "{class}");
    }
    assert!(leaks["definitely_lost"]["blocks"].as_u64().unwrap() > 100_000, "a heap mostly lost");
    // The largest retainer (a child of the tree's root: its dominator
    // would retain more) is the command's.
    assert_eq!(doc["retainers"][0]["retained"], retained[0]["retained"]);
    assert_eq!(doc["retainers"][0]["address"], retained[0]["address"]);
    assert_eq!(std::fs::read_dir(&disk).unwrap().count(), 0, "nothing left in $TMPDIR");

    // Killed while its tables are read from the file: nothing left either.
    let mut child = heapdump()
        .env("TMPDIR", &disk)
        .args(["retained", "--no-cache"])
        .arg(&dump)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let maps = format!("/proc/{}/maps", child.id());
    let t0 = std::time::Instant::now();
    let mut mapped = false;
    while !mapped && t0.elapsed().as_secs() < 120 && child.try_wait().unwrap().is_none() {
        mapped = std::fs::read_to_string(&maps).unwrap_or_default().contains(disk.to_str().unwrap());
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(mapped, "the tables were read from a file in $TMPDIR");
    assert_eq!(std::fs::read_dir(&disk).unwrap().count(), 0, "nothing left in $TMPDIR after a kill");
    std::fs::remove_dir(&disk).unwrap();
}
