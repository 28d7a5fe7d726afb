//! `heapdump::testing` under libtest's own harness: tests on threads of one
//! process, each marking its thread and checking what it left, while
//! other threads (the other tests, and churn threads each test starts)
//! allocate, hold and leak sessions at the same time. Only the test that
//! leaves a session behind fails its assertion; its message names the
//! type, the site and the static that keeps it.

use heapdump::testing::Mark;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Mutex;

#[global_allocator]
static ALLOC: heapdump::Tracked<std::alloc::System> = heapdump::Tracked::new(std::alloc::System);

/// What a request leaves behind when it forgets to close its session.
#[allow(dead_code)] // held, not read: what a session keeps alive
pub struct Session {
    id: u64,
    user: String,
    scratch: Vec<u8>,
}

impl Session {
    #[inline(never)]
    fn open(id: u64) -> Session {
        Session { id, user: format!("user{id}"), scratch: vec![0; 100] }
    }
}

/// Where the leaking test puts its session (no other test touches it).
static SESSIONS: Mutex<Vec<Session>> = Mutex::new(Vec::new());

/// Starts, once in the process, two threads that allocate and free
/// sessions for as long as the tests run, each holding a few boxed ones
/// alive at any time: blocks of the type the tests look for, allocated on
/// other threads during every check. Then zeroes the stack below the
/// caller, where starting them left the addresses of freed temporaries
/// (a stale word equal to a later block's address keeps it "reachable").
#[inline(never)]
fn churn() {
    static CHURN: std::sync::Once = std::sync::Once::new();
    CHURN.call_once(|| {
        for t in 0..2u64 {
            std::thread::spawn(move || {
                let mut held: Vec<Box<Session>> = Vec::new();
                for i in 0u64.. {
                    held.push(Box::new(Session::open(t * 1_000_000 + i)));
                    if held.len() > 8 {
                        held.remove(0);
                    }
                    if i % 8 == 0 {
                        // Steadily, not flat out: the machine is shared.
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                }
            });
        }
    });
    scrub_stack();
}

thread_local! {
    /// This thread expects a panic: the hook keeps quiet about it.
    static EXPECTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The message of the panic `f` raised (not printed, nor its backtrace).
fn failure(f: impl FnOnce()) -> String {
    static QUIET_HOOK: std::sync::Once = std::sync::Once::new();
    QUIET_HOOK.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !EXPECTED.with(|e| e.get()) {
                prev(info)
            }
        }));
    });
    EXPECTED.with(|e| e.set(true));
    let r = catch_unwind(AssertUnwindSafe(f));
    EXPECTED.with(|e| e.set(false));
    let e = r.expect_err("the assertion fails");
    e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
}

#[inline(never)]
fn leak_a_session() {
    SESSIONS.lock().unwrap().push(Session::open(7));
}

#[test]
fn a_session_left_in_a_global_fails_naming_its_type_site_and_root() {
    churn();
    {
        let mark = Mark::new();
        leak_a_session();
        let report = mark.check();
        let msg = failure(|| report.assert_none_alive::<Session>());
        assert!(msg.contains("1 block of assertions::Session allocated by this thread since the mark is still live"), "{msg}");
        // The type: the global's buffer holds sessions.
        assert!(msg.contains("Vec<assertions::Session>"), "{msg}");
        // The site: the function that pushed it, with its file and line.
        assert!(msg.contains("assertions::leak_a_session (heapdump/tests/assertions.rs:"), "{msg}");
        // The root: the static, named.
        assert!(msg.contains("kept alive by static assertions::SESSIONS in "), "{msg}");
        // What the session holds is live too, and bounded growth says so.
        assert!(report.blocks() >= 3, "{report}");
        let msg = failure(|| report.assert_live_bytes_at_most(100));
        assert!(msg.contains("allocated by this thread since the mark are still live, more than the 100 allowed"), "{msg}");
        // Held by a static, it is not lost.
        report.assert_nothing_lost();
    }
}

