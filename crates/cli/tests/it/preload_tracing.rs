//! Programs nobody rebuilt, traced with `heapdump run`: each dump holds
//! exactly what the program made, with the sizes it asked for.

use crate::common::*;

#[test]
fn every_interposed_function_is_seen_with_its_requested_size() {
    let d = Scratch::new("every");
    let prog = compile(&d, "every_function.c", &["-O0"]);
    let (o, dumps) = run_traced(&d.path("e.hdump"), &prog, &[], &[]);
    ok(&o);
    assert_eq!(dumps, vec![d.path("e.hdump")]);
    let b = blocks(&dumps[0]);
    let sizes: Vec<u64> = {
        let mut s: Vec<u64> = b.iter().map(|x| x.1).collect();
        s.sort();
        s
    };
    // malloc, calloc(3x1002), realloc grown, reallocarray(2x1004),
    // posix_memalign, aligned_alloc, memalign, valloc, pvalloc (whole page),
    // realloc shrunk, realloc(NULL): and nothing else (freed blocks, the
    // realloc(p, 0) and the overflowing calloc are gone).
    assert_eq!(sizes, vec![1001, 1003, 1005, 1007, 1008, 1010, 1011, 1024, 2008, 3006, 4096]);
    let at = |size| b.iter().find(|x| x.1 == size).unwrap().0;
    assert_eq!(at(1005) % 64, 0, "posix_memalign alignment");
    assert_eq!(at(1024) % 128, 0, "aligned_alloc alignment");
    assert_eq!(at(1008) % 4096, 0, "valloc alignment");
    let s = json(&["summary".as_ref(), "--json".as_ref(), dumps[0].as_os_str()]);
    assert_eq!(s["allocations"], 11);
    assert_eq!(s["bytes"], 1001 + 1003 + 1005 + 1007 + 1008 + 1010 + 1011 + 1024 + 2008 + 3006 + 4096);
    assert_eq!(s["reason"], "exit");
}

#[test]
fn threads_allocations_are_exact() {
    let d = Scratch::new("threads");
    let prog = compile(&d, "threads.c", &["-O1", "-pthread"]);
    let (o, dumps) = run_traced(&d.path("t.hdump"), &prog, &[], &["--mode", "full"]);
    ok(&o);
    let b = blocks(&dumps[0]);
    for t in 0..4 {
        assert_eq!(count_size(&b, 100 + t), 500, "thread {t}");
    }
}

/// `--collapse` leaves the fork next to nothing to copy: the program's
/// anonymous memory (a big array the kernel merged with a mapping of the
/// runtime's: skipped whole before) and the tracker's site words on huge
/// pages (on 4 KiB pages, the array alone leaves 76 MiB of small pages
/// with 600 000 blocks).
#[test]
fn a_collapse_leaves_the_fork_few_small_pages() {
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if thp.is_empty() || thp.contains("[never]") {
        eprintln!("no transparent huge pages here ({thp:?}): nothing to collapse");
        return;
    }
    let d = Scratch::new("collapse-all");
    let prog = compile(&d, "collapse_all.c", &["-O1"]);
    let dump = d.path("c.hdump");
    let (o, _) = run_traced(&dump, &prog, &[dump.to_str().unwrap()], &["--mode", "compact", "--no-at-exit", "--fork", "--collapse"]);
    let out = ok(&o);
    let field = |name: &str| -> Vec<u64> {
        out.lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("{name} missing: {out}"))
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect()
    };
    let array = field("array ");
    assert!(array[0] >= array[1], "the array's whole 2 MiB ranges on huge pages: {array:?} KiB");
    let small = field("small ")[0];
    assert!(small < 16 * 1024, "{small} KiB of anonymous memory left on 4 KiB pages");
    // Without the collapse, every block having a site: the tracker's site
    // words are on huge pages with its slots (on 4 KiB pages they would
    // be 24 MiB here, 343 MB at 22 M blocks, all copied by the fork).
    let (o, _) = run_traced(&dump, &prog, &[dump.to_str().unwrap()], &["--mode", "compact", "--no-at-exit", "--fork"]);
    let out = ok(&o);
    let shadow: u64 = out.lines().find_map(|l| l.strip_prefix("shadow ")).unwrap_or_else(|| panic!("{out}")).trim().parse().unwrap();
    // 4 to 8.5 MiB after (the chunks a heap starts in, before the table
    // knows it is dense, keep 4 KiB pages), 26 MiB before.
    assert!(shadow < 13 * 1024, "{shadow} KiB of the tracker's shadow on 4 KiB pages");
}

