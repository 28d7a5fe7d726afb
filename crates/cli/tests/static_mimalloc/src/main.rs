//! Allocates through the `mimalloc` crate's static copy (or, with the
//! `system` feature, glibc's malloc: the same program for valgrind) as
//! tests/c/leaks.c does: one block still reachable, one only through an
//! interior pointer, a reachable list of three, one lost block, a lost
//! list of three, a lost cycle of two, a freed block; and 1000 kept boxes
//! (several pages). With STOP_AT_END set, it says "stopped PID" on stderr
//! at exit and stops itself (SIGSTOP) for a capture; SIGCONT lets it exit 0.
//! Before it stops, it says how many blocks mimalloc itself counts in use.
//! With the argument `threads`, two threads keep, lose and free blocks too.
//! With DAMAGE=loop or DAMAGE=capacity, it damages its heap and stops at
//! once.
use std::alloc::{alloc, alloc_zeroed, dealloc, Layout};
use std::ptr::null_mut;

#[cfg(not(feature = "system"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

static KEEP: std::sync::Mutex<Vec<Box<[u8; 100]>>> = std::sync::Mutex::new(Vec::new());

#[repr(C)]
struct Node {
    next: *mut Node,
    pad: [u8; 40],
}

// Kept (`used`): the optimizer must neither drop them nor their stores.
#[used]
static mut REACHABLE: *mut u8 = null_mut();
#[used]
static mut INTERIOR: *mut u8 = null_mut();
#[used]
static mut KEPT_LIST: *mut Node = null_mut();

extern "C" {
    fn raise(sig: i32) -> i32;
    fn atexit(f: extern "C" fn()) -> i32;
    fn getpid() -> i32;
    fn write(fd: i32, buf: *const u8, n: usize) -> isize;
}

/// mimalloc's own count of the blocks in use in the main heap (its
/// `mi_heap_visit_blocks`, which allocates nothing): an oracle for the
/// walk from outside.
#[cfg(not(feature = "system"))]
mod own_count {
    use std::sync::atomic::{AtomicUsize, Ordering};

    static N: AtomicUsize = AtomicUsize::new(0);

    type Visit = extern "C" fn(*const u8, *const u8, *mut u8, usize, *mut u8) -> bool;

