//! Mutated dumps through every analysis command, as a user who was sent a
//! damaged or hostile file runs them: sixteen commands (summary, top by
//! site, type and size, leaks, retained, path, diff, seven exports, report)
//! over dumps of real traced programs, mutated record by record with the
//! checksum made good again (so the damage reaches the analysis instead of
//! stopping at the trailer), each run under a 4 GiB address-space limit
//! and a 60 s timeout. A command may refuse a dump (one line, exit 1) or
//! answer; it may never panic, abort, hang, run out of memory or leave a
//! temporary file behind. The mutations are drawn from fixed seeds, so a
//! failure names its case and replays the same.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A small deterministic generator (xorshift64*): the seeds are the corpus.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// (offset, tag, payload length) of every record before END.
fn records(b: &[u8]) -> Vec<(usize, u32, usize)> {
    let mut v = vec![];
    let mut at = 32;
    while at + 12 <= b.len() {
        let tag = u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        let len = u64::from_le_bytes(b[at + 4..at + 12].try_into().unwrap()) as usize;
        if tag == 7 || at + 12 + len > b.len() {
            break;
        }
        v.push((at, tag, len));
        at += 12 + len;
    }
    v
}

/// A FIFO for modules to be named after (made once per test process).
fn fifo() -> std::path::PathBuf {
    static F: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    F.get_or_init(|| {
        let p = std::env::temp_dir().join(format!("hd-hostile-fifo-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        assert!(Command::new("mkfifo").arg(&p).status().unwrap().success());
        p
    })
    .clone()
}

/// Values that break arithmetic and allocation sizes.
fn extreme(r: &mut Rng) -> u64 {
    [0, 1, 7, 0xFFFF, 0xFFFF_FFFF, 1 << 32, 1 << 40, u64::MAX, u64::MAX - 7, 1 << 63, r.next()][r.below(11)]
}

/// One mutation of a dump, structure-aware: a field of a record set to an
/// extreme value, bytes flipped inside a record, a record repeated many
/// times (amplification), dropped, or the file cut.
fn mutate(b: &mut Vec<u8>, r: &mut Rng) -> String {
    let recs = records(b);
    if recs.is_empty() {
        return "no record left to damage".into();
    }
    let (at, tag, len) = recs[r.below(recs.len())];
    if r.below(5) == 0 {
        // A module named after a file nobody should read: a kernel file
        // that blocks or never ends, a device, a FIFO, a directory.
        let modules: Vec<_> = recs.iter().filter(|x| x.1 == 2).collect();
        // Half the time the executable's (the first): its code holds the
        // sites, so every view that names a site opens it.
        let pick = if r.below(2) == 0 { 0 } else { r.below(modules.len()) };
        let &&(at, _, len) = modules.get(pick).unwrap_or(&&(0, 0, 0));
        if at != 0 && len >= 24 {
            let fifo = fifo();
            let hostile = ["/proc/kmsg", "/proc/self/pagemap", "/dev/zero", "/dev/stdin", "/", fifo.to_str().unwrap()][r.below(6)];
            let old_len = u32::from_le_bytes(b[at + 20..at + 24].try_into().unwrap()) as usize;
            let mut payload = b[at + 12..at + 12 + len].to_vec();
            payload.splice(24..24 + old_len.min(len - 24), hostile.bytes());
            payload[8..12].copy_from_slice(&(hostile.len() as u32).to_le_bytes());
            let mut rec = b[at..at + 4].to_vec();
            rec.extend_from_slice(&(payload.len() as u64).to_le_bytes());
            rec.extend_from_slice(&payload);
            b.splice(at..at + 12 + len, rec);
            return format!("module at {at} named {hostile}");
        }
    }
    match r.below(6) {
        0 | 1 if len >= 4 => {
            let field = at + 12 + r.below(len / 4) * 4;
            let v = extreme(r);
            let w = if field + 8 <= at + 12 + len && r.below(2) == 0 { 8 } else { 4 };
            b[field..field + w].copy_from_slice(&v.to_le_bytes()[..w]);
            format!("record {tag} at {at}: field +{} = {v:#x} ({w} bytes)", field - at - 12)
        }
        2 if len > 0 => {
            let n = 1 + r.below(8);
            for _ in 0..n {
                let p = at + 12 + r.below(len);
                b[p] ^= 1 << r.below(8);
            }
            format!("record {tag} at {at}: {n} bits flipped")
        }
        3 => {
            let times = 1 + r.below(3000);
            let rec = b[at..at + 12 + len].to_vec();
            let tail = b.split_off(at);
            for _ in 0..times {
                b.extend_from_slice(&rec);
            }
            b.extend_from_slice(&tail);
            format!("record {tag} at {at} repeated {times} times")
        }
        4 => {
            b.drain(at..at + 12 + len);
            format!("record {tag} at {at} dropped")
        }
        _ => {
            let keep = 32 + r.below(b.len() - 32);
            b.truncate(keep);
            format!("cut at {keep}")
        }
    }
}

/// Makes the trailer's counts and checksum agree with the mutated body, so
/// the reader accepts what a careless or hostile writer could produce.
fn reseal(b: &mut [u8]) {
    let recs = records(b);
    let Some(&(last, _, last_len)) = recs.last() else { return };
    let end = last + 12 + last_len;
    if end + 12 + 72 != b.len() || u32::from_le_bytes(b[end..end + 4].try_into().unwrap()) != 7 {
        return; // cut or already broken: the reader must say so
    }
    let t = end + 12;
    b[t..t + 8].copy_from_slice(&(recs.len() as u64).to_le_bytes());
    let count = |tag| recs.iter().filter(|r| r.1 == tag).count();
    b[t + 8..t + 16].copy_from_slice(&(count(6) as u64).to_le_bytes());
    b[t + 24..t + 32].copy_from_slice(&(count(5) as u64).to_le_bytes());
    b[t + 40..t + 44].copy_from_slice(&(count(3) as u32).to_le_bytes());
    b[t + 44..t + 48].copy_from_slice(&(count(4) as u32).to_le_bytes());
    b[t + 48..t + 52].copy_from_slice(&(count(2) as u32).to_le_bytes());
    let crc = crc32fast::hash(&b[..t + 64]);
    b[t + 64..t + 68].copy_from_slice(&crc.to_le_bytes());
}

/// The sixteen analysis commands over `dump`, `base` as diff's baseline and
/// `addr` for path; outputs go to `out`.
fn commands(dump: &Path, base: &Path, addr: &str, out: &Path) -> Vec<Vec<String>> {
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let d = s(dump);
    let mut v: Vec<Vec<String>> = vec![
        vec!["summary".into(), d.clone()],
        vec!["top".into(), d.clone(), "--by".into(), "site".into()],
        vec!["top".into(), d.clone(), "--by".into(), "type".into()],
        vec!["top".into(), d.clone(), "--by".into(), "size".into()],
        vec!["leaks".into(), d.clone()],
        vec!["retained".into(), d.clone()],
        vec!["path".into(), d.clone(), addr.into()],
        vec!["diff".into(), s(base), d.clone()],
    ];
    for f in ["pprof", "heapsnapshot", "folded", "svg", "dot", "mermaid", "json"] {
        v.push(vec!["export".into(), "--format".into(), f.into(), "-o".into(), s(&out.join(format!("x.{f}"))), d.clone()]);
    }
    v.push(vec!["report".into(), "-o".into(), s(&out.join("r.html")), d]);
    v
}

/// Runs one command the way the campaign does: a 4 GiB address-space limit
/// and a 60 s timeout (prlimit and timeout, from util-linux and coreutils).
fn guarded(args: &[String]) -> std::process::Output {
    Command::new("timeout")
        .args(["-s", "KILL", "60", "prlimit", "--as=4294967296", "--"])
        .arg(env!("CARGO_BIN_EXE_heapdump"))
        .args(args)
        .output()
        .unwrap()
}

fn campaign(label: &str, dump: &Path, first_seed: u64, cases: u64) {
    let d = Scratch::new(label);
    let original = std::fs::read(dump).unwrap();
    let addr = format!("{:#x}", blocks(dump)[0].0);
    let mut failures = vec![];
    for seed in first_seed..first_seed + cases {
        let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut b = original.clone();
        let what: Vec<String> = (0..1 + r.below(3)).map(|_| mutate(&mut b, &mut r)).collect();
        reseal(&mut b);
        let case = d.path(&format!("case-{seed}.hdump"));
        std::fs::write(&case, &b).unwrap();
        let out = d.path(&format!("out-{seed}"));
        std::fs::create_dir(&out).unwrap();
        for args in commands(&case, dump, &addr, &out) {
            let o = guarded(&args);
            let err = String::from_utf8_lossy(&o.stderr);
            // Refused: exit 1, every line the tool's own (warnings, then the
            // one-line reason).
            let refused = o.status.code() == Some(1) && err.lines().count() >= 1 && err.lines().all(|l| l.starts_with("heapdump: "));
            if !(o.status.success() || refused) || err.contains("panicked") {
                failures.push(format!("seed {seed} {what:?}: heapdump {} -> {:?}: {}", args.join(" "), o.status, err.trim()));
            }
        }
        let left: Vec<PathBuf> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().ends_with(".tmp"))
            .collect();
        if !left.is_empty() {
            failures.push(format!("seed {seed} {what:?}: left behind {left:?}"));
        }
        let _ = std::fs::remove_dir_all(&out);
        let _ = std::fs::remove_file(&case);
    }
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn mutated_compact_dumps_never_break_a_command() {
    let d = Scratch::new("hostile-compact");
    let prog = compile(&d, "leaks_tree.c", &["-g", "-O1"]);
    let (o, dumps) = run_traced(&d.path("t.hdump"), &prog, &[], &["--mode", "compact"]);
    ok(&o);
    campaign("hostile-c", &dumps[0], 1, 16);
}

#[test]
fn mutated_full_dumps_never_break_a_command() {
    let d = Scratch::new("hostile-full");
    let prog = compile(&d, "threads.c", &["-g", "-O1", "-pthread"]);
    let (o, dumps) = run_traced(&d.path("t.hdump"), &prog, &[], &["--mode", "full"]);
    ok(&o);
    campaign("hostile-f", &dumps[0], 1001, 16);
}

#[test]
fn a_sample_mean_near_the_top_of_its_range_keeps_every_row() {
    // tests/data/sampled-mean-max.hdump: a dump of two sampled blocks whose
    // header's sample mean was set to 2^64 - 1 (the checksum made good). A
    // block's chance of being sampled, 1 - e^(-size/mean), rounded to 0:
    // its weight was infinite, the sums NaN, and `top` printed no row,
    // `--json` an empty list, the folded export nothing, all with exit 0.
    let dump = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/sampled-mean-max.hdump");
    let s = json(&["summary".as_ref(), "--json".as_ref(), dump.as_os_str()]);
    let top = json(&["top".as_ref(), "--json".as_ref(), dump.as_os_str()]);
    let rows = top.as_array().unwrap();
    assert!(!rows.is_empty(), "{top}");
    let n: u64 = rows.iter().map(|r| r["allocations"].as_u64().unwrap()).sum();
    assert_eq!(n, s["allocations"].as_u64().unwrap(), "{top}");
    assert!(rows.iter().all(|r| r["bytes"].as_u64().is_some_and(|b| b > 0)), "{top}");
    let o = heapdump().arg("export").arg(&dump).args(["--format", "folded", "-o", "-"]).output().unwrap();
    assert!(!ok(&o).trim().is_empty(), "the folded export is empty");
}
