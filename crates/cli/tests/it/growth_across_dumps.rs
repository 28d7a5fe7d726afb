//! `growth`: the structures that grow across dumps of one process, while
//! everything stays reachable (what no leak check sees), and not the large
//! stable ones, churn or a spike.

use crate::common::*;
use std::path::PathBuf;

/// The service's four dumps, oldest first (run prints them in order).
pub(crate) fn service_dumps(d: &Scratch) -> Vec<PathBuf> {
    let prog = compile(d, "growing_service.c", &["-O1", "-g"]);
    let out = d.path("svc.hdump");
    let (o, dumps) = run_traced(&out, &prog, &[out.to_str().unwrap()], &["--no-at-exit"]);
    ok(&o);
    assert_eq!(dumps.len(), 4, "one dump per phase: {dumps:?}");
    dumps
}

fn growth_json(dumps: &[PathBuf]) -> serde_json::Value {
    let mut args: Vec<&std::ffi::OsStr> = vec!["growth".as_ref(), "--json".as_ref()];
    args.extend(dumps.iter().map(|p| p.as_os_str()));
    json(&args)
}

#[test]
fn the_growing_cache_ranks_first_and_the_stable_table_churn_and_spike_never_appear() {
    let d = Scratch::new("growth-service");
    let dumps = service_dumps(&d);
    let v = growth_json(&dumps);
    let rows = v.as_array().unwrap();
    assert!(!rows.is_empty(), "the cache grows");
    let cache = &rows[0];
    assert_eq!(cache["key"], "static cache_head", "{cache}");
    assert_eq!(cache["steps_grown"], 3);
    let bytes: Vec<u64> = cache["bytes"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap()).collect();
    let blocks: Vec<u64> = cache["blocks"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap()).collect();
    assert_eq!(bytes.len(), 4);
    // 3000 entries of 24 bytes and their 48-byte strings a phase; a stale
    // pointer on a stack may hold one block apart (a root of its own).
    for (k, (&b, &n)) in bytes.iter().zip(&blocks).enumerate() {
        let want = 6000 * (k as u64 + 1);
        assert!(n <= want && n + 2 >= want, "dump {k}: {n} blocks, want {want}");
        assert!(b <= want / 2 * 72 && b + 2 * 48 >= want / 2 * 72, "dump {k}: {b} bytes");
    }
    let sites: Vec<&str> = cache["sites"].as_array().unwrap().iter().map(|s| s["site"].as_str().unwrap()).collect();
    assert!(sites.iter().all(|s| s.starts_with("cache_put")), "the sites adding to it: {sites:?}");
    assert!(cache["path"][0]["from"].as_str().unwrap().starts_with("static cache_head"), "{}", cache["path"]);
    for r in rows {
        let key = r["key"].as_str().unwrap();
        let sites = r["sites"].to_string();
        assert!(
            !key.contains("table")
                && !key.contains("churn")
                && !key.contains("big")
                && !sites.contains("build_table")
                && !sites.contains("churn_to"),
            "only the cache grows, not {key} ({sites})"
        );
    }
    // The text says the same, in bytes a person reads.
    let o = heapdump().arg("growth").args(&dumps).output().unwrap();
    let text = ok(&o);
    assert!(text.contains("1. static cache_head: ") && text.contains("grew at 3 of 3 steps"), "{text}");
    assert!(text.contains("KiB"), "{text}");
}

