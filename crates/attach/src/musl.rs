//! musl's heap (mallocng, musl 1.2.1 and later), walked from outside the
//! process: its meta areas, each meta's group, and the slots of each group
//! that are neither available nor freed.
//!
//! mallocng keeps its state in one hidden structure (`ctx`, in musl's
//! data: the C library's, or a static program's own), found by its shape:
//! a secret, `init_done` 1, and the first and last meta areas, page-aligned
//! and each starting with that secret. Every meta area is then checked by
//! the secret, every group by its link back to its meta, every slot by the
//! index and the offset its header repeats, and the size a slot's header
//! says against the slot: mallocng records the size the program asked for
//! (the `reserved` bytes at the slot's end), so the blocks carry exactly
//! the requested sizes, as valgrind reports them. A slot that holds a
//! smaller group (mallocng nests small groups in the slots of larger ones)
//! is that group, not a block. Groups the dynamic linker donated (the
//! unused ends of modules' data pages) lie inside the modules' writable
//! segments: they are heap there, not roots.
//!
//! musl before 1.2.1 (oldmalloc) has no such structure and is refused.

use crate::error::{Error, Result};
use crate::glibc::{Chunk, GlibcHeap};
use crate::memory::{Map, Memory, Region};
use std::collections::HashSet;
use std::fmt;

/// mallocng's unit and in-band header size.
const UNIT: u64 = 16;
const IB: u64 = 4;
/// `sizeof (struct meta)`, `sizeof (struct meta_area)` less its slots.
const META: u64 = 40;
const AREA_HEAD: u64 = 24;
/// Meta areas are pages (of at least 4096 bytes).
const AREA: u64 = 4096;
/// `struct malloc_context` on x86-64 (PAGESIZE defined: no pagesize
/// field): the offsets read.
const CTX_INIT_DONE: u64 = 8;
const CTX_AREA_HEAD: u64 = 56;
const CTX_AREA_TAIL: u64 = 64;
const CTX_SIZE: u64 = 928;
/// Bounds of the walks: meta areas, and the bytes of one group read whole.
const MAX_AREAS: usize = 1 << 22;
const MAX_GROUP_READ: u64 = 1 << 30;

/// The size classes in units (`size_classes` of mallocng).
const SIZE_CLASSES: [u64; 48] = [
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 15, 18, 20, 25, 31, 36, 42, 50, 63, 72, 84, 102, 127, 146, 170, 204, 255, 292, 340, 409, 511, 584,
    682, 818, 1023, 1169, 1364, 1637, 2047, 2340, 2730, 3276, 4095, 4680, 5460, 6552, 8191,
];

/// What in musl's heap does not add up (a refusal, at an address).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Problem {
    /// A musl is mapped, but no place in its data has mallocng's shape.
    NoContext {
        /// The module.
        module: String,
    },
    /// Several places have it.
    ContextUncertain {
        /// Their addresses.
        candidates: Vec<u64>,
    },
    /// A meta area is not one (its secret, its count of metas), or the
    /// list of them loops.
    BadArea,
    /// A meta's group does not point back to it, or its size class or
    /// mapping is not one of mallocng's.
    BadGroup {
        /// The meta.
        meta: u64,
    },
    /// A slot's header does not name its slot (its index, its offset), or
    /// the size it records does not fit in it.
    BadSlot {
        /// Its index in the group.
        index: u32,
        /// What does not add up.
        why: &'static str,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::NoContext { module } => write!(
                f,
                "musl's malloc state (mallocng's, musl 1.2.1 or later) is not in {module}'s data: an older musl (oldmalloc), or a heap not used yet"
            ),
            Problem::ContextUncertain { candidates } => {
                let c: Vec<String> = candidates.iter().map(|a| format!("{a:#x}")).collect();
                write!(f, "musl's malloc state could be at any of {}: not walked", c.join(", "))
            }
            Problem::BadArea => write!(f, "musl's meta area does not add up"),
            Problem::BadGroup { meta } => write!(f, "the group of musl's meta {meta:#x} does not add up"),
            Problem::BadSlot { index, why } => write!(f, "slot {index} of a musl group: {why}"),
        }
    }
}

