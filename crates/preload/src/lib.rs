//! `libheapdump_preload.so`: heapdump for programs nobody wants to rebuild.
//!
//! Among its siblings: the C face of the `heapdump` runtime (every decision
//! is the runtime's, through `heapdump::hooks`); the `heapdump` command
//! carries it (built with panic = "abort") and preloads it for `run`.
//!
//! Loaded with `LD_PRELOAD` (as `heapdump run` does), it interposes the C
//! allocation functions, forwards each call to the real allocator, and
//! feeds the tracker of the `heapdump` crate: the live table, the sites,
//! the stop-the-world dumps and their triggers are that crate's, configured
//! by the same `HEAPDUMP_*` variables. C++ `operator new`/`delete`
//! (libstdc++ implements them over `malloc`/`free`) and Rust's system
//! allocator (`malloc`, `posix_memalign`) are seen through these symbols.
//!
//! The real allocator is found with `dlsym(RTLD_NEXT, …)`. `dlsym` may
//! itself allocate (glibc's `dlerror` state uses `calloc`); allocations made
//! while the symbols are being resolved are served from a static arena,
//! tracked like any other block, and recognised (and not passed on) when
//! freed. Written by hand because it runs inside the host's allocator:
//! nothing here allocates, panics or unwinds (a panic in an `extern "C"`
//! function aborts).
#![deny(missing_docs)]
// The C face of the runtime: it calls the C library it interposes
// (dlsym, errno) itself; the runtime keeps its own calls in its sys/ room.
#![allow(clippy::disallowed_methods)]

use core::ffi::c_void;
use core::sync::atomic::{AtomicPtr, AtomicU8, AtomicUsize, Ordering};
use heapdump::hooks;

type MallocFn = unsafe extern "C" fn(usize) -> *mut c_void;
type FreeFn = unsafe extern "C" fn(*mut c_void);
type CallocFn = unsafe extern "C" fn(usize, usize) -> *mut c_void;
type ReallocFn = unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void;
type MemalignFn = unsafe extern "C" fn(usize, usize) -> *mut c_void;
type UsableFn = unsafe extern "C" fn(*mut c_void) -> usize;

struct Real {
    malloc: AtomicPtr<c_void>,
    free: AtomicPtr<c_void>,
    calloc: AtomicPtr<c_void>,
    realloc: AtomicPtr<c_void>,
    memalign: AtomicPtr<c_void>,
    usable: AtomicPtr<c_void>,
}

static REAL: Real = Real {
    malloc: AtomicPtr::new(core::ptr::null_mut()),
    free: AtomicPtr::new(core::ptr::null_mut()),
    calloc: AtomicPtr::new(core::ptr::null_mut()),
    realloc: AtomicPtr::new(core::ptr::null_mut()),
    memalign: AtomicPtr::new(core::ptr::null_mut()),
    usable: AtomicPtr::new(core::ptr::null_mut()),
};

/// 0: unresolved, 1: resolving (bootstrap arena in use), 2: resolved.
static RESOLVED: AtomicU8 = AtomicU8::new(0);

// --- the bootstrap arena -------------------------------------------------------

const ARENA: usize = 256 * 1024;

#[repr(C, align(64))]
struct Arena([u8; ARENA]);

static mut BOOT: Arena = Arena([0; ARENA]);
static BOOT_USED: AtomicUsize = AtomicUsize::new(0);

fn arena_base() -> usize {
    core::ptr::addr_of!(BOOT) as usize
}

fn in_arena(p: *mut c_void) -> bool {
    let a = p as usize;
    a >= arena_base() && a < arena_base() + ARENA
}

/// Serves an allocation from the arena (a bump allocator; 16-byte aligned,
/// the size stored in the word before the block for `realloc`).
fn arena_alloc(size: usize, align: usize) -> *mut c_void {
    let align = align.max(16);
    let mut cur = BOOT_USED.load(Ordering::Relaxed);
    loop {
        let start = (arena_base() + cur + 16).next_multiple_of(align) - arena_base();
        let Some(end) = start.checked_add(size) else { return core::ptr::null_mut() };
        if end > ARENA {
            return core::ptr::null_mut();
        }
        if BOOT_USED.compare_exchange(cur, end, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            let p = (arena_base() + start) as *mut usize;
            // SAFETY: start >= 16 past the previous end, so the word before
            // the block lies inside the arena and belongs to this block.
            unsafe { p.sub(1).write(size) };
            return p.cast();
        }
        cur = BOOT_USED.load(Ordering::Relaxed);
    }
}

fn arena_size(p: *mut c_void) -> usize {
    // SAFETY: p came from arena_alloc, which wrote the size before it.
    unsafe { (p as *const usize).sub(1).read() }
}

// --- resolution -------------------------------------------------------------------

