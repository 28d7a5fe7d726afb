//! The shadow: the live table's slots for small blocks at a fixed offset
//! from their address, as AddressSanitizer keeps its shadow memory.
//!
//! One reservation (`MAP_NORESERVE`: address space only, pages come on
//! first write) holds, for every 16-byte granule below 2^47:
//! - a 16-bit slot at `base + addr / 8` (the table's slot encoding);
//! - a 32-bit site word at `base + SITES + addr / 4`, written only for
//!   blocks that have a site.
//!
//! Finding a slot is arithmetic on the address: no directory to walk, so
//! an allocation or a free touches one line of the table (the bucket
//! scheme it replaces first read the window's bucket index in a leaf
//! found through two levels of tables: three dependent loads before the
//! slot). Interleaved runs of the allocation workload: 1.22x -> 1.165x the
//! untracked time with addresses only.
//!
//! A page of slots (32 KiB of address space) is marked in a bitmap the
//! first time a block is put in it, with two summary levels above (a bit
//! per 64 marks below), so that a dump visits only pages that were
//! written, in address order, and the tracker's memory is counted without
//! asking the kernel. The insert path tests the page's bit (one word per
//! 2 MiB of address space, hot in the cache) and marks it out of line.
//!
//! The reservation is left out of core dumps (`MADV_DONTDUMP`): the kernel
//! writes a mapping page by page, and 48 TiB of them would take hours.
//!
//! Huge pages where the table is dense: when the first page of a 2 MiB
//! chunk of slots (16 MiB of address space) is marked and a neighbouring
//! chunk has at least half its pages marked (a heap growing through),
//! the chunk is given `MADV_HUGEPAGE` before its first slot is written,
//! as jemalloc's `metadata_thp:auto` does for its own metadata. Slots are
//! read and written at random over the table, and with 4 KiB pages a
//! dense table missed the TLB on most frees (under a hypervisor, a
//! two-dimensional page walk) and took a fault per 4 KiB to fill:
//! interleaved runs of the allocation workload, 1.167x -> 1.141x the
//! untracked time with addresses only (30 rounds each). Sparse parts keep
//! 4 KiB pages, so a small or scattered heap does not pay 2 MiB per
//! 16 MiB it touches. Nothing is asked for where the system gives no
//! transparent huge pages (`never`), or with `HEAPDUMP_THP=0`. With `defrag` at its default
//! (`madvise`) the kernel may compact memory to find a huge page on that
//! first write, in the allocating thread.
//!
//! Memory: an eighth of the address span that holds small blocks, in
//! whole pages: a page for every 32 KiB that ever held one (a whole 2 MiB
//! chunk where it was given a huge page), plus site pages where sites are
//! recorded. Where the reservation is refused (a
//! limit on address space, strict overcommit, valgrind), the table keeps
//! the bucket scheme.

use crate::sys;
use core::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Addresses covered: below 2^47 (all of user space with 4-level paging).
pub const COVER_BITS: u32 = 47;
const SLOTS_LEN: usize = 1 << (COVER_BITS - 3);
const SITES: usize = SLOTS_LEN;
const SITES_LEN: usize = 1 << (COVER_BITS - 2);
/// A page of slots covers this much address space.
const PAGE_COVER_BITS: u32 = 12 + 3;
/// The marks: a bit per page of slots (level 1), per 64 of those
/// (level 2), per 64 of those (level 3).
const L1: usize = SITES + SITES_LEN;
const L1_LEN: usize = 1 << (COVER_BITS - PAGE_COVER_BITS - 3);
const L2: usize = L1 + L1_LEN;
const L2_LEN: usize = L1_LEN / 64;
const L3: usize = L2 + L2_LEN;
const L3_LEN: usize = L2_LEN / 64;
/// A chunk of slots (2 MiB, a huge page: 16 MiB of address space) that
/// is given huge pages has its bit here.
const CHUNK_COVER_BITS: u32 = 21 + 3;
const PAGES_PER_CHUNK: usize = 1 << (CHUNK_COVER_BITS - PAGE_COVER_BITS);
const HUGE: usize = L3 + L3_LEN;
const HUGE_LEN: usize = 1 << (COVER_BITS - CHUNK_COVER_BITS - 3);
const LEN: usize = HUGE + HUGE_LEN;
/// A chunk whose neighbour has at least this many pages of slots marked
/// gets huge pages before its first slot is written.
const DENSE_PAGES: u32 = PAGES_PER_CHUNK as u32 / 2;

