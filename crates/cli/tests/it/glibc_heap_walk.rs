//! glibc's heap walked from outside as production processes have it
//! (issue #37): a pre-fork server's worker, whose `[heap]` the kernel
//! splits in two when it grows after the fork; every allocation API in one
//! thread and in several arenas; heaps damaged as a wild write would,
//! refused at the damage in one line (attach and core alike); and real
//! pre-fork servers (nginx, PostgreSQL) attached to their workers.

use crate::common::*;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `heapdump ARGS` with its address space bounded (a walk that does
/// not progress grows without end) and at most a minute to answer: a
/// capture that is still going then is killed, and the test fails saying
/// so rather than hanging.
fn bounded(args: &[&std::ffi::OsStr]) -> Output {
    let mut c = Command::new("sh");
    c.arg("-c").arg("ulimit -v 4000000; exec \"$0\" \"$@\"").arg(env!("CARGO_BIN_EXE_heapdump")).args(args);
    c.env("XDG_CACHE_HOME", Path::new(env!("CARGO_TARGET_TMPDIR")).join("xdg-cache"));
    let mut child = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let begun = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if begun.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!("heapdump {args:?} still walking after a minute: {}", String::from_utf8_lossy(&o.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// `heapdump attach PID -o OUT`.
fn attach(pid: i32, out: &Path) -> Output {
    bounded(&["attach".as_ref(), pid.to_string().as_ref(), "-o".as_ref(), out.as_os_str()])
}

/// gcore's core file of the stopped process `pid`, then `heapdump core`.
fn core(d: &Scratch, pid: i32, out: &Path) -> Output {
    let core = d.path("core");
    let o = Command::new("gcore").arg("-o").arg(&core).arg(pid.to_string()).output().expect("gcore (gdb) is installed");
    ok(&o);
    let core = PathBuf::from(format!("{}.{pid}", core.display()));
    let o = bounded(&["core".as_ref(), core.as_os_str(), "-o".as_ref(), out.as_os_str()]);
    let _ = std::fs::remove_file(&core);
    o
}

/// "ADDRESS USABLE" lines, as the test programs write them.
fn listed(text: &str) -> BTreeMap<u64, u64> {
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(a, s)| (u64::from_str_radix(a.trim_start_matches("0x"), 16).unwrap(), s.trim().parse().unwrap()))
        .collect()
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim().trim_start_matches("0x"), 16).unwrap()
}

/// The `[heap]` mappings of `pid`.
fn heap_maps(pid: i32) -> Vec<(u64, u64)> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap()
        .lines()
        .filter(|l| l.ends_with("[heap]"))
        .map(|l| {
            let (a, b) = l.split_whitespace().next().unwrap().split_once('-').unwrap();
            (hex(a), hex(b))
        })
        .collect()
}

#[test]
fn a_forked_workers_split_heap_is_walked_whole() {
    // 1,000 blocks before the fork, 19,000 after, and the array holding
    // them: the child's [heap] is two mappings, the parent's and the
    // growth after the fork. Walked mapping by mapping, a boundary inside
    // a chunk reads as a "size 0" there, and with a chunk starting at it
    // the parent's 1,000 blocks are dropped without a word.
    for boundary in ["inside", "chunk"] {
        let d = Scratch::new("split-heap");
        let prog = compile(&d, "split_heap.c", &["-O0", "-g"]);
        let told = d.path("told.txt");
        let mut cmd = Command::new(&prog);
        cmd.arg(&told).env("BOUNDARY", boundary);
        let p = Stopped::start_in(cmd, |_, pid| pid);
        let text = std::fs::read_to_string(&told).unwrap();
        let parents = hex(text.lines().next().unwrap());
        let maps = heap_maps(p.pid);
        assert!(maps.len() >= 2 && maps[0].1 == maps[1].0, "{boundary}: the worker's heap is not split: {maps:x?}");
        let cut = maps[0].1;
        for (how, out) in [("attach", d.path("a.hdump")), ("core", d.path("c.hdump"))] {
            let o = if how == "attach" { attach(p.pid, &out) } else { core(&d, p.pid, &out) };
            ok(&o);
            let b = blocks(&out);
            assert_eq!(b.len(), 20_001, "{boundary}, {how}: every block of the split heap ({})", String::from_utf8_lossy(&o.stderr));
            // The shape is the one named: a chunk starts at the boundary,
            // or one spans it (a chunk ends 8 bytes before its usable
            // size does: the next chunk's first word is its to use).
            let at = b.iter().any(|&(a, _)| a - 16 == cut);
            let across = b.iter().any(|&(a, s)| a - 16 < cut && cut < a + s - 8);
            assert_eq!((at, across), (boundary == "chunk", boundary == "inside"), "{boundary}, {how}: the boundary {cut:#x}");
            // A block the parent made, before the fork, is found with
            // what holds it.
            let o = heapdump().arg("path").arg(&out).arg(format!("{parents:#x}")).output().unwrap();
            let said = ok(&o);
            assert!(said.contains(&format!("{parents:#x}")), "{boundary}, {how}: {said}");
        }
        assert_eq!(blocks(&d.path("a.hdump")), blocks(&d.path("c.hdump")), "{boundary}: attach and core see the same blocks");
        // valgrind checks the same child as it exits (the first summary:
        // the parent waits for it): the same leak classes. Only where the
        // boundary falls inside a chunk: the other shape is made from
        // glibc's own chunk sizes, which valgrind's allocator does not have.
        if boundary == "inside" {
            let expected = crate::valgrind::valgrind_summary_args(&prog, &[told.to_str().unwrap(), "nostop"]);
            let ours = crate::valgrind::ours(&d.path("a.hdump"));
            for (k, ((ob, on), (vb, vn))) in ours.iter().zip(expected.iter()).enumerate() {
                assert_eq!(on, vn, "class {k}: ours {ours:?}, valgrind's {expected:?}");
                // Usable sizes: at most 24 bytes more a block.
                assert!(ob >= vb && *ob <= vb + 24 * vn, "class {k}: {ob} bytes against valgrind's {vb}");
            }
            assert_eq!(expected[3].1, 20_001, "{expected:?}");
        }
    }
}

#[test]
fn every_allocation_api_is_walked_right() {
    // realloc chains, posix_memalign up to 4096, aligned_alloc, memalign,
    // valloc, pvalloc, calloc, reallocarray, realloc(NULL, n): in one
    // thread (where the main arena can be mistaken for a field of glibc's
    // parameters read as its `next`), and in four
    // arenas. Every block the program holds is found at its address with
    // its usable size, and nothing else but what glibc allocated for the
    // ended threads (their thread vectors, kept with their stacks). Also
    // with memory the program took with sbrk before its first malloc:
    // glibc's heap then starts above the [heap] mapping's start, where its
    // parameters (`mp_.sbrk_base`) say.
    for (threads, sbrk) in [(0usize, ""), (3, ""), (0, "sbrk")] {
        let d = Scratch::new("apis");
        let prog = compile(&d, "alloc_apis.c", &["-O0", "-g"]);
        let told = d.path("told.txt");
        let mut cmd = Command::new(&prog);
        cmd.arg(&told).arg(threads.to_string()).arg(sbrk);
        let p = Stopped::start_in(cmd, |_, pid| pid);
        let want = listed(&std::fs::read_to_string(&told).unwrap());
        assert!(want.len() > 1000, "{}", want.len());
        captured_as_told(&d, p.pid, &want, threads, &format!("{threads} threads {sbrk}"));
    }
}

/// Attach and core of stopped process `pid` each give every block of
/// `want` (address: usable size), and at most `most_extra` blocks more;
/// `what` names the case.
fn captured_as_told(d: &Scratch, pid: i32, want: &BTreeMap<u64, u64>, most_extra: usize, what: &str) {
    for (how, out) in [("attach", d.path("a.hdump")), ("core", d.path("c.hdump"))] {
        let o = if how == "attach" { attach(pid, &out) } else { core(d, pid, &out) };
        ok(&o);
        let got: BTreeMap<u64, u64> = blocks(&out).into_iter().collect();
        let wrong: Vec<_> = want.iter().filter(|(a, s)| got.get(a) != Some(s)).take(5).collect();
        assert!(wrong.is_empty(), "{what}, {how}: blocks not found with their usable size: {wrong:x?}");
        let extra: Vec<_> = got.iter().filter(|(a, _)| !want.contains_key(a)).collect();
        assert!(
            extra.len() <= most_extra,
            "{what}, {how}: {} blocks the program does not hold: {:x?}",
            extra.len(),
            &extra[..extra.len().min(8)]
        );
    }
}

#[test]
fn a_thread_cache_in_a_larger_chunk_is_still_a_cache() {
    // glibc gives a thread's cache a chunk 16 bytes larger than its own
    // when that is the free chunk it finds (no remainder under 32 bytes):
    // read as a block of the program's, its ~280 freed chunks were
    // counted live (and most of them lost). Every block the program
    // holds is found, and no more than the few glibc keeps for itself.
    let d = Scratch::new("tcache-2a0");
    let prog = compile(&d, "tcache_whole_chunk.c", &["-O0", "-g"]);
    let told = d.path("told.txt");
    let mut cmd = Command::new(&prog);
    cmd.arg(&told);
    let p = Stopped::start_in(cmd, |_, pid| pid);
    let want = listed(&std::fs::read_to_string(&told).unwrap());
    assert_eq!(want.len(), 102);
    captured_as_told(&d, p.pid, &want, 3, "a cache in a 0x2a0 chunk");
}

#[test]
fn damaged_heaps_are_refused_at_the_damage() {
    // Each damage is refused in one line naming where the heap stops
    // adding up, by attach and by core, without walking on: a size
    // pointing backwards, followed, loops the walk until it takes 3 GB.
    // A loop in a bin the walk does not follow leaves it right.
    // A write into a freed block that breaks a per-thread cache's list
    // is damage too, not a cue that the cache is a block of the
    // program's (which counted the cache and every chunk it holds live).
    for how in ["backward", "zero", "past", "tcache-loop", "tcache-uaf", "fastbin-loop", "arena-next", "heap-loop", "bin-loop"] {
        let d = Scratch::new("damaged");
        let prog = compile(&d, "damaged_heap.c", &["-O0", "-g"]);
        let told = d.path("told.txt");
        let mut cmd = Command::new(&prog);
        cmd.arg(&told).arg(how);
        let p = Stopped::start_in(cmd, |_, pid| pid);
        let text = std::fs::read_to_string(&told).unwrap();
        let (named, rest) = text.split_once('\n').unwrap();
        let named = hex(named);
        for (what, out) in [("attach", d.path("a.hdump")), ("core", d.path("c.hdump"))] {
            let o = if what == "attach" { attach(p.pid, &out) } else { core(&d, p.pid, &out) };
            let err = String::from_utf8_lossy(&o.stderr);
            if how == "bin-loop" {
                ok(&o);
                let got: BTreeMap<u64, u64> = blocks(&out).into_iter().collect();
                assert_eq!(got, listed(rest), "{how}, {what}");
                continue;
            }
            assert_eq!(o.status.code(), Some(1), "{how}, {what}: {err}");
            assert_eq!(err.lines().count(), 1, "{how}, {what}: {err}");
            assert!(err.contains(&format!("{named:#x}")) && err.contains("damaged heap"), "{how}, {what}: {err} does not name {named:#x}");
            assert!(!out.exists(), "{how}, {what}: no dump left behind");
        }
    }
}

/// The in-use bytes glibc itself counts in the main arena of `pid`
/// (`malloc_stats`, called by gdb in the process: it walks glibc's own
/// bins and prints to the process's stderr, `stderr_file`), less what the
/// main thread's per-thread cache holds (its counts read at the brk heap's
/// first chunk, the cache, whose header gdb reads too). An oracle that
/// shares nothing with the walk: glibc's own accounting.
fn glibc_in_use(pid: i32, stderr_file: &Path) -> (u64, u64) {
    let heap = heap_maps(pid)[0].0;
    let before = std::fs::metadata(stderr_file).map_or(0, |m| m.len()) as usize;
    let o = Command::new("gdb")
        .args(["-p", &pid.to_string(), "-batch", "-ex", "call (void)malloc_stats()"])
        .args(["-ex", &format!("x/2gx {heap:#x}"), "-ex", &format!("x/64hu {:#x}", heap + 16)])
        .output()
        .expect("gdb is installed");
    let out = String::from_utf8_lossy(&o.stdout);
    let words: Vec<u64> = out
        .lines()
        .filter(|l| l.starts_with("0x") && l.contains(":\t"))
        .flat_map(|l| {
            l.split_once(":\t").unwrap().1.split_whitespace().map(|w| if w.starts_with("0x") { hex(w) } else { w.parse().unwrap() })
        })
        .collect();
    assert_eq!(words.len(), 66, "gdb said: {out}{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(words[1], 0x291, "the brk heap's first chunk {heap:#x} is the main thread's cache: {out}");
    let cached: u64 = words[2..].iter().enumerate().map(|(i, &n)| n * (32 + 16 * i as u64)).sum();
    let said = std::fs::read(stderr_file).unwrap();
    let said = String::from_utf8_lossy(&said[before.min(said.len())..]).into_owned();
    let arena = said.split("Arena 0:").nth(1).unwrap_or_else(|| panic!("malloc_stats said nothing in {}: {said}", stderr_file.display()));
    let in_use = arena.lines().find_map(|l| l.trim().strip_prefix("in use bytes")).unwrap().trim_start_matches([' ', '=']).trim();
    (in_use.parse().unwrap(), cached)
}

/// A capture of `pid` checked against glibc's own count of the bytes in
/// use in its brk heap: every live block there (its chunk: the usable size
/// and the size word), the cache and what the cache holds. Attached twice
/// around the oracle, the two captures the same (the process idle).
fn captured_whole(d: &Scratch, pid: i32, stderr_file: &Path, what: &str) -> Vec<(u64, u64)> {
    let mut last = String::new();
    for attempt in 0..3 {
        let (a, b) = (d.path(&format!("{what}-{attempt}-a.hdump")), d.path(&format!("{what}-{attempt}-b.hdump")));
        ok(&attach(pid, &a));
        let (in_use, cached) = glibc_in_use(pid, stderr_file);
        ok(&attach(pid, &b));
        let (first, second) = (blocks(&a), blocks(&b));
        if first != second {
            last = format!("the process moved between the captures ({} then {} blocks)", first.len(), second.len());
            continue;
        }
        let maps = heap_maps(pid);
        let in_heap = |a: u64| maps.iter().any(|&(s, e)| s <= a && a < e);
        let walked: u64 = first.iter().filter(|b| in_heap(b.0)).map(|(_, s)| s + 8).sum::<u64>() + 0x290 + cached;
        assert_eq!(walked, in_use, "{what}: the capture's chunks against glibc's own count of the bytes in use ({} blocks)", first.len());
        // Blocks in every mapping of the heap.
        for &(s, e) in &maps {
            assert!(first.iter().any(|b| s <= b.0 && b.0 < e), "{what}: no block in the heap's mapping {s:#x}..{e:#x}");
        }
        return first;
    }
    panic!("{what}: {last}");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The processes `pid` forked (`/proc/PID/task/PID/children`).
fn children(pid: i32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect()
}

/// A server ended (the signal to its first process) and reaped when
/// dropped.
struct Server(Child, &'static str);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill").args([self.1, &self.0.id().to_string()]).status();
        let _ = self.0.wait();
    }
}

#[test]
fn nginx_master_and_worker_are_captured_whole() {
    // nginx as it runs in production: a master and two workers forked
    // from it, serving 127.0.0.1. Connections held open with their
    // requests' buffers grow a worker's heap after the fork: its [heap] is
    // two mappings. Each capture's chunks add up to the bytes glibc itself
    // counts in use. (valgrind is not the oracle here: it checks a
    // process as it exits, when nginx has freed what it served with; the
    // same shape under valgrind is `a_forked_workers_split_heap_is_walked_whole`'s.)
    let nginx = Path::new("/usr/sbin/nginx");
    assert!(nginx.exists(), "nginx is not installed: scripts/test.sh installs it");
    let d = Scratch::new("nginx");
    let port = free_port();
    let dir = d.0.display();
    std::fs::create_dir_all(d.path("tmp")).unwrap();
    std::fs::write(
        d.path("nginx.conf"),
        format!(
            "daemon off;\nmaster_process on;\nworker_processes 2;\npid {dir}/nginx.pid;\nerror_log {dir}/error.log;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n  access_log {dir}/access.log;\n  client_body_temp_path {dir}/tmp/body;\n  proxy_temp_path {dir}/tmp/proxy;\n\
             fastcgi_temp_path {dir}/tmp/fastcgi;\n  uwsgi_temp_path {dir}/tmp/uwsgi;\n  scgi_temp_path {dir}/tmp/scgi;\n\
             server {{ listen 127.0.0.1:{port}; location / {{ return 200 \"hello\\n\"; }} }}\n}}\n"
        ),
    )
    .unwrap();
    let server = Server(
        Command::new(nginx)
            .arg("-p")
            .arg(&d.0)
            .arg("-c")
            .arg(d.path("nginx.conf"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
        "-TERM",
    );
    let master = server.0.id() as i32;
    let mut workers = Vec::new();
    for _ in 0..500 {
        workers = children(master);
        if workers.len() == 2 && std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(workers.len(), 2, "nginx did not start its workers: {}", std::fs::read_to_string(d.path("error.log")).unwrap_or_default());
    // 300 connections, each with a request served and kept alive.
    use std::io::{Read, Write};
    let mut held = Vec::new();
    for i in 0..300 {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(s, "GET /{i} HTTP/1.1\r\nHost: test\r\nConnection: keep-alive\r\nX-Pad: {}\r\n\r\n", "y".repeat(2000)).unwrap();
        held.push(s);
    }
    for s in &mut held {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.ends_with(b"hello\n") {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "nginx closed a connection: {}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
    }
    let log = d.path("error.log");
    let master_blocks = captured_whole(&d, master, &log, "master");
    assert!(master_blocks.len() > 100, "{}", master_blocks.len());
    let worker =
        *workers.iter().find(|&&w| heap_maps(w).len() >= 2).expect("a worker's heap grew after the fork into a mapping of its own");
    let worker_blocks = captured_whole(&d, worker, &log, "worker");
    // The worker's capture holds the master's blocks from before the
    // fork that it still holds: the configuration's, shared.
    let before_fork: std::collections::BTreeSet<u64> = master_blocks.iter().map(|b| b.0).collect();
    let kept = worker_blocks.iter().filter(|b| before_fork.contains(&b.0)).count();
    assert!(kept > 100, "{kept} of the worker's blocks are where the master has its own");
    // And the core of the same worker: the same blocks.
    let out = d.path("worker-core.hdump");
    ok(&core(&d, worker, &out));
    assert_eq!(blocks(&out), worker_blocks, "the worker's core and its capture");
    drop(held);
}

#[test]
fn a_postgresql_backend_is_captured_whole() {
    // PostgreSQL forks a backend per connection from its postmaster; the
    // backend's queries grow its heap after the fork (its memory contexts'
    // blocks): its [heap] is two mappings. The capture of a backend idle
    // between queries adds up to glibc's own count of the bytes in use.
    let bin = std::fs::read_dir("/usr/lib/postgresql")
        .ok()
        .and_then(|mut v| v.find_map(|e| Some(e.ok()?.path().join("bin"))))
        .filter(|b| b.join("postgres").exists())
        .expect("PostgreSQL is not installed: scripts/test.sh installs it");
    let d = Scratch::new("postgres");
    let pg = d.path("pg");
    std::fs::create_dir_all(&pg).unwrap();
    // PostgreSQL does not run as root: as nobody, in a directory of its own.
    ok(&Command::new("chown").arg("nobody:").arg(&pg).output().unwrap());
    let as_nobody = |prog: &Path| {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"]).arg(prog);
        c
    };
    let data = pg.join("data");
    ok(&as_nobody(&bin.join("initdb")).arg("-D").arg(&data).args(["-U", "postgres", "--auth=trust", "-N"]).output().unwrap());
    let port = free_port();
    let stderr_file = d.path("postgres.err");
    let server = Server(
        as_nobody(&bin.join("postgres"))
            .arg("-D")
            .arg(&data)
            .arg("-k")
            .arg(&pg)
            .args(["-p", &port.to_string(), "-c", "listen_addresses=127.0.0.1"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr_file).unwrap())
            .spawn()
            .unwrap(),
        "-INT", // a fast shutdown
    );
    let ready = (0..1000).any(|_| {
        std::thread::sleep(Duration::from_millis(10));
        std::fs::read_to_string(&stderr_file).is_ok_and(|s| s.contains("ready to accept connections"))
    });
    assert!(ready, "PostgreSQL did not start: {}", std::fs::read_to_string(&stderr_file).unwrap_or_default());
    let mut psql = Command::new(bin.join("psql"))
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres", "-d", "postgres", "-At"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    use std::io::Write;
    let mut to = psql.stdin.take().unwrap();
    let mut from = BufReader::new(psql.stdout.take().unwrap());
    let mut line = String::new();
    writeln!(to, "select pg_backend_pid();").unwrap();
    from.read_line(&mut line).unwrap();
    let backend: i32 = line.trim().parse().unwrap_or_else(|_| panic!("psql said {line:?}"));
    writeln!(
        to,
        "create temp table t as select g, md5(g::text) m from generate_series(1, 200000) g;\n\
         select count(distinct m) from t;\n\
         select 'done';"
    )
    .unwrap();
    while line.trim() != "done" {
        line.clear();
        assert!(from.read_line(&mut line).unwrap() > 0, "psql ended");
    }
    assert!(heap_maps(backend).len() >= 2, "the backend's heap grew after the fork into a mapping of its own: {:x?}", heap_maps(backend));
    let got = captured_whole(&d, backend, &stderr_file, "backend");
    assert!(got.len() > 1000, "{}", got.len());
    drop(to);
    let _ = psql.wait();
    drop(server);
}
