//! musl's heap (mallocng) read from outside: `attach` (both modes) and
//! `core` of programs built with musl-gcc, dynamic and static, give
//! valgrind's leak classes of the same program built with glibc (valgrind
//! cannot check musl programs itself), with the exact sizes asked for
//! (mallocng records them); the program goes on and exits 0; a damaged
//! heap is refused in one line.

use crate::common::*;
use crate::valgrind::{ours, valgrind_summary};
use std::path::PathBuf;
use std::process::Command;

#[test]
fn attach_and_core_of_musl_programs_give_valgrinds_leak_classes() {
    for source in ["leaks.c", "leaks_tree.c", "chain.c", "threads.c"] {
        let d = Scratch::new("musl-vg");
        let mut expected = valgrind_summary(&stopping_program(&d, "gcc", source, &[], "glibc"));
        if source == "threads.c" {
            // glibc allocates each thread's DTV with malloc (valgrind: possibly
            // lost, from _dl_allocate_tls, the threads being alive); musl
            // keeps a thread's TLS and DTV in the mapping of its stack, so
            // the musl program has no such blocks.
            expected[2] = (0, 0);
        }
        // A static program links mallocng only when it calls free (else
        // musl's bump allocator, refused: static_programs.rs): -u free.
        for (flags, kind) in [(&[][..], "dynamic"), (&["-static", "-Wl,-u,free"][..], "static")] {
            let prog = stopping_program(&d, "musl-gcc", source, flags, kind);
            let mut p = Stopped::start(Command::new(&prog));
            for mode in ["compact", "full"] {
                let out = d.path(&format!("{kind}-{mode}.hdump"));
                let o = heapdump().args(["attach", &p.pid.to_string(), "--mode", mode, "-o"]).arg(&out).output().unwrap();
                let line = ok(&o);
                assert!(line.contains("groups of musl"), "{source} {kind}: {line}");
                // mallocng records the sizes asked for: the bytes are exact.
                assert_eq!(ours(&out), expected, "{source}, {kind}, attach --mode {mode}");
                let s = json(&["summary".as_ref(), "--json".as_ref(), out.as_os_str()]);
                let allocator = s["allocator"].as_str().unwrap_or_default().to_string();
                match kind {
                    "dynamic" => assert!(allocator.starts_with("musl 1.2."), "{allocator}"),
                    _ => assert!(allocator.starts_with("musl"), "{allocator}"),
                }
            }
            let core = d.path(&format!("{kind}.core"));
            let o = Command::new("gcore").arg("-o").arg(&core).arg(p.pid.to_string()).output().expect("gcore (gdb) is installed");
            ok(&o);
            let core = PathBuf::from(format!("{}.{}", core.display(), p.pid));
            let out = d.path(&format!("{kind}-core.hdump"));
            let o = heapdump().arg("core").arg(&core).arg("--exe").arg(&prog).arg("-o").arg(&out).output().unwrap();
            ok(&o);
            assert_eq!(ours(&out), expected, "{source}, {kind}, gcore then core");
            // The program goes on and ends well.
            let _ = Command::new("kill").args(["-CONT", &p.pid.to_string()]).status();
            let status = p.child.wait().unwrap();
            assert!(status.success(), "{source} {kind} exited {status:?}");
        }
    }
}

#[test]
fn a_damaged_musl_heap_is_refused_in_one_line() {
    let d = Scratch::new("musl-damaged");
    let prog = stopping_program(&d, "musl-gcc", "musl_damage.c", &[], "damage");
    for how in ["area", "group", "slot"] {
        let p = Stopped::start({
            let mut c = Command::new(&prog);
            c.arg(how);
            c
        });
        let err = attach_refused(&d, &p, how);
        assert!(err.contains("musl"), "{how}: {err}");
    }
}
