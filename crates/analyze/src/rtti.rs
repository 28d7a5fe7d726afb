//! C++ classes named through the run-time type information a module keeps
//! when it is stripped.
//!
//! The Itanium C++ ABI lays a polymorphic object's vtable out as, before
//! its address point (where the object's first word points): the offset
//! from this vtable's subobject to the top of the object (0 for the
//! primary vtable, the object's own; not 0 for the vtable of a secondary
//! base's subobject inside it), then a pointer to the class's
//! `std::type_info`. That object's first word is the vtable of one of the
//! ABI's `__cxxabiv1::__*class_type_info` classes, its second a pointer to
//! the mangled type name (`N3geo6CircleE`, what `typeid(T).name()` gives).
//! `strip` removes the symbol table but none of this: the class of an
//! object is known from the module's read-only data alone.
//!
//! The words are read from the dump where it captured them (a full dump
//! holds the writable segments, `.data.rel.ro` among them, as the loader
//! relocated them), else from the module's file: the word on disk, with
//! the dynamic relocation at its place applied (`R_X86_64_RELATIVE`, a
//! symbol the module defines, or the name of one it imports) or the
//! packed relative ones (`.relr.dyn`). The names themselves lie in
//! `.rodata`, which no dump holds: the file is always needed, and it is
//! the file the dump saw (its build id is checked when the module is
//! opened). Every pointer followed must lie in some module's read-only
//! data (`.rodata*`, `.data.rel.ro*`), and the name must demangle as a
//! type, or nothing is named. A program built with `-fno-rtti` has a 0
//! where the `type_info` pointer would be: without symbols, nothing names
//! its objects.

use object::read::elf::{ElfFile64, FileHeader as _, ProgramHeader as _, SectionHeader as _};
use object::{Object, ObjectSection, ObjectSymbol, ObjectSymbolTable};
use std::collections::HashMap;
use std::rc::Rc;

const PT_LOAD: u32 = 1;
const PT_GNU_RELRO: u32 = 0x6474_e552;
const PF_X: u32 = 1;
const PF_W: u32 = 2;
const SHT_RELA: u32 = 4;
const SHT_NOBITS: u32 = 8;
const SHT_RELR: u32 = 19;
const R_X86_64_64: u32 = 1;
const R_X86_64_GLOB_DAT: u32 = 6;
const R_X86_64_RELATIVE: u32 = 8;
/// The longest type name read (a template's can be long, not this long).
const MAX_NAME: usize = 4096;

/// A word of a module's data as the loader leaves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Word {
    /// Its value at run time.
    Value(u64),
    /// The address of a symbol the module imports (not known from its
    /// file alone), by mangled name.
    Import(Rc<str>),
}

/// A dynamic relocation of a read-only data word.
#[derive(Clone, Debug)]
enum Reloc {
    /// The load bias plus this (module-relative) value.
    Relative(u64),
    /// A symbol's address plus an addend: the module's own definition
    /// (module-relative), or an import.
    Symbol { defined: Option<u64>, name: Rc<str>, addend: i64 },
}

/// The read-only data of one module's file, as the loader maps and
/// relocates it.
pub(crate) struct Image {
    map: Rc<memmap2::Mmap>,
    /// `PT_LOAD`s: (vaddr, filesz, file offset), module-relative.
    loads: Vec<(u64, u64, u64)>,
    /// Read-only data ranges, module-relative, sorted.
    ro: Vec<(u64, u64)>,
    /// The dynamic relocations of words in `ro`, by module-relative place.
    relocs: HashMap<u64, Reloc>,
}

