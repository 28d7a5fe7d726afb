//! Allocates through tikv-jemallocator's static jemalloc: 1000 kept
//! boxes of 100 bytes, 500 of 48 bytes freed (held in the thread's cache),
//! one 4096-byte box lost; then says "stopped PID" on stderr and stops
//! itself (SIGSTOP) for a capture; SIGCONT lets it exit 0.
use tikv_jemallocator::Jemalloc;

#[global_allocator]
static GLOBAL: Jemalloc = Jemalloc;

static KEEP: std::sync::Mutex<Vec<Box<[u8; 100]>>> = std::sync::Mutex::new(Vec::new());

extern "C" {
    fn raise(sig: i32) -> i32;
}

#[inline(never)]
fn churn() {
    let freed: Vec<Box<[u8; 48]>> = (0..500).map(|i| Box::new([i as u8; 48])).collect();
    drop(std::hint::black_box(freed));
}

fn main() {
    KEEP.lock().unwrap().reserve_exact(1000);
    KEEP.lock().unwrap().extend((0..1000).map(|i| Box::new([i as u8; 100])));
    churn();
    std::mem::forget(Box::new([7u8; 4096]));
    eprintln!("stopped {}", std::process::id());
    // SAFETY: raise only sends SIGSTOP (19) to this process.
    unsafe { raise(19) };
}
