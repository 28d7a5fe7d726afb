//! A caching `.eh_frame` unwinder for allocation sites (framehop's
//! approach): the unwind rule of each return address is computed once,
//! with gimli, from the module's `.eh_frame_hdr` search table, and kept in
//! a process-wide cache; a backtrace is then a walk of a few loads per
//! frame instead of libgcc's lookup and CFI interpretation per frame. Each
//! thread also keeps its last walk: the outer frames a new walk shares with
//! it are checked word by word on the stack and copied (see [`Memo`]).
//!
//! The walk itself is hand-written because it runs inside the allocator:
//! no allocation (gimli's unwind context lives on the stack), no lock
//! (modules are found with glibc's lock-free `_dl_find_object`, the cache
//! is a seqlocked table in mapped memory), no panic. Anything it does not
//! model (a CFA computed by a DWARF expression, a return address not at
//! CFA-8, a signal frame) makes it give up, and the caller falls back to
//! `_Unwind_Backtrace` for that capture: the sites are the same either
//! way, which the tests check frame by frame.

use crate::sys;

/// Room for a backtrace: written from the front, never read past what the
/// capture says it wrote (so the caller need not zero it: 512 bytes per
/// allocation with a site).
pub type Frames = [core::mem::MaybeUninit<u64>];
use core::ffi::c_void;
use core::sync::atomic::{fence, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use gimli::{BaseAddresses, CfaRule, EhFrame, EhFrameHdr, NativeEndian, Pointer, Register, RegisterRule, UnwindContext, UnwindSection};

/// glibc's `struct dl_find_object` (2.35 and later).
#[repr(C)]
struct DlFindObject {
    flags: u64,
    map_start: *mut c_void,
    map_end: *mut c_void,
    link_map: *mut c_void,
    eh_frame: *mut c_void,
    reserved: [u64; 7],
}

type FindObject = unsafe extern "C" fn(*mut c_void, *mut DlFindObject) -> i32;

static FIND_OBJECT: AtomicUsize = AtomicUsize::new(0);
/// `__libc_stack_end`: the top of the main thread's stack.
static MAIN_STACK_END: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The top of this thread's stack, once known (0: not yet).
    static STACK_TOP: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
}

/// The highest address the walk may read for a thread whose stack pointer
/// is `sp`: glibc puts a thread's descriptor just above its stack (also
/// for stacks the program supplies), and the main thread's stack ends at
/// `__libc_stack_end`. Other stacks (coroutines, raw clones) are unknown:
/// the walk then declines and libgcc's unwinder is used.
fn stack_top(sp: u64) -> Option<u64> {
    const MAX_STACK: u64 = 1 << 30;
    let near = |top: u64| top > sp && top - sp < MAX_STACK;
    let known = STACK_TOP.try_with(|t| t.get()).ok()?;
    if known != 0 && near(known) {
        return Some(known);
    }
    let me = sys::pthread_self();
    let main = MAIN_STACK_END.load(Ordering::Relaxed);
    let top = if near(me) {
        me
    } else if near(main) {
        main
    } else {
        return None;
    };
    let _ = STACK_TOP.try_with(|t| t.set(top));
    Some(top)
}
static CACHE: AtomicPtr<Entry> = AtomicPtr::new(core::ptr::null_mut());
const CACHE_ENTRIES: usize = 1 << 16;

/// One cached rule, under a sequence lock (odd = being written).
#[repr(C, align(32))]
struct Entry {
    seq: AtomicU64,
    pc: AtomicU64,
    rule: AtomicU64,
}

/// How to find the caller's frame from a frame at a given address.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Rule {
    /// CFA = (rbp if `from_rbp` else rsp) + `cfa`; return address at CFA-8;
    /// the caller's rbp at CFA+`rbp` when `rbp` is `Some`, else unchanged.
    Step { from_rbp: bool, cfa: i32, rbp: Option<i32> },
    /// The outermost frame (no unwind information, or the return address
    /// is undefined): the backtrace ends here.
    End,
    /// Something this unwinder does not model.
    Unsupported,
}

