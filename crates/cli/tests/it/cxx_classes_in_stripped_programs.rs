//! Issue #44: C++ services ship stripped, and stripping keeps the RTTI. A
//! polymorphic object's class is named from the `type_info` its vtable
//! points to when no symbol names the vtable: `top --by type` on a stripped
//! program equals the unstripped one, under `run` (full and compact),
//! `attach` and `core`; in a stripped shared library whose classes are
//! hidden; never from a secondary vtable (the interior of another object);
//! and not at all for a program built with `-fno-rtti` (nothing is left
//! to name its classes).

use crate::common::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `top --by type --json`: allocations by type.
fn counts(dump: &Path) -> BTreeMap<String, u64> {
    let rows =
        json(&["top".as_ref(), dump.as_os_str(), "--by".as_ref(), "type".as_ref(), "-n".as_ref(), "100000".as_ref(), "--json".as_ref()]);
    rows.as_array().unwrap().iter().map(|r| (r["key"].as_str().unwrap().to_string(), r["allocations"].as_u64().unwrap())).collect()
}

/// A copy of `program` beside it, stripped by `strip` (symbol table and
/// debug info gone; the dynamic symbols and the read-only data stay).
fn stripped(program: &Path) -> PathBuf {
    let out = program.with_file_name(format!("{}-stripped", program.file_name().unwrap().to_string_lossy()));
    std::fs::copy(program, &out).unwrap();
    ok(&Command::new("strip").arg(&out).output().unwrap());
    out
}

/// The one dump `heapdump run --mode MODE` writes at the program's exit.
fn run_dump(d: &Scratch, program: &Path, mode: &str) -> PathBuf {
    let label = format!("{}-{mode}.hdump", program.file_name().unwrap().to_string_lossy());
    let (o, dumps) = run_traced(&d.path(&label), program, &[], &["--mode", mode]);
    ok(&o);
    assert_eq!(dumps.len(), 1, "{}", String::from_utf8_lossy(&o.stderr));
    dumps[0].clone()
}

/// Types by capture: `run` in both modes, then, with the program stopped
/// at its end, `attach` in both modes and `core` from gcore's core file.
fn every_capture(d: &Scratch, program: &Path) -> Vec<(String, BTreeMap<String, u64>)> {
    let name = program.file_name().unwrap().to_string_lossy().to_string();
    let mut out = Vec::new();
    for mode in ["full", "compact"] {
        out.push((format!("run --mode {mode}"), counts(&run_dump(d, program, mode))));
    }
    let p = Stopped::start(Command::new(program));
    for mode in ["full", "compact"] {
        let dump = d.path(&format!("{name}-attach-{mode}.hdump"));
        ok(&heapdump().args(["attach", &p.pid.to_string(), "--mode", mode, "-o"]).arg(&dump).output().unwrap());
        out.push((format!("attach --mode {mode}"), counts(&dump)));
    }
    let core = d.path(&format!("{name}-core"));
    ok(&Command::new("gcore").arg("-o").arg(&core).arg(p.pid.to_string()).output().expect("gcore (gdb) is installed"));
    let core = PathBuf::from(format!("{}.{}", core.display(), p.pid));
    drop(p);
    let dump = d.path(&format!("{name}-core.hdump"));
    ok(&heapdump().arg("core").arg(&core).arg("-o").arg(&dump).output().unwrap());
    std::fs::remove_file(&core).unwrap();
    out.push(("core".to_string(), counts(&dump)));
    out
}

#[test]
fn a_stripped_programs_classes_are_counted_as_the_unstripped_ones() {
    let d = Scratch::new("rtti-shapes");
    let stop = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/stop_at_end.c");
    let program = compile(&d, "geo_shapes.cpp", &["-O1", stop.to_str().unwrap()]);
    let bare = stripped(&program);
    let named = every_capture(&d, &program);
    let from_rtti = every_capture(&d, &bare);
    for ((how, with_symbols), (_, without)) in named.iter().zip(&from_rtti) {
        assert_eq!(with_symbols.get("geo::Circle"), Some(&1333), "{how}, not stripped: {with_symbols:?}");
        assert_eq!(with_symbols.get("geo::Square"), Some(&667), "{how}, not stripped: {with_symbols:?}");
        assert_eq!(without, with_symbols, "{how}: the stripped program's types against the unstripped one's");
    }
}

#[test]
fn a_stripped_librarys_hidden_classes_are_named() {
    // Built with -fvisibility=hidden, as libraries are that export only
    // their interface: no dynamic symbol names the class's vtable.
    let d = Scratch::new("rtti-library");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c");
    let lib = d.path("libplugin_shapes.so");
    ok(&Command::new("g++")
        .args(["-O1", "-shared", "-fPIC", "-fvisibility=hidden", "-o"])
        .arg(&lib)
        .arg(src.join("plugin_shapes.cpp"))
        .output()
        .unwrap());
    ok(&Command::new("strip").arg(&lib).output().unwrap());
    let exe = d.path("plugin_user");
    ok(&Command::new("g++")
        .args(["-O1", "-o"])
        .arg(&exe)
        .arg(src.join("plugin_user.cpp"))
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", d.0.display()))
        .output()
        .unwrap());
    let exe = stripped(&exe);
    for mode in ["full", "compact"] {
        let types = counts(&run_dump(&d, &exe, mode));
        assert_eq!(types.get("plug::Widget"), Some(&250), "--mode {mode}: {types:?}");
    }
}

