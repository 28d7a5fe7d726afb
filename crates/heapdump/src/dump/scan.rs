//! Reading the program's memory into records: whole regions (full dumps)
//! or the pointers they hold into live allocations (compact dumps).

use crate::dump::index::Index;
use crate::dump::outcome::DumpError;
use crate::dump::writer::PipeSink;
use crate::entry::Entry;
use heapdump_format::{raw, Alloc, Contents, Link, Mode, WriteError, Writer};

/// Scans `[start, start+len)` for words pointing into live allocations.
/// Fills `pairs` with the first ones; returns (total count, pairs filled,
/// offset to resume scanning from for the rest).
fn scan(index: &Index, pairs: &mut [(u64, u64)], start: u64, len: u64) -> (u64, usize, u64) {
    let mut count = 0u64;
    let mut filled = 0usize;
    let mut resume = len;
    let first = start.next_multiple_of(8) - start;
    for (off, v) in (Rescan { index, start, off: first, len }) {
        if filled < pairs.len() {
            pairs[filled] = (off, v);
            filled += 1;
            if filled == pairs.len() {
                resume = off + 8;
            }
        }
        count += 1;
    }
    (count, filled, resume)
}

pub struct Rescan<'a> {
    index: &'a Index,
    start: u64,
    off: u64,
    len: u64,
}

impl Iterator for Rescan<'_> {
    type Item = (u64, u64);
    fn next(&mut self) -> Option<(u64, u64)> {
        while self.off + 8 <= self.len {
            let off = self.off;
            self.off += 8;
            // SAFETY: [start, start+len) is readable memory of this process
            // (a live allocation, a stopped thread's stack, a mapped
            // segment), off+8 <= len, and the address is 8-aligned.
            let v = unsafe { core::ptr::read_volatile((self.start + off) as *const u64) };
            if self.index.hits(v) {
                return Some((off, v));
            }
        }
        None
    }
}

/// The pointers of a compact record: those gathered, then the rest.
pub type PairIter<'a> = core::iter::Chain<core::iter::Copied<core::slice::Iter<'a, (u64, u64)>>, Rescan<'a>>;

/// Reads the memory a dump records (blocks, stacks, segments) in the
/// dump's mode: whole (full dumps), or as the pointers it holds into live
/// allocations (compact), found through the sorted index. Holds the
/// scratch a scan fills, so a record's first pointers are read once.
pub struct Scanner<'a> {
    mode: Mode,
    index: &'a Index,
    pairs: &'a mut [(u64, u64)],
    links: &'a mut [Link],
}

impl<'a> Scanner<'a> {
    /// A scanner over `index`, with `pairs` and `links` as scratch.
    pub fn new(mode: Mode, index: &'a Index, pairs: &'a mut [(u64, u64)], links: &'a mut [Link]) -> Scanner<'a> {
        Scanner { mode, index, pairs, links }
    }

    /// The sorted index of the live allocations.
    pub fn index(&self) -> &'a Index {
        self.index
    }

    /// Writes one record over the region `[start, start+len)`: `f` makes
    /// it from the contents.
    pub fn region<'b>(
        &mut self,
        w: &mut Writer<'b, PipeSink>,
        start: u64,
        len: u64,
        f: impl FnOnce(&mut Writer<'b, PipeSink>, Contents<'_, PairIter<'_>>) -> Result<(), WriteError>,
    ) -> Result<(), DumpError> {
        match self.mode {
            Mode::Full => {
                let bytes: &[u8] = if len == 0 {
                    &[]
                } else {
                    // SAFETY: the region is readable process memory (see `scan`).
                    unsafe { core::slice::from_raw_parts(start as *const u8, len as usize) }
                };
                f(w, Contents::Full(bytes))?;
            }
            Mode::Compact => {
                let index = self.index;
                let (count, filled, resume) = scan(index, self.pairs, start, len);
                let it = self.pairs[..filled].iter().copied().chain(Rescan { index, start, off: resume, len });
                f(w, Contents::Compact { count, pointers: it })?;
            }
        }
        Ok(())
    }

    /// Writes one live allocation: an ALLOC record (full dumps), or an
    /// entry of the writer's ALLOCS record (compact), its pointers named
    /// by the index position of their targets.
    pub fn alloc(&mut self, w: &mut Writer<'_, PipeSink>, e: &Entry) -> Result<(), DumpError> {
        let info = alloc_info(e);
        match self.mode {
            Mode::Full => self.region(w, e.addr, e.size, |w, c| w.alloc(&info, c)),
            Mode::Compact => self.dense(w, &info, e),
        }
    }

    /// A compact allocation whose pointers were counted and measured
    /// already (see [`measure`]): written in one scan.
    pub fn alloc_measured(&mut self, w: &mut Writer<'_, PipeSink>, e: &Entry, count: u64, len: u64) -> Result<(), DumpError> {
        w.dense_alloc_sized(&alloc_info(e), count, Some(len), links_of(self.index, e))?;
        Ok(())
    }