impl Rule {
    // Packed in one word: bits 0-1 the kind (1 step, 2 end, 3 unsupported;
    // 0 never stored), bit 2 from_rbp, bits 3-33 the CFA offset biased by
    // 2^30, bit 34 whether rbp is restored, bits 35-63 its offset (29-bit
    // two's complement).
    fn pack(self) -> u64 {
        match self {
            Rule::Step { from_rbp, cfa, rbp } => {
                let cfa = u64::from((cfa + (1 << 30)) as u32 & 0x7fff_ffff);
                let rbp = rbp.map_or(0, |o| (1 << 34) | (u64::from(o as u32 & 0x1fff_ffff) << 35));
                1 | (u64::from(from_rbp) << 2) | (cfa << 3) | rbp
            }
            Rule::End => 2,
            Rule::Unsupported => 3,
        }
    }

    fn unpack(v: u64) -> Rule {
        match v & 3 {
            2 => Rule::End,
            3 => Rule::Unsupported,
            _ => Rule::Step {
                from_rbp: v & 4 != 0,
                cfa: ((v >> 3) as u32 & 0x7fff_ffff) as i32 - (1 << 30),
                rbp: (v & (1 << 34) != 0).then_some((((v >> 35) as u32) << 3) as i32 >> 3),
            },
        }
    }
}

/// Resolves `_dl_find_object` (glibc 2.35+) and maps the cache; without
/// either, [`capture`] always declines and `_Unwind_Backtrace` is used.
pub fn init() {
    // Only called through the signature glibc documents for it.
    let f = sys::dlsym(c"_dl_find_object", false);
    if f.is_null() {
        return;
    }
    // `__libc_stack_end` is a pointer-sized variable.
    let end = sys::dlsym(c"__libc_stack_end", false);
    if !end.is_null() {
        // SAFETY: the loader's variable, set before any user code runs.
        MAIN_STACK_END.store(unsafe { *(end as *const u64) }, Ordering::Relaxed);
    }
    let Ok(mem) = sys::mmap_anon(CACHE_ENTRIES * core::mem::size_of::<Entry>()) else { return };
    CACHE.store(mem.cast(), Ordering::Release);
    FIND_OBJECT.store(f as usize, Ordering::Release);
}

fn slot(pc: u64) -> Option<&'static Entry> {
    let cache = CACHE.load(Ordering::Acquire);
    if cache.is_null() {
        return None;
    }
    let i = (pc.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 48) as usize & (CACHE_ENTRIES - 1);
    // SAFETY: the cache is a zeroed mapping of CACHE_ENTRIES entries that
    // lives as long as the process; entries are only touched atomically.
    Some(unsafe { &*cache.add(i) })
}

fn cached(pc: u64) -> Option<Rule> {
    let e = slot(pc)?;
    let s1 = e.seq.load(Ordering::Acquire);
    if s1 & 1 != 0 {
        return None;
    }
    let k = e.pc.load(Ordering::Relaxed);
    let r = e.rule.load(Ordering::Relaxed);
    fence(Ordering::Acquire);
    let s2 = e.seq.load(Ordering::Relaxed);
    (s1 == s2 && k == pc && r != 0).then(|| Rule::unpack(r))
}

fn remember(pc: u64, rule: Rule) {
    let Some(e) = slot(pc) else { return };
    let s = e.seq.load(Ordering::Relaxed);
    if s & 1 != 0 || e.seq.compare_exchange(s, s + 1, Ordering::Acquire, Ordering::Relaxed).is_err() {
        return; // another writer: skip caching this time
    }
    fence(Ordering::Release);
    e.pc.store(pc, Ordering::Relaxed);
    e.rule.store(rule.pack(), Ordering::Relaxed);
    e.seq.store(s + 2, Ordering::Release);
}

