//! A program whose memory goes past malloc without an allocator's
//! symbols (a hand-made bump allocator over its own mapping): `run` and
//! `summary` compare the heap with the process's resident anonymous
//! memory at exit (the dump's MEMORY record) and say so; a program whose
//! memory went through malloc, even fragmented, does not warn (#40).

use crate::common::*;

const WARNING: &str = "it allocates past malloc (an allocator of its own, or mmap); what is shown is only what went through malloc";

#[test]
fn a_heap_far_smaller_than_the_resident_memory_is_named_by_run_and_summary() {
    let d = Scratch::new("past-malloc");
    let prog = compile(&d, "past_malloc.c", &["-O0"]);
    for how in ["bump", "malloc", "fragment"] {
        let out = d.path(&format!("{how}.hdump"));
        let (o, dumps) = run_traced(&out, &prog, &[how], &[]);
        ok(&o);
        let err = String::from_utf8_lossy(&o.stderr);
        let s = json(&["summary".as_ref(), "--json".as_ref(), dumps[0].as_os_str()]);
        let rss = s["resident_anon"].as_u64().unwrap_or(0);
        assert!(rss >= 64 << 20, "{how}: the exit dump records the resident anonymous memory: {s}");
        let warned = s["warnings"].as_array().unwrap().iter().any(|w| w.as_str().unwrap_or("").contains(WARNING));
        if how == "bump" {
            assert!(err.contains(WARNING) && err.contains("past_malloc["), "{how}: {err}");
            assert!(warned, "{how}: {s}");
        } else {
            assert!(!err.contains("warning"), "{how}: {err}");
            assert!(!warned, "{how}: {s}");
        }
    }
    // The suite's ordinary leak program warns neither.
    let leaks = compile(&d, "leaks.c", &["-O0"]);
    let (o, dumps) = run_traced(&d.path("leaks.hdump"), &leaks, &[], &[]);
    ok(&o);
    assert!(!String::from_utf8_lossy(&o.stderr).contains("warning"), "{}", String::from_utf8_lossy(&o.stderr));
    let s = json(&["summary".as_ref(), "--json".as_ref(), dumps[0].as_os_str()]);
    assert_eq!(s["warnings"].as_array().map(Vec::len), Some(0), "{s}");
    assert!(s["resident_anon"].as_u64().is_some_and(|r| r > 0), "{s}");
}
