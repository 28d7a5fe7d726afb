//! Issue #8's acceptance: a Rust program holding `Vec<Foo>`, `Box<Bar>`,
//! `Rc<Baz>`, `Arc<Mutex<Qux>>`, `HashMap<String, Quux>` and `Box<dyn
//! Shape>` of two concrete types, built as a debug build, a release build
//! with debug info and a release build with line tables only, traced
//! through `heapdump run`: at least 90% of its live bytes carry the right
//! type name in `top --by type`, the program itself saying what is right.

use crate::common::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

struct Expect {
    blocks: u64,
    exact: bool,
    bytes: u64,
    name: String,
}

fn build(dir: &Scratch, name: &str, flags: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/rust/types.rs");
    let out = dir.path(name);
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let o = Command::new(rustc)
        .args(["--edition", "2021", "--crate-name", "types"])
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .output()
        .unwrap();
    assert!(o.status.success(), "rustc failed: {}", String::from_utf8_lossy(&o.stderr));
    out
}

/// Traces `program` with a full dump at exit; returns the dump and what
/// the program expects.
fn trace(dir: &Scratch, program: &Path, extra: &[&str]) -> (PathBuf, Vec<Expect>) {
    let out = dir.path(&format!("{}.hdump", program.file_name().unwrap().to_string_lossy()));
    let mut args = vec!["--mode", "full"];
    args.extend_from_slice(extra);
    let (o, dumps) = run_traced(&out, program, &["6000"], &args);
    let stdout = ok(&o);
    assert_eq!(dumps.len(), 1, "one dump at exit expected: {}", String::from_utf8_lossy(&o.stderr));
    let expects = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("EXPECT "))
        .map(|l| {
            let mut p = l.splitn(4, ' ');
            Expect {
                blocks: p.next().unwrap().parse().unwrap(),
                exact: p.next().unwrap() == "exact",
                bytes: p.next().unwrap().parse().unwrap(),
                name: p.next().unwrap().to_string(),
            }
        })
        .collect::<Vec<_>>();
    assert_eq!(expects.len(), 12, "{stdout}");
    (dumps[0].clone(), expects)
}

fn by_type(dump: &Path) -> HashMap<String, (u64, u64)> {
    let v = json(&["top".as_ref(), dump.as_os_str(), "--by".as_ref(), "type".as_ref(), "-n".as_ref(), "1000".as_ref(), "--json".as_ref()]);
    let rows = v.as_array().unwrap();
    rows.iter()
        .map(|r| (r["key"].as_str().unwrap().to_string(), (r["allocations"].as_u64().unwrap(), r["bytes"].as_u64().unwrap())))
        .collect()
}

/// The bytes whose type name is right, and the live total.
fn attributed(dump: &Path, expects: &[Expect]) -> (u64, u64, Vec<String>) {
    let rows = by_type(dump);
    let total: u64 = rows.values().map(|r| r.1).sum();
    let mut right = 0;
    let mut wrong = Vec::new();
    for e in expects {
        match rows.get(&e.name) {
            Some(&(blocks, bytes)) if blocks == e.blocks && (if e.exact { bytes == e.bytes } else { bytes >= e.bytes }) => right += bytes,
            other => wrong.push(format!("{}: expected {} blocks, {} bytes; got {other:?}", e.name, e.blocks, e.bytes)),
        }
    }
    (right, total, wrong)
}

