//! Allocates through the `mimalloc` crate's static copy (1000 kept boxes,
//! one lost), then says "stopped PID" on stderr and stops itself (SIGSTOP)
//! for a capture; SIGCONT lets it exit 0.
use mimalloc::MiMalloc;

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

static KEEP: std::sync::Mutex<Vec<Box<[u8; 100]>>> = std::sync::Mutex::new(Vec::new());

extern "C" {
    fn raise(sig: i32) -> i32;
}

fn main() {
    KEEP.lock().unwrap().extend((0..1000).map(|i| Box::new([i as u8; 100])));
    std::mem::forget(Box::new([7u8; 4096]));
    eprintln!("stopped {}", std::process::id());
    // SAFETY: raise only sends SIGSTOP (19) to this process.
    unsafe { raise(19) };
}
