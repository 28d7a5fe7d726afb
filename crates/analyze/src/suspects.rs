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
use crate::analysis::{Analysis, LeakGroup, PathStep};
use crate::cache_file::CacheProblem;
use crate::explore::{too_many_children, Kept, RowKind, RowOrder, RowsOf, Tree, TreeRow};
use crate::group::Diff;
use crate::growth::Growth;
use crate::heap::{BlockId, SiteId};
use crate::kept_tree::KeptTree;
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
/// The root's children read from the kept tree at a time, for a group's
/// blocks (from the last).
const PAGE: usize = 1 << 12;
/// Blocks' leak classes read from the kept tree at a time (a chunk of
/// the seal's).
const SCAN: usize = 1 << 16;
/// From this many blocks walked whole, the walk is shared by two threads.
const SHARED: usize = 1 << 14;

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
        self.suspects_walking(diff, WALK_MAX)
    }

    /// [`Analysis::suspects`], at most `walk` blocks walked below each for
    /// its sites (the tests' small heaps stop their walks part way, as a
    /// heap of millions of blocks does).
    #[doc(hidden)]
    pub fn suspects_walking(&self, diff: Option<&Diff>, walk: usize) -> Vec<Suspect> {
        // The trailer's bytes, when it counts these blocks: the reader
        // checked them against the records (a kept graph, against its
        // blocks), and a pass over 10^8 blocks is 0.1 s.
        let heap = self.heap();
        let total =
            heap.trailer.filter(|t| t.allocations == heap.len() as u64).map_or_else(|| heap.total_bytes(), |t| t.alloc_bytes).max(1);
        let mut out = Vec::new();
        out.extend(self.retaining(total, walk));
        out.extend(self.lost(total, walk));
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

    fn retaining(&self, total: u64, walk: usize) -> Vec<Suspect> {
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
                sites: self.sites_under(&at, walk),
            });
        }
        out
    }

    fn lost(&self, total: u64, walk: usize) -> Vec<Suspect> {
        let report = self.leak_report_kept();
        let groups: Vec<LeakGroup> = report
            .groups
            .into_iter()
            .take(EACH)
            .enumerate()
            // The largest always; the next ones when they are more than crumbs.
            .filter(|(i, g)| *i == 0 || (g.bytes + g.indirect_bytes) as f64 * 100.0 >= LOST_SHARE * total as f64)
            .map(|(_, g)| g)
            .collect();
        // Each group's blocks: those of its kind from its example's site.
        let heap = self.heap();
        let keys: Vec<Option<LostKey>> = groups
            .iter()
            .map(|g| {
                heap.find_start(g.example.0).map(|b| LostKey { kind: g.kind, site: heap.block(b).site, blocks: g.blocks, example: b.0 })
            })
            .collect();
        let below = self.in_tree(|t| self.lost_sites_in(t, &keys, walk)).unwrap_or_else(|| vec![None; keys.len()]);
        groups
            .into_iter()
            .zip(below)
            .map(|(g, below)| {
                let bytes = g.bytes + g.indirect_bytes;
                let kind = if g.kind == LeakKind::PossiblyLost { "possibly lost" } else { "lost" };
                let each = if g.blocks > 0 && g.bytes % g.blocks == 0 { format!(" of {} B", g.bytes / g.blocks) } else { String::new() };
                let with = if g.indirect_blocks > 0 { format!(" (with {} blocks they hold)", g.indirect_blocks) } else { String::new() };
                let name = if g.ty != crate::types::UNKNOWN { format!("{} ", g.ty) } else { String::new() };
                let mut sites = vec![SuspectSite { site: g.site.clone(), blocks: g.blocks, bytes: g.bytes }];
                if let Some(below) = below {
                    // Every lost block of the group, and what each holds.
                    sites.extend(below.into_iter().filter(|s| s.site != g.site));
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

    /// `f` over the tree kept in the cache while it is good (the whole
    /// classes and tree never read: at 100 M blocks that is seconds), else
    /// over the whole tree; `None` only if the whole tree failed, which it
    /// never does.
    fn in_tree<T>(&self, f: impl Fn(Tree<'_>) -> Kept<T>) -> Option<T> {
        if let Some(k) = self.kept_tree() {
            match f(Tree::Kept(k)) {
                Ok(v) => return Some(v),
                Err(why) if too_many_children(&why) => {}
                Err(why) => self.refuse_kept_tree(why),
            }
        }
        f(Tree::Whole).ok()
    }

    /// The sites adding the most bytes below a row (its blocks and what
    /// they dominate).
    fn sites_under(&self, row: &TreeRow, walk: usize) -> Vec<SuspectSite> {
        let Some(b) = self.heap().find_start(row.address.0) else { return Vec::new() };
        self.in_tree(|t| self.sites_under_in(t, row.kind, b, walk)).unwrap_or_default()
    }

    /// [`Analysis::sites_under`] in tree `t`: a group's blocks are its
    /// parent's children of its site, walked from the last (the list's
    /// order), the root's read a page at a time from the kept tree (as
    /// many as the walk takes, each checked under the root and in order).
    fn sites_under_in(&self, t: Tree<'_>, kind: RowKind, b: BlockId, walk: usize) -> Kept<Vec<SuspectSite>> {
        let heap = self.heap();
        if kind != RowKind::Group {
            let mut one = Some(b.0);
            return self.tally(t, walk, &mut || Ok(one.take()));
        }
        let site = heap.block(b).site;
        let of_site = |c: u32| heap.block(BlockId(c)).site == site;
        match (t, self.idom_in(t, b)?) {
            (Tree::Kept(k), None) => {
                let (mut end, mut page) = (k.child_count(heap.len())?, Vec::new());
                self.tally(t, walk, &mut || loop {
                    match page.pop() {
                        Some(c) if of_site(c) => return Ok(Some(c)),
                        Some(_) => {}
                        None if end == 0 => return Ok(None),
                        None => {
                            let from = end.saturating_sub(PAGE);
                            page = k.children(heap, None, from, end - from)?.0;
                            end = from;
                        }
                    }
                })
            }
            (_, p) => {
                let kids = match p {
                    Some(p) => self.kids_in(t, p)?,
                    None => std::borrow::Cow::Borrowed(self.dominated_by(None)),
                };
                let mut tops = kids.iter().copied().filter(|&c| of_site(c)).collect::<Vec<u32>>().into_iter().rev();
                self.tally(t, walk, &mut || Ok(tops.next()))
            }
        }
    }

    /// The sites below each lost group of `keys` (its blocks and what
    /// they dominate), in tree `t`. From the kept tree, the classes are
    /// read as the cache keeps them: the walk takes a group's blocks from
    /// the last, each block passed on the way checked against its leader
    /// (see [`KeptTree::leader`]: a block said definitely lost or not
    /// against its leader, so no definitely lost block is missed or
    /// added); a possibly lost group's blocks (which have no leader, as
    /// the reachable ones) are first counted in one pass over the
    /// classes, as many as the report says, its example the first.
    fn lost_sites_in(&self, t: Tree<'_>, keys: &[Option<LostKey>], walk: usize) -> Kept<Vec<Option<Vec<SuspectSite>>>> {
        let heap = self.heap();
        let n = heap.len();
        let k = match t {
            Tree::Whole => {
                let kinds = &self.leaks().kind;
                return keys
                    .iter()
                    .map(|key| {
                        key.as_ref()
                            .map(|key| {
                                let tops: Vec<u32> = (0..n as u32)
                                    .filter(|&i| kinds[i as usize] == key.kind && heap.blocks.site(i as usize) == key.site)
                                    .collect();
                                let mut tops = tops.into_iter().rev();
                                self.tally(t, walk, &mut || Ok(tops.next()))
                            })
                            .transpose()
                    })
                    .collect();
            }
            Tree::Kept(k) => k,
        };
        let bad = || CacheProblem::Stale("leak classes of another report");
        let wanted: Vec<Option<(u8, SiteId)>> = keys
            .iter()
            .map(|key| {
                key.as_ref().filter(|key| key.kind != LeakKind::DefinitelyLost).map(|key| (crate::cache::kind_byte(key.kind), key.site))
            })
            .collect();
        let (mut count, mut first) = (vec![0u64; keys.len()], vec![None; keys.len()]);
        for from in (0..n).step_by(SCAN).take_while(|_| wanted.iter().any(Option::is_some)) {
            for (j, &kb) in k.kind_bytes(from..(from + SCAN).min(n))?.iter().enumerate() {
                for (g, w) in wanted.iter().enumerate() {
                    if w.is_some_and(|(wk, ws)| wk == kb && heap.blocks.site(from + j) == ws) {
                        count[g] += 1;
                        first[g].get_or_insert(from + j);
                    }
                }
            }
        }
        let mut out = Vec::with_capacity(keys.len());
        for (g, key) in keys.iter().enumerate() {
            let Some(key) = key else {
                out.push(None);
                continue;
            };
            if wanted[g].is_some() && (count[g] != key.blocks || first[g] != Some(key.example as usize)) {
                return Err(bad());
            }
            let (kb, mut at) = (crate::cache::kind_byte(key.kind), n);
            out.push(Some(self.tally(t, walk, &mut || {
                while at > 0 {
                    at -= 1;
                    k.leader(at)?;
                    if k.kind_bytes(at..at + 1)?[0] == kb && heap.blocks.site(at) == key.site {
                        return Ok(Some(at as u32));
                    }
                }
                Ok(None)
            })?));
        }
        Ok(out)
    }

    /// Bytes by site of the blocks `tops` gives (the last first, as a
    /// stack of them pops) and what they dominate, at most `walk` blocks
    /// walked ([`WALK_MAX`] but in tests), the largest [`EACH`].
    fn tally(&self, t: Tree<'_>, walk: usize, tops: &mut dyn FnMut() -> Kept<Option<u32>>) -> Kept<Vec<SuspectSite>> {
        let heap = self.heap();
        if let Tree::Kept(k) = t {
            return self.tally_kept(k, walk, tops);
        }
        let mut acc = Tally::new();
        let mut stack: Vec<u32> = Vec::new();
        for _ in 0..walk {
            let x = match stack.pop() {
                Some(x) => x,
                None => match tops()? {
                    Some(x) => x,
                    None => break,
                },
            };
            add(&mut acc, heap, x);
            stack.extend_from_slice(&self.kids_in(t, BlockId(x))?);
        }
        Ok(self.largest(acc))
    }

    /// The largest [`EACH`] sites of a tally, named.
    fn largest(&self, acc: Tally) -> Vec<SuspectSite> {
        let mut v: Vec<(SiteId, (u64, u64))> = acc.into_iter().collect();
        v.sort_by(|a, b| b.1 .1.cmp(&a.1 .1).then(a.0 .0.cmp(&b.0 .0)));
        v.into_iter().take(EACH).map(|(s, (blocks, bytes))| SuspectSite { site: self.site_label(s), blocks, bytes }).collect()
    }

    /// [`Analysis::tally`] from the kept tree. The walk takes the tops'
    /// subtrees whole, one after another, until it has walked
    /// `walk` blocks: from the tops' dominated counts, which tops it
    /// takes whole is known before walking, and the bytes by site of
    /// those do not depend on the order they are walked in (read a level
    /// at a time: [`KeptTree::subtrees`]). Only the last top, the one the
    /// walk stops inside, is walked in the tree's order (as a stack pops
    /// its children), as far as the walk goes.
    fn tally_kept(&self, k: &KeptTree, walk: usize, tops: &mut dyn FnMut() -> Kept<Option<u32>>) -> Kept<Vec<SuspectSite>> {
        let heap = self.heap();
        let (mut whole, mut taken, mut last) = (Vec::new(), 0usize, None);
        while taken < walk {
            let Some(t) = tops()? else { break };
            let d = k.dominated(t as usize)? as usize;
            if taken + d <= walk {
                whole.push(t);
                taken += d;
            } else {
                last = Some((t, walk - taken));
                break;
            }
        }
        // On two threads when there is enough to share (each adds up its
        // own sites; the sums do not depend on the order).
        let halves: Vec<&[u32]> = if taken >= SHARED {
            let (a, b) = whole.split_at(whole.len() / 2);
            vec![a, b]
        } else {
            vec![&whole[..]]
        };
        let parts: Vec<Kept<(u64, Tally)>> = std::thread::scope(|s| {
            let walk = |tops: &[u32]| {
                let mut acc = Tally::new();
                let n = k.subtrees(heap, tops, |x| add(&mut acc, heap, x))?;
                Ok((n, acc))
            };
            let other = halves.get(1).map(|h| s.spawn(move || walk(h)));
            let mut parts = vec![walk(halves[0])];
            parts.extend(other.map(|o| o.join().unwrap_or(Err(CacheProblem::Stale("a walk of the kept tree failed")))));
            parts
        });
        let (mut walked, mut acc) = (0u64, Tally::new());
        for p in parts {
            let (n, a) = p?;
            walked += n;
            for (site, (blocks, bytes)) in a {
                let e: &mut (u64, u64) = acc.entry(site).or_default();
                e.0 += blocks;
                e.1 += bytes;
            }
        }
        if walked != taken as u64 {
            return Err(CacheProblem::Stale("bad dominated count"));
        }
        if let Some((t, left)) = last {
            // Fewer blocks under it than its count says: a lie.
            let mut stack = vec![t];
            for _ in 0..left {
                let x = stack.pop().ok_or(CacheProblem::Stale("bad dominated count"))?;
                add(&mut acc, heap, x);
                stack.extend_from_slice(&self.kids_in(Tree::Kept(k), BlockId(x))?);
            }
        }
        Ok(self.largest(acc))
    }
}

/// Blocks and bytes by site.
type Tally = HashMap<SiteId, (u64, u64)>;

/// Block `x` counted in `acc`, by its site: a block and its bytes.
fn add(acc: &mut Tally, heap: &crate::Heap, x: u32) {
    let blk = heap.block(BlockId(x));
    let e = acc.entry(blk.site).or_default();
    e.0 += 1;
    e.1 += blk.size;
}

/// A lost group as the walk below it needs it: its kind, its site, how
/// many blocks it has, its first (example) block.
#[derive(Clone, Copy)]
struct LostKey {
    kind: LeakKind,
    site: SiteId,
    blocks: u64,
    example: u32,
}
