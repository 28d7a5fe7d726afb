//! What was live at the peak, and the totals since the start (#41): a
//! service whose 48 MiB buffer lives briefly in one phase, then a churn
//! loop of exactly 100000 temporaries. `top --peak` names the buffer's
//! site with its 48 MiB although nothing of it is live at exit; `top
//! --allocated` counts the churn exactly; a dump taken from outside has
//! no totals and says so in one line.

use crate::common::*;
use std::path::Path;

fn rows(dump: &Path, flag: &str) -> Vec<serde_json::Value> {
    let v = json(&["top".as_ref(), flag.as_ref(), "--json".as_ref(), "-n".as_ref(), "50".as_ref(), dump.as_os_str()]);
    v.as_array().unwrap().clone()
}

#[test]
fn the_peak_names_a_buffer_gone_at_exit_and_totals_count_the_churn() {
    let d = Scratch::new("peak-phase");
    let prog = compile(&d, "peak_phase.c", &["-O1", "-g"]);
    ensure_preload();
    let dump = d.path("peak.hdump");
    // The peak is kept by default (no HEAPDUMP_PEAK).
    ok(&heapdump().env_remove("HEAPDUMP_PEAK").arg("run").arg("-o").arg(&dump).arg("--").arg(&prog).output().unwrap());
    // Nothing of the buffer is live at exit.
    let live = json(&["top".as_ref(), "--json".as_ref(), dump.as_os_str()]);
    assert!(live.as_array().unwrap().iter().all(|r| r["bytes"].as_u64().unwrap() < 48 << 20), "{live}");
    let peak = rows(&dump, "--peak");
    let first = &peak[0];
    assert_eq!(first["bytes"].as_u64(), Some(48 << 20), "{peak:?}");
    assert_eq!(first["allocations"].as_u64(), Some(1), "{peak:?}");
    assert!(first["key"].as_str().unwrap().contains("peak_phase.c:36"), "{peak:?}");
    // The table built before the peak was live at it too.
    assert!(peak.iter().any(|r| r["allocations"].as_u64() == Some(4096) && r["bytes"].as_u64() == Some(4096 * 256)), "{peak:?}");
    let all = rows(&dump, "--allocated");
    let churn = all.iter().find(|r| r["key"].as_str().unwrap().contains("peak_phase.c:41")).unwrap_or_else(|| panic!("{all:?}"));
    assert_eq!(churn["allocations"].as_u64(), Some(100000), "{all:?}");
    assert_eq!(churn["bytes"].as_u64(), Some(6_400_000), "{all:?}");
    assert_eq!(churn["temporary"].as_u64(), Some(100000), "{all:?}");
    // Kept blocks are no temporaries.
    let kept = all.iter().find(|r| r["key"].as_str().unwrap().contains("keep_one")).unwrap_or_else(|| panic!("{all:?}"));
    assert_eq!((kept["allocations"].as_u64(), kept["temporary"].as_u64()), (Some(1000), Some(0)), "{all:?}");
    // pprof: alloc_space and alloc_objects as Go's heap profiles carry,
    // read by go tool pprof; in-use bytes stay the default.
    let pb = dump.with_extension("pb.gz");
    ok(&heapdump().arg("export").arg(&dump).args(["--format", "pprof", "-o"]).arg(&pb).output().unwrap());
    let top = |index: &str| ok(&tool("go").args(["tool", "pprof", "-top", index]).arg(&pb).env("HOME", &d.0).output().unwrap());
    let space = top("-sample_index=alloc_space");
    assert!(space.contains("Type: alloc_space") && space.contains("55.20MB total"), "{space}");
    let objects = top("-sample_index=alloc_objects");
    assert!(objects.contains("of 105098 total"), "{objects}");
    assert!(top("-sample_index=inuse_space").contains("Type: inuse_space"));
    // summary: when the peak was, and its biggest site.
    let o = heapdump().arg("summary").arg(&dump).output().unwrap();
    let s = ok(&o);
    assert!(s.lines().any(|l| l.starts_with("peak recorded") && l.contains("peak_phase.c:36")), "{s}");
    // summary --json: the same peak, when and its three biggest sites.
    let sj = json(&["summary".as_ref(), "--json".as_ref(), dump.as_os_str()]);
    let p = &sj["peak"];
    assert!(p["bytes"].as_u64().unwrap() >= 48 << 20, "{sj}");
    assert!(p["time_ns"].as_u64().unwrap() > 0 && p["before_dump_s"].as_f64().unwrap() >= 0.0, "{sj}");
    let sites = p["sites"].as_array().unwrap();
    assert!(!sites.is_empty() && sites.len() <= 3, "{sj}");
    assert_eq!(sites[0]["bytes"].as_u64(), Some(48 << 20), "{sj}");
    assert!(sites[0]["key"].as_str().unwrap().contains("peak_phase.c:36"), "{sj}");
}

#[test]
fn with_heapdump_peak_0_the_totals_are_kept_and_the_peak_refused() {
    let d = Scratch::new("peak-off");
    let prog = compile(&d, "peak_phase.c", &["-O1", "-g"]);
    ensure_preload();
    let dump = d.path("nopeak.hdump");
    ok(&heapdump().env("HEAPDUMP_PEAK", "0").arg("run").arg("-o").arg(&dump).arg("--").arg(&prog).output().unwrap());
    let all = rows(&dump, "--allocated");
    let churn = all.iter().find(|r| r["key"].as_str().unwrap().contains("peak_phase.c:41")).unwrap_or_else(|| panic!("{all:?}"));
    assert_eq!((churn["allocations"].as_u64(), churn["temporary"].as_u64()), (Some(100000), Some(100000)), "{all:?}");
    let o = heapdump().args(["top", "--peak"]).arg(&dump).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("this dump has no peak"), "{err}");
    let sj = json(&["summary".as_ref(), "--json".as_ref(), dump.as_os_str()]);
    assert!(sj["peak"].is_null(), "{sj}");
}

#[test]
fn a_dump_from_outside_refuses_the_peak_in_one_line() {
    let d = Scratch::new("peak-attach");
    let stop = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/stop_at_end.c");
    let prog = compile(&d, "peak_phase.c", &["-O1", "-g", stop.to_str().unwrap()]);
    let p = Stopped::start(std::process::Command::new(&prog));
    let out = d.path("attach.hdump");
    ok(&heapdump().args(["attach", &p.pid.to_string(), "-o"]).arg(&out).output().unwrap());
    for flag in ["--peak", "--allocated"] {
        let o = heapdump().args(["top", flag]).arg(&out).output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{flag}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("this dump has no totals/peak") && err.contains("attach, core"), "{err}");
    }
}