impl Problem {
    /// Whether it says the heap is damaged (rather than not found).
    pub fn is_damage(&self) -> bool {
        matches!(self, Problem::BadArea | Problem::BadGroup { .. } | Problem::BadSlot { .. })
    }
}

fn problem(at: u64, what: Problem) -> Error {
    Error::Mallocng { at, what }
}

/// musl's heap, found.
#[derive(Debug)]
pub struct Found {
    /// Its secret.
    secret: u64,
    /// The first meta area.
    head: u64,
    /// musl's version, when its strings say it (a dynamic libc.so).
    version: Option<String>,
}

/// The name of a mapping's file.
fn file_name(m: &Map) -> &str {
    m.file().and_then(|p| p.rsplit('/').next()).unwrap_or("")
}

/// Whether a mapping is musl's C library (its loader, `libc.so` under a
/// musl directory, Alpine's `libc.musl-*`).
fn is_musl(m: &Map) -> bool {
    let n = file_name(m);
    n.starts_with("ld-musl-") || n.starts_with("libc.musl-") || (n == "libc.so" && m.file().is_some_and(|p| p.contains("musl")))
}

/// Finds mallocng's state: in musl's C library when one is mapped, else
/// (a static program, no glibc's libc.so.6) in the executable's data.
/// `None` when the process is not a musl one.
pub fn find(mem: &dyn Memory) -> Result<Option<Found>> {
    let maps = mem.maps();
    let glibc = maps.iter().any(|m| file_name(m).starts_with("libc.so.6") || file_name(m).starts_with("libc-2."));
    let module = match maps.iter().find(|m| is_musl(m)).and_then(|m| m.file()) {
        Some(p) => p.to_string(),
        // A static program: its executable is the first module mapped.
        None if !glibc => {
            match maps.iter().find(|m| m.offset == 0 && m.file().is_some_and(|p| p.starts_with('/'))).and_then(|m| m.file()) {
                Some(p) => p.to_string(),
                None => return Ok(None),
            }
        }
        None => return Ok(None),
    };
    // The module's writable mappings, and the one right after the last of
    // them: its .bss past the file's pages, anonymous (or, in a static
    // program, the start of the brk area: "[heap]").
    let mut data: Vec<&Map> = Vec::new();
    for (i, m) in maps.iter().enumerate() {
        if m.file() == Some(module.as_str()) && m.write {
            data.push(m);
            let bss = |n: &&Map| (n.anonymous() || n.path.as_deref() == Some("[heap]")) && n.write && n.start == m.end;
            if let Some(next) = maps.get(i + 1).filter(bss) {
                data.push(next);
            }
        }
    }
    let mut found: Vec<(u64, u64, u64)> = Vec::new();
    let mut damaged: Vec<u64> = Vec::new();
    for m in data {
        // (The brk area past a static program's .bss: its first MiB.)
        let end = m.end.min(m.start + (1 << 20));
        let Ok(r) = Region::read(mem, m.start, end) else { continue };
        let mut at = m.start;
        while at + CTX_SIZE <= end {
            match context_at(mem, &r, at) {
                Some(Ok(f)) => found.push(f),
                Some(Err(area)) => damaged.push(area),
                None => {}
            }
            at += 8;
        }
    }
    found.dedup();
    match found.as_slice() {
        [] => {
            // mallocng's shape whose first meta area lost the secret: a
            // damaged heap, said where.
            if let [area] = damaged.as_slice() {
                return Err(problem(*area, Problem::BadArea));
            }
            // A static program that is not musl's: not ours to say.
            if maps.iter().any(is_musl) {
                let name = module.rsplit('/').next().unwrap_or(&module).to_string();
                return Err(problem(0, Problem::NoContext { module: name }));
            }
            Ok(None)
        }
        [(_, secret, head)] => Ok(Some(Found { secret: *secret, head: *head, version: version(mem, &module) })),
        many => Err(problem(many[0].0, Problem::ContextUncertain { candidates: many.iter().map(|f| f.0).collect() })),
    }
}

