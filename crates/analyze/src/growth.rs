//! Growth across many dumps of one process: the structures that grow at
//! every step, or nearly, while everything stays reachable (a cache, a
//! queue, a map of sessions), which no leak check sees.
//!
//! A structure is an owner that persists across the dumps:
//! - a static root's symbol (`static cache_head`): what it holds is the
//!   dominator subtrees of the blocks it points to that nothing else
//!   holds (the virtual root's children it alone points to among the
//!   statics), so a list whose head changes at every insert is still one
//!   owner;
//! - a block found in every dump at the same address with the same site
//!   (the struct a table or a map lives in, the first node of a list that
//!   appends): what it holds is its dominator subtree.
//!
//! Each owner gets the bytes and blocks it holds in each dump. It grows
//! when it holds more in the newest dump than in the oldest, grew at half
//! the steps or more, and kept at least half of what it gained on the way
//! (a spike that came and went, or churn, gains and loses about as much
//! as it keeps). Owners are ranked by how many steps they grew at, then
//! by how much. An owner inside another one (in the newest dump's
//! dominator tree) whose growth is the outer one's (nine tenths of it or
//! more) is the same growth, said once, by the outer owner (the nodes of
//! a list each hold the rest of it): an inner owner is kept only when it
//! is a distinct part of the outer one's growth.

use crate::analysis::{Analysis, Origin, PathStep};
use crate::error::{AnalyzeError, Result};
use crate::heap::{BlockId, RootSource};
use crate::open::Dump;
use serde::Serialize;
use std::collections::{BinaryHeap, HashMap};

/// Blocks of the newest dump, largest retained first, that are looked for
/// in the older dumps as owners.
const BLOCK_OWNERS: usize = 2000;
/// Sites named per row.
const SITES: usize = 5;

/// A structure that grows. Field names are the `growth --json` keys.
#[derive(Clone, Debug, Serialize)]
pub struct GrowthRow {
    /// The structure: a static root's symbol, or its block's site and address.
    pub key: String,
    /// The root that holds it in the newest dump, named.
    pub root: String,
    /// The path from that root to the structure's head, in the newest dump.
    pub path: Vec<PathStep>,
    /// The sites whose blocks in the structure grew most, oldest to newest.
    pub sites: Vec<GrowthSite>,
    /// Bytes it holds in each dump, oldest first.
    pub bytes: Vec<u64>,
    /// Blocks it holds in each dump.
    pub blocks: Vec<u64>,
    /// Steps (from one dump to the next) at which it held more bytes.
    pub steps_grown: usize,
    /// Steps in all (dumps less one).
    pub steps: usize,
    /// Bytes gained per step, on average.
    pub per_step: i64,
    /// Bytes gained per hour, from the dumps' times (0 when they are equal).
    pub per_hour: i64,
}

/// A site adding to a structure.
#[derive(Clone, Debug, Serialize)]
pub struct GrowthSite {
    /// The site, as `top` names it.
    pub site: String,
    /// Bytes of the structure allocated there: newest less oldest.
    pub bytes: i64,
    /// Its blocks allocated there: newest less oldest.
    pub blocks: i64,
}

/// What `growth` answers.
#[derive(Clone, Debug, Serialize)]
pub struct Growth {
    /// The process.
    pub pid: u32,
    /// Its executable.
    pub exe: String,
    /// Nanoseconds from the oldest dump to the newest.
    pub span_ns: u64,
    /// Live bytes in each dump.
    pub live: Vec<u64>,
    /// The structures that grow, most steadily and most first.
    pub rows: Vec<GrowthRow>,
    /// Structures that grow, before `n` cut them.
    pub growing: usize,
}

/// Who owns what in one dump.
enum Owner {
    /// A static symbol, and the blocks it alone holds (in each dump).
    Root(String),
    /// A block at this address with this site label.
    Block(u64, String),
}

