//! The runtime's one global state: the live table, the sites, the
//! configuration and the dump marks; initialised on first use. Also what
//! the runtime itself occupies (never a root) and its statistics.

use crate::config::Config;
use crate::sites::unwind;
use crate::stop::guard;
use crate::stop::stw;
use crate::{sites, table};
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};

/// The runtime's global state: one per process.
pub struct State {
    pub(crate) table: table::Table,
    pub(crate) sites: sites::Sites,
    pub(crate) config: core::cell::UnsafeCell<Config>,
    pub(crate) init: AtomicU8,
    /// What the allocation path compares the live bytes with: the lower of
    /// `user_mark` and `check_mark`.
    pub(crate) next_threshold: AtomicU64,
    /// The next step of `HEAPDUMP_THRESHOLD`.
    pub(crate) user_mark: AtomicU64,
    /// Live bytes at which the helper looks at the memory limits again.
    pub(crate) check_mark: AtomicU64,
    pub(crate) oom_dumped: AtomicBool,
    /// Address space held back for the dump at an allocation failure
    /// ([`FAILURE_ROOM`] bytes, no access, no memory; 0: none): given back
    /// just before that dump, whose index and buffers need mappings of
    /// their own where the program has just been refused one.
    pub(crate) failure_room: AtomicUsize,
    pub(crate) dump_count: AtomicU64,
}

/// What [`State::failure_room`] holds back: the dump's own mappings (the
/// writer's slots, [`crate::dump::writer::MAP_LEN`]; some 6 MB beside them:
/// the other buffers, the module map) and the index of some 100 K live
/// blocks. Under a 512 MiB `RLIMIT_AS` a program of 1 MiB blocks was
/// refused one with too little left for them about once in 12 runs, and
/// one refused with nothing left never had its dump (nor did it when the
/// writer's slots grew and this stayed 8 MiB).
pub(crate) const FAILURE_ROOM: usize = crate::dump::writer::MAP_LEN + (6 << 20);

// SAFETY: `config` is written once during initialisation (init == 1, by the
// one thread that won the race) and only read after init == 2.
unsafe impl Sync for State {}

pub(crate) static STATE: State = State {
    table: table::Table::new(),
    sites: sites::Sites::new(),
    config: core::cell::UnsafeCell::new(Config::default()),
    init: AtomicU8::new(0),
    next_threshold: AtomicU64::new(u64::MAX),
    user_mark: AtomicU64::new(u64::MAX),
    check_mark: AtomicU64::new(u64::MAX),
    oom_dumped: AtomicBool::new(false),
    failure_room: AtomicUsize::new(0),
    dump_count: AtomicU64::new(0),
};

impl State {
    pub(crate) fn config(&self) -> &Config {
        // SAFETY: see the Sync impl: read only after initialisation.
        unsafe { &*self.config.get() }
    }
}

#[inline]
pub(crate) fn state() -> &'static State {
    if STATE.init.load(Ordering::Acquire) != 2 {
        init_slow();
    }
    &STATE
}

#[cold]
pub(crate) fn init_slow() {
    match STATE.init.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            let c = Config::from_env();
            // SAFETY: we won the race to 1; nobody reads config before 2.
            unsafe { *STATE.config.get() = c };
            if c.threshold > 0 {
                STATE.user_mark.store(c.threshold, Ordering::Relaxed);
                STATE.next_threshold.store(c.threshold, Ordering::Relaxed);
            }
            if !c.shadow {
                STATE.table.use_buckets();
            }
            if !c.thp {
                STATE.table.no_huge_pages();
            }
            if c.backtrace == crate::config::Backtrace::All {
                STATE.table.every_block_has_a_site();
                if c.peak {
                    STATE.table.keep_sites_at_peak();
                }
            }
            STATE.table.give_back_stripes();
            if let Ok(p) = crate::sys::reserve(FAILURE_ROOM) {
                STATE.failure_room.store(p as usize, Ordering::Release);
            }
            let _ = stw::init();
            STATE.init.store(2, Ordering::Release);
        }
        Err(_) => {
            // Another thread is initialising (a few microseconds): wait.
            // The initialising thread never allocates, so this cannot be
            // our own thread re-entering.
            while STATE.init.load(Ordering::Acquire) != 2 {
                core::hint::spin_loop();
            }
        }
    }
}

/// Live heap figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Live allocations.
    pub live_count: u64,
    /// Their requested bytes.
    pub live_bytes: u64,
    /// Highest live bytes seen. Each thread adds its allocations to the
    /// global count in steps of 64 KiB, so the peak can be short of the true
    /// one by that much per thread (never more than the true one).
    pub peak_bytes: u64,
    /// Allocations made since start.
    pub total_allocs: u64,
    /// Bytes allocated since start.
    pub total_bytes: u64,
    /// Memory the tracker itself uses (tables, sites).
    pub tracker_bytes: u64,
    /// Distinct allocation sites.
    pub sites: u64,
    /// Allocations the tracker could not record (address beyond 2^48, or
    /// its table could not grow).
    pub untracked: u64,
}

/// The live heap right now.
pub fn stats() -> Stats {
    let st = state();
    let _g = guard::Enter::new();
    let t = { st.table.totals() };
    let (sites, site_bytes) = {
        let _l = guard::Locked::new();
        st.sites.usage()
    };
    Stats {
        live_count: t.live_count,
        live_bytes: t.live_bytes,
        peak_bytes: st.table.peak().max(t.live_bytes),
        total_allocs: t.total_allocs,
        total_bytes: t.total_bytes,
        tracker_bytes: t.table_bytes + site_bytes,
        sites,
        untracked: st.table.untracked.load(Ordering::Relaxed),
    }
}

/// The configuration in force (from the `HEAPDUMP_*` variables).
pub fn config() -> Config {
    *state().config()
}

/// The runtime's own thread-local variables in the calling thread, as
/// offsets from its thread pointer (static TLS: the same in every thread)
/// and sizes. They are cut out of the TLS roots: a deferred free's address
/// or a frame pointer the unwinder remembered is no pointer of the
/// program's, and kept blocks "still reachable" by chance.
pub(crate) fn own_tls(fs: u64) -> [(u64, u64); 7] {
    let sample = crate::sites::sampling::tls_countdown();
    let last = sites::tls_last_site();
    let all = [sample, last, unwind::tls_stack_top(), unwind::tls_memo(), guard::tls_state(), guard::tls_deferred(), table::tls_stripe()];
    all.map(|(a, n)| if a == 0 { (0, 0) } else { (a.wrapping_sub(fs), n) })
}

/// The runtime's own statics that hold heap addresses (the live table's
/// inline parts, the site table): `[start, end)`, never a root.
pub(crate) fn own_statics() -> (u64, u64) {
    let a = &STATE as *const State as u64;
    (a, a + core::mem::size_of::<State>() as u64)
}
