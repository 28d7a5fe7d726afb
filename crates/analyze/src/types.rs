//! What each allocation holds: type names from the allocation site's
//! frames and, in full dumps, from the vtables of trait objects.
//!
//! A Rust object carries no header, but the generic functions that
//! allocate it are monomorphized: `Box<T>::new`, `Vec<T>`'s growth,
//! `Rc<T>::new`, the hash table of `HashMap<K, V>`. From the allocator
//! outward, among the frames that belong to the standard library (the
//! allocation machinery), the outermost one that names a container
//! decides: `Rc<Baz>::new` calls `Box<RcInner<Baz>>::new`, and the block
//! is an `Rc<Baz>`. Each frame is read, in order of trust:
//!
//! 1. what container it belongs to: the demangled symbol's self type
//!    (`alloc::boxed::Box<T>::new`), else the source file of the frame
//!    (`library/alloc/src/boxed.rs`), which line tables alone still give;
//! 2. the type arguments: DWARF template parameters by name (`T`, `K`,
//!    `V`) with full debug info, else the generic arguments Rust writes
//!    into the DWARF name of the function (`new<myapp::Bar>`, impl
//!    arguments first), else those of a v0-mangled symbol.
//!
//! With `debug = "line-tables-only"` there are no template parameters and
//! no vtable variables: names come from 1 and the DWARF names of 2, which
//! covers the common constructors; trait objects are then named only by
//! their allocation site. Without any debug info (symbols only) legacy
//! mangling has no type arguments, and the answer is "unknown".

use crate::heap::{Heap, SiteId};
use crate::names::levels;
use crate::symbols::{is_machinery, Frame, Symbolizer};
use crate::{BlockId, DumpFile};
use std::collections::HashMap;

/// The name given when nothing tells.
pub const UNKNOWN: &str = "unknown";

/// Containers the standard library allocates for, and how each is spelled.
struct Container {
    /// The name shown.
    name: &'static str,
    /// Type arguments shown (0: none, `String`).
    arity: usize,
    /// Self-type paths of its methods, as symbols spell them.
    paths: &'static [&'static str],
    /// Source files of its methods (suffix after `library/` or the crate).
    files: &'static [&'static str],
}

const CONTAINERS: &[Container] = &[
    Container { name: "Box", arity: 1, paths: &["alloc::boxed::Box"], files: &["alloc/src/boxed.rs", "alloc/src/boxed/"] },
    Container {
        name: "Vec",
        arity: 1,
        paths: &["alloc::vec::Vec", "alloc::raw_vec::RawVec", "alloc::slice::<impl [T]>"],
        files: &["alloc/src/vec/", "alloc/src/raw_vec", "alloc/src/slice.rs"],
    },
    Container {
        name: "String",
        arity: 0,
        paths: &["alloc::string::String", "alloc::str::<impl", "alloc::fmt::format"],
        files: &["alloc/src/string.rs", "alloc/src/str.rs", "alloc/src/fmt.rs"],
    },
    Container { name: "Rc", arity: 1, paths: &["alloc::rc::Rc", "alloc::rc::UniqueRc"], files: &["alloc/src/rc.rs"] },
    Container { name: "Arc", arity: 1, paths: &["alloc::sync::Arc", "alloc::sync::UniqueArc"], files: &["alloc/src/sync.rs"] },
    Container {
        name: "VecDeque",
        arity: 1,
        paths: &["alloc::collections::vec_deque::VecDeque"],
        files: &["alloc/src/collections/vec_deque/"],
    },
    Container {
        name: "BinaryHeap",
        arity: 1,
        paths: &["alloc::collections::binary_heap::BinaryHeap"],
        files: &["alloc/src/collections/binary_heap/"],
    },
    Container {
        name: "BTreeSet",
        arity: 1,
        paths: &["alloc::collections::btree::set::BTreeSet"],
        files: &["alloc/src/collections/btree/set.rs"],
    },
    Container { name: "BTreeMap", arity: 2, paths: &["alloc::collections::btree::"], files: &["alloc/src/collections/btree/"] },
    Container {
        name: "HashSet",
        arity: 1,
        paths: &["std::collections::hash::set::HashSet", "hashbrown::set::HashSet"],
        files: &["std/src/collections/hash/set.rs", "src/set.rs"],
    },
    Container {
        name: "HashMap",
        arity: 2,
        paths: &["std::collections::hash::map::HashMap", "hashbrown::map::HashMap"],
        files: &["std/src/collections/hash/map.rs", "src/map.rs"],
    },
    Container { name: "RawTable", arity: 1, paths: &["hashbrown::raw::RawTable"], files: &["src/raw/mod.rs", "src/raw.rs"] },
    Container { name: "CString", arity: 0, paths: &["alloc::ffi::c_str::CString"], files: &["alloc/src/ffi/c_str.rs"] },
    Container { name: "OsString", arity: 0, paths: &["std::ffi::os_str::OsString"], files: &["std/src/ffi/os_str.rs"] },
    Container { name: "PathBuf", arity: 0, paths: &["std::path::PathBuf"], files: &["std/src/path.rs"] },
];