#[test]
fn a_forked_writer_after_a_collapse_dumps_exactly() {
    let d = Scratch::new("collapse");
    let prog = compile(&d, "threads.c", &["-O1", "-pthread"]);
    let (o, dumps) = run_traced(&d.path("t.hdump"), &prog, &[], &["--mode", "full", "--fork", "--collapse"]);
    ok(&o);
    let b = blocks(&dumps[0]);
    for t in 0..4 {
        assert_eq!(count_size(&b, 100 + t), 500, "thread {t}");
    }
    let o = heapdump().args(["run", "--collapse", "--"]).arg(&prog).output().unwrap();
    assert!(!o.status.success(), "--collapse without --fork is refused");
    assert!(String::from_utf8_lossy(&o.stderr).contains("--fork"), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn fork_gives_each_process_its_own_dump() {
    let d = Scratch::new("fork");
    let prog = compile(&d, "forks.c", &["-O0"]);
    let (o, dumps) = run_traced(&d.path("f.hdump"), &prog, &[], &[]);
    ok(&o);
    assert_eq!(dumps.len(), 2, "{dumps:?}");
    // The first dump of the process tree (the child's, at its exit) takes
    // the configured path; the other is numbered <stem>.<pid>.<n>.
    let first = d.path("f.hdump");
    assert!(dumps.contains(&first), "the first dump takes the configured path: {dumps:?}");
    let other = dumps.iter().find(|p| **p != first).unwrap();
    let name = other.file_name().unwrap().to_str().unwrap();
    assert!(
        name.starts_with("f.") && name.ends_with(".hdump") && name.split('.').count() == 4,
        "later dump named f.<pid>.<n>.hdump: {name}"
    );
    let (fb, ob) = (blocks(&first), blocks(other));
    let (pb, cb) = if count_size(&fb, 222) == 1 { (ob, fb) } else { (fb, ob) };
    assert_eq!((count_size(&pb, 111), count_size(&pb, 222), count_size(&pb, 333)), (1, 0, 1));
    assert_eq!((count_size(&cb, 111), count_size(&cb, 222), count_size(&cb, 333)), (1, 1, 0));
}

#[test]
fn exec_keeps_tracing() {
    let d = Scratch::new("exec");
    let prog = compile(&d, "execs.c", &["-O0"]);
    let (o, dumps) = run_traced(&d.path("x.hdump"), &prog, &[], &[]);
    ok(&o);
    // The original image, and the executed one (the forked child that
    // exec'd never reaches exit in the first image).
    assert_eq!(dumps.len(), 2, "{dumps:?}");
    let all: Vec<Vec<(u64, u64)>> = dumps.iter().map(|p| blocks(p)).collect();
    assert!(all.iter().any(|b| count_size(b, 444) == 1 && count_size(b, 777) == 0));
    assert!(all.iter().any(|b| count_size(b, 777) == 1 && count_size(b, 444) == 0));
}

#[test]
fn cxx_operator_new_is_seen() {
    let d = Scratch::new("cxx");
    let prog = compile(&d, "cxx.cpp", &["-O0"]);
    let (o, dumps) = run_traced(&d.path("c.hdump"), &prog, &[], &[]);
    ok(&o);
    let b = blocks(&dumps[0]);
    assert_eq!(count_size(&b, 48), 10, "ten Nodes");
    assert_eq!(count_size(&b, 400), 1, "new int[100]");
    assert_eq!(count_size(&b, 200), 0, "deleted new int[50]");
    assert_eq!(count_size(&b, 24), 1, "the vector object");
    assert_eq!(count_size(&b, 2400), 1, "its 300 doubles");
}

#[test]
fn a_rust_binary_traced_by_preload_matches_the_same_program_tracked_in_process() {
    let d = Scratch::new("rust");
    let (o, dumps) = run_traced(&d.path("p.hdump"), sibling_bin("heapdump-test-workload").as_ref(), &[], &[]);
    ok(&o);
    let plain = blocks(&dumps[0]);
    let o = std::process::Command::new(sibling_bin("heapdump-test-workload-tracked"))
        .env("HEAPDUMP_AT_EXIT", "1")
        .env("HEAPDUMP_OUTPUT", d.path("t.hdump"))
        .output()
        .unwrap();
    ok(&o);
    let tracked = blocks(&d.path("t.hdump"));
    let pick = |b: &[(u64, u64)]| {
        let mut v: Vec<u64> = b.iter().map(|x| x.1).filter(|s| (10_001..=10_100).contains(s) || *s == 2400).collect();
        v.sort();
        v
    };
    let expected: Vec<u64> = std::iter::once(2400).chain(10_001..=10_100).collect();
    assert_eq!(pick(&plain), expected);
    assert_eq!(pick(&tracked), expected);
}

#[test]
fn run_exits_with_the_programs_status_and_reports_missing_programs() {
    let d = Scratch::new("status");
    ensure_preload();
    let o = heapdump().args(["run", "--no-at-exit", "--", "sh", "-c", "exit 7"]).output().unwrap();
    assert_eq!(o.status.code(), Some(7));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no dump was written"));
    let o = heapdump().args(["run", "--", "sh", "-c", "kill -TERM $$"]).current_dir(&d.0).output().unwrap();
    assert_eq!(o.status.code(), Some(128 + 15));
    // As shells do (DESIGN.md): not found 127.
    let o = heapdump().args(["run", "--", "/nonexistent/program"]).output().unwrap();
    assert_eq!(o.status.code(), Some(127));
    let o = heapdump().args(["run", "--backtrace", "sometimes", "--", "true"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn libraries_loaded_later_are_in_the_module_map_and_symbolized() {
    let d = Scratch::new("dlopen");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/late.c");
    let lib = d.path("liblate.so");
    let o = std::process::Command::new("gcc").args(["-O1", "-g", "-shared", "-fPIC", "-o"]).arg(&lib).arg(&src).output().unwrap();
    ok(&o);
    let prog = compile(&d, "dlopens.c", &["-O1", "-ldl"]);
    let (o, dumps) = run_traced(&d.path("l.hdump"), &prog, &[lib.to_str().unwrap()], &[]);
    ok(&o);
    let top = json(&["top".as_ref(), "--json".as_ref(), dumps[0].as_os_str()]);
    let row = top.as_array().unwrap().iter().find(|r| r["bytes"] == 4321).expect("the block from the late library");
    assert!(row["key"].as_str().unwrap().starts_with("late_alloc"), "{row}");
    assert!(row["key"].as_str().unwrap().contains("late.c"), "file and line from the library's debug info: {row}");
}

/// Traces `prog args` with `HEAPDUMP_UNWINDER=unwinder`; returns the
/// folded stacks of its dump at exit.
fn folded_with(d: &Scratch, tag: &str, unwinder: &str, prog: &std::path::Path, args: &[&std::ffi::OsStr]) -> String {
    let out = d.path(&format!("{tag}.{unwinder}.hdump"));
    ok(&heapdump().env("HEAPDUMP_UNWINDER", unwinder).arg("run").arg("-o").arg(&out).arg("--").arg(prog).args(args).output().unwrap());
    let f = d.path(&format!("{tag}.{unwinder}.folded"));
    ok(&heapdump().arg("export").arg(&out).args(["--format", "folded", "-o"]).arg(&f).output().unwrap());
    std::fs::read_to_string(&f).unwrap()
}

/// The caching unwinder gives the same sites as libgcc's `_Unwind_Backtrace`
/// on C and C++ built without frame pointers, through libc, libstdc++ and
/// thread start: the folded stacks of both dumps are identical.
#[test]
fn the_cached_unwinder_gives_libgccs_sites() {
    let d = Scratch::new("unwinders");
    ensure_preload();
    for (source, flags) in [("cxx.cpp", &["-O2"][..]), ("threads.c", &["-O2", "-pthread"][..]), ("leaks_tree.c", &["-O2"][..])] {
        let prog = compile(&d, source, flags);
        let folded = |unwinder: &str| {
            let mut lines: Vec<String> = folded_with(&d, source, unwinder, &prog, &[]).lines().map(str::to_string).collect();
            lines.sort();
            lines
        };
        let (cached, libgcc) = (folded("cached"), folded("libgcc"));
        assert!(cached.iter().any(|l| l.contains("main")), "{source}: symbolized stacks expected: {cached:#?}");
        assert_eq!(cached, libgcc, "{source}: sites differ between the unwinders");
    }
}

/// A library unloaded and another loaded, often at its address (where the
/// kernel places it is not ours to choose): the second's allocation has the
/// same stack with the cached unwinder as with libgcc's. That `dlclose`
/// empties the rule cache is checked directly by the runtime's tests.
#[test]
fn unloading_code_forgets_its_unwind_rules() {
    let d = Scratch::new("reloads");
    ensure_preload();
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/plugin.c");
    let (a, b) = (d.path("libplugin_a.so"), d.path("libplugin_b.so"));
    for (lib, def) in [(&a, "-DFRAME=20000"), (&b, "-DFRAME=30000")] {
        let o = std::process::Command::new("gcc").args(["-O2", "-g", "-shared", "-fPIC", def, "-o"]).arg(lib).arg(&src).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let prog = compile(&d, "reloads.c", &["-O1", "-g", "-ldl"]);
    let stack = |unwinder: &str| {
        let text = folded_with(&d, "r", unwinder, &prog, &[a.as_os_str(), b.as_os_str()]);
        // Plugin B's block: n = 5000 plus a (negative) byte of the frame,
        // allocated in plugin_alloc (B is loaded at the dump; A is not).
        let b_block =
            |l: &&str| l.contains("plugin_alloc") && l.rsplit(' ').next().and_then(|n| n.parse::<u64>().ok()).is_some_and(|n| n > 1000);
        text.lines().find(b_block).map(str::to_string).unwrap_or_else(|| panic!("no block from plugin B in {text}"))
    };
    let cached = stack("cached");
    assert!(cached.contains("plugin_alloc") && cached.contains("from_main"), "{cached}");
    assert_eq!(cached, stack("libgcc"));
}