impl Image {
    /// The image of an x86-64 ELF file's bytes, or none (not one, or no
    /// read-only data).
    pub(crate) fn of(map: Rc<memmap2::Mmap>) -> Option<Image> {
        let elf = ElfFile64::<object::Endianness>::parse(&map[..]).ok()?;
        let e = elf.endian();
        if elf.elf_header().e_machine(e) != object::elf::EM_X86_64 {
            return None;
        }
        let phdrs = elf.elf_program_headers();
        let loads: Vec<(u64, u64, u64)> =
            phdrs.iter().filter(|p| p.p_type(e).0 == PT_LOAD).map(|p| (p.p_vaddr(e), p.p_filesz(e), p.p_offset(e))).collect();
        let mut ro: Vec<(u64, u64)> = elf
            .sections()
            .filter(|s| s.name().is_ok_and(|n| n.starts_with(".rodata") || n.starts_with(".data.rel.ro")))
            .filter(|s| s.elf_section_header().sh_type(e).0 != SHT_NOBITS && s.size() > 0)
            .map(|s| (s.address(), s.address().saturating_add(s.size())))
            .collect();
        if ro.is_empty() {
            // No section headers: the segments the loader maps (or, past
            // relocation, leaves) read-only, neither written nor run.
            ro = phdrs
                .iter()
                .filter(|p| p.p_type(e).0 == PT_GNU_RELRO || (p.p_type(e).0 == PT_LOAD && p.p_flags(e).0 & (PF_W | PF_X) == 0))
                .map(|p| (p.p_vaddr(e), p.p_vaddr(e).saturating_add(p.p_memsz(e))))
                .collect();
        }
        ro.sort_unstable();
        if ro.is_empty() {
            return None;
        }
        let mut image = Image { map: map.clone(), loads, ro, relocs: HashMap::new() };
        let dynsym = elf.dynamic_symbol_table();
        let mut names: HashMap<usize, (Option<u64>, Rc<str>)> = HashMap::new();
        for s in elf.sections() {
            let ty = s.elf_section_header().sh_type(e).0;
            let Ok(data) = s.data() else { continue };
            if ty == SHT_RELA && s.name().is_ok_and(|n| n != ".rela.plt") {
                for r in data.chunks_exact(24) {
                    let at = le64(&r[0..8]);
                    if !image.is_ro(at, 8) {
                        continue;
                    }
                    let info = le64(&r[8..16]);
                    let addend = le64(&r[16..24]) as i64;
                    let reloc = match info as u32 {
                        R_X86_64_RELATIVE => Reloc::Relative(addend as u64),
                        R_X86_64_64 | R_X86_64_GLOB_DAT => {
                            let index = (info >> 32) as usize;
                            let Some(table) = &dynsym else { continue };
                            let (defined, name) = match names.get(&index) {
                                Some(n) => n.clone(),
                                None => {
                                    let Ok(sym) = table.symbol_by_index(object::SymbolIndex(index)) else { continue };
                                    let Ok(name) = sym.name() else { continue };
                                    let n = ((!sym.is_undefined()).then(|| sym.address()), Rc::<str>::from(name));
                                    names.insert(index, n.clone());
                                    n
                                }
                            };
                            Reloc::Symbol { defined, name, addend }
                        }
                        _ => continue,
                    };
                    image.relocs.insert(at, reloc);
                }
            } else if ty == SHT_RELR {
                // An even entry is a place; an odd one a bitmap of the 63
                // words after the last place, lowest bit first.
                let mut next = 0u64;
                for w in data.chunks_exact(8).map(le64) {
                    if w & 1 == 0 {
                        image.relr(w);
                        next = w.wrapping_add(8);
                    } else {
                        for bit in 1..64 {
                            if w >> bit & 1 == 1 {
                                image.relr(next.wrapping_add((bit - 1) * 8));
                            }
                        }
                        next = next.wrapping_add(63 * 8);
                    }
                }
            }
        }
        Some(image)
    }

    /// A packed relative relocation at `at`: the word on disk plus the bias.
    fn relr(&mut self, at: u64) {
        if self.is_ro(at, 8) {
            if let Some(v) = self.bytes(at, 8).map(le64) {
                self.relocs.insert(at, Reloc::Relative(v));
            }
        }
    }

    /// Whether `[at, at + len)` (module-relative) lies in read-only data.
    pub(crate) fn is_ro(&self, at: u64, len: u64) -> bool {
        let i = self.ro.partition_point(|r| r.0 <= at);
        i > 0 && at.checked_add(len).is_some_and(|end| end <= self.ro[i - 1].1)
    }