/// The type a site allocates, from its frames (innermost first).
pub fn of_frames(frames: &[Frame]) -> Option<String> {
    let mut best = None;
    for f in frames {
        if !is_machinery(f) {
            break;
        }
        if let Some(t) = frame_type(f) {
            best = Some(t);
        }
    }
    best
}

/// C++ standard containers (libstdc++'s demangled names), and how many
/// of their template arguments the name shows.
const CXX: &[(&str, &str, usize)] = &[
    ("std::vector<", "std::vector", 1),
    ("std::deque<", "std::deque", 1),
    ("std::__cxx11::list<", "std::list", 1),
    ("std::list<", "std::list", 1),
    ("std::map<", "std::map", 2),
    ("std::multimap<", "std::multimap", 2),
    ("std::set<", "std::set", 1),
    ("std::multiset<", "std::multiset", 1),
    ("std::unordered_map<", "std::unordered_map", 2),
    ("std::unordered_set<", "std::unordered_set", 1),
    ("std::shared_ptr<", "std::shared_ptr", 1),
    ("std::__shared_ptr<", "std::shared_ptr", 1),
    ("std::make_shared<", "std::shared_ptr", 1),
    ("std::allocate_shared<", "std::shared_ptr", 1),
    ("std::make_unique<", "std::unique_ptr", 1),
];

/// The type a libstdc++ frame allocates for, from its demangled name.
fn cxx_frame_type(name: &str) -> Option<String> {
    let q = crate::names::cxx_qualified_name(name);
    if q.starts_with("std::__cxx11::basic_string<char,") || q.starts_with("std::basic_string<char,") {
        return Some("std::string".to_string());
    }
    let (prefix, shown, arity) = CXX.iter().find(|(p, ..)| q.starts_with(p))?;
    let args = generic_args(&q[prefix.len()..])?;
    if args.len() < *arity {
        return None;
    }
    Some(format!("{shown}<{}>", args[..*arity].iter().map(|a| pretty_cxx(a)).collect::<Vec<_>>().join(", ")))
}

/// A polymorphic C++ class as a vtable names it: `make_shared<T>`'s block
/// (`std::_Sp_counted_ptr_inplace<T, …>`, whose vtable its control block
/// needs) is a `std::shared_ptr<T>`, as the frames name it; any other
/// class as people write it.
fn cxx_class(t: &str) -> String {
    if let Some(args) = t.strip_prefix("std::_Sp_counted_ptr_inplace<").and_then(generic_args) {
        if let Some(a) = args.first() {
            return format!("std::shared_ptr<{}>", pretty_cxx(a));
        }
    }
    pretty_cxx(t)
}

