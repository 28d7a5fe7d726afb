//! Allocation sites: backtrace capture and the deduplicating site table.
//!
//! Capture reads `.eh_frame`, so it works on code built without frame
//! pointers, such as Rust's standard library and most C libraries: by
//! default with the caching unwinder of [`crate::sites::unwind`], which falls
//! back to the system unwinder (`_Unwind_Backtrace` from libgcc) on any
//! frame it does not model; `HEAPDUMP_UNWINDER=libgcc` uses the latter
//! throughout. With glibc 2.35 and later both find unwind tables through
//! `_dl_find_object` without locks or allocation. BENCHMARKS.md has the
//! cost of each per allocation.
//!
//! The site table is 16 shards of open-addressing tables keyed by a hash of
//! the frames, with the frames in an append-only arena; all memory comes
//! from `mmap`. A site id is `local_index * 16 + shard + 1` (0 = no site).
//!
//! The room owns capture (here and in `unwind`, the caching unwinder),
//! the site table, and `sampling` (which allocations get a site under
//! `HEAPDUMP_BACKTRACE=sampled`). It may touch `sys` only: it knows
//! nothing of the table, the dump or the triggers, which ask it.

pub(crate) mod sampling;
pub(crate) mod unwind;

use crate::sys;
use crate::sys::lock::SpinLock;
use core::ffi::c_void;

/// Deepest stack recorded.
pub const MAX_FRAMES: usize = 64;
const SHARDS: usize = 16;

#[repr(C)]
struct UnwindContext {
    _private: [u8; 0],
}

type UnwindTraceFn = extern "C" fn(ctx: *mut UnwindContext, arg: *mut c_void) -> i32;

extern "C" {
    fn _Unwind_Backtrace(trace: UnwindTraceFn, arg: *mut c_void) -> i32;
    fn _Unwind_GetIP(ctx: *mut UnwindContext) -> usize;
}

pub use crate::sites::unwind::Frames;

/// The first `n` frames of `f`, which a capture wrote.
///
/// # Safety
/// `n` must not exceed what the capture into `f` returned.
pub unsafe fn written(f: &Frames, n: usize) -> &[u64] {
    // SAFETY: the caller guarantees f[..n] is initialised; MaybeUninit<u64>
    // has u64's layout.
    unsafe { &*(core::ptr::from_ref(&f[..n]) as *const [u64]) }
}

/// `f` as room for a capture.
pub fn room(f: &mut [u64]) -> &mut Frames {
    // SAFETY: MaybeUninit<u64> has u64's layout, and a capture only ever
    // writes initialised values into it.
    unsafe { &mut *(core::ptr::from_mut(f) as *mut Frames) }
}

struct Collect<'a> {
    frames: &'a mut Frames,
    n: usize,
    skip: usize,
}

