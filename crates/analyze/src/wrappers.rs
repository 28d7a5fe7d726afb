//! Allocation wrappers recognised by what they do: a small function that
//! calls an allocator (or another wrapper) and returns what it got, as
//! graphviz's `gmalloc` and `agalloc`, Tcl's `TclpAlloc` or a program's
//! own `xmalloc`, named or not. A site is named past them, as past
//! `malloc` itself (see [`crate::symbols`], which also keeps a list of
//! names for what this misses).
//!
//! The stack already says that the call a return address follows reached
//! the allocator; what is left to prove is that the function returns that
//! call's result. Its machine code (x86-64) is read from the module file,
//! from the return address to every `ret` it reaches, following the result
//! through registers and stack slots:
//!
//! - every `ret` reached with the result in `rax` (or `rax` plus a small
//!   header offset, as `TclpAlloc`'s) is a return of it; one that returns
//!   NULL after the result was tested against zero is one too (the
//!   failure path); any other `ret` makes the function a user of the block,
//!   not a wrapper;
//! - the block may be filled whole (`memset`, `memcpy`: `zmalloc`,
//!   `xstrdup`, or zeros stored inline, as calloc would leave it) or given
//!   a header before the returned address, but any other store into what
//!   is returned (a constructor setting its fields), the block's address
//!   stored anywhere but the stack (kept in a global or a list), or the
//!   block handed to any other function, makes it a user too;
//! - the function must be small ([`MAX_FUNCTION`] bytes) and the walk is
//!   bounded ([`MAX_STEPS`] instructions): past that, no wrapper.
//!
//! A function's extent comes from the symbol table or, for a stripped
//! module's internal functions, from its `.eh_frame` FDE; the names of the
//! functions it calls from the symbol tables and the PLT's relocations.

use gimli::UnwindSection as _;
use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, Mnemonic, OpAccess, OpKind, Register};
use object::{Object, ObjectSection, ObjectSymbol, ObjectSymbolTable};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

/// The largest function taken for a wrapper, in bytes.
pub const MAX_FUNCTION: u64 = 1024;
/// Instructions interpreted for one return address, every path together.
pub const MAX_STEPS: usize = 4096;
/// Bytes a wrapper may keep before the address it returns (a header).
const MAX_HEADER: i64 = 64;

/// One module's machine code and what names its functions.
pub(crate) struct ModuleCode {
    bytes: Rc<memmap2::Mmap>,
    /// Executable sections: (address, size, file offset).
    text: Vec<(u64, u64, u64)>,
    /// Function extents `[start, end)` from `.eh_frame`, sorted.
    fdes: Vec<(u64, u64)>,
    /// Defined functions: (address, size, name), sorted by address.
    symbols: Vec<(u64, u64, String)>,
    /// GOT slot → the symbol its relocation names (PLT and `-fno-plt` calls).
    got: HashMap<u64, String>,
    /// PLT sections' extents.
    plt: Vec<(u64, u64)>,
    /// Verdicts by module-relative return address.
    verdicts: HashMap<u64, bool>,
}

