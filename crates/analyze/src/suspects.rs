//! What is wrong, first: the few structures a person should look at, as
//! Eclipse MAT's Leak Suspects report puts them on its first page. One
//! computation for every view that opens on them (the viewer's first
//! screen, `heapdump report`, `heapdump summary`'s last lines):
//!
//! - what retains the most: each child of the dominator tree's root (a
//!   block, a group of siblings of one site and type, a list) holding at
//!   least [`RETAINS_SHARE`] percent of the heap, followed down while one
//!   row below holds most of it (MAT's accumulation point: the table
//!   rather than the struct holding it);
//! - the lost groups: the largest definitely (or possibly) lost groups;
//! - what grew since a baseline: the sites adding the most bytes; or,
//!   across a series of dumps, the structure growing most steadily.
//!
//! Each comes with the block to open, its path from a root and the sites
//! adding the most bytes under it.

use crate::address::Address;
use crate::analysis::{Analysis, PathStep};
use crate::explore::{RowKind, RowOrder, RowsOf, TreeRow};
use crate::group::Diff;
use crate::growth::Growth;
use crate::heap::{BlockId, SiteId};
use crate::leaks::LeakKind;
use serde::Serialize;
use std::collections::HashMap;

/// A suspect retains at least this share of the heap, in percent.
pub const RETAINS_SHARE: f64 = 10.0;
/// Below a suspect, a row holding at least this share of it is where the
/// bytes accumulate, in percent.
const ACCUMULATES: f64 = 80.0;
/// A lost group after the largest is a suspect from this share of the
/// heap, in percent.
const LOST_SHARE: f64 = 0.1;
/// The most suspects of each kind.
const EACH: usize = 3;
/// The most blocks walked below one suspect for its sites.
const WALK_MAX: usize = 2_000_000;

/// Why a structure is suspected.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SuspectKind {
    /// It retains a large share of the heap.
    Retains,
    /// Nothing points to it: lost.
    Lost,
    /// It grew since the baseline.
    Grew,
}

/// A site adding bytes under a suspect.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SuspectSite {
    /// The site, as `top` names it.
    pub site: String,
    /// Blocks from it.
    pub blocks: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// One suspect. Field names are JSON keys (`summary --json`'s
/// `suspects`, the viewer's `/api/suspects`).
#[derive(Clone, Debug, Serialize)]
pub struct Suspect {
    /// Why it is suspected.
    pub kind: SuspectKind,
    /// What it is, in words: `list of 40000 cached_response nodes`, `400 ×
    /// entry`, `8 blocks from handle_bad_request`.
    pub what: String,
    /// What holds it: a root (`static cache_head`), the structure it is
    /// in, or nothing (lost).
    pub held_by: Option<String>,
    /// The bytes it retains (retains), loses with what it holds (lost),
    /// or gained (grew).
    pub bytes: u64,
    /// That as a percentage of the live heap (of the growth, for grew).
    pub share: f64,
    /// The blocks it stands for.
    pub blocks: u64,
    /// The block to open first.
    pub address: Option<Address>,
    /// How that block is reached from a root.
    pub path: Vec<PathStep>,
    /// The sites adding the most bytes under it, largest first.
    pub sites: Vec<SuspectSite>,
}

