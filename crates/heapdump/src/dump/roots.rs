//! Which memory outside the heap is a root, as memcheck would see it:
//! anonymous mappings (less glibc's own chunks, arenas, the stacks of
//! ended threads and the runtime's mappings), thread-local storage, the
//! parts of a region outside the runtime's own.

use crate::dump::index::Index;
use crate::dump::outcome::DumpError;
use crate::dump::scan::Scanner;
use crate::dump::writer::PipeSink;
use crate::sys::procfs::Maps;

/// The runtime's own thread-local variables, as (offset from the thread
/// pointer, size): never part of a thread's TLS root.
pub type OwnTls = [(u64, u64); 7];
use crate::stop::stw;
use crate::sys;
use crate::sys::text::fmt_u64;
use heapdump_format::{raw, Static, Writer};

/// Calls `emit(a, b)` for each part of `[start, end)` outside every hole,
/// in address order. Holes may overlap, be empty or reach outside the
/// range; they are sorted here.
pub fn outside_holes(
    start: u64,
    end: u64,
    holes: &mut [(u64, u64)],
    mut emit: impl FnMut(u64, u64) -> Result<(), DumpError>,
) -> Result<(), DumpError> {
    holes.sort_unstable_by_key(|h| h.0);
    let mut cur = start;
    for &(a, b) in holes.iter() {
        if a >= b || b <= cur || a >= end {
            continue;
        }
        if a > cur {
            emit(cur, a)?;
        }
        cur = b;
    }
    if end > cur {
        emit(cur, end)?;
    }
    Ok(())
}

/// Most pieces one anonymous mapping is cut into.
const MAX_HOLES: usize = 512;

/// Calls `emit(start, end)` for each part of the anonymous mapping
/// `[start, end)` that is a root, as memcheck would see it:
///
/// - blocks glibc mapped for themselves (large allocations; the kernel
///   merges their mappings with a program's own neighbouring ones) are
///   left out, chunk header to chunk end, and the rest of the mapping is
///   scanned. A mapping holding any other tracked block is an allocator's
///   arena (glibc's per-thread heaps, whose free chunks keep stale words)
///   and is left out whole;
/// - the runtime's own mappings are left out;
/// - the stack of a thread that has ended (glibc caches it for reuse: its
///   descriptor is there, with a zero `tid`) is left out below the
///   thread's first frame, as memcheck, which marks popped frames
///   inaccessible, leaves it; its TLS and descriptor are still scanned.
pub fn anon_roots(start: u64, end: u64, index: &Index, mut emit: impl FnMut(u64, u64) -> Result<(), DumpError>) -> Result<(), DumpError> {
    let mut holes = [(0u64, 0u64); MAX_HOLES];
    let mut n = 0usize;
    let mut arena = false;
    let mut push = |h: (u64, u64), n: &mut usize| {
        if *n < MAX_HOLES {
            holes[*n] = h;
            *n += 1;
            true
        } else {
            false
        }
    };
    // Tracked blocks inside: glibc's mmapped chunks, or an arena.
    let blocks = index.as_slice();
    let mut i = blocks.partition_point(|e| e.addr < start);
    while i < blocks.len() && blocks[i].addr < end {
        let e = &blocks[i];
        i += 1;
        let Some(chunk) = mmapped_chunk(e.addr, e.size, start, end) else {
            arena = true;
            break;
        };
        if !push(chunk, &mut n) {
            arena = true;
            break;
        }
    }
    if arena {
        return Ok(());
    }
    sys::for_each_own(|a, b| {
        if a < end && start < b {
            push((a.max(start), b.min(end)), &mut n);
        }
    });
    let gap = |a: u64, b: u64| -> Result<(), DumpError> {
        // Within a gap, leave out the stacks of ended threads.
        let mut from = a;
        let mut r = Ok(());
        dead_stacks(a, b, |(x, y)| {
            if r.is_ok() && x > from {
                r = emit(from, x);
            }
            from = from.max(y);
        });
        r?;
        if b > from {
            emit(from, b)?;
        }
        Ok(())
    };
    outside_holes(start, end, &mut holes[..n], gap)
}

