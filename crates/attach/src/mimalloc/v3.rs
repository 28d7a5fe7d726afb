//! mimalloc 3.x's heap (3.3.2, the Rust `mimalloc` crate's default build
//! through `libmimalloc-sys` 0.1.49): no segments. Pages of 64 KiB slices
//! are taken from arenas (or from the system, for blocks too large or too
//! aligned for them), and their metadata (`mi_page_t`) lies apart from
//! them, in their arena's `pages_meta` array, or in front of the page.
//! Every page in use is in the page map (`_mi_page_map`: a top array of
//! `mi_page_map_count` submaps of 8192 page pointers, one per slice of
//! the address space), from its blocks' first slice on: the walk reads the
//! map, each page once, and each page's blocks less its free lists (`free`,
//! `local_free`, and `xthread_free`, which its `used` counts).
//!
//! Found by its symbols (`_mi_page_map`), or by its shape: a word of the
//! program's data pointing at an anonymous mapping whose first word points
//! just past the top array, at the submap of the lowest addresses, and
//! whose first submap above that names, in its first slot in use, a page
//! whose blocks start in that slot. Every
//! page pointer must name a page whose blocks start in the slice where the
//! map starts naming it, whose map entries are as many as its blocks
//! cover, whose metadata is where its memory id says (its arena's
//! `pages_meta` at its slice, or the front of its slices), and whose blocks
//! lie inside that arena or system mapping; its counts and lists must add
//! up as in 2.x. What does not is refused where it stops.

use super::{bad, walk_list, Page, Problem};
use crate::error::Result;
use crate::glibc::{Chunk, GlibcHeap};
use crate::memory::{Map, Memory, Region};
use std::collections::{BTreeMap, HashMap};

/// `MI_ARENA_SLICE_SIZE`, `MI_PAGE_MAP_SUB_COUNT`, `MI_LARGE_PAGE_SIZE`.
const SLICE: u64 = 64 << 10;
const SUB_COUNT: u64 = 8192;
const LARGE_PAGE: u64 = 4 << 20;
/// The top array's largest size (47 bits of address space: 2^18 submaps).
const MAX_TOP: u64 = 8 << 18;
/// `sizeof(mi_page_t)` and its fields (release build).
const PAGE: u64 = 120;
const P_FREE: u64 = 8;
const P_USED: u64 = 16;
const P_CAPACITY: u64 = 18;
const P_RESERVED: u64 = 20;
const P_LOCAL_FREE: u64 = 24;
const P_THREAD_FREE: u64 = 32;
const P_BLOCK_SIZE: u64 = 40;
const P_START: u64 = 48;
/// `memid`: `mem` (an arena's pointer and slice index, or the system
/// mapping's base and size), then `memkind`.
const P_MEMID: u64 = 96;
const M_KIND: u64 = 16;
/// `mi_memkind_t`: memory from the system, from an arena.
const MEM_OS: u32 = 4;
const MEM_OS_REMAP: u32 = 6;
const MEM_ARENA: u32 = 7;
/// `mi_arena_t`: `slice_count`, `info_slices`, `pages_meta`.
const A_SLICES: u64 = 40;
const A_INFO: u64 = 48;
const A_META: u64 = 136;
/// Bounds: pages, an arena's slices.
const MAX_PAGES: usize = 1 << 24;
const MAX_ARENA_SLICES: u64 = 1 << 26;

/// The page map: its top array and its number of submaps.
#[derive(Debug, Clone, Copy)]
pub struct PageMap {
    top: u64,
    count: u64,
}

