//! Memory the runtime maps for itself: anonymous and sparse mappings,
//! reservations, advice, residency, and the registry of the runtime's own
//! mappings (never roots of a dump).

// The one room where the C library is called (see `sys`).
#![allow(clippy::disallowed_methods)]

use super::*;

/// The runtime's own mappings (its tables hold heap addresses, so a dump
/// must never scan them as roots): a fixed, lock-free registry.
const OWN_MAX: usize = 1024;
static OWN: [(core::sync::atomic::AtomicU64, core::sync::atomic::AtomicU64); OWN_MAX] =
    [const { (core::sync::atomic::AtomicU64::new(0), core::sync::atomic::AtomicU64::new(0)) }; OWN_MAX];

fn register(p: *mut u8, len: usize) {
    use core::sync::atomic::Ordering;
    for (a, l) in &OWN {
        if a.compare_exchange(0, p as u64, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            l.store(len as u64, Ordering::Release);
            return;
        }
    }
}

fn unregister(p: *mut u8) {
    use core::sync::atomic::Ordering;
    for (a, l) in &OWN {
        if a.load(Ordering::Acquire) == p as u64 {
            l.store(0, Ordering::Release);
            a.store(0, Ordering::Release);
            return;
        }
    }
}

/// Whether `[start, end)` overlaps one of the runtime's own mappings.
pub fn overlaps_own(start: u64, end: u64) -> bool {
    use core::sync::atomic::Ordering;
    OWN.iter().any(|(a, l)| {
        let a = a.load(Ordering::Acquire);
        let l = l.load(Ordering::Acquire);
        a != 0 && a < end && start < a + l.max(1)
    })
}

/// Calls `f(a, b)` for each part of `[start, end)` outside the runtime's
/// own mappings, in address order. (The kernel merges an anonymous
/// mapping of the program's with one of ours beside it into one line of
/// /proc/self/maps: the program's part is still the program's.)
pub fn for_each_outside_own(start: u64, end: u64, mut f: impl FnMut(u64, u64)) {
    use core::sync::atomic::Ordering;
    let mut cur = start;
    while cur < end {
        // The own mapping overlapping [cur, end) that starts first.
        let mut first: Option<(u64, u64)> = None;
        for (a, l) in &OWN {
            let a = a.load(Ordering::Acquire);
            let l = l.load(Ordering::Acquire);
            if a != 0 && l != 0 && a < end && a + l > cur && first.is_none_or(|(fa, _)| a < fa) {
                first = Some((a, a + l));
            }
        }
        match first {
            None => {
                f(cur, end);
                return;
            }
            Some((a, b)) => {
                if a > cur {
                    f(cur, a);
                }
                cur = b;
            }
        }
    }
}

/// Calls `f(start, end)` for each of the runtime's own mappings.
pub fn for_each_own(mut f: impl FnMut(u64, u64)) {
    use core::sync::atomic::Ordering;
    for (a, l) in &OWN {
        let a = a.load(Ordering::Acquire);
        let l = l.load(Ordering::Acquire);
        if a != 0 && l != 0 {
            f(a, a + l);
        }
    }
}

/// Anonymous private read-write mapping of `len` bytes, zero-filled.
pub fn mmap_anon(len: usize) -> Result<*mut u8, i32> {
    map(len, libc::MAP_PRIVATE)
}

/// [`mmap_anon`] with its pages allocated at once (`MAP_POPULATE`): for
/// tables that are written all over right away. Faulting them in one by
/// one costs, for each page, a read fault mapping the shared zero page and
/// then a copy-on-write fault with a TLB shootdown on every core.
pub fn mmap_anon_populated(len: usize) -> Result<*mut u8, i32> {
    map(len, libc::MAP_PRIVATE | libc::MAP_POPULATE)
}

/// [`mmap_anon`] without a commit charge (`MAP_NORESERVE`): address space
/// for sparse tables, whose pages come on first write.
pub fn mmap_sparse(len: usize) -> Result<*mut u8, i32> {
    map(len, libc::MAP_PRIVATE | libc::MAP_NORESERVE)
}

/// [`mmap_sparse`] at an address that is a multiple of `align` (a power
/// of two, a multiple of the page size): maps `align` more and gives back
/// the ends.
pub fn mmap_sparse_aligned(len: usize, align: usize) -> Result<*mut u8, i32> {
    let p = mmap_sparse(len + align)? as usize;
    let start = (p + align - 1) & !(align - 1);
    // SAFETY: both ends lie inside the mapping just made, which nothing
    // else knows of; what stays is [start, start + len).
    unsafe {
        if start > p {
            libc::munmap(p as *mut libc::c_void, start - p);
        }
        if p + align > start {
            libc::munmap((start + len) as *mut libc::c_void, p + align - start);
        }
    }
    unregister(p as *mut u8);
    register(start as *mut u8, len);
    Ok(start as *mut u8)
}