#[cold]
fn resolve() {
    if RESOLVED.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire).is_err() {
        // Another thread resolves; the arena serves us meanwhile (the caller
        // checks RESOLVED again).
        return;
    }
    let sym = |name: &core::ffi::CStr| {
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name.
        unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) }
    };
    REAL.malloc.store(sym(c"malloc"), Ordering::Release);
    REAL.free.store(sym(c"free"), Ordering::Release);
    REAL.calloc.store(sym(c"calloc"), Ordering::Release);
    REAL.realloc.store(sym(c"realloc"), Ordering::Release);
    REAL.memalign.store(sym(c"memalign"), Ordering::Release);
    REAL.usable.store(sym(c"malloc_usable_size"), Ordering::Release);
    RESOLVED.store(2, Ordering::Release);
}

#[inline]
fn ready() -> bool {
    let r = RESOLVED.load(Ordering::Acquire);
    if r == 2 {
        return true;
    }
    if r == 0 {
        resolve();
    }
    RESOLVED.load(Ordering::Acquire) == 2
}

macro_rules! real {
    ($field:ident, $ty:ty) => {{
        let p = REAL.$field.load(Ordering::Acquire);
        if p.is_null() {
            None
        } else {
            // SAFETY: set by `resolve` from dlsym of the symbol of this
            // type; callers check `ready()` first, and a null result (no
            // such symbol) is mapped to None.
            Some(unsafe { core::mem::transmute::<*mut c_void, $ty>(p) })
        }
    }};
}

/// Frees in the real allocator (or nowhere, for arena blocks).
fn real_free(p: *mut c_void) {
    if p.is_null() || in_arena(p) {
        return;
    }
    if let Some(f) = real!(free, FreeFn) {
        // SAFETY: p came from the real allocator.
        unsafe { f(p) }
    }
}

fn postponed_free(p: *mut u8, _size: usize, _align: usize) {
    real_free(p.cast());
}

/// Allocates `size` bytes aligned to `align` (`align <= 16` means malloc's
/// own alignment) from the real allocator, or the arena while resolving.
fn raw_alloc(size: usize, align: usize, zeroed: bool) -> *mut c_void {
    if !ready() {
        return arena_alloc(size, align); // the arena is zeroed and never reused
    }
    let (calloc, malloc, memalign) = (real!(calloc, CallocFn), real!(malloc, MallocFn), real!(memalign, MemalignFn));
    // SAFETY: the real functions with their documented arguments.
    unsafe {
        if align <= 16 {
            if zeroed {
                calloc.map_or(core::ptr::null_mut(), |f| f(1, size))
            } else {
                malloc.map_or(core::ptr::null_mut(), |f| f(size))
            }
        } else {
            let p = memalign.map_or(core::ptr::null_mut(), |f| f(align, size));
            if zeroed && !p.is_null() {
                core::ptr::write_bytes(p.cast::<u8>(), 0, size);
            }
            p
        }
    }
}

/// The tracked allocation path shared by every entry point: the runtime's
/// one sequence (`heapdump::hooks::allocate`), `Tracked`'s too.
#[inline]
fn tracked_alloc(size: usize, align: usize, zeroed: bool) -> *mut c_void {
    let p = hooks::allocate(size, align.max(1), || raw_alloc(size, align, zeroed).cast(), &postponed_free);
    if p.is_null() {
        set_errno(libc::ENOMEM);
    }
    p.cast()
}

fn set_errno(e: i32) {
    // SAFETY: this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

// --- the C entry points ------------------------------------------------------------

/// `dlclose(3)`, forwarded; then the unwinder forgets the rules it cached,
/// since the unloaded object's addresses may be reused by other code.
///
/// # Safety
/// As the C function.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> i32 {
    static REAL_DLCLOSE: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
    let mut f = REAL_DLCLOSE.load(Ordering::Acquire);
    if f.is_null() {
        // SAFETY: dlsym with a NUL-terminated name.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, c"dlclose".as_ptr()) };
        REAL_DLCLOSE.store(f, Ordering::Release);
    }
    if f.is_null() {
        return -1;
    }
    // SAFETY: the next `dlclose` in the lookup order has this signature.
    let real: unsafe extern "C" fn(*mut c_void) -> i32 = unsafe { core::mem::transmute(f) };
    // SAFETY: forwarded with the caller's argument.
    let r = unsafe { real(handle) };
    hooks::code_unloaded();
    r
}

/// The program's `sigaction`: with `HEAPDUMP_ON_FATAL=1` the runtime keeps
/// its handler of the fatal signals in front and records the program's, to
/// call after the dump; otherwise the C library's, unchanged.
///
/// # Safety
/// As `sigaction(2)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn sigaction(sig: i32, act: *const libc::sigaction, old: *mut libc::sigaction) -> i32 {
    // SAFETY: the caller's pointers, as sigaction(2) takes them.
    unsafe { heapdump::hooks::sigaction(sig, act, old) }
}