/// The page map whose pointer is at `var` (the `_mi_page_map` symbol), or,
/// without symbols, the one word of the executable's writable memory `rw`
/// with its shape; `count` is `mi_page_map_count`'s value when a symbol
/// names it.
pub fn find(mem: &dyn Memory, var: Option<u64>, count: Option<u64>, rw: &[&Map], module: &str) -> std::result::Result<PageMap, Problem> {
    let shaped = |p: u64| -> Option<PageMap> {
        if p == 0 || p % 4096 != 0 {
            return None;
        }
        let m = mem.map_of(p).filter(|m| m.anonymous() && m.read && m.write)?;
        // The submap of the lowest addresses lies right after the array.
        let sub0 = mem.u64(p).ok()?;
        let size = sub0.checked_sub(p)?;
        if !size.is_power_of_two() || !(4096..=MAX_TOP).contains(&size) || sub0 + SUB_COUNT * 8 > m.end {
            return None;
        }
        let pm = PageMap { top: p, count: size / 8 };
        // And a page map's: the first submap above the lowest one names,
        // in its first slot in use, a page whose blocks start in that slot.
        (first_page_named(mem, pm)? >> 16 == first_slot(mem, pm)?).then_some(pm)
    };
    let no = || Problem::NoHeap { module: module.to_string() };
    let found = match var {
        Some(v) => shaped(mem.u64(v).map_err(|_| no())?).ok_or_else(no)?,
        None => {
            let mut found: Vec<PageMap> = Vec::new();
            for m in rw {
                let Ok(b) = mem.bytes(m.start, (m.end - m.start).min(4 << 20)) else { continue };
                for w in b.chunks_exact(8) {
                    let p = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
                    if let Some(f) = shaped(p).filter(|f| !found.iter().any(|g| g.top == f.top)) {
                        found.push(f);
                    }
                }
            }
            match found.as_slice() {
                [] => return Err(no()),
                [one] => *one,
                many => return Err(Problem::HeapUncertain { candidates: many.iter().map(|f| f.top).collect() }),
            }
        }
    };
    // (mi_page_map_count, when named, must agree.)
    match count.map(|c| mem.u64(c)) {
        Some(Ok(c)) if c != found.count => Err(no()),
        _ => Ok(found),
    }
}

/// The first slot in use of the first submap above the lowest one: its
/// slice number, and the page it names.
fn first_named(mem: &dyn Memory, pm: PageMap) -> Option<(u64, u64)> {
    for (a, b) in mem.present(pm.top + 8, pm.top + pm.count * 8) {
        let subs = mem.bytes(a, b - a).ok()?;
        for (i, w) in subs.chunks_exact(8).enumerate() {
            let sub = u64::from_le_bytes(w.try_into().ok()?);
            if sub == 0 {
                continue;
            }
            let idx = (a - pm.top) / 8 + i as u64;
            let slots = mem.bytes(sub, SUB_COUNT * 8).ok()?;
            let (j, page) =
                slots.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8]))).enumerate().find(|&(_, p)| p != 0)?;
            return Some((idx * SUB_COUNT + j as u64, page));
        }
    }
    None
}

fn first_slot(mem: &dyn Memory, pm: PageMap) -> Option<u64> {
    first_named(mem, pm).map(|f| f.0)
}

/// The blocks' start of the first page named (`page_start`).
fn first_page_named(mem: &dyn Memory, pm: PageMap) -> Option<u64> {
    mem.u64(first_named(mem, pm)?.1.checked_add(P_START)?).ok()
}

/// What a page's memory is: an arena (its start, its end, its
/// `pages_meta`, its slices) or a system mapping (base, end).
#[derive(Clone, Copy)]
enum Memory3 {
    Arena { start: u64, end: u64, meta: u64 },
    Os { start: u64, end: u64 },
}

fn word(r: &Region, at: u64) -> u64 {
    r.u64(at).unwrap_or(0)
}

fn half(r: &Region, at: u64) -> u64 {
    r.slice(at, 2).map_or(0, |b| u64::from(u16::from_le_bytes([b[0], b[1]])))
}

/// Reads the arena at `a` (once), checked: slice-aligned, its slices
/// inside one mapping, its info slices holding its pages' metadata.
fn arena(mem: &dyn Memory, a: u64, seen: &mut HashMap<u64, Memory3>) -> Result<Memory3> {
    if let Some(m) = seen.get(&a) {
        return Ok(*m);
    }
    let ab = |why| bad(a, Problem::BadSegment { why });
    if a == 0 || a % SLICE != 0 {
        return Err(ab("a page's arena is not one"));
    }
    let r = Region::read(mem, a, a + A_META + 8).map_err(|_| ab("a page's arena is not readable"))?;
    let (slices, info, meta) = (word(&r, a + A_SLICES), word(&r, a + A_INFO), word(&r, a + A_META));
    let end = slices.checked_mul(SLICE).and_then(|l| a.checked_add(l));
    let inside = |e: u64| mem.map_of(a).is_some_and(|m| e <= m.end);
    match end {
        Some(end)
            if (1..=MAX_ARENA_SLICES).contains(&slices)
                && info >= 1
                && info < slices
                && inside(end)
                && meta >= a
                && slices.checked_mul(PAGE).is_some_and(|l| meta + l <= a + info * SLICE) =>
        {
            let m = Memory3::Arena { start: a, end, meta };
            seen.insert(a, m);
            Ok(m)
        }
        _ => Err(ab("an arena's slices or its pages' metadata are not in its memory")),
    }
}

