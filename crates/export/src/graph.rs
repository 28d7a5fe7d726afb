//! DOT and mermaid pictures of the graph around an allocation (or around
//! the top retainers), drawn to be read at their default size: a list is
//! one node ("a list of 40000 `node` nodes"), hops along a list on a path
//! one node ("39,997 hops through `node`"), and a block's many children
//! or pointers a few of them and one node per kind of the rest ("+ 9,997
//! more `entry` blocks").

use crate::html::human;
use heapdump_analyze::chains::thousands;
use heapdump_analyze::{Analysis, BlockId, Chain, Origin, PathLine, SiteId};
use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Write;

/// What to draw.
#[derive(Clone, Copy, Debug)]
pub struct GraphOptions {
    /// Centre: a block containing this address; `None` = the top retainers.
    pub address: Option<u64>,
    /// How many pointer steps to follow outward (and one step inward);
    /// around the top retainers, how many levels of what each retains
    /// (at most 2 are drawn).
    pub depth: usize,
    /// At most this many blocks drawn one by one (the rest are counted in
    /// the "+ N more" nodes).
    pub max_nodes: usize,
}

impl Default for GraphOptions {
    fn default() -> Self {
        GraphOptions { address: None, depth: 3, max_nodes: 200 }
    }
}

/// Top retainers drawn when no address is given.
const TOP: usize = 5;
/// Children (or pointers) of a block drawn one by one, by level (the rest
/// grouped).
const FAN: [usize; 3] = [4, 2, 1];
/// Kinds of the rest given a node each (then one node for all others).
const KINDS: usize = 2;