/// Forgets every cached rule (code was unloaded: its addresses may be
/// reused by other code).
pub fn forget() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
    let cache = CACHE.load(Ordering::Acquire);
    if cache.is_null() {
        return;
    }
    for i in 0..CACHE_ENTRIES {
        // SAFETY: as in `slot`.
        let e = unsafe { &*cache.add(i) };
        let s = loop {
            let s = e.seq.load(Ordering::Relaxed);
            if s & 1 == 0 && e.seq.compare_exchange(s, s + 1, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                break s;
            }
            core::hint::spin_loop();
        };
        fence(Ordering::Release);
        e.pc.store(0, Ordering::Relaxed);
        e.rule.store(0, Ordering::Relaxed);
        e.seq.store(s + 2, Ordering::Release);
    }
}

/// Rules in the cache now (for tests).
pub fn cached_rules() -> usize {
    let cache = CACHE.load(Ordering::Acquire);
    if cache.is_null() {
        return 0;
    }
    (0..CACHE_ENTRIES)
        // SAFETY: as in `slot`.
        .filter(|&i| unsafe { &*cache.add(i) }.rule.load(Ordering::Relaxed) != 0)
        .count()
}

/// Storage for gimli's unwind context on the stack.
struct OnStack;

impl gimli::UnwindContextStorage<usize> for OnStack {
    type Rules = [(Register, RegisterRule<usize>); 32];
    type Stack = [gimli::UnwindTableRow<usize, Self>; 2];
}

/// Computes the rule at `pc` from the module's unwind tables.
fn compute(pc: u64) -> Rule {
    let f = FIND_OBJECT.load(Ordering::Acquire);
    if f == 0 {
        return Rule::Unsupported;
    }
    // SAFETY: FIND_OBJECT holds `_dl_find_object`, whose type is FindObject.
    let find: FindObject = unsafe { core::mem::transmute::<usize, FindObject>(f) };
    // SAFETY: an all-zero DlFindObject is a valid value of the plain struct.
    let mut obj: DlFindObject = unsafe { core::mem::zeroed() };
    // SAFETY: `obj` is writable; `_dl_find_object` neither locks nor allocates.
    if unsafe { find(pc as *mut c_void, &mut obj) } != 0 || obj.eh_frame.is_null() {
        return Rule::End;
    }
    let hdr = obj.eh_frame as usize;
    let end = obj.map_end as usize;
    if end <= hdr {
        return Rule::Unsupported;
    }
    // SAFETY: the loader maps the object from map_start to map_end and the
    // PT_GNU_EH_FRAME segment lies inside it; gimli reads only the header,
    // its search table and the FDE/CIE those point to, all inside the
    // object's own (loaded, read-only) unwind data.
    let hdr_bytes = unsafe { core::slice::from_raw_parts(hdr as *const u8, end - hdr) };
    let bases = BaseAddresses::default().set_eh_frame_hdr(hdr as u64);
    let Ok(parsed) = EhFrameHdr::new(hdr_bytes, NativeEndian).parse(&bases, 8) else { return Rule::Unsupported };
    let Pointer::Direct(eh_frame) = parsed.eh_frame_ptr() else { return Rule::Unsupported };
    let eh_frame = eh_frame as usize;
    if eh_frame >= end {
        return Rule::Unsupported;
    }
    // SAFETY: as above: `.eh_frame` is part of the loaded object.
    let frame_bytes = unsafe { core::slice::from_raw_parts(eh_frame as *const u8, end - eh_frame) };
    let section = EhFrame::new(frame_bytes, NativeEndian);
    let bases = bases.set_eh_frame(eh_frame as u64);
    let Some(table) = parsed.table() else { return Rule::Unsupported };
    let Ok(fde) = table.fde_for_address(&section, &bases, pc, EhFrame::cie_from_offset) else { return Rule::End };
    let mut ctx = UnwindContext::<usize, OnStack>::new_in();
    let Ok(row) = fde.unwind_info_for_address(&section, &bases, &mut ctx, pc) else { return Rule::Unsupported };
    let (from_rbp, cfa) = match *row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => {
            let Ok(off) = i32::try_from(offset) else { return Rule::Unsupported };
            if off.unsigned_abs() >= 1 << 29 {
                return Rule::Unsupported;
            }
            match register {
                gimli::X86_64::RSP => (false, off),
                gimli::X86_64::RBP => (true, off),
                _ => return Rule::Unsupported,
            }
        }
        CfaRule::Expression(_) => return Rule::Unsupported,
    };
    match row.register(gimli::X86_64::RA) {
        Some(RegisterRule::Offset(-8)) => {}
        Some(RegisterRule::Undefined) => return Rule::End,
        _ => return Rule::Unsupported,
    }
    let rbp = match row.register(gimli::X86_64::RBP) {
        // No rule: the register is preserved (callee-saved).
        None | Some(RegisterRule::Undefined | RegisterRule::SameValue) => None,
        Some(RegisterRule::Offset(o)) => match i32::try_from(o) {
            Ok(o) if o.unsigned_abs() < 1 << 27 => Some(o),
            _ => return Rule::Unsupported,
        },
        _ => return Rule::Unsupported,
    };
    Rule::Step { from_rbp, cfa, rbp }
}