/// The newest dump of a service (#41): `top --peak` ranks the 48 MiB
/// buffer's site (`buffer`) first with its one block, although nothing of
/// it is live; `top --allocated` counts the churn's (`churn`) 4000
/// buffers and 1,022,000 bytes exactly (1000 a phase, of 204, 409, 102
/// and 307 bytes), none a temporary.
fn peak_and_totals_of_the_service(newest: &std::path::Path, buffer: &str, churn: &str) {
    let live = json(&["top".as_ref(), "--json".as_ref(), newest.as_os_str()]);
    assert!(live.as_array().unwrap().iter().all(|r| r["bytes"].as_u64().unwrap() < 48 << 20), "{live}");
    let peak = json(&["top".as_ref(), "--peak".as_ref(), "--json".as_ref(), newest.as_os_str()]);
    let first = &peak[0];
    assert!(first["key"].as_str().unwrap().contains(buffer), "{peak}");
    assert_eq!((first["bytes"].as_u64(), first["allocations"].as_u64()), (Some(48 << 20), Some(1)), "{peak}");
    let all = json(&["top".as_ref(), "--allocated".as_ref(), "--json".as_ref(), "-n".as_ref(), "50".as_ref(), newest.as_os_str()]);
    let rows = all.as_array().unwrap();
    let c = rows.iter().find(|r| r["key"].as_str().unwrap().contains(churn)).unwrap_or_else(|| panic!("{all}"));
    assert_eq!((c["allocations"].as_u64(), c["bytes"].as_u64(), c["temporary"].as_u64()), (Some(4000), Some(1_022_000), Some(0)), "{all}");
}

#[test]
fn the_service_s_peak_holds_the_spike_gone_since_and_its_totals_count_the_churn() {
    let d = Scratch::new("growth-service-peak");
    let dumps = service_dumps(&d);
    peak_and_totals_of_the_service(&dumps[3], "growing_service.c:61", "churn_to (");
}

/// The same service in Rust, tracked in-process with `Tracked<System>`
/// (the demo crate's `heapdump-test-service-tracked`, dumping itself at
/// each phase's end): `growth` ranks its static `CACHE` first, grown at
/// every step by 6000 blocks, and nothing else; its newest dump's peak
/// and totals as the C service's.
#[test]
fn the_rust_service_with_tracked_grows_by_its_cache_and_peaks_with_its_spike() {
    let d = Scratch::new("growth-service-rust");
    let o =
        std::process::Command::new(sibling_bin("heapdump-test-service-tracked")).arg(&d.0).env("HEAPDUMP_SIGNAL", "0").output().unwrap();
    ok(&o);
    let dumps: Vec<PathBuf> = (0..4).map(|k| d.path(&format!("svc.{k}.hdump"))).collect();
    let v = growth_json(&dumps);
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 1, "only the cache grows: {v}");
    assert!(rows[0]["key"].as_str().unwrap().ends_with("::CACHE"), "{v}");
    assert_eq!(rows[0]["steps_grown"], 3, "{v}");
    let blocks: Vec<u64> = rows[0]["blocks"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap()).collect();
    assert_eq!(blocks, [6000, 12000, 18000, 24000], "{v}");
    peak_and_totals_of_the_service(&dumps[3], "big_buffer", "churn_to");
}

#[test]
fn dumps_out_of_order_of_other_processes_or_too_few_are_refused() {
    let d = Scratch::new("growth-refused");
    let dumps = service_dumps(&d);
    let o = heapdump().arg("growth").arg(&dumps[2]).arg(&dumps[1]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("oldest first") && err.lines().count() == 1, "{err}");
    // Another process: the demo's dump.
    let other = demo_dump(&d);
    let o = heapdump().arg("growth").arg(&dumps[0]).arg(&other).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("one process") && err.lines().count() == 1, "{err}");
    // One dump is bad usage.
    let o = heapdump().arg("growth").arg(&dumps[0]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    // A dump that is not one.
    let junk = d.path("junk.hdump");
    std::fs::write(&junk, b"not a dump").unwrap();
    let o = heapdump().arg("growth").arg(&dumps[0]).arg(&junk).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&o.stderr).lines().count(), 1);
}