/// The structures that grow across `dumps` (two or more of one process,
/// oldest first), at most `n` of them.
pub fn growth(dumps: &[&Dump], n: usize) -> Result<Growth> {
    check_series(dumps)?;
    crate::spill::freed_tables_back();
    let mut analyses: Vec<Analysis<'_>> = dumps.iter().map(|d| d.analysis()).collect();
    let (first, last) = (dumps[0], dumps[dumps.len() - 1]);
    // The dumps' dominators one after the other, each older dump's answers
    // then moved to a file and its leak classes let go (`spill.rs`): the
    // next dump is computed beside page cache, not beside the older dumps'
    // tables in memory (issue 43's memory goal).
    let older = analyses.len() - 1;
    for a in &mut analyses[..older] {
        a.dominators();
        crate::spill::after_dominators(a);
    }
    let newest = analyses.last().expect("two or more dumps");

    // Owners and what each holds in each dump: (bytes, blocks, heads).
    let mut owners: Vec<Owner> = Vec::new();
    let mut held: Vec<Vec<(u64, u64, Vec<BlockId>)>> = Vec::new();
    let mut by_key: HashMap<String, usize> = HashMap::new();
    for (i, a) in analyses.iter().enumerate() {
        for (key, heads) in static_owners(a) {
            let k = *by_key.entry(key.clone()).or_insert_with(|| {
                owners.push(Owner::Root(key));
                held.push(vec![(0, 0, Vec::new()); dumps.len()]);
                owners.len() - 1
            });
            let d = a.dominators();
            let h = &mut held[k][i];
            for b in heads {
                h.0 += d.retained[b.index()];
                h.1 += u64::from(d.dominated[b.index()]);
                h.2.push(b);
            }
        }
    }
    // Statics missing from a dump hold nothing there; the ones in every
    // dump stay owners.
    for (addr, label, ids) in block_owners(&analyses) {
        let series = ids
            .iter()
            .zip(&analyses)
            .map(|(&b, a)| {
                let d = a.dominators();
                (d.retained[b.index()], u64::from(d.dominated[b.index()]), vec![b])
            })
            .collect();
        owners.push(Owner::Block(addr, label));
        held.push(series);
    }

    // Which grow.
    let steps = dumps.len() - 1;
    let grows = |s: &[(u64, u64, Vec<BlockId>)]| -> Option<(usize, i64)> {
        let bytes: Vec<i64> = s.iter().map(|x| x.0 as i64).collect();
        let net = bytes[steps] - bytes[0];
        let grown = bytes.windows(2).filter(|w| w[1] > w[0]).count();
        let gained: i64 = bytes.windows(2).map(|w| (w[1] - w[0]).max(0)).sum();
        (net > 0 && 2 * grown >= steps && 2 * net >= gained).then_some((grown, net))
    };
    let growing: Vec<Option<(usize, i64)>> = held.iter().map(|s| grows(s)).collect();

    // The same growth said once: walk the newest dump's dominator tree,
    // each owner's heads under it.
    let mut owner_of_block: HashMap<u32, usize> = HashMap::new();
    for (k, s) in held.iter().enumerate() {
        if growing[k].is_some() {
            for b in &s[steps].2 {
                owner_of_block.entry(b.0).or_insert(k);
            }
        }
    }
    let mut kept = vec![false; owners.len()];
    // Depth first, one frame a level: (the node, the next of its children
    // to visit, the owner it is under). Whether an owner is kept depends
    // only on the owners above it, not on the order. (Every child pushed
    // at once, the virtual root's millions on a heap mostly lost took 16
    // bytes each, twice while the stack grew.)
    const ROOT: u32 = u32::MAX;
    const NO_OWNER: u32 = u32::MAX;
    let mut stack: Vec<(u32, u32, u32)> = if owner_of_block.is_empty() { vec![] } else { vec![(ROOT, 0, NO_OWNER)] };
    while let Some(&mut (p, ref mut next, outer)) = stack.last_mut() {
        let children = newest.dominated_by((p != ROOT).then_some(BlockId(p)));
        let Some(&b) = children.get(*next as usize) else {
            stack.pop();
            continue;
        };
        *next += 1;
        let outer = (outer != NO_OWNER).then_some(outer as usize);
        let mut here = outer;
        if let Some(&k) = owner_of_block.get(&b) {
            let net = growing[k].map_or(0, |g| g.1);
            let same = outer.is_some_and(|o| {
                let outer_net = growing[o].map_or(0, |g| g.1);
                10 * net >= 9 * outer_net
            });
            if !same {
                kept[k] = true;
                here = Some(k);
            }
        }
        stack.push((b, 0, here.map_or(NO_OWNER, |k| k as u32)));
    }

    let mut order: Vec<usize> = (0..owners.len()).filter(|&k| kept[k]).collect();
    order.sort_by_key(|&k| {
        let (grown, net) = growing[k].unwrap_or_default();
        (std::cmp::Reverse(grown), std::cmp::Reverse(net), k)
    });
    let growing_count = order.len();
    let span_ns = last.heap().header.time_ns.saturating_sub(first.heap().header.time_ns);
    let rows = order
        .into_iter()
        .take(n)
        .map(|k| {
            let s = &held[k];
            let (grown, net) = growing[k].unwrap_or_default();
            let key = match &owners[k] {
                Owner::Root(name) => name.clone(),
                Owner::Block(addr, label) => format!("{label} block at {addr:#x}"),
            };
            let heads = &s[steps].2;
            // A static's structure is reached from that static (the
            // shortest path may start at a stack slot holding the same head).
            let from_static = match (&owners[k], heads.first()) {
                (Owner::Root(name), Some(&b)) => static_step(newest, name, b).map(|s| vec![s]),
                _ => None,
            };
            let path = from_static
                .or_else(|| heads.first().and_then(|b| newest.path(last.heap().block(*b).addr).ok()).map(|p| p.steps))
                .unwrap_or_default();
            let root = match &owners[k] {
                Owner::Root(name) => name.clone(),
                Owner::Block(..) => match path.first().map(|p| &p.from) {
                    Some(Origin::Root { name }) => name.clone(),
                    _ => String::new(),
                },
            };
            GrowthRow {
                key,
                root,
                path,
                sites: sites_adding(&analyses[0], &s[0].2, newest, heads),
                bytes: s.iter().map(|x| x.0).collect(),
                blocks: s.iter().map(|x| x.1).collect(),
                steps_grown: grown,
                steps,
                per_step: net / steps as i64,
                per_hour: if span_ns == 0 { 0 } else { (net as i128 * 3_600_000_000_000 / span_ns as i128) as i64 },
            }
        })
        .collect();
    Ok(Growth {
        pid: last.heap().header.pid,
        exe: last.heap().exe.clone(),
        span_ns,
        live: dumps.iter().map(|d| d.heap().total_bytes()).collect(),
        rows,
        growing: growing_count,
    })
}

