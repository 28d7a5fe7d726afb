//! Issue #39, "structures, not nodes": a linked list whose nodes each own
//! a string (the usual cache) is one structure in `retained` (one row, not
//! 20 rows of consecutive nodes), in `path` and `path --all` (the hops
//! along it one line; `path --json` keeps every step), and in the DOT and
//! mermaid pictures (one node, fans counted in "+ N more" nodes, a size
//! graphviz draws readably); and a route prefers start pointers to
//! interior ones, as valgrind's reachability does.

use crate::common::*;
use serde_json::Value;
use std::path::Path;

/// tests/c/cached_list.c: 40000 `cached_response` nodes each owning a
/// string, held by the static `cache_head`; a table of 10000 entries; 8
/// lost request buffers.
const NODES: u64 = 40_000;

fn retained_rows(dump: &Path, n: &str) -> Vec<Value> {
    json(&["retained".as_ref(), "--json".as_ref(), "-n".as_ref(), n.as_ref(), dump.as_os_str()]).as_array().unwrap().clone()
}

fn text(args: &[&std::ffi::OsStr]) -> String {
    ok(&heapdump().args(args).output().unwrap())
}

#[test]
fn a_list_whose_nodes_own_strings_is_one_structure_in_retained_and_path() {
    let (_d, dump) = traced("cached-list", "cached_list.c", &["-O0", "-g"]);
    let rows = retained_rows(&dump, "20");
    // The first row is the whole list: every node and every string. Before,
    // only a list of bare nodes was one row: this one filled all 20 rows
    // with its consecutive nodes (each 80000, 79998, ... blocks).
    let head = &rows[0];
    let list = &head["list"];
    assert_eq!(head["chain"].as_u64(), Some(NODES), "{head}");
    assert_eq!(
        (list["nodes"].as_u64(), list["payload_blocks"].as_u64(), list["payload_named"].as_u64()),
        (Some(NODES), Some(NODES), Some(NODES)),
        "{head}"
    );
    assert_eq!(head["dominated"].as_u64(), Some(2 * NODES), "{head}");
    assert_eq!(list["node_bytes"].as_u64(), Some(NODES * 32), "{head}");
    assert_eq!(list["payload_bytes"].as_u64().unwrap() + list["node_bytes"].as_u64().unwrap(), head["retained"].as_u64().unwrap());
    assert_eq!(list["held_by"], "static `cache_head`", "{head}");
    assert_eq!(list["next_offset"], 0);
    assert!(list["node"].as_str().unwrap().starts_with("cache_put"), "named by its type, else its site: {head}");
    // The contract's keys are still there.
    for k in ["address", "size", "retained", "site"] {
        assert!(!head[k].is_null(), "{k}: {head}");
    }
    // No other row is a node of the list.
    let same_site = rows.iter().filter(|r| r["site"] == head["site"]).count();
    assert_eq!(same_site, 1, "one row for the list: {rows:?}");
    assert!(rows[1..].iter().all(|r| r["list"].is_null() && r["chain"] == 1), "{rows:?}");
    // The text row says what it is.
    let t = text(&["retained".as_ref(), "-n".as_ref(), "3".as_ref(), dump.as_os_str()]);
    let first = t.lines().nth(1).unwrap();
    assert!(first.contains("a list of 40000 `cache_put") && first.contains("(with their 40000 `cache_put"), "{t}");
    assert!(first.contains("held by static `cache_head`"), "{t}");
    // By site, each byte once: the node site retains the nodes and their
    // strings, as the list's row does.
    let by_site = json(&["retained".as_ref(), "--by".as_ref(), "site".as_ref(), "--json".as_ref(), dump.as_os_str()]);
    let nodes = by_site.as_array().unwrap().iter().find(|r| r["key"] == head["site"]).unwrap_or_else(|| panic!("{by_site}"));
    assert_eq!((nodes["blocks"].as_u64(), nodes["retained"].as_u64()), (Some(NODES), head["retained"].as_u64()), "{nodes}");

    // `path` to the last node: a handful of lines (40,002 before).
    let last = list["last"].as_str().unwrap();
    let t = text(&["path".as_ref(), dump.as_os_str(), last.as_ref()]);
    assert!(t.lines().count() <= 6, "{t}");
    assert!(t.contains("… 39,998 hops through `cache_put") && t.contains("(the pointer at +0)"), "{t}");
    assert!(t.lines().nth(1).unwrap().contains("static cache_head"), "{t}");
    assert!(t.lines().last().unwrap().contains(last), "the last line reaches the node: {t}");
    let t = text(&["path".as_ref(), "--all".as_ref(), dump.as_os_str(), last.as_ref()]);
    assert!(t.lines().count() <= 8 && t.contains("… 39,997 hops through `cache_put"), "{t}");
    // `path --json` keeps every step (the contract): root, then 39,999 hops.
    let steps = json(&["path".as_ref(), "--json".as_ref(), dump.as_os_str(), last.as_ref()]);
    let steps = steps.as_array().unwrap();
    assert_eq!(steps.len() as u64, NODES, "every step");
    assert!(steps[0]["from"].as_str().unwrap().starts_with("static cache_head"), "{}", steps[0]);
    assert_eq!(steps[0]["to"], head["address"]);
    assert!(steps.windows(2).all(|w| w[1]["from"] == w[0]["to"] && w[1]["offset"] == 0), "a chain of steps");
    assert_eq!(steps.last().unwrap()["to"], last);

    // The pictures: the top retainers, the list one node, the table's fan
    // a few entries and one "+ N more" node; graphviz draws them readably.
    let d = Scratch::new("cached-list-dot");
    let table =
        rows.iter().find(|r| r["size"] == 80_000).unwrap_or_else(|| panic!("the table: {rows:?}"))["address"].as_str().unwrap().to_string();
    for (name, extra) in [("top", vec![]), ("last", vec!["--address", last]), ("table", vec!["--address", table.as_str()])] {
        let out = d.path(&format!("{name}.dot"));
        let o = heapdump().args(["export", "--format", "dot"]).args(&extra).arg("-o").arg(&out).arg(&dump).output().unwrap();
        ok(&o);
        let dot = std::fs::read_to_string(&out).unwrap();
        let (w, h) = rendered_size(&out);
        assert!(w < 2500.0 && h < 2500.0, "{name}: graphviz draws it {w}x{h} pt (32767x270 px before)");
        assert!(dot.lines().count() < 80, "{name}: {dot}");
        match name {
            "top" => {
                assert!(dot.contains("a list of 40,000 `cache_put") && dot.contains("with their 40,000 `cache_put"), "{dot}");
                assert!(dot.contains("static `cache_head`") && dot.contains("static `table`"), "the roots: {dot}");
                assert!(dot.contains("+ 9,996 more `table_put"), "the table's fan: {dot}");
            }
            "last" => assert!(
                dot.contains("39,997 hops through") && dot.contains("static cache_head"),
                "the route up, one node for the list: {dot}"
            ),
            _ => assert!(dot.contains("+ 9,996 more `table_put"), "{dot}"),
        }
    }
    let out = d.path("top.mmd");
    ok(&heapdump().args(["export", "--format", "mermaid", "-o"]).arg(&out).arg(&dump).output().unwrap());
    let mmd = std::fs::read_to_string(&out).unwrap();
    assert!(mmd.contains("a list of 40,000") && mmd.contains("+ 9,996 more") && mmd.lines().count() < 80, "{mmd}");
}