    /// A compact allocation: its first pointers gathered in `links` as the
    /// scan finds them (one read of the block), the rest, if any, scanned
    /// again when written.
    fn dense(&mut self, w: &mut Writer<'_, PipeSink>, info: &Alloc, e: &Entry) -> Result<(), DumpError> {
        let index = self.index;
        let links = &mut *self.links;
        let first = e.addr.next_multiple_of(8) - e.addr;
        let (mut count, mut filled, mut resume) = (0u64, 0usize, e.size);
        // Past the scratch, the links' encoded length is summed as they are
        // counted, so that the writer need not scan the block again to
        // measure them (a block of millions of pointers: a scan each).
        let ordinal = w.next_ordinal();
        let (mut links_len, mut next_offset) = (0u64, 0u64);
        for l in (LinkScan { index, start: e.addr, off: first, len: e.size }) {
            if filled < links.len() {
                links[filled] = l;
                filled += 1;
                if filled == links.len() {
                    resume = l.offset + 8;
                }
            } else {
                if next_offset == 0 {
                    for g in links.iter() {
                        links_len += g.encoded_len(next_offset, ordinal);
                        next_offset = g.offset + 8;
                    }
                }
                links_len += l.encoded_len(next_offset, ordinal);
                next_offset = l.offset + 8;
            }
            count += 1;
        }
        if filled as u64 == count {
            // All gathered (every block of fewer pointers than `links`
            // holds): the writer reads the slice, not a chain that asks
            // at each step which half it is in.
            w.dense_alloc(info, count, links[..filled].iter().copied())?;
        } else {
            let it = links[..filled].iter().copied().chain(LinkScan { index, start: e.addr, off: resume, len: e.size });
            w.dense_alloc_sized(info, count, Some(links_len), it)?;
        }
        Ok(())
    }
}

/// What the dump says of a live allocation, its first word read from it
/// (zero-padded below 8 bytes).
pub(crate) fn alloc_info(e: &Entry) -> Alloc {
    alloc_info_with(e, first_word(e), hashbrown_flags(e))
}

/// [`alloc_info`] with the first word and hashbrown flags read already.
pub(crate) fn alloc_info_with(e: &Entry, first_word: u64, hashbrown: u8) -> Alloc {
    Alloc {
        address: e.addr,
        size: e.size,
        site: e.site,
        align_log2: e.align_log2,
        flags: if e.sampled { raw::ALLOC_SAMPLED } else { 0 } | hashbrown,
        first_word,
    }
}

/// The first word of a live allocation (zero-padded below 8 bytes).
pub(crate) fn first_word(e: &Entry) -> u64 {
    if e.size >= 8 && e.addr % 8 == 0 {
        // SAFETY: a live allocation of at least 8 bytes, aligned.
        unsafe { core::ptr::read_volatile(e.addr as *const u64) }
    } else {
        let mut b = [0u8; 8];
        for (i, x) in b.iter_mut().enumerate().take(e.size.min(8) as usize) {
            // SAFETY: i < size, inside the live allocation.
            *x = unsafe { core::ptr::read_volatile((e.addr + i as u64) as *const u8) };
        }
        u64::from_le_bytes(b)
    }
}

/// How many pointers the live allocation `e` (of ordinal `ordinal`)
/// holds, and their encoded length (see `Writer::dense_alloc_sized`): one
/// scan of it.
pub(crate) fn measure(index: &Index, e: &Entry, ordinal: u64) -> (u64, u64) {
    let (mut count, mut len, mut next_offset) = (0u64, 0u64, 0u64);
    for l in links_of(index, e) {
        len += l.encoded_len(next_offset, ordinal);
        next_offset = l.offset + 8;
        count += 1;
    }
    (count, len)
}

/// The pointers of the live allocation `e` as ALLOCS links (see
/// [`LinkScan`]).
pub(crate) fn links_of<'a>(index: &'a Index, e: &Entry) -> impl Iterator<Item = Link> + Clone + 'a {
    LinkScan { index, start: e.addr, off: e.addr.next_multiple_of(8) - e.addr, len: e.size }
}

/// How many words ahead a large block's lookups are started.
const LOOKAHEAD: u64 = 16;

/// The pointers of `[start, start + len)` as ALLOCS links, from `off`:
/// each word that points into a live allocation, named by its index
/// position and the offset into it.
#[derive(Clone)]
struct LinkScan<'a> {
    index: &'a Index,
    start: u64,
    off: u64,
    len: u64,
}

impl Iterator for LinkScan<'_> {
    type Item = Link;
    #[inline]
    fn next(&mut self) -> Option<Link> {
        while self.off + 8 <= self.len {
            let off = self.off;
            self.off += 8;
            // Past the words the dump prefetched for this block (its
            // first 64), start the lookup of the word LOOKAHEAD ahead: a
            // large block of pointers (an array of a million nodes) would
            // otherwise wait for each of its lookups in turn.
            if off >= 8 * (64 - LOOKAHEAD) && off + 8 * (LOOKAHEAD + 1) <= self.len {
                // SAFETY: as below, a word further inside the region.
                let ahead = unsafe { core::ptr::read_volatile((self.start + off + 8 * LOOKAHEAD) as *const u64) };
                self.index.prefetch_value(ahead);
            }
            // SAFETY: as in `Rescan`: readable memory of this process, an
            // 8-aligned word inside the region.
            let v = unsafe { core::ptr::read_volatile((self.start + off) as *const u64) };
            if let Some((i, delta)) = self.index.find(v) {
                return Some(Link { offset: off, target: i as u64, delta });
            }
        }
        None
    }
}

/// The hashbrown bits of a block's ALLOC flags: the layout proven on its
/// live contents (see `heapdump_format::hashbrown`), read where the dump
/// reads it anyway (the compact scan reads every word of the block).
pub(crate) fn hashbrown_flags(e: &Entry) -> u8 {
    if e.addr % 8 != 0 {
        return 0;
    }
    let end = e.addr + e.size;
    let log2 = heapdump_format::hashbrown::proven_log2(e.size, |offset| {
        // SAFETY: offset < size: the bytes from it to the end of the live
        // allocation are readable, and nothing writes them while the world
        // is stopped (or in the forked writer's copy).
        unsafe { core::slice::from_raw_parts((e.addr + offset) as *const u8, (end - e.addr - offset) as usize) }
    });
    if log2 == 0 {
        return 0;
    }
    log2 << raw::ALLOC_HASHBROWN_SHIFT | raw::ALLOC_HASHBROWN_ROOM
}
