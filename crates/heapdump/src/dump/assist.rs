//! A second thread that scans blocks for the compact dump.
//!
//! On a dense heap the compact dump's time is the blocks' scan: each word
//! read, looked up in the directory, the pointers gathered, then encoded
//! and written. Chunks of [`CHUNK`] blocks are claimed in index order by
//! whichever of two threads is free, each scanned and encoded into a slot
//! as one ALLOCS record (see [`fill`]): the helper claims the next chunk
//! as soon as one has a slot; the dumping thread writes the chunks' records
//! in order, and while the one it needs is still being filled, claims and
//! fills the next ones itself. The work splits between the two cores by
//! itself, and a helper that never runs (a failed clone) costs nothing but
//! the claims. Before its first chunk the helper encodes the pointers of
//! the index's largest blocks (an array of every node) into buffers of
//! their own, which the dumping thread copies when it gets there.
//!
//! Written by hand because it runs inside the traced process with the
//! world stopped: the helper is a raw `clone` thread (as the pipe's
//! writer, see [`crate::dump::writer`]), started with every signal blocked; it
//! reads the live blocks and the sorted index, writes only its mapping,
//! never touches thread-local storage, allocates nothing and cannot
//! panic (every slot index is bounded by the constants below).

use crate::dump::index::{Index, HUGE_KEPT};
use crate::dump::scan;
use crate::dump::writer::{futex_wake, wait_change, wait_exit};
use crate::sys;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use heapdump_format::{DenseEncoder, Encoded, Link, LinkEncoder};

/// Blocks to a chunk.
pub(crate) const CHUNK: usize = 1024;
/// Chunks the helper may be ahead by.
const SLOTS: usize = 4;
/// Bytes of encoded entries a slot holds; a chunk's blocks past them are
/// the dumping thread's.
const SLOT_BYTES: usize = 256 << 10;
/// Larger blocks are the dumping thread's (their pointers, at most one
/// per word, are gathered on the scanning thread's stack first).
const MAX_BLOCK: u64 = 4096;
/// How many blocks ahead the helper starts its lookups' reads (as the
/// dumping thread does, see `dump::PREFETCH_AHEAD`).
const AHEAD: usize = 8;
const STACK_LEN: usize = 256 << 10;
/// Set in `released` when the dump ends: wakes a helper waiting for a
/// slot.
const CLOSED: u32 = u32::MAX;

#[repr(C)]
struct Slot {
    /// The chunk it holds plus one once filled; 0 while free.
    ready: AtomicU32,
    /// What `bytes` hold: the chunk's first blocks as ALLOCS entries.
    encoded: Encoded,
    bytes: [u8; SLOT_BYTES],
}

#[repr(C)]
struct Shared {
    /// The first chunk nobody has claimed.
    next: AtomicU64,
    /// Chunks the dumping thread has written and released: chunk k may be
    /// claimed once k < released + SLOTS (its slot's last chunk is
    /// released; a slot's `ready` alone cannot say that a chunk claimed
    /// into it is done being filled).
    released: AtomicU32,
    chunks: u64,
    /// The helper's thread id; the kernel clears it (and wakes waiters on
    /// it) when the helper exits.
    tid: AtomicU32,
    index: *const Index,
    /// The index's largest blocks (see `Index::huge`), each measured once
    /// by whichever thread claims it.
    measures: [Measure; HUGE_KEPT],
    slots: [Slot; SLOTS],
}

/// A large block's pointers, encoded by the helper (or only counted and
/// measured, when they did not fit `buf`).
#[repr(C)]
struct Measure {
    /// [`UNCLAIMED`], [`MEASURING`], [`MEASURED`] or [`ENCODED`].
    state: AtomicU32,
    count: AtomicU64,
    len: AtomicU64,
    /// Where they are encoded (mapped by the dumping thread before the
    /// helper starts, unmapped by it after; null: counted only).
    buf: *mut u8,
    buf_len: usize,
    /// The encoder, once [`ENCODED`] (all integers: zeroed is valid).
    enc: LinkEncoder,
}

const UNCLAIMED: u32 = 0;
const MEASURING: u32 = 1;
const MEASURED: u32 = 2;
const ENCODED: u32 = 3;
/// The most a large block's encoded pointers may be given (virtual: the
/// pages written are those the encoding takes, 3 to 4 bytes a pointer).
const ENCODE_MAX: usize = 1 << 30;

