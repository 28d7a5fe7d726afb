//! The cache's forked writers, in a process of one thread as the command
//! line is (a test harness runs tests on threads, where the cache writes
//! in place): a large file is written by a child, its error comes back,
//! and a writer left to finish is waited for by the next reader; a cache
//! not allowed to fork writes in place.

use heapdump_analyze::cache::CacheFile;
use heapdump_analyze::{DumpFile, Heap};
use heapdump_format::{raw, AllocInfo, Backtrace, Header, Mode, Process, Reason, Writer};

fn main() {
    let dir = std::env::temp_dir().join(format!("hd-writer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A complete dump of a million blocks names the cache (a graph kept
    // for another dump is refused: it must be this one's); its graph is
    // some 30 MB.
    let n = 1_000_000u64;
    let (mut buf, mut batch) = (vec![0u8; 4096], vec![0u8; 1 << 16]);
    let mut w = Writer::new(Vec::new(), &mut buf, &Header::new(Mode::Compact, Reason::Api, 4096, 1, 0)).unwrap();
    w.process(&Process { backtrace: Backtrace::Off, max_frames: 0, sample_mean: 0, exe: b"/bin/t", cmdline: b"t\0", flags: 0 }).unwrap();
    w.set_batch_buffer(&mut batch).unwrap();
    for i in 0..n {
        let a = AllocInfo { address: 0x1000_0000 + i * 64, size: 48, site: raw::NO_SITE, align_log2: 4, flags: 0, first_word: 0 };
        w.dense_alloc(&a, 0, std::iter::empty()).unwrap();
    }
    let dump = dir.join("d.hdump");
    std::fs::write(&dump, w.finish(0).unwrap().0).unwrap();
    let file = DumpFile::open(&dump).unwrap();
    let cache = CacheFile::for_file(&dir, &file, "writer-test").expect("a complete dump");
    let heap = Heap::load(&file, &mut |_, _| {}).unwrap();

    // Written by a child, waited for.
    let writing = cache.write_graph(&heap);
    assert!(writing.in_background(), "a large file in a process of one thread is written by a child");
    writing.wait().expect("written");
    let kept = cache.read_graph().unwrap().expect("kept");
    assert_eq!(kept.len(), heap.len());

    // Left to finish on its own: the next reader waits for it.
    std::fs::remove_file(cache.graph_path()).unwrap();
    let writing = cache.write_graph(&heap);
    assert!(writing.in_background());
    writing.detach();
    let kept = cache.read_graph().unwrap().expect("the reader waited for the writer");
    assert_eq!(kept.len(), heap.len());

    // The child's failure comes back with the system's reason: the name
    // taken by a directory holding something, the rename fails.
    std::fs::remove_file(cache.graph_path()).unwrap();
    std::fs::create_dir(cache.graph_path()).unwrap();
    std::fs::write(cache.graph_path().join("keep"), b"x").unwrap();
    let writing = cache.write_graph(&heap);
    assert!(writing.in_background());
    let err = writing.wait().expect_err("a directory is in the way");
    assert_eq!(err.raw_os_error(), Some(libc::EISDIR), "{err}");
    let left: Vec<_> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).filter(|n| n.to_string_lossy().ends_with(".tmp")).collect();
    assert!(left.is_empty(), "no temporary file left: {left:?}");
    std::fs::remove_dir_all(cache.graph_path()).unwrap();

    // Not allowed to fork (what `open` gives a caller that did not ask for
    // background writers): written in place, done when it returns.
    let writing = cache.clone().in_background(false).write_graph(&heap);
    assert!(!writing.in_background(), "a cache not allowed to fork writes in place");
    assert!(cache.graph_path().exists(), "written before write_graph returned");
    writing.wait().expect("written");
    assert_eq!(cache.read_graph().unwrap().expect("kept").len(), heap.len());
    std::fs::remove_dir_all(&dir).unwrap();
    println!("writer: 4 checks passed");
}