fn rule_at(pc: u64) -> Rule {
    if let Some(r) = cached(pc) {
        return r;
    }
    let r = compute(pc);
    remember(pc, r);
    r
}

/// The walk's state after a step: the caller's stack pointer (the CFA),
/// frame pointer and return address, and where that frame pointer was
/// read from (0: carried over unchanged).
#[derive(Clone, Copy)]
struct Step {
    sp: u64,
    bp: u64,
    pc: u64,
    bp_slot: u64,
}

/// Steps a thread's last complete walk ended with, outermost first.
const MEMO_STEPS: usize = 128;

/// A step as the memo holds it: the frame pointer inverted. Code built
/// without frame pointers uses rbp for anything, a heap pointer included,
/// and the memo lives in thread-local storage, which a dump scans as a
/// root: kept as is, it would make a leaked block look reachable. An
/// inverted user-space address is a kernel one, which points at no block.
#[inline]
fn hide(s: Step) -> Step {
    Step { bp: !s.bp, ..s }
}

/// The thread's last complete walk, outermost step first.
///
/// Most allocations of a thread share the outer part of their stack with
/// the previous one (the same `main`, thread start and loop). Once the walk
/// reaches a state (stack pointer, frame pointer, return address) that the
/// previous walk also passed through, the rest of the walk is a function
/// of that state and of the stack words it reads: if every return address
/// and saved frame pointer above is still the word the previous walk read,
/// the rest of the frames are the same, and are copied instead of being
/// walked (a load and a compare per frame instead of a rule lookup).
struct Memo {
    /// [`GENERATION`] when it was written: rules forgotten since (code
    /// unloaded) void it.
    generation: core::cell::Cell<u64>,
    len: core::cell::Cell<usize>,
    /// The memo in `0..len`; the walk in progress writes its own steps,
    /// innermost first, from `MEMO_STEPS` up.
    steps: [core::cell::Cell<Step>; 2 * MEMO_STEPS],
}

/// Counts [`forget`] calls.
static GENERATION: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static MEMO: Memo = const {
        Memo {
            generation: core::cell::Cell::new(0),
            len: core::cell::Cell::new(0),
            steps: [const { core::cell::Cell::new(Step { sp: 0, bp: 0, pc: 0, bp_slot: 0 }) }; 2 * MEMO_STEPS],
        }
    };
}

/// Where a walk stands: frames written so far and frames still to skip.
struct Out<'a> {
    frames: &'a mut Frames,
    n: usize,
    skip: usize,
}

impl Out<'_> {
    /// Takes one return address; false once `frames` is full.
    #[inline]
    fn push(&mut self, pc: u64) -> bool {
        if self.skip > 0 {
            self.skip -= 1;
            return true;
        }
        if self.n >= self.frames.len() {
            return false;
        }
        self.frames[self.n] = core::mem::MaybeUninit::new(pc);
        self.n += 1;
        true
    }
}

