//! jemalloc's heap read from outside (#40): programs that allocate with
//! Debian's libjemalloc2 (preloaded, as `LD_PRELOAD=libjemalloc.so.2` and
//! Redis load it, or linked in statically), captured by `attach` and by
//! `core`. Leak classes against valgrind's on the same program with
//! glibc's malloc; Redis read while it serves; a damaged heap refused in
//! one line; `run` saying when the program's allocator is its own.

use crate::common::*;
use crate::valgrind::{ours, valgrind_summary_with_libstdcxx};
use std::path::Path;
use std::process::Command;

const LIB: &str = "libjemalloc.so.2";
/// jemalloc's size classes above the sizes asked for: a quarter more, 16
/// bytes for the smallest classes.
fn jemalloc_rounding(bytes: u64, blocks: u64) -> u64 {
    bytes / 4 + 16 * blocks
}

const STATIC_LIB: &str = "/usr/lib/x86_64-linux-gnu/libjemalloc.a";

/// Whether Debian's libjemalloc2 is installed (scripts/test.sh installs it).
fn installed() -> bool {
    let ok = Path::new("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2").exists();
    assert!(ok || std::env::var_os("CI").is_none(), "libjemalloc2 is not installed (scripts/test.sh installs it)");
    ok
}

#[test]
fn attach_and_core_read_a_preloaded_jemalloc_as_valgrind_reads_glibc() {
    if !installed() {
        return;
    }
    // One thread; a lost tree beside a kept one; four threads on arenas
    // of their own (each with its thread cache).
    for source in ["leaks.c", "leaks_tree.c", "arenas.c"] {
        let d = Scratch::new("je-vg");
        let prog = stopping_program(&d, "gcc", source, &[], "prog");
        let expected = valgrind_summary_with_libstdcxx(&prog);
        let mut cmd = Command::new(&prog);
        cmd.env("LD_PRELOAD", LIB);
        let mut p = Stopped::start(cmd);
        for mode in ["compact", "full"] {
            let out = d.path(&format!("a-{mode}.hdump"));
            let o = heapdump().args(["attach", &p.pid.to_string(), "--mode", mode, "-o"]).arg(&out).output().unwrap();
            let line = ok(&o);
            assert!(line.contains("of jemalloc 5.3.0") && line.contains("freed regions in its thread caches left out"), "{line}");
            same_classes_within(ours(&out), expected, &format!("{source}, attach --mode {mode}"), jemalloc_rounding);
            let s = json(&["summary".as_ref(), "--json".as_ref(), out.as_os_str()]);
            assert_eq!(s["allocator"], "jemalloc 5.3.0", "{source}");
        }
        let core = gcore(&d, p.pid);
        let out = d.path("c.hdump");
        ok(&heapdump().arg("core").arg(&core).arg("-o").arg(&out).output().unwrap());
        same_classes_within(ours(&out), expected, &format!("{source}, gcore then core"), jemalloc_rounding);
        assert_eq!(blocks(&d.path("a-compact.hdump")), blocks(&out), "{source}: attach and core see the same blocks");
        // The program goes on, and ends as it would have.
        let _ = Command::new("kill").args(["-CONT", &p.pid.to_string()]).status();
        let status = p.child.wait().unwrap();
        assert_eq!(status.code(), Some(0), "{source}");
    }
}

