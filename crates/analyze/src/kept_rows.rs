//! The root's groups kept in the cache (part `hdrows`), for the viewer's
//! tree (`/api/rows`): the virtual root of a heap that is mostly lost has
//! most blocks as children (78 M of 100 M), and grouping them by site and
//! type is a pass over all of them and the whole tree read (28 s at 100 M
//! blocks). Kept, the groups are a few numbers each (site, lost or not,
//! first member, members, retained bytes, own bytes, blocks dominated),
//! then every group's members in the children's order, one after another
//! (four bytes a child of the root): a page of a group reads the page.
//! Written once, the first time the root's groups are computed.
//!
//! Never trusted: the part is sealed and keyed as every part is
//! (`cache.rs`), each 64 KiB chunk checked when first read, and what it
//! says is checked against the tree (kept or whole) it is read with: the
//! groups in the rows' order, their members as many as the root's
//! children, their retained bytes adding up to the heap's and their
//! blocks dominated to the heap's blocks, each group's first member a
//! child of the root of the group's key (site, lost, type; no two groups
//! of one key) and no larger than its group, a group of one block that
//! block's figures, and a group of at most [`SUMS_CHECKED`] members all
//! its members read: each of its key, in order, adding up to its figures
//! (so a lone larger group's members, retained bytes and blocks follow
//! from the totals). A page's members are each checked a child of the
//! root, of the group's key, in order. A part that fails is refused (said
//! so), the kept tree with it: the rows are then computed from the whole
//! tree and the part kept again.

use crate::analysis::Analysis;
use crate::cache::CacheProblem;
use crate::cache_file::{Reader, Sealed};
use crate::explore::{Grouped, Kept, Tree};
use crate::heap::BlockId;
use crate::kept_tree::SUMS_CHECKED;
use crate::leaks::LeakKind;
use std::cmp::Reverse;
use std::ops::Range;

/// The part's name.
const ROWS: &str = "hdrows";
/// Bytes a group takes in the part.
const GROUP_BYTES: usize = 4 + 1 + 4 + 4 * 8;

/// The root's groups as kept: their figures, their members read a page at
/// a time.
pub(crate) struct KeptGroups {
    sealed: Sealed,
    pub(crate) groups: Vec<Grouped>,
    starts: Vec<usize>,
    members: Range<usize>,
}

fn bad() -> CacheProblem {
    CacheProblem::Stale("the root's groups of another tree")
}

impl KeptGroups {
    /// The `i`th of all groups' members.
    fn member(&self, i: usize) -> Kept<u32> {
        let at = self.members.start.checked_add(4 * i).filter(|&a| a + 4 <= self.members.end).ok_or_else(bad)?;
        self.sealed.check(at..at + 4)?;
        Ok(u32::from_le_bytes(self.sealed.body()[at..at + 4].try_into().map_err(|_| bad())?))
    }

    /// The members of group `k`, `n` from `offset`, largest retained
    /// first, each checked (see the module's text).
    pub(crate) fn members(&self, a: &Analysis<'_>, t: Tree<'_>, k: usize, offset: usize, n: usize) -> Kept<Vec<u32>> {
        let g = self.groups.get(k).ok_or_else(bad)?;
        let count = usize::try_from(g.count).map_err(|_| bad())?;
        // The page, and the member before it (the order holds across).
        let from = offset.min(count).saturating_sub(1);
        let to = offset.saturating_add(n).min(count);
        let ty = a.type_of_block(BlockId(g.first));
        let mut before: Option<(u64, u32)> = None;
        let mut out = Vec::with_capacity(to.saturating_sub(offset));
        for i in from..to {
            let m = self.member(self.starts[k] + i)?;
            let r = member_of(a, t, g, &ty, m)?;
            if before.is_some_and(|(br, b)| (Reverse(br), b) >= (Reverse(r), m)) {
                return Err(bad());
            }
            before = Some((r, m));
            if i >= offset {
                out.push(m);
            }
        }
        Ok(out)
    }
}

/// The retained bytes of `m`, checked a child of the root of `g`'s key
/// (its type `ty`).
fn member_of(a: &Analysis<'_>, t: Tree<'_>, g: &Grouped, ty: &str, m: u32) -> Kept<u64> {
    let heap = a.heap();
    if m as usize >= heap.len() || a.idom_in(t, BlockId(m))?.is_some() {
        return Err(bad());
    }
    let lost = matches!(a.kind_in(t, BlockId(m))?, LeakKind::DefinitelyLost | LeakKind::IndirectlyLost);
    if heap.block(BlockId(m)).site.0 != g.site || lost != g.lost || a.type_of_block(BlockId(m)) != ty {
        return Err(bad());
    }
    a.retained_in(t, BlockId(m))
}

/// How many children the root has in `t`, and the bytes it retains.
fn root_in(a: &Analysis<'_>, t: Tree<'_>) -> Kept<(usize, u64)> {
    Ok(match t {
        Tree::Whole => (a.dominated_by(None).len(), a.heap().total_bytes()),
        Tree::Kept(k) => (k.children(a.heap(), None, 0, 0)?.1, k.heap_bytes(a.heap())),
    })
}

