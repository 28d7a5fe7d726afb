//! Grouping blocks by site, size class or type; comparing two dumps.

use crate::heap::{Heap, SiteId};
use crate::symbols::Symbolizer;
use crate::types::Types;
use crate::{BlockId, DumpFile};
use serde::Serialize;
use std::collections::HashMap;

/// What `top` groups by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupBy {
    /// Allocation site (first frame outside the allocator machinery).
    Site,
    /// Size class (powers of two).
    Size,
    /// Allocated type, where the site's frames name it.
    Type,
}

/// One row of `top`. Field names are the `top --json` keys.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Row {
    /// The site, type or size class.
    pub key: String,
    /// Number of blocks.
    pub allocations: u64,
    /// Requested bytes (scaled by sampling weights for sampled sites).
    pub bytes: u64,
}

/// The size class of `size`: `0`, `1`, `2`, `3..4`, `5..8`, … `2^k+1..2^(k+1)`.
/// Past 2^63 (a hostile dump can claim such sizes) the last class is
/// `2^63+1..2^64-1`.
pub fn size_class(size: u64) -> String {
    if size <= 2 {
        return size.to_string();
    }
    match size.checked_next_power_of_two() {
        Some(hi) => format!("{}..{}", hi / 2 + 1, hi),
        None => format!("{}..{}", (1u64 << 63) + 1, u64::MAX),
    }
}

/// A number for each size class, distinct between classes (sizes 0 and 1
/// are two classes, though they round up to the same power of two).
fn size_class_id(size: u64) -> u64 {
    if size <= 2 {
        size
    } else {
        3 + u64::from(64 - (size - 1).leading_zeros())
    }
}

/// Every block by size class, smallest class first (a histogram).
pub fn size_histogram(heap: &Heap) -> Vec<Row> {
    let mut acc: std::collections::BTreeMap<u64, (u64, f64, f64)> = std::collections::BTreeMap::new();
    for b in heap.blocks() {
        let e = acc.entry(size_class_id(b.size)).or_insert((b.size, 0.0, 0.0));
        e.1 += heap.count_weight(&b);
        e.2 += heap.weight(&b);
    }
    let acc: Vec<(u64, f64, f64)> = acc.into_values().filter(|&(_, n, w)| n > 0.0 || w > 0.0).collect();
    let counts = crate::heap::round_keeping_sum(&acc.iter().map(|r| r.1).collect::<Vec<_>>());
    let bytes = crate::heap::round_keeping_sum(&acc.iter().map(|r| r.2).collect::<Vec<_>>());
    acc.iter().zip(counts).zip(bytes).map(|((&(size, ..), allocations), bytes)| Row { key: size_class(size), allocations, bytes }).collect()
}

/// Groups every block, largest byte count first.
pub fn top(heap: &Heap, sym: &mut Symbolizer<'_>, types: &mut Types<'_>, by: GroupBy) -> Vec<Row> {
    // Each block's key is found through a small number (its site, its size
    // class) and accumulated in a row by index: no string is hashed or
    // copied per block (10 M blocks took 18 s that way). Rows whose keys
    // print alike (two sites with one label) are merged by name after.
    let mut slot_of: HashMap<(u32, u64), usize> = HashMap::new();
    let mut by_name: HashMap<String, usize> = HashMap::new();
    let mut rows_acc: Vec<(String, (f64, f64))> = Vec::new();
    let mut slot_for_name = |name: String, rows_acc: &mut Vec<(String, (f64, f64))>| -> usize {
        if let Some(&i) = by_name.get(name.as_str()) {
            return i;
        }
        rows_acc.push((name.clone(), (0.0, 0.0)));
        by_name.insert(name, rows_acc.len() - 1);
        rows_acc.len() - 1
    };
    let mut last: Option<((u32, u64), usize)> = None;
    let mut site_type: HashMap<SiteId, Option<usize>> = HashMap::new();
    let mut unknown: Option<usize> = None;
    for (i, b) in heap.blocks().enumerate() {
        let slot = match by {
            GroupBy::Size | GroupBy::Site => {
                let k = if by == GroupBy::Size { (0, size_class_id(b.size)) } else { (b.site.0, 0) };
                match last {
                    Some((lk, ls)) if lk == k => ls,
                    _ => {
                        let s = match slot_of.get(&k) {
                            Some(&s) => s,
                            None => {
                                let name = if by == GroupBy::Size { size_class(b.size) } else { sym.site_label(b.site) };
                                let s = slot_for_name(name, &mut rows_acc);
                                slot_of.insert(k, s);
                                s
                            }
                        };
                        last = Some((k, s));
                        s
                    }
                }
            }
            // A block's type is its site's (found once a site), or when
            // that says nothing a vtable's, looked up without a string a
            // block (one made and hashed per block took a third of `top
            // --by type` at 10 M blocks).
            GroupBy::Type => {
                let by_site = match site_type.get(&b.site) {
                    Some(&t) => t,
                    None => {
                        let name = types.of_site(sym, b.site);
                        let t = (name != crate::types::UNKNOWN).then(|| slot_for_name(name, &mut rows_acc));
                        site_type.insert(b.site, t);
                        t
                    }
                };
                match by_site {
                    Some(s) => s,
                    None => match types.vtable_name(sym, heap, BlockId(i as u32)) {
                        Some(name) => slot_for_name(name.to_string(), &mut rows_acc),
                        None => *unknown.get_or_insert_with(|| slot_for_name(crate::types::UNKNOWN.to_string(), &mut rows_acc)),
                    },
                }
            }
        };
        let e = &mut rows_acc[slot].1;
        e.0 += heap.count_weight(&b);
        e.1 += heap.weight(&b);
    }
    let acc = rows_acc;
    // Unsampled blocks weigh nothing when sites are sampled (their bytes
    // are in the sampled sites' estimates): no row of zeros for them.
    let acc: Vec<(String, (f64, f64))> = acc.into_iter().filter(|(_, (n, b))| *n > 0.0 || *b > 0.0).collect();
    let counts = crate::heap::round_keeping_sum(&acc.iter().map(|r| r.1 .0).collect::<Vec<_>>());
    let bytes = crate::heap::round_keeping_sum(&acc.iter().map(|r| r.1 .1).collect::<Vec<_>>());
    let mut rows: Vec<Row> =
        acc.into_iter().zip(counts).zip(bytes).map(|(((key, _), allocations), bytes)| Row { key, allocations, bytes }).collect();
    rows.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.key.cmp(&b.key)));
    rows
}

