//! Collapsing the heap into transparent huge pages before a forked dump
//! (`heapdump run --fork --collapse`): the fork then copies a page-table
//! entry per 2 MiB instead of 512.
#![forbid(unsafe_code)]

use crate::sys;
use crate::sys::procfs::Maps;
use crate::table::Table;

/// Collapses the private anonymous memory (the heap, the table's shadow)
/// into transparent huge pages while the program runs, so that the fork
/// that follows copies a page-table entry per 2 MiB instead of 512. Only
/// 2 MiB ranges with at least 90% of their pages in memory are collapsed
/// (a collapse fills the holes, so the program's memory grows by at most a
/// ninth of what is collapsed). Best effort: a kernel without
/// MADV_COLLAPSE, or a range it will not collapse, is skipped.
///
/// The runtime's own mappings are left out (the shadow alone spans 48 TiB
/// of address space), except the parts of the shadow in use: the slots
/// and the site words of the pages that hold blocks. (Before, the site
/// words stayed on 4 KiB pages, 343 MB of them at 22 M blocks, and so did
/// an array of the program's that the kernel had merged with a mapping of
/// ours: the fork copied their 130 000 page-table entries.)
pub fn collapse_heap(maps: &Maps<'_>, table: &Table) {
    const HUGE: u64 = 2 << 20;
    const PAGES: usize = (HUGE / 4096) as usize;
    let mut resident = [0u8; PAGES];
    let mut supported = true;
    // A run of consecutive huge ranges to collapse with one call.
    let mut run: Option<(u64, u64)> = None;
    let flush = |r: (u64, u64), supported: &mut bool| {
        if *supported && sys::collapse(r.0, r.1 - r.0) == Err(libc::EINVAL) {
            *supported = false;
        }
    };
    let mut each = |start: u64, end: u64| {
        let mut a = start.next_multiple_of(HUGE);
        while a + HUGE <= end && supported {
            let full = sys::resident_bytes(a as *const u8, HUGE as usize, &mut resident) * 10 >= HUGE * 9;
            run = match (run, full) {
                (Some((lo, hi)), true) if hi == a => Some((lo, a + HUGE)),
                (r, true) => {
                    if let Some(r) = r {
                        flush(r, &mut supported);
                    }
                    Some((a, a + HUGE))
                }
                (Some(r), false) => {
                    flush(r, &mut supported);
                    None
                }
                (None, false) => None,
            };
            a += HUGE;
        }
    };
    maps.for_each_anon_rw(true, |start, end| sys::for_each_outside_own(start, end, &mut each));
    table.for_each_shadow_chunk(HUGE, &mut each);
    table.for_each_site_chunk(HUGE, &mut each);
    if let Some(r) = run {
        flush(r, &mut supported);
    }
}
