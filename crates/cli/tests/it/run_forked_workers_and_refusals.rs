//! `heapdump run` on production shapes (#37): a pre-fork server whose
//! workers are stopped with SIGQUIT (a C program of that shape, and nginx
//! itself), and the programs the preload library cannot enter (musl,
//! static), refused before they start.

use crate::common::{blocks, count_size, ensure_preload, heapdump, json, Scratch};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Compiles `source` from tests/c with `cc` (gcc, musl-gcc) and `flags`.
fn compile_with(cc: &str, dir: &Scratch, source: &str, flags: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c").join(source);
    let out = dir.path(source.split('.').next().unwrap());
    let o = Command::new(cc)
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("{cc}: {e} (scripts/test.sh installs it)"));
    assert!(o.status.success(), "{cc} failed: {}", String::from_utf8_lossy(&o.stderr));
    out
}

fn kill(pid: u32, sig: rustix::process::Signal) {
    let _ = rustix::process::kill_process(rustix::process::Pid::from_raw(pid as i32).unwrap(), sig);
}

/// A dump `run` listed on stderr: its path, the process that wrote it,
/// why.
#[derive(Debug)]
struct Listed {
    path: PathBuf,
    pid: u32,
    reason: String,
}

/// The `heapdump: wrote PATH (REASON, by NAME[PID], …)` lines.
fn listed(stderr: &str) -> Vec<Listed> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("heapdump: wrote "))
        .filter_map(|l| {
            let (path, rest) = l.split_once(" (")?;
            let reason = rest.split([',', ')']).next()?.trim().to_string();
            let by = &rest[rest.find("by ")? + 3..];
            let pid = by[by.find('[')? + 1..by.find(']')?].parse().ok()?;
            Some(Listed { path: PathBuf::from(path), pid, reason })
        })
        .collect()
}

/// The thread ids a dump records.
fn thread_ids(dump: &Path) -> Vec<u32> {
    let bytes = std::fs::read(dump).unwrap();
    let d = heapdump_format::Dump::parse(&bytes).unwrap();
    d.records().filter_map(|r| if let heapdump_format::Record::Thread(t) = r.unwrap().1 { Some(t.tid) } else { None }).collect()
}

/// Checks that a dump is the listed process's own: the pid it records
/// and every thread in it are that process's.
fn assert_own(l: &Listed) {
    let s = json(&["summary".as_ref(), "--json".as_ref(), l.path.as_os_str()]);
    assert_eq!(s["pid"], l.pid, "{} is listed as {}'s but records pid {}", l.path.display(), l.pid, s["pid"]);
    let tids = thread_ids(&l.path);
    assert!(tids.contains(&l.pid), "{}: no thread of {} in it (threads {tids:?})", l.path.display(), l.pid);
}

/// `heapdump run`, started; killed (with what it runs) if a test fails
/// before it ends.
struct Running {
    child: Child,
    /// Processes of the traced tree to kill on failure.
    tree: Vec<u32>,
    lines: mpsc::Receiver<String>,
}

impl Running {
    fn start(out: &Path, program: &[&std::ffi::OsStr]) -> Running {
        ensure_preload();
        let mut child = heapdump()
            .arg("run")
            .arg("-o")
            .arg(out)
            .arg("--")
            .args(program)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        Running { child, tree: vec![], lines }
    }

    /// The program's next line on stdout (at most a minute).
    fn line(&self) -> String {
        self.lines.recv_timeout(Duration::from_secs(60)).expect("the program said nothing for a minute")
    }