fn acceptance(label: &str, flags: &[&str]) {
    let dir = Scratch::new(label);
    let program = build(&dir, label, flags);
    let (dump, expects) = trace(&dir, &program, &[]);
    let (right, total, wrong) = attributed(&dump, &expects);
    let share = right as f64 / total as f64;
    eprintln!("{label}: {right} of {total} live bytes named right ({:.1}%); not right: {wrong:?}", share * 100.0);
    assert!(share >= 0.90, "{label}: only {:.1}% of the live bytes named right; wrong: {wrong:#?}", share * 100.0);
    // The names reach the other views too: retained, leaks, pprof labels.
    let retained = json(&["retained".as_ref(), dump.as_os_str(), "-n".as_ref(), "3".as_ref(), "--json".as_ref()]);
    assert!(retained.as_array().unwrap().iter().all(|r| r["type"].as_str().is_some_and(|t| t != "unknown")), "{retained}");
    let leaks = json(&["leaks".as_ref(), dump.as_os_str(), "--json".as_ref()]);
    let groups = leaks["groups"].as_array().unwrap();
    assert!(groups.iter().any(|g| g["type"] == "Vec<types::Foo>"), "{leaks}");
}

/// `go tool pprof -raw`'s samples summed by their `type` label.
fn pprof_types(dir: &Scratch, dump: &Path) -> HashMap<String, (u64, u64)> {
    let out = dir.path("types.pb.gz");
    ok(&heapdump().arg("export").arg(dump).args(["--format", "pprof", "-o"]).arg(&out).output().unwrap());
    let o = Command::new("go").args(["tool", "pprof", "-raw"]).arg(&out).env("HOME", &dir.0).output().unwrap();
    let raw = ok(&o);
    let mut m: HashMap<String, (u64, u64)> = HashMap::new();
    let mut last = (0, 0);
    for line in raw.lines() {
        if let Some(t) = line.trim().strip_prefix("type:[").and_then(|t| t.strip_suffix(']')) {
            let e = m.entry(t.to_string()).or_default();
            e.0 += last.0;
            e.1 += last.1;
        } else if let Some((vals, _)) = line.split_once(':') {
            let v: Vec<u64> = vals.split_whitespace().filter_map(|x| x.parse().ok()).collect();
            // In-use objects and bytes are the last two values (after
            // alloc_objects and alloc_space when the dump has totals).
            if v.len() >= 2 {
                last = (v[v.len() - 2], v[v.len() - 1]);
            }
        }
    }
    m
}