/// A C++ type as people write it: `std::__cxx11::basic_string<char, …>`
/// is `std::string`, `> >` is `>>`.
fn pretty_cxx(t: &str) -> String {
    let mut out = t.to_string();
    for s in [
        "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >",
        "std::basic_string<char, std::char_traits<char>, std::allocator<char> >",
    ] {
        out = out.replace(s, "std::string");
    }
    out = out.replace("std::__cxx11::", "std::");
    while out.contains("> >") {
        out = out.replace("> >", ">>");
    }
    out.trim().to_string()
}

/// The container a frame's function belongs to and the type it allocates.
fn frame_type(f: &Frame) -> Option<String> {
    let name = f.function.as_deref().unwrap_or("");
    if let Some(t) = cxx_frame_type(name) {
        return Some(t);
    }
    let self_ty = self_type(name);
    let c = CONTAINERS.iter().find(|c| c.paths.iter().any(|p| self_ty.starts_with(p))).or_else(|| {
        // Files of the standard library (`…/library/alloc/src/…`) or
        // of hashbrown (`…/hashbrown-0.16.1/src/…`), nothing else.
        let file = f.file.as_deref()?;
        let (lib, hashbrown) = (file.contains("/library/"), file.contains("/hashbrown-"));
        CONTAINERS.iter().find(|c| c.files.iter().any(|s| if s.starts_with("src/") { hashbrown } else { lib } && file.contains(s)))
    })?;
    let wanted: &[&str] = match c.arity {
        0 => return Some(c.name.to_string()),
        1 => &["T"],
        _ => &["K", "V"],
    };
    let args = type_args(f, self_ty, c, wanted)?;
    Some(match (c.name, args.as_slice()) {
        ("RawTable", [t]) => match tuple_items(t).as_deref() {
            Some([k, v]) if v == "()" => format!("HashSet<{k}>"),
            Some([k, v]) => format!("HashMap<{k}, {v}>"),
            _ => format!("RawTable<{t}>"),
        },
        (n, a) => format!("{n}<{}>", a.join(", ")),
    })
}

/// The type arguments a container frame allocates with, checked.
fn type_args(f: &Frame, self_ty: &str, c: &Container, wanted: &[&str]) -> Option<Vec<String>> {
    let by_name: Option<Vec<String>> = wanted.iter().map(|w| f.debug.params.iter().find(|(n, _)| n == w).map(|(_, t)| t.clone())).collect();
    let positional = || -> Option<Vec<String>> {
        // The DWARF name (`insert<K, V, S>`), else a v0 symbol's self type
        // (`alloc::boxed::Box<myapp::Bar>`).
        let from_dwarf = f.debug.name.as_deref().and_then(|n| generic_args(&n[n.find('<')? + 1..]));
        let from_symbol = || {
            let p = c.paths.iter().find(|p| self_ty.starts_with(*p))?;
            generic_args(self_ty[p.len()..].strip_prefix('<')?)
        };
        let args = from_dwarf.or_else(from_symbol)?;
        (args.len() >= wanted.len()).then(|| args[..wanted.len()].to_vec())
    };
    let args = by_name.or_else(positional)?;
    args.iter().all(|a| is_concrete(a)).then(|| args.iter().map(|a| pretty(a)).collect())
}

/// Whether a generic argument names a type rather than a placeholder
/// (`T` in a legacy symbol) or the allocator (`RawVecInner<Global>`).
fn is_concrete(a: &str) -> bool {
    let placeholder = a.len() <= 2 && a.chars().all(|c| c.is_ascii_uppercase());
    !a.is_empty() && !placeholder && !a.ends_with("::Global") && a != "Global" && !a.starts_with("impl ")
}