    /// Waits (at most `limit`) for `run` to return; its status, stderr
    /// and how long it took.
    fn finish(mut self, limit: Duration) -> (std::process::ExitStatus, String, Duration) {
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(t0.elapsed() < limit, "heapdump run did not return within {limit:?} of the stop");
            std::thread::sleep(Duration::from_millis(20));
        };
        let took = t0.elapsed();
        let mut err = String::new();
        self.child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        (status, err, took)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            // Everything below `run` (it is their subreaper), and what the
            // test knew of.
            let mut all = self.tree.clone();
            let mut i = 0;
            all.push(self.child.id());
            while i < all.len() {
                let more = children(all[i]);
                all.extend(more.into_iter().filter(|c| !all.contains(c)).collect::<Vec<_>>());
                i += 1;
            }
            for &p in all.iter().filter(|&&p| p != self.child.id()) {
                kill(p, rustix::process::Signal::KILL);
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Waits (at most a minute) for a complete dump in `dir` written by `pid`
/// for a signal; returns its path.
fn wait_signal_dump(dir: &Scratch, pid: u32) -> PathBuf {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(60) {
        for e in std::fs::read_dir(&dir.0).unwrap().flatten() {
            let p = e.path();
            if p.extension().is_none_or(|x| x != "hdump") {
                continue;
            }
            let o = heapdump().args(["summary", "--json"]).arg(&p).output().unwrap();
            if !o.status.success() {
                continue;
            }
            let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            if s["pid"] == pid && s["reason"] == "signal" {
                return p;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!(
        "no signal dump by process {pid} in a minute (files: {:?})",
        std::fs::read_dir(&dir.0).unwrap().flatten().map(|e| e.file_name()).collect::<Vec<_>>()
    );
}

/// How many complete dumps in `dir` were written by `pid` for a signal.
fn signal_dumps(dir: &Scratch, pid: u32) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(&dir.0).unwrap().flatten() {
        let p = e.path();
        if p.extension().is_none_or(|x| x != "hdump") {
            continue;
        }
        let o = heapdump().args(["summary", "--json"]).arg(&p).output().unwrap();
        if o.status.success() {
            let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            n += usize::from(s["pid"] == pid && s["reason"] == "signal");
        }
    }
    n
}

/// A forked child busy allocating and freeing: the dump signal lands
/// inside the allocator most times (the tracker may hold the locks a dump
/// takes: the signal is raised again as the thread leaves it). Each of 10
/// signals, sent once the previous dump is complete, gets the child's own
/// dump; then SIGTERM gets one too and ends the child as it would have.
#[test]
fn signals_landing_in_a_busy_forked_childs_allocator_are_each_dumped() {
    let d = Scratch::new("busy");
    let prog = compile_with("gcc", &d, "busy_child.c", &[]);
    let mut r = Running::start(&d.path("b.hdump"), &[prog.as_os_str()]);
    let child: u32 = r.line().strip_prefix("child ").unwrap().parse().unwrap();
    r.tree.push(child);
    for k in 1..=10 {
        kill(child, rustix::process::Signal::USR2);
        let t0 = Instant::now();
        while signal_dumps(&d, child) < k {
            assert!(t0.elapsed() < Duration::from_secs(60), "signal {k}: no dump by the child in a minute");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    kill(child, rustix::process::Signal::TERM);
    let (status, err, _) = r.finish(Duration::from_secs(60));
    assert!(status.success(), "the child was ended by SIGTERM: {status:?}\n{err}");
    let dumps = listed(&err);
    for l in &dumps {
        assert_own(l);
    }
    let by_child: Vec<String> = dumps
        .iter()
        .filter(|l| l.pid == child)
        .map(|l| json(&["summary".as_ref(), "--json".as_ref(), l.path.as_os_str()])["signal"]["name"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(by_child.iter().filter(|s| *s == "SIGUSR2").count(), 10, "{err}");
    assert_eq!(by_child.iter().filter(|s| *s == "SIGTERM").count(), 1, "{err}");
}

/// The pre-fork shape: two forked workers that handle SIGQUIT by calling
/// `exit`, stopped by their parent with SIGQUIT. `run` returns at once
/// (a worker asking its parent's helper thread would wait 10 minutes,
/// and the parent's helper would dump the parent for it), and every process
/// has its own SIGQUIT and exit dumps: its pid, its threads, its blocks
/// (worker i's 3000 + i bytes, never the other worker's; the parent's
/// 1111 bytes, never a worker's). With `usr2_first`, the first worker is
/// sent the dump signal beforehand: the dump is that worker's.
fn prefork(usr2_first: bool) {
    let d = Scratch::new("prefork");
    let prog = compile_with("gcc", &d, "prefork.c", &[]);
    let mut r = Running::start(&d.path("pf.hdump"), &[prog.as_os_str()]);
    let parent: u32 = r.line().strip_prefix("parent ").unwrap().parse().unwrap();
    r.tree.push(parent);
    // "worker I PID", in whichever order they come.
    let mut workers = [0u32; 2];
    for _ in 0..2 {
        let l = r.line();
        let (i, w) = l.strip_prefix("worker ").unwrap().split_once(' ').unwrap();
        let w: u32 = w.parse().unwrap();
        r.tree.push(w);
        workers[i.parse::<usize>().unwrap()] = w;
    }
    let usr2 = usr2_first.then(|| {
        kill(workers[0], rustix::process::Signal::USR2);
        let p = wait_signal_dump(&d, workers[0]);
        let b = blocks(&p);
        assert_eq!((count_size(&b, 3000), count_size(&b, 3001), count_size(&b, 1111)), (1, 0, 1), "the first worker's blocks in its dump");
        let s = json(&["summary".as_ref(), "--json".as_ref(), p.as_os_str()]);
        assert_eq!(s["signal"]["name"], "SIGUSR2");
        assert!(thread_ids(&p).contains(&workers[0]));
        p
    });
    // The parent goes on: SIGQUIT to its workers, waits for them.
    r.child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let (status, err, took) = r.finish(Duration::from_secs(60));
    assert!(status.success(), "run: {status:?}\n{err}");
    let dumps = listed(&err);
    for l in &dumps {
        assert_own(l);
    }
    let of = |pid: u32, reason: &str| dumps.iter().filter(|l| l.pid == pid && l.reason == reason).collect::<Vec<_>>();
    let parent_exit = of(parent, "exit");
    assert_eq!(parent_exit.len(), 1, "the parent's exit dump is listed once:\n{err}");
    let b = blocks(&parent_exit[0].path);
    assert_eq!((count_size(&b, 1111), count_size(&b, 3000) + count_size(&b, 3001)), (1, 0), "the parent's blocks");
    assert!(of(parent, "signal").is_empty(), "the parent took no signal dump (its workers' are theirs):\n{err}");
    for (i, &w) in workers.iter().enumerate() {
        let (exit, signal) = (of(w, "exit"), of(w, "signal"));
        assert_eq!(exit.len(), 1, "worker {w}'s exit dump is listed once:\n{err}");
        assert_eq!(signal.len(), 1 + usize::from(usr2_first && i == 0), "worker {w}'s signal dumps are listed:\n{err}");
        for l in exit.iter().chain(&signal) {
            let b = blocks(&l.path);
            let (own, other) = (count_size(&b, 3000 + i as u64), count_size(&b, 3001 - i as u64));
            assert_eq!((own, other), (1, 0), "worker {w}'s blocks in {}", l.path.display());
        }
        let quit = signal.iter().find(|l| usr2.as_deref() != Some(l.path.as_path())).unwrap();
        let s = json(&["summary".as_ref(), "--json".as_ref(), quit.path.as_os_str()]);
        assert_eq!(s["signal"]["name"], "SIGQUIT", "{}", quit.path.display());
    }
    assert_eq!(dumps.len(), 5 + usize::from(usr2_first), "every dump listed, no other:\n{err}");
    eprintln!("run returned {took:?} after the stop");
}

#[test]
fn prefork_workers_stopped_with_sigquit_dump_their_own_heaps_and_run_returns() {
    prefork(false);
}

#[test]
fn a_signal_dump_asked_of_a_forked_worker_is_the_workers() {
    prefork(true);
}

/// A musl program: refused before it starts, in one line that says why
/// and what to use; before, it was started and its loader ended it (127,
/// "Error relocating libheapdump_preload.so"). The same through a `#!`
/// script whose interpreter is that program, or whose `env` starts it.
#[test]
fn a_musl_program_is_refused_before_it_starts() {
    let d = Scratch::new("musl");
    let prog = compile_with("musl-gcc", &d, "musl_marker.c", &[]);
    let marker = d.path("started");
    let direct = d.path("direct.sh");
    std::fs::write(&direct, format!("#!{}\n", prog.display())).unwrap();
    let via_env = d.path("env.sh");
    std::fs::write(&via_env, "#!/usr/bin/env -S HELLO=1 musl_marker\n").unwrap();
    for s in [&direct, &via_env] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(s, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = format!("{}:{}", d.0.display(), std::env::var("PATH").unwrap_or_default());
    for p in [&prog, &direct, &via_env] {
        ensure_preload();
        let o = heapdump().env("PATH", &path).args(["run", "-o"]).arg(d.path("m.hdump")).arg("--").arg(p).arg(&marker).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{}: a usage refusal:\n{err}", p.display());
        assert_eq!(err.lines().count(), 1, "one line:\n{err}");
        assert!(
            err.contains("musl") && err.contains("heapdump attach PID") && err.contains("heapdump core CORE"),
            "says why, and names what reads its heap (attach and core read musl's mallocng):\n{err}"
        );
        assert!(!err.contains("Error relocating"), "never the loader's error:\n{err}");
        assert!(!marker.exists(), "{} was started", p.display());
    }
    // Untraced, it runs (the refusal is heapdump's, not the program's).
    assert!(Command::new(&prog).arg(&marker).status().unwrap().success() && marker.exists());
}

/// A static program cannot load the preload library: run, it would run
/// untraced, exit 0 and leave "no dump was written" unexplained. It is
/// refused before it starts (a `run` whose point is a dump, that could
/// never write one), saying so and pointing to `attach` and `core`.
#[test]
fn a_static_program_is_refused_saying_why() {
    let d = Scratch::new("static");
    let prog = compile_with("gcc", &d, "musl_marker.c", &["-static"]);
    let marker = d.path("started");
    ensure_preload();
    let o = heapdump().args(["run", "-o"]).arg(d.path("s.hdump")).arg("--").arg(&prog).arg(&marker).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "a usage refusal:\n{err}");
    assert_eq!(err.lines().count(), 1, "one line:\n{err}");
    assert!(err.contains("statically linked") && err.contains("heapdump attach") && err.contains("heapdump core"), "{err}");
    assert!(!marker.exists(), "the program was started");
}

/// A free port on 127.0.0.1.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One plain HTTP request; the status line.
fn get(port: u16) -> Option<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).ok()?;
    answer.lines().next().map(str::to_string)
}

/// The ids of `pid`'s children.
fn children(pid: u32) -> Vec<u32> {
    let path = format!("/proc/{pid}/task/{pid}/children");
    std::fs::read_to_string(path).unwrap_or_default().split_whitespace().filter_map(|p| p.parse().ok()).collect()
}

/// nginx, a real pre-fork server (master and two workers, in the
/// foreground), serves requests under `run`, then is stopped as Ctrl-\ at
/// a terminal stops it: SIGQUIT to every process of the group, a graceful
/// stop. `run` returns promptly; the master's and each worker's dumps are
/// listed, and each is its own (its pid, its threads).
#[test]
fn nginx_prefork_under_run_stops_gracefully_with_its_workers_dumps() {
    let nginx = Path::new("/usr/sbin/nginx");
    assert!(nginx.exists(), "nginx is not installed: scripts/test.sh installs it");
    let d = Scratch::new("nginx");
    let port = free_port();
    let dir = d.0.display();
    // As root, workers would switch to `nobody`, who may not write here.
    let user = if rustix::process::geteuid().is_root() { "user root root;" } else { "" };
    let conf = format!(
        "daemon off;\nmaster_process on;\nworker_processes 2;\n{user}\npid {dir}/nginx.pid;\nerror_log {dir}/error.log info;\n\
         events {{ worker_connections 64; }}\n\
         http {{\n  access_log {dir}/access.log;\n  client_body_temp_path {dir}/body;\n  proxy_temp_path {dir}/proxy;\n\
           fastcgi_temp_path {dir}/fastcgi;\n  uwsgi_temp_path {dir}/uwsgi;\n  scgi_temp_path {dir}/scgi;\n\
           server {{ listen 127.0.0.1:{port}; location / {{ return 200 \"hello\\n\"; }} }}\n}}\n"
    );
    std::fs::write(d.path("nginx.conf"), conf).unwrap();
    let args: Vec<std::ffi::OsString> = vec![
        nginx.into(),
        "-p".into(),
        d.0.clone().into(),
        "-c".into(),
        d.path("nginx.conf").into(),
        "-e".into(),
        d.path("error.log").into(),
    ];
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    let mut r = Running::start(&d.path("nginx.hdump"), &args);
    // Up when it answers (the workers are forked by then).
    let t0 = Instant::now();
    let mut first = None;
    while first.is_none() && t0.elapsed() < Duration::from_secs(60) {
        first = get(port);
        if first.is_none() {
            assert!(
                r.child.try_wait().unwrap().is_none(),
                "run ended before nginx answered: {}",
                std::fs::read_to_string(d.path("error.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    assert_eq!(first.as_deref(), Some("HTTP/1.1 200 OK"), "nginx answers");
    for _ in 0..20 {
        assert_eq!(get(port).as_deref(), Some("HTTP/1.1 200 OK"));
    }
    let master: u32 = std::fs::read_to_string(d.path("nginx.pid")).unwrap().trim().parse().unwrap();
    let workers = children(master);
    r.tree.push(master);
    r.tree.extend(&workers);
    assert_eq!(workers.len(), 2, "two workers");
    // Ctrl-\ at a terminal: every process of the group gets SIGQUIT.
    for &p in workers.iter().chain([&master]) {
        kill(p, rustix::process::Signal::QUIT);
    }
    let (status, err, took) = r.finish(Duration::from_secs(60));
    assert!(status.success(), "run: {status:?}\n{err}\n{}", std::fs::read_to_string(d.path("error.log")).unwrap_or_default());
    let dumps = listed(&err);
    for l in &dumps {
        assert_own(l);
    }
    let of = |pid: u32, reason: &str| dumps.iter().filter(|l| l.pid == pid && l.reason == reason).count();
    assert_eq!((of(master, "signal"), of(master, "exit")), (1, 1), "the master's SIGQUIT and exit dumps:\n{err}");
    for &w in &workers {
        assert_eq!((of(w, "signal"), of(w, "exit")), (1, 1), "worker {w}'s SIGQUIT and exit dumps:\n{err}");
    }
    assert_eq!(dumps.len(), 6, "no other dump:\n{err}");
    eprintln!("run returned {took:?} after the stop");
}

/// A forked child growing to its address-space limit has its own
/// near-limit dumps, at the share asked: it has no helper thread to look
/// at the limits, so the allocating thread does (its parent's helper
/// would look at the parent's memory and dump nothing, and the child's
/// next look would never come).
#[test]
fn a_forked_child_near_its_limit_gets_its_own_near_limit_dumps() {
    let d = Scratch::new("forklimit");
    let prog = compile_with("gcc", &d, "fork_grows.c", &["-O1"]);
    ensure_preload();
    let o = Command::new("prlimit")
        .arg(format!("--as={}", 512u64 << 20))
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_heapdump"))
        .env("XDG_CACHE_HOME", Path::new(env!("CARGO_TARGET_TMPDIR")).join("xdg-cache"))
        .args(["run", "--no-at-exit", "--near-limit", "60", "-o"])
        .arg(d.path("l.hdump"))
        .arg("--")
        .arg(&prog)
        .output()
        .unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{err}");
    let child: u32 = out.lines().find_map(|l| l.strip_prefix("child ")).unwrap().parse().unwrap();
    let dumps = listed(&err);
    for l in &dumps {
        assert_own(l);
    }
    let near: Vec<&Listed> = dumps.iter().filter(|l| l.reason == "near_limit").collect();
    assert!(!near.is_empty() && near.iter().all(|l| l.pid == child), "the child's near-limit dumps, and only the child's:\n{err}");
    let s = json(&["summary".as_ref(), "--json".as_ref(), near[0].path.as_os_str()]);
    let share = s["limit"]["used"].as_f64().unwrap() / s["limit"]["bytes"].as_f64().unwrap();
    assert!((0.6..0.8).contains(&share), "the first at 60% of the limit or just past it: {share:.2}\n{s}");
}

/// A forked child that crashes is dumped by itself (reason `crash`, its
/// blocks, its pid) and still dies of its signal; `run` returns at once
/// (asking its parent's helper, the child would get the parent dumped and
/// wait 10 minutes for an answer).
#[test]
fn a_forked_child_that_crashes_has_its_own_crash_dump() {
    let d = Scratch::new("childcrash");
    let prog = compile_with("gcc", &d, "child_crash.c", &[]);
    let mut r = Running::start(&d.path("c.hdump"), &[prog.as_os_str()]);
    let child: u32 = r.line().strip_prefix("child ").unwrap().parse().unwrap();
    r.tree.push(child);
    let (status, err, _) = r.finish(Duration::from_secs(60));
    assert!(status.success(), "the child died of SIGSEGV: {status:?}\n{err}");
    let dumps = listed(&err);
    for l in &dumps {
        assert_own(l);
    }
    let crash: Vec<&Listed> = dumps.iter().filter(|l| l.reason == "crash").collect();
    assert!(crash.len() == 1 && crash[0].pid == child, "one crash dump, the child's:\n{err}");
    let b = blocks(&crash[0].path);
    assert_eq!((count_size(&b, 2222), count_size(&b, 1111)), (1, 1), "the child's blocks");
    let s = json(&["summary".as_ref(), "--json".as_ref(), crash[0].path.as_os_str()]);
    assert_eq!(s["signal"]["name"], "SIGSEGV", "{s}");
}