/// Node counts and self sizes by name in the V8 heap snapshot export.
fn snapshot_types(dir: &Scratch, dump: &Path) -> HashMap<String, (u64, u64)> {
    let out = dir.path("types.heapsnapshot");
    ok(&heapdump().arg("export").arg(dump).args(["--format", "heapsnapshot", "-o"]).arg(&out).output().unwrap());
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let fields: Vec<&str> = v["snapshot"]["meta"]["node_fields"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    let (name, size) = (fields.iter().position(|f| *f == "name").unwrap(), fields.iter().position(|f| *f == "self_size").unwrap());
    let strings = v["strings"].as_array().unwrap();
    let nodes = v["nodes"].as_array().unwrap();
    let mut m: HashMap<String, (u64, u64)> = HashMap::new();
    for node in nodes.chunks(fields.len()) {
        let e = m.entry(strings[node[name].as_u64().unwrap() as usize].as_str().unwrap().to_string()).or_default();
        e.0 += 1;
        e.1 += node[size].as_u64().unwrap();
    }
    m
}

#[test]
fn type_names_reach_pprof_labels_and_heapsnapshot_nodes() {
    let dir = Scratch::new("types-exports");
    let program = build(&dir, "types-exports", &["-C", "opt-level=3", "-g"]);
    let (dump, expects) = trace(&dir, &program, &[]);
    let top = by_type(&dump);
    // pprof: every type label carries exactly what `top --by type` says.
    assert_eq!(pprof_types(&dir, &dump), top);
    // heapsnapshot: one node per allocation, named by its type.
    let nodes = snapshot_types(&dir, &dump);
    for e in expects.iter().filter(|e| e.exact) {
        assert_eq!(nodes.get(&e.name), Some(&(e.blocks, e.bytes)), "{} in the heapsnapshot", e.name);
    }
}

#[test]
fn debug_build_types() {
    acceptance("types-debug", &["-C", "opt-level=0", "-g"]);
}

#[test]
fn release_with_debug_info_types() {
    acceptance("types-release", &["-C", "opt-level=3", "-g"]);
}

#[test]
fn release_with_line_tables_only_types() {
    acceptance("types-lines", &["-C", "opt-level=3", "-C", "debuginfo=line-tables-only"]);
}

/// Without allocation sites, trait objects are still named in full dumps:
/// by the vtable next to each pointer to them (full debug info only).
#[test]
fn trait_objects_are_named_by_their_vtables_without_sites() {
    let dir = Scratch::new("types-vtables");
    let program = build(&dir, "types-vtables", &["-C", "opt-level=3", "-g"]);
    let (dump, expects) = trace(&dir, &program, &["--backtrace", "off"]);
    let rows = by_type(&dump);
    for (shape, concrete) in
        [("Box<types::Circle>", "types::Circle (dyn types::Shape)"), ("Box<types::Square>", "types::Square (dyn types::Shape)")]
    {
        let e = expects.iter().find(|e| e.name == shape).unwrap();
        assert_eq!(rows.get(concrete), Some(&(e.blocks, e.bytes)), "{concrete} in {rows:?}");
    }
    // And nothing else is guessed: without sites the rest is unknown.
    assert_eq!(rows.len(), 3, "{rows:?}");
    // pprof splits the one "no site" sample by these names.
    assert_eq!(pprof_types(&dir, &dump), rows);
}

/// C++: libstdc++'s frames name what the standard containers allocate, in
/// an optimised and an unoptimised build.
#[test]
fn cxx_standard_containers_are_named() {
    let d = Scratch::new("cxx-types");
    for flags in [&["-O2", "-g"][..], &["-O0", "-g"][..]] {
        let prog = compile(&d, "cxx_types.cpp", flags);
        let out = d.path(&format!("cxx{}.hdump", flags[0]));
        let (o, dumps) = run_traced(&out, &prog, &[], &[]);
        ok(&o);
        let rows = by_type(&dumps[0]);
        let sizeof_point = 24;
        for (name, blocks, bytes) in [
            ("std::vector<Point>", 1, Some(1024 * sizeof_point)),
            ("std::map<std::string, int>", 300, None),
            ("std::unordered_map<int, Point>", 301, None),
            ("std::string", 300, None),
            ("std::shared_ptr<Node>", 101, None),
            ("std::unique_ptr<Point>", 1, Some(sizeof_point)),
        ] {
            let got = rows.get(name).copied();
            assert_eq!(got.map(|r| r.0), Some(blocks), "{name} ({flags:?}) in {rows:#?}");
            if let Some(b) = bytes {
                assert_eq!(got.map(|r| r.1), Some(b), "{name} bytes ({flags:?})");
            }
        }
    }
}

#[test]
fn rust_hash_tables_are_proven_in_both_modes() {
    // Compact dumps keep no contents: the writer proves each table's
    // layout on its bytes (ALLOC flags) so the heuristic still applies,
    // as it does in full dumps from the contents.
    let d = Scratch::new("maps");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/rust/maps.rs");
    let prog = d.path("maps");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let o = Command::new(rustc).args(["--edition", "2021", "-O", "-o"]).arg(&prog).arg(&src).output().unwrap();
    assert!(o.status.success(), "rustc failed: {}", String::from_utf8_lossy(&o.stderr));
    for mode in ["compact", "full"] {
        let (o, dumps) = run_traced(&d.path(&format!("m-{mode}.hdump")), &prog, &[], &["--mode", mode]);
        let out = ok(&o);
        let tables: u64 = out.trim().strip_prefix("TABLES ").unwrap().parse().unwrap();
        let j = json(&["leaks".as_ref(), "--json".as_ref(), dumps[0].as_os_str()]);
        assert_eq!(j["via_heuristic"]["hashbrown"]["blocks"].as_u64(), Some(tables), "{mode}: {j}");
        assert_eq!(j["possibly_lost"]["blocks"].as_u64(), Some(0), "{mode}: {j}");
    }
}
