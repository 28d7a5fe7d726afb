use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};

/// The command, with its caches (the preload library's copy, the analysis
/// caches) under the tests' own directory rather than the user's (a test
/// may set another).
pub fn heapdump() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_heapdump"));
    c.env("XDG_CACHE_HOME", Path::new(env!("CARGO_TARGET_TMPDIR")).join("xdg-cache"));
    c
}

/// A program of the workspace built next to `heapdump` (the demo and the
/// test programs are the heapdump-demo package's: scripts/test.sh builds
/// every binary first).
pub fn sibling_bin(name: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_BIN_EXE_heapdump")).with_file_name(name);
    assert!(p.exists(), "{} missing: build it with `cargo build --workspace --bins`", p.display());
    p
}

/// Makes sure the preload library exists (builds it if needed).
pub fn ensure_preload() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let exe = PathBuf::from(env!("CARGO_BIN_EXE_heapdump"));
        let lib = exe.with_file_name("libheapdump_preload.so");
        if !lib.exists() {
            let release = exe.parent().is_some_and(|d| d.ends_with("release"));
            let mut c = Command::new(env!("CARGO"));
            c.args(["build", "-p", "heapdump-preload"]);
            if release {
                c.arg("--release");
            }
            assert!(c.status().unwrap().success(), "building the preload library failed");
        }
    });
}

pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(label: &str) -> Scratch {
        static N: AtomicU64 = AtomicU64::new(0);
        let d = std::env::temp_dir().join(format!("hd-cli-{}-{label}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Compiles a test program from tests/c with gcc (or g++ for .cpp).
pub fn compile(dir: &Scratch, source: &str, flags: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c").join(source);
    let out = dir.path(source.split('.').next().unwrap());
    let cc = if source.ends_with(".cpp") { "g++" } else { "gcc" };
    let o = Command::new(cc).args(flags).arg("-o").arg(&out).arg(&src).arg("-lpthread").output().unwrap();
    assert!(o.status.success(), "{cc} failed: {}", String::from_utf8_lossy(&o.stderr));
    out
}

pub fn ok(o: &Output) -> String {
    assert!(o.status.success(), "failed ({:?}): {}\n{}", o.status, String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout.clone()).unwrap()
}

pub fn json(args: &[&std::ffi::OsStr]) -> serde_json::Value {
    let o = heapdump().args(args).output().unwrap();
    serde_json::from_str(&ok(&o)).unwrap()
}

/// Compiles `source` from tests/c, runs it traced (no arguments), and
/// returns the scratch directory and the dump it wrote.
pub fn traced(label: &str, source: &str, flags: &[&str]) -> (Scratch, PathBuf) {
    let d = Scratch::new(label);
    let prog = compile(&d, source, flags);
    let (o, dumps) = run_traced(&d.path(&format!("{label}.hdump")), &prog, &[], &[]);
    ok(&o);
    let dump = dumps.into_iter().next().expect("the program wrote a dump");
    (d, dump)
}

/// Runs `heapdump run -o OUT -- program args`; returns the dumps written
/// (from run's own report on stderr).
pub fn run_traced(out: &Path, program: &Path, args: &[&str], extra: &[&str]) -> (Output, Vec<PathBuf>) {
    ensure_preload();
    let o = heapdump().arg("run").args(extra).arg("-o").arg(out).arg("--").arg(program).args(args).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    let dumps =
        err.lines().filter_map(|l| l.strip_prefix("heapdump: wrote ")).map(|l| PathBuf::from(l.split(" (").next().unwrap())).collect();
    (o, dumps)
}

/// (address, size) of every block in a dump.
pub fn blocks(dump: &Path) -> Vec<(u64, u64)> {
    let bytes = std::fs::read(dump).unwrap();
    let d = heapdump_format::Dump::parse(&bytes).unwrap();
    let mut v = vec![];
    for r in d.records() {
        match r.unwrap().1 {
            heapdump_format::Record::Alloc(a) => v.push((a.address, a.size)),
            heapdump_format::Record::Allocs(a) => v.extend(a.entries().map(|e| e.unwrap()).map(|e| (e.address, e.size))),
            _ => {}
        }
    }
    v
}

pub fn count_size(b: &[(u64, u64)], size: u64) -> usize {
    b.iter().filter(|x| x.1 == size).count()
}

/// A full dump of the bundled demo program, taken by its own API.
pub fn demo_dump(d: &Scratch) -> PathBuf {
    let p = d.path("demo.hdump");
    let o = Command::new(sibling_bin("heapdump-demo")).arg(&p).env("HEAPDUMP_SIGNAL", "0").output().unwrap();
    ok(&o);
    p
}

/// Runs a node `script` with target/node's modules (where scripts/test.sh
/// installs memlab, which brings puppeteer-core) and parses the JSON it
/// prints.
pub fn node_json(d: &Scratch, needs: &str, script: &str, args: &[&std::ffi::OsStr]) -> serde_json::Value {
    let node_modules = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/node/node_modules");
    assert!(node_modules.join(needs).exists(), "{needs} missing: scripts/test.sh installs memlab (and what it brings) into target/node");
    let path = d.path("script.js");
    std::fs::write(&path, script).unwrap();
    let o = tool("node").arg(&path).args(args).env("NODE_PATH", &node_modules).output().unwrap();
    serde_json::from_str(&ok(&o)).unwrap()
}

pub fn tool(name: &str) -> Command {
    assert!(
        Command::new("sh").arg("-c").arg(format!("command -v {name}")).output().unwrap().status.success(),
        "{name} is not installed: scripts/test.sh installs the export oracles"
    );
    Command::new(name)
}

/// A process that stopped itself, found by the "stopped PID" line it
/// writes on stderr (a forked child may say it for its parent);
/// continued and reaped when dropped.
pub struct Stopped {
    pub child: std::process::Child,
    pub pid: i32,
}

/// Waits (up to 5 s) for process `pid`, which said it stops itself, to be
/// stopped: its state is T once the stop is delivered (a SIGCONT sent
/// before that is lost, and the process then stops for good).
pub fn wait_stopped(pid: i32) {
    for _ in 0..500 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.rsplit(')').next().is_some_and(|s| s.trim_start().starts_with('T')) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// `heapdump attach` of stopped process `p`, whose heap is damaged (`how`
/// names the damage, for the messages): refused in one line (exit 1) that
/// says where (`at 0x`), at once (a walk that loops would hold the target
/// for good; a damaged live heap is read again a few times first, a
/// moment apart), nothing written. The line, for what it must say.
pub fn attach_refused(d: &Scratch, p: &Stopped, how: &str) -> String {
    let out = d.path(&format!("{how}.hdump"));
    let started = std::time::Instant::now();
    let o = heapdump().args(["attach", &p.pid.to_string(), "-o"]).arg(&out).output().unwrap();
    let took = started.elapsed();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "{how}: {err}");
    assert_eq!(err.lines().count(), 1, "{how}: {err}");
    assert!(err.contains("at 0x"), "{how}: {err}");
    assert!(took < std::time::Duration::from_secs(5), "{how}: refused at once ({took:?})");
    assert!(!out.exists(), "{how}: nothing written");
    err
}

impl Stopped {
    /// Starts `cmd` with STOP_AT_END set (programs linked with
    /// stop_at_end.c stop at their end) and waits for it to stop.
    pub fn start(mut cmd: Command) -> Stopped {
        cmd.env("STOP_AT_END", "1");
        Stopped::start_in(cmd, |_, pid| pid)
    }

    /// Starts `cmd` and waits for it to stop; `host_pid` maps the pid it
    /// says (its own PID namespace's) to this namespace's.
    pub fn start_in(mut cmd: Command, host_pid: impl Fn(&std::process::Child, i32) -> i32) -> Stopped {
        use std::io::{BufRead, BufReader};
        let mut child = cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped()).spawn().unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut said = 0;
        let mut seen = String::new();
        for _ in 0..200 {
            let mut line = String::new();
            if err.read_line(&mut line).unwrap() == 0 {
                break;
            }
            if let Some(p) = line.trim().strip_prefix("stopped ") {
                said = p.parse().unwrap();
                break;
            }
            seen.push_str(&line);
        }
        assert!(said > 0, "the program did not stop: {seen}");
        let pid = host_pid(&child, said);
        let p = Stopped { child, pid };
        wait_stopped(pid);
        // The rest of its stderr must not fill the pipe.
        std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
        p
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-CONT", &self.pid.to_string()]).status();
        let _ = self.child.wait();
    }
}

/// valgrind's classes against ours: blocks exactly, bytes between the
/// sizes asked for and those sizes rounded up to glibc's usable sizes (at
/// most 24 bytes more per block).
pub fn same_classes(ours: [(u64, u64); 4], valgrind: [(u64, u64); 4], what: &str) {
    for (k, ((ob, on), (vb, vn))) in ours.iter().zip(valgrind.iter()).enumerate() {
        let class = ["definitely lost", "indirectly lost", "possibly lost", "still reachable"][k];
        assert_eq!(on, vn, "{what}: {class} blocks (ours {ours:?}, valgrind {valgrind:?})");
        assert!(ob >= vb && *ob <= vb + 24 * vn, "{what}: {class} bytes {ob} against valgrind's {vb} in {vn} blocks");
    }
}

/// A test program with `stop_at_end.c` linked in, built by `cc` (gcc,
/// musl-gcc) at -O0 -g with `flags`, named `name` in `d`.
pub fn stopping_program(d: &Scratch, cc: &str, source: &str, flags: &[&str], name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c");
    let out = d.path(name);
    let o = Command::new(cc)
        .args(["-O0", "-g"])
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(dir.join(source))
        .arg(dir.join("stop_at_end.c"))
        .arg("-lpthread")
        .output()
        .unwrap_or_else(|e| panic!("{cc}: {e} (scripts/test.sh installs it)"));
    assert!(o.status.success(), "{cc} failed: {}", String::from_utf8_lossy(&o.stderr));
    out
}

/// gdb's core of the stopped process `pid`, in `d`.
pub fn gcore(d: &Scratch, pid: i32) -> PathBuf {
    let core = d.path("core");
    ok(&Command::new("gcore").arg("-o").arg(&core).arg(pid.to_string()).output().expect("gcore (gdb) is installed"));
    PathBuf::from(format!("{}.{pid}", core.display()))
}

/// valgrind's classes against ours for another allocator: blocks exactly,
/// bytes at least valgrind's and at most `most_above(bytes, blocks)` more
/// (the allocator's size classes above the sizes asked for).
pub fn same_classes_within(ours: [(u64, u64); 4], valgrind: [(u64, u64); 4], what: &str, most_above: impl Fn(u64, u64) -> u64) {
    for (k, ((ob, on), (vb, vn))) in ours.iter().zip(valgrind.iter()).enumerate() {
        let class = ["definitely lost", "indirectly lost", "possibly lost", "still reachable"][k];
        assert_eq!(on, vn, "{what}: {class} blocks (ours {ours:?}, valgrind {valgrind:?})");
        assert!(*ob >= *vb && *ob <= vb + most_above(*vb, *vn), "{what}: {class} bytes {ob} against valgrind's {vb} in {vn} blocks");
    }
}

/// The Rust program in crates/cli/tests/`dir` (a cargo project outside the
/// workspace, whose dependencies come from the registry), built in release
/// with `features` under the workspace's target/fixtures, its binary `bin`
/// copied into `d` as `service` (a name that says nothing of it).
pub fn rust_fixture(d: &Scratch, dir: &str, bin: &str, features: &[&str]) -> PathBuf {
    rust_fixture_in(d, dir, bin, features, "fixtures", &[])
}

/// [`rust_fixture`] built with `env` set, in target directory `target`
/// (under the workspace's target: one for each `env`, so that each build
/// stays and the next test run rebuilds nothing).
pub fn rust_fixture_in(d: &Scratch, dir: &str, bin: &str, features: &[&str], target: &str, env: &[(&str, &str)]) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join(dir);
    let target = Path::new(env!("CARGO_BIN_EXE_heapdump")).parent().and_then(Path::parent).unwrap().join(target);
    // One build and copy at a time: another test building the same
    // program with other features replaces its binary.
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _held = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = Command::new(env!("CARGO"));
    c.args(["build", "--release", "--quiet", "--manifest-path"]).arg(dir.join("Cargo.toml")).arg("--target-dir").arg(&target);
    c.envs(env.iter().copied());
    if !features.is_empty() {
        c.arg("--features").arg(features.join(","));
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "building {}: {}", dir.display(), String::from_utf8_lossy(&o.stderr));
    let prog = d.path("service");
    std::fs::copy(target.join("release").join(bin), &prog).unwrap();
    prog
}