/// A real program: CPython appending to a dict in a loop (through malloc,
/// `PYTHONMALLOC=malloc`, so that every object is a block). The dict
/// object stays at its address while its keys table moves and grows: the
/// structure is the dict, held at the same address in every dump.
#[test]
fn a_python_dict_that_grows_is_named_by_the_block_that_holds_it() {
    let d = Scratch::new("growth-python");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/grows_dict.py");
    let out = d.path("py.hdump");
    ensure_preload();
    let o = heapdump()
        .env("PYTHONMALLOC", "malloc")
        .args(["run", "--no-at-exit", "-o"])
        .arg(&out)
        .arg("--")
        .arg("/usr/bin/python3")
        .arg(&script)
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let dumps: Vec<PathBuf> =
        err.lines().filter_map(|l| l.strip_prefix("heapdump: wrote ")).map(|l| PathBuf::from(l.split(" (").next().unwrap())).collect();
    assert_eq!(dumps.len(), 4, "{err}");
    let v = growth_json(&dumps);
    let top = &v[0];
    assert_eq!(top["steps_grown"], 3, "{top}");
    let blocks: Vec<u64> = top["blocks"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap()).collect();
    // 20000 keys and 20000 values a phase, two blocks each.
    for w in blocks.windows(2) {
        assert!(w[1] >= w[0] + 39_000 && w[1] <= w[0] + 41_000, "blocks per dump: {blocks:?}");
    }
    assert!(top["key"].as_str().unwrap().contains("block at 0x"), "{top}");
}

/// `run --every` in a pre-fork server's worker (#41): the worker, forked
/// after the parent's helper thread started, keeps the schedule with a
/// helper of its own and writes its own series, named by its pid, which
/// `growth` reads (its list first); the parent's dumps stay the parent's.
#[test]
fn a_forked_worker_takes_its_own_every_series() {
    let d = Scratch::new("growth-every-fork");
    let prog = compile(&d, "every_worker.c", &["-O1", "-g"]);
    let out = d.path("w.hdump");
    let (o, dumps) = run_traced(&out, &prog, &[], &["--every", "300ms", "--no-at-exit"]);
    let stdout = ok(&o);
    let worker: u64 = stdout.lines().find_map(|l| l.strip_prefix("worker ")).unwrap().trim().parse().unwrap();
    let (mut mine, mut parents) = (Vec::new(), 0);
    for p in &dumps {
        let s = json(&["summary".as_ref(), "--json".as_ref(), p.as_os_str()]);
        assert_eq!(s["reason"], "every", "{p:?}");
        if s["pid"].as_u64() == Some(worker) {
            let name = p.file_name().unwrap().to_str().unwrap();
            assert!(name == "w.hdump" || name.starts_with(&format!("w.{worker}.")), "named by the worker's pid: {name}");
            mine.push(p.clone());
        } else {
            parents += 1;
        }
    }
    // About six in 2 s; a loaded machine may take fewer.
    assert!(mine.len() >= 3, "the worker's own series: {dumps:?}");
    assert!(parents >= 1, "the parent keeps its series: {dumps:?}");
    let v = growth_json(&mine);
    assert_eq!(v[0]["key"], "static worker_list", "{v}");
    assert_eq!(v[0]["steps_grown"].as_u64(), Some(mine.len() as u64 - 1), "{v}");
}

#[test]
fn run_every_takes_a_series_in_order_that_growth_reads() {
    let d = Scratch::new("growth-every");
    let prog = compile(&d, "grows_slowly.c", &["-O1", "-g"]);
    let out = d.path("q.hdump");
    let (o, dumps) = run_traced(&out, &prog, &[], &["--every", "300ms", "--no-at-exit"]);
    ok(&o);
    // About five in 1.5 s; a loaded machine may take fewer.
    assert!(dumps.len() >= 3, "dumps on the schedule: {dumps:?}");
    let mut last = 0;
    for (k, p) in dumps.iter().enumerate() {
        let s = json(&["summary".as_ref(), "--json".as_ref(), p.as_os_str()]);
        assert_eq!(s["reason"], "every", "{p:?}");
        assert_eq!(s["mode"], "compact");
        let allocations = s["allocations"].as_u64().unwrap();
        assert!(allocations >= last, "dump {k} of the series holds less than the one before");
        last = allocations;
        if k > 0 {
            let name = p.file_name().unwrap().to_str().unwrap();
            assert!(name.ends_with(&format!(".{k}.hdump")), "named in order: {name}");
        }
    }
    let v = growth_json(&dumps);
    assert_eq!(v[0]["key"], "static queue", "{v}");
    assert_eq!(v[0]["steps_grown"].as_u64(), Some(dumps.len() as u64 - 1));
    // A schedule that is not one is bad usage.
    for bad in ["0", "soon", "5x"] {
        let o = heapdump().args(["run", "--every", bad, "--", "true"]).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "--every {bad}");
        assert!(String::from_utf8_lossy(&o.stderr).contains("--every"), "--every {bad}");
    }
}

