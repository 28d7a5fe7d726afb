//! The leak report kept in the cache (part `hdreport`), for the viewer's
//! first page: rebuilt from the leak classes it is a pass over every block
//! (4.6 s at 100 M blocks, the classes checked first); kept, it is a few
//! numbers per lost group, named again when read (so that the names follow
//! the symbols as any other answer's do). Never trusted: the part is
//! sealed and keyed as every part is (`cache.rs`), and what it says is
//! checked against the heap: each group's example a block of the heap,
//! definitely or possibly lost groups of distinct sites, and the classes'
//! totals adding up to the heap's blocks and bytes and to the groups'
//! (every indirectly lost block is credited to its definitely lost
//! leader's group). A part that fails is refused (said so) and the
//! report rebuilt and kept again.

use crate::analysis::{sort_groups, Analysis, LeakGroup, LeakReport};
use crate::cache::CacheProblem;
use crate::cache_file::Reader;
use crate::heap::BlockId;
use crate::leaks::{Count, Heuristic, LeakKind};
use crate::symbols::Frame;
use crate::Address;

const REPORT: &str = "hdreport";

/// Most heuristics a report can name (one per kind).
const HEURISTICS: [Heuristic; 4] = [Heuristic::Stdstring, Heuristic::Length64, Heuristic::Newarray, Heuristic::Hashbrown];

/// A lost group as kept: its kind, its example block, its counts.
struct Kept {
    kind: LeakKind,
    example: u32,
    direct: Count,
    indirect: Count,
}