impl ModuleCode {
    /// Reads `path`'s code (the file the dump names, checked against its
    /// build id); `None` when it cannot be read or is not x86-64.
    pub(crate) fn load(path: &str, build_id: &[u8]) -> Option<ModuleCode> {
        let bytes = Rc::new(crate::input::map_regular(std::path::Path::new(path)).ok()??);
        let file = object::File::parse(&bytes[..]).ok()?;
        if file.architecture() != object::Architecture::X86_64 {
            return None;
        }
        if !build_id.is_empty() && file.build_id().ok().flatten() != Some(build_id) {
            return None;
        }
        let mut text = Vec::new();
        let mut plt = Vec::new();
        for s in file.sections() {
            if s.kind() != object::SectionKind::Text {
                continue;
            }
            if let Some((off, size)) = s.file_range() {
                text.push((s.address(), size.min(s.size()), off));
            }
            if s.name().is_ok_and(|n| n.starts_with(".plt")) {
                plt.push((s.address(), s.address().saturating_add(s.size())));
            }
        }
        let mut symbols: Vec<(u64, u64, String)> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|s| s.is_definition() && s.kind() == object::SymbolKind::Text && s.address() != 0)
            .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?.to_string())))
            .collect();
        symbols.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        symbols.dedup_by_key(|s| s.0);
        let mut got = HashMap::new();
        if let (Some(relocs), Some(dynsyms)) = (file.dynamic_relocations(), file.dynamic_symbol_table()) {
            for (slot, r) in relocs {
                if let object::RelocationTarget::Symbol(i) = r.target() {
                    if let Some(name) = dynsyms.symbol_by_index(i).ok().and_then(|s| s.name().ok().map(str::to_string)) {
                        got.insert(slot, name);
                    }
                }
            }
        }
        let fdes = file.section_by_name(".eh_frame").map(|s| fde_extents(&s, &file)).unwrap_or_default();
        Some(ModuleCode { bytes, text, fdes, symbols, got, plt, verdicts: HashMap::new() })
    }

    /// Whether the function holding module-relative return address `ret`
    /// returns the result of the call `ret` follows (the call the stack
    /// says reached the allocator).
    pub(crate) fn returns_call_result(&mut self, ret: u64) -> bool {
        if let Some(&v) = self.verdicts.get(&ret) {
            return v;
        }
        let v = self.extent(ret.wrapping_sub(1)).is_some_and(|(start, end)| {
            end - start <= MAX_FUNCTION && ret < end && self.code(start, end).is_some_and(|code| Walk::new(self, start, code).run(ret))
        });
        self.verdicts.insert(ret, v);
        v
    }

    /// The extent of the function holding `probe`: its FDE's, else its
    /// symbol's.
    fn extent(&self, probe: u64) -> Option<(u64, u64)> {
        let i = self.fdes.partition_point(|f| f.0 <= probe);
        if let Some(&(s, e)) = i.checked_sub(1).map(|i| &self.fdes[i]) {
            if probe < e {
                return Some((s, e));
            }
        }
        let i = self.symbols.partition_point(|f| f.0 <= probe).checked_sub(1)?;
        let (s, size, _) = &self.symbols[i];
        (*size > 0 && probe < s + size).then_some((*s, s + size))
    }

    /// The bytes of `[start, end)`, inside one executable section.
    fn code(&self, start: u64, end: u64) -> Option<&[u8]> {
        let &(addr, _, off) = self.text.iter().find(|t| start >= t.0 && end <= t.0.saturating_add(t.1))?;
        let from = usize::try_from(off + (start - addr)).ok()?;
        let to = usize::try_from(off + (end - addr)).ok()?;
        self.bytes.get(from..to)
    }

    /// The name of the function a call or jump to `target` reaches: its
    /// symbol, or through a PLT stub the symbol its GOT slot is bound to.
    fn callee(&self, target: u64) -> Option<&str> {
        if self.plt.iter().any(|&(s, e)| target >= s && target < e) {
            // A stub: `[endbr64;] [bnd] jmp *slot(%rip)` within its first
            // instructions.
            let code = self.code(target, target.saturating_add(16))?;
            let mut d = Decoder::with_ip(64, code, target, DecoderOptions::NONE);
            for _ in 0..3 {
                let i = d.decode();
                if i.is_invalid() {
                    return None;
                }
                if i.mnemonic() == Mnemonic::Jmp && i.op0_kind() == OpKind::Memory && i.memory_base() == Register::RIP {
                    return self.got.get(&i.ip_rel_memory_address()).map(String::as_str);
                }
            }
            return None;
        }
        let i = self.symbols.partition_point(|f| f.0 <= target).checked_sub(1)?;
        (self.symbols[i].0 == target).then(|| self.symbols[i].2.as_str())
    }
}