extern "C" fn trace_one(ctx: *mut UnwindContext, arg: *mut c_void) -> i32 {
    // SAFETY: `arg` is the `Collect` passed by `capture`, alive for the
    // whole `_Unwind_Backtrace` call and not aliased meanwhile.
    let c = unsafe { &mut *arg.cast::<Collect<'_>>() };
    // SAFETY: `ctx` is the context the unwinder handed us.
    let ip = unsafe { _Unwind_GetIP(ctx) } as u64;
    if c.skip > 0 {
        c.skip -= 1;
        return 0;
    }
    if ip == 0 || c.n >= c.frames.len() {
        return 5; // _URC_END_OF_STACK: stop
    }
    c.frames[c.n] = core::mem::MaybeUninit::new(ip);
    c.n += 1;
    0 // _URC_NO_REASON: continue
}

/// Captures the caller's stack into `frames`, skipping `skip` frames above
/// this one; returns the number of frames written.
///
/// # Signal safety
/// Does not allocate through the tracked heap (an allocation by the
/// unwinder re-enters the tracker, which records it without a site).
#[inline(never)]
pub fn capture(frames: &mut Frames, skip: usize, cached: bool) -> usize {
    if cached {
        if let Some(n) = crate::sites::unwind::capture(frames, skip + 1) {
            return n;
        }
    }
    capture_libgcc(frames, skip + 1)
}

/// [`capture`] with `_Unwind_Backtrace` only (`skip` counts this frame).
#[inline(never)]
pub fn capture_libgcc(frames: &mut Frames, skip: usize) -> usize {
    let mut c = Collect { frames, n: 0, skip: skip + 1 };
    // SAFETY: `trace_one` matches the callback ABI and `c` outlives the call.
    unsafe { _Unwind_Backtrace(trace_one, (&mut c as *mut Collect<'_>).cast()) };
    c.n
}

#[repr(C)]
#[derive(Clone, Copy)]
struct SiteSlot {
    hash: u64,
    /// Offset of the frames in the arena, in words.
    off: u32,
    nframes: u32,
    /// Local index of the site in its shard.
    local: u32,
}

struct SiteShard {
    slots: *mut SiteSlot,
    cap: usize,
    len: usize,
    arena: *mut u64,
    arena_cap: usize,
    arena_len: usize,
    /// slot index of local site i, so ids map back to frames.
    order: *mut u32,
}

// SAFETY: the pointers are owned by the shard and used under its lock.
unsafe impl Send for SiteShard {}

fn hash_frames(f: &[u64]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ f.len() as u64;
    for &x in f {
        h = (h ^ x).wrapping_mul(0x0000_0100_0000_01b3).rotate_left(29);
    }
    h | 1 // 0 marks an empty slot
}

impl SiteShard {
    const fn empty() -> SiteShard {
        SiteShard {
            slots: core::ptr::null_mut(),
            cap: 0,
            len: 0,
            arena: core::ptr::null_mut(),
            arena_cap: 0,
            arena_len: 0,
            order: core::ptr::null_mut(),
        }
    }

    fn frames_at(&self, off: u32, n: u32) -> &[u64] {
        // SAFETY: (off, n) were recorded for frames written into the arena,
        // which only grows (by copying) and keeps all written words.
        unsafe { core::slice::from_raw_parts(self.arena.add(off as usize), n as usize) }
    }

    /// Finds or adds the stack; returns the local index, or None when out of memory.
    fn intern(&mut self, frames: &[u64]) -> Option<u32> {
        let h = hash_frames(frames);
        if self.cap == 0 || (self.len + 1) * 4 > self.cap * 3 {
            self.grow_slots()?;
        }
        let mask = self.cap - 1;
        let mut i = (h >> 20) as usize & mask;
        loop {
            // SAFETY: i <= mask < cap, inside the slots mapping.
            let s = unsafe { *self.slots.add(i) };
            if s.hash == 0 {
                break;
            }
            if s.hash == h && self.frames_at(s.off, s.nframes) == frames {
                return Some(s.local);
            }
            i = (i + 1) & mask;
        }
        if self.arena_len + frames.len() > self.arena_cap {
            self.grow_arena(frames.len())?;
        }
        let off = self.arena_len;
        // SAFETY: the arena has room for frames.len() more words (checked above).
        unsafe { core::ptr::copy_nonoverlapping(frames.as_ptr(), self.arena.add(off), frames.len()) };
        self.arena_len += frames.len();
        // SAFETY: i is an empty slot inside the mapping; order has cap entries
        // and len < cap.
        unsafe {
            *self.slots.add(i) = SiteSlot { hash: h, off: off as u32, nframes: frames.len() as u32, local: self.len as u32 };
            *self.order.add(self.len) = i as u32;
        }
        self.len += 1;
        Some((self.len - 1) as u32)
    }

    fn grow_slots(&mut self) -> Option<()> {
        let new_cap = if self.cap == 0 { 1024 } else { self.cap * 2 };
        let slots: *mut SiteSlot = sys::mmap_anon(new_cap * core::mem::size_of::<SiteSlot>()).ok()?.cast();
        let order: *mut u32 = sys::mmap_anon(new_cap * 4).ok()?.cast();
        let mask = new_cap - 1;
        for k in 0..self.len {
            // SAFETY: k < len <= old cap; order and slots are the old mappings.
            let s = unsafe { *self.slots.add(*self.order.add(k) as usize) };
            let mut i = (s.hash >> 20) as usize & mask;
            // SAFETY: i <= mask < new_cap.
            while unsafe { (*slots.add(i)).hash } != 0 {
                i = (i + 1) & mask;
            }
            // SAFETY: as above; k < len < new_cap.
            unsafe {
                *slots.add(i) = s;
                *order.add(k) = i as u32;
            }
        }
        if self.cap != 0 {
            // SAFETY: the old mappings are ours and no longer referenced.
            unsafe {
                sys::munmap(self.slots.cast(), self.cap * core::mem::size_of::<SiteSlot>());
                sys::munmap(self.order.cast(), self.cap * 4);
            }
        }
        self.slots = slots;
        self.order = order;
        self.cap = new_cap;
        Some(())
    }

    fn grow_arena(&mut self, need: usize) -> Option<()> {
        let new_cap = (self.arena_cap * 2).max(16 * 1024).max(self.arena_len + need);
        let arena: *mut u64 = sys::mmap_anon(new_cap * 8).ok()?.cast();
        if self.arena_cap != 0 {
            // SAFETY: both regions are valid for arena_len words; distinct mappings.
            unsafe {
                core::ptr::copy_nonoverlapping(self.arena, arena, self.arena_len);
                sys::munmap(self.arena.cast(), self.arena_cap * 8);
            }
        }
        self.arena = arena;
        self.arena_cap = new_cap;
        Some(())
    }

    fn bytes(&self) -> usize {
        self.cap * (core::mem::size_of::<SiteSlot>() + 4) + self.arena_cap * 8
    }
}

/// The site table.
pub struct Sites {
    shards: [SpinLock<SiteShard>; SHARDS],
}

impl Sites {
    /// An empty table.
    pub const fn new() -> Sites {
        Sites { shards: [const { SpinLock::new(SiteShard::empty()) }; SHARDS] }
    }

    /// The id of this stack, adding it if new; 0 when out of memory or empty.
    pub fn intern(&self, frames: &[u64]) -> u32 {
        if frames.is_empty() {
            return 0;
        }
        let shard = (hash_frames(frames) >> 60) as usize % SHARDS;
        match self.shards[shard].lock().intern(frames) {
            Some(local) if local < (1 << 20) => local * SHARDS as u32 + shard as u32 + 1,
            _ => 0,
        }
    }

    /// Visits every site as (id, frames).
    ///
    /// # Safety
    /// Only with the world stopped or in a forked child.
    pub unsafe fn for_each_unlocked(&self, mut f: impl FnMut(u32, &[u64])) {
        for (shard, s) in self.shards.iter().enumerate() {
            // SAFETY: the caller stopped the world (or is the forked child): no
            // thread holds or takes the shard's lock while it is read.
            let s = unsafe { s.get_unlocked() };
            for local in 0..s.len {
                // SAFETY: local < len, order and slots hold those entries.
                let slot = unsafe { *s.slots.add(*s.order.add(local) as usize) };
                f(local as u32 * SHARDS as u32 + shard as u32 + 1, s.frames_at(slot.off, slot.nframes));
            }
        }
    }

    /// Number of sites and bytes used.
    pub fn usage(&self) -> (u64, u64) {
        let mut n = 0;
        let mut b = 0;
        for s in &self.shards {
            let s = s.lock();
            n += s.len as u64;
            b += s.bytes() as u64;
        }
        (n, b)
    }

    /// Takes every lock (before fork).
    pub fn lock_all(&self) {
        crate::sys::lock::lock_all_for_fork(&self.shards);
    }

    /// Releases every lock (after fork).
    ///
    /// # Safety
    /// Only after [`Sites::lock_all`].
    pub unsafe fn unlock_all(&self) {
        // SAFETY: the caller took these locks with `lock_all` (before fork).
        unsafe { crate::sys::lock::unlock_all_after_fork(&self.shards) }
    }
}

/// A thread's last sites and their frames (site ids are never reused, so
/// each pair stays true): a few entries, two to each set picked by a hash
/// of the frames, the one used longer ago replaced. One entry served a
/// loop allocating from one place; a thread that allocates from a few
/// places in turn (issue 43's workload of short-lived blocks from eight
/// sites across threads) went to the shared table each time, its lock's
/// cache line moving between the cores.
struct LastSites {
    entries: [LastSite; LAST_SITES],
    /// Counts uses, for `LastSite::used`.
    tick: core::cell::Cell<u32>,
}

struct LastSite {
    n: core::cell::Cell<usize>,
    frames: [core::cell::Cell<u64>; LAST_FRAMES],
    id: core::cell::Cell<u32>,
    /// `tick` when last found or written (0: never).
    used: core::cell::Cell<u32>,
}

/// Entries per thread (a power of two, two to a set): 16 x 280 bytes of
/// thread-local storage.
const LAST_SITES: usize = 16;
/// The deepest stack an entry keeps (the default depth, `HEAPDUMP_MAX_FRAMES`
/// 32): deeper ones go to the shared table each time.
const LAST_FRAMES: usize = 32;

thread_local! {
    static LAST_SITE: LastSites = const {
        LastSites {
            entries: [const {
                LastSite {
                    n: core::cell::Cell::new(0),
                    frames: [const { core::cell::Cell::new(0) }; LAST_FRAMES],
                    id: core::cell::Cell::new(0),
                    used: core::cell::Cell::new(0),
                }
            }; LAST_SITES],
            tick: core::cell::Cell::new(0),
        }
    };
}

/// The entry `frames` would have had in a direct-mapped cache; its set is
/// this over two (entries `2 * set` and `2 * set + 1`).
#[inline]
fn last_site_slot(frames: &[u64]) -> usize {
    (hash_frames(frames).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize % LAST_SITES
}

impl LastSites {
    fn touch(&self, e: &LastSite) {
        let t = self.tick.get().wrapping_add(1).max(1);
        self.tick.set(t);
        e.used.set(t);
    }
}

/// Where this thread's last sites live (address, size): no root.
pub fn tls_last_site() -> (u64, u64) {
    LAST_SITE.try_with(|v| (v as *const _ as u64, core::mem::size_of_val(v) as u64)).unwrap_or((0, 0))
}

/// The site of `frames`, when it is one of this thread's last sites.
#[inline]
pub fn last_site(frames: &[u64]) -> Option<u32> {
    let n = frames.len();
    if n > LAST_FRAMES {
        return None;
    }
    let set = last_site_slot(frames) & !1;
    LAST_SITE
        .try_with(|l| {
            for e in &l.entries[set..set + 2] {
                if e.n.get() == n && e.frames[..n].iter().zip(frames).all(|(a, b)| a.get() == *b) {
                    l.touch(e);
                    return e.id.get();
                }
            }
            0
        })
        .ok()
        .filter(|&id| id != 0)
}

/// Remembers `id` as one of this thread's last sites, of `frames`, in
/// place of the one of its set used longer ago.
pub fn remember_last_site(frames: &[u64], id: u32) {
    if frames.len() > LAST_FRAMES {
        return;
    }
    let set = last_site_slot(frames) & !1;
    let _ = LAST_SITE.try_with(|l| {
        let (a, b) = (&l.entries[set], &l.entries[set + 1]);
        // Wrapping ticks: "longer ago" is the larger distance from now.
        let now = l.tick.get();
        let e = if now.wrapping_sub(a.used.get()) >= now.wrapping_sub(b.used.get()) { a } else { b };
        for (x, y) in e.frames.iter().zip(frames) {
            x.set(*y);
        }
        e.n.set(frames.len());
        e.id.set(id);
        l.touch(e);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Several sites used in turn are each found again on this thread,
    /// each with its own id; a stack that differs in one frame is not.
    #[test]
    fn a_thread_keeps_several_last_sites() {
        let stacks: Vec<Vec<u64>> = (0..6u64).map(|k| vec![0x40_1000 + 16 * k, 0x40_2000, 0x40_3000]).collect();
        for (k, f) in stacks.iter().enumerate() {
            remember_last_site(f, 100 + k as u32);
        }
        let mut found = 0;
        for (k, f) in stacks.iter().enumerate() {
            match last_site(f) {
                Some(id) => {
                    assert_eq!(id, 100 + k as u32, "a site's own id");
                    found += 1;
                }
                None => assert!(
                    stacks[k + 1..].iter().filter(|g| last_site_slot(g) / 2 == last_site_slot(f) / 2).count() >= 2,
                    "only two later sites of the same set push one out"
                ),
            }
        }
        assert!(found >= 3, "{found} of 6 sites kept");
    }

    /// Two sites of one set are both kept; a third replaces the one used
    /// longer ago.
    #[test]
    fn a_set_keeps_its_two_last_used_sites() {
        let stack = |k: u64| vec![0x60_0000 + 16 * k, 0x60_8000];
        let a = stack(0);
        let same: Vec<Vec<u64>> = (1..10_000).map(stack).filter(|g| last_site_slot(g) == last_site_slot(&a)).take(2).collect();
        let (b, c) = (&same[0], &same[1]);
        remember_last_site(&a, 1);
        remember_last_site(b, 2);
        assert_eq!((last_site(&a), last_site(b)), (Some(1), Some(2)), "two sites of one entry both kept");
        assert_eq!(last_site(&a), Some(1));
        remember_last_site(c, 3);
        assert_eq!((last_site(&a), last_site(b), last_site(c)), (Some(1), None, Some(3)), "the one used longer ago goes");
        assert_eq!(last_site(&[0x40_1000, 0x40_2000, 0x40_3001]), None);
        assert_eq!(last_site(&[0x40_1000, 0x40_2000]), None);
        // Deeper than an entry keeps: never found, nothing pushed out.
        let deep: Vec<u64> = (0..LAST_FRAMES as u64 + 1).map(|k| 0x50_0000 + 8 * k).collect();
        remember_last_site(&deep, 7);
        assert_eq!(last_site(&deep), None);
    }
}