#[test]
fn a_block_starting_with_a_secondary_vtable_is_not_named() {
    // 400 sprites (two polymorphic bases), 100 pens, 150 diamonds (a
    // virtual base), and 200 blocks copied from a sprite's second base:
    // their first word is a secondary vtable of Sprite's, whose offset to
    // top is not 0. They are no Sprite, and no Drawable either. Nor are
    // 150 blocks whose first word only looks like a vtable pointer: into
    // Sprite's vtable past its address point, at its type_info, at a
    // string.
    let d = Scratch::new("rtti-mixins");
    let program = compile(&d, "mixins.cpp", &["-O1", "-Wno-class-memaccess"]);
    let bare = stripped(&program);
    for mode in ["full", "compact"] {
        let with_symbols = counts(&run_dump(&d, &program, mode));
        let without = counts(&run_dump(&d, &bare, mode));
        for (how, types) in [("not stripped", &with_symbols), ("stripped", &without)] {
            assert_eq!(types.get("Sprite"), Some(&400), "{how}, --mode {mode}: {types:?}");
            assert_eq!(types.get("Pen"), Some(&100), "{how}, --mode {mode}: {types:?}");
            assert_eq!(types.get("Diamond"), Some(&150), "{how}, --mode {mode}: {types:?}");
            assert!(types.get("unknown").is_some_and(|&n| n >= 350), "{how}, --mode {mode}: the copies are unknown: {types:?}");
            assert_eq!(types.len(), 4, "{how}, --mode {mode}: no other name (no Drawable, no Named): {types:?}");
        }
        assert_eq!(without, with_symbols, "--mode {mode}");
    }
}

#[test]
fn packed_relative_relocations_are_applied() {
    // Linked with -z pack-relative-relocs, the pointers to the type_info
    // and its name are relocated through .relr.dyn; a compact dump holds
    // none of the vtables' words, which come from the file.
    let d = Scratch::new("rtti-relr");
    let program = stripped(&compile(&d, "geo_shapes.cpp", &["-O1", "-Wl,-z,pack-relative-relocs"]));
    let types = counts(&run_dump(&d, &program, "compact"));
    assert_eq!((types.get("geo::Circle"), types.get("geo::Square")), (Some(&1333), Some(&667)), "{types:?}");
}

#[test]
fn without_rtti_a_stripped_program_stays_unknown() {
    // -fno-rtti leaves a 0 where the type_info pointer would be: the
    // symbol table named the classes, and without it nothing does.
    let d = Scratch::new("rtti-none");
    let program = compile(&d, "geo_shapes.cpp", &["-O1", "-fno-rtti"]);
    let bare = stripped(&program);
    for mode in ["full", "compact"] {
        let with_symbols = counts(&run_dump(&d, &program, mode));
        assert_eq!((with_symbols.get("geo::Circle"), with_symbols.get("geo::Square")), (Some(&1333), Some(&667)), "{with_symbols:?}");
        let without = counts(&run_dump(&d, &bare, mode));
        assert_eq!(without.keys().collect::<Vec<_>>(), ["unknown"], "--mode {mode}: {without:?}");
    }
}

#[test]
fn most_of_a_stripped_debian_cxx_programs_bytes_are_named() {
    // cppcheck as Debian ships it (stripped), caught as its heap first
    // passes 1.5 MB: loading its library configuration, a tinyxml2 DOM
    // (polymorphic nodes, in a stripped library) and the standard
    // containers it fills. Its vtables are also dynamic symbols: the
    // RTTI names the same classes (checked when this was written), and
    // the checks on the way (read-only data, primary vtables) must not
    // lose one.
    let cppcheck = Path::new("/usr/bin/cppcheck");
    assert!(cppcheck.exists(), "cppcheck is not installed: scripts/test.sh installs it");
    let d = Scratch::new("rtti-cppcheck");
    let src = d.path("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("a.cpp"), "struct A { virtual ~A() {} int x; };\nint f(int *p) { return p[10]; }\n").unwrap();
    let (o, dumps) = run_traced(&d.path("cppcheck.hdump"), cppcheck, &["--quiet", src.to_str().unwrap()], &["--threshold", "1500000"]);
    ok(&o);
    let rows = json(&[
        "top".as_ref(),
        dumps[0].as_os_str(),
        "--by".as_ref(),
        "type".as_ref(),
        "-n".as_ref(),
        "100000".as_ref(),
        "--json".as_ref(),
    ]);
    let bytes = |pick: &dyn Fn(&str) -> bool| -> u64 {
        rows.as_array().unwrap().iter().filter(|r| pick(r["key"].as_str().unwrap())).map(|r| r["bytes"].as_u64().unwrap()).sum()
    };
    let (total, named) = (bytes(&|_| true), bytes(&|k| k != "unknown"));
    eprintln!("cppcheck: {named} of {total} live bytes named ({:.1}%)", named as f64 * 100.0 / total as f64);
    assert!(named * 2 > total, "most bytes named: {named} of {total}: {rows}");
    assert!(bytes(&|k| k.starts_with("tinyxml2::XML")) * 4 > total, "the configuration's DOM is named: {rows}");
    assert!(bytes(&|k| k.starts_with("std::")) > 0, "and the containers: {rows}");
}