/// Every FDE's extent in `.eh_frame`, sorted.
fn fde_extents(section: &object::Section<'_, '_>, file: &object::File<'_>) -> Vec<(u64, u64)> {
    let Ok(data) = section.data() else { return vec![] };
    let eh = gimli::EhFrame::new(data, gimli::LittleEndian);
    let mut bases = gimli::BaseAddresses::default().set_eh_frame(section.address());
    if let Some(t) = file.section_by_name(".text") {
        bases = bases.set_text(t.address());
    }
    if let Some(g) = file.section_by_name(".got") {
        bases = bases.set_got(g.address());
    }
    let mut out = Vec::new();
    let mut entries = eh.entries(&bases);
    while let Ok(Some(e)) = entries.next() {
        if let gimli::CieOrFde::Fde(partial) = e {
            if let Ok(fde) = partial.parse(|s, b, o| s.cie_from_offset(b, o)) {
                let start = fde.initial_address();
                if fde.len() > 0 {
                    out.push((start, start.saturating_add(fde.len())));
                }
            }
        }
    }
    out.sort_unstable();
    out
}

/// Functions that return their first argument (the block, filled).
fn returns_first_argument(name: &str) -> bool {
    let n = name.trim_start_matches("__GI_").trim_start_matches('_');
    let n = n.strip_suffix("_chk").unwrap_or(n);
    ["memset", "memcpy", "memmove", "strcpy", "strncpy", "strcat"].iter().any(|f| n.starts_with(f))
}

/// Functions that fill the block and return nothing of it.
fn fills(name: &str) -> bool {
    let n = name.trim_start_matches("__GI_").trim_start_matches('_');
    ["bzero", "explicit_bzero", "memset_explicit"].contains(&n)
}

/// Functions that do not return: a path that calls one ends there.
fn never_returns(name: &str) -> bool {
    const NAMES: [&str; 12] = [
        "abort",
        "exit",
        "_exit",
        "_Exit",
        "__assert_fail",
        "__assert_perror_fail",
        "__stack_chk_fail",
        "__chk_fail",
        "__fortify_fail",
        "__cxa_throw",
        "_Unwind_Resume",
        "__cxa_rethrow",
    ];
    NAMES.contains(&name)
}

/// What a register or a stack slot holds, as far as the walk knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
enum Value {
    #[default]
    Unknown,
    /// The call's result plus an offset.
    Result(i64),
    /// Zero.
    Zero,
}

/// A stack slot: relative to `rsp` at the return address, or to `rbp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Slot {
    Rsp(i64),
    Rbp(i64),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
struct State {
    regs: [Value; 16],
    slots: Vec<(Slot, Value)>,
    /// `rsp` relative to its value at the return address, while known.
    rsp: Option<i64>,
    /// The last flags compared the result with zero.
    tested: bool,
    /// On this path the result is known to be NULL.
    null: bool,
    /// Bytes of the block stored to: `[from, to)` relative to its start.
    writes: Vec<(i64, i64)>,
}

const RAX: usize = 0;
const RSP: usize = 4;
const RBP: usize = 5;
const RDI: usize = 7;
/// rdi, rsi, rdx, rcx, r8, r9.
const ARGS: [usize; 6] = [7, 6, 2, 1, 8, 9];
/// Clobbered by a call: rax, rcx, rdx, rsi, rdi, r8–r11.
const CALLER_SAVED: [usize; 9] = [0, 1, 2, 6, 7, 8, 9, 10, 11];

/// The index of a 64-bit general register (`rax` 0 … `r15` 15).
fn gpr(r: Register) -> Option<usize> {
    let f = r.full_register();
    f.is_gpr64().then(|| f as usize - Register::RAX as usize)
}

impl State {
    fn slot(&self, s: Slot) -> Value {
        self.slots.iter().find(|(k, _)| *k == s).map_or(Value::Unknown, |(_, v)| *v)
    }

    fn set_slot(&mut self, s: Slot, v: Value) {
        self.slots.retain(|(k, _)| *k != s);
        if v != Value::Unknown {
            self.slots.push((s, v));
            self.slots.sort_unstable_by_key(|(k, _)| *k);
        }
    }

    /// The stack slot a memory operand names, if it is one.
    fn slot_of(&self, base: Register, index: Register, disp: i64) -> Option<Slot> {
        if index != Register::None {
            return None;
        }
        match gpr(base) {
            Some(RSP) => self.rsp.map(|r| Slot::Rsp(r.wrapping_add(disp))),
            Some(RBP) if self.regs[RBP] == Value::Unknown => Some(Slot::Rbp(disp)),
            _ => None,
        }
    }

