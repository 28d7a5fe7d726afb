//! Test helper (#41): tests/c/growing_service.c's service in Rust, tracked
//! in-process (`Tracked<System>`), in four phases with a dump at the end
//! of each (`DIR/svc.K.hdump`, K = 0..3, DIR being argv[1]): a cache (a
//! list from the static `CACHE`, each entry owning a 48-byte body) grows
//! by 3000 entries a phase; a table of 20000 records is built once and
//! stays put; churn replaces a ring of 1000 buffers whose total goes 200,
//! 400, 100, 300 KiB; a 48 MiB buffer lives only in the second phase.
//! `growth` must name the cache, never the table, the churn or the spike;
//! `top --peak` the buffer; `top --allocated` the churn's 4000 buffers.
use std::sync::Mutex;

#[global_allocator]
static ALLOC: heapdump::Tracked<std::alloc::System> = heapdump::Tracked::new(std::alloc::System);

struct Cached {
    next: Option<Box<Cached>>,
    body: Box<[u8; 48]>,
    id: u64,
}

static CACHE: Mutex<Option<Box<Cached>>> = Mutex::new(None);
// Boxed: each record a block of its own, as the C service's.
#[allow(clippy::vec_box)]
static TABLE: Mutex<Vec<Box<[u64; 7]>>> = Mutex::new(Vec::new());
static CHURN: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
static BIG: Mutex<Option<Vec<u8>>> = Mutex::new(None);

#[inline(never)]
fn cache_put(id: u64) {
    let mut head = CACHE.lock().unwrap();
    let body = Box::new([id as u8; 48]);
    let next = head.take();
    *head = Some(Box::new(Cached { next, body, id }));
}

#[inline(never)]
fn build_table() {
    let mut t = TABLE.lock().unwrap();
    t.reserve_exact(20000);
    for i in 0..20000u64 {
        t.push(Box::new([i; 7]));
    }
}

#[inline(never)]
fn churn_to(each: usize) {
    let mut c = CHURN.lock().unwrap();
    for i in 0..1000 {
        let b = vec![1u8; each];
        if i < c.len() {
            c[i] = b;
        } else {
            c.push(b);
        }
    }
}

#[inline(never)]
fn big_buffer() -> Vec<u8> {
    vec![2u8; 48 << 20]
}

fn main() {
    let dir = std::env::args().nth(1).expect("a directory for the dumps");
    CHURN.lock().unwrap().reserve_exact(1000);
    build_table();
    let mut id = 0;
    for (phase, kib) in [200usize, 400, 100, 300].into_iter().enumerate() {
        for _ in 0..3000 {
            cache_put(id);
            id += 1;
        }
        churn_to(kib * 1024 / 1000);
        if phase == 1 {
            *BIG.lock().unwrap() = Some(big_buffer());
        }
        if phase == 2 {
            *BIG.lock().unwrap() = None;
        }
        heapdump::dump(format!("{dir}/svc.{phase}.hdump"), heapdump::Mode::Compact).expect("the dump");
    }
    let mut sum = TABLE.lock().unwrap().iter().map(|r| r[0]).sum::<u64>();
    let head = CACHE.lock().unwrap();
    let mut e = head.as_deref();
    while let Some(c) = e {
        sum += c.id + u64::from(c.body[0]);
        e = c.next.as_deref();
    }
    std::process::exit(i32::from(sum == 0));
}
