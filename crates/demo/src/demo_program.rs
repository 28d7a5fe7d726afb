//! The program `heapdump demo` runs: a toy order service that keeps a large
//! cache (the big retained structure) and leaks in two realistic ways (a
//! reference-counted cycle between a session and its orders, and buffers
//! forgotten on an error path). It dumps its own heap with the world
//! stopped and exits.
//!
//! Usage: `heapdump-demo OUTPUT.hdump`
//!
//! Among its siblings: this package (with the test programs in
//! `testbins/`) links the `heapdump` runtime, so that the command does not.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

#[global_allocator]
static ALLOC: heapdump::Tracked<std::alloc::System> = heapdump::Tracked::new(std::alloc::System);

/// A customer order.
#[derive(Clone, Debug)]
struct Order {
    id: u64,
    customer: String,
    lines: Vec<(String, u32)>,
}

/// A session holds its orders; each order keeps a handle back to the
/// session, so dropping the service's handle leaves a cycle.
struct Session {
    user: String,
    orders: Vec<Rc<RefCell<SessionOrder>>>,
}

struct SessionOrder {
    order: Order,
    /// The back-reference that closes the cycle.
    #[allow(dead_code)]
    session: Option<Rc<RefCell<Session>>>,
}

/// The catalogue cache: every product's description, kept for the whole run.
struct Catalogue {
    products: HashMap<String, Vec<String>>,
}

fn build_catalogue(n: usize) -> Catalogue {
    let mut products = HashMap::new();
    for i in 0..n {
        let reviews: Vec<String> = (0..8).map(|r| format!("review {r} of product {i}: works as described, would buy again")).collect();
        products.insert(format!("product-{i:05}"), reviews);
    }
    Catalogue { products }
}

fn order(id: u64) -> Order {
    Order {
        id,
        customer: format!("customer-{}", id % 97),
        lines: (0..3).map(|l| (format!("product-{:05}", (id * 7 + l) % 5000), 1 + l as u32)).collect(),
    }
}

/// Opens a session with a few orders, each pointing back at the session.
#[inline(never)]
fn open_session(user: &str, first_order: u64) -> Rc<RefCell<Session>> {
    let s = Rc::new(RefCell::new(Session { user: user.to_string(), orders: vec![] }));
    for k in 0..4 {
        let o = Rc::new(RefCell::new(SessionOrder { order: order(first_order + k), session: Some(s.clone()) }));
        s.borrow_mut().orders.push(o);
    }
    s
}

/// Parses a request; on a malformed one the scratch buffer is forgotten
/// instead of freed (the bug).
#[inline(never)]
fn handle_request(raw: &str) -> Option<usize> {
    let mut scratch: Vec<u8> = Vec::with_capacity(4096);
    scratch.extend_from_slice(raw.as_bytes());
    if !raw.starts_with("GET ") {
        std::mem::forget(scratch);
        return None;
    }
    Some(scratch.len())
}

fn main() {
    // Named after this process, as `heapdump run` names a program's dumps
    // (`heapdump demo` finds it by the pid it started).
    let out = std::env::args().nth(1).unwrap_or_else(|| format!("heapdump-demo.{}.hdump", std::process::id()));
    let catalogue = build_catalogue(5000);
    let mut served = 0;
    for i in 0..500u64 {
        // Sessions whose handles are dropped: their cycles leak.
        let session = open_session(&format!("user-{i}"), i * 10);
        served += session.borrow().orders.len();
        drop(session);
        let req = if i % 10 == 0 { format!("POST /bad/{i}") } else { format!("GET /orders/{i}") };
        served += handle_request(&req).unwrap_or(0);
    }
    let recent: Vec<Order> = (0..2000).map(order).collect();
    match heapdump::dump(&out, heapdump::Mode::Full) {
        Ok(info) => {
            println!(
                "{} allocations, {} bytes, pause {} us; served {served}, {} products cached, {} recent orders",
                info.allocations,
                info.alloc_bytes,
                info.pause_ns / 1000,
                catalogue.products.len(),
                recent.len()
            );
            let _ = recent.iter().map(|o| o.id + o.customer.len() as u64 + o.lines.len() as u64).sum::<u64>();
        }
        Err(e) => {
            eprintln!("heapdump-demo: cannot write {out}: {e}");
            std::process::exit(1);
        }
    }
    let _ = catalogue.products.values().map(|v| v.len()).sum::<usize>();
    let _unused = Session { user: String::new(), orders: vec![] }.user;
    let _ = SessionOrder { order: order(0), session: None }.order.id;
}