/// `madvise` with one of the advices below, which change how a range is
/// backed or whether it goes into a core dump, never its contents.
fn advise(p: usize, len: usize, advice: i32) -> Result<(), i32> {
    // SAFETY: see above; a range the kernel cannot advise fails with an
    // errno and is left as it was.
    if unsafe { libc::madvise(p as *mut libc::c_void, len, advice) } != 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// Leaves `[p, p + len)` out of core dumps (`MADV_DONTDUMP`).
pub fn dont_dump(p: *mut u8, len: usize) -> Result<(), i32> {
    advise(p as usize, len, libc::MADV_DONTDUMP)
}

/// Asks for transparent huge pages for `[p, p + len)` (`MADV_HUGEPAGE`):
/// only how its future pages are mapped.
pub fn huge_pages(p: usize, len: usize) -> Result<(), i32> {
    advise(p, len, libc::MADV_HUGEPAGE)
}

/// Whether the system gives transparent huge pages to ranges that ask
/// for them (`always` or `madvise` in
/// /sys/kernel/mm/transparent_hugepage/enabled, not `never`).
pub fn thp_on_request() -> bool {
    let mut buf = [0u8; 128];
    match read_file(c"/sys/kernel/mm/transparent_hugepage/enabled", &mut buf) {
        Ok(n) => {
            let s = &buf[..n];
            s.windows(8).any(|w| w == b"[always]") || s.windows(9).any(|w| w == b"[madvise]")
        }
        Err(_) => false,
    }
}

/// Address space reserved for later use (`PROT_NONE`, no memory and no
/// commit charge), recorded as the runtime's own; parts are made usable by
/// [`commit`].
pub fn reserve(len: usize) -> Result<*mut u8, i32> {
    // SAFETY: an anonymous mapping with no address hint touches no existing
    // memory; failure is reported as MAP_FAILED.
    let p = unsafe {
        libc::mmap(core::ptr::null_mut(), len, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE, -1, 0)
    };
    if p == libc::MAP_FAILED {
        Err(errno())
    } else {
        register(p.cast(), len);
        Ok(p.cast())
    }
}

/// Makes `[p, p+len)` of a [`reserve`]d region readable and writable.
/// Neighbouring committed parts merge into one mapping.
///
/// # Safety
/// The range must lie inside a region returned by [`reserve`].
pub unsafe fn commit(p: *mut u8, len: usize) -> Result<(), i32> {
    // SAFETY: the caller guarantees the range is our own reservation, which
    // nothing else uses.
    if unsafe { libc::mprotect(p.cast(), len, libc::PROT_READ | libc::PROT_WRITE) } != 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// `madvise(MADV_COLLAPSE)` (Linux 6.1): makes `[p, p + len)` (2 MiB
/// aligned) transparent huge pages now, copying its small pages.
pub fn collapse(p: u64, len: u64) -> Result<(), i32> {
    const MADV_COLLAPSE: i32 = 25;
    advise(p as usize, len as usize, MADV_COLLAPSE)
}

/// Which pages of `[p, p + 4096 * out.len())` are in memory (`mincore`):
/// bit 0 of each byte of `out`.
pub fn resident(p: *const u8, out: &mut [u8]) -> Result<(), i32> {
    // SAFETY: mincore only writes `out`, one byte per page of the range;
    // an unmapped range fails with ENOMEM.
    if unsafe { libc::mincore(p as *mut libc::c_void, out.len() * 4096, out.as_mut_ptr()) } != 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// Bytes of `[p, p + len)` in memory, counted with `mincore` a chunk of
/// `pages` at a time (a range it refuses counts as none).
pub fn resident_bytes(p: *const u8, len: usize, pages: &mut [u8]) -> u64 {
    let mut total = 0;
    let mut off = 0;
    while off < len {
        let n = ((len - off).div_ceil(4096)).min(pages.len());
        if resident(p.wrapping_add(off), &mut pages[..n]).is_ok() {
            total += pages[..n].iter().filter(|&&r| r & 1 != 0).count() as u64 * 4096;
        }
        off += n * 4096;
    }
    total
}

/// An anonymous read-write mapping, recorded as the runtime's own.
fn map(len: usize, sharing: i32) -> Result<*mut u8, i32> {
    // SAFETY: an anonymous mapping with no address hint touches no existing
    // memory; failure is reported as MAP_FAILED.
    let p = unsafe { libc::mmap(core::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, sharing | libc::MAP_ANONYMOUS, -1, 0) };
    if p == libc::MAP_FAILED {
        Err(errno())
    } else {
        register(p.cast(), len);
        Ok(p.cast())
    }
}

/// Unmaps a region obtained from [`mmap_anon`].
///
/// # Safety
/// `p..p+len` must be a mapping this module returned, no longer used.
pub unsafe fn munmap(p: *mut u8, len: usize) {
    unregister(p);
    // SAFETY: the caller guarantees the region is ours and unused.
    unsafe { libc::munmap(p.cast(), len) };
}

/// Memory of the runtime's own, mapped from the kernel (never the tracked
/// heap) and recorded as the runtime's (never a root); unmapped when
/// dropped.
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a Mapping owns its range like a Box owns its allocation; the
// runtime hands one to one user at a time (the dumper holds its scratch
// under its spin flag).
unsafe impl Send for Mapping {}

impl Mapping {
    /// `len` bytes of private anonymous memory, zeroed.
    pub fn anon(len: usize) -> Result<Mapping, i32> {
        map(len, libc::MAP_PRIVATE).map(|ptr| Mapping { ptr, len })
    }

    /// `len` bytes of anonymous memory shared with forked children, zeroed.
    pub fn shared(len: usize) -> Result<Mapping, i32> {
        map(len, libc::MAP_SHARED).map(|ptr| Mapping { ptr, len })
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes, alive while `self` is.
        unsafe { core::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The bytes, to write.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; `&mut self` makes the view unique.
        unsafe { core::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// The mapping as `T`s, as many as fit.
    ///
    /// # Safety
    /// Every bit pattern the mapping may hold (zeros, or `T`s written
    /// before) is a valid `T`, and `T` needs at most page alignment.
    pub unsafe fn typed_mut<T: Copy>(&mut self) -> &mut [T] {
        // SAFETY: page-aligned memory of `len` bytes, unique through
        // `&mut self`; the caller vouches for T's bit patterns.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.cast::<T>(), self.len / core::mem::size_of::<T>().max(1)) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ours (made by `map`), and no view outlives `self`.
        unsafe { munmap(self.ptr, self.len) };
    }
}