#[test]
fn a_damaged_jemalloc_heap_is_refused_in_one_line() {
    if !installed() {
        return;
    }
    let d = Scratch::new("je-damaged");
    let prog = stopping_program(&d, "gcc", "leaks.c", &[], "prog");
    let mut cmd = Command::new(&prog);
    cmd.env("LD_PRELOAD", LIB);
    let p = Stopped::start(cmd);
    let out = d.path("a.hdump");
    ok(&heapdump().args(["attach", &p.pid.to_string(), "-o"]).arg(&out).output().unwrap());
    let core = gcore(&d, p.pid);
    drop(p);
    let bytes = std::fs::read(&core).unwrap();
    // A slab's descriptor (edata_t) names its slab's first page at offset
    // 8, the slab's size at 16; its first word says "active slab". The first region of a slab is a live block on a page start.
    let starts: Vec<u64> = blocks(&out).into_iter().filter(|&(a, s)| a % 4096 == 0 && s < 16384).map(|(a, _)| a).collect();
    let word = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap());
    let desc = (0..bytes.len() / 8 - 16)
        .map(|i| 8 * i)
        .find(|&o| starts.contains(&word(o + 8)) && word(o + 16) >= 4096 && word(o) >> 12 & 1 == 1 && word(o) >> 17 & 7 == 0)
        .expect("a slab's descriptor in the core");
    let damaged = |what: &str, f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = bytes.clone();
        f(&mut b);
        let c = d.path(&format!("{what}.core"));
        std::fs::write(&c, &b).unwrap();
        let o = heapdump().arg("core").arg(&c).arg("-o").arg(d.path(&format!("{what}.hdump"))).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(1), "{what}: {err}");
        assert_eq!(err.lines().count(), 1, "{what}: {err}");
        assert!(!d.path(&format!("{what}.hdump")).exists(), "{what}: no dump left behind");
        err
    };
    // Its free count says more free regions than its bitmap.
    let err = damaged("nfree", &|b| {
        let w = u64::from_le_bytes(b[desc..desc + 8].try_into().unwrap()) ^ (5 << 28);
        b[desc..desc + 8].copy_from_slice(&w.to_le_bytes());
    });
    assert!(err.contains("the slab's bitmap has") && err.contains("a damaged heap"), "{err}");
    // Its size runs far past the memory the process has.
    let err = damaged("size", &|b| b[desc + 16..desc + 24].copy_from_slice(&(1u64 << 46).to_le_bytes()));
    assert!(err.contains("jemalloc's rtree maps page") && err.contains("a damaged heap"), "{err}");
    // A bitmap claiming more regions in use than the slab holds (every
    // bit clear: all in use, none free against a count of free ones).
    let err = damaged("bitmap", &|b| b[desc + 64..desc + 128].fill(0));
    assert!(err.contains("free regions of") || err.contains("a damaged heap"), "{err}");
}

#[test]
fn redis_is_read_while_it_serves() {
    if !installed() || !Path::new("/usr/bin/redis-server").exists() {
        assert!(std::env::var_os("CI").is_none(), "redis-server is not installed (scripts/test.sh installs it)");
        return;
    }
    let d = Scratch::new("je-redis");
    let port = (20000 + std::process::id() % 20000).to_string();
    let mut server = Command::new("/usr/bin/redis-server")
        .args(["--port", &port, "--save", "", "--appendonly", "no", "--bind", "127.0.0.1", "--dir"])
        .arg(d.path(""))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let cli = |args: &[&str]| {
        let o = Command::new("redis-cli").args(["-p", &port]).args(args).output().unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let up = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        cli(&["PING"]).trim() == "PONG"
    });
    assert!(up, "redis-server did not start");
    // 5000 keys, each a value of 100 bytes.
    let script = "for i=1,5000 do redis.call('SET', 'key:'..i, string.rep('v', 100)) end return 1";
    assert_eq!(cli(&["EVAL", script, "0"]).trim(), "1");
    let used: u64 = cli(&["INFO", "memory"]).lines().find_map(|l| l.strip_prefix("used_memory:")).unwrap().trim().parse().unwrap();
    let out = d.path("redis.hdump");
    let o = heapdump().args(["attach", &server.id().to_string(), "-o"]).arg(&out).output().unwrap();
    let line = ok(&o);
    assert!(line.contains("of jemalloc 5.3.0"), "{line}");
    let s = json(&["summary".as_ref(), "--json".as_ref(), out.as_os_str()]);
    let (n, bytes) = (s["allocations"].as_u64().unwrap(), s["bytes"].as_u64().unwrap());
    // A key, its value and its entry are blocks of their own.
    assert!(n > 10_000, "{n} blocks for 5000 keys");
    // Redis counts what it allocated through jemalloc, in usable sizes;
    // the capture sees those and what the C libraries allocated.
    assert!(bytes >= used * 9 / 10 && bytes <= used * 2, "{bytes} bytes read, Redis says it uses {used}");
    // Redis serves on.
    assert_eq!(cli(&["GET", "key:4321"]).trim(), "v".repeat(100));
    let _ = server.kill();
    let _ = server.wait();
}