    /// The file's bytes at module-relative `[at, at + len)`.
    fn bytes(&self, at: u64, len: u64) -> Option<&[u8]> {
        let &(vaddr, _, offset) =
            self.loads.iter().find(|l| at >= l.0 && at.checked_add(len).is_some_and(|end| end <= l.0.saturating_add(l.1)))?;
        let start = usize::try_from((at - vaddr).checked_add(offset)?).ok()?;
        self.map.get(start..start.checked_add(usize::try_from(len).ok()?)?)
    }

    /// The read-only word at module-relative `at`, as the loader leaves it
    /// in a module loaded with `bias`.
    pub(crate) fn word(&self, at: u64, bias: u64) -> Option<Word> {
        if !self.is_ro(at, 8) {
            return None;
        }
        Some(match self.relocs.get(&at) {
            Some(Reloc::Relative(v)) => Word::Value(bias.wrapping_add(*v)),
            Some(Reloc::Symbol { defined: Some(v), addend, .. }) => Word::Value(bias.wrapping_add(*v).wrapping_add(*addend as u64)),
            Some(Reloc::Symbol { defined: None, name, .. }) => Word::Import(name.clone()),
            None => Word::Value(le64(self.bytes(at, 8)?)),
        })
    }

    /// The NUL-terminated string at module-relative `at`, in read-only
    /// data, without its NUL.
    pub(crate) fn c_string(&self, at: u64) -> Option<&[u8]> {
        let i = self.ro.partition_point(|r| r.0 <= at).checked_sub(1)?;
        let &(vaddr, filesz, _) = self.loads.iter().find(|l| at >= l.0 && at - l.0 < l.1)?;
        let end = self.ro[i].1.min(vaddr.saturating_add(filesz)).min(at.saturating_add(MAX_NAME as u64 + 1));
        let bytes = self.bytes(at, end.checked_sub(at)?)?;
        let len = bytes.iter().position(|&b| b == 0)?;
        Some(&bytes[..len])
    }
}

fn le64(b: &[u8]) -> u64 {
    u64::from_le_bytes(b.try_into().unwrap_or([0; 8]))
}

/// Whether `name` (mangled) is the vtable of one of the ABI's classes of
/// class `type_info` objects (a class without bases, with one public
/// non-virtual base at offset 0, or any other).
pub(crate) fn is_class_type_info_vtable(name: &str) -> bool {
    matches!(
        name,
        "_ZTVN10__cxxabiv117__class_type_infoE" | "_ZTVN10__cxxabiv120__si_class_type_infoE" | "_ZTVN10__cxxabiv121__vmi_class_type_infoE"
    )
}

/// The class a demangled vtable symbol is for: `_ZTV…` demangles as
/// "vtable for T" or "{vtable(T)}".
pub(crate) fn vtable_class(name: &str) -> Option<&str> {
    name.strip_prefix("vtable for ").or_else(|| name.strip_prefix("{vtable(")?.strip_suffix(")}"))
}

/// Whether a demangled symbol name is one of those vtables.
pub(crate) fn is_class_type_info_vtable_demangled(name: &str) -> bool {
    vtable_class(name).is_some_and(|c| {
        matches!(c, "__cxxabiv1::__class_type_info" | "__cxxabiv1::__si_class_type_info" | "__cxxabiv1::__vmi_class_type_info")
    })
}

/// The demangled type a `type_info`'s name spells (`N3geo6CircleE` →
/// `geo::Circle`), or none when it is not a well-formed mangled type.
pub(crate) fn type_name(mangled: &[u8]) -> Option<String> {
    if mangled.is_empty() || mangled.len() > MAX_NAME || !mangled.iter().all(|b| b.is_ascii_graphic()) {
        return None;
    }
    // As the name of a `typeinfo name for T` symbol: it demangles only if
    // the whole of it is one type.
    let mut symbol = Vec::with_capacity(mangled.len() + 4);
    symbol.extend_from_slice(b"_ZTS");
    symbol.extend_from_slice(mangled);
    let s = cpp_demangle::Symbol::new(&symbol[..]).ok()?;
    let d = s.demangle().ok()?;
    let t = d.strip_prefix("typeinfo name for ")?;
    (!t.is_empty()).then(|| t.to_string())
}