impl Analysis<'_> {
    /// [`Analysis::leak_report`], from the cache when it keeps it (see
    /// the module's text); else computed, and kept there. When the leak
    /// classes are to be computed, the dominators are computed first: both
    /// callers (the viewer's first page, the suspects) ask for them next,
    /// and asked for first they are computed with the leak classes at one
    /// peak of memory (the classes alone first stay beside the dominators'
    /// computation: 3.5 bytes a block more on a heap mostly lost).
    pub fn leak_report_kept(&self) -> LeakReport {
        let Some(c) = self.cache_file() else {
            self.dominators();
            return self.leak_report();
        };
        if let Some(r) = self.read_part(c, REPORT, |r, _| self.read_report(r)) {
            return r;
        }
        if !self.leaks_known() {
            self.dominators();
        }
        let report = self.leak_report();
        let heap = self.heap();
        let groups: Vec<Kept> = report
            .groups
            .iter()
            .filter_map(|g| {
                let (b, _) = heap.find(g.example.0)?;
                Some(Kept {
                    kind: g.kind,
                    example: b.0,
                    direct: Count { bytes: g.bytes, blocks: g.blocks },
                    indirect: Count { bytes: g.indirect_bytes, blocks: g.indirect_blocks },
                })
            })
            .collect();
        if groups.len() == report.groups.len() {
            let counts = [report.definitely_lost, report.indirectly_lost, report.possibly_lost, report.still_reachable];
            let via: Vec<(u8, Count)> = report
                .via_heuristic
                .iter()
                .filter_map(|(name, c)| HEURISTICS.iter().find(|h| h.as_str() == *name).map(|h| (crate::cache::heuristic_byte(*h), *c)))
                .collect();
            self.keep_part(REPORT, groups.len() * 37, |o| {
                o.u64(groups.len() as u64);
                for g in &groups {
                    o.u8(crate::cache::kind_byte(g.kind));
                    o.u32(g.example);
                    for v in [g.direct.bytes, g.direct.blocks, g.indirect.bytes, g.indirect.blocks] {
                        o.u64(v);
                    }
                }
                for c in counts {
                    o.u64(c.bytes);
                    o.u64(c.blocks);
                }
                o.u64(via.len() as u64);
                for (h, c) in &via {
                    o.u8(*h);
                    o.u64(c.bytes);
                    o.u64(c.blocks);
                }
            });
        }
        report
    }

    /// The report from its part, checked against the heap.
    fn read_report(&self, r: &mut Reader<'_>) -> Result<LeakReport, CacheProblem> {
        let heap = self.heap();
        let n = heap.len();
        let bad = || CacheProblem::Stale("a leak report of another heap");
        let count = |r: &mut Reader<'_>| -> Result<Count, CacheProblem> { Ok(Count { bytes: r.u64()?, blocks: r.u64()? }) };
        let ng = r.len(37)?;
        let mut kept = Vec::with_capacity(ng);
        let mut seen = std::collections::HashSet::with_capacity(ng);
        for _ in 0..ng {
            let kind = crate::cache::kind_of(r.u8()?).ok_or_else(bad)?;
            let example = r.u32()?;
            let direct = count(r)?;
            let indirect = count(r)?;
            if !matches!(kind, LeakKind::DefinitelyLost | LeakKind::PossiblyLost)
                || example as usize >= n
                || direct.blocks == 0
                || !seen.insert((kind, heap.blocks.site(example as usize)))
            {
                return Err(bad());
            }
            kept.push(Kept { kind, example, direct, indirect });
        }
        let mut counts = [Count::default(); 4];
        for c in &mut counts {
            *c = count(r)?;
        }
        let [definitely_lost, indirectly_lost, possibly_lost, still_reachable] = counts;
        let nh = r.len(17)?;
        let mut via = std::collections::BTreeMap::new();
        let mut via_total = Count::default();
        for _ in 0..nh {
            let h = crate::cache::heuristic_of(r.u8()?).ok_or_else(bad)?;
            let c = count(r)?;
            via_total.bytes = via_total.bytes.saturating_add(c.bytes);
            via_total.blocks = via_total.blocks.saturating_add(c.blocks);
            if c.blocks == 0 || via.insert(h.as_str(), c).is_some() {
                return Err(bad());
            }
        }
        // The classes add up to the heap, and the groups to the classes.
        let sum = |cs: &mut dyn Iterator<Item = Count>| {
            cs.fold(Count::default(), |a, c| Count { bytes: a.bytes.wrapping_add(c.bytes), blocks: a.blocks.wrapping_add(c.blocks) })
        };
        let total_bytes = heap.trailer.map_or_else(|| heap.total_bytes(), |t| t.alloc_bytes);
        let all = sum(&mut counts.iter().copied());
        let of = |k: LeakKind| sum(&mut kept.iter().filter(|g| g.kind == k).map(|g| g.direct));
        if all != (Count { bytes: total_bytes, blocks: n as u64 })
            || of(LeakKind::DefinitelyLost) != definitely_lost
            || of(LeakKind::PossiblyLost) != possibly_lost
            || sum(&mut kept.iter().map(|g| g.indirect)) != indirectly_lost
            || via_total.blocks > still_reachable.blocks
            || via_total.bytes > still_reachable.bytes
        {
            return Err(bad());
        }
        let mut groups: Vec<LeakGroup> = kept
            .iter()
            .map(|g| {
                let b = heap.block(BlockId(g.example));
                LeakGroup {
                    kind: g.kind,
                    site: self.site_label(b.site),
                    ty: self.type_of_block(BlockId(g.example)),
                    blocks: g.direct.blocks,
                    bytes: g.direct.bytes,
                    indirect_blocks: g.indirect.blocks,
                    indirect_bytes: g.indirect.bytes,
                    example: Address(b.addr),
                    stack: self.program_frames(b.site).iter().take(12).map(Frame::label).collect(),
                }
            })
            .collect();
        sort_groups(&mut groups);
        Ok(LeakReport {
            definitely_lost,
            indirectly_lost,
            possibly_lost,
            still_reachable,
            via_heuristic: via,
            threads_not_stopped: heap.threads.iter().filter(|t| t.flags & heapdump_format::raw::THREAD_NOT_STOPPED != 0).count() as u64,
            suppressed: None,
            unused_suppressions: Vec::new(),
            groups,
        })
    }
}