/// The self type of a demangled method name: `alloc::boxed::Box<T>::new`
/// → `alloc::boxed::Box<T>`, `<alloc::vec::Vec<T> as Clone>::clone` →
/// `alloc::vec::Vec<T>`; a free function gives its module path.
fn self_type(name: &str) -> &str {
    if let Some(rest) = name.strip_prefix('<') {
        for (i, c, level) in levels(rest) {
            if (c == b'>' && level == -1) || (c == b' ' && level == 0 && rest[i..].starts_with(" as ")) {
                return &rest[..i];
            }
        }
        return rest;
    }
    // Drop the last path segment at level 0.
    let cut = levels(name).filter(|&(i, c, level)| c == b':' && level == 0 && name[i + 1..].starts_with(':')).map(|(i, ..)| i).last();
    &name[..cut.unwrap_or(0)]
}

/// The comma-separated arguments of a generic list, `rest` following its
/// opening `<` (what comes after the closing `>` is ignored).
fn generic_args(rest: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, c, level) in levels(rest) {
        match (c, level) {
            (b',', 0) => {
                out.push(rest[start..i].trim().to_string());
                start = i + 1;
            }
            (b'>', -1) => {
                out.push(rest[start..i].trim().to_string());
                return Some(out);
            }
            _ => {}
        }
    }
    None
}

/// `(A, B)` → `[A, B]`.
fn tuple_items(t: &str) -> Option<Vec<String>> {
    let inner = t.strip_prefix('(')?.strip_suffix(')')?;
    let mut v = generic_args(&format!("{inner}>"))?;
    v.retain(|s| !s.is_empty());
    Some(v)
}

/// A type name as people write it: standard-library paths shortened to
/// the last segment (`alloc::string::String` → `String`), the default
/// allocator and hasher arguments dropped; the program's own paths kept.
pub fn pretty(t: &str) -> String {
    let mut out = String::with_capacity(t.len());
    let mut i = 0;
    let b = t.as_bytes();
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_alphabetic() || c == b'_' {
            // A path: segments joined by `::`.
            let start = i;
            let mut last = i;
            loop {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                if t[i..].starts_with("::") && b.get(i + 2).is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_') {
                    i += 2;
                    last = i;
                } else {
                    break;
                }
            }
            let first = t[start..].split("::").next().unwrap_or("");
            if matches!(first, "alloc" | "core" | "std" | "hashbrown") {
                out.push_str(&t[last..i]);
            } else {
                out.push_str(&t[start..i]);
            }
        } else {
            out.push(c as char);
            i += 1;
        }
    }
    for default in [", Global>", ", RandomState>", ", DefaultHashBuilder>"] {
        while out.contains(default) {
            out = out.replace(default, ">");
        }
    }
    out
}

/// Type names for the blocks of one dump.
pub struct Types<'f> {
    sites: HashMap<SiteId, String>,
    /// The dump, for the vtable scans, until they are done.
    file: Option<&'f DumpFile>,
    /// Blocks named by a C++ vtable their first word points into, or by
    /// a trait-object vtable next to a pointer to them.
    blocks: HashMap<u32, String>,
    /// The scans ran and nobody took their result yet.
    new_scan: bool,
}