/// A large block's pointers as the helper left them.
pub(crate) enum Large<'a> {
    /// Encoded, for `Writer::dense_alloc_encoded`.
    Encoded(&'a LinkEncoder, &'a [u8]),
    /// Counted and measured, for `Scanner::alloc_measured`.
    Measured(u64, u64),
}

const SHARED_LEN: usize = core::mem::size_of::<Shared>().next_multiple_of(4096);
/// The shared block, the slots, the helper's stack.
pub(crate) const MAP_LEN: usize = SHARED_LEN + STACK_LEN;

/// Maps the helper's block (once per process; kept with the dumper's
/// scratch). Null when it cannot.
pub(crate) fn map() -> *mut u8 {
    sys::mmap_anon(MAP_LEN).unwrap_or(core::ptr::null_mut())
}

/// The Shared at the start of `map`, to write its plain fields before the
/// helper starts.
fn sh_mut(map: *mut u8) -> *mut Shared {
    map.cast::<Shared>()
}

fn shared<'a>(map: *mut u8) -> &'a Shared {
    // SAFETY: the mapping starts with a Shared (zeroed memory is valid for
    // its atomics, integers and pointer) and outlives every user of it.
    unsafe { &*map.cast::<Shared>() }
}

fn slot_ptr(map: *mut u8, k: usize) -> *mut Slot {
    // SAFETY: k < SLOTS: a slot of the Shared at the start of the mapping.
    unsafe { core::ptr::addr_of_mut!((*map.cast::<Shared>()).slots[k % SLOTS]) }
}

/// The helper: claims free chunks and scans them until none is left.
extern "C" fn helper(arg: *mut libc::c_void) -> libc::c_int {
    let map = arg.cast::<u8>();
    let sh = shared(map);
    // SAFETY: the index outlives the helper: the dumping thread waits for
    // it to exit before releasing the index (see `Assist::finish`).
    let index = unsafe { &*sh.index };
    // The largest blocks first: the dumping thread reaches each with its
    // count and length known, and writes it in one scan where it took two
    // (the dense heap's array of every node: 0.3 s at 10 M).
    for (k, &at) in index.huge().iter().enumerate() {
        let m = &sh.measures[k];
        if m.state.compare_exchange(UNCLAIMED, MEASURING, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            let e = &index.as_slice()[at];
            if !m.buf.is_null() {
                // SAFETY: the buffer is the measure's, written by no one
                // else until its state says ENCODED.
                let out = unsafe { core::slice::from_raw_parts_mut(m.buf, m.buf_len) };
                let mut enc = LinkEncoder::new(at as u64, e.size);
                if scan::links_of(index, e).all(|l| enc.push(out, &l) == Ok(true)) {
                    // SAFETY: k < HUGE_KEPT: the measure's encoder, read by
                    // the dumping thread only after the state below
                    // (Release).
                    unsafe { core::ptr::addr_of_mut!((*sh_mut(map)).measures[k].enc).write(enc) };
                    m.state.store(ENCODED, Ordering::Release);
                    futex_wake(&m.state);
                    continue;
                }
            }
            let (count, len) = scan::measure(index, e, at as u64);
            m.count.store(count, Ordering::Relaxed);
            m.len.store(len, Ordering::Relaxed);
            m.state.store(MEASURED, Ordering::Release);
            futex_wake(&m.state);
        }
    }
    loop {
        let j = sh.next.load(Ordering::Acquire);
        if j >= sh.chunks {
            return 0;
        }
        let released = sh.released.load(Ordering::Acquire);
        if j >= u64::from(released) + SLOTS as u64 {
            // The dumping thread has not yet written chunk j - SLOTS.
            wait_change(&sh.released, released);
            continue;
        }
        if sh.next.compare_exchange(j, j + 1, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            fill(map, index, j as usize);
        }
    }
}

/// The `ready` word of chunk `j`'s slot.
fn ready_of<'a>(map: *mut u8, j: usize) -> &'a AtomicU32 {
    // SAFETY: an atomic of a slot of the mapping, shared by both threads.
    unsafe { &(*slot_ptr(map, j)).ready }
}