#[test]
fn a_static_jemalloc_is_named_by_run_and_read_by_attach() {
    if !installed() || !Path::new(STATIC_LIB).exists() {
        assert!(std::env::var_os("CI").is_none(), "libjemalloc-dev is not installed (scripts/test.sh installs it)");
        return;
    }
    let d = Scratch::new("je-static");
    // The archive after the program's objects, which call its malloc.
    let c = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c");
    let prog = d.path("static_jemalloc");
    let o = Command::new("gcc")
        .args(["-O0", "-g", "-o"])
        .arg(&prog)
        .arg(c.join("static_jemalloc.c"))
        .arg(c.join("stop_at_end.c"))
        .args([STATIC_LIB, "-lpthread", "-lm", "-ldl", "-lstdc++"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Under run the program's malloc is its own: nothing is seen, and
    // run and summary say why.
    let (o, dumps) = run_traced(&d.path("r.hdump"), &prog, &[], &[]);
    ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    let warning = "allocates through its own jemalloc: what is shown is only what went through malloc; use `heapdump attach`";
    assert!(err.contains(warning), "{err}");
    let s = json(&["summary".as_ref(), "--json".as_ref(), dumps[0].as_os_str()]);
    assert!(s["warnings"][0].as_str().unwrap_or("").contains(warning), "{s}");
    // A program preloading jemalloc is traced, its allocator named.
    let plain = stopping_program(&d, "gcc", "leaks.c", &[], "prog");
    let o = heapdump().env("LD_PRELOAD", LIB).arg("run").arg("-o").arg(d.path("p.hdump")).arg("--").arg(&plain).output().unwrap();
    ok(&o);
    let s = json(&["summary".as_ref(), "--json".as_ref(), d.path("p.hdump").as_os_str()]);
    assert_eq!((s["allocator"].as_str(), s["warnings"].as_array().map(Vec::len)), (Some("jemalloc"), Some(0)), "{s}");
    assert!(s["allocations"].as_u64().unwrap() >= 7, "{s}");
    // attach reads the static copy: the 1000 kept blocks and the lost one.
    let p = Stopped::start(Command::new(&prog));
    let out = d.path("a.hdump");
    let line = ok(&heapdump().args(["attach", &p.pid.to_string(), "-o"]).arg(&out).output().unwrap());
    assert!(line.contains("jemalloc 5.3.0"), "{line}");
    let lost = ours(&out);
    assert_eq!((lost[0], lost[3].1), ((4096, 1), 1000), "{lost:?}");
}

/// tikv-jemallocator's static jemalloc (`_rjem_`, built without stats:
/// its arenas keep no list of the threads' caches) in a Rust program
/// (crates/cli/tests/static_jemalloc): the regions its thread's cache
/// holds (348 of the 500 freed 48-byte boxes) are free, found through the
/// thread's TLS; the 1000 kept boxes are reachable and the forgotten 4096
/// bytes lost, under attach and core. Built from source, its extent map's
/// shape is the build machine's: for 48 bits of virtual address two levels
/// of one-word leaves, for 57 (a processor with five-level paging, where
/// this test first failed) three levels of two-word leaves; both are
/// built here (`--with-lg-vaddr`) whatever the machine.
#[test]
fn a_tikv_jemallocator_heap_leaves_its_thread_cache_out() {
    for lg_vaddr in ["48", "57"] {
        let d = Scratch::new(&format!("je-tikv-{lg_vaddr}"));
        let target = format!("fixtures-lg-vaddr-{lg_vaddr}");
        let prog = rust_fixture_in(&d, "static_jemalloc", "static-jemalloc", &[], &target, &[("JEMALLOC_SYS_WITH_LG_VADDR", lg_vaddr)]);
        let mut p = Stopped::start(Command::new(&prog));
        let check = |out: &Path, o: std::process::Output, what: &str| {
            let what = format!("{what}, LG_VADDR {lg_vaddr}");
            let line = ok(&o);
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(line.contains("jemalloc 5.3.0") && !err.contains("no thread cache"), "{what}: {line}{err}");
            let b = blocks(out);
            assert_eq!(count_size(&b, 48), 0, "{what}: the cached 48-byte regions are free");
            assert!(count_size(&b, 112) >= 1000, "{what}: the kept boxes");
            let c = ours(out);
            assert_eq!((c[0], c[1], c[2]), ((4096, 1), (0, 0), (0, 0)), "{what}: {c:?}");
        };
        let out = d.path("a.hdump");
        check(&out, heapdump().args(["attach", &p.pid.to_string(), "-o"]).arg(&out).output().unwrap(), "attach");
        let core = gcore(&d, p.pid);
        let out = d.path("c.hdump");
        check(&out, heapdump().arg("core").arg(&core).arg("--exe").arg(&prog).arg("-o").arg(&out).output().unwrap(), "core");
        let _ = Command::new("kill").args(["-CONT", &p.pid.to_string()]).status();
        assert!(p.child.wait().unwrap().success());
    }
}