/// Whether `at` holds mallocng's `ctx`: (address, secret, first area);
/// `Err(area)` when it has the shape but its first meta area does not
/// start with its secret.
fn context_at(mem: &dyn Memory, r: &Region, at: u64) -> Option<std::result::Result<(u64, u64, u64), u64>> {
    let secret = r.u64(at)?;
    let init_done = r.u64(at + CTX_INIT_DONE)? as u32;
    let (head, tail) = (r.u64(at + CTX_AREA_HEAD)?, r.u64(at + CTX_AREA_TAIL)?);
    if secret == 0 || init_done != 1 || head == 0 || tail == 0 || head % AREA != 0 || tail % AREA != 0 {
        return None;
    }
    // The areas start with the secret: 64 random bits.
    let (h, t) = (mem.u64(head).ok()?, mem.u64(tail).ok()?);
    if h == secret && t == secret {
        return Some(Ok((at, secret, head)));
    }
    // An area without it, whose other fields are an area's (its count of
    // metas, its link to the next page-aligned area): damage there.
    let bad = if h != secret { head } else { tail };
    let nslots = mem.u64(bad + 16).ok()? as u32 as u64;
    let next = mem.u64(bad + 8).ok()?;
    ((1..=(AREA - AREA_HEAD) / META).contains(&nslots) && next % AREA == 0).then_some(Err(bad))
}

/// musl's version from its strings: `musl libc (` in the module's
/// read-only data, and the one `1.x.y` string there.
fn version(mem: &dyn Memory, module: &str) -> Option<String> {
    let mut versions: HashSet<String> = HashSet::new();
    let mut musl = false;
    for m in mem.maps().iter().filter(|m| m.file() == Some(module) && m.read && !m.write && m.end - m.start <= 16 << 20) {
        let Ok(b) = mem.bytes(m.start, m.end - m.start) else { continue };
        musl |= b.windows(11).any(|w| w == b"musl libc (");
        for s in b.split(|&c| c == 0) {
            let Ok(s) = std::str::from_utf8(s) else { continue };
            let parts: Vec<&str> = s.split('.').collect();
            if parts.len() == 3
                && parts[0] == "1"
                && parts.iter().all(|p| !p.is_empty() && p.len() <= 3 && p.bytes().all(|c| c.is_ascii_digit()))
            {
                versions.insert(s.to_string());
            }
        }
    }
    (musl && versions.len() == 1).then(|| versions.into_iter().next().unwrap_or_default())
}

/// One group as its meta says it.
struct Group {
    meta: u64,
    mem: u64,
    avail: u32,
    freed: u32,
    last_idx: u32,
    sizeclass: u32,
    maplen: u64,
}

impl Group {
    /// The bytes from one slot's start to the next's.
    fn stride(&self) -> Option<u64> {
        if self.last_idx == 0 && self.maplen != 0 {
            return Some(self.maplen * 4096 - UNIT);
        }
        SIZE_CLASSES.get(self.sizeclass as usize).map(|&c| c * UNIT)
    }

    /// The group's bytes, header to the end of its last slot.
    fn len(&self) -> Option<u64> {
        let slots = self.stride()?.checked_mul(u64::from(self.last_idx) + 1)?;
        UNIT.checked_add(slots)
    }
}

