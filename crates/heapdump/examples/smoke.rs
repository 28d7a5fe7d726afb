//! Smoke test: a tracked program that dumps its own heap.
#[global_allocator]
static ALLOC: heapdump::Tracked<std::alloc::System> = heapdump::Tracked::new(std::alloc::System);

fn main() {
    let v: Vec<Box<u64>> = (0..1000).map(Box::new).collect();
    let t = std::thread::spawn(|| {
        let s = String::from("hello from a thread");
        std::thread::sleep(std::time::Duration::from_millis(300));
        s.len()
    });
    std::thread::sleep(std::time::Duration::from_millis(50));
    let _ = std::fs::remove_file("/tmp/smoke.hdump");
    let info = heapdump::dump("/tmp/smoke.hdump", heapdump::Mode::Compact).unwrap();
    println!("{info:?}");
    println!("{:?}", heapdump::stats());
    t.join().unwrap();
    drop(v);
}
