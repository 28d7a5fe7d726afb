//! V8 `.heapsnapshot` (the JSON Chrome DevTools and memlab load).
//!
//! Node 0 is the synthetic root; its children are three synthetic groups,
//! "(thread roots)", "(static roots)" and "(lost)" (the definitely lost
//! heads, so leaked structures show too); then one node per allocation,
//! named by its type or site, with its requested size as self size. Each
//! pointer is an element edge indexed by its byte offset. The graph is the
//! analysis graph, so the retained sizes DevTools and memlab compute equal
//! heapdump's. Streamed: nodes and edges are written as they are produced.

use heapdump_analyze::leaks::LeakKind;
use heapdump_analyze::Analysis;
use heapdump_analyze::{BlockId, RootKind};
use std::collections::HashMap;
use std::io::Write;

const NODE_FIELDS: usize = 7;
// node types
const T_OBJECT: u32 = 3;
const T_SYNTHETIC: u32 = 9;
// edge types
const E_ELEMENT: u32 = 1;

/// The node id of block `i` (V8 gives objects odd ids).
pub fn block_node_id(i: usize) -> u64 {
    2 * i as u64 + 11
}

/// Writes the snapshot.
pub fn write_heapsnapshot(ex: &Analysis<'_>, out: &mut dyn Write) -> crate::Result<()> {
    let heap = ex.heap();
    let n = heap.len();
    let mut strings: Vec<String> = vec![String::new()];
    let mut string_ids: HashMap<String, usize> = HashMap::from([(String::new(), 0)]);
    let mut sid = |s: &str| -> usize {
        if let Some(&i) = string_ids.get(s) {
            return i;
        }
        strings.push(s.to_string());
        string_ids.insert(s.to_string(), strings.len() - 1);
        strings.len() - 1
    };
    // Root groups.
    let mut threads: Vec<u32> = Vec::new();
    let mut statics: Vec<u32> = Vec::new();
    let mut seen_t = vec![false; n];
    let mut seen_s = vec![false; n];
    for r in &heap.roots {
        let t = r.target.index();
        match heap.root_regions[r.region as usize].kind {
            RootKind::Stack | RootKind::Registers => {
                if !seen_t[t] {
                    seen_t[t] = true;
                    threads.push(t as u32);
                }
            }
            RootKind::Static => {
                if !seen_s[t] {
                    seen_s[t] = true;
                    statics.push(t as u32);
                }
            }
        }
    }
    drop((seen_t, seen_s));
    let lost: Vec<u32> = (0..n as u32).filter(|&i| ex.leaks().kind[i as usize] == LeakKind::DefinitelyLost).collect();
    let edge_count = 3 + threads.len() + statics.len() + lost.len() + heap.edge_count();
    let node_count = 4 + n;
    // Node index (in the flat array) of block i.
    let node_of = |i: u32| (4 + i as usize) * NODE_FIELDS;

    write!(
        out,
        "{{\"snapshot\":{{\"meta\":{{\"node_fields\":[\"type\",\"name\",\"id\",\"self_size\",\"edge_count\",\"trace_node_id\",\"detachedness\"],\
\"node_types\":[[\"hidden\",\"array\",\"string\",\"object\",\"code\",\"closure\",\"regexp\",\"number\",\"native\",\"synthetic\",\"concatenated string\",\"sliced string\",\"symbol\",\"bigint\",\"object shape\"],\"string\",\"number\",\"number\",\"number\",\"number\",\"number\"],\
\"edge_fields\":[\"type\",\"name_or_index\",\"to_node\"],\
\"edge_types\":[[\"context\",\"element\",\"property\",\"internal\",\"hidden\",\"shortcut\",\"weak\"],\"string_or_number\",\"node\"],\
\"trace_function_info_fields\":[\"function_id\",\"name\",\"script_name\",\"script_id\",\"line\",\"column\"],\
\"trace_node_fields\":[\"id\",\"function_info_index\",\"count\",\"size\",\"children\"],\
\"sample_fields\":[\"timestamp_us\",\"last_assigned_id\"],\
\"location_fields\":[\"object_index\",\"script_id\",\"line\",\"column\"]}},\
\"node_count\":{node_count},\"edge_count\":{edge_count},\"trace_function_count\":0}},\n\"nodes\":["
    )?;
    let mut first = true;
    let mut node = |out: &mut dyn Write, ty: u32, name: usize, id: u64, size: u64, edges: usize| -> crate::Result<()> {
        let sep = if first { "" } else { "," };
        first = false;
        writeln!(out, "{sep}{ty},{name},{id},{size},{edges},0,0")
    };
    let root_name = sid("(heapdump root)");
    node(out, T_SYNTHETIC, root_name, 1, 0, 3)?;
    let g1 = sid("(thread roots)");
    node(out, T_SYNTHETIC, g1, 3, 0, threads.len())?;
    let g2 = sid("(static roots)");
    node(out, T_SYNTHETIC, g2, 5, 0, statics.len())?;
    let g3 = sid("(lost)");
    node(out, T_SYNTHETIC, g3, 7, 0, lost.len())?;
    let mut names: HashMap<heapdump_analyze::SiteId, String> = HashMap::new();
    for i in 0..n {
        let b = BlockId(i as u32);
        let name = ex.block_name(b, &mut names);
        let name = sid(&name);
        node(out, T_OBJECT, name, block_node_id(i), heap.size(b), heap.edges(b).len())?;
    }
    write!(out, "],\n\"edges\":[")?;
    let mut first = true;
    let mut edge = |out: &mut dyn Write, ty: u32, index: u64, to: usize| -> crate::Result<()> {
        let sep = if first { "" } else { "," };
        first = false;
        writeln!(out, "{sep}{ty},{index},{to}")
    };
    for (k, g) in [1usize, 2, 3].iter().enumerate() {
        edge(out, E_ELEMENT, k as u64, g * NODE_FIELDS)?;
    }
    for (list, _) in [(&threads, 0), (&statics, 1), (&lost, 2)] {
        for (k, &t) in list.iter().enumerate() {
            edge(out, E_ELEMENT, k as u64, node_of(t))?;
        }
    }
    for i in 0..n {
        for e in heap.edges(BlockId(i as u32)) {
            edge(out, E_ELEMENT, e.offset, node_of(e.target.0))?;
        }
    }
    write!(out, "],\n\"trace_function_infos\":[],\"trace_tree\":[],\"samples\":[],\"locations\":[],\n\"strings\":[")?;
    for (i, s) in strings.iter().enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        serde_json::to_writer(&mut *out, s)?;
        out.write_all(b"\n")?;
    }
    out.write_all(b"]}\n")?;
    Ok(())
}