    fn set_reg(&mut self, r: Register, v: Value) {
        let Some(i) = gpr(r) else { return };
        // A write of 8 or 16 bits keeps the rest: the value is lost; one of
        // 32 zero-extends, which keeps a value only if it is zero.
        let v = if r.size() == 8 || v == Value::Zero { v } else { Value::Unknown };
        if i == RBP {
            self.slots.retain(|(k, _)| !matches!(k, Slot::Rbp(_)));
        }
        if i == RSP {
            self.rsp = None;
            self.slots.retain(|(k, _)| !matches!(k, Slot::Rsp(_)));
        }
        self.regs[i] = v;
    }

    fn reg(&self, r: Register) -> Value {
        match gpr(r) {
            Some(i) if r.size() == 8 => self.regs[i],
            _ => Value::Unknown,
        }
    }
}

/// How one path ended.
enum End {
    /// Returned the block (at this offset).
    Block,
    /// Ended without saying anything (a jump out, a call that never
    /// returns, the end of the function).
    Neutral,
    /// Did something a wrapper does not.
    User,
}

struct Walk<'m> {
    module: &'m ModuleCode,
    start: u64,
    code: &'m [u8],
    info: InstructionInfoFactory,
    steps: usize,
}

impl<'m> Walk<'m> {
    fn new(module: &'m ModuleCode, start: u64, code: &'m [u8]) -> Self {
        Walk { module, start, code, info: InstructionInfoFactory::new(), steps: 0 }
    }

    fn inside(&self, ip: u64) -> bool {
        ip >= self.start && ip < self.start + self.code.len() as u64
    }

    /// Walks every path from `ret` with the result in `rax`: a wrapper when
    /// one returns the block and none does something else.
    fn run(&mut self, ret: u64) -> bool {
        let mut first = State { rsp: Some(0), ..State::default() };
        first.regs[RAX] = Value::Result(0);
        let mut work = vec![(ret, first)];
        let mut seen: HashSet<(u64, State)> = HashSet::new();
        let mut returned = false;
        while let Some((ip, state)) = work.pop() {
            if !seen.insert((ip, state.clone())) {
                continue;
            }
            match self.path(ip, state, &mut work) {
                End::Block => returned = true,
                End::Neutral => {}
                End::User => return false,
            }
            if self.steps > MAX_STEPS {
                return false;
            }
        }
        returned
    }

    /// Follows one path from `ip` until it ends or branches (the other
    /// branch pushed on `work`).
    fn path(&mut self, mut ip: u64, mut st: State, work: &mut Vec<(u64, State)>) -> End {
        loop {
            if !self.inside(ip) {
                return End::Neutral;
            }
            self.steps += 1;
            if self.steps > MAX_STEPS {
                return End::User;
            }
            let at = (ip - self.start) as usize;
            let mut d = Decoder::with_ip(64, &self.code[at..], ip, DecoderOptions::NONE);
            let i = d.decode();
            if i.is_invalid() {
                return End::Neutral;
            }
            let next = i.next_ip();
            match i.flow_control() {
                FlowControl::Return => return returns(&st, st.regs[RAX]),
                FlowControl::UnconditionalBranch => {
                    let t = i.near_branch_target();
                    if self.inside(t) {
                        ip = t;
                        continue;
                    }
                    // A tail call.
                    return match self.module.callee(t) {
                        Some(n) if returns_first_argument(n) => returns(&st, st.regs[RDI]),
                        Some(n) if fills(n) || never_returns(n) => End::Neutral,
                        _ if self.hands_on(&st) => End::User,
                        _ => End::Neutral,
                    };
                }
                FlowControl::IndirectBranch => return if self.hands_on(&st) { End::User } else { End::Neutral },
                FlowControl::ConditionalBranch => {
                    let t = i.near_branch_target();
                    let zero_taken = matches!(i.condition_code(), iced_x86::ConditionCode::e);
                    let zero_falls = matches!(i.condition_code(), iced_x86::ConditionCode::ne);
                    let mut other = st.clone();
                    if st.tested {
                        other.null |= zero_taken;
                        st.null |= zero_falls;
                    }
                    work.push((t, other));
                    ip = next;
                    continue;
                }
                FlowControl::Call | FlowControl::IndirectCall => {
                    let name = if i.flow_control() == FlowControl::Call {
                        self.module.callee(i.near_branch_target())
                    } else if i.op0_kind() == OpKind::Memory && i.memory_base() == Register::RIP {
                        self.module.got.get(&i.ip_rel_memory_address()).map(String::as_str)
                    } else {
                        None
                    };
                    let first = st.regs[RDI];
                    let rax = match name {
                        Some(n) if never_returns(n) => return End::Neutral,
                        Some(n) if returns_first_argument(n) => first,
                        Some(n) if fills(n) => Value::Unknown,
                        _ if self.hands_on(&st) => return End::User,
                        _ => Value::Unknown,
                    };
                    for r in CALLER_SAVED {
                        st.regs[r] = Value::Unknown;
                    }
                    st.regs[RAX] = rax;
                    st.tested = false;
                    ip = next;
                    continue;
                }
                FlowControl::Interrupt | FlowControl::Exception | FlowControl::XbeginXabortXend => return End::Neutral,
                FlowControl::Next => {}
            }
            if !self.step(&i, &mut st) {
                return End::User;
            }
            ip = next;
        }
    }

