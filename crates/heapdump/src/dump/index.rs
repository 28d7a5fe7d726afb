//! The live allocations sorted by address, and the directory that answers
//! "does this word point into a live allocation?" in constant time.
//!
//! The compact scan asks that of every word of every block and root. A
//! binary search of the whole index (10 M entries: some twenty dependent
//! cache misses) made a compact dump of a dense heap 46 times slower than a
//! full one. The directory is the format's ([`heapdump_format::lookup`]):
//! the address range cut into runs of blocks with no gap of 16 MiB or more
//! (the brk heap, each arena, the mapped blocks); a dense run of small
//! 16-byte-aligned blocks gets a granule map (a word's block from one cache
//! line), any other buckets of a power-of-two size holding a few blocks on
//! average (one bucket read and a search of a handful of entries). This
//! file gives it the index's entries and its storage, mapped from the
//! kernel: built and used with the world stopped, inside the traced
//! process, without the tracked heap.

use crate::dump::outcome::DumpError;

use crate::entry::Entry;
use crate::sys::{self, Mapping};
use crate::table::Table;
use heapdump_format::lookup::{self, prefetch, Line, Run, Shape};

/// Runs cut at a gap of 16 MiB; buckets of at least 16 bytes (no two
/// 16-byte-aligned blocks start in one bucket less), four blocks to a
/// bucket on average; a granule map where it costs at most 16 bytes per
/// block (the index entry itself is 24).
const SHAPE: Shape = Shape { gap: 16 << 20, min_shift: 4, buckets: 1, per_blocks: 4, line_budget: 16 };

/// The index's entries as the directory reads them.
struct Entries<'a>(&'a [Entry]);

impl lookup::Blocks for Entries<'_> {
    #[inline]
    fn len(&self) -> usize {
        self.0.len()
    }
    #[inline]
    fn start(&self, i: usize) -> u64 {
        self.0[i].addr
    }
    #[inline]
    fn size(&self, i: usize) -> u64 {
        self.0[i].size
    }
    #[inline(always)]
    fn first_after(&self, from: usize, to: usize, v: u64) -> usize {
        self.0.get(from..to).map_or(to, |s| from + s.partition_point(|e| e.addr <= v))
    }
}

/// `len` values of `T` in a mapping of their own: the directory's storage.
struct Part<T> {
    ptr: *mut T,
    len: usize,
    /// Owns the memory (unmapped when dropped); none when `len` is 0.
    _map: Option<Mapping>,
}

impl<T: Copy> Part<T> {
    fn none() -> Part<T> {
        Part { ptr: core::ptr::NonNull::dangling().as_ptr(), len: 0, _map: None }
    }

    /// Maps room for `len` values (with huge pages when `huge`: the
    /// lookups read it at random).
    ///
    /// # Safety
    /// Every bit pattern is a `T`, and `T` needs at most page alignment.
    unsafe fn map(len: usize, huge: bool) -> Result<Part<T>, i32> {
        if len == 0 {
            return Ok(Part::none());
        }
        let bytes = len.checked_mul(core::mem::size_of::<T>()).ok_or(libc::ENOMEM)?.next_multiple_of(4096);
        let mut map = Mapping::anon(bytes)?;
        if huge {
            // A hint; refused is fine.
            let _ = sys::huge_pages(map.bytes().as_ptr() as usize, bytes);
        }
        // SAFETY: any bits are a `T` and the mapping is page aligned (the
        // caller's word); it holds `bytes / size_of::<T>() >= len` of them.
        let ptr = unsafe { map.typed_mut::<T>() }.as_mut_ptr();
        Ok(Part { ptr, len, _map: Some(map) })
    }
}