/// Walks the heap through the page map.
pub fn walk_heap(mem: &dyn Memory, map: PageMap, allocator: &str) -> Result<GlibcHeap> {
    let mb = |at, why| bad(at, Problem::BadSegment { why });
    let top_end = map.top + map.count * 8;
    let mut heap_ranges = vec![(map.top, top_end)];
    // Every slice the map names, by page: (first slice, slices).
    let mut named: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    let mut order: Vec<u64> = Vec::new();
    for (a, b) in mem.present(map.top, top_end) {
        let subs = mem.bytes(a, b - a).map_err(|_| mb(a, "the page map is not readable"))?;
        for (i, w) in subs.chunks_exact(8).enumerate() {
            let sub = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
            if sub == 0 {
                continue;
            }
            let idx = (a - map.top) / 8 + i as u64;
            if sub % 8 != 0 || !mem.map_of(sub).is_some_and(|m| m.anonymous() && sub + SUB_COUNT * 8 <= m.end) {
                return Err(mb(a + 8 * i as u64, "a page map's submap is not anonymous memory"));
            }
            heap_ranges.push((sub, sub + SUB_COUNT * 8));
            for (x, y) in mem.present(sub, sub + SUB_COUNT * 8) {
                let slots = mem.bytes(x, y - x).map_err(|_| mb(x, "a page map's submap is not readable"))?;
                for (j, w) in slots.chunks_exact(8).enumerate() {
                    let page = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
                    if page == 0 {
                        continue;
                    }
                    let slice = (idx * SUB_COUNT + (x - sub) / 8 + j as u64) * SLICE;
                    let e = named.entry(page).or_insert_with(|| {
                        order.push(page);
                        (slice, 0)
                    });
                    // A page's slices follow one another.
                    if e.0 + e.1 * SLICE != slice {
                        return Err(mb(sub + (x - sub) + 8 * j as u64, "the page map names a page at slices apart"));
                    }
                    e.1 += 1;
                    if named.len() > MAX_PAGES {
                        return Err(mb(sub, "more pages than mimalloc makes"));
                    }
                }
            }
        }
    }
    let mut memories: HashMap<u64, Memory3> = HashMap::new();
    let mut pages: Vec<Page> = Vec::new();
    let mut regions: Vec<Region> = Vec::new();
    let mut free_blocks = 0u64;
    order.sort_unstable_by_key(|p| named[p].0);
    for &at in &order {
        let (first, nslices) = named[&at];
        let pb = |why| bad(at, Problem::BadPage { why });
        let r = Region::read(mem, at, at + PAGE).map_err(|_| pb("its metadata is not readable"))?;
        let (free, local, thread) = (word(&r, at + P_FREE), word(&r, at + P_LOCAL_FREE), word(&r, at + P_THREAD_FREE) & !1);
        let (bsize, start) = (word(&r, at + P_BLOCK_SIZE), word(&r, at + P_START));
        let (used, capacity, reserved) = (half(&r, at + P_USED), half(&r, at + P_CAPACITY), half(&r, at + P_RESERVED));
        let kind = r.slice(at + P_MEMID + M_KIND, 4).map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        let slice_of_start = start & !(SLICE - 1);
        if bsize == 0 || start == 0 || start % 8 != 0 || slice_of_start != first {
            return Err(pb("its blocks do not start where the page map starts naming it"));
        }
        // Where its metadata is: its arena's `pages_meta` at its slice, or
        // the front of its slices (its memory's start up to its blocks).
        let separated = kind == MEM_ARENA && at != slice_of_start;
        let memory = match kind {
            MEM_ARENA => arena(mem, word(&r, at + P_MEMID), &mut memories)?,
            MEM_OS..=MEM_OS_REMAP => {
                let (base, size) = (word(&r, at + P_MEMID), word(&r, at + P_MEMID + 8));
                let end = base.checked_add(size).filter(|&e| size > 0 && mem.map_of(base).is_some_and(|m| e <= m.end));
                let m = Memory3::Os { start: base, end: end.ok_or_else(|| pb("its system memory is not a mapping"))? };
                memories.insert(base, m);
                m
            }
            _ => return Err(pb("its memory is neither an arena's nor the system's")),
        };
        let (mstart, mend) = match memory {
            Memory3::Arena { start, end, .. } | Memory3::Os { start, end } => (start, end),
        };
        let slice_start = if separated { slice_of_start } else { at };
        match memory {
            Memory3::Arena { start: a, meta, .. } if separated => {
                let i = (slice_start - a) / SLICE;
                if slice_start < a || at != meta + i * PAGE {
                    return Err(pb("its metadata is not its arena's for its slice"));
                }
            }
            _ if separated => return Err(pb("its metadata is not its arena's for its slice")),
            _ => {
                if at % SLICE != 0 || at > start || at < mstart {
                    return Err(pb("its metadata is not in front of its slices"));
                }
            }
        }
        // The map names its blocks' slices (at most a large page's).
        let area = reserved.checked_mul(bsize).ok_or_else(|| pb("its capacity does not fit it"))?;
        let mapped = area.min(LARGE_PAGE - SLICE).div_ceil(SLICE) + (start - slice_start) / SLICE;
        if capacity > reserved || used > capacity || start + area > mend || mapped != nslices {
            return Err(pb("its capacity does not fit the slices the page map gives it, or its memory"));
        }
        let len = capacity * bsize;
        let blocks = Region::read(mem, start, start + len).map_err(|_| pb("its blocks are not readable"))?;
        regions.push(blocks);
        pages.push(Page { at, start, bsize, capacity, free: vec![false; capacity as usize], region: regions.len() - 1 });
        let p = pages.len() - 1;
        let n_free = walk_list(&mut pages, &regions, p, free, capacity).map_err(pb)?;
        let n_local = walk_list(&mut pages, &regions, p, local, capacity).map_err(pb)?;
        if used + n_free + n_local != capacity {
            return Err(pb("its used count and its free lists do not make its capacity"));
        }
        // Blocks other threads freed: counted in `used`.
        let n_thread = walk_list(&mut pages, &regions, p, thread, used).map_err(pb)?;
        free_blocks += n_free + n_local + n_thread;
    }
    // The arenas and system mappings are the heap's (their info slices
    // hold the pages' metadata, whose words point at blocks: no roots).
    for m in memories.values() {
        let (Memory3::Arena { start, end, .. } | Memory3::Os { start, end }) = m;
        heap_ranges.push((*start, *end));
    }
    let mut live = Vec::new();
    for p in &pages {
        for (j, _) in p.free.iter().enumerate().filter(|(_, &f)| !f) {
            live.push(Chunk { mem: p.start + j as u64 * p.bsize, usable: p.bsize });
        }
    }
    live.sort_unstable();
    heap_ranges.sort_unstable();
    Ok(GlibcHeap {
        live,
        arenas: pages.len(),
        heap_ranges,
        mmapped: Vec::new(),
        regions,
        cached_free: free_blocks,
        version: (0, 0),
        version_inferred: false,
        static_arena: None,
        warnings: Vec::new(),
        allocator: allocator.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::Fake;

    /// The top array (512 submaps, the lowest one after it), the exe's
    /// data word pointing at it, one submap, and an arena of 4 slices
    /// whose slice 1 is a page of 64-byte blocks (capacity 4, 2 used, 2
    /// on its free list).
    const TOP: u64 = 0x7f00_0000_0000;
    const DATA: u64 = 0x5500_0000_0000;
    const SUB: u64 = 0x7f00_1000_0000;
    const ARENA: u64 = 0x20_0000_0000;
    const META: u64 = ARENA + 1024;
    const PAGE_AT: u64 = META + PAGE;
    const BLOCKS: u64 = ARENA + SLICE;

    fn heap(edit: impl Fn(&mut Vec<(u64, Vec<u8>)>)) -> Fake {
        let anon = |start, end| Map { start, end, read: true, write: true, exec: false, offset: 0, path: None };
        let exe =
            Map { start: DATA, end: DATA + 4096, read: true, write: true, exec: false, offset: 0x1000, path: Some("/bin/service".into()) };
        let maps = vec![anon(ARENA, ARENA + 4 * SLICE), exe, anon(TOP, TOP + 4096 + SUB_COUNT * 8), anon(SUB, SUB + SUB_COUNT * 8)];
        let mut top = vec![0u8; 4096 + (SUB_COUNT * 8) as usize];
        let put = |b: &mut Vec<u8>, off: u64, v: u64| b[off as usize..off as usize + 8].copy_from_slice(&v.to_le_bytes());
        put(&mut top, 0, TOP + 4096);
        // The arena's slices are submap 256's (its slice 1 is slot 1).
        put(&mut top, 8 * (ARENA >> 29), SUB);
        let mut sub = vec![0u8; (SUB_COUNT * 8) as usize];
        put(&mut sub, 8, PAGE_AT);
        let mut arena = vec![0u8; (4 * SLICE) as usize];
        put(&mut arena, A_SLICES, 4);
        put(&mut arena, A_INFO, 1);
        put(&mut arena, A_META, META);
        let p = PAGE_AT - ARENA;
        put(&mut arena, p + P_FREE, BLOCKS + 128);
        arena[(p + P_USED) as usize] = 2;
        arena[(p + P_CAPACITY) as usize] = 4;
        put(&mut arena, p + P_RESERVED, 1024);
        put(&mut arena, p + P_BLOCK_SIZE, 64);
        put(&mut arena, p + P_START, BLOCKS);
        put(&mut arena, p + P_MEMID, ARENA);
        arena[(p + P_MEMID + M_KIND) as usize] = MEM_ARENA as u8;
        // The free list: blocks 2 -> 3.
        put(&mut arena, SLICE + 128, BLOCKS + 192);
        let mut data = vec![0u8; 4096];
        put(&mut data, 64, TOP);
        let mut runs = vec![(ARENA, arena), (DATA, data), (TOP, top), (SUB, sub)];
        edit(&mut runs);
        Fake { maps, runs, file: None }
    }

    fn set(runs: &mut [(u64, Vec<u8>)], at: u64, v: u64) {
        let (start, b) = runs.iter_mut().find(|(s, b)| at >= *s && at + 8 <= *s + b.len() as u64).unwrap();
        let o = (at - *start) as usize;
        b[o..o + 8].copy_from_slice(&v.to_le_bytes());
    }

    fn walk(f: &Fake) -> std::result::Result<Vec<(u64, u64)>, String> {
        let rw: Vec<&Map> = f.maps.iter().filter(|m| m.file().is_some()).collect();
        let pm = find(f, None, None, &rw, "service").map_err(|p| p.to_string())?;
        let h = walk_heap(f, pm, "mimalloc 3.3.2 (static)").map_err(|e| e.to_string())?;
        Ok(h.live.iter().map(|c| (c.mem, c.usable)).collect())
    }

    #[test]
    fn the_page_map_found_by_shape_gives_each_pages_blocks_less_its_free_list() {
        assert_eq!(walk(&heap(|_| {})).unwrap(), vec![(BLOCKS, 64), (BLOCKS + 64, 64)]);
    }

    #[test]
    fn a_loop_a_page_larger_than_its_slices_and_misplaced_metadata_are_refused() {
        // Block 3's next is block 2: a loop.
        let e = walk(&heap(|r| set(r, BLOCKS + 192, BLOCKS + 128))).unwrap_err();
        assert!(e.contains("free list loops") && e.contains(&format!("{PAGE_AT:#x}")), "{e}");
        // 4096 blocks reserved: more than the one slice the map names.
        let e = walk(&heap(|r| set(r, PAGE_AT + P_RESERVED, 4096))).unwrap_err();
        assert!(e.contains("capacity does not fit the slices the page map gives it"), "{e}");
        // The map names the page again two slices on.
        let e = walk(&heap(|r| set(r, SUB + 24, PAGE_AT))).unwrap_err();
        assert!(e.contains("page map names a page at slices apart"), "{e}");
        // Its metadata is not its arena's entry for its slice.
        let e = walk(&heap(|r| set(r, ARENA + A_META, META + 8))).unwrap_err();
        assert!(e.contains("metadata is not its arena's"), "{e}");
        // No data word points at a page map: not found, not guessed.
        let e = walk(&heap(|r| set(r, DATA + 64, 0))).unwrap_err();
        assert!(e.contains("was not found"), "{e}");
    }
}