    /// Whether a call now would hand the block to the callee (in an
    /// argument register), the block not being known NULL.
    fn hands_on(&self, st: &State) -> bool {
        !st.null && ARGS.iter().any(|&r| matches!(st.regs[r], Value::Result(_)))
    }

    /// One instruction that falls through; false when it is a store into
    /// the block at an offset no one can tell.
    fn step(&mut self, i: &Instruction, st: &mut State) -> bool {
        let flags = i.rflags_modified() != 0;
        let (k0, k1) = (i.op0_kind(), if i.op_count() > 1 { i.op1_kind() } else { OpKind::Register });
        let disp = i.memory_displacement64() as i64;
        match i.mnemonic() {
            Mnemonic::Nop | Mnemonic::Endbr64 | Mnemonic::Prefetchnta | Mnemonic::Prefetcht0 => return true,
            Mnemonic::Push => {
                let v = match k0 {
                    OpKind::Register => st.reg(i.op0_register()),
                    _ => Value::Unknown,
                };
                if let Some(r) = st.rsp {
                    st.rsp = Some(r - 8);
                    st.set_slot(Slot::Rsp(r - 8), v);
                }
                return true;
            }
            Mnemonic::Pop if k0 == OpKind::Register => {
                let v = st.rsp.map_or(Value::Unknown, |r| st.slot(Slot::Rsp(r)));
                let r = i.op0_register();
                let rsp = st.rsp;
                st.set_reg(r, Value::Unknown);
                if let Some(x) = gpr(r) {
                    st.regs[x] = if r.size() == 8 { v } else { Value::Unknown };
                }
                if gpr(r) != Some(RSP) {
                    st.rsp = rsp.map(|r| r + 8);
                }
                return true;
            }
            Mnemonic::Leave => {
                st.set_reg(Register::RSP, Value::Unknown);
                st.set_reg(Register::RBP, Value::Unknown);
                return true;
            }
            Mnemonic::Mov if k0 == OpKind::Register && k1 == OpKind::Register => {
                let v = st.reg(i.op1_register());
                st.set_reg(i.op0_register(), v);
                if gpr(i.op0_register()) == Some(RSP) {
                    st.rsp = None;
                }
                return true;
            }
            Mnemonic::Mov if k0 == OpKind::Register && k1 == OpKind::Memory => {
                let v = match st.slot_of(i.memory_base(), i.memory_index(), disp) {
                    Some(s) => st.slot(s),
                    None => Value::Unknown,
                };
                let v = if i.op0_register().size() == 8 { v } else { Value::Unknown };
                st.set_reg(i.op0_register(), v);
                return true;
            }
            Mnemonic::Mov if k0 == OpKind::Register && is_immediate(k1) => {
                let v = if i.immediate(1) == 0 { Value::Zero } else { Value::Unknown };
                st.set_reg(i.op0_register(), v);
                return true;
            }
            Mnemonic::Mov if k0 == OpKind::Memory => {
                let v = match k1 {
                    OpKind::Register if i.op1_register().size() == 8 => st.reg(i.op1_register()),
                    OpKind::Register if st.reg(i.op1_register().full_register()) == Value::Zero => Value::Zero,
                    k if is_immediate(k) && i.immediate(1) == 0 => Value::Zero,
                    _ => Value::Unknown,
                };
                if let Some(s) = st.slot_of(i.memory_base(), i.memory_index(), disp) {
                    st.set_slot(s, v);
                    return true;
                }
                // Zeros clear the block (an inlined memset), as calloc would.
                if v == Value::Zero {
                    return true;
                }
                // The block's address kept anywhere but the stack: the
                // function keeps the block (a global, a list), a user.
                if matches!(v, Value::Result(_)) {
                    return false;
                }
                return store(st, i.memory_base(), i.memory_index(), disp, i.memory_size().size() as i64);
            }
            Mnemonic::Lea if k0 == OpKind::Register => {
                let v = match (st.reg(i.memory_base()), i.memory_index()) {
                    (Value::Result(k), Register::None) => Value::Result(k.wrapping_add(disp)),
                    _ => Value::Unknown,
                };
                st.set_reg(i.op0_register(), v);
                return true;
            }
            Mnemonic::Add | Mnemonic::Sub if k0 == OpKind::Register && is_immediate(k1) => {
                let imm = i.immediate(1) as i64;
                let imm = if i.mnemonic() == Mnemonic::Sub { imm.wrapping_neg() } else { imm };
                let r = i.op0_register();
                if gpr(r) == Some(RSP) && r.size() == 8 {
                    st.rsp = st.rsp.map(|x| x.wrapping_add(imm));
                    st.tested = false;
                    return true;
                }
                let v = match st.reg(r) {
                    Value::Result(k) if r.size() == 8 => Value::Result(k.wrapping_add(imm)),
                    _ => Value::Unknown,
                };
                st.set_reg(r, v);
                st.tested = false;
                return true;
            }
            Mnemonic::Xor | Mnemonic::Sub if k0 == OpKind::Register && k1 == OpKind::Register && i.op0_register() == i.op1_register() => {
                st.set_reg(i.op0_register(), Value::Zero);
                st.tested = false;
                return true;
            }
            Mnemonic::Test if k0 == OpKind::Register && k1 == OpKind::Register && i.op0_register() == i.op1_register() => {
                st.tested = st.reg(i.op0_register()) == Value::Result(0);
                return true;
            }
            Mnemonic::Cmp if is_immediate(k1) && i.immediate(1) == 0 => {
                st.tested = match k0 {
                    OpKind::Register => st.reg(i.op0_register()) == Value::Result(0),
                    OpKind::Memory => st.slot_of(i.memory_base(), i.memory_index(), disp).is_some_and(|s| st.slot(s) == Value::Result(0)),
                    _ => false,
                };
                return true;
            }
            Mnemonic::Stosb
            | Mnemonic::Stosw
            | Mnemonic::Stosd
            | Mnemonic::Stosq
            | Mnemonic::Movsb
            | Mnemonic::Movsw
            | Mnemonic::Movsd
            | Mnemonic::Movsq
                if i.op_count() == 2 && (k0 == OpKind::MemoryESRDI || k0 == OpKind::MemoryESEDI) =>
            {
                // Filling the block (an inlined memset or memcpy).
                for r in [Register::RDI, Register::RSI, Register::RCX] {
                    st.set_reg(r, Value::Unknown);
                }
                return true;
            }
            _ => {}
        }
        // Anything else: what it writes is unknown afterwards; a store
        // through the block is checked as above.
        let info = self.info.info(i);
        let mut ok = true;
        for m in info.used_memory() {
            if matches!(m.access(), OpAccess::Write | OpAccess::CondWrite | OpAccess::ReadWrite | OpAccess::ReadCondWrite) {
                match st.slot_of(m.base(), m.index(), m.displacement() as i64) {
                    Some(s) => st.set_slot(s, Value::Unknown),
                    None => ok &= store(st, m.base(), m.index(), m.displacement() as i64, m.memory_size().size() as i64),
                }
            }
        }
        let written: Vec<Register> = info
            .used_registers()
            .iter()
            .filter(|u| matches!(u.access(), OpAccess::Write | OpAccess::CondWrite | OpAccess::ReadWrite | OpAccess::ReadCondWrite))
            .map(|u| u.register())
            .collect();
        for r in written {
            st.set_reg(r, Value::Unknown);
        }
        if flags {
            st.tested = false;
        }
        ok
    }
}