/// The size graphviz gives a DOT file (points), from `dot -Tplain`'s first
/// line (`graph SCALE WIDTH HEIGHT`, inches), and that `-Tsvg` renders it.
fn rendered_size(dot: &Path) -> (f64, f64) {
    let o = tool("dot").arg("-Tplain").arg(dot).output().unwrap();
    let plain = ok(&o);
    let f: Vec<f64> = plain.lines().next().unwrap().split_whitespace().skip(1).map(|x| x.parse().unwrap()).collect();
    let svg = tool("dot").arg("-Tsvg").arg(dot).output().unwrap();
    assert!(ok(&svg).contains("<svg"), "graphviz renders it");
    (f[1] * 72.0 * f[0], f[2] * 72.0 * f[0])
}

#[test]
fn a_route_takes_a_start_pointer_before_an_interior_one() {
    // tests/c/start_and_interior.c: a block held at offset 0 of its holder
    // by an interior pointer and at offset 16 by a start pointer; another
    // held by the static `roots`, inside at offset 0, at its start at 8.
    // `path` took the first pointer found, the interior one, where `path
    // --all` showed the start pointer from the same holder.
    let (_d, dump) = traced("start-interior", "start_and_interior.c", &["-O0", "-g"]);
    let sizes = blocks(&dump);
    let at = |size: u64| format!("{:#x}", sizes.iter().find(|b| b.1 == size).unwrap_or_else(|| panic!("{size}: {sizes:?}")).0);
    for (size, offset, from) in [(64, 16, "0x"), (96, 8, "static roots")] {
        let addr = at(size);
        let steps = json(&["path".as_ref(), "--json".as_ref(), dump.as_os_str(), addr.as_ref()]);
        let last = steps.as_array().unwrap().last().unwrap().clone();
        assert_eq!((last["to"].as_str(), last["offset"].as_u64()), (Some(addr.as_str()), Some(offset)), "{steps}");
        assert!(last["from"].as_str().unwrap().starts_with(from), "{steps}");
        let t = text(&["path".as_ref(), dump.as_os_str(), addr.as_ref()]);
        assert!(!t.contains("interior pointer"), "{t}");
        // Both pointers are still every holder `path --all` lists.
        let all = json(&["path".as_ref(), "--all".as_ref(), "--json".as_ref(), dump.as_os_str(), addr.as_ref()]);
        let kinds: Vec<bool> = all.as_array().unwrap().iter().map(|h| h["interior"].as_bool().unwrap()).collect();
        assert!(kinds.contains(&true) && kinds.contains(&false), "{all}");
    }
}