/// The reservation's state: 0 before the first small block, [`FAILED`]
/// when refused, else its base.
pub const FAILED: usize = 1;

/// The shadow of one table.
pub struct Shadow {
    base: AtomicUsize,
    /// Pages of slots marked.
    pages: AtomicU64,
    /// Whether dense chunks of slots get huge pages (the system allows
    /// transparent huge pages where asked for).
    thp: AtomicBool,
    /// Whether they may (`HEAPDUMP_THP`).
    thp_allowed: AtomicBool,
    /// Whether every block has a site (so the site words are as dense as
    /// the slots, and get huge pages with them).
    every_site: AtomicBool,
}

/// The word of `base + off` as an atomic `T` (the reservation is never
/// unmapped while its table is in use and every offset used lies inside it).
#[inline(always)]
fn at<T>(base: usize, off: usize) -> &'static T {
    // SAFETY: callers pass offsets inside the reservation, aligned for T;
    // its pages read as zero until written (anonymous memory).
    unsafe { &*((base + off) as *const T) }
}

impl Shadow {
    pub const fn new() -> Shadow {
        Shadow {
            base: AtomicUsize::new(0),
            pages: AtomicU64::new(0),
            thp: AtomicBool::new(false),
            thp_allowed: AtomicBool::new(true),
            every_site: AtomicBool::new(false),
        }
    }

    /// Every block will have a site (called before the first is recorded):
    /// the site words of a chunk given huge pages get them too.
    pub fn every_block_has_a_site(&self) {
        self.every_site.store(true, Ordering::Relaxed);
    }

    /// Never asks for huge pages (called before the reservation).
    pub fn no_huge_pages(&self) {
        self.thp_allowed.store(false, Ordering::Relaxed);
    }

    /// Never reserves the shadow (unless it already is).
    pub fn refuse(&self) {
        let _ = self.base.compare_exchange(0, FAILED, Ordering::AcqRel, Ordering::Acquire);
    }

    /// The base (see [`FAILED`]).
    #[inline(always)]
    pub fn base(&self) -> usize {
        self.base.load(Ordering::Acquire)
    }

    /// The base, reserving the shadow on first use.
    #[cold]
    pub fn base_or_reserve(&self) -> usize {
        let b = self.base();
        if b != 0 {
            return b;
        }
        // Aligned to a huge page, so that a chunk of slots can be one.
        let mine = sys::mmap_sparse_aligned(LEN, 1 << 21).map_or(FAILED, |p| {
            // A core dump walks a mapping page by page: 48 TiB of them would
            // take the kernel hours. Leave the shadow out.
            let _ = sys::dont_dump(p, LEN);
            self.thp.store(self.thp_allowed.load(Ordering::Relaxed) && sys::thp_on_request(), Ordering::Relaxed);
            p as usize
        });
        match self.base.compare_exchange(0, mine, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => mine,
            Err(winner) => {
                if mine != FAILED {
                    // SAFETY: our mapping, never published.
                    unsafe { sys::munmap(mine as *mut u8, LEN) };
                }
                winner
            }
        }
    }

    /// Whether the shadow covers `addr`.
    #[inline(always)]
    pub fn covers(addr: u64) -> bool {
        addr >> COVER_BITS == 0
    }