/// One row of `retained --by site|type`. Field names are its JSON keys.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RetainedRow {
    /// The site or type.
    pub key: String,
    /// Number of blocks.
    pub blocks: u64,
    /// Their requested bytes.
    pub bytes: u64,
    /// What the group retains, each byte once (see
    /// [`crate::dominators::Dominators::retained_by_group`]).
    pub retained: u64,
}

/// Blocks grouped by site or type with what each group retains, largest
/// first.
pub fn retained_by(
    heap: &Heap,
    dom: &crate::dominators::Dominators,
    sym: &mut Symbolizer<'_>,
    types: &mut Types<'_>,
    by: GroupBy,
) -> Vec<RetainedRow> {
    let mut index: HashMap<String, u32> = HashMap::new();
    let mut names: Vec<String> = Vec::new();
    let mut by_site: HashMap<SiteId, u32> = HashMap::new();
    let mut group_of = Vec::with_capacity(heap.len());
    let mut intern = |name: String, names: &mut Vec<String>| -> u32 {
        *index.entry(name.clone()).or_insert_with(|| {
            names.push(name);
            (names.len() - 1) as u32
        })
    };
    for (i, b) in heap.blocks().enumerate() {
        let g = match by {
            GroupBy::Site => match by_site.get(&b.site) {
                Some(&g) => g,
                None => {
                    let g = intern(sym.site_label(b.site), &mut names);
                    by_site.insert(b.site, g);
                    g
                }
            },
            GroupBy::Size => intern(size_class(b.size), &mut names),
            GroupBy::Type => intern(types.of_block(sym, heap, BlockId(i as u32)), &mut names),
        };
        group_of.push(g);
    }
    let retained = dom.retained_by_group(names.len(), &group_of);
    let mut rows: Vec<RetainedRow> =
        names.into_iter().zip(retained).map(|(key, retained)| RetainedRow { key, blocks: 0, bytes: 0, retained }).collect();
    for (b, &g) in heap.blocks().zip(&group_of) {
        rows[g as usize].blocks += 1;
        rows[g as usize].bytes += b.size;
    }
    rows.sort_by(|a, b| b.retained.cmp(&a.retained).then_with(|| b.bytes.cmp(&a.bytes)).then_with(|| a.key.cmp(&b.key)));
    rows
}

/// One row of a diff. Field names are the `diff --json` keys.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct DiffRow {
    /// The site or type.
    pub key: String,
    /// Blocks in the old dump.
    pub old_allocations: u64,
    /// Bytes in the old dump.
    pub old_bytes: u64,
    /// Blocks in the new dump.
    pub new_allocations: u64,
    /// Bytes in the new dump.
    pub new_bytes: u64,
    /// new_bytes - old_bytes.
    pub delta_bytes: i64,
    /// new_allocations - old_allocations.
    pub delta_allocations: i64,
}

/// The difference between two dumps.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Diff {
    /// Growth by site, largest growth first.
    pub by_site: Vec<DiffRow>,
    /// Growth by type.
    pub by_type: Vec<DiffRow>,
    /// Blocks in NEW not in OLD (same address, size and site), when both
    /// dumps come from the same process; by site otherwise.
    pub new: crate::leaks::Count,
    /// Blocks in OLD gone from NEW.
    pub gone: crate::leaks::Count,
    /// Whether both dumps come from the same process (addresses comparable).
    pub same_process: bool,
    /// Total bytes before and after.
    pub old_bytes: u64,
    /// Total bytes after.
    pub new_bytes: u64,
}

