//! One module's debug information: frames (with inlining), symbols, the
//! generic parameters of the functions at an address, and trait-object
//! vtables, all from one parse of the file (gimli through addr2line).
//!
//! addr2line's `Loader` answers "which function and line", but not "which
//! DIE": type names need the DIE of each frame (its template parameters),
//! so the context is built here over reference-counted section data.

use gimli::Reader as _;
use object::{Object, ObjectSection, ObjectSymbol};
use std::collections::HashMap;
use std::rc::Rc;

type R = gimli::EndianReader<gimli::RunTimeEndian, Bytes>;

/// The bytes DWARF is read from: the mapped file, shared by every section
/// that lies in it, or a section's own bytes (decompressed).
#[derive(Clone, Debug)]
pub(crate) enum Bytes {
    Map(Rc<memmap2::Mmap>),
    Owned(Rc<[u8]>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Map(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

// SAFETY: both variants deref to a heap allocation or a mapping owned
// through an `Rc`: moving or cloning the `Bytes` never moves the bytes.
#[allow(unsafe_code)]
unsafe impl gimli::StableDeref for Bytes {}
// SAFETY: a clone shares the same bytes (an Rc of the mapping or of the
// owned copy), so they do not move when the clone is made or dropped.
#[allow(unsafe_code)]
unsafe impl gimli::CloneStableDeref for Bytes {}

/// Why a module's symbols and debug information could not be read: its
/// frames then stay as addresses.
#[derive(Debug, thiserror::Error)]
pub enum DebugError {
    /// The file could not be opened or mapped.
    #[error("{path}: {source}; its frames stay as addresses")]
    Open {
        /// The file the dump names.
        path: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The file is empty.
    #[error("{path}: empty file; its frames stay as addresses")]
    Empty {
        /// The file the dump names.
        path: String,
    },
    /// The file is not the one the dump saw.
    #[error("{path}: build id differs from the dump's; its frames stay as addresses")]
    BuildId {
        /// The file the dump names.
        path: String,
    },
    /// The object file or its DWARF could not be parsed.
    #[error("{path}: {what}")]
    Parse {
        /// The file.
        path: String,
        /// What the parser said.
        what: String,
    },
}

/// Maps a file a dump names (a regular file only: see `crate::input`).
fn map(path: &str) -> Result<Rc<memmap2::Mmap>, DebugError> {
    match crate::input::map_regular(std::path::Path::new(path)) {
        Ok(Some(m)) => Ok(Rc::new(m)),
        Ok(None) => Err(DebugError::Empty { path: path.into() }),
        Err(source) => Err(DebugError::Open { path: path.into(), source }),
    }
}

/// A parser's complaint about `path`.
fn parse_error(path: &str, e: impl std::fmt::Display) -> DebugError {
    DebugError::Parse { path: path.into(), what: e.to_string() }
}

/// What DWARF says about one frame's function beyond its name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FrameDebug {
    /// The DIE's own name (`new<types::Bar>`: Rust puts the generic
    /// arguments of the impl and of the function in it).
    pub name: Option<String>,
    /// Template type parameters, name and type (`T` → `types::Bar`), as
    /// full debug info has them (line tables only have none).
    pub params: Vec<(String, String)>,
}

/// One resolved frame, inlined frames first.
pub struct RawFrame {
    /// Demangled function name.
    pub function: Option<String>,
    /// Source file.
    pub file: Option<String>,
    /// Source line.
    pub line: Option<u32>,
    /// The function's DWARF name and template parameters.
    pub debug: FrameDebug,
}

/// A loaded module.
pub struct ModuleDebug {
    ctx: addr2line::Context<R>,
    dwarf: std::sync::Arc<gimli::Dwarf<R>>,
    /// Symbol table, sorted by address.
    /// (address, size, name), by address; size 0 when the table has none.
    symbols: Vec<(u64, u64, String)>,
    /// Parsed units by their offset in `.debug_info`.
    units: HashMap<usize, Rc<gimli::Unit<R>>>,
    /// Start offsets of every unit, for cross-unit references.
    unit_starts: Option<Vec<usize>>,
    /// Qualified type names per unit, keyed by the DIE's section offset.
    type_names: HashMap<usize, HashMap<usize, String>>,
    /// Trait-object vtables: address (module-relative) → (type, trait).
    vtables: Option<Rc<HashMap<u64, (String, String)>>>,
    /// The mapped file (its read-only data names C++ classes: `crate::rtti`).
    map: Rc<memmap2::Mmap>,
}

impl ModuleDebug {
    /// Loads `path`, checking its GNU build id against `build_id` (when
    /// the dump has one). Debug info may also come from
    /// `/usr/lib/debug/.build-id/xx/yyyy.debug` when the file has none.
    /// With `symbols_only`, the symbol table alone: no frame gets a file,
    /// a line or inlined callers (see [`crate::symbols`] for the module
    /// that asks for that).
    pub fn load(path: &str, build_id: &[u8], symbols_only: bool) -> Result<ModuleDebug, DebugError> {
        // The path comes from the dump: only a regular file is mapped.
        let bytes = map(path)?;
        let file = object::File::parse(&bytes[..]).map_err(|e| parse_error(path, e))?;
        if !build_id.is_empty() {
            let id = file.build_id().ok().flatten();
            if id != Some(build_id) {
                return Err(DebugError::BuildId { path: path.into() });
            }
        }
        let mut symbols: Vec<(u64, u64, String)> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|s| {
                s.is_definition() && matches!(s.kind(), object::SymbolKind::Text | object::SymbolKind::Data | object::SymbolKind::Unknown)
            })
            .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?.to_string())))
            .filter(|s| s.0 != 0 && !s.2.is_empty())
            .collect();
        // One entry per address, the one with a size (and the longest) kept.
        symbols.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        symbols.dedup_by_key(|s| s.0);
        let dwarf = if symbols_only {
            load_dwarf(&file, &bytes, false)
        } else if file.section_by_name(".debug_info").is_none() && !build_id.is_empty() {
            let hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
            let separate = format!("/usr/lib/debug/.build-id/{}/{}.debug", &hex[..2], &hex[2..]);
            match map(&separate) {
                Ok(b) => {
                    let f = object::File::parse(&b[..]).map_err(|e| parse_error(&separate, e))?;
                    load_dwarf(&f, &b, true)
                }
                Err(_) => load_dwarf(&file, &bytes, true),
            }
        } else {
            load_dwarf(&file, &bytes, true)
        }
        .map_err(|e| parse_error(path, e))?;
        // addr2line shares the sections through an Arc; the reader is Rc-based
        // and the whole analysis runs on one thread.
        #[allow(clippy::arc_with_non_send_sync)]
        let dwarf = std::sync::Arc::new(dwarf);
        let ctx = addr2line::Context::from_arc_dwarf(dwarf.clone()).map_err(|e| parse_error(path, e))?;
        Ok(ModuleDebug {
            ctx,
            dwarf,
            symbols,
            units: HashMap::new(),
            unit_starts: None,
            type_names: HashMap::new(),
            vtables: None,
            map: bytes,
        })
    }

    /// The module's file, mapped.
    pub(crate) fn file_bytes(&self) -> Rc<memmap2::Mmap> {
        self.map.clone()
    }

    /// The symbol whose extent `[address, address + size)` holds `probe`
    /// (module-relative), and its address. A symbol without a size holds
    /// only its own address: the nearest symbol before an address is not
    /// its function (a stripped library's static functions lie after some
    /// unrelated exported one).
    pub fn symbol(&self, probe: u64) -> Option<(&str, u64)> {
        let i = self.symbols.partition_point(|s| s.0 <= probe).checked_sub(1)?;
        let (a, size, n) = &self.symbols[i];
        (probe < a.saturating_add((*size).max(1))).then_some((n.as_str(), *a))
    }

    /// The frames at `probe` (module-relative), innermost (inlined) first.
    pub fn frames(&mut self, probe: u64) -> Vec<RawFrame> {
        let mut raw = Vec::new();
        let unit_offset = self
            .ctx
            .find_dwarf_and_unit(probe)
            .skip_all_loads()
            .and_then(|u| u.header.offset().to_debug_info_offset(&u.header))
            .map(|o| o.0);
        if let Ok(mut it) = self.ctx.find_frames(probe).skip_all_loads() {
            while let Ok(Some(f)) = it.next() {
                let function = f.function.as_ref().and_then(|n| n.demangle().ok().map(|s| s.into_owned()));
                let (file, line) = match &f.location {
                    Some(l) => (l.file.map(str::to_string), l.line),
                    None => (None, None),
                };
                raw.push((function, file, line, f.dw_die_offset.map(|o| o.0)));
            }
        }
        raw.into_iter()
            .map(|(function, file, line, die)| {
                let debug = match (unit_offset, die) {
                    (Some(u), Some(d)) => self.frame_debug(u, d).unwrap_or_default(),
                    _ => FrameDebug::default(),
                };
                RawFrame { function, file, line, debug }
            })
            .collect()
    }

    fn unit(&mut self, offset: usize) -> Option<Rc<gimli::Unit<R>>> {
        if let Some(u) = self.units.get(&offset) {
            return Some(u.clone());
        }
        let dwarf = self.dwarf.clone();
        let header = dwarf.debug_info.header_from_offset(gimli::DebugInfoOffset(offset)).ok()?;
        let unit = Rc::new(dwarf.unit(header).ok()?);
        self.units.insert(offset, unit.clone());
        Some(unit)
    }

    /// The unit holding section offset `at`, and the DIE's offset in it.
    fn unit_holding(&mut self, at: usize) -> Option<(usize, gimli::UnitOffset<usize>)> {
        if self.unit_starts.is_none() {
            let mut starts = Vec::new();
            let mut it = self.dwarf.units();
            while let Ok(Some(h)) = it.next() {
                if let Some(o) = h.offset().to_debug_info_offset(&h) {
                    starts.push(o.0);
                }
            }
            starts.sort_unstable();
            self.unit_starts = Some(starts);
        }
        let starts = self.unit_starts.as_ref()?;
        let u = starts[starts.partition_point(|&s| s <= at).checked_sub(1)?];
        Some((u, gimli::UnitOffset(at - u)))
    }

    /// Follows a reference attribute to (unit, DIE offset).
    fn follow(&mut self, unit: usize, v: gimli::AttributeValue<R>) -> Option<(usize, gimli::UnitOffset<usize>)> {
        match v {
            gimli::AttributeValue::UnitRef(o) => Some((unit, o)),
            gimli::AttributeValue::DebugInfoRef(o) => self.unit_holding(o.0),
            _ => None,
        }
    }

    /// Name and template parameters of the function a frame's DIE stands
    /// for, following `abstract_origin` and `specification` (inlined
    /// copies and out-of-line definitions point at the declaration that
    /// carries them).
    fn frame_debug(&mut self, unit_off: usize, die: usize) -> Option<FrameDebug> {
        let mut out = FrameDebug::default();
        let (mut u_off, mut at) = (unit_off, gimli::UnitOffset(die));
        for _ in 0..6 {
            let unit = self.unit(u_off)?;
            let entry = unit.entry(at).ok()?;
            if out.name.is_none() {
                out.name = die_name(&self.dwarf, &unit, &entry);
            }
            if out.params.is_empty() && entry.has_children() {
                out.params = self.template_params(u_off, &unit, at);
            }
            let next = entry.attr_value(gimli::DW_AT_abstract_origin).or_else(|| entry.attr_value(gimli::DW_AT_specification));
            match next.and_then(|v| self.follow(u_off, v)) {
                Some((nu, na)) => (u_off, at) = (nu, na),
                None => break,
            }
        }
        Some(out)
    }

    fn template_params(&mut self, u_off: usize, unit: &gimli::Unit<R>, at: gimli::UnitOffset<usize>) -> Vec<(String, String)> {
        let mut found: Vec<(String, gimli::AttributeValue<R>)> = Vec::new();
        let Ok(mut tree) = unit.entries_tree(Some(at)) else { return Vec::new() };
        let Ok(root) = tree.root() else { return Vec::new() };
        let mut children = root.children();
        while let Ok(Some(child)) = children.next() {
            let e = child.entry();
            if e.tag() != gimli::DW_TAG_template_type_parameter {
                continue;
            }
            let name = die_name(&self.dwarf, unit, e);
            let ty = e.attr_value(gimli::DW_AT_type);
            if let (Some(name), Some(ty)) = (name, ty) {
                found.push((name, ty));
            }
        }
        found.into_iter().filter_map(|(n, ty)| Some((n, self.type_name(u_off, ty)?))).collect()
    }

    /// The qualified name of the type a `DW_AT_type` refers to.
    fn type_name(&mut self, unit: usize, ty: gimli::AttributeValue<R>) -> Option<String> {
        let (u_off, at) = self.follow(unit, ty)?;
        if !self.type_names.contains_key(&u_off) {
            let names = self.unit_type_names(u_off).unwrap_or_default();
            self.type_names.insert(u_off, names);
        }
        self.type_names.get(&u_off)?.get(&(u_off + at.0)).cloned()
    }

    /// Every named type of a unit with its namespace path, in one walk
    /// (DWARF has no parent links; Rust nests types in namespaces).
    fn unit_type_names(&mut self, u_off: usize) -> Option<HashMap<usize, String>> {
        let unit = self.unit(u_off)?;
        let dwarf = self.dwarf.clone();
        let mut names = HashMap::new();
        // (depth, path component) of the enclosing namespaces and types.
        let mut scope: Vec<(isize, String)> = Vec::new();
        let mut cursor = unit.entries();
        while let Ok(Some(e)) = cursor.next_dfs() {
            let depth = e.depth();
            while scope.last().is_some_and(|s| s.0 >= depth) {
                scope.pop();
            }
            let tag = e.tag();
            let nests = matches!(
                tag,
                gimli::DW_TAG_namespace | gimli::DW_TAG_structure_type | gimli::DW_TAG_enumeration_type | gimli::DW_TAG_union_type
            );
            let named = nests || matches!(tag, gimli::DW_TAG_base_type | gimli::DW_TAG_pointer_type | gimli::DW_TAG_typedef);
            if !named && !e.has_children() {
                continue;
            }
            let name = die_name(&dwarf, &unit, e);
            if let (true, Some(n)) = (named, &name) {
                let mut q = String::new();
                for (_, p) in &scope {
                    q.push_str(p);
                    q.push_str("::");
                }
                q.push_str(n);
                names.insert(u_off + e.offset().0, q);
            }
            if e.has_children() {
                // Children of an unnamed or non-nesting DIE (a function)
                // keep the enclosing path; a placeholder keeps the depth.
                let part = if nests { name } else { None };
                if let Some(p) = part {
                    scope.push((depth, p));
                }
            }
        }
        Some(names)
    }

    /// The trait-object vtables the debug info describes, module-relative
    /// address → (concrete type, trait): Rust emits each as a variable
    /// named `<T as Trait>::{vtable}` at the unit's top level.
    pub fn vtables(&mut self) -> Rc<HashMap<u64, (String, String)>> {
        if let Some(v) = &self.vtables {
            return v.clone();
        }
        let mut out = HashMap::new();
        let dwarf = self.dwarf.clone();
        let mut it = dwarf.units();
        while let Ok(Some(h)) = it.next() {
            let Ok(unit) = dwarf.unit(h) else { continue };
            let Ok(mut tree) = unit.entries_tree(None) else { continue };
            let Ok(root) = tree.root() else { continue };
            let mut children = root.children();
            while let Ok(Some(child)) = children.next() {
                let e = child.entry();
                if e.tag() != gimli::DW_TAG_variable {
                    continue;
                }
                let Some(name) = die_name(&dwarf, &unit, e) else { continue };
                let Some((ty, tr)) = parse_vtable_name(&name) else { continue };
                let Some(gimli::AttributeValue::Exprloc(expr)) = e.attr_value(gimli::DW_AT_location) else { continue };
                let mut ops = expr.operations(unit.encoding());
                if let Ok(Some(gimli::Operation::Address { address })) = ops.next() {
                    out.insert(address, (ty.to_string(), tr.to_string()));
                }
            }
        }
        let v = Rc::new(out);
        self.vtables = Some(v.clone());
        v
    }
}