/// The words a dump captured (a full dump's STATIC regions: the modules'
/// writable segments, `.data.rel.ro` among them, relocated).
#[derive(Default)]
pub struct Memory<'a> {
    /// (start, bytes), sorted by start.
    regions: Vec<(u64, &'a [u8])>,
}

impl<'a> Memory<'a> {
    /// The STATIC regions of `dump` held in full, read up to its first
    /// site or allocation (writers put the roots first).
    pub fn of(dump: &heapdump_format::Dump<'a>) -> Memory<'a> {
        use heapdump_format::{ContentsRef, Record};
        let mut regions = Vec::new();
        for r in dump.records() {
            let Ok((_, rec)) = r else { break };
            match rec {
                Record::Static(s) => {
                    if let ContentsRef::Full(b) = s.contents {
                        regions.push((s.address, b));
                    }
                }
                Record::Site(_) | Record::Alloc(_) | Record::Allocs(_) => break,
                _ => {}
            }
        }
        regions.sort_unstable_by_key(|r| r.0);
        Memory { regions }
    }

    /// The word at `addr`, when captured.
    pub(crate) fn word(&self, addr: u64) -> Option<u64> {
        let i = self.regions.partition_point(|r| r.0 <= addr).checked_sub(1)?;
        let (start, bytes) = self.regions[i];
        let at = usize::try_from(addr - start).ok()?;
        bytes.get(at..at.checked_add(8)?).map(le64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names_demangle_only_when_whole() {
        assert_eq!(type_name(b"N3geo6CircleE").as_deref(), Some("geo::Circle"));
        assert_eq!(type_name(b"6Square").as_deref(), Some("Square"));
        assert_eq!(type_name(b"St13runtime_error").as_deref(), Some("std::runtime_error"));
        assert_eq!(type_name(b"N3geo6CircleEjunk"), None);
        assert_eq!(type_name(b"hello world"), None);
        assert_eq!(type_name(b""), None);
        assert_eq!(type_name(b"N3geo6Cir"), None);
    }

    /// A file that is no ELF, or an ELF cut short, is no image and no panic.
    #[test]
    fn damaged_files_are_no_image() {
        let dir = std::env::temp_dir().join(format!("hd-rtti-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        for (name, bytes) in [("text", &b"not an ELF file at all"[..]), ("cut", &exe[..4096]), ("header", &exe[..64])] {
            let path = dir.join(name);
            std::fs::write(&path, bytes).unwrap();
            let map = crate::input::map_regular(&path).unwrap().unwrap();
            match Image::of(Rc::new(map)) {
                None => {}
                Some(i) => {
                    assert_eq!(name, "cut", "only a file with its headers is an image");
                    for at in [0, 8, 0x1000, u64::MAX - 4] {
                        let _ = (i.word(at, 0x1000), i.c_string(at));
                    }
                }
            }
        }
        // The whole file parses, and its read-only data reads.
        let path = dir.join("whole");
        std::fs::write(&path, &exe).unwrap();
        let image = Image::of(Rc::new(crate::input::map_regular(&path).unwrap().unwrap())).expect("an x86-64 ELF file");
        let &(start, _) = image.ro.first().unwrap();
        assert!(image.is_ro(start, 8) && image.word(start, 0x1000).is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn captured_words_are_read_within_their_region() {
        let a = [1u8, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0];
        let m = Memory { regions: vec![(0x1000, &a[..])] };
        assert_eq!(m.word(0x1000), Some(1));
        assert_eq!(m.word(0x1008), Some(2));
        assert_eq!(m.word(0x100c), None);
        assert_eq!(m.word(0xff8), None);
    }
}
