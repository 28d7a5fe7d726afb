//! tcmalloc's heap (gperftools 2.10, Debian's libtcmalloc-minimal4)
//! read from outside: `attach` (both modes) and `core` of the suite's
//! programs run with libtcmalloc_minimal preloaded give valgrind's leak
//! classes of the same program with glibc's malloc (libstdc++ loaded as
//! the library loads it), with bytes within tcmalloc's size classes (also
//! after churn that merges spans: tcmalloc's metadata, its span
//! descriptors freed or not, is no root); the program goes on and exits 0;
//! a damaged heap is refused in one line.

use crate::common::*;
use crate::valgrind::{ours, valgrind_summary_with_libstdcxx};
use std::path::{Path, PathBuf};
use std::process::Command;

const LIB: &str = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4";

/// tcmalloc's classes above the sizes asked for: at most an eighth above
/// the size asked for, or 16 bytes for the smallest, and a large block
/// (over 256 KiB, or a class of whole pages) at most a page (8 KiB) more.
fn tcmalloc_rounding(bytes: u64, blocks: u64) -> u64 {
    bytes / 8 + 8192 * blocks
}

fn installed() -> bool {
    let ok = Path::new(LIB).exists();
    assert!(ok || std::env::var_os("CI").is_none(), "libtcmalloc-minimal4 is not installed (scripts/test.sh installs it)");
    ok
}

fn preloaded(prog: &Path) -> Command {
    let mut c = Command::new(prog);
    c.env("LD_PRELOAD", LIB);
    c
}

#[test]
fn attach_and_core_read_a_preloaded_tcmalloc_as_valgrind_reads_glibc() {
    if !installed() {
        return;
    }
    for source in ["leaks.c", "leaks_tree.c", "chain.c", "threads.c", "tcmalloc_merge.c"] {
        // After churn, freed span descriptors in tcmalloc's metadata still
        // point into blocks carved from merged spans: that metadata is the
        // allocator's, no root, and the lost blocks are lost as valgrind
        // says.
        let same = |ours: [(u64, u64); 4], vg: [(u64, u64); 4], what: &str| same_classes_within(ours, vg, what, tcmalloc_rounding);
        let d = Scratch::new("tcmalloc");
        let prog = stopping_program(&d, "gcc", source, &[], "prog");
        let expected = valgrind_summary_with_libstdcxx(&prog);
        let mut p = Stopped::start(preloaded(&prog));
        for mode in ["compact", "full"] {
            let out = d.path(&format!("{mode}.hdump"));
            let o = heapdump().args(["attach", &p.pid.to_string(), "--mode", mode, "-o"]).arg(&out).output().unwrap();
            let line = ok(&o);
            assert!(line.contains("spans of tcmalloc 2.10"), "{source}: {line}");
            same(ours(&out), expected, &format!("{source}, attach --mode {mode}"));
            let s = json(&["summary".as_ref(), "--json".as_ref(), out.as_os_str()]);
            assert_eq!(s["allocator"].as_str(), Some("tcmalloc 2.10"), "{source}");
        }
        let core = d.path("tc.core");
        let o = Command::new("gcore").arg("-o").arg(&core).arg(p.pid.to_string()).output().expect("gcore (gdb) is installed");
        ok(&o);
        let core = PathBuf::from(format!("{}.{}", core.display(), p.pid));
        let out = d.path("core.hdump");
        let o = heapdump().arg("core").arg(&core).arg("--exe").arg(&prog).arg("-o").arg(&out).output().unwrap();
        ok(&o);
        same(ours(&out), expected, &format!("{source}, gcore then core"));
        // The program goes on and ends well.
        let _ = Command::new("kill").args(["-CONT", &p.pid.to_string()]).status();
        let status = p.child.wait().unwrap();
        assert!(status.success(), "{source} exited {status:?}");
    }
}

#[test]
fn a_damaged_tcmalloc_heap_is_refused_in_one_line() {
    if !installed() {
        return;
    }
    let d = Scratch::new("tcmalloc-damaged");
    let prog = stopping_program(&d, "gcc", "tcmalloc_damage.c", &[], "prog");
    for how in ["loop", "middle"] {
        let p = Stopped::start({
            let mut c = preloaded(&prog);
            c.arg(how);
            c
        });
        let err = attach_refused(&d, &p, how);
        assert!(err.contains("tcmalloc's free list"), "{how}: {err}");
    }
}