/// Captures return addresses into `frames`, skipping the first `skip`
/// (the first is the return address into this function's caller).
/// `None` when this unwinder cannot walk the stack: use libgcc's.
///
/// Every read is between the stack pointer and the top of the thread's
/// stack, so even a stale rule (code unloaded and other code loaded at
/// its address) gives wrong frames, never a fault.
///
/// # Signal safety
/// Uses the thread's [`Memo`]; a signal handler that interrupts a capture
/// and allocates is inside the tracker already and captures nothing.
#[inline(never)]
pub fn capture(frames: &mut Frames, skip: usize) -> Option<usize> {
    if FIND_OBJECT.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let (pc, sp, bp): (u64, u64, u64);
    // SAFETY: reads three registers; touches no memory and no flags.
    unsafe {
        core::arch::asm!("lea {0}, [rip]", "mov {1}, rsp", "mov {2}, rbp", out(reg) pc, out(reg) sp, out(reg) bp,
            options(nomem, nostack, preserves_flags));
    }
    let top = stack_top(sp)?;
    let mut out = Out { frames, n: 0, skip };
    MEMO.try_with(|m| walk(m, &mut out, Step { sp, bp, pc, bp_slot: 0 }, top)).ok().flatten().map(|_| out.n)
}

/// The walk from `first`, using and then updating the thread's memo.
fn walk(m: &Memo, out: &mut Out<'_>, first: Step, top: u64) -> Option<()> {
    let generation = GENERATION.load(Ordering::Acquire);
    let mut old = if m.generation.get() == generation { m.len.get() } else { 0 };
    // The steps of this walk not found in the memo.
    let mut nfresh = 0;
    // A copy of the memo that met a frame no longer on the stack at memo
    // step k would fail again from any inner match (the stack does not
    // change during the walk): only matches at steps up to k are tried
    // again (`limit` = k + 1).
    let mut limit = usize::MAX;
    let mut cur = first;
    // The first lookup is at the current instruction; later ones at the
    // call instruction, one byte before the return address.
    let mut probe = cur.pc;
    loop {
        // Memo entries below this stack pointer belong to frames that are
        // gone; one at it may be this very state.
        while old > 0 && m.steps[old - 1].get().sp < cur.sp {
            old -= 1;
        }
        if old > 0 && nfresh > 0 && old <= limit {
            let s = hide(m.steps[old - 1].get());
            if (s.sp, s.bp, s.pc) == (cur.sp, cur.bp, cur.pc) {
                // The rest is the memo's as far as the stack still holds
                // what its walk read: copy it, checking each frame as it
                // goes (only the frames taken need to be right), and keep
                // the memo under the fresh steps.
                let mut changed = None;
                for k in (0..old - 1).rev() {
                    let step = hide(m.steps[k].get());
                    if !still_there(step) {
                        changed = Some(k);
                        break;
                    }
                    if !out.push(step.pc) {
                        break;
                    }
                }
                let Some(k) = changed else {
                    remember_walk(m, old, nfresh - 1, generation);
                    return Some(());
                };
                // Memo step k changed (another call site below the same
                // path: a thread allocating from several places through
                // one allocator). The steps checked before it, from old - 2
                // out to k + 1, are this walk's own (each follows from the
                // one inside it and the stack words it read, which are
                // still there): their frames are taken, they join the
                // fresh steps, and the walk goes on from the outermost,
                // not through each of their rules again.
                limit = k + 1;
                if k + 1 < old - 1 {
                    for j in (k + 1..old - 1).rev() {
                        if nfresh < MEMO_STEPS {
                            m.steps[MEMO_STEPS + nfresh].set(m.steps[j].get());
                        }
                        nfresh += 1;
                    }
                    cur = hide(m.steps[k + 1].get());
                    probe = cur.pc - 1;
                }
            }
        }
        let (from_rbp, cfa, rbp) = match rule_at(probe) {
            Rule::Step { from_rbp, cfa, rbp } => (from_rbp, cfa, rbp),
            Rule::End => break,
            Rule::Unsupported => return None,
        };
        let cfa = (if from_rbp { cur.bp } else { cur.sp }).wrapping_add(cfa as i64 as u64);
        // The stack grows down: a caller's frame is above. Anything else
        // means the rules do not describe this stack; let libgcc decide.
        if cfa <= cur.sp || cfa > top || cfa % 8 != 0 {
            return None;
        }
        let saved_bp = rbp.map(|o| cfa.wrapping_add(o as i64 as u64));
        if saved_bp.is_some_and(|a| a < cur.sp || a.saturating_add(8) > top) {
            return None;
        }
        // SAFETY: sp < cfa <= top: the return address at CFA-8 lies on this
        // thread's stack, mapped from the stack pointer up to its top (the
        // walk started on it and only moves up). So does the saved rbp,
        // checked just above. Correct unwind rules put both in the frame.
        let ra = unsafe { ((cfa - 8) as *const u64).read() };
        let mut next = Step { sp: cfa, bp: cur.bp, pc: ra, bp_slot: 0 };
        if let Some(a) = saved_bp {
            // SAFETY: the saved rbp's slot `a` lies in [sp, top), checked just
            // above: mapped stack of this thread, 8 bytes readable.
            next.bp = unsafe { (a as *const u64).read() };
            next.bp_slot = a;
        }
        cur = next;
        if cur.pc == 0 {
            break;
        }
        if nfresh < MEMO_STEPS {
            m.steps[MEMO_STEPS + nfresh].set(hide(cur));
        }
        nfresh += 1;
        if !out.push(cur.pc) {
            // Cut short by the frame limit: not a complete walk to remember.
            return Some(());
        }
        probe = cur.pc - 1;
    }
    // A complete walk: it replaces the memo.
    remember_walk(m, 0, nfresh, generation);
    Some(())
}

