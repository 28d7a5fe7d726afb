//! A heap whose tables were moved to an unnamed file (`Heap::spill`, issue
//! 43's memory goal) answers as the one held in memory, and the file has no
//! name while it is read, and is gone with the heap.

use crate::build::{graph, Spec};
use heapdump_analyze::leaks::NoContents;
use heapdump_analyze::{dominators, BlockId, Heap};

/// Lines of this process's mappings that name a file in `dir`.
fn mappings_in(dir: &std::path::Path) -> Vec<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines().filter(|l| l.contains(dir.to_str().unwrap())).map(str::to_owned).collect()
}

/// A mostly-lost heap (two pointers a node to random earlier nodes, the
/// last few held), its blocks written out of address order (so that the
/// load keeps each record's block), some pointers into their targets'
/// insides and some far apart in their sources (offsets kept aside).
fn spec(n: usize) -> Spec {
    let addr = |i: usize| 0x10_0000 + i as u64 * 0x100;
    let mut spec = Spec::default();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for i in (0..n).rev() {
        spec.block(addr(i), 48 + (i as u64 % 5) * 40);
    }
    for i in 1..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let (a, b) = ((x % i as u64) as usize, ((x >> 20) % i as u64) as usize);
        spec.ptr(addr(i), 0, addr(a));
        // Every 7th: inside its target, from far into its source.
        let (offset, into) = if i % 7 == 0 { (40, 8) } else { (8, 0) };
        spec.ptr(addr(i), offset, addr(b) + into);
    }
    spec.stack = (n - 16..n).map(addr).collect();
    spec
}

#[test]
fn a_spilled_heap_answers_as_one_in_memory() {
    let n = 20_000;
    let path = crate::build::tempfile_path::TempPath::new();
    std::fs::write(&path.0, spec(n).write()).unwrap();
    let file = heapdump_analyze::DumpFile::open(&path.0).unwrap();
    let held = Heap::load(&file, &mut |_, _| {}).unwrap();
    let spilled = Heap::load(&file, &mut |_, _| {}).unwrap();
    // A directory on disk (the build's), as the caches' is.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("spill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The tables move in place: what was borrowed of them before reads on.
    let borrowed = spilled.blocks();
    assert!(spilled.spill(&dir).unwrap(), "the tables are moved to a directory on disk");
    assert!(borrowed.eq(held.blocks()));
    // Read from a mapping of a file without a name: none in the directory.
    assert!(!mappings_in(&dir).is_empty(), "the tables are read from the file's mapping");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "the file has no name");

    assert_eq!(graph(&spilled), graph(&held));
    let (l0, d0) = dominators::with_leaks(&held, &NoContents);
    let (l1, d1) = dominators::with_leaks(&spilled, &NoContents);
    assert_eq!(l1.kind, l0.kind);
    assert!((0..n as u32).all(|b| l1.leader_of(BlockId(b)) == l0.leader_of(BlockId(b))));
    assert_eq!(d1.parts(), d0.parts());
    let report = |h: &Heap| {
        let a = heapdump_analyze::Analysis::new(&file, h);
        (format!("{:?}", a.leak_report()), format!("{:?}", a.retainers(20)))
    };
    assert_eq!(report(&spilled), report(&held));
    assert!(d0.parts().1.iter().any(|&r| r > 1000), "some block retains others");

    drop((l1, d1, spilled));
    assert!(mappings_in(&dir).is_empty(), "the file goes with the heap");
    std::fs::remove_dir(&dir).unwrap();
}

/// A heap of 2.2 M blocks (records in address order, as the runtime writes
/// them), opened for questions that ask for the dominator tree: its block
/// table, 35 MB, is built in a file as it is loaded (nothing to move
/// when the tree is asked for), the smaller tables are moved then, and
/// it answers as the heap opened without, held in memory.
#[test]
fn a_heap_built_in_a_file_answers_as_one_in_memory() {
    let n = 2_200_000;
    let addr = |i: usize| 0x10_0000 + i as u64 * 0x40;
    let mut spec = Spec::default();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..n {
        spec.block(addr(i), 48);
    }
    for i in 1..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        spec.ptr(addr(i), 0, addr((x % i as u64) as usize));
    }
    spec.stack = (n - 64..n).map(addr).collect();
    let path = crate::build::tempfile_path::TempPath::new();
    std::fs::write(&path.0, spec.write()).unwrap();
    let open = |dominators: bool| {
        heapdump_analyze::open(&path.0, &heapdump_analyze::Options::default().cache(false).dominators(dominators)).unwrap()
    };
    let (held, built) = (open(false), open(true));
    assert!(held.heap().tables_in_files().is_empty(), "a heap opened without the dominators in mind is held in memory");
    assert_eq!(built.heap().tables_in_files(), ["blocks"], "the block table is built in a file as it is loaded");
    assert_eq!(graph(built.heap()), graph(held.heap()));
    let (a0, a1) = (held.analysis(), built.analysis());
    let (d0, d1) = (a0.dominators(), a1.dominators());
    // Asked for the tree, the rest were moved (the blocks' already there).
    assert_eq!(built.heap().tables_in_files().len(), 4);
    assert_eq!(d1.parts(), d0.parts());
    assert_eq!(a1.leaks().kind, a0.leaks().kind);
    assert_eq!(format!("{:?}", a1.leak_report()), format!("{:?}", a0.leak_report()));
    assert!(d0.parts().0.iter().any(|&d| d != u32::MAX), "some block has a block for its dominator");
}

/// A directory whose files live in memory (tmpfs) is no place for them:
/// the tables stay where they are.
#[test]
fn no_tables_are_moved_to_a_file_system_in_memory() {
    let shm = std::path::Path::new("/dev/shm");
    let on_tmpfs = std::fs::read_to_string("/proc/mounts")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(1) == Some("/dev/shm") && l.split(' ').nth(2) == Some("tmpfs"));
    if !on_tmpfs {
        eprintln!("no tmpfs at /dev/shm: nothing to check");
        return;
    }
    let (_path, h) = spec(200).load();
    let before = graph(&h);
    assert!(!h.spill(shm).unwrap());
    assert!(mappings_in(shm).is_empty());
    assert_eq!(graph(&h), before);
}