/// The program's `signal`, through [`sigaction`] (glibc's own `signal`
/// calls its internal sigaction, which the interposer would not see).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn signal(sig: i32, handler: libc::sighandler_t) -> libc::sighandler_t {
    heapdump::hooks::signal(sig, handler)
}

/// `bsd_signal`: `signal`'s semantics under another name.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn bsd_signal(sig: i32, handler: libc::sighandler_t) -> libc::sighandler_t {
    heapdump::hooks::signal(sig, handler)
}

/// `malloc(3)`.
///
/// # Safety
/// As the C function.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    tracked_alloc(size, 1, false)
}

/// `calloc(3)`: `n * size` zeroed bytes; overflow fails with ENOMEM.
///
/// # Safety
/// As the C function.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
    match n.checked_mul(size) {
        Some(total) => tracked_alloc(total, 1, true),
        None => {
            set_errno(libc::ENOMEM);
            core::ptr::null_mut()
        }
    }
}

/// `free(3)`.
///
/// # Safety
/// As the C function.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn free(p: *mut c_void) {
    if p.is_null() {
        return;
    }
    hooks::deallocate(p.cast(), || real_free(p), &postponed_free);
}

/// `cfree`, an old alias of free.
///
/// # Safety
/// As free.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn cfree(p: *mut c_void) {
    // SAFETY: `cfree` takes what `free` takes: the caller's pointer.
    unsafe { free(p) }
}

/// `realloc(3)`.
///
/// # Safety
/// As the C function.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    if p.is_null() {
        return tracked_alloc(size, 1, false);
    }
    if size == 0 {
        // glibc frees and returns null.
        // SAFETY: `realloc(p, 0)` frees `p`, a block of this allocator (the
        // caller's contract).
        unsafe { free(p) };
        return core::ptr::null_mut();
    }
    // Arena blocks cannot be passed on, nor anything before the real
    // functions are known: moved by hand.
    let by_hand = in_arena(p) || !ready();
    let with = hooks::Realloc {
        new: || raw_alloc(size, 1, false).cast(),
        // SAFETY: p came from the real allocator (not the arena: that is
        // moved by hand).
        realloc: || {
            let re = real!(realloc, ReallocFn);
            // SAFETY: `p` came from the real allocator (not the arena: that is
            // moved by hand), and `f` is its realloc.
            unsafe { re.map_or(core::ptr::null_mut(), |f| f(p, size)) }.cast()
        },
        free_old: || real_free(p),
    };
    let old_size = || if in_arena(p) { arena_size(p) } else { usable_size(p) };
    let q = hooks::reallocate(p.cast(), old_size, size, by_hand, with, &postponed_free);
    if q.is_null() {
        set_errno(libc::ENOMEM);
    }
    q.cast()
}

/// `reallocarray(3)`.
///
/// # Safety
/// As the C function.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void {
    match n.checked_mul(size) {
        // SAFETY: the caller's pointer and total size, as realloc(3) takes
        // them.
        Some(total) => unsafe { realloc(p, total) },
        None => {
            set_errno(libc::ENOMEM);
            core::ptr::null_mut()
        }
    }
}

fn valid_align(align: usize) -> bool {
    align.is_power_of_two() && align >= core::mem::size_of::<usize>()
}

/// `posix_memalign(3)`.
///
/// # Safety
/// As the C function.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> i32 {
    if !valid_align(align) {
        return libc::EINVAL;
    }
    let p = tracked_alloc(size, align, false);
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: the caller passes a valid out-pointer.
    unsafe { out.write(p) };
    0
}

/// `aligned_alloc(3)`.
///
/// # Safety
/// As the C function.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    if !align.is_power_of_two() {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    }
    tracked_alloc(size, align, false)
}

/// `memalign(3)`.
///
/// # Safety
/// As the C function.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    if !align.is_power_of_two() {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    }
    tracked_alloc(size, align, false)
}

fn page() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// `valloc(3)`: page-aligned.
///
/// # Safety
/// As the C function.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn valloc(size: usize) -> *mut c_void {
    tracked_alloc(size, page(), false)
}

/// `pvalloc(3)`: page-aligned, size rounded up to whole pages.
///
/// # Safety
/// As the C function.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn pvalloc(size: usize) -> *mut c_void {
    let pg = page();
    match size.max(1).checked_next_multiple_of(pg) {
        Some(s) => tracked_alloc(s, pg, false),
        None => {
            set_errno(libc::ENOMEM);
            core::ptr::null_mut()
        }
    }
}

fn usable_size(p: *mut c_void) -> usize {
    if p.is_null() {
        return 0;
    }
    if in_arena(p) {
        return arena_size(p);
    }
    let u = real!(usable, UsableFn);
    // SAFETY: p came from the real allocator.
    unsafe { u.map_or(0, |f| f(p)) }
}

/// `malloc_usable_size(3)`.
///
/// # Safety
/// As the C function.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn malloc_usable_size(p: *mut c_void) -> usize {
    if !ready() && !in_arena(p) {
        return 0;
    }
    usable_size(p)
}