/// Whether the stack still holds the return address and saved frame
/// pointer the memo's walk read for step `s`.
#[inline]
fn still_there(s: Step) -> bool {
    // SAFETY: these words were read from this thread's stack, between a
    // stack pointer at or below the step and the stack's top, by the walk
    // that wrote the memo; this walk's stack pointer is below the step
    // (it matched an inner one), so they are still on the mapped stack.
    let ra = unsafe { ((s.sp - 8) as *const u64).read() };
    // SAFETY: the saved frame pointer's slot was read from the same
    // stack by the walk that wrote the memo, above this walk's stack
    // pointer: still mapped.
    ra == s.pc && (s.bp_slot == 0 || unsafe { (s.bp_slot as *const u64).read() } == s.bp)
}

/// Makes the memo its first `keep` steps with the walk's first `fresh`
/// steps (innermost first, from `MEMO_STEPS`) on top.
fn remember_walk(m: &Memo, keep: usize, fresh: usize, generation: u64) {
    let len = keep + fresh;
    if len > MEMO_STEPS {
        m.len.set(0);
        return;
    }
    for i in 0..fresh {
        m.steps[keep + i].set(m.steps[MEMO_STEPS + fresh - 1 - i].get());
    }
    m.len.set(len);
    m.generation.set(generation);
}

/// This thread's `STACK_TOP` (address, size): the runtime's TLS, never a root.
pub(crate) fn tls_stack_top() -> (u64, u64) {
    STACK_TOP.try_with(|v| (v as *const _ as u64, core::mem::size_of_val(v) as u64)).unwrap_or((0, 0))
}

/// This thread's unwinding memo (address, size): it keeps frame pointers, which optimised code uses as general registers (heap addresses); never a root.
pub(crate) fn tls_memo() -> (u64, u64) {
    MEMO.try_with(|v| (v as *const _ as u64, core::mem::size_of_val(v) as u64)).unwrap_or((0, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_pack_losslessly() {
        for r in [
            Rule::Step { from_rbp: false, cfa: 8, rbp: None },
            Rule::Step { from_rbp: true, cfa: 16, rbp: Some(-16) },
            Rule::Step { from_rbp: false, cfa: 1 << 20, rbp: Some(-(1 << 20)) },
            Rule::Step { from_rbp: false, cfa: -(1 << 29) + 1, rbp: Some((1 << 27) - 8) },
            Rule::Step { from_rbp: true, cfa: (1 << 29) - 1, rbp: Some(-(1 << 27) + 8) },
            Rule::End,
            Rule::Unsupported,
        ] {
            assert_eq!(Rule::unpack(r.pack()), r, "{r:?}");
        }
    }
}