fn is_immediate(k: OpKind) -> bool {
    matches!(
        k,
        OpKind::Immediate8
            | OpKind::Immediate16
            | OpKind::Immediate32
            | OpKind::Immediate64
            | OpKind::Immediate8to32
            | OpKind::Immediate8to64
            | OpKind::Immediate32to64
    )
}

/// Records a store through `base + index + disp` of `size` bytes: into the
/// block when `base` holds it (false when `index` makes its offset
/// unknown); anywhere else is no concern.
fn store(st: &mut State, base: Register, index: Register, disp: i64, size: i64) -> bool {
    let Value::Result(k) = st.reg(base) else { return true };
    if index != Register::None || st.writes.len() >= 32 {
        return false;
    }
    let from = k.wrapping_add(disp);
    st.writes.push((from, from.wrapping_add(size.max(1))));
    true
}

/// The verdict on a `ret` with `v` in `rax`.
fn returns(st: &State, v: Value) -> End {
    match v {
        // Whatever was stored into the block lies before what is returned:
        // a header.
        Value::Result(k) if (0..=MAX_HEADER).contains(&k) && st.writes.iter().all(|&(_, to)| to <= k) => End::Block,
        Value::Zero if st.null => End::Neutral,
        _ => End::User,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A module of one function at 0x1000 with `code`, and named functions.
    fn module(code: &[u8], names: &[(u64, &str)]) -> (tempfile_free::Bytes, ModuleCode) {
        let bytes = tempfile_free::Bytes::new(code);
        let m = ModuleCode {
            bytes: bytes.map.clone(),
            text: vec![(0x1000, code.len() as u64, 0)],
            fdes: vec![(0x1000, 0x1000 + code.len() as u64)],
            symbols: names.iter().map(|&(a, n)| (a, 0, n.to_string())).collect(),
            got: HashMap::new(),
            plt: vec![],
            verdicts: HashMap::new(),
        };
        (bytes, m)
    }

    /// Anonymous maps holding test code (no file on disk).
    mod tempfile_free {
        use std::rc::Rc;
        pub struct Bytes {
            pub map: Rc<memmap2::Mmap>,
        }
        impl Bytes {
            pub fn new(code: &[u8]) -> Self {
                let mut m = memmap2::MmapMut::map_anon(code.len().max(1)).unwrap();
                m[..code.len()].copy_from_slice(code);
                Bytes { map: Rc::new(m.make_read_only().unwrap()) }
            }
        }
    }

    // Return addresses are those after each `call` below (offsets 5 past
    // the call's start for `call rel32`).

    #[test]
    fn a_checked_malloc_is_a_wrapper() {
        // gmalloc: call malloc; test rax,rax; je fail; ret; fail: call
        // fwrite; xor eax,eax; ret.
        #[rustfmt::skip]
        let code = [
            0x48, 0x83, 0xec, 0x08,             // 1000 sub rsp, 8
            0xe8, 0xf7, 0x0f, 0x00, 0x00,       // 1004 call 2000
            0x48, 0x85, 0xc0,                   // 1009 test rax, rax
            0x74, 0x05,                         // 100c je 1013
            0x48, 0x83, 0xc4, 0x08,             // 100e add rsp, 8
            0xc3,                               // 1012 ret
            0xe8, 0xf8, 0x0f, 0x00, 0x00,       // 1013 call 2010 (fwrite)
            0x31, 0xc0,                         // 1018 xor eax, eax
            0xeb, 0xf2,                         // 101a jmp 100e
        ];
        let (_b, mut m) = module(&code, &[(0x2000, "malloc"), (0x2010, "fwrite")]);
        assert!(m.returns_call_result(0x1009));
    }

    #[test]
    fn a_function_returning_something_else_is_not() {
        // call malloc; mov [rbx], rax; mov eax, 1; ret
        #[rustfmt::skip]
        let code = [
            0xe8, 0xfb, 0x0f, 0x00, 0x00,       // 1000 call 2000
            0x48, 0x89, 0x03,                   // 1005 mov [rbx], rax
            0xb8, 0x01, 0x00, 0x00, 0x00,       // 1008 mov eax, 1
            0xc3,                               // 100d ret
        ];
        let (_b, mut m) = module(&code, &[(0x2000, "malloc")]);
        assert!(!m.returns_call_result(0x1005));
        // call malloc; mov [rip+0x100], rax; ret: it keeps the block in a
        // global and returns it too.
        #[rustfmt::skip]
        let code = [
            0xe8, 0xfb, 0x0f, 0x00, 0x00,               // 1000 call 2000
            0x48, 0x89, 0x05, 0x00, 0x01, 0x00, 0x00,   // 1005 mov [rip+0x100], rax
            0xc3,                                       // 100c ret
        ];
        let (_b, mut m) = module(&code, &[(0x2000, "malloc")]);
        assert!(!m.returns_call_result(0x1005));
    }

    #[test]
    fn a_constructor_setting_fields_is_not_but_a_header_is() {
        // call malloc; mov qword [rax+8], 1; ret: a field of what it returns
        // (zeros would only clear the block, as calloc does).
        #[rustfmt::skip]
        let code = [
            0xe8, 0xfb, 0x0f, 0x00, 0x00,                   // 1000 call 2000
            0x48, 0xc7, 0x40, 0x08, 0x01, 0x00, 0x00, 0x00, // 1005 mov qword [rax+8], 1
            0xc3,                                           // 100d ret
        ];
        let (_b, mut m) = module(&code, &[(0x2000, "malloc")]);
        assert!(!m.returns_call_result(0x1005));
        // call malloc; mov [rax], rbx; add rax, 16; ret: a header.
        #[rustfmt::skip]
        let code = [
            0xe8, 0xfb, 0x0f, 0x00, 0x00,       // 1000 call 2000
            0x48, 0x89, 0x18,                   // 1005 mov [rax], rbx
            0x48, 0x83, 0xc0, 0x10,             // 1008 add rax, 16
            0xc3,                               // 100c ret
        ];
        let (_b, mut m) = module(&code, &[(0x2000, "malloc")]);
        assert!(m.returns_call_result(0x1005));
    }

    #[test]
    fn the_block_through_a_stack_slot_and_memset() {
        // -O0 style: mov [rbp-8], rax; mov rdi, [rbp-8]; call memset;
        // mov rax, [rbp-8]; leave; ret
        #[rustfmt::skip]
        let code = [
            0xe8, 0xfb, 0x0f, 0x00, 0x00,       // 1000 call 2000
            0x48, 0x89, 0x45, 0xf8,             // 1005 mov [rbp-8], rax
            0x48, 0x8b, 0x7d, 0xf8,             // 1009 mov rdi, [rbp-8]
            0xe8, 0xfe, 0x0f, 0x00, 0x00,       // 100d call 2010 (memset)
            0x48, 0x8b, 0x45, 0xf8,             // 1012 mov rax, [rbp-8]
            0xc9,                               // 1016 leave
            0xc3,                               // 1017 ret
        ];
        let (_b, mut m) = module(&code, &[(0x2000, "malloc"), (0x2010, "memset")]);
        assert!(m.returns_call_result(0x1005));
        // The same handing the block to another function instead.
        let (_b, mut m) = module(&code, &[(0x2000, "malloc"), (0x2010, "list_add")]);
        assert!(!m.returns_call_result(0x1005));
    }
}