    /// The slot of the 16-byte granule at `addr` (covered, 16-aligned).
    #[inline(always)]
    pub fn slot(base: usize, addr: u64) -> &'static AtomicU16 {
        at(base, (addr >> 3) as usize)
    }

    /// The site word of the granule at `addr`.
    #[inline(always)]
    pub fn site(base: usize, addr: u64) -> &'static AtomicU32 {
        at(base, SITES + (addr >> 2) as usize)
    }

    /// The level-1 mark word of `addr` and its bit.
    #[inline(always)]
    fn mark_of(base: usize, addr: u64) -> (&'static AtomicU64, u64) {
        let page = (addr >> PAGE_COVER_BITS) as usize;
        (at(base, L1 + page / 64 * 8), 1 << (page % 64))
    }

    /// Whether the page of slots of `addr` is marked (a block was put in it).
    #[inline(always)]
    pub fn marked(base: usize, addr: u64) -> bool {
        let (w, bit) = Self::mark_of(base, addr);
        w.load(Ordering::Relaxed) & bit != 0
    }

    /// Marks the page of slots of `addr`, before its first slot is written.
    #[cold]
    #[inline(never)]
    pub fn mark(&self, base: usize, addr: u64) {
        let (w, bit) = Self::mark_of(base, addr);
        if w.fetch_or(bit, Ordering::AcqRel) & bit != 0 {
            return;
        }
        self.pages.fetch_add(1, Ordering::Relaxed);
        let page = (addr >> PAGE_COVER_BITS) as usize;
        let (i2, i3) = (page / 64, page / 64 / 64);
        let before = at::<AtomicU64>(base, L2 + i2 / 64 * 8).fetch_or(1 << (i2 % 64), Ordering::AcqRel);
        at::<AtomicU64>(base, L3 + i3 / 64 * 8).fetch_or(1 << (i3 % 64), Ordering::AcqRel);
        // A chunk's level-2 bits are one byte of the word: all clear means
        // this is the chunk's first page.
        if (before >> (i2 % 64 / 8 * 8)) & 0xff == 0 && self.thp.load(Ordering::Relaxed) {
            Self::maybe_huge(base, page / PAGES_PER_CHUNK, self.every_site.load(Ordering::Relaxed));
        }
    }

    /// The first page of chunk `c` is being marked: if a neighbour is
    /// dense (the heap is growing through here), asks for huge pages for
    /// the chunk before its first slot is written, so that its first
    /// touch maps one 2 MiB page.
    ///
    /// Why: slots are read and written at random across the table, and
    /// with 4 KiB pages each chunk takes 512 TLB entries (most frees
    /// missed the TLB on the slot; under a hypervisor that is a
    /// two-dimensional page walk) and 512 page faults to fill. Sparse
    /// parts of the table keep 4 KiB pages, so a small or scattered heap
    /// does not pay 2 MiB per 16 MiB of address space it touches.
    ///
    /// With `sites` (every block has one), the chunk's site words (4 MiB,
    /// as dense as its slots) are given huge pages too: on 4 KiB pages
    /// they were most of what a fork copied of the runtime's (343 MB, 86
    /// 000 page-table entries at 22 M blocks). Not with sampled sites,
    /// whose few words would then take 2 MiB each.
    #[cold]
    fn maybe_huge(base: usize, c: usize, sites: bool) {
        let dense = |c: usize| -> bool {
            let words: &[AtomicU64; PAGES_PER_CHUNK / 64] = at(base, L1 + c * (PAGES_PER_CHUNK / 8));
            words.iter().map(|w| w.load(Ordering::Relaxed).count_ones()).sum::<u32>() >= DENSE_PAGES
        };
        let last = (1 << (COVER_BITS - CHUNK_COVER_BITS)) - 1;
        if !((c > 0 && dense(c - 1)) || (c < last && dense(c + 1))) {
            return;
        }
        if sys::huge_pages(base + (c << 21), 1 << 21).is_ok() {
            at::<AtomicU64>(base, HUGE + c / 64 * 8).fetch_or(1 << (c % 64), Ordering::AcqRel);
            if sites {
                // The site words of the chunk's 16 MiB of address space.
                let _ = sys::huge_pages(base + SITES + (c << (CHUNK_COVER_BITS - 2)), 1 << (CHUNK_COVER_BITS - 2));
            }
        }
    }

    /// Whether chunk `c` was given huge pages.
    fn is_huge(base: usize, c: usize) -> bool {
        at::<AtomicU64>(base, HUGE + c / 64 * 8).load(Ordering::Acquire) & (1 << (c % 64)) != 0
    }

    /// Calls `f` with the first address covered by each marked page of
    /// slots, in address order.
    pub fn for_each_page(base: usize, mut f: impl FnMut(u64)) {
        for i3w in 0..L3_LEN / 8 {
            let mut w3 = at::<AtomicU64>(base, L3 + i3w * 8).load(Ordering::Acquire);
            while w3 != 0 {
                let i3 = i3w * 64 + w3.trailing_zeros() as usize;
                w3 &= w3 - 1;
                let mut w2 = at::<AtomicU64>(base, L2 + i3 * 8).load(Ordering::Acquire);
                while w2 != 0 {
                    let i2 = i3 * 64 + w2.trailing_zeros() as usize;
                    w2 &= w2 - 1;
                    let mut w1 = at::<AtomicU64>(base, L1 + i2 * 8).load(Ordering::Acquire);
                    while w1 != 0 {
                        let page = i2 * 64 + w1.trailing_zeros() as usize;
                        w1 &= w1 - 1;
                        f((page as u64) << PAGE_COVER_BITS);
                    }
                }
            }
        }
    }

    /// Calls `f(address, slot value)` for every non-empty slot, in address
    /// order.
    pub fn for_each_slot(base: usize, mut f: impl FnMut(u64, u16)) {
        Self::for_each_page(base, |start| {
            let words: &[AtomicU64; 512] = at(base, (start >> 3) as usize);
            for (i, w) in words.iter().enumerate() {
                let w = w.load(Ordering::Relaxed);
                let mut v = w;
                while v != 0 {
                    let k = v.trailing_zeros() / 16;
                    v &= !(0xffff << (k * 16));
                    f(start + ((i * 4 + k as usize) << 4) as u64, (w >> (k * 16)) as u16);
                }
            }
        });
    }

    /// Bytes of memory the shadow holds: the marked pages of slots and of
    /// marks, and the site pages in memory.
    pub fn bytes(&self, base: usize) -> u64 {
        let slots = self.pages.load(Ordering::Relaxed) * 4096;
        // A chunk on huge pages holds what the kernel mapped (2 MiB, or
        // the pages touched where it had no huge page to give), not its
        // marked pages.
        let (mut last_chunk, mut in_huge, mut huge) = (usize::MAX, 0u64, 0u64);
        let mut resident = [0u8; PAGES_PER_CHUNK];
        // A page of level-1 marks covers 4096 * 8 pages of slots (1 GiB);
        // one of level 2 covers 64 of those. Count each distinct page once.
        let (mut marks, mut last1, mut last2) = (0u64, usize::MAX, usize::MAX);
        let mut last3 = usize::MAX;
        let mut sites = 0u64;
        let mut pages = [0u8; 1024];
        let mut run: Option<(u64, u64)> = None;
        // The site words of the address range r.
        let mut flush = |r: (u64, u64), sites: &mut u64| {
            let lo = SITES + (r.0 >> 2) as usize;
            *sites += sys::resident_bytes((base + lo) as *const u8, ((r.1 - r.0) >> 2) as usize, &mut pages);
        };
        Self::for_each_page(base, |start| {
            let page = (start >> PAGE_COVER_BITS) as usize;
            let c = page / PAGES_PER_CHUNK;
            if Self::is_huge(base, c) {
                in_huge += 4096;
                if c != last_chunk {
                    // The chunk's bit's page of the huge-chunk bitmap, once.
                    if last_chunk == usize::MAX || (HUGE + c / 8) / 4096 != (HUGE + last_chunk / 8) / 4096 {
                        marks += 4096;
                    }
                    last_chunk = c;
                    huge += sys::resident_bytes((base + (c << 21)) as *const u8, 1 << 21, &mut resident);
                }
            }
            for (last, off) in [(&mut last1, L1 + page / 8), (&mut last2, L2 + page / 64 / 8), (&mut last3, L3 + page / 4096 / 8)] {
                if off / 4096 != *last {
                    *last = off / 4096;
                    marks += 4096;
                }
            }
            let end = start + (1 << PAGE_COVER_BITS);
            run = match run {
                Some((lo, hi)) if hi == start => Some((lo, end)),
                Some(r) => {
                    flush(r, &mut sites);
                    Some((start, end))
                }
                None => Some((start, end)),
            };
        });
        if let Some(r) = run {
            flush(r, &mut sites);
        }
        // (Saturating: a page marked since `pages` was read may be in a
        // huge chunk.)
        slots.saturating_sub(in_huge) + huge + marks + sites
    }

    /// Gives the reservation back (a table that is dropped: tests).
    pub fn release(&self) {
        let b = self.base.swap(0, Ordering::AcqRel);
        if b > FAILED {
            // SAFETY: our reservation; its table is going away.
            unsafe { sys::munmap(b as *mut u8, LEN) };
        }
    }
}