/// The chunk `[start, end)` of a block that glibc's malloc mapped for
/// itself, when `addr` is one: the chunk header before it has the
/// `IS_MMAPPED` bit, a page-multiple size that covers the block, and the
/// chunk lies in the mapping `[lo, hi)`.
fn mmapped_chunk(addr: u64, size: u64, lo: u64, hi: u64) -> Option<(u64, u64)> {
    const IS_MMAPPED: u64 = 2;
    let chunk = addr.checked_sub(16)?;
    if chunk < lo || addr % 16 != 0 {
        return None;
    }
    // SAFETY: [chunk, addr) lies in the readable mapping [lo, hi).
    let (prev, word) = unsafe { (core::ptr::read_volatile(chunk as *const u64), core::ptr::read_volatile((chunk + 8) as *const u64)) };
    let csize = word & !7;
    if word & IS_MMAPPED == 0 || csize % 4096 != 0 || csize < size + 16 {
        return None;
    }
    // A memalign'd chunk keeps its distance from the mapping's start in prev_size.
    let base = chunk.checked_sub(prev)?;
    let stop = chunk.checked_add(csize)?;
    (base >= lo && stop <= hi).then_some((base, stop))
}

/// Calls `hole(lo, hi)` for the stack part of each ended thread's stack in
/// `[start, end)`: glibc's descriptor of the thread (`struct pthread`, at
/// the top of its stack block, 64-byte aligned, whose first and third
/// words point to itself) with no `tid` (0 or -1). Only pages in memory
/// are looked at (a descriptor has been written), and only in mappings of
/// at most 1 GiB (a thread's stack; not a reservation of terabytes).
fn dead_stacks(start: u64, end: u64, mut hole: impl FnMut((u64, u64))) {
    let (tcb_size, tid_off) = stw::tcb_layout();
    if tid_off == 0 || end - start > 1 << 30 {
        return;
    }
    let tls = stw::static_tls_size();
    let mut pages = [0u8; 512];
    let mut below = start;
    let mut at = start;
    while at < end {
        let n = ((end - at) / 4096).min(pages.len() as u64) as usize;
        if n == 0 || sys::resident(at as *const u8, &mut pages[..n]).is_err() {
            return;
        }
        for (p, &r) in pages[..n].iter().enumerate() {
            if r & 1 == 0 {
                continue;
            }
            let page = at + p as u64 * 4096;
            for a in (page..page + 4096).step_by(64) {
                if a + tid_off + 4 > end {
                    break;
                }
                // SAFETY: `a` and its neighbours lie in a resident page of
                // the readable mapping [start, end) (checked above), aligned.
                let (w0, w2, tid) = unsafe {
                    (
                        core::ptr::read_volatile(a as *const u64),
                        core::ptr::read_volatile((a + 16) as *const u64),
                        core::ptr::read_volatile((a + tid_off) as *const u32),
                    )
                };
                // The kernel clears `tid` when the thread ends, and glibc
                // marks a joined thread's descriptor with -1.
                if w0 == a && w2 == a && (tid as i32) <= 0 {
                    // The stack grows down from below the static TLS, which
                    // ends at the descriptor's end (TLS_TCB_AT_TP).
                    let top = (a + tcb_size).saturating_sub(tls).max(below);
                    if top > below {
                        hole((below, top));
                    }
                    below = a + tcb_size.max(64);
                }
            }
        }
        at += n as u64 * 4096;
    }
}

/// Thread-local storage as a root, when it lies outside the dumped stack
/// (the main thread's static TLS sits in its own mapping; the helper
/// thread's stack is not dumped).
#[allow(clippy::too_many_arguments)]
pub fn tls_root(
    w: &mut Writer<'_, PipeSink>,
    scanner: &mut Scanner<'_>,
    maps: &Maps<'_>,
    own_tls: &OwnTls,
    fs: u64,
    stack_start: u64,
    stack_end: u64,
    tid: u32,
) -> Result<(), DumpError> {
    if fs == 0 || (fs >= stack_start && fs < stack_end) {
        return Ok(());
    }
    let Some((ms, me)) = maps.find(fs) else { return Ok(()) };
    // glibc (x86-64) puts the static TLS blocks right below the thread
    // pointer and the thread descriptor, with the DTV pointer, above it.
    let start = fs.saturating_sub(stw::static_tls_size()).max(ms);
    let end = (fs + 4096).min(me);
    let mut name = [0u8; 32];
    name[..4].copy_from_slice(b"tls ");
    let n = 4 + fmt_u64(tid.into(), &mut name[4..]);
    // The runtime's own thread-local variables are left out.
    let mut holes = own_tls.map(|(off, len)| if len == 0 { (0, 0) } else { (fs.wrapping_add(off), fs.wrapping_add(off) + len) });
    outside_holes(start, end, &mut holes, |a, b| {
        let info = Static { address: a, size: b - a, module: raw::NO_MODULE, name: &name[..n] };
        scanner.region(w, a, b - a, |w, c| w.static_root(&info, c))
    })
}