/// The root's groups kept in `a`'s cache, checked against `t` (see the
/// module's text): `Ok(None)` when none are kept.
pub(crate) fn open(a: &Analysis<'_>, t: Tree<'_>) -> Kept<Option<KeptGroups>> {
    let Some(c) = a.cache_file() else { return Ok(None) };
    let Some(sealed) = Sealed::open_random(&c.part_path(ROWS))? else { return Ok(None) };
    let heap = a.heap();
    let n = heap.len();
    let (groups, members) = {
        let mut r = Reader::body(&sealed);
        crate::cache::read_part_header(&mut r, c, ROWS)?;
        let ng = r.len(GROUP_BYTES)?;
        let mut groups = Vec::with_capacity(ng);
        for _ in 0..ng {
            let site = r.u32()?;
            let lost = match r.u8()? {
                0 => false,
                1 => true,
                _ => return Err(bad()),
            };
            let first = r.u32()?;
            let (count, retained, bytes, dominated) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
            groups.push(Grouped { site, lost, first, count, retained, bytes, dominated, members: Vec::new() });
        }
        let members = r.skip_slab::<u32>()?;
        r.end()?;
        (groups, members)
    };
    let (children, heap_bytes) = root_in(a, t)?;
    if members.len() != 4 * children {
        return Err(bad());
    }
    let mut starts = Vec::with_capacity(groups.len());
    let (mut at, mut retained, mut dominated) = (0u64, 0u64, 0u64);
    for (i, g) in groups.iter().enumerate() {
        let ordered = i == 0 || (Reverse(groups[i - 1].retained), groups[i - 1].first) < (Reverse(g.retained), g.first);
        if !ordered || g.count == 0 || g.dominated < g.count || g.retained < g.bytes {
            return Err(bad());
        }
        starts.push(usize::try_from(at).map_err(|_| bad())?);
        at = at.checked_add(g.count).ok_or_else(bad)?;
        retained = retained.checked_add(g.retained).ok_or_else(bad)?;
        dominated = dominated.checked_add(g.dominated).ok_or_else(bad)?;
    }
    if at != children as u64 || retained != heap_bytes || dominated != n as u64 {
        return Err(bad());
    }
    let kept = KeptGroups { sealed, groups, starts, members };
    let mut keys = std::collections::HashSet::with_capacity(kept.groups.len());
    for (k, g) in kept.groups.iter().enumerate() {
        let first = BlockId(g.first);
        let ty = a.type_of_block(first);
        if kept.member(kept.starts[k])? != g.first || member_of(a, t, g, &ty, g.first)? > g.retained {
            return Err(bad());
        }
        if g.count == 1
            && (g.retained != a.retained_in(t, first)?
                || g.dominated != u64::from(a.dominated_in(t, first)?)
                || g.bytes != heap.block(first).size)
        {
            return Err(bad());
        }
        if g.count > 1 && g.count <= SUMS_CHECKED as u64 {
            let (mut r, mut d, mut b) = (0u64, 0u64, 0u64);
            for m in kept.members(a, t, k, 0, SUMS_CHECKED)? {
                r = r.wrapping_add(a.retained_in(t, BlockId(m))?);
                d += u64::from(a.dominated_in(t, BlockId(m))?);
                b = b.wrapping_add(heap.block(BlockId(m)).size);
            }
            if (r, d, b) != (g.retained, g.dominated, g.bytes) {
                return Err(bad());
            }
        }
        if !keys.insert((g.site, g.lost, ty)) {
            return Err(bad());
        }
    }
    Ok(Some(kept))
}

/// Forgets the root's groups kept (refused where a page read them: the
/// groups are computed again and kept anew, not found good by the checks
/// at opening, which read no large group's members).
pub(crate) fn forget(a: &Analysis<'_>) {
    if let Some(c) = a.cache_file() {
        let _ = std::fs::remove_file(c.part_path(ROWS));
    }
}

/// Keeps the root's groups, `groups` (computed from the whole tree, their
/// members listed), in the cache unless a good copy is kept already.
pub(crate) fn keep(a: &Analysis<'_>, groups: &[Grouped]) {
    if a.cache_file().is_none() || matches!(open(a, Tree::Whole), Ok(Some(_))) {
        return;
    }
    let members: usize = groups.iter().map(|g| g.members.len()).sum();
    a.keep_part(ROWS, groups.len() * GROUP_BYTES + 4 * members + 16, |o| {
        o.u64(groups.len() as u64);
        for g in groups {
            o.u32(g.site);
            o.u8(u8::from(g.lost));
            o.u32(g.first);
            for v in [g.count, g.retained, g.bytes, g.dominated] {
                o.u64(v);
            }
        }
        let parts: Vec<&[u32]> = groups.iter().map(|g| g.members.as_slice()).collect();
        o.slab_of_parts(&parts);
    });
}