#[test]
fn sessions_closed_pass_while_other_threads_hold_theirs() {
    churn();
    {
        let mark = Mark::new();
        for i in 0..50 {
            let s = Box::new(Session::open(i));
            assert_eq!(s.user.len(), format!("user{i}").len());
        }
        let report = mark.check();
        report.assert_none_alive::<Session>();
        report.assert_nothing_lost();
        report.assert_live_bytes_at_most(0);
        assert_eq!((report.blocks(), report.bytes()), (0, 0), "{report}");
    }
}

#[test]
fn growth_is_counted_exactly_and_bounded() {
    churn();
    {
        let mark = Mark::new();
        let kept: Vec<u64> = (0..1000).collect();
        let gone: Vec<u64> = (0..5000).collect();
        drop(gone);
        let report = mark.check();
        // The same mark, checked again once the vector is dropped (before
        // any assertion fails: the harness keeps a failure's message).
        drop(kept);
        let after = mark.check();
        assert_eq!((report.blocks(), report.bytes()), (1, 8000), "{report}");
        report.assert_live_bytes_at_most(8000);
        after.assert_live_bytes_at_most(0);
        let msg = failure(|| report.assert_live_bytes_at_most(7999));
        assert!(msg.contains("8000 bytes in 1 block allocated by this thread"), "{msg}");
        assert!(msg.contains("Vec<u64>: 1 block, 8000 bytes (still reachable)"), "{msg}");
        assert!(msg.contains("kept alive by stack of thread"), "{msg}");
    }
}

/// A block a session hides from every root: allocated here, its address
/// kept only scrambled.
static HIDDEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[inline(never)]
fn lose_a_session() {
    let p = Box::into_raw(Box::new(Session::open(99)));
    HIDDEN.store(p as usize ^ 0x5a5a_5a5a_5a5a_5a5a, Ordering::Relaxed);
}

/// Overwrites the stack below the caller (stale words of returned frames
/// would keep a lost block reachable, as under valgrind).
#[inline(never)]
fn scrub_stack() {
    let buf = [0u8; 16 * 1024];
    std::hint::black_box(&buf);
}

#[test]
fn a_lost_session_fails_nothing_lost_and_only_here() {
    churn();
    {
        let mark = Mark::new();
        lose_a_session();
        scrub_stack();
        let report = mark.check();
        let msg = failure(|| report.assert_nothing_lost());
        assert!(msg.contains("allocated by this thread since the mark are lost"), "{msg}");
        assert!(msg.contains("Box<assertions::Session>"), "{msg}");
        assert!(msg.contains("definitely lost"), "{msg}");
        assert!(msg.contains("assertions::lose_a_session (heapdump/tests/assertions.rs:"), "{msg}");
        // Give it back, so that the process ends clean.
        let p = HIDDEN.load(Ordering::Relaxed) ^ 0x5a5a_5a5a_5a5a_5a5a;
        // SAFETY: the box `lose_a_session` leaked, given back once.
        drop(unsafe { Box::from_raw(p as *mut Session) });
    }
}

#[test]
fn a_check_sees_only_its_own_thread() {
    churn();
    {
        let mark = Mark::new();
        // A session made here and freed on another thread is gone.
        let mine = Box::new(Session::open(1));
        std::thread::spawn(move || drop(mine)).join().unwrap();
        // One another thread makes and holds during the check is not ours.
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            let theirs = Box::new(Session::open(2));
            tx.send(()).unwrap();
            done_rx.recv().unwrap();
            drop(theirs);
        });
        rx.recv().unwrap();
        let report = mark.check();
        done_tx.send(()).unwrap();
        other.join().unwrap();
        report.assert_none_alive::<Session>();
        report.assert_nothing_lost();
        // A thread has one mark at a time.
        let msg = failure(|| drop(Mark::new()));
        assert!(msg.contains("this thread already has a mark"), "{msg}");
    }
}