impl<'f> Types<'f> {
    /// Type names for the blocks of the dump `file`. Blocks whose site says
    /// nothing are also named by a C++ vtable their first word points into
    /// and, in full dumps, by fat pointers to them (a pointer to the
    /// block's start followed by a vtable the debug info names): the scans
    /// run once, when first needed.
    pub fn new(file: &'f DumpFile) -> Types<'f> {
        Types { sites: HashMap::new(), file: Some(file), blocks: HashMap::new(), new_scan: false }
    }

    /// The type a site allocates, or [`UNKNOWN`].
    pub fn of_site(&mut self, sym: &mut Symbolizer<'_>, site: SiteId) -> String {
        self.sites
            .entry(site)
            .or_insert_with(|| {
                if site == SiteId::NONE {
                    None
                } else {
                    // Only the allocator's frames name a type: resolved up
                    // to the first of the program's own.
                    of_frames(&sym.site_frames_until(site, |_, fr| fr.iter().any(|f| !is_machinery(f))))
                }
                .unwrap_or_else(|| UNKNOWN.to_string())
            })
            .clone()
    }

    /// The type of one block: its site's, or when that says nothing, the
    /// concrete type of a trait object pointing at it.
    pub fn of_block(&mut self, sym: &mut Symbolizer<'_>, heap: &Heap, b: BlockId) -> String {
        let t = self.of_site(sym, heap.block(b).site);
        if t != UNKNOWN {
            return t;
        }
        self.by_vtable(sym, heap).get(&b.0).cloned().unwrap_or(t)
    }

    /// The name a vtable gives block `b` (its first word, or a fat
    /// pointer to it), if any: what [`Types::of_block`] falls back on when
    /// the site says nothing, without a string made per block.
    pub fn vtable_name(&mut self, sym: &mut Symbolizer<'_>, heap: &Heap, b: BlockId) -> Option<&str> {
        self.by_vtable(sym, heap).get(&b.0).map(String::as_str)
    }

    /// Whether blocks of one site may have different names (some were
    /// named by vtables). Runs the vtable scan if it has not run.
    pub fn has_block_names(&mut self, sym: &mut Symbolizer<'_>, heap: &Heap) -> bool {
        !self.by_vtable(sym, heap).is_empty()
    }

    /// The blocks named by vtables, scanning the dump the first time.
    fn by_vtable(&mut self, sym: &mut Symbolizer<'_>, heap: &Heap) -> &HashMap<u32, String> {
        if let Some(file) = self.file.take() {
            if heap.header.mode == heapdump_format::Mode::Full {
                self.blocks = scan_vtables(file, heap, sym);
            }
            for (b, name) in scan_vptrs(file, heap, sym) {
                self.blocks.entry(b).or_insert(name);
            }
            self.new_scan = true;
        }
        &self.blocks
    }

    /// Whether the vtable scans are still to run.
    pub fn needs_scan(&self) -> bool {
        self.file.is_some()
    }

    /// The blocks an earlier scan of this dump named (kept in a cache): no
    /// scan runs.
    pub fn preset(&mut self, blocks: HashMap<u32, String>) {
        self.file = None;
        self.blocks = blocks;
    }

    /// The blocks the scans named, once, when they ran since the last call
    /// (for a cache to keep).
    pub fn take_new_scan(&mut self) -> Option<&HashMap<u32, String>> {
        std::mem::take(&mut self.new_scan).then_some(&self.blocks)
    }
}

/// Blocks whose first word points into a C++ vtable (`vtable for T`, as
/// the modules' symbols name it): objects of a polymorphic class `T`,
/// named so whatever allocated them (a plain `new T`, a capture from
/// outside with no sites). Compact dumps keep the first word too.
fn scan_vptrs(file: &DumpFile, heap: &Heap, sym: &mut Symbolizer<'_>) -> HashMap<u32, String> {
    let mut found = HashMap::new();
    // Only words inside a module's segments can be vtable pointers.
    let ranges = crate::heap::ModuleRanges::of(&heap.modules);
    if ranges.is_empty() {
        return found;
    }
    // The words the dump captured (a full dump's writable segments), for
    // the vtables' own words; the modules' files give the rest.
    let parsed = heapdump_format::Dump::parse(file.bytes()).ok();
    let memory = match &parsed {
        Some(d) if heap.header.mode == heapdump_format::Mode::Full => crate::rtti::Memory::of(d),
        _ => crate::rtti::Memory::default(),
    };
    // One answer per vtable address, however many objects point at it.
    let mut names: HashMap<u64, Option<String>> = HashMap::new();
    let mut one = |addr: u64, first: u64, sym: &mut Symbolizer<'_>| {
        if !ranges.contains(first) {
            return;
        }
        let name = names.entry(first).or_insert_with(|| sym.class_of_vtable(first, &memory).map(|t| cxx_class(&t))).clone();
        if let (Some(t), Some(b)) = (name, heap.find_start(addr)) {
            found.insert(b.0, t);
        }
    };
    // The candidates loading noted, when it could: no second reading.
    if let Some(words) = &heap.module_words {
        for &[addr, first] in words {
            one(addr, first, sym);
        }
        return found;
    }
    let Some(dump) = &parsed else { return found };
    for r in dump.records() {
        let Ok((_, rec)) = r else { break };
        use heapdump_format::{FirstWord, Record};
        match rec {
            Record::Alloc(a) => {
                one(a.address, crate::heap::first_word(&a), sym);
            }
            Record::Allocs(a) => {
                for e in a.entries() {
                    let Ok(e) = e else { break };
                    if let FirstWord::Value(v) = e.first_word {
                        one(e.address, v, sym);
                    }
                }
            }
            _ => {}
        }
    }
    found
}