/// The dumps are of one process, oldest first.
fn check_series(dumps: &[&Dump]) -> Result<()> {
    if dumps.len() < 2 {
        return Err(AnalyzeError::Series { what: "growth needs two or more dumps of one process, oldest first".into() });
    }
    let name = |d: &Dump| d.path().display().to_string();
    for w in dumps.windows(2) {
        let (a, b) = (w[0], w[1]);
        let (ha, hb) = (a.heap(), b.heap());
        if ha.header.pid != hb.header.pid || ha.exe != hb.exe {
            return Err(AnalyzeError::Series {
                what: format!(
                    "{} is of process {} ({}) and {} of process {} ({}): growth compares dumps of one process",
                    name(a),
                    ha.header.pid,
                    ha.exe,
                    name(b),
                    hb.header.pid,
                    hb.exe
                ),
            });
        }
        if hb.header.time_ns < ha.header.time_ns {
            return Err(AnalyzeError::Series { what: format!("{} was taken before {}: give the dumps oldest first", name(b), name(a)) });
        }
    }
    Ok(())
}

/// The statics of one dump, each with the blocks it alone holds among the
/// statics (children of the dominator tree's virtual root).
fn static_owners(a: &Analysis<'_>) -> Vec<(String, Vec<BlockId>)> {
    let heap = a.heap();
    let d = a.dominators();
    let mut by_target: HashMap<u32, Option<String>> = HashMap::new();
    let mut names: HashMap<u64, Option<String>> = HashMap::new();
    for r in &heap.roots {
        let RootSource::Static { address, .. } = heap.root_source(r) else { continue };
        if d.idom(r.target).is_some() {
            continue;
        }
        // One name per symbol; a word outside every symbol is named by its
        // address (stable across the dumps of one process).
        let name = names.entry(address).or_insert_with(|| Some(a.name_root(r).owner())).clone();
        by_target
            .entry(r.target.0)
            .and_modify(|held| {
                if *held != name {
                    *held = None;
                }
            })
            .or_insert(name);
    }
    let mut out: HashMap<String, Vec<BlockId>> = HashMap::new();
    for (t, name) in by_target {
        if let Some(name) = name {
            out.entry(name).or_default().push(BlockId(t));
        }
    }
    let mut out: Vec<(String, Vec<BlockId>)> = out.into_iter().collect();
    for (_, heads) in &mut out {
        heads.sort_unstable();
    }
    out.sort();
    out
}