#[test]
fn a_series_of_large_heaps_held_in_files_answers_as_in_memory() {
    // Issue 43's memory goal: each dump's tables, then each older dump's
    // answers, moved to an unnamed file as growth goes (heaps of 2^20
    // blocks and more). The service with a table of 1.1 M records: the
    // answers read from the files ($TMPDIR on disk) are those held in
    // memory ($TMPDIR in memory, which the tables never go to), and the
    // cache still ranks first.
    let d = Scratch::new("growth-large");
    let prog = compile(&d, "growing_service.c", &["-O1", "-g"]);
    let out = d.path("svc.hdump");
    let (o, dumps) = run_traced(&out, &prog, &[out.to_str().unwrap(), "1100000"], &["--no-at-exit", "--mode", "compact"]);
    ok(&o);
    assert_eq!(dumps.len(), 4, "one dump per phase: {dumps:?}");
    let disk = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("growth-spill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&disk);
    std::fs::create_dir_all(&disk).unwrap();
    let answer = |tmp: &std::path::Path| {
        let o = heapdump().env("TMPDIR", tmp).args(["growth", "--json", "--no-cache"]).args(&dumps).output().unwrap();
        ok(&o)
    };
    let (on_disk, in_memory) = (answer(&disk), answer(std::path::Path::new("/dev/shm")));
    assert_eq!(on_disk, in_memory);
    // With caches: each older dump's leak classes let go once its tree is
    // computed (the first question) or read from its cache (the second),
    // the tree's tables then moved to a file (or read from the cache's
    // mapping): the same answer both times.
    let cache = disk.with_extension("xdg");
    let _ = std::fs::remove_dir_all(&cache);
    for question in ["first", "second"] {
        let o = heapdump().env("TMPDIR", &disk).env("XDG_CACHE_HOME", &cache).args(["growth", "--json"]).args(&dumps).output().unwrap();
        assert_eq!(ok(&o), on_disk, "the {question} question with caches");
    }
    std::fs::remove_dir_all(&cache).unwrap();
    let rows: serde_json::Value = serde_json::from_str(&on_disk).unwrap();
    assert_eq!(rows[0]["key"], "static cache_head", "{rows}");
    assert_eq!(rows[0]["steps_grown"], 3);
    assert!(rows.as_array().unwrap().iter().all(|r| !r["key"].as_str().unwrap().contains("table")), "{rows}");
    // diff holds the older dump's tables in a file while it loads the
    // newer: the same answer, the cache's 9000 new entries and strings.
    let diff = |tmp: &std::path::Path| {
        ok(&heapdump().env("TMPDIR", tmp).args(["diff", "--json", "--no-cache"]).arg(&dumps[0]).arg(&dumps[3]).output().unwrap())
    };
    let (on_disk, in_memory) = (diff(&disk), diff(std::path::Path::new("/dev/shm")));
    assert_eq!(on_disk, in_memory);
    let d: serde_json::Value = serde_json::from_str(&on_disk).unwrap();
    let cache: i64 = d["by_site"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["key"].as_str().unwrap().starts_with("cache_put"))
        .map(|r| r["delta_allocations"].as_i64().unwrap())
        .sum();
    assert_eq!(cache, 18000, "{d}");
    assert_eq!(std::fs::read_dir(&disk).unwrap().count(), 0, "nothing left in $TMPDIR");
    std::fs::remove_dir(&disk).unwrap();
}