/// Blocks pointed to by fat pointers `(data, vtable)` in full contents.
fn scan_vtables(file: &DumpFile, heap: &Heap, sym: &mut Symbolizer<'_>) -> HashMap<u32, String> {
    let mut found = HashMap::new();
    let vtables = sym.vtables();
    if vtables.is_empty() {
        return found;
    }
    let lo = vtables.keys().copied().min().unwrap_or(0);
    let hi = vtables.keys().copied().max().unwrap_or(0);
    let Ok(dump) = heapdump_format::Dump::parse(file.bytes()) else { return found };
    let mut scan = |bytes: &[u8], base: u64| {
        let skip = ((8 - (base % 8)) % 8) as usize;
        let Some(bytes) = bytes.get(skip..) else { return };
        let mut prev: Option<u64> = None;
        for w in bytes.chunks_exact(8) {
            let vt = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
            let data = prev.replace(vt);
            let Some(data) = data else { continue };
            if vt < lo || vt > hi {
                continue;
            }
            let Some((ty, tr)) = vtables.get(&vt) else { continue };
            if let Some(b) = heap.find_start(data) {
                found.entry(b.0).or_insert_with(|| format!("{} (dyn {})", pretty(ty), pretty(tr)));
            }
        }
    };
    for r in dump.records() {
        let Ok((_, rec)) = r else { break };
        use heapdump_format::{ContentsRef as Contents, Record};
        match rec {
            Record::Alloc(a) => {
                if let Contents::Full(b) = a.contents {
                    scan(b, a.address)
                }
            }
            Record::Thread(t) => {
                if let Contents::Full(b) = t.contents {
                    scan(b, t.stack_start)
                }
            }
            Record::Static(s) => {
                if let Contents::Full(b) = s.contents {
                    scan(b, s.address)
                }
            }
            _ => {}
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dwarf::FrameDebug;

    /// A site's type comes from the allocator's frames: naming it opens
    /// no module past the program's first frame (libc's start-up frames
    /// loaded libc's debug info, 0.4 s of `retained` at 10 M blocks).
    #[test]
    fn a_site_type_looks_no_further_than_the_programs_first_frame() {
        use heapdump_format::{Header, Mode, Reason, Segment};
        let module = |path: &str, at: u64| crate::heap::ModuleInfo {
            path: path.to_string(),
            build_id: vec![],
            bias: 0,
            segments: vec![Segment { vaddr: at, memsz: 0x1000, file_offset: 0, flags: heapdump_format::raw::SEG_X }],
        };
        let mut heap = Heap::empty(Header::new(Mode::Compact, Reason::Api, 4096, 1, 0));
        heap.modules = vec![module("/nonexistent/app", 0x1000), module("/nonexistent/libc.so.6", 0x10000)];
        heap.sites.insert(SiteId(1), vec![0x1100, 0x10100]);
        let mut sym = Symbolizer::new(&heap);
        let mut types = Types { sites: HashMap::new(), file: None, blocks: HashMap::new(), new_scan: false };
        assert_eq!(types.of_site(&mut sym, SiteId(1)), UNKNOWN);
        assert_eq!(sym.opened(), ["/nonexistent/app"], "the C library's module is not opened");
        // All the frames, when asked for, do open it.
        assert_eq!(sym.site_frames(SiteId(1)).len(), 2);
        assert_eq!(sym.opened(), ["/nonexistent/app", "/nonexistent/libc.so.6"]);
    }

    fn frame(function: &str, file: &str, dwarf_name: Option<&str>, params: &[(&str, &str)]) -> Frame {
        Frame {
            address: 0,
            function: Some(function.to_string()),
            file: Some(file.to_string()),
            line: Some(1),
            module: None,
            debug: FrameDebug {
                name: dwarf_name.map(str::to_string),
                params: params.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
            },
        }
    }
    const STD: &str = "/rustc/abc/library/";

    #[test]
    fn the_outermost_container_frame_names_the_block() {
        // Rc::new boxes an RcInner: the block is the Rc's.
        let frames = [
            frame("alloc::boxed::Box<T>::new", &format!("{STD}alloc/src/boxed.rs"), None, &[("T", "alloc::rc::RcInner<app::Baz>")]),
            frame("alloc::rc::Rc<T>::new", &format!("{STD}alloc/src/rc.rs"), None, &[("T", "app::Baz")]),
            frame("app::main", "/src/main.rs", None, &[]),
            frame("alloc::vec::Vec<T,A>::push", &format!("{STD}alloc/src/vec/mod.rs"), None, &[("T", "app::Wrong")]),
        ];
        assert_eq!(of_frames(&frames).as_deref(), Some("Rc<app::Baz>"));
    }

    #[test]
    fn line_tables_alone_name_by_file_and_dwarf_name() {
        let frames = [
            frame("grow_one<alloc::alloc::Global>", &format!("{STD}alloc/src/raw_vec/mod.rs"), Some("grow_one<alloc::alloc::Global>"), &[]),
            frame(
                "push<app::Foo, alloc::alloc::Global>",
                &format!("{STD}alloc/src/vec/mod.rs"),
                Some("push<app::Foo, alloc::alloc::Global>"),
                &[],
            ),
            frame("main", "/src/main.rs", None, &[]),
        ];
        assert_eq!(of_frames(&frames).as_deref(), Some("Vec<app::Foo>"));
    }

    #[test]
    fn hash_tables_name_their_map() {
        let frames = [
            frame(
                "hashbrown::raw::RawTable<T,A>::reserve_rehash",
                "/rust/deps/hashbrown-0.16.1/src/raw/mod.rs",
                None,
                &[("T", "(alloc::string::String, app::Quux)")],
            ),
            frame("app::main", "/src/main.rs", None, &[]),
        ];
        assert_eq!(of_frames(&frames).as_deref(), Some("HashMap<String, app::Quux>"));
        let frames = [
            frame(
                "std::collections::hash::map::HashMap<K,V,S>::insert",
                &format!("{STD}std/src/collections/hash/map.rs"),
                Some("insert<alloc::string::String, u64, std::hash::random::RandomState>"),
                &[],
            ),
            frame("app::main", "/src/main.rs", None, &[]),
        ];
        assert_eq!(of_frames(&frames).as_deref(), Some("HashMap<String, u64>"));
    }

    #[test]
    fn legacy_symbols_without_debug_info_stay_unknown() {
        let frames = [frame("alloc::boxed::Box<T>::new", "", None, &[]), frame("app::main", "", None, &[])];
        assert_eq!(of_frames(&frames), None);
        // A v0 symbol carries the argument.
        let frames = [frame("alloc::boxed::Box<app::Bar>::new", "", None, &[]), frame("app::main", "", None, &[])];
        assert_eq!(of_frames(&frames).as_deref(), Some("Box<app::Bar>"));
    }

    #[test]
    fn libstdcxx_containers_are_named() {
        let f = |n: &str| frame(n, "/usr/include/c++/12/bits/stl_vector.h", None, &[]);
        let user = frame("main", "/src/t.cpp", None, &[]);
        let frames = [
            f("std::__new_allocator<Point>::allocate(unsigned long, void const*)"),
            f("void std::vector<Point, std::allocator<Point> >::_M_realloc_insert<Point>(__gnu_cxx::__normal_iterator<Point*, std::vector<Point, std::allocator<Point> > >, Point&&)"),
            f("Point& std::vector<Point, std::allocator<Point> >::emplace_back<Point>(Point&&)"),
            user.clone(),
        ];
        assert_eq!(of_frames(&frames).as_deref(), Some("std::vector<Point>"));
        let frames = [
            f("std::_Rb_tree<std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >, std::pair<std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const, int>, std::_Select1st<std::pair<std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const, int> >, std::less<std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > >, std::allocator<std::pair<std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const, int> > >::_M_get_node()"),
            f("std::map<std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >, int, std::less<std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > >, std::allocator<std::pair<std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const, int> > >::operator[](std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >&&)"),
            user.clone(),
        ];
        assert_eq!(of_frames(&frames).as_deref(), Some("std::map<std::string, int>"));
        let frames = [
            f("std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >::_M_create(unsigned long&, unsigned long)"),
            user.clone(),
        ];
        assert_eq!(of_frames(&frames).as_deref(), Some("std::string"));
        let frames = [f("std::shared_ptr<Node>::shared_ptr<std::allocator<void>>(std::_Sp_alloc_shared_tag<std::allocator<void> >)"), user];
        assert_eq!(of_frames(&frames).as_deref(), Some("std::shared_ptr<Node>"));
    }

    #[test]
    fn names_are_shortened_for_the_standard_library_only() {
        assert_eq!(pretty("alloc::sync::Arc<std::sync::poison::mutex::Mutex<app::Qux>, alloc::alloc::Global>"), "Arc<Mutex<app::Qux>>");
        assert_eq!(pretty("(alloc::string::String, app::m::Quux)"), "(String, app::m::Quux)");
        assert_eq!(pretty("[u8; 16]"), "[u8; 16]");
    }

    #[test]
    fn self_types_and_generic_lists() {
        assert_eq!(self_type("alloc::boxed::Box<T>::new"), "alloc::boxed::Box<T>");
        assert_eq!(self_type("<alloc::vec::Vec<T,A> as core::clone::Clone>::clone"), "alloc::vec::Vec<T,A>");
        assert_eq!(generic_args("a::B<C, D>, e::F>::x"), Some(vec!["a::B<C, D>".to_string(), "e::F".to_string()]));
        assert_eq!(tuple_items("(a::K, b::V)"), Some(vec!["a::K".to_string(), "b::V".to_string()]));
    }

    #[test]
    fn vtable_classes_read_as_people_write_them() {
        assert_eq!(cxx_class("geo::Circle"), "geo::Circle");
        assert_eq!(
            cxx_class("std::_Sp_counted_ptr_inplace<cmListFileFunction::Implementation, std::allocator<void>, (__gnu_cxx::_Lock_policy)2>"),
            "std::shared_ptr<cmListFileFunction::Implementation>"
        );
        assert_eq!(
            cxx_class("std::_Sp_counted_ptr_inplace<std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >, std::allocator<void>, (__gnu_cxx::_Lock_policy)2>"),
            "std::shared_ptr<std::string>"
        );
        assert_eq!(
            cxx_class("std::__cxx11::basic_stringbuf<char, std::char_traits<char>, std::allocator<char> >"),
            "std::basic_stringbuf<char, std::char_traits<char>, std::allocator<char>>"
        );
    }
}