/// Compares `old` with `new` (each with its file, for the type names that
/// full dumps' contents give).
pub fn diff(old: (&DumpFile, &Heap), new: (&DumpFile, &Heap)) -> Diff {
    let ((fo, old), (fnew, new)) = (old, new);
    let mut so = Symbolizer::new(old);
    let mut sn = Symbolizer::new(new);
    let mut to = Types::new(fo);
    let mut tn = Types::new(fnew);
    let by_site = diff_rows(&top(old, &mut so, &mut to, GroupBy::Site), &top(new, &mut sn, &mut tn, GroupBy::Site));
    let by_type = diff_rows(&top(old, &mut so, &mut to, GroupBy::Type), &top(new, &mut sn, &mut tn, GroupBy::Type));
    let same_process = old.header.pid == new.header.pid && old.exe == new.exe;
    let mut d = Diff {
        by_site,
        by_type,
        new: Default::default(),
        gone: Default::default(),
        same_process,
        old_bytes: old.total_bytes(),
        new_bytes: new.total_bytes(),
    };
    if same_process {
        // Both block lists are sorted by address: one merge.
        let (mut a, mut b) = (old.blocks().peekable(), new.blocks().peekable());
        loop {
            match (a.peek(), b.peek()) {
                (None, None) => break,
                (Some(x), Some(y)) if x.addr == y.addr && x.size == y.size && x.site == y.site => {
                    a.next();
                    b.next();
                }
                (Some(x), y) if y.is_none_or(|y| x.addr <= y.addr) => {
                    d.gone.bytes += x.size;
                    d.gone.blocks += 1;
                    a.next();
                }
                // Only the new list's block is next (the old list's, if
                // any, lies after it).
                _ => {
                    if let Some(y) = b.next() {
                        d.new.bytes += y.size;
                        d.new.blocks += 1;
                    }
                }
            }
        }
    } else {
        for r in &d.by_site {
            if r.delta_allocations > 0 {
                d.new.blocks += r.delta_allocations as u64;
                d.new.bytes += r.delta_bytes.max(0) as u64;
            } else {
                d.gone.blocks += (-r.delta_allocations) as u64;
                d.gone.bytes += (-r.delta_bytes).max(0) as u64;
            }
        }
    }
    d
}

fn diff_rows(old: &[Row], new: &[Row]) -> Vec<DiffRow> {
    let mut m: HashMap<&str, DiffRow> = HashMap::new();
    for r in old {
        let e = m.entry(&r.key).or_insert_with(|| empty_row(&r.key));
        e.old_allocations = r.allocations;
        e.old_bytes = r.bytes;
    }
    for r in new {
        let e = m.entry(&r.key).or_insert_with(|| empty_row(&r.key));
        e.new_allocations = r.allocations;
        e.new_bytes = r.bytes;
    }
    let mut rows: Vec<DiffRow> = m
        .into_values()
        .map(|mut r| {
            r.delta_bytes = r.new_bytes as i64 - r.old_bytes as i64;
            r.delta_allocations = r.new_allocations as i64 - r.old_allocations as i64;
            r
        })
        .filter(|r| r.delta_bytes != 0 || r.delta_allocations != 0)
        .collect();
    rows.sort_by(|a, b| b.delta_bytes.cmp(&a.delta_bytes).then_with(|| a.key.cmp(&b.key)));
    rows
}

fn empty_row(key: &str) -> DiffRow {
    DiffRow {
        key: key.to_string(),
        old_allocations: 0,
        old_bytes: 0,
        new_allocations: 0,
        new_bytes: 0,
        delta_bytes: 0,
        delta_allocations: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_are_powers_of_two() {
        assert_eq!(size_class(0), "0");
        assert_eq!(size_class(2), "2");
        assert_eq!(size_class(3), "3..4");
        assert_eq!(size_class(24), "17..32");
        assert_eq!(size_class(32), "17..32");
        assert_eq!(size_class(33), "33..64");
        assert_eq!(size_class(1 << 63), "4611686018427387905..9223372036854775808");
        assert_eq!(size_class((1 << 63) + 1), "9223372036854775809..18446744073709551615");
        assert_eq!(size_class(u64::MAX), "9223372036854775809..18446744073709551615");
        // Each class its own key: 0 and 1 both round up to 1.
        let ids: Vec<u64> = [0, 1, 2, 3, 4, 5, 8, 9, 1 << 63, u64::MAX].iter().map(|&s| size_class_id(s)).collect();
        assert_eq!(ids, [0, 1, 2, 5, 5, 6, 6, 7, 66, 67]);
    }
}