/// Every meta in use, from the meta areas.
fn groups(mem: &dyn Memory, f: &Found) -> Result<Vec<Group>> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut area = f.head;
    while area != 0 {
        if !seen.insert(area) || seen.len() > MAX_AREAS || area % AREA != 0 {
            return Err(problem(area, Problem::BadArea));
        }
        let r = Region::read(mem, area, area + AREA).map_err(|_| problem(area, Problem::BadArea))?;
        let word = |a: u64| r.u64(a).ok_or(problem(area, Problem::BadArea));
        let next = word(area + 8)?;
        let nslots = word(area + 16)? as u32 as u64;
        if word(area)? != f.secret || nslots > (AREA - AREA_HEAD) / META {
            return Err(problem(area, Problem::BadArea));
        }
        for i in 0..nslots {
            let m = area + AREA_HEAD + i * META;
            let gmem = word(m + 16)?;
            if gmem == 0 {
                continue; // free, or never handed out
            }
            let masks = word(m + 24)?;
            let bits = word(m + 32)?;
            out.push(Group {
                meta: m,
                mem: gmem,
                avail: masks as u32,
                freed: (masks >> 32) as u32,
                last_idx: (bits & 31) as u32,
                sizeclass: ((bits >> 6) & 63) as u32,
                maplen: bits >> 12,
            });
        }
        area = next;
    }
    Ok(out)
}

/// Walks the heap: every slot in use of every group, with the size the
/// program asked for.
pub fn walk_heap(mem: &dyn Memory, f: &Found) -> Result<GlibcHeap> {
    let groups = groups(mem, f)?;
    let starts: HashSet<u64> = groups.iter().map(|g| g.mem).collect();
    // Each group's bytes, checked, before any is read.
    let mut spans: Vec<(u64, u64)> = Vec::with_capacity(groups.len());
    for g in &groups {
        let bad = || problem(g.meta, Problem::BadGroup { meta: g.meta });
        if (g.sizeclass >= 48 && g.sizeclass != 63) || g.mem % UNIT != 0 {
            return Err(bad());
        }
        let len = g.len().ok_or_else(bad)?;
        if len > MAX_GROUP_READ || (g.maplen != 0 && len > g.maplen * 4096) {
            return Err(bad());
        }
        spans.push((g.mem, g.mem.checked_add(len).ok_or_else(bad)?));
    }
    // The groups read from the process: those inside no other group's
    // bytes. A group nested in another's slot is read within its
    // outermost group's bytes, not a second time (mallocng nests every
    // small group: read twice, the heap was held twice).
    let mut order: Vec<usize> = (0..groups.len()).collect();
    order.sort_unstable_by_key(|&i| (spans[i].0, std::cmp::Reverse(spans[i].1)));
    let mut regions: Vec<Region> = Vec::new();
    for &i in &order {
        let (a, b) = spans[i];
        if regions.last().is_some_and(|r| a < r.end() && b <= r.end()) {
            continue; // inside the last group read (they are in address order)
        }
        let g = &groups[i];
        regions.push(Region::read(mem, a, b).map_err(|_| problem(g.meta, Problem::BadGroup { meta: g.meta }))?);
    }
    let mut live = Vec::new();
    let mut nested: HashSet<u64> = HashSet::new();
    let mut ranges = Vec::new();
    let mut freed_slots = 0u64;
    for (g, &(a, b)) in groups.iter().zip(&spans) {
        let bad = || problem(g.meta, Problem::BadGroup { meta: g.meta });
        let stride = g.stride().ok_or_else(bad)?;
        // Its bytes, from the group read that holds them (and only its own).
        let i = regions.partition_point(|r| r.start <= a).checked_sub(1).ok_or_else(bad)?;
        let r = View { start: a, bytes: regions[i].slice(a, b - a).ok_or_else(bad)? };
        let len = b - a;
        // The group's header names its meta.
        if r.u64(g.mem) != Some(g.meta) {
            return Err(bad());
        }
        let all = ((2u64 << g.last_idx) - 1) as u32;
        let used = all & !(g.avail | g.freed);
        freed_slots += u64::from((all & (g.avail | g.freed)).count_ones());
        let storage = g.mem + UNIT;
        for i in (0..=g.last_idx).filter(|i| used & (1 << i) != 0) {
            let slot = |why| problem(storage + stride * u64::from(i), Problem::BadSlot { index: i, why });
            let byte = |a: u64| r.slice(a, 1).map(|b| b[0]).ok_or_else(|| slot("its header lies outside the group"));
            let u16_at = |a: u64| r.slice(a, 2).map(|b| u64::from(u16::from_le_bytes([b[0], b[1]]))).ok_or_else(|| slot("outside"));
            let u32_at =
                |a: u64| r.slice(a, 4).map(|b| u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))).ok_or_else(|| slot("outside"));
            let p0 = storage + stride * u64::from(i);
            let end = p0 + stride - IB;
            // A slot used at an offset says so at its start.
            let p = if byte(p0 - 3)? >> 5 == 7 {
                let off = u16_at(p0 - 2)?;
                p0 + UNIT * off
            } else {
                p0
            };
            if p >= end {
                return Err(slot("its offset runs past the slot"));
            }
            let h = byte(p - 3)?;
            if u32::from(h & 31) != i {
                return Err(slot("its header names another slot"));
            }
            let units = if byte(p - 4)? != 0 { u32_at(p - 8)? } else { u16_at(p - 2)? };
            if units != (p - storage) / UNIT {
                return Err(slot("its header's offset is not its place"));
            }
            let reserved = match u64::from(h >> 5) {
                // A smaller group lives in this slot.
                6 if starts.contains(&p) => {
                    nested.insert(p);
                    continue;
                }
                5 => {
                    let r5 = u32_at(end - 4)?;
                    if r5 < 5 {
                        return Err(slot("its size is not one mallocng writes"));
                    }
                    r5
                }
                r if r < 5 => r,
                _ => return Err(slot("its size is not one mallocng writes")),
            };
            if reserved > end - p {
                return Err(slot("its size is larger than the slot"));
            }
            live.push(Chunk { mem: p, usable: end - reserved - p });
        }
        ranges.push((g.mem, g.mem + if g.maplen != 0 { g.maplen * 4096 } else { len }));
    }
    // The heap's own memory: the groups no other group holds.
    let heap_ranges: Vec<(u64, u64)> = ranges.into_iter().filter(|(a, _)| !nested.contains(a)).collect();
    live.sort_unstable();
    if live.windows(2).any(|w| w[0].mem + w[0].usable > w[1].mem) {
        return Err(problem(0, Problem::BadSlot { index: 0, why: "two slots overlap" }));
    }
    let version = f.version.clone();
    let mut warnings = Vec::new();
    if version.is_none() {
        warnings
            .push("musl's version is not in its strings (a static program): its heap was read as mallocng's (musl 1.2.1 or later)".into());
    }
    Ok(GlibcHeap {
        live,
        arenas: groups.len() - nested.len(),
        heap_ranges,
        mmapped: Vec::new(),
        regions,
        cached_free: freed_slots,
        version: (0, 0),
        version_inferred: false,
        static_arena: None,
        warnings,
        allocator: match version {
            Some(v) => format!("musl {v}"),
            None => "musl (mallocng)".into(),
        },
    })
}

