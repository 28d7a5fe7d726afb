//! The directory of the index: what answers "does this word point into
//! a live allocation?" in constant time, over the entries sorted by
//! address (see `index`, which owns the entries and asks it).
//!
//! It is the format's ([`heapdump_format::lookup`]: runs of blocks with no
//! gap of 16 MiB or more, a granule map for a dense run of small 16-byte
//! aligned blocks, buckets holding a few blocks on average for any other),
//! its storage one mapping from the kernel: built and used with the world
//! stopped, inside the traced process, without the tracked heap.

use crate::entry::Entry;
use crate::sys;
use heapdump_format::lookup::{self, Line, Run, Shape};

/// Runs cut at a gap of 16 MiB; buckets of at least 16 bytes (no two
/// 16-byte-aligned blocks start in one bucket less), four blocks to a
/// bucket on average; a granule map where it costs at most 16 bytes per
/// block (the index entry itself is 24).
pub(super) const SHAPE: Shape = Shape { gap: 16 << 20, min_shift: 4, buckets: 1, per_blocks: 4, line_budget: 16 };

/// The index's entries as the directory sees them.
pub(super) struct Entries<'a>(pub(super) &'a [Entry]);

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
    #[inline]
    fn first_after(&self, from: usize, to: usize, v: u64) -> usize {
        self.0.get(from..to).map_or(to, |s| from + s.partition_point(|e| e.addr <= v))
    }
}

/// `len` values of `T` in the directory's mapping.
pub(super) struct Part<T> {
    ptr: *mut T,
    len: usize,
}

impl<T> Part<T> {
    const NONE: Part<T> = Part { ptr: core::ptr::null_mut(), len: 0 };

    /// # Safety
    /// `ptr` is aligned for `T` and maps `len` values of `T` that zero
    /// bytes make valid (integers), zeroed or written since, that stay
    /// mapped and are reached through this part alone while it lives.
    unsafe fn new(ptr: *mut T, len: usize) -> Part<T> {
        Part { ptr, len }
    }
}

impl<T> AsRef<[T]> for Part<T> {
    #[inline(always)]
    fn as_ref(&self) -> &[T] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `Part::new`'s contract: aligned, mapped, valid values,
        // reached through this part alone.
        unsafe { core::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<T> AsMut<[T]> for Part<T> {
    #[inline(always)]
    fn as_mut(&mut self) -> &mut [T] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: as in `as_ref`; `&mut self` makes this the only
        // reference.
        unsafe { core::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// The format's directory, in its mapping.
pub(super) type Lookup = lookup::Directory<Part<Run>, Part<u32>, Part<Line>>;

pub(super) struct Directory {
    pub(super) dir: Lookup,
    /// Whether the processor counts bits in one instruction.
    pub(super) popcnt: bool,
    map: *mut u8,
    map_len: usize,
}

impl Directory {
    pub(super) fn empty() -> Directory {
        Directory { dir: Lookup::empty(Part::NONE, Part::NONE, Part::NONE), popcnt: false, map: core::ptr::null_mut(), map_len: 0 }
    }

    pub(super) fn build(s: &[Entry]) -> Result<Directory, i32> {
        if s.is_empty() {
            return Ok(Directory::empty());
        }
        let sizes = SHAPE.sizes(&Entries(s));
        let words_at = (sizes.runs * core::mem::size_of::<Run>()).next_multiple_of(64);
        let lines_at = words_at + (sizes.words * 4).next_multiple_of(64);
        let map_len = (lines_at + sizes.lines * core::mem::size_of::<Line>()).next_multiple_of(4096);
        let map = sys::mmap_anon(map_len)?;
        let _ = sys::huge_pages(map as usize, map_len);
        // SAFETY: the fresh mapping (zeroed, page-aligned) holds the runs
        // at 0, the words at words_at and the lines at lines_at (each a
        // multiple of 64, so aligned), one part each, apart.
        let (runs, words, lines) = unsafe {
            (
                Part::new(map.cast::<Run>(), sizes.runs),
                Part::new(map.wrapping_add(words_at).cast::<u32>(), sizes.words),
                Part::new(map.wrapping_add(lines_at).cast::<Line>(), sizes.lines),
            )
        };
        let Some(dir) = Lookup::build(&SHAPE, &Entries(s), runs, words, lines) else {
            // More entries than a u32 counts.
            // SAFETY: our own mapping; the parts went with the refusal.
            unsafe { sys::munmap(map, map_len) };
            return Err(libc::EOVERFLOW);
        };
        // std_detect's answer is cached in a static after one CPUID: it
        // does not allocate.
        let popcnt = std::arch::is_x86_feature_detected!("popcnt");
        Ok(Directory { dir, popcnt, map, map_len })
    }

    /// The block `v` points at or into in `s` (the entries the directory
    /// was built over) and the offset of `v` in it.
    #[inline(always)]
    pub(super) fn find(&self, s: &[Entry], v: u64) -> Option<(usize, u64)> {
        if self.popcnt {
            // SAFETY: the processor has POPCNT (checked when built).
            return unsafe { find_popcnt(&self.dir, s, v) };
        }
        self.dir.find(&Entries(s), v)
    }

    pub(super) fn release(&mut self) {
        let old = core::mem::replace(self, Directory::empty());
        if !old.map.is_null() {
            // SAFETY: our own mapping, no longer referenced (its parts go
            // with `old`, not used again).
            unsafe { sys::munmap(old.map, old.map_len) };
        }
    }
}

/// [`Lookup::find`] with the processor's population count (the portable
/// one is a dozen instructions per word counted, four words per lookup
/// in a granule map).
///
/// # Safety
/// The processor must have POPCNT.
#[target_feature(enable = "popcnt")]
unsafe fn find_popcnt(dir: &Lookup, s: &[Entry], v: u64) -> Option<(usize, u64)> {
    dir.find(&Entries(s), v)
}