/// Scans chunk `j` (claimed by the caller; its slot free) into its slot,
/// encoded as the entries of an ALLOCS record: its first blocks, up to
/// one too large for the slot.
fn fill(map: *mut u8, index: &Index, j: usize) {
    let all = index.as_slice();
    let sp = slot_ptr(map, j);
    let from = j * CHUNK;
    let to = (from + CHUNK).min(all.len());
    // SAFETY: the slot is the caller's until `ready` says otherwise: its
    // bytes are written by no one else, and read by no one meanwhile.
    let out = unsafe { &mut *core::ptr::addr_of_mut!((*sp).bytes) };
    let mut enc = DenseEncoder::new(from as u64);
    let mut links = [Link { offset: 0, target: 0, delta: 0 }; (MAX_BLOCK / 8) as usize];
    'blocks: for i in from..to {
        if let Some(f) = all.get(i + 2 * AHEAD) {
            index.prefetch(f.addr, f.size, false);
        }
        if let Some(f) = all.get(i + AHEAD) {
            index.prefetch(f.addr, f.size, true);
        }
        let e = &all[i];
        if e.size > MAX_BLOCK {
            break;
        }
        let mut count = 0usize;
        for l in scan::links_of(index, e) {
            // At most one per word: size / 8 <= links.len().
            let Some(slot) = links.get_mut(count) else { break 'blocks };
            *slot = l;
            count += 1;
        }
        let info = scan::alloc_info_with(e, scan::first_word(e), scan::hashbrown_flags(e));
        if enc.push(out, &info, &links[..count]) != Ok(true) {
            break;
        }
    }
    // SAFETY: as above.
    unsafe { core::ptr::addr_of_mut!((*sp).encoded).write(enc.encoded()) };
    let ready = ready_of(map, j);
    ready.store(j as u32 + 1, Ordering::Release);
    futex_wake(ready);
}

/// A chunk's first blocks, scanned and encoded (see [`fill`]).
pub(crate) struct Scanned<'a> {
    pub encoded: Encoded,
    pub bytes: &'a [u8],
}

/// The dumping thread's side of the helper.
pub(crate) struct Assist {
    /// Null: no helper; every chunk is the caller's.
    map: *mut u8,
}

impl Assist {
    /// No helper.
    pub(crate) const NONE: Assist = Assist { map: core::ptr::null_mut() };

    /// Starts the helper over the entries of `index` (null `map`, or a
    /// helper that cannot start: none).
    pub(crate) fn start(map: *mut u8, index: &Index) -> Assist {
        if map.is_null() {
            return Assist::NONE;
        }
        let sh = shared(map);
        sh.next.store(0, Ordering::Relaxed);
        sh.released.store(0, Ordering::Relaxed);
        sh.tid.store(0, Ordering::Relaxed);
        for (k, &at) in index.huge().iter().enumerate() {
            // SAFETY: k < HUGE_KEPT: a measure of the Shared at the start of
            // the mapping.
            let m = unsafe { core::ptr::addr_of_mut!((*sh_mut(map)).measures[k]) };
            // A buffer for its pointers as encoded: room for one varint
            // triple per word (virtual; none past ENCODE_MAX: counted only).
            let want = (index.as_slice()[at].size / 8) as usize * LinkEncoder::MAX_LINK;
            let buf = if want <= ENCODE_MAX { sys::mmap_sparse(want).unwrap_or(core::ptr::null_mut()) } else { core::ptr::null_mut() };
            // SAFETY: no helper runs yet: the measures are ours.
            unsafe {
                (*m).state.store(UNCLAIMED, Ordering::Relaxed);
                (*m).buf = buf;
                (*m).buf_len = if buf.is_null() { 0 } else { want };
            }
        }
        for k in 0..SLOTS {
            // SAFETY: the slot's atomics; no helper runs yet.
            unsafe { (*slot_ptr(map, k)).ready.store(0, Ordering::Relaxed) };
        }
        // SAFETY: plain fields of our mapping, read by the helper only
        // after the clone below.
        unsafe {
            (*map.cast::<Shared>()).chunks = index.as_slice().len().div_ceil(CHUNK) as u64;
            (*map.cast::<Shared>()).index = index;
        }
        // SAFETY: the stack is the top of our mapping, used by no one else;
        // `helper` touches only the mapping, the index and the live blocks
        // (read), and makes raw system calls; the kernel clears `tid` when
        // it exits, and `finish` waits for that before the index goes.
        let started = unsafe { sys::clone_thread(helper, map.wrapping_add(MAP_LEN), map.cast(), sh.tid.as_ptr().cast::<i32>()) };
        let mut a = Assist { map };
        if !started {
            // No helper to wait for: the buffers go, and every chunk is
            // the caller's.
            a.finish();
        }
        a
    }