/// A DIE's `DW_AT_name`, wherever the string lives.
fn die_name(dwarf: &gimli::Dwarf<R>, unit: &gimli::Unit<R>, e: &gimli::DebuggingInformationEntry<R>) -> Option<String> {
    let s = dwarf.attr_string(unit, e.attr_value(gimli::DW_AT_name)?).ok()?;
    s.to_string_lossy().ok().map(|c| c.into_owned())
}

/// `<types::Circle as types::Shape>::{vtable}` → (`types::Circle`, `types::Shape`).
pub fn parse_vtable_name(name: &str) -> Option<(&str, &str)> {
    let inner = name.strip_prefix('<')?.strip_suffix(">::{vtable}")?;
    // The last " as " at level 0 separates the type from the trait.
    let split = crate::names::levels(inner)
        .filter(|&(i, c, level)| c == b' ' && level == 0 && inner[i..].starts_with(" as "))
        .map(|(i, ..)| i)
        .last();
    let i = split?;
    Some((&inner[..i], &inner[i + 4..]))
}

/// The DWARF sections of `file` (all empty without `sections`).
fn load_dwarf(file: &object::File<'_>, data: &Rc<memmap2::Mmap>, sections: bool) -> Result<gimli::Dwarf<R>, object::Error> {
    let endian = if file.is_little_endian() { gimli::RunTimeEndian::Little } else { gimli::RunTimeEndian::Big };
    let base = data.as_ptr() as usize;
    let empty = || R::new(Bytes::Owned(Rc::from(&[][..])), endian);
    let load = |id: gimli::SectionId| -> Result<R, object::Error> {
        let Some(section) = file.section_by_name(id.name()).filter(|_| sections) else { return Ok(empty()) };
        match section.uncompressed_data()? {
            std::borrow::Cow::Borrowed(s) => {
                // A slice of the file: share the mapping. An empty section
                // (`objcopy --update-section .debug_aranges=/dev/null`) may
                // be a slice from elsewhere, which made gimli panic: only a
                // slice that lies inside the mapping is shared.
                let start = (s.as_ptr() as usize).wrapping_sub(base);
                if s.is_empty() {
                    Ok(empty())
                } else if start.checked_add(s.len()).is_some_and(|end| end <= data.len()) {
                    Ok(R::new(Bytes::Map(data.clone()), endian).range(start..start + s.len()))
                } else {
                    Ok(R::new(Bytes::Owned(Rc::from(s)), endian))
                }
            }
            std::borrow::Cow::Owned(v) => Ok(R::new(Bytes::Owned(v.into()), endian)),
        }
    };
    gimli::Dwarf::load(load)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vtable_names_split_at_the_outer_as() {
        assert_eq!(parse_vtable_name("<types::Circle as types::Shape>::{vtable}"), Some(("types::Circle", "types::Shape")));
        assert_eq!(
            parse_vtable_name("<alloc::vec::Vec<u8> as core::convert::AsRef<[u8]>>::{vtable}"),
            Some(("alloc::vec::Vec<u8>", "core::convert::AsRef<[u8]>"))
        );
        assert_eq!(parse_vtable_name("<a::B<fn() -> u8> as c::D>::{vtable}"), Some(("a::B<fn() -> u8>", "c::D")));
        assert_eq!(parse_vtable_name("not a vtable"), None);
    }
}