    extern "C" fn visit(_heap: *const u8, _area: *const u8, block: *mut u8, _size: usize, _arg: *mut u8) -> bool {
        if !block.is_null() {
            N.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    extern "C" {
        #[cfg(not(feature = "v2"))]
        fn mi_heap_main() -> *mut u8;
        #[cfg(feature = "v2")]
        fn mi_heap_get_default() -> *mut u8;
        fn mi_heap_visit_blocks(heap: *mut u8, blocks: bool, visitor: Visit, arg: *mut u8) -> bool;
    }

    pub fn count() -> usize {
        // SAFETY: the main heap (3.x) or this thread's default heap (2.x),
        // visited by a function that only counts.
        unsafe {
            #[cfg(not(feature = "v2"))]
            let heap = mi_heap_main();
            #[cfg(feature = "v2")]
            let heap = mi_heap_get_default();
            mi_heap_visit_blocks(heap, true, visit, std::ptr::null_mut());
        }
        N.load(Ordering::Relaxed)
    }
}

/// Writes `args` as one line on stderr, without allocating.
fn say(args: std::fmt::Arguments) {
    use std::io::Write;
    let mut line = [0u8; 64];
    let mut w = &mut line[..];
    let _ = w.write_fmt(args);
    let n = 64 - w.len();
    // SAFETY: `line` holds `n` bytes.
    unsafe { write(2, line.as_ptr(), n) };
}

/// At exit (after main and the runtime's cleanup, as valgrind sees the
/// program when it checks for leaks, and as tests/c/stop_at_end.c stops):
/// "mimalloc counts N" (not for the `system` build), "stopped PID" on
/// stderr, then SIGSTOP. Allocates nothing.
extern "C" fn stop_at_end() {
    #[cfg(not(feature = "system"))]
    say(format_args!("mimalloc counts {}\n", own_count::count()));
    stop();
}

/// "stopped PID" on stderr, then SIGSTOP.
fn stop() {
    // SAFETY: getpid has no preconditions.
    say(format_args!("stopped {}\n", unsafe { getpid() }));
    // SAFETY: raise only sends SIGSTOP (19) to this process.
    unsafe { raise(19) };
}

fn bytes(n: usize) -> Layout {
    Layout::from_size_align(n, 8).unwrap()
}

/// A block of `n` bytes (zeroed), which the optimizer may not elide.
fn new(n: usize, zeroed: bool) -> *mut u8 {
    // SAFETY: `n` is not zero.
    std::hint::black_box(unsafe {
        if zeroed {
            alloc_zeroed(bytes(n))
        } else {
            alloc(bytes(n))
        }
    })
}

#[inline(never)]
fn make() {
    // SAFETY: every block is allocated with a non-zero size and written
    // only within it; the nodes are zeroed, so their `next` is null until set.
    // (Every block kept or lost is zeroed: a recycled block's old words
    // would be pointers, which differ between allocators.)
    unsafe {
        REACHABLE = new(100, true);
        INTERIOR = new(200, true).add(16);
        for _ in 0..3 {
            let n = new(48, true) as *mut Node;
            (*n).next = KEPT_LIST;
            KEPT_LIST = n;
        }
        // Definitely lost: a single block.
        new(300, true);
        // A definitely lost head with two indirectly lost blocks.
        let h = new(48, true) as *mut Node;
        (*h).next = new(48, true) as *mut Node;
        (*(*h).next).next = new(48, true) as *mut Node;
        // A lost cycle of two.
        let x = new(48, true) as *mut Node;
        let y = new(48, true) as *mut Node;
        (*x).next = y;
        (*y).next = x;
        // Freed: not reported.
        let f = new(5000, false);
        dealloc(std::hint::black_box(f), bytes(5000));
    }
}

#[inline(never)]
fn scrub() {
    let mut buf = [0u8; 16384];
    std::hint::black_box(&mut buf);
    for b in buf.iter_mut() {
        // SAFETY: a write through a valid reference.
        unsafe { std::ptr::write_volatile(b, 0) };
    }
}

/// Damages the heap as `how` says, for the walk's refusals: `loop`, two
/// freed blocks' list made a loop; `capacity`, a page claiming more blocks
/// than its memory holds (its `capacity` and `reserved`: 2.3.2's in its
/// slice of the segment's 32 MiB-aligned header, slices of 96 bytes from
/// offset 288; 3.3.2's in the metadata the page map names).
#[inline(never)]
fn damage(how: &str) {
    let a = new(48, false);
    let b = new(48, false);
    // SAFETY: deliberate damage of the allocator's own words (a test
    // fixture, stopped right after and never resumed): the first word of
    // a freed block, or a page's counts, written in place.
    unsafe {
        match how {
            "loop" => {
                dealloc(a, bytes(48));
                dealloc(b, bytes(48));
                // The page's local free list is b -> a -> ...: a -> b loops.
                std::ptr::write_volatile(a as *mut *mut u8, b);
            }
            #[cfg(feature = "system")]
            _ => {}
            #[cfg(feature = "v2")]
            _ => {
                let segment = a as usize & !((32 << 20) - 1);
                let slice = (a as usize - segment) >> 16;
                let page = (segment + 288 + slice * 96) as *mut u16;
                std::ptr::write_volatile(page.add(5), 0xfff0); // capacity
                std::ptr::write_volatile(page.add(6), 0xfff0); // reserved
            }
            // 3.x: the page's metadata (120 bytes, `capacity` and
            // `reserved` at bytes 18 and 20) in its arena's `pages_meta`
            // (at byte 136 of the arena, which starts at one of the
            // slices below the block, all of one mapping): the first
            // slice down whose `pages_meta` entry for the block's slice
            // names blocks of its size starting in that slice.
            #[cfg(not(any(feature = "v2", feature = "system")))]
            _ => {
                extern "C" {
                    fn mi_usable_size(p: *const u8) -> usize;
                }
                let slice = a as usize & !0xffff;
                let mut arena = slice;
                loop {
                    let meta = *((arena + 136) as *const usize);
                    if meta > arena && meta < slice {
                        let page = meta + 120 * ((slice - arena) >> 16);
                        let start = *((page + 48) as *const usize);
                        if *((page + 40) as *const usize) == mi_usable_size(a) && start & !0xffff == slice {
                            std::ptr::write_volatile((page + 18) as *mut u16, 0xfff0);
                            std::ptr::write_volatile((page + 20) as *mut u16, 0xfff0);
                            break;
                        }
                    }
                    arena -= 0x10000;
                }
            }
        }
    }
}

fn main() {
    if let Some(how) = std::env::var_os("DAMAGE") {
        damage(how.to_str().unwrap_or(""));
        stop();
        return;
    }
    if std::env::var_os("STOP_AT_END").is_some() {
        // SAFETY: registers a function that lives as long as the program.
        unsafe { atexit(stop_at_end) };
    }
    KEEP.lock().unwrap().extend((0..1000).map(|i| Box::new([i as u8; 100])));
    if std::env::args().nth(1).as_deref() == Some("threads") {
        threads();
    }
    make();
    scrub();
}

/// Two threads, each keeping 200 boxes of its own (reachable through
/// KEEP), losing one, and freeing 100 boxes the main thread allocated (the
/// other threads' free lists); they end before the program does (their
/// pages abandoned, still holding their blocks).
#[inline(never)]
fn threads() {
    let handles: Vec<_> = (0..2)
        .map(|t| {
            let given: Vec<Box<[u8; 100]>> = (0..100).map(|i| Box::new([(i + t) as u8; 100])).collect();
            std::thread::spawn(move || {
                let mine: Vec<Box<[u8; 100]>> = (0..200).map(|i| Box::new([i as u8; 100])).collect();
                KEEP.lock().unwrap().extend(mine);
                // Zeroed: a recycled block's old words would be pointers.
                new(64, true);
                drop(std::hint::black_box(given));
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}