/// A group's bytes inside the region read that holds them.
struct View<'a> {
    start: u64,
    bytes: &'a [u8],
}

impl View<'_> {
    /// The word at `addr`, when inside.
    fn u64(&self, addr: u64) -> Option<u64> {
        let b = self.slice(addr, 8)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }

    /// The bytes of `[addr, addr + len)`, when inside.
    fn slice(&self, addr: u64, len: u64) -> Option<&[u8]> {
        let off = usize::try_from(addr.checked_sub(self.start)?).ok()?;
        self.bytes.get(off..off.checked_add(usize::try_from(len).ok()?)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::Fake;

    const SECRET: u64 = 0x5eec_7e75_0123_4567;
    const AREA_AT: u64 = 0x10000;
    const OUTER: u64 = 0x20000;
    const NESTED: u64 = OUTER + UNIT;

    /// A slot's in-band header before `p` (offset 0 in its slot): its
    /// index, its reserved bytes, its offset in units from the storage.
    fn header(run: &mut [u8], base: u64, p: u64, idx: u8, reserved: u8, units: u16) {
        let o = (p - base) as usize;
        run[o - 4] = 0;
        run[o - 3] = idx | reserved << 5;
        run[o - 2..o].copy_from_slice(&units.to_le_bytes());
    }

    /// One meta area with two groups: an outer one of 2032-byte slots (its
    /// own page), slot 0 holding a nested group of three 64-byte slots
    /// (two in use), slot 1 a block of 2027 bytes.
    fn heap() -> Fake {
        let mut area = vec![0u8; AREA as usize];
        let w = |buf: &mut Vec<u8>, off: u64, v: u64| buf[off as usize..off as usize + 8].copy_from_slice(&v.to_le_bytes());
        w(&mut area, 0, SECRET);
        w(&mut area, 16, 2);
        let (m0, m1) = (AREA_AT + AREA_HEAD, AREA_AT + AREA_HEAD + META);
        // The outer group: class 23 (127 units), last index 1, one page.
        w(&mut area, AREA_HEAD + 16, OUTER);
        w(&mut area, AREA_HEAD + 32, 1 | 23 << 6 | 1 << 12);
        // The nested one: class 3 (4 units), last index 2, slot 2 available.
        w(&mut area, AREA_HEAD + META + 16, NESTED);
        w(&mut area, AREA_HEAD + META + 24, 1 << 2);
        w(&mut area, AREA_HEAD + META + 32, 2 | 3 << 6);
        let mut page = vec![0u8; 4096];
        w(&mut page, 0, m0);
        w(&mut page, NESTED - OUTER, m1);
        let storage = OUTER + UNIT;
        // Outer slot 0: the nested group (reserved 6 marks it).
        header(&mut page, OUTER, storage, 0, 6, 0);
        header(&mut page, OUTER, storage + 2032, 1, 1, 127);
        let inner = NESTED + UNIT;
        header(&mut page, OUTER, inner, 0, 2, 0);
        header(&mut page, OUTER, inner + 64, 1, 2, 4);
        for (i, b) in page.iter_mut().enumerate().skip(0x800) {
            *b = (i % 251) as u8;
        }
        let map = |start: u64| Map { start, end: start + 4096, read: true, write: true, exec: false, offset: 0, path: None };
        Fake { maps: vec![map(AREA_AT), map(OUTER)], runs: vec![(AREA_AT, area), (OUTER, page)], file: None }
    }

    #[test]
    fn a_nested_group_is_read_within_its_outer_group_once() {
        let mem = heap();
        let f = Found { secret: SECRET, head: AREA_AT, version: Some("1.2.3".into()) };
        let h = walk_heap(&mem, &f).unwrap();
        let live: Vec<(u64, u64)> = h.live.iter().map(|c| (c.mem, c.usable)).collect();
        assert_eq!(live, [(NESTED + UNIT, 58), (NESTED + UNIT + 64, 58), (OUTER + UNIT + 2032, 2027)]);
        // The outer group's bytes only: the nested group's are in them.
        assert_eq!(h.regions.len(), 1);
        assert_eq!(h.heap_ranges, [(OUTER, OUTER + 4096)]);
        assert_eq!(h.arenas, 1);
        // Every block's contents are found as the capture finds them (the
        // last region starting at or below it), the block after the
        // nested group too.
        for c in &h.live {
            let i = h.regions.partition_point(|r| r.start <= c.mem) - 1;
            let got = h.regions[i].slice(c.mem, c.usable).expect("the block's bytes");
            assert_eq!(got, &mem.runs[1].1[(c.mem - OUTER) as usize..(c.mem - OUTER + c.usable) as usize]);
        }
    }

    #[test]
    fn a_group_not_naming_its_meta_is_refused() {
        let mut mem = heap();
        mem.runs[1].1[(NESTED - OUTER) as usize] ^= 0x40;
        let f = Found { secret: SECRET, head: AREA_AT, version: None };
        let Err(e) = walk_heap(&mem, &f) else { panic!("a group not naming its meta was walked") };
        let e = e.to_string();
        assert!(e.contains("group of musl's meta"), "{e}");
    }
}