/// The pointer from the static named `owner` to `head`, as a path's step.
fn static_step(a: &Analysis<'_>, owner: &str, head: BlockId) -> Option<PathStep> {
    let heap = a.heap();
    let r = heap
        .roots
        .iter()
        .find(|r| r.target == head && matches!(heap.root_source(r), RootSource::Static { .. }) && a.name_root(r).owner() == owner)?;
    let n = a.name_root(r);
    let b = heap.block(head);
    Some(PathStep {
        from: Origin::Root { name: n.long() },
        to: crate::Address(b.addr),
        offset: n.offset().unwrap_or(r.offset),
        interior: r.interior,
        size: b.size,
        site: a.site_label(b.site),
    })
}

/// Blocks of the newest dump that hold the most and are in every dump at
/// the same address with the same site: (address, site label, the block
/// in each dump).
fn block_owners(analyses: &[Analysis<'_>]) -> Vec<(u64, String, Vec<BlockId>)> {
    let newest = analyses.last().expect("two or more dumps");
    let (heap, d) = (newest.heap(), newest.dominators());
    // The largest retained sizes among the blocks that hold another.
    let mut top: BinaryHeap<std::cmp::Reverse<(u64, u32)>> = BinaryHeap::new();
    for (i, &r) in d.retained.iter().enumerate() {
        if d.dominated[i] < 2 {
            continue;
        }
        if top.len() < BLOCK_OWNERS {
            top.push(std::cmp::Reverse((r, i as u32)));
        } else if top.peek().is_some_and(|m| m.0 .0 < r) {
            top.pop();
            top.push(std::cmp::Reverse((r, i as u32)));
        }
    }
    let mut out = Vec::new();
    'block: for std::cmp::Reverse((_, i)) in top.into_sorted_vec() {
        let b = heap.block(BlockId(i));
        let label = newest.site_label(b.site);
        let mut ids = Vec::with_capacity(analyses.len());
        for a in &analyses[..analyses.len() - 1] {
            match a.heap().find_start(b.addr) {
                Some(o) if a.site_label(a.heap().block(o).site) == label => ids.push(o),
                _ => continue 'block,
            }
        }
        ids.push(BlockId(i));
        out.push((b.addr, label, ids));
    }
    out
}

/// The sites whose bytes in the structure grew most: its subtrees in the
/// oldest dump (`old_heads`) against the newest.
fn sites_adding<'h>(old: &Analysis<'h>, old_heads: &[BlockId], new: &Analysis<'h>, new_heads: &[BlockId]) -> Vec<GrowthSite> {
    let mut delta: HashMap<String, (i64, i64)> = HashMap::new();
    for (a, heads, sign) in [(old, old_heads, -1i64), (new, new_heads, 1)] {
        let mut by_site: HashMap<crate::heap::SiteId, (u64, u64)> = HashMap::new();
        let mut stack: Vec<BlockId> = heads.to_vec();
        while let Some(b) = stack.pop() {
            let blk = a.heap().block(b);
            let e = by_site.entry(blk.site).or_default();
            e.0 += blk.size;
            e.1 += 1;
            stack.extend(a.dominated_by(Some(b)).iter().map(|&c| BlockId(c)));
        }
        for (site, (bytes, blocks)) in by_site {
            let e = delta.entry(a.site_label(site)).or_default();
            e.0 += sign * bytes as i64;
            e.1 += sign * blocks as i64;
        }
    }
    let mut out: Vec<GrowthSite> =
        delta.into_iter().filter(|(_, b)| b.0 > 0).map(|(site, (bytes, blocks))| GrowthSite { site, bytes, blocks }).collect();
    out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.site.cmp(&b.site)));
    out.truncate(SITES);
    out
}