    /// Chunk `j` (every chunk is asked for, in order) as scanned into its
    /// slot: its first blocks (the rest, if any, are the caller's). None
    /// when there is no helper: all of it is the caller's. While the
    /// helper is still on chunk `j`, the caller scans chunks ahead into
    /// their slots itself, so that neither thread waits for the other
    /// while there is a chunk to scan. Call [`Assist::release`] once done
    /// with it.
    pub(crate) fn take(&mut self, j: usize) -> Option<Scanned<'_>> {
        if self.map.is_null() {
            return None;
        }
        let (map, sh) = (self.map, shared(self.map));
        // SAFETY: the index outlives this Assist (see `finish`).
        let index = unsafe { &*sh.index };
        let ready = ready_of(map, j);
        loop {
            let r = ready.load(Ordering::Acquire);
            if r == j as u32 + 1 {
                break;
            }
            // The first unclaimed chunk, if it has a slot (chunks j to
            // j + SLOTS - 1 do: j - 1 is released).
            let k = sh.next.load(Ordering::Acquire);
            if k < sh.chunks && (k as usize) < j + SLOTS && sh.next.compare_exchange(k, k + 1, Ordering::AcqRel, Ordering::Acquire).is_ok()
            {
                fill(map, index, k as usize);
                continue;
            }
            wait_change(ready, r);
        }
        let sp = slot_ptr(map, j);
        // SAFETY: the slot's `encoded` and the bytes it covers were written
        // before `ready` was stored (Release, read Acquire above), and
        // nobody writes the slot until it is released.
        unsafe {
            let encoded = core::ptr::addr_of!((*sp).encoded).read();
            let bytes = core::slice::from_raw_parts(core::ptr::addr_of!((*sp).bytes).cast::<u8>(), encoded.len.min(SLOT_BYTES));
            Some(Scanned { encoded, bytes })
        }
    }

    /// The pointers of the block at index position `at`, when it is one
    /// of the largest and the helper got to it first (waiting if it is on
    /// it now): encoded, or counted and measured. None when the caller is
    /// to scan it (it is not one, or it is now the caller's).
    pub(crate) fn measured(&mut self, at: usize) -> Option<Large<'_>> {
        if self.map.is_null() {
            return None;
        }
        let sh = shared(self.map);
        // SAFETY: the index outlives this Assist (see `finish`).
        let index = unsafe { &*sh.index };
        let k = index.huge().iter().position(|&p| p == at)?;
        let m = &sh.measures[k];
        if m.state.compare_exchange(UNCLAIMED, MEASURING, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            return None;
        }
        loop {
            let s = m.state.load(Ordering::Acquire);
            if s == MEASURED {
                return Some(Large::Measured(m.count.load(Ordering::Relaxed), m.len.load(Ordering::Relaxed)));
            }
            if s == ENCODED {
                // SAFETY: the encoder and the bytes it covers were written
                // before the state (Release, read Acquire above); nothing
                // writes them again.
                return Some(Large::Encoded(&m.enc, unsafe { core::slice::from_raw_parts(m.buf, m.enc.len().min(m.buf_len)) }));
            }
            wait_change(&m.state, s);
        }
    }

    /// Gives chunk `j`'s slot back to the helper.
    pub(crate) fn release(&mut self, j: usize) {
        if self.map.is_null() {
            return;
        }
        let sh = shared(self.map);
        ready_of(self.map, j).store(0, Ordering::Release);
        sh.released.store(j as u32 + 1, Ordering::Release);
        futex_wake(&sh.released);
    }

    /// Stops the helper (it finishes the chunk it is on) and waits for it
    /// to exit. Also on drop, so that an early error never leaves it
    /// reading an index that is about to go.
    pub(crate) fn finish(&mut self) {
        if self.map.is_null() {
            return;
        }
        let sh = shared(self.map);
        sh.next.store(u64::MAX, Ordering::Release);
        // A helper waiting for a slot sees this change, wakes, and finds
        // nothing left to claim.
        sh.released.store(CLOSED, Ordering::Release);
        futex_wake(&sh.released);
        wait_exit(&sh.tid);
        // SAFETY: the index outlives this Assist; the helper is gone.
        let index = unsafe { &*sh.index };
        for k in 0..index.huge().len() {
            let m = &sh.measures[k];
            if !m.buf.is_null() {
                // SAFETY: mapped in `start`, referenced by nothing now (a
                // `Large` borrowed from this Assist cannot outlive it).
                unsafe { sys::munmap(m.buf, m.buf_len) };
            }
        }
        self.map = core::ptr::null_mut();
    }
}

impl Drop for Assist {
    fn drop(&mut self) {
        self.finish();
    }
}