impl<T> AsRef<[T]> for Part<T> {
    #[inline(always)]
    fn as_ref(&self) -> &[T] {
        // SAFETY: `ptr` is dangling with `len` 0, or `len` values of the
        // mapping this part owns (alive while it is), valid whatever their
        // bits (`Part::map`) and reached through this part alone.
        unsafe { core::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<T> AsMut<[T]> for Part<T> {
    #[inline(always)]
    fn as_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `as_ref`; `&mut self` makes the view unique.
        unsafe { core::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// The directory over the index's entries, in its mappings.
type Directory = lookup::Directory<Part<Run>, Part<u32>, Part<Line>>;

/// The directory of no entries.
fn no_directory() -> Directory {
    Directory::empty(Part::none(), Part::none(), Part::none())
}

/// The directory of `s`, in mappings of its own.
fn build_directory(s: &[Entry]) -> Result<Directory, i32> {
    if s.is_empty() {
        return Ok(no_directory());
    }
    let sizes = SHAPE.sizes(&Entries(s));
    // SAFETY: a `Run` is integers (u64s, usizes, a u32), a `Line` eight
    // u64s: any bits are one; none needs more than 64-byte alignment.
    let (runs, words, lines) = unsafe { (Part::map(sizes.runs, false)?, Part::map(sizes.words, true)?, Part::map(sizes.lines, true)?) };
    // None only for more entries than a u32 counts.
    Directory::build(&SHAPE, &Entries(s), runs, words, lines).ok_or(libc::EOVERFLOW)
}

/// [`lookup::Directory::find`] with the processor's population count (the
/// portable one is a dozen instructions per word counted, four words per
/// lookup in a granule map).
///
/// # Safety
/// The processor must have POPCNT.
#[target_feature(enable = "popcnt")]
unsafe fn find_popcnt(dir: &Directory, s: &[Entry], v: u64) -> Option<(usize, u64)> {
    dir.find(&Entries(s), v)
}

/// The live allocations sorted by address: the lookup index of the compact
/// scan, and the order allocations are written in (so their contents are
/// read front to back; the table gives its small blocks in address order
/// and the others in hash order).
pub(crate) struct Index {
    ptr: *mut Entry,
    len: usize,
    map_len: usize,
    dir: Directory,
    /// Whether the processor counts bits in one instruction.
    popcnt: bool,
    /// The largest blocks of [`HUGE`] bytes or more.
    huge: Huge,
}

/// A block this large is one whose scan the compact dump's helper may
/// measure ahead (see `assist`): an array of a hundred thousand pointers.
pub(crate) const HUGE: u64 = 1 << 20;
/// How many such blocks the index names.
pub(crate) const HUGE_KEPT: usize = 16;

/// Positions of the largest blocks of [`HUGE`] bytes or more (at most
/// [`HUGE_KEPT`]), in index order.
#[derive(Clone, Copy)]
struct Huge {
    at: [usize; HUGE_KEPT],
    size: [u64; HUGE_KEPT],
    n: usize,
}

impl Huge {
    const NONE: Huge = Huge { at: [0; HUGE_KEPT], size: [0; HUGE_KEPT], n: 0 };

    /// Keeps position `at` (a block of `size` bytes, after every position
    /// kept) if it is among the largest.
    fn note(&mut self, at: usize, size: u64) {
        if size < HUGE {
            return;
        }
        if self.n < HUGE_KEPT {
            (self.at[self.n], self.size[self.n]) = (at, size);
            self.n += 1;
            return;
        }
        let Some(k) = (0..HUGE_KEPT).min_by_key(|&k| self.size[k]) else { return };
        if size > self.size[k] {
            // Kept in index order: the smallest out, the new one at the end.
            self.at.copy_within(k + 1.., k);
            self.size.copy_within(k + 1.., k);
            (self.at[HUGE_KEPT - 1], self.size[HUGE_KEPT - 1]) = (at, size);
        }
    }
}

impl Index {
    /// Positions of the largest blocks of [`HUGE`] bytes or more, in index
    /// order.
    pub(crate) fn huge(&self) -> &[usize] {
        &self.huge.at[..self.huge.n]
    }

    pub(crate) fn as_slice(&self) -> &[Entry] {
        if self.ptr.is_null() {
            return &[];
        }
        // SAFETY: ptr maps `len` initialised entries.
        unsafe { core::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// Whether `v` points at or into a live allocation.
    #[inline]
    pub(crate) fn hits(&self, v: u64) -> bool {
        self.find(v).is_some()
    }

    /// The live allocation `v` points at or into: its position in the
    /// index (its ordinal in the dump, allocations being written in index
    /// order) and the offset of `v` in it.
    #[inline]
    pub(crate) fn find(&self, v: u64) -> Option<(usize, u64)> {
        // Most words of a heap point nowhere near it: answered here, inline,
        // before the call (its code built for POPCNT is not inlined).
        let (lo, hi) = self.dir.bounds();
        if v < lo || v >= hi {
            return None;
        }
        if self.popcnt {
            // SAFETY: the processor has POPCNT (checked when built).
            return unsafe { find_popcnt(&self.dir, self.as_slice(), v) };
        }
        self.dir.find(&Entries(self.as_slice()), v)
    }

    /// Starts the memory reads that a lookup of `v` will make (the
    /// granule map's line, or the directory's bucket). Only a hint.
    #[inline]
    pub(crate) fn prefetch_value(&self, v: u64) {
        self.dir.prefetch_word(v);
    }

    /// Starts the memory reads that [`Index::hits`] will make for the
    /// words of the live block `[addr, addr + size)` (its first 64): the
    /// directory's buckets, or (`entries`) the index entries those buckets
    /// name. Only a hint: it changes no state.
    #[inline]
    pub(crate) fn prefetch(&self, addr: u64, size: u64, entries: bool) {
        // A granule map's line answers alone: with no bucket cluster
        // there are no entries to prefetch.
        if addr % 8 != 0 || (entries && !self.dir.has_buckets()) {
            return;
        }
        let words = (size / 8).min(64);
        for k in 0..words {
            // SAFETY: a word inside a live allocation of the stopped (or
            // forked) process, 8-aligned (as `Rescan` reads them).
            let v = unsafe { core::ptr::read_volatile((addr + 8 * k) as *const u64) };
            if !entries {
                // The granule map's line, or the bucket.
                self.prefetch_value(v);
                continue;
            }
            // A granule map's line answers alone: no entries to prefetch.
            let Some((from, to)) = self.dir.locate(v).and_then(|l| self.dir.window(l)) else { continue };
            // Every line of the window the lookup searches, from the entry
            // before it (at most 8 lines).
            let first = self.ptr.wrapping_add(from) as usize & !63;
            let last = self.ptr.wrapping_add(to) as usize;
            let mut line = first;
            while line < last && line < first + 8 * 64 {
                prefetch(line as *const u8);
                line += 64;
            }
        }
    }

    pub(crate) fn release(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: our own mapping, no longer referenced.
            unsafe { sys::munmap(self.ptr.cast(), self.map_len) };
            self.ptr = core::ptr::null_mut();
        }
        // Its mappings go with it.
        self.dir = no_directory();
    }
}

/// Memory for the index's entries, mapped and its pages touched while the
/// program still runs (a dump without fork), so that the kernel's
/// clearing of some 24 bytes per block of fresh pages is not part of the
/// pause: at 10 M blocks that was 0.7 s of the 3 s the program was held
/// (`perf`: `clear_page_erms` under the index build, 2 MiB at a time).
/// A forked writer builds its index in the child instead: pages touched
/// before the fork would be copied again on its first writes.
pub(crate) struct Prepared {
    ptr: *mut u8,
    len: usize,
}

/// Entries the index of `count` live blocks is given room for (the
/// per-thread counts may lag the slots by a few).
fn room_for(count: usize) -> usize {
    count + count / 64 + 4096
}

impl Prepared {
    /// Maps and touches room for the index of the live blocks as the
    /// table counts them now; `None` when the kernel refuses (the dump
    /// then maps its index with the world stopped, as before).
    pub(crate) fn new(table: &Table) -> Option<Prepared> {
        let len = (room_for(table.live_count() as usize) * core::mem::size_of::<Entry>()).next_multiple_of(4096);
        let ptr = sys::mmap_anon(len).ok()?;
        let _ = sys::huge_pages(ptr as usize, len);
        for off in (0..len).step_by(4096) {
            // SAFETY: inside our fresh private mapping; a write allocates
            // the page (or its whole huge page) now.
            unsafe { core::ptr::write_volatile(ptr.add(off), 0) };
        }
        Some(Prepared { ptr, len })
    }

    /// The mapping and its length, when it holds at least `len` bytes;
    /// else it is given back.
    fn take(self, len: usize) -> Option<(*mut u8, usize)> {
        if self.len >= len {
            let taken = (self.ptr, self.len);
            core::mem::forget(self);
            return Some(taken);
        }
        None
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        // SAFETY: our own mapping, not referenced (`take` forgets it).
        unsafe { sys::munmap(self.ptr, self.len) };
    }
}

/// Builds the sorted index and its directory, its entries in `prepared`
/// when that is large enough.
pub(crate) fn build_index(table: &Table, mut prepared: Option<Prepared>) -> Result<Index, DumpError> {
    let size = core::mem::size_of::<Entry>();
    let map_err = |errno| DumpError::Os { what: "mapping the address index", errno };
    // SAFETY: world stopped or forked child (so for the table calls below).
    let large = unsafe { table.overflow_len_unlocked() };
    // The small blocks come in address order: put them at the start of the
    // index, the others (sorted) beside it, and merge from the back. The
    // merge never writes over a small entry it has yet to read, and stops
    // once the others are placed: the small ones below the lowest of them
    // are where they belong already (a dense heap's are all below its few
    // large blocks, mapped high: nothing of them is copied). The index
    // is sized from the per-thread counts, with room to spare, so that the
    // slots are walked once; should they hold more, they are counted and
    // walked again.
    let guess = (table.live_count() as usize).saturating_sub(large);
    let mut room = room_for(guess);
    let (ptr, map_len, small) = loop {
        let mut map_len = ((large + room).max(1) * size).next_multiple_of(4096);
        let ptr: *mut Entry = match prepared.take().and_then(|p| p.take(map_len)) {
            Some((p, len)) => {
                map_len = len;
                p.cast()
            }
            None => {
                let p = sys::mmap_anon(map_len).map_err(map_err)?;
                // Looked up at random for every pointer of a dense heap:
                // huge pages spare a TLB miss per lookup (a hint; refused
                // is fine).
                let _ = sys::huge_pages(p as usize, map_len);
                p.cast()
            }
        };
        let mut small = 0;
        // SAFETY: the world is stopped or this is the forked child: no thread
        // writes the slots while they are walked.
        unsafe {
            table.for_each_small_unlocked(|e| {
                if small < room {
                    // SAFETY: small < room entries fit in the mapping.
                    ptr.add(small).write(e);
                }
                small += 1;
            })
        };
        if small <= room {
            break (ptr, map_len, small);
        }
        // SAFETY: our mapping, not referenced.
        unsafe { sys::munmap(ptr.cast(), map_len) };
        room = small;
    };
    let n = small + large;
    let tmp_len = (large.max(1) * size).next_multiple_of(4096);
    let tmp: *mut Entry = match sys::mmap_anon(tmp_len) {
        Ok(p) => p.cast(),
        Err(errno) => {
            // SAFETY: our mapping, not referenced.
            unsafe { sys::munmap(ptr.cast(), map_len) };
            return Err(map_err(errno));
        }
    };
    let mut i = 0;
    // SAFETY: as for the slots: nothing writes the overflow shards while
    // the world is stopped (or in the forked child).
    unsafe {
        table.for_each_overflow_unlocked(|e| {
            if i < large {
                // SAFETY: i < large entries fit in the mapping.
                tmp.add(i).write(e);
                i += 1;
            }
        })
    };
    // SAFETY: `large` entries written to tmp; sort_unstable is in core and
    // does not allocate.
    let others = unsafe { core::slice::from_raw_parts_mut(tmp, large) };
    others.sort_unstable_by_key(|e| e.addr);
    // From the back: `a` small and `b` other entries are left, the merged
    // ones occupy [out, small + large). out - a = b + dropped, so writing
    // at out - 1 never reaches a small entry not yet read.
    let (mut a, mut b) = (small, large);
    let mut out = n;
    let mut dropped = 0;
    // Each other entry placed has its position written over its address
    // (it is not read again), DROPPED when it goes.
    const DROPPED: u64 = u64::MAX;
    while b > 0 {
        // SAFETY: a - 1 < small and b - 1 < large index written entries;
        // out - 1 >= a (see above).
        unsafe {
            let o = others[b - 1];
            if a > 0 && (*ptr.add(a - 1)).addr >= o.addr {
                if (*ptr.add(a - 1)).addr == o.addr {
                    // A large entry at a small block's address is stale (a
                    // free the tracker never saw; see table.rs): the small
                    // one is newer.
                    b -= 1;
                    others[b].addr = DROPPED;
                    dropped += 1;
                    continue;
                }
                a -= 1;
                out -= 1;
                ptr.add(out).write(*ptr.add(a));
            } else {
                b -= 1;
                out -= 1;
                ptr.add(out).write(o);
                others[b].addr = out as u64;
            }
        }
    }
    if dropped > 0 {
        // The merged entries close up on the small ones still in place.
        // SAFETY: [out, n) holds the merged entries, [0, a) the rest; the
        // copy handles the overlap.
        unsafe { core::ptr::copy(ptr.add(out), ptr.add(a), n - out) };
    }
    // The largest blocks are large ones: noted in index order.
    let mut huge = Huge::NONE;
    for o in others.iter().filter(|o| o.addr != DROPPED) {
        huge.note(o.addr as usize - dropped, o.size);
    }
    let n = n - dropped;
    // SAFETY: our mapping, no longer referenced.
    unsafe { sys::munmap(tmp.cast(), tmp_len) };
    // std_detect's answer is cached in a static after one CPUID: it does
    // not allocate.
    let popcnt = std::arch::is_x86_feature_detected!("popcnt");
    let mut index = Index { ptr, len: n, map_len, dir: no_directory(), popcnt, huge };
    match build_directory(index.as_slice()) {
        Ok(d) => index.dir = d,
        Err(errno) => {
            index.release();
            return Err(map_err(errno));
        }
    }
    Ok(index)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The largest blocks of at least `HUGE` bytes are kept, at most
    /// `HUGE_KEPT` of them, in index order; smaller ones never.
    #[test]
    fn the_largest_blocks_are_kept_in_order() {
        let mut h = Huge::NONE;
        let sizes: Vec<u64> = (0..40u64).map(|k| if k % 3 == 0 { HUGE - 1 } else { HUGE + (k * 7919) % 101 * 4096 }).collect();
        for (at, &size) in sizes.iter().enumerate() {
            h.note(at, size);
        }
        let mut want: Vec<(u64, usize)> = sizes.iter().enumerate().filter(|(_, &s)| s >= HUGE).map(|(at, &s)| (s, at)).collect();
        // The largest, ties to the later (a new block replaces only a
        // smaller one, so the earlier of two equal ones goes first).
        want.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)));
        let mut want: Vec<usize> = want.iter().take(HUGE_KEPT).map(|x| x.1).collect();
        want.sort();
        assert_eq!(&h.at[..h.n], &want[..]);
    }

    /// Large blocks among the small ones (in address order, not only above
    /// them), some of a megabyte or more, and a stale large entry under a
    /// small block (a free the tracker never saw): the index is every live
    /// block once, in address order, the small one kept where both are,
    /// and the largest blocks are noted at their positions, as a merge
    /// from the front noted them.
    #[test]
    fn large_blocks_among_small_ones_merge_in_order() {
        let t = Box::new(Table::new());
        let mut model = Vec::new();
        let entry = |addr: u64, size: u64, site: u32| Entry { addr, size, align_log2: 4, site, sampled: false };
        for band in 0..40u64 {
            let base = 0x5555_0000_0000 + band * (16 << 20);
            for i in 0..500 {
                let e = entry(base + i * 64, 16 + i % 40, 1);
                if band % 7 == 3 && i == 250 {
                    // A large block here first, whose free went unseen.
                    t.insert(&entry(e.addr, 96 << 10, 9));
                }
                t.insert(&e);
                model.push(e);
            }
            // Past the band's small blocks, below the next band's.
            let size = if band % 3 == 0 { 64 << 10 } else { (1 << 20) + (band * 7919 % 13) * 4096 };
            let e = entry(base + (8 << 20), size, 2);
            t.insert(&e);
            model.push(e);
        }
        model.sort_by_key(|e| e.addr);
        let mut want = Huge::NONE;
        for (at, e) in model.iter().enumerate().filter(|(_, e)| e.site == 2) {
            want.note(at, e.size);
        }
        let mut i = build_index(&t, None).unwrap();
        assert_eq!(i.as_slice(), &model[..], "every live block once, in address order");
        assert_eq!(i.huge(), &want.at[..want.n], "the largest, at their positions");
        assert!(i.huge().len() == HUGE_KEPT);
        i.release();
    }

    /// The answer of a search of every entry: the block `v` points at or
    /// into, and the offset.
    fn brute(s: &[Entry], v: u64) -> Option<(usize, u64)> {
        s.iter().position(|e| v == e.addr || (v >= e.addr && v < e.addr + e.size)).map(|i| (i, v - s[i].addr))
    }

    /// The index built in memory made ready before the world stopped is
    /// the one built without it; memory made ready for fewer blocks than
    /// are live by then (the program went on allocating) is given back
    /// and the index mapped as before.
    #[test]
    fn a_prepared_index_is_used_when_it_is_large_enough() {
        let t = Box::new(Table::new());
        let mut model = Vec::new();
        let mut add = |t: &Table, i: u64| {
            // Small blocks, and every 1000th a large one.
            let (addr, size) =
                if i % 1000 == 999 { (0x7f00_0000_0000 + i * (2 << 20), 1 << 20) } else { (0x5555_0000_0000 + i * 64, 16 + i % 40) };
            let e = Entry { addr, size, align_log2: 4, site: i as u32 % 7, sampled: false };
            t.insert(&e);
            model.push(e);
        };
        for i in 0..10_000 {
            add(&t, i);
        }
        let small = Prepared::new(&t).expect("mapped");
        for i in 10_000..400_000 {
            add(&t, i);
        }
        model.sort_by_key(|e| e.addr);
        let large = Prepared::new(&t).expect("mapped");
        let large_at = large.ptr as usize;
        let plain = build_index(&t, None).unwrap();
        let from_small = build_index(&t, Some(small)).unwrap();
        let from_large = build_index(&t, Some(large)).unwrap();
        assert_eq!(plain.as_slice(), &model[..], "every live block, in address order");
        assert_eq!(from_small.as_slice(), &model[..]);
        assert_eq!(from_large.as_slice(), &model[..]);
        assert_eq!(from_large.ptr as usize, large_at, "the prepared memory holds the index");
        assert_ne!(from_small.ptr as usize, 0);
        for mut i in [plain, from_small, from_large] {
            i.release();
        }
    }

    /// The index's own use of the format's lookup (whose tests check its
    /// answers on every layout, the runtime's heaps among them): its
    /// directory in mappings of its own, a dense heap's granule map beside
    /// the buckets of the mapped blocks, an 8-byte-aligned heap's buckets,
    /// the processor's population count or the portable one, the
    /// read-ahead of a word's lookup and of a block's words (hints, which
    /// change nothing).
    #[test]
    fn the_index_finds_what_a_search_of_every_block_finds() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let (mut with_lines, mut with_buckets) = (0, 0);
        for layout in 0..4 {
            let align = if layout % 2 == 1 { 8 } else { 16 };
            let mut entries = Vec::new();
            let mut addr = 0x5555_0000_0000u64 + (rnd() % 4096) * 16;
            for _ in 0..(500 + rnd() % 1500) {
                let size = match rnd() % 10 {
                    0 => 0,
                    1 => 16 * (1 + rnd() % 64),
                    _ => 16 + rnd() % 64,
                };
                entries.push(Entry::new(addr as *mut u8, size as usize, 16, 0, false));
                addr += size.max(1).next_multiple_of(align) + 16 * (rnd() % 2);
            }
            // The mapped blocks, far above.
            let mut addr = 0x7f00_0000_0000u64;
            for _ in 0..20 {
                entries.push(Entry::new(addr as *mut u8, 1 << 20, 16, 0, false));
                addr += (2 << 20) + (rnd() % 64) * 4096;
            }
            let dir = build_directory(&entries).unwrap();
            with_lines += dir.runs().iter().filter(|r| r.has_lines()).count();
            with_buckets += dir.runs().iter().filter(|r| !r.has_lines()).count();
            let popcnt = std::arch::is_x86_feature_detected!("popcnt");
            let mut index = Index { ptr: entries.as_mut_ptr(), len: entries.len(), map_len: 0, dir, popcnt, huge: Huge::NONE };
            let (lo, hi) = index.dir.bounds();
            let mut probes: Vec<u64> = entries
                .iter()
                .flat_map(|e| [e.addr, e.addr + e.size / 2, e.addr + e.size, e.addr + e.size.saturating_sub(1), e.addr.wrapping_sub(1)])
                .collect();
            probes.extend((0..1000).map(|_| lo.wrapping_sub(1 << 20) + rnd() % (hi - lo + (2 << 20))));
            for popcnt in [popcnt, false] {
                index.popcnt = popcnt;
                for &v in &probes {
                    index.prefetch_value(v);
                    assert_eq!(index.find(v), brute(&entries, v), "layout {layout}: {v:#x}");
                    assert_eq!(index.hits(v), brute(&entries, v).is_some(), "layout {layout}: {v:#x}");
                }
            }
            // A block's words read ahead: its own entries' addresses.
            let words: Vec<u64> = probes.iter().take(64).copied().collect();
            index.prefetch(words.as_ptr() as u64, 8 * words.len() as u64, false);
            index.prefetch(words.as_ptr() as u64, 8 * words.len() as u64, true);
            // The entries are the test's: only the directory is given back.
            index.dir = no_directory();
        }
        assert!(with_lines >= 2 && with_buckets >= 4, "both kinds of run: {with_lines} granule maps, {with_buckets} bucket runs");
    }
}