/// How a node is drawn.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Look {
    /// A block, by its leak class.
    Block(&'static str),
    /// A list, a run of hops, a group of blocks.
    Summary(&'static str),
    /// A root.
    Root,
}

struct Node {
    id: String,
    label: Vec<String>,
    look: Look,
    centre: bool,
}

struct Picture {
    nodes: Vec<Node>,
    edges: Vec<(String, String, String, bool)>,
    /// Block (and list) nodes already drawn: block -> node id.
    drawn: HashMap<u32, String>,
    truncated: bool,
    names: HashMap<SiteId, String>,
    next: usize,
}

impl Picture {
    fn new() -> Picture {
        Picture { nodes: vec![], edges: vec![], drawn: HashMap::new(), truncated: false, names: HashMap::new(), next: 0 }
    }

    fn fresh(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!("{prefix}{}", self.next - 1)
    }

    fn edge(&mut self, from: &str, to: &str, label: String, dashed: bool) {
        self.edges.push((from.to_string(), to.to_string(), label, dashed));
    }

    /// The node of block `b` (drawn once).
    fn block(&mut self, ex: &Analysis<'_>, b: u32, centre: bool) -> String {
        if let Some(id) = self.drawn.get(&b) {
            return id.clone();
        }
        let heap = ex.heap();
        let blk = heap.block(BlockId(b));
        let kind = ex.leaks().kind[b as usize].as_str();
        let name = ex.block_name(BlockId(b), &mut self.names);
        let retained = ex.dominators().retained[b as usize];
        let id = format!("n{b}");
        self.nodes.push(Node {
            id: id.clone(),
            label: vec![format!("{:#x}", blk.addr), format!("{} B (retains {} B)", blk.size, retained), name, kind.to_string()],
            look: Look::Block(kind),
            centre,
        });
        self.drawn.insert(b, id.clone());
        id
    }

    /// One node for the list `c` (drawn once, under its head).
    fn list(&mut self, ex: &Analysis<'_>, c: &Chain) -> String {
        if let Some(id) = self.drawn.get(&c.head.0) {
            return id.clone();
        }
        let s = ex.list_summary(c);
        let retained = ex.dominators().retained[c.head.index()];
        let mut label = vec![format!("a list of {} `{}` nodes", thousands(u64::from(s.nodes)), s.node)];
        match &s.payload {
            Some(p) => label.push(format!("with their {} `{p}` blocks", thousands(s.payload_named))),
            None if s.payload_blocks > 0 => label.push(format!("with {} blocks they hold", thousands(s.payload_blocks))),
            None => {}
        }
        label.push(format!("retains {}, first node {}", human(retained), s.head));
        let kind = ex.leaks().kind[c.head.index()].as_str();
        label.push(kind.to_string());
        let id = format!("n{}", c.head.0);
        self.nodes.push(Node { id: id.clone(), label, look: Look::Summary(kind), centre: false });
        self.drawn.insert(c.head.0, id.clone());
        id
    }

    /// A node standing for several blocks or hops.
    fn summary(&mut self, label: Vec<String>) -> String {
        let id = self.fresh("g");
        self.nodes.push(Node { id: id.clone(), label, look: Look::Summary("still reachable"), centre: false });
        id
    }

    fn root(&mut self, text: &str) -> String {
        if let Some(n) = self.nodes.iter().find(|n| n.look == Look::Root && n.label[0] == text) {
            return n.id.clone();
        }
        let id = self.fresh("r");
        self.nodes.push(Node { id: id.clone(), label: vec![text.to_string()], look: Look::Root, centre: false });
        id
    }

    /// `rest` (blocks not drawn one by one) as a node per kind, the
    /// largest kinds first, then one node for the others; each linked
    /// from `from`.
    fn rest(&mut self, ex: &Analysis<'_>, from: &str, rest: &[u32]) {
        if rest.is_empty() {
            return;
        }
        self.truncated = true;
        let d = ex.dominators();
        let mut kinds: Vec<(String, u64, u64, u64)> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        for &b in rest {
            let name = ex.block_name(BlockId(b), &mut self.names);
            let i = *index.entry(name.clone()).or_insert_with(|| {
                kinds.push((name, 0, 0, 0));
                kinds.len() - 1
            });
            let k = &mut kinds[i];
            k.1 += 1;
            k.2 += ex.heap().size(BlockId(b));
            k.3 += d.retained[b as usize];
        }
        kinds.sort_by(|a, b| b.3.cmp(&a.3).then_with(|| a.0.cmp(&b.0)));
        let others = kinds.split_off(kinds.len().min(KINDS));
        for (name, n, bytes, retained) in kinds {
            let blocks = if n == 1 { "block" } else { "blocks" };
            let id = self.summary(vec![
                format!("+ {} more `{name}` {blocks}", thousands(n)),
                format!("{}, retaining {}", human(bytes), human(retained)),
            ]);
            self.edge(from, &id, String::new(), true);
        }
        if !others.is_empty() {
            let (n, retained) = others.iter().fold((0, 0), |a, k| (a.0 + k.1, a.1 + k.3));
            let id = self.summary(vec![format!("+ {} other blocks", thousands(n)), format!("retaining {}", human(retained))]);
            self.edge(from, &id, String::new(), true);
        }
    }
}

/// The offset of `from`'s pointer to `to`, a start pointer first.
fn pointer(ex: &Analysis<'_>, from: u32, to: u32) -> Option<u64> {
    let mut edges = ex.heap().edges(BlockId(from)).filter(|e| e.target.0 == to);
    let first = edges.next()?;
    Some(if first.interior { edges.find(|e| !e.interior).unwrap_or(first).offset } else { first.offset })
}

/// The list from `b` on, drawn as one node (as `retained` makes it one
/// row).
fn list_at(ex: &Analysis<'_>, b: u32) -> Option<Chain> {
    ex.list_from(BlockId(b))
}

/// The top retainers, each held by its root, and what each retains, a
/// level or two down.
fn top(ex: &Analysis<'_>, o: &GraphOptions, p: &mut Picture) {
    let levels = o.depth.clamp(1, 2);
    let mut budget = o.max_nodes;
    for r in ex.retainers(TOP) {
        let Some(b) = ex.heap().find_start(r.address.0) else { continue };
        let list = list_at(ex, b.0);
        let id = match &list {
            Some(c) => p.list(ex, c),
            None => p.block(ex, b.0, true),
        };
        let holder = p.root(&ex.list_holder(b));
        p.edge(&holder, &id, String::new(), false);
        if list.is_none() {
            retained_below(ex, b.0, &id, 1, levels, &mut budget, p);
        }
    }
}

/// What `b` retains: its largest children one by one, the rest grouped.
fn retained_below(ex: &Analysis<'_>, b: u32, id: &str, level: usize, levels: usize, budget: &mut usize, p: &mut Picture) {
    let children = ex.dominated_by(Some(BlockId(b)));
    let fan = FAN[(level - 1).min(FAN.len() - 1)].min(*budget);
    let (shown, rest) = children.split_at(children.len().min(fan));
    for &c in shown {
        *budget = budget.saturating_sub(1);
        let list = list_at(ex, c);
        let cid = match &list {
            Some(l) => p.list(ex, l),
            None => p.block(ex, c, false),
        };
        match pointer(ex, b, c) {
            Some(off) => p.edge(id, &cid, format!("+{off}"), false),
            None => p.edge(id, &cid, "retains".into(), true),
        }
        if list.is_none() && level < levels {
            retained_below(ex, c, &cid, level + 1, levels, budget, p);
        }
    }
    p.rest(ex, id, rest);
}

/// The block holding `addr`, what it points to (`depth` steps out), and
/// its holders, each with its path from a root.
fn around(ex: &Analysis<'_>, addr: u64, o: &GraphOptions, p: &mut Picture) -> std::io::Result<()> {
    let heap = ex.heap();
    let Some((centre, _)) = heap.find(addr) else {
        return Err(std::io::Error::new(std::io::ErrorKind::NotFound, format!("no live allocation contains {addr:#x}")));
    };
    let cid = p.block(ex, centre.0, true);
    // Outward, breadth-first: a list met on the way is one node.
    let mut budget = o.max_nodes;
    let mut seen: HashSet<u32> = HashSet::from([centre.0]);
    let mut q = VecDeque::from([(centre.0, cid.clone(), 0usize)]);
    while let Some((b, id, depth)) = q.pop_front() {
        if depth >= o.depth {
            continue;
        }
        let mut targets: Vec<(u32, u64)> = Vec::new();
        for e in heap.edges(BlockId(b)) {
            if !targets.iter().any(|t| t.0 == e.target.0) {
                targets.push((e.target.0, e.offset));
            }
        }
        let fan = FAN[depth.min(FAN.len() - 1)].max(1).min(budget);
        let (shown, rest) = targets.split_at(targets.len().min(fan));
        for &(t, off) in shown {
            if let Some(tid) = p.drawn.get(&t).cloned() {
                p.edge(&id, &tid, format!("+{off}"), false);
                continue;
            }
            budget = budget.saturating_sub(1);
            match list_at(ex, t).filter(|_| t != centre.0) {
                Some(c) => {
                    let lid = p.list(ex, &c);
                    p.edge(&id, &lid, format!("+{off}"), false);
                }
                None => {
                    let tid = p.block(ex, t, false);
                    p.edge(&id, &tid, format!("+{off}"), false);
                    if seen.insert(t) {
                        q.push_back((t, tid, depth + 1));
                    }
                }
            }
        }
        let rest: Vec<u32> = rest.iter().map(|t| t.0).collect();
        p.rest(ex, &id, &rest);
    }
    // Inward: a few holders, each with its path from a root, hops along a
    // list one node.
    let (_, holders, total) = ex.holders(addr, FAN[0]).map_err(std::io::Error::other)?;
    if total > holders.len() {
        let more = p.summary(vec![format!("+ {} more holders", thousands((total - holders.len()) as u64)), "path --all lists them".into()]);
        p.edge(&more, &cid, String::new(), true);
        p.truncated = true;
    }
    for h in holders {
        if let Origin::Root { name } = &h.from {
            let r = p.root(name);
            p.edge(&r, &cid, format!("+{}", h.offset), false);
            continue;
        }
        let Some(hb) = h.block else { continue };
        let hid = p.block(ex, hb.0, false);
        p.edge(&hid, &cid, format!("+{}", h.offset), false);
        // The holder's path, from its start to the holder.
        let mut prev: Option<String> = None;
        for line in ex.path_lines(&h.path) {
            match line {
                PathLine::Step(st) => {
                    let Some(to) = heap.find_start(st.to.0) else { break };
                    let tid = p.block(ex, to.0, false);
                    let from = match prev.take() {
                        Some(f) => f,
                        // The path's start: a root, or the lost block
                        // heading the structure, drawn as a root.
                        None => match &st.from {
                            Origin::Root { name } => p.root(name),
                            lost => p.root(&lost.to_string()),
                        },
                    };
                    if !p.edges.iter().any(|e| e.0 == from && e.1 == tid) {
                        p.edge(&from, &tid, format!("+{}", st.offset), false);
                    }
                    prev = Some(tid);
                }
                PathLine::Hops { hops, through, offset, .. } => {
                    let gid = p.summary(vec![
                        format!("… {} hops through `{through}`", thousands(hops as u64)),
                        format!("the pointer at +{offset}"),
                    ]);
                    if let Some(f) = prev.take() {
                        p.edge(&f, &gid, format!("+{offset}"), false);
                    }
                    prev = Some(gid);
                }
            }
        }
    }
    Ok(())
}

fn picture(ex: &Analysis<'_>, o: &GraphOptions) -> std::io::Result<Picture> {
    let mut p = Picture::new();
    match o.address {
        Some(a) => around(ex, a, o, &mut p)?,
        None => top(ex, o, &mut p),
    }
    Ok(p)
}

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// Writes a DOT graph.
pub fn write_dot(ex: &Analysis<'_>, o: &GraphOptions, out: &mut dyn Write) -> crate::Result<()> {
    let p = picture(ex, o)?;
    writeln!(out, "digraph heap {{")?;
    writeln!(out, "  rankdir=LR;")?;
    writeln!(out, "  node [shape=box, fontname=\"monospace\", fontsize=10];")?;
    if p.truncated {
        writeln!(out, "  label=\"the rest of each fan counted in its '+ N more' nodes\";")?;
    }
    for n in &p.nodes {
        let label = n.label.iter().map(|l| esc(l)).collect::<Vec<_>>().join("\\n");
        let pen = if n.centre { ", penwidth=3" } else { "" };
        match n.look {
            Look::Root => writeln!(out, "  {} [label=\"{label}\", shape=ellipse, style=filled, fillcolor=\"#e0e0e0\"];", n.id)?,
            Look::Block(kind) | Look::Summary(kind) => {
                let color = match kind {
                    "definitely lost" | "indirectly lost" => "#f4a6a6",
                    "possibly lost" => "#f7d79a",
                    _ => "#d8e8f8",
                };
                let style = if matches!(n.look, Look::Summary(_)) { "\"filled,rounded\"" } else { "filled" };
                writeln!(out, "  {} [label=\"{label}\", style={style}, fillcolor=\"{color}\"{pen}];", n.id)?;
            }
        }
    }
    for (a, b, label, dashed) in &p.edges {
        let mut attrs = Vec::new();
        if !label.is_empty() {
            attrs.push(format!("label=\"{}\"", esc(label)));
        }
        if *dashed {
            attrs.push("style=dashed".to_string());
        }
        if attrs.is_empty() {
            writeln!(out, "  {a} -> {b};")?;
        } else {
            writeln!(out, "  {a} -> {b} [{}];", attrs.join(", "))?;
        }
    }
    writeln!(out, "}}")?;
    Ok(())
}

/// Writes a mermaid flowchart.
pub fn write_mermaid(ex: &Analysis<'_>, o: &GraphOptions, out: &mut dyn Write) -> crate::Result<()> {
    {
        let p = picture(ex, o)?;
        writeln!(out, "flowchart LR")?;
        for n in &p.nodes {
            let label = n.label.iter().map(|l| l.replace('"', "'")).collect::<Vec<_>>().join("<br/>");
            match n.look {
                Look::Root => writeln!(out, "  {}([\"{label}\"])", n.id)?,
                Look::Block(kind) | Look::Summary(kind) => {
                    if matches!(n.look, Look::Summary(_)) {
                        writeln!(out, "  {}(\"{label}\")", n.id)?;
                    } else {
                        writeln!(out, "  {}[\"{label}\"]", n.id)?;
                    }
                    if kind.contains("lost") {
                        writeln!(out, "  style {} fill:#f4a6a6", n.id)?;
                    }
                }
            }
        }
        for (a, b, label, dashed) in &p.edges {
            let arrow = if *dashed { "-.->" } else { "-->" };
            if label.is_empty() {
                writeln!(out, "  {a} {arrow} {b}")?;
            } else {
                writeln!(out, "  {a} {arrow}|{}| {b}", label.replace('"', "'"))?;
            }
        }
        if p.truncated {
            writeln!(out, "  %% the rest of each fan counted in its '+ N more' nodes")?;
        }
        Ok(())
    }
}