impl Analysis<'_> {
    /// The suspects, the largest retainers first, then the lost groups,
    /// then (given the diff against a baseline) what grew most.
    pub fn suspects(&self, diff: Option<&Diff>) -> Vec<Suspect> {
        let total = self.heap().total_bytes().max(1);
        let mut out = Vec::new();
        out.extend(self.retaining(total));
        out.extend(self.lost(total));
        if let Some(d) = diff {
            out.extend(self.grown(d));
        }
        out
    }

    /// The structure that grows most steadily across a series of dumps
    /// (`growth`'s first row; this analysis is of the newest dump), as a
    /// suspect of kind `grew`: the bytes it gained from the first dump to
    /// the last, as a share of what the whole heap gained (at most 100),
    /// its head to open and the sites adding to it.
    pub fn grows(&self, g: &Growth) -> Option<Suspect> {
        let r = g.rows.first()?;
        let (first, last) = (r.bytes.first().copied().unwrap_or(0), r.bytes.last().copied().unwrap_or(0));
        let net = last.saturating_sub(first);
        let heap_net = g.live.last().copied().unwrap_or(0).saturating_sub(g.live.first().copied().unwrap_or(0));
        let blocks = r.blocks.last().copied().unwrap_or(0).saturating_sub(r.blocks.first().copied().unwrap_or(0));
        Some(Suspect {
            kind: SuspectKind::Grew,
            what: format!("{}, growing at {} of {} steps over {} dumps", r.key, r.steps_grown, r.steps, r.bytes.len()),
            held_by: (!r.root.is_empty()).then(|| r.root.clone()),
            bytes: net,
            share: net as f64 * 100.0 / heap_net.max(net).max(1) as f64,
            blocks,
            address: r.path.last().map(|s| s.to),
            path: r.path.clone(),
            sites: r
                .sites
                .iter()
                .take(EACH)
                .map(|s| SuspectSite { site: s.site.clone(), blocks: s.blocks.max(0) as u64, bytes: s.bytes.max(0) as u64 })
                .collect(),
        })
    }

    fn retaining(&self, total: u64) -> Vec<Suspect> {
        let share = |b: u64| b as f64 * 100.0 / total as f64;
        let Ok(top) = self.tree_rows(RowsOf::Children(None), RowOrder::Retained, 0, EACH) else { return Vec::new() };
        let mut out = Vec::new();
        for row in top.rows.into_iter().filter(|r| share(r.retained) >= RETAINS_SHARE) {
            let held_by = row.held_by.clone();
            let (bytes, blocks) = (row.retained, row.dominated);
            // Down to where the bytes accumulate.
            let top_name = row.name.clone();
            let mut at = row;
            for _ in 0..16 {
                if at.kind != RowKind::Node || at.children == 0 {
                    break;
                }
                let Ok(below) = self.tree_rows(RowsOf::Children(Some(at.address.0)), RowOrder::Retained, 0, 1) else { break };
                match below.rows.into_iter().next() {
                    Some(r) if r.retained as f64 * 100.0 >= ACCUMULATES * at.retained as f64 => at = r,
                    _ => break,
                }
            }
            // A single block says what it holds.
            let what = match at.kind {
                RowKind::Node if at.dominated > 1 => {
                    format!("{}: one block holding {} more", at.name, crate::chains::thousands(at.dominated - 1))
                }
                _ => at.name.clone(),
            };
            // Said with what it is in, when it lies below the top row.
            let what = if at.name == top_name { what } else { format!("{what}, in {top_name}") };
            let path = self.path(at.address.0).map(|p| p.steps).unwrap_or_default();
            out.push(Suspect {
                kind: SuspectKind::Retains,
                what,
                held_by,
                bytes,
                share: share(bytes),
                blocks,
                address: Some(at.address),
                path,
                sites: self.sites_under(&at),
            });
        }
        out
    }

    fn lost(&self, total: u64) -> Vec<Suspect> {
        let report = self.leak_report_kept();
        report
            .groups
            .into_iter()
            .take(EACH)
            .enumerate()
            // The largest always; the next ones when they are more than crumbs.
            .filter(|(i, g)| *i == 0 || (g.bytes + g.indirect_bytes) as f64 * 100.0 >= LOST_SHARE * total as f64)
            .map(|(_, g)| g)
            .map(|g| {
                let bytes = g.bytes + g.indirect_bytes;
                let kind = if g.kind == LeakKind::PossiblyLost { "possibly lost" } else { "lost" };
                let each = if g.blocks > 0 && g.bytes % g.blocks == 0 { format!(" of {} B", g.bytes / g.blocks) } else { String::new() };
                let with = if g.indirect_blocks > 0 { format!(" (with {} blocks they hold)", g.indirect_blocks) } else { String::new() };
                let name = if g.ty != crate::types::UNKNOWN { format!("{} ", g.ty) } else { String::new() };
                let mut sites = vec![SuspectSite { site: g.site.clone(), blocks: g.blocks, bytes: g.bytes }];
                if let Some(b) = self.heap().find_start(g.example.0) {
                    // Every lost block of the group, and what each holds.
                    let (site, kinds) = (self.heap().block(b).site, &self.leaks().kind);
                    let tops: Vec<u32> = (0..self.heap().len() as u32)
                        .filter(|&i| kinds[i as usize] == g.kind && self.heap().block(BlockId(i)).site == site)
                        .collect();
                    for s in self.sites_of(&tops, true) {
                        if s.site != g.site {
                            sites.push(s);
                        }
                    }
                    sites.truncate(EACH);
                }
                Suspect {
                    kind: SuspectKind::Lost,
                    what: format!("{} {name}blocks{each} {kind}{with}, allocated in {}", g.blocks, g.stack.first().unwrap_or(&g.site)),
                    held_by: None,
                    bytes,
                    share: bytes as f64 * 100.0 / total as f64,
                    blocks: g.blocks + g.indirect_blocks,
                    address: Some(g.example),
                    path: Vec::new(),
                    sites,
                }
            })
            .collect()
    }

    fn grown(&self, d: &Diff) -> Vec<Suspect> {
        let growth: i64 = d.by_site.iter().map(|r| r.delta_bytes.max(0)).sum();
        let heap = self.heap();
        let dom = self.dominators();
        d.by_site
            .iter()
            .filter(|r| r.delta_bytes > 0 && r.delta_bytes as f64 * 100.0 >= RETAINS_SHARE * growth as f64)
            .take(EACH)
            .map(|r| {
                // The block of that site retaining the most, to open.
                let mut labels: HashMap<SiteId, bool> = HashMap::new();
                let best = heap
                    .blocks()
                    .enumerate()
                    .filter(|(_, b)| *labels.entry(b.site).or_insert_with(|| self.site_label(b.site) == r.key))
                    .max_by(|(a, _), (b, _)| dom.retained[*a].cmp(&dom.retained[*b]).then(b.cmp(a)))
                    .map(|(i, _)| BlockId(i as u32));
                let path = best.and_then(|b| self.path(heap.block(b).addr).ok()).map(|p| p.steps).unwrap_or_default();
                Suspect {
                    kind: SuspectKind::Grew,
                    what: format!("{} (+{} blocks, {} in all now)", r.key, r.delta_allocations, r.new_allocations),
                    held_by: best.map(|b| self.holder_words(b)),
                    bytes: r.delta_bytes as u64,
                    share: r.delta_bytes as f64 * 100.0 / growth.max(1) as f64,
                    blocks: r.delta_allocations.max(0) as u64,
                    address: best.map(|b| Address(heap.block(b).addr)),
                    path,
                    sites: vec![SuspectSite { site: r.key.clone(), blocks: r.new_allocations, bytes: r.new_bytes }],
                }
            })
            .collect()
    }

    /// What holds `b`: the root naming it, else the start of its path.
    fn holder_words(&self, b: BlockId) -> String {
        if let Some(n) = self.root_name(b) {
            return n;
        }
        match self.path(self.heap().block(b).addr).ok().and_then(|p| p.start) {
            Some(s) => s.to_string(),
            None => "nothing: lost".into(),
        }
    }

    /// The sites adding the most bytes below a row (its blocks and what
    /// they dominate).
    fn sites_under(&self, row: &TreeRow) -> Vec<SuspectSite> {
        let Some(b) = self.heap().find_start(row.address.0) else { return Vec::new() };
        let tops: Vec<u32> = match row.kind {
            RowKind::Group => {
                let p = self.dominators().idom(b);
                let site = self.heap().block(b).site;
                self.dominated_by(p).iter().copied().filter(|&c| self.heap().block(BlockId(c)).site == site).collect()
            }
            _ => vec![b.0],
        };
        self.sites_of(&tops, true)
    }

    /// Bytes by site of `tops` and (with `below`) what they dominate, the
    /// largest [`EACH`].
    fn sites_of(&self, tops: &[u32], below: bool) -> Vec<SuspectSite> {
        let heap = self.heap();
        let mut acc: HashMap<SiteId, (u64, u64)> = HashMap::new();
        let mut stack: Vec<u32> = tops.to_vec();
        let mut walked = 0;
        while let Some(x) = stack.pop() {
            walked += 1;
            if walked > WALK_MAX {
                break;
            }
            let blk = heap.block(BlockId(x));
            let e = acc.entry(blk.site).or_default();
            e.0 += 1;
            e.1 += blk.size;
            if below {
                stack.extend_from_slice(self.dominated_by(Some(BlockId(x))));
            }
        }
        let mut v: Vec<(SiteId, (u64, u64))> = acc.into_iter().collect();
        v.sort_by(|a, b| b.1 .1.cmp(&a.1 .1).then(a.0 .0.cmp(&b.0 .0)));
        v.into_iter().take(EACH).map(|(s, (blocks, bytes))| SuspectSite { site: self.site_label(s), blocks, bytes }).collect()
    }
}
