//! DOT and mermaid pictures of the graph around an allocation (or around
//! the top retainers), with a size limit.

use heapdump_analyze::Analysis;
use heapdump_analyze::BlockId;
use std::collections::{HashMap, VecDeque};
use std::io::Write;

/// What to draw.
#[derive(Clone, Copy, Debug)]
pub struct GraphOptions {
    /// Centre: a block containing this address; `None` = the top retainers.
    pub address: Option<u64>,
    /// How many pointer steps to follow outward (and one step inward).
    pub depth: usize,
    /// At most this many nodes.
    pub max_nodes: usize,
}

impl Default for GraphOptions {
    fn default() -> Self {
        GraphOptions { address: None, depth: 3, max_nodes: 200 }
    }
}

struct Sub {
    nodes: Vec<u32>,
    edges: Vec<(u32, u32, u64)>,
    /// Roots drawn as nodes of their own: (what the root is, the block it
    /// points to, the offset in the root).
    roots: Vec<(String, u32, u64)>,
    centre: Vec<u32>,
    truncated: bool,
}

fn subgraph(ex: &Analysis<'_>, o: &GraphOptions) -> std::io::Result<Sub> {
    let heap = ex.heap();
    let centre: Vec<u32> = match o.address {
        Some(a) => match heap.find(a) {
            Some((b, _)) => vec![b.0],
            None => return Err(std::io::Error::new(std::io::ErrorKind::NotFound, format!("no live allocation contains {a:#x}"))),
        },
        None => ex.dominated_by(None).iter().take(5).copied().collect(),
    };
    let mut depth: HashMap<u32, usize> = HashMap::new();
    let mut q = VecDeque::new();
    for &c in &centre {
        depth.insert(c, 0);
        q.push_back(c);
    }
    let mut truncated = false;
    while let Some(b) = q.pop_front() {
        let d = depth[&b];
        if d >= o.depth {
            continue;
        }
        for e in heap.edges(BlockId(b)) {
            if !depth.contains_key(&e.target.0) {
                if depth.len() >= o.max_nodes {
                    truncated = true;
                    break;
                }
                depth.insert(e.target.0, d + 1);
                q.push_back(e.target.0);
            }
        }
    }
    // For a single centre, its retainers up to the roots: every pointer
    // to it, and each holding block's shortest path from a root.
    let mut roots = Vec::new();
    if let Some(a) = o.address {
        let (_, holders, total) = ex.holders(a, o.max_nodes).map_err(std::io::Error::other)?;
        truncated |= total > holders.len();
        for h in holders {
            let Some(hb) = h.block else {
                roots.push((h.from, centre[0], h.offset));
                continue;
            };
            let mut chain = vec![hb.0];
            for st in &h.path {
                if let Some(t) = heap.find_start(st.to.0) {
                    chain.push(t.0);
                }
            }
            if depth.len() + chain.len() > o.max_nodes {
                truncated = true;
                continue;
            }
            for b in chain {
                depth.entry(b).or_insert(1);
            }
            // The chain's start, when it is a root (not a lost block).
            if let Some(first) = h.path.first().filter(|s| s.from_root) {
                if let Some(start) = heap.find_start(first.to.0) {
                    roots.push((first.from.clone(), start.0, first.offset));
                }
            }
        }
        roots.sort();
        roots.dedup();
    }
    let mut nodes: Vec<u32> = depth.keys().copied().collect();
    nodes.sort_unstable();
    let mut edges = Vec::new();
    for &b in &nodes {
        for e in heap.edges(BlockId(b)) {
            if depth.contains_key(&e.target.0) {
                edges.push((b, e.target.0, e.offset));
            }
        }
    }
    Ok(Sub { nodes, edges, roots, centre, truncated })
}

fn label(ex: &Analysis<'_>, b: u32, names: &mut HashMap<heapdump_analyze::SiteId, String>) -> (String, &'static str) {
    let blk = ex.heap().block(BlockId(b));
    let kind = ex.leaks().kind[b as usize].as_str();
    let name = ex.block_name(BlockId(b), names);
    let retained = ex.dominators().retained[b as usize];
    (format!("{:#x}\\n{} B (retains {} B)\\n{}\\n{kind}", blk.addr, blk.size, retained, name), kind)
}

fn esc(s: &str) -> String {
    s.replace('"', "\\\"")
}

/// Writes a DOT graph.
pub fn write_dot(ex: &Analysis<'_>, o: &GraphOptions, out: &mut dyn Write) -> crate::Result<()> {
    let sub = subgraph(ex, o)?;
    let mut names = HashMap::new();
    writeln!(out, "digraph heap {{")?;
    writeln!(out, "  node [shape=box, fontname=\"monospace\", fontsize=10];")?;
    if sub.truncated {
        writeln!(out, "  label=\"truncated at {} nodes\";", o.max_nodes)?;
    }
    for &b in &sub.nodes {
        let (l, kind) = label(ex, b, &mut names);
        let color = match kind {
            "definitely lost" | "indirectly lost" => "#f4a6a6",
            "possibly lost" => "#f7d79a",
            _ => "#d8e8f8",
        };
        let pen = if sub.centre.contains(&b) { ", penwidth=3" } else { "" };
        writeln!(out, "  n{b} [label=\"{}\", style=filled, fillcolor=\"{color}\"{pen}];", esc(&l))?;
    }
    for (a, b, off) in &sub.edges {
        writeln!(out, "  n{a} -> n{b} [label=\"+{off}\"];")?;
    }
    for (i, (what, b, off)) in sub.roots.iter().enumerate() {
        writeln!(out, "  r{i} [label=\"{}\", shape=ellipse, style=filled, fillcolor=\"#e0e0e0\"];", esc(what))?;
        writeln!(out, "  r{i} -> n{b} [label=\"+{off}\"];")?;
    }
    writeln!(out, "}}")?;
    Ok(())
}

/// Writes a mermaid flowchart.
pub fn write_mermaid(ex: &Analysis<'_>, o: &GraphOptions, out: &mut dyn Write) -> crate::Result<()> {
    let sub = subgraph(ex, o)?;
    let mut names = HashMap::new();
    writeln!(out, "flowchart LR")?;
    for &b in &sub.nodes {
        let (l, kind) = label(ex, b, &mut names);
        let l = l.replace("\\n", "<br/>").replace('"', "'");
        writeln!(out, "  n{b}[\"{l}\"]")?;
        if kind.contains("lost") {
            writeln!(out, "  style n{b} fill:#f4a6a6")?;
        }
    }
    for (a, b, off) in &sub.edges {
        writeln!(out, "  n{a} -->|+{off}| n{b}")?;
    }
    for (i, (what, b, off)) in sub.roots.iter().enumerate() {
        writeln!(out, "  r{i}([\"{}\"])", what.replace('"', "'"))?;
        writeln!(out, "  r{i} -->|+{off}| n{b}")?;
    }
    if sub.truncated {
        writeln!(out, "  %% truncated at {} nodes", o.max_nodes)?;
    }
    Ok(())
}
