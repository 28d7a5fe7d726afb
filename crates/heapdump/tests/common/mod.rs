//! Shared scaffolding for the runtime's test binaries. They run without
//! libtest's harness so that no test-runner thread allocates concurrently
//! with the exact accounting checks.
#![allow(dead_code)]

use heapdump_format::{ContentsRef, Dump, Record};
use std::collections::BTreeMap;

/// Runs the named tests (or, in a child run, the child scenario) and
/// prints a closing `N passed, M failed` line.
pub fn run(tests: &[(&str, fn())]) {
    if let Ok(name) = std::env::var("HEAPDUMP_TEST_CHILD") {
        for (n, f) in tests {
            if *n == name {
                f();
                std::process::exit(0);
            }
        }
        eprintln!("unknown child scenario {name}");
        std::process::exit(3);
    }
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let (mut passed, mut failed) = (0, 0);
    for (name, f) in tests {
        if name.starts_with("child_") || (!filter.is_empty() && !filter.iter().any(|x| name.contains(x.as_str()))) {
            continue;
        }
        let r = std::panic::catch_unwind(f);
        match r {
            Ok(()) => {
                println!("test {name} ... ok");
                passed += 1;
            }
            Err(_) => {
                println!("test {name} ... FAILED");
                failed += 1;
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}

/// Runs this test binary again as a child scenario with extra environment.
pub fn child(name: &str, env: &[(&str, &str)]) -> std::process::Output {
    let exe = std::env::current_exe().unwrap();
    let mut c = std::process::Command::new(exe);
    // The test process is the children's runner, not their traced parent.
    c.env("HEAPDUMP_TEST_CHILD", name);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// A scratch directory unique to this process and label.
pub fn scratch(label: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("heapdump-test-{}-{label}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// What a test needs from a dump.
#[derive(Default, Debug)]
pub struct Parsed {
    pub reason: String,
    pub mode: String,
    pub allocs: BTreeMap<u64, (u64, u32)>,
    /// Full-mode contents by address.
    pub contents: BTreeMap<u64, Vec<u8>>,
    /// Compact-mode pointer words (offset, value) by block address.
    pub pointers: BTreeMap<u64, Vec<(u64, u64)>>,
    /// Pointer values found in each thread's stack and registers, by tid.
    pub thread_ptrs: BTreeMap<u32, Vec<u64>>,
    pub thread_flags: BTreeMap<u32, u32>,
    pub thread_names: BTreeMap<u32, String>,
    pub static_ptrs: Vec<u64>,
    pub sites: BTreeMap<u32, Vec<u64>>,
    pub pause_ns: u64,
    pub complete: bool,
}

pub fn parse(bytes: &[u8]) -> Parsed {
    let d = Dump::parse(bytes).expect("dump header");
    let mut p = Parsed { reason: d.header().reason.as_str().into(), mode: d.header().mode.as_str().into(), ..Default::default() };
    // ALLOCS pointers name their targets by ordinal: the address of each.
    let mut by_ordinal = vec![];
    for r in d.records() {
        match r.expect("record").1 {
            Record::Alloc(a) => by_ordinal.push(a.address),
            Record::Allocs(a) => by_ordinal.extend(a.entries().map(|e| e.expect("ALLOCS entry").address)),
            _ => {}
        }
    }
    for r in d.records() {
        match r.expect("record").1 {
            Record::Allocs(a) => {
                for e in a.entries() {
                    let e = e.unwrap();
                    p.allocs.insert(e.address, (e.size, e.site));
                    let words = e.links.map(|l| (l.offset, by_ordinal[l.target as usize] + l.delta)).collect();
                    p.pointers.insert(e.address, words);
                }
            }
            Record::Alloc(a) => {
                p.allocs.insert(a.address, (a.size, a.site));
                match a.contents {
                    ContentsRef::Full(b) => {
                        p.contents.insert(a.address, b.to_vec());
                    }
                    c => {
                        p.pointers.insert(a.address, c.words(a.address).collect());
                    }
                }
            }
            Record::Thread(t) => {
                let mut v: Vec<u64> = t.contents.words(t.stack_start).map(|(_, v)| v).collect();
                v.extend(t.regs());
                p.thread_ptrs.insert(t.tid, v);
                p.thread_flags.insert(t.tid, t.flags);
                p.thread_names.insert(t.tid, String::from_utf8_lossy(t.name).into_owned());
            }
            Record::Static(s) => p.static_ptrs.extend(s.contents.words(s.address).map(|(_, v)| v)),
            Record::Site(s) => {
                p.sites.insert(s.id, s.frames().collect());
            }
            Record::End(t) => {
                p.pause_ns = t.pause_ns;
                p.complete = true;
            }
            _ => {}
        }
    }
    p
}

/// xorshift for reproducible churn.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

pub struct Churn {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Per thread: the slot table's address (a heap block) and its length.
    pub tables: Vec<(u64, usize)>,
    handles: Vec<std::thread::JoinHandle<()>>,
}

pub const SLOTS: usize = 256;

/// Threads that allocate and free blocks of 3000..3999 bytes (a size no
/// other code here uses), recording each live block's address in a slot
/// table on the heap: set after the allocation, cleared before the free.
pub fn start_churn(n: usize) -> Churn {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let handles = (0..n)
        .map(|t| {
            let stop = stop.clone();
            let tx = tx.clone();
            std::thread::spawn(move || {
                let slots: Box<[std::sync::atomic::AtomicU64]> = (0..SLOTS).map(|_| std::sync::atomic::AtomicU64::new(0)).collect();
                tx.send((slots.as_ptr() as u64, SLOTS)).unwrap();
                let mut rng = Rng(t as u64 * 7919 + 1);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let r = rng.next();
                    let i = r as usize % SLOTS;
                    let cur = slots[i].load(std::sync::atomic::Ordering::Relaxed);
                    if cur != 0 {
                        slots[i].store(0, std::sync::atomic::Ordering::Release);
                        let size = 3000 + (cur >> 48) as usize;
                        // SAFETY: allocated below with this size.
                        unsafe {
                            std::alloc::dealloc((cur & 0xffff_ffff_ffff) as *mut u8, std::alloc::Layout::from_size_align(size, 8).unwrap())
                        };
                    } else {
                        let extra = (r >> 32) % 1000;
                        // SAFETY: non-zero size.
                        let p = unsafe { std::alloc::alloc(std::alloc::Layout::from_size_align(3000 + extra as usize, 8).unwrap()) };
                        slots[i].store(p as u64 | extra << 48, std::sync::atomic::Ordering::Release);
                    }
                }
                for s in slots.iter() {
                    let cur = s.load(std::sync::atomic::Ordering::Relaxed);
                    if cur != 0 {
                        // SAFETY: a block this thread allocated with this layout, freed once.
                        unsafe {
                            std::alloc::dealloc(
                                (cur & 0xffff_ffff_ffff) as *mut u8,
                                std::alloc::Layout::from_size_align(3000 + (cur >> 48) as usize, 8).unwrap(),
                            )
                        };
                    }
                }
            })
        })
        .collect();
    let tables = (0..n).map(|_| rx.recv().unwrap()).collect();
    Churn { stop, tables, handles }
}

impl Churn {
    pub fn finish(self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for h in self.handles {
            h.join().unwrap();
        }
    }
}

/// System, except that a request of exactly FAIL_SIZE bytes fails (the
/// allocation-failure trigger, and an inner allocator that fails).
pub struct Failing;
pub const FAIL_SIZE: usize = 0x7777_7777;

// SAFETY: forwards to System; failing with null is allowed by GlobalAlloc.
unsafe impl std::alloc::GlobalAlloc for Failing {
    unsafe fn alloc(&self, l: std::alloc::Layout) -> *mut u8 {
        if l.size() == FAIL_SIZE {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's arguments, under GlobalAlloc's contract, to the
        // system allocator that made the block.
        unsafe { std::alloc::System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: std::alloc::Layout) {
        // SAFETY: the caller's arguments, under GlobalAlloc's contract, to the
        // system allocator that made the block.
        unsafe { std::alloc::System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: std::alloc::Layout, n: usize) -> *mut u8 {
        if n == FAIL_SIZE {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's arguments, under GlobalAlloc's contract, to the
        // system allocator that made the block.
        unsafe { std::alloc::System.realloc(p, l, n) }
    }
}
