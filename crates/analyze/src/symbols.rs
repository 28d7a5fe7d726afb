//! Offline symbolization of allocation sites from the dump's module map.
//!
//! Each return address is matched to the module whose executable segment
//! holds it; the module's file is opened where the dump says it was, its
//! GNU build id checked against the dump's, and the address resolved with
//! addr2line (DWARF line tables, inlined frames, then the symbol table),
//! with Rust and C++ names demangled.

use crate::heap::{Heap, SiteId};
use std::collections::HashMap;

/// One symbolized frame (an inlined call is its own frame).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Frame {
    /// Return address.
    pub address: u64,
    /// Demangled function name, if known.
    pub function: Option<String>,
    /// Source file, if known.
    pub file: Option<String>,
    /// Line, if known.
    pub line: Option<u32>,
    /// Module path.
    pub module: Option<String>,
    /// The function's DWARF name and template parameters (type naming).
    #[serde(skip)]
    pub debug: crate::dwarf::FrameDebug,
}

impl Frame {
    /// `function (file:line)`, or what is known of it.
    pub fn label(&self) -> String {
        let f = self.function.clone().unwrap_or_else(|| match &self.module {
            Some(m) => format!("{}+{:#x}", m.rsplit('/').next().unwrap_or(m), self.address),
            None => format!("{:#x}", self.address),
        });
        match (&self.file, self.line) {
            (Some(file), Some(line)) => format!("{f} ({}:{line})", short_path(file)),
            _ => f,
        }
    }
}

fn short_path(p: &str) -> &str {
    // Keep the last three components: enough to recognise, short to read.
    let mut idx = p.len();
    for _ in 0..3 {
        match p[..idx].rfind('/') {
            Some(i) => idx = i,
            None => return p,
        }
    }
    &p[idx + 1..]
}

struct ModuleSyms {
    debug: Option<crate::dwarf::ModuleDebug>,
    /// Why symbols are missing, when they are.
    problem: Option<String>,
    /// Its machine code, once a frame in it was asked whether it wraps
    /// the allocator (`None` inside: not readable).
    code: Option<Option<crate::wrappers::ModuleCode>>,
}

/// Symbolizes addresses of one dump, with caches.
pub struct Symbolizer<'h> {
    heap: &'h Heap,
    /// Module index to its slot in `loaded`.
    modules: HashMap<usize, usize>,
    /// One per distinct file (path and build id): a dump that names one
    /// file in many MODULE records has it opened once.
    loaded: Vec<ModuleSyms>,
    files: HashMap<(String, Vec<u8>), usize>,
    cache: HashMap<u64, Vec<Frame>>,
    site_cache: HashMap<SiteId, String>,
    /// More functions to see through when naming a site (`--skip`).
    skip: Option<regex::Regex>,
    /// Frames a site's label shows (`--depth`).
    depth: usize,
    /// The read-only data of each opened file (by its slot in `loaded`),
    /// once RTTI was asked of it.
    images: HashMap<usize, Option<std::rc::Rc<crate::rtti::Image>>>,
}

impl<'h> Symbolizer<'h> {
    /// The modules whose files were opened so far (for tests).
    #[cfg(test)]
    pub(crate) fn opened(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.files.keys().map(|(p, _)| p.as_str()).collect();
        v.sort_unstable();
        v
    }

    /// A symbolizer for `heap`'s module map.
    pub fn new(heap: &'h Heap) -> Self {
        Symbolizer {
            heap,
            modules: HashMap::new(),
            loaded: Vec::new(),
            files: HashMap::new(),
            cache: HashMap::new(),
            site_cache: HashMap::new(),
            skip: None,
            depth: 1,
            images: HashMap::new(),
        }
    }

    /// Sites are named past the functions `skip` matches too (anchored at
    /// both ends, as `top --skip` documents), beside the allocator
    /// machinery and the [`ALLOCATION_WRAPPERS`].
    pub fn skip(&mut self, skip: Option<regex::Regex>) {
        self.skip = skip;
        self.site_cache.clear();
    }

    /// Sites are named by `depth` frames (the first outside the machinery
    /// and its callers), joined by ` < `.
    pub fn depth(&mut self, depth: usize) {
        self.depth = depth.max(1);
        self.site_cache.clear();
    }

    /// Problems met while opening modules (missing files, build id mismatch).
    pub fn problems(&self) -> Vec<String> {
        let mut v: Vec<String> = self.loaded.iter().filter_map(|m| m.problem.clone()).collect();
        v.sort();
        v
    }

    /// How many distinct files have been opened (or tried) so far.
    pub fn files_opened(&self) -> usize {
        self.loaded.len()
    }

    fn module_of(&self, addr: u64) -> Option<usize> {
        self.heap.code_module(addr)
    }

    fn open(&mut self, mi: usize) -> &mut ModuleSyms {
        if let Some(&slot) = self.modules.get(&mi) {
            return &mut self.loaded[slot];
        }
        let m = &self.heap.modules[mi];
        let key = (m.path.clone(), m.build_id.clone());
        let slot = match self.files.get(&key) {
            Some(&slot) => slot,
            None => {
                let path = &m.path;
                let syms = if path.is_empty() || path.starts_with("linux-vdso") || path.starts_with("linux-gate") {
                    ModuleSyms { debug: None, problem: None, code: None }
                } else {
                    // The tracker's own preload library: every frame in it is
                    // the tracker's (seen through) but the allocation function
                    // the program called, which its symbol names. Its debug
                    // info (a Rust library's, thousands of units) cost every
                    // analysis of a preload dump 36 MiB and its parse time.
                    let runtime = path.rsplit('/').next().is_some_and(|f| f.starts_with(PRELOAD_LIBRARY));
                    match crate::dwarf::ModuleDebug::load(path, &m.build_id, runtime) {
                        Ok(d) => ModuleSyms { debug: Some(d), problem: None, code: None },
                        Err(e) => ModuleSyms { debug: None, problem: Some(e.to_string()), code: None },
                    }
                };
                self.loaded.push(syms);
                self.files.insert(key, self.loaded.len() - 1);
                self.loaded.len() - 1
            }
        };
        self.modules.insert(mi, slot);
        &mut self.loaded[slot]
    }

    /// The frames (inlined ones first) at return address `addr`.
    pub fn frames(&mut self, addr: u64) -> Vec<Frame> {
        if let Some(f) = self.cache.get(&addr) {
            return f.clone();
        }
        let out = self.resolve(addr);
        self.cache.insert(addr, out.clone());
        out
    }

    fn resolve(&mut self, addr: u64) -> Vec<Frame> {
        let bare = |module, function| vec![Frame { address: addr, function, file: None, line: None, module, debug: Default::default() }];
        let Some(mi) = self.module_of(addr) else { return bare(None, None) };
        let m = &self.heap.modules[mi];
        let bias = m.bias;
        let module = Some(m.path.clone());
        // Outside every symbol's extent: `module+0xOFFSET`, the offset in
        // the file (as valgrind and heaptrack show it), never the address.
        let probe = addr.wrapping_sub(bias).wrapping_sub(1);
        let unnamed = {
            let base = m.path.rsplit('/').next().unwrap_or(&m.path);
            let file_off = m
                .segments
                .iter()
                .find(|sg| probe >= sg.vaddr && probe < sg.vaddr.wrapping_add(sg.memsz))
                .map_or(probe.wrapping_add(1), |sg| probe + 1 - sg.vaddr + sg.file_offset);
            format!("{base}+{file_off:#x}")
        };
        let Some(debug) = &mut self.open(mi).debug else { return bare(module, Some(unnamed)) };
        // A return address points after the call: look up the call itself.
        let mut out: Vec<Frame> = debug
            .frames(probe)
            .into_iter()
            .map(|f| Frame { address: addr, function: f.function, file: f.file, line: f.line, module: module.clone(), debug: f.debug })
            .collect();
        if out.is_empty() || out.iter().all(|f| f.function.is_none()) {
            let name = debug.symbol(probe).map(|(n, _)| demangle(n)).unwrap_or(unnamed);
            match out.last_mut() {
                None => out = bare(module, Some(name)),
                Some(f) => f.function = Some(name),
            }
        }
        out
    }

    /// The symbol holding data address `addr` (for static roots): its
    /// name, and the offset of `addr` in it.
    pub fn data_symbol_at(&mut self, addr: u64) -> Option<(String, u64)> {
        let mi = self.heap.modules.iter().position(|m| {
            m.segments.iter().any(|s| {
                let start = m.bias.wrapping_add(s.vaddr);
                addr >= start && addr < start.wrapping_add(s.memsz)
            })
        })?;
        let bias = self.heap.modules[mi].bias;
        let debug = self.open(mi).debug.as_ref()?;
        let (name, at) = debug.symbol(addr.wrapping_sub(bias))?;
        Some((demangle(name), addr.wrapping_sub(bias).wrapping_sub(at)))
    }

    /// The module whose mapped segments hold run-time address `addr`.
    fn data_module(&self, addr: u64) -> Option<usize> {
        self.heap.modules.iter().position(|m| {
            m.segments.iter().any(|s| {
                let start = m.bias.wrapping_add(s.vaddr);
                addr >= start && addr < start.wrapping_add(s.memsz)
            })
        })
    }

    /// The read-only data of the module holding `addr`, and its bias.
    fn image_at(&mut self, addr: u64) -> Option<(std::rc::Rc<crate::rtti::Image>, u64)> {
        let mi = self.data_module(addr)?;
        let bias = self.heap.modules[mi].bias;
        self.open(mi);
        let slot = *self.modules.get(&mi)?;
        let loaded = &self.loaded;
        let image = self
            .images
            .entry(slot)
            .or_insert_with(|| loaded[slot].debug.as_ref().and_then(|d| crate::rtti::Image::of(d.file_bytes())).map(std::rc::Rc::new))
            .clone()?;
        Some((image, bias))
    }

    /// The word at `addr` in a module's read-only data: as the dump
    /// captured it, else as the loader made it from the module's file.
    fn read_only_word(&mut self, addr: u64, memory: &crate::rtti::Memory<'_>) -> Option<crate::rtti::Word> {
        let (image, bias) = self.image_at(addr)?;
        let at = addr.wrapping_sub(bias);
        if !image.is_ro(at, 8) {
            return None;
        }
        match memory.word(addr) {
            Some(v) => Some(crate::rtti::Word::Value(v)),
            None => image.word(at, bias),
        }
    }

    /// The C++ class of an object whose first word is `vptr`, demangled:
    /// when `vptr` is the address point of a primary vtable (offset to
    /// top 0) in a module's read-only data, the class the symbol table
    /// names it for (`vtable for T`) or, without one, the class its RTTI
    /// names (see [`crate::rtti`]). `memory` holds the words the dump
    /// captured.
    pub fn class_of_vtable(&mut self, vptr: u64, memory: &crate::rtti::Memory<'_>) -> Option<String> {
        use crate::rtti::Word;
        // A secondary vtable's object is the interior of another's.
        if self.read_only_word(vptr.checked_sub(16)?, memory)? != Word::Value(0) {
            return None;
        }
        if let Some((name, _)) = self.data_symbol_at(vptr) {
            if let Some(t) = crate::rtti::vtable_class(&name) {
                return Some(t.to_string());
            }
        }
        let Word::Value(info) = self.read_only_word(vptr - 8, memory)? else { return None };
        // The `type_info` is one of the ABI's class type_info classes'.
        match self.read_only_word(info, memory)? {
            Word::Import(name) => crate::rtti::is_class_type_info_vtable(&name).then_some(())?,
            Word::Value(v) => {
                let (image, bias) = self.image_at(v)?;
                image.is_ro(v.wrapping_sub(bias), 8).then_some(())?;
                if let Some((name, _)) = self.data_symbol_at(v) {
                    crate::rtti::is_class_type_info_vtable_demangled(&name).then_some(())?;
                }
            }
        }
        let Word::Value(name) = self.read_only_word(info.checked_add(8)?, memory)? else { return None };
        let (image, bias) = self.image_at(name)?;
        crate::rtti::type_name(image.c_string(name.wrapping_sub(bias))?)
    }

    /// The symbol holding data address `addr` (for static roots), as
    /// `name` or `name+0xOFFSET`.
    pub fn data_symbol(&mut self, addr: u64) -> Option<String> {
        let (name, off) = self.data_symbol_at(addr)?;
        Some(if off == 0 { name } else { format!("{name}+{off:#x}") })
    }

    /// Every trait-object vtable the modules' debug info describes, by
    /// absolute address: (concrete type, trait).
    pub fn vtables(&mut self) -> HashMap<u64, (String, String)> {
        let mut out = HashMap::new();
        for mi in 0..self.heap.modules.len() {
            let bias = self.heap.modules[mi].bias;
            if let Some(debug) = &mut self.open(mi).debug {
                for (a, t) in debug.vtables().iter() {
                    out.insert(bias.wrapping_add(*a), t.clone());
                }
            }
        }
        out
    }

    /// The return addresses of a site, innermost first, without the
    /// tracker's own: a stack starts at the allocation function the
    /// program called (`malloc`, `operator new`, `__rust_alloc`).
    pub fn site_addresses(&mut self, site: SiteId) -> Vec<u64> {
        let Some(addrs) = self.heap.sites.get(&site).cloned() else { return vec![] };
        let skip = addrs.iter().take_while(|&&a| self.frames(a).iter().all(is_runtime)).count();
        if skip == addrs.len() {
            return addrs;
        }
        addrs[skip..].to_vec()
    }

    /// The frames at `addr` without the tracker's own inlined into it
    /// (all of them if every one is the tracker's).
    pub fn program_frames(&mut self, addr: u64) -> Vec<Frame> {
        let all = self.frames(addr);
        if all.iter().all(is_runtime) {
            return all;
        }
        all.into_iter().filter(|f| !is_runtime(f)).collect()
    }

    /// All frames of a site, inlined frames expanded, innermost first,
    /// starting at the allocation function the program called.
    pub fn site_frames(&mut self, site: SiteId) -> Vec<Frame> {
        self.site_frames_until(site, |_, _| false)
    }

    /// A site's frames, innermost first, resolved a return address at a
    /// time until `enough` says those so far suffice: the outer ones (the
    /// C library's start, say) are then not looked up, nor their module's
    /// debug info loaded, for a question answered before them.
    pub fn site_frames_until(&mut self, site: SiteId, mut enough: impl FnMut(&Self, &[Frame]) -> bool) -> Vec<Frame> {
        let mut frames = Vec::new();
        for a in self.site_addresses(site) {
            let more = self.program_frames(a);
            frames.extend(more);
            if enough(self, &frames) {
                break;
            }
        }
        frames
    }

    /// A site's frames from the one that names it (the first outside the
    /// allocator, its wrappers and `--skip`) outward, up to `main`, the
    /// standard library's own frames between them left out (as in the
    /// program's frames of a leak): the callers `top --tree` shows.
    pub fn naming_frames(&mut self, site: SiteId) -> Vec<Frame> {
        let frames = self.site_frames(site);
        let first = self.naming_start(&frames).unwrap_or(0);
        let mut out = Vec::new();
        for (i, f) in frames.into_iter().enumerate().skip(first) {
            if i > first && is_machinery(&f) {
                continue;
            }
            let main = f.function.as_deref().is_some_and(|n| n == "main" || n.ends_with("::main"));
            out.push(f);
            if main {
                break;
            }
        }
        out
    }

    /// Whether a site's naming looks past frame `f`: the allocator, its
    /// wrappers, or a function `--skip` names.
    fn seen_through(&self, f: &Frame) -> bool {
        is_machinery(f) || is_wrapper(f) || self.skip.as_ref().is_some_and(|r| f.function.as_deref().is_some_and(|n| r.is_match(n)))
    }

    /// The index of the frame that names a site (innermost first), `None`
    /// when every frame is seen through. Seen through: the allocator
    /// machinery, the [`ALLOCATION_WRAPPERS`] and `--skip`'s functions
    /// (by name); a function whose callee was seen through and that
    /// returns what it got (by its code: [`crate::wrappers`], named or
    /// not, stripped or not); and a listed wrapper's own functions between
    /// it and the allocator, in its module (glib's slab allocator under
    /// `g_slice_alloc`, Tcl's block cache under `TclpAlloc`).
    fn naming_start(&mut self, frames: &[Frame]) -> Option<usize> {
        /// Return addresses a listed wrapper's own functions may span.
        const INTERNAL: usize = 3;
        let mut i = 0;
        'more: loop {
            while i < frames.len() && (self.seen_through(&frames[i]) || self.wraps(frames[i].address)) {
                i += 1;
            }
            if i >= frames.len() {
                break;
            }
            let mut addresses = 1;
            for j in i + 1..frames.len() {
                if frames[j].address != frames[j - 1].address {
                    addresses += 1;
                }
                if addresses > INTERNAL || frames[j].module != frames[i].module {
                    break;
                }
                if is_wrapper(&frames[j]) {
                    i = j + 1;
                    continue 'more;
                }
            }
            break;
        }
        (i < frames.len()).then_some(i)
    }

    /// Whether the function at return address `addr` returns the result
    /// of the call before `addr` (see [`crate::wrappers`]).
    fn wraps(&mut self, addr: u64) -> bool {
        let Some(mi) = self.module_of(addr) else { return false };
        let m = &self.heap.modules[mi];
        let (path, build_id, bias) = (m.path.clone(), m.build_id.clone(), m.bias);
        let syms = self.open(mi);
        // Only a file whose symbols were read (its build id matched).
        if syms.debug.is_none() {
            return false;
        }
        let code = syms.code.get_or_insert_with(|| crate::wrappers::ModuleCode::load(&path, &build_id));
        code.as_mut().is_some_and(|c| c.returns_call_result(addr.wrapping_sub(bias)))
    }

    /// A one-line name for a site: the first frame outside the allocator
    /// machinery (heapdump itself, `alloc::`, `core::`, `std::`, hashbrown,
    /// malloc and `operator new`).
    pub fn site_label(&mut self, site: SiteId) -> String {
        if site == SiteId::NONE {
            return "(no site recorded)".to_string();
        }
        if let Some(s) = self.site_cache.get(&site) {
            return s.clone();
        }
        // The site's frames up to the label's last (and the few after it a
        // listed wrapper's own functions may span).
        let depth = self.depth;
        let mut frames: Vec<Frame> = Vec::new();
        for a in self.site_addresses(site) {
            frames.extend(self.program_frames(a));
            let enough = self.naming_start(&frames).is_some_and(|i| {
                let mut after: Vec<u64> = frames[i..].iter().map(|f| f.address).collect();
                after.dedup();
                frames.len() >= i + depth && after.len() > 3
            });
            if enough {
                break;
            }
        }
        let first = self.naming_start(&frames).unwrap_or(0);
        let label = if frames.is_empty() {
            format!("site {site}")
        } else {
            frames[first..].iter().take(self.depth).map(Frame::label).collect::<Vec<_>>().join(" < ")
        };
        self.site_cache.insert(site, label.clone());
        label
    }
}

fn demangle(s: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(s) {
        return format!("{d:#}");
    }
    if s.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(s) {
            if let Ok(d) = sym.demangle() {
                return d;
            }
        }
    }
    s.to_string()
}

/// The file name of the tracker's preload library, without its suffix.
const PRELOAD_LIBRARY: &str = "libheapdump_preload";

/// Whether a frame is the tracker's own (heapdump's runtime or its preload
/// library), as opposed to the allocation function the program called.
/// The preload library's exported allocation functions are not: they are
/// what the program called.
pub fn is_runtime(f: &Frame) -> bool {
    const ENTRY: [&str; 12] = [
        "malloc",
        "calloc",
        "realloc",
        "reallocarray",
        "free",
        "posix_memalign",
        "aligned_alloc",
        "memalign",
        "valloc",
        "pvalloc",
        "malloc_usable_size",
        "cfree",
    ];
    let in_preload = f.module.as_deref().is_some_and(|m| m.contains(PRELOAD_LIBRARY));
    match f.function.as_deref() {
        Some(name) => {
            if in_preload && ENTRY.contains(&name) {
                return false;
            }
            let name = name.trim_start_matches('<');
            in_preload
                || name.starts_with("heapdump::")
                || name.starts_with("heapdump_preload::")
                || f.file.as_deref().is_some_and(|file| file.contains("/crates/heapdump/src/") || file.contains("/heapdump-0."))
        }
        None => in_preload,
    }
}

/// Functions that only wrap the allocator (they abort on failure, count,
/// or add a header): a site is named by its first frame outside them, or
/// they would take a program's whole heap (`Perl_safesysmalloc` 91%,
/// `jv_mem_alloc` 100%, `xcalloc` 63%). Matched by exact name.
pub const ALLOCATION_WRAPPERS: &[&str] = &[
    // git, GNU tools (gnulib), binutils, gcc (libiberty)
    "xmalloc",
    "xcalloc",
    "xrealloc",
    "xzalloc",
    "xmallocz",
    "xmallocz_gently",
    "do_xmalloc",
    "xstrdup",
    "xstrndup",
    "xmemdup",
    "xmemdupz",
    "xcharalloc",
    "xnmalloc",
    "xnrealloc",
    "x2realloc",
    "x2nrealloc",
    "ximalloc",
    "xicalloc",
    "xirealloc",
    // glib
    "g_malloc",
    "g_malloc0",
    "g_realloc",
    "g_malloc_n",
    "g_malloc0_n",
    "g_realloc_n",
    "g_try_malloc",
    "g_try_malloc0",
    "g_try_realloc",
    "g_strdup",
    "g_strndup",
    "g_memdup",
    "g_memdup2",
    "g_slice_alloc",
    "g_slice_alloc0",
    // CPython
    "PyMem_Malloc",
    "PyMem_Calloc",
    "PyMem_Realloc",
    "PyMem_RawMalloc",
    "PyMem_RawCalloc",
    "PyMem_RawRealloc",
    "_PyMem_RawMalloc",
    "_PyMem_RawCalloc",
    "_PyMem_RawRealloc",
    "_PyMem_DebugRawAlloc",
    "_PyMem_DebugRawRealloc",
    "PyObject_Malloc",
    "PyObject_Calloc",
    "PyObject_Realloc",
    "_PyObject_Malloc",
    "_PyObject_Calloc",
    "_PyObject_Realloc",
    "pymalloc_alloc",
    "pymalloc_realloc",
    "_PyObject_MallocWithType",
    // Perl
    "Perl_safesysmalloc",
    "Perl_safesyscalloc",
    "Perl_safesysrealloc",
    "Perl_safesysfree",
    // jq
    "jv_mem_alloc",
    "jv_mem_alloc_unguarded",
    "jv_mem_calloc",
    "jv_mem_calloc_unguarded",
    "jv_mem_realloc",
    "jv_mem_strdup",
    "jv_mem_strdup_unguarded",
    // SQLite
    "sqlite3Malloc",
    "sqlite3MallocZero",
    "sqlite3_malloc",
    "sqlite3_malloc64",
    "sqlite3Realloc",
    "sqlite3_realloc",
    "sqlite3_realloc64",
    "sqlite3DbMallocRaw",
    "sqlite3DbMallocRawNN",
    "sqlite3DbMallocZero",
    "sqlite3DbRealloc",
    "sqlite3DbStrDup",
    "sqlite3MemMalloc",
    "sqlite3MemRealloc",
    "dbMallocRawFinish",
    // gawk, Ruby, OpenSSL, FFmpeg, Redis, libxml2, Tcl
    "emalloc_real",
    "erealloc_real",
    "ezalloc_real",
    "ruby_xmalloc",
    "ruby_xmalloc2",
    "ruby_xcalloc",
    "ruby_xrealloc",
    "ruby_xrealloc2",
    "CRYPTO_malloc",
    "CRYPTO_zalloc",
    "CRYPTO_realloc",
    "CRYPTO_clear_realloc",
    "av_malloc",
    "av_mallocz",
    "av_realloc",
    "av_calloc",
    "zmalloc",
    "zcalloc",
    "zrealloc",
    "ztrymalloc_usable",
    "xmlMalloc",
    "xmlRealloc",
    "Tcl_Alloc",
    "TclpAlloc",
    // Found by their code too (`crate::wrappers`); named for a module
    // whose code cannot be read. graphviz, Redis, Tcl
    "gmalloc",
    "gcalloc",
    "grealloc",
    "agalloc",
    "agrealloc",
    "gv_alloc",
    "gv_calloc",
    "gv_recalloc",
    "zmalloc_usable",
    "zcalloc_usable",
    "zcalloc_num",
    "zrealloc_usable",
    "ztrycalloc_usable",
    "ztryrealloc_usable",
    "zstrdup",
    "Tcl_AttemptAlloc",
    "Tcl_Realloc",
    "Tcl_AttemptRealloc",
    "TclpRealloc",
];

/// Whether a frame is one of the [`ALLOCATION_WRAPPERS`].
pub fn is_wrapper(f: &Frame) -> bool {
    f.function.as_deref().is_some_and(|n| ALLOCATION_WRAPPERS.contains(&n))
}

/// Whether `name` is glibc's internal name (`__GI_`, with debug symbols)
/// of one of its allocation functions (`__GI___libc_malloc`,
/// `__GI___strdup`). Its other functions are the C library's own work,
/// shown as valgrind shows them (`__GI___tsearch` under `setenv`).
fn is_glibc_allocator(name: &str) -> bool {
    const ALLOCATING: [&str; 13] = [
        "malloc",
        "calloc",
        "realloc",
        "reallocarray",
        "free",
        "memalign",
        "posix_memalign",
        "aligned_alloc",
        "valloc",
        "pvalloc",
        "strdup",
        "strndup",
        "malloc_usable_size",
    ];
    let Some(rest) = name.strip_prefix("__GI_") else { return false };
    let rest = rest.trim_start_matches('_');
    let rest = rest.strip_prefix("libc_").unwrap_or(rest);
    ALLOCATING.contains(&rest)
}

/// Whether a frame belongs to allocation machinery rather than the program.
pub fn is_machinery(f: &Frame) -> bool {
    let Some(name) = f.function.as_deref() else {
        // Unnamed frames inside the preload library or libc are machinery.
        return f.module.as_deref().is_some_and(|m| m.contains(PRELOAD_LIBRARY) || m.contains("/libc.so"));
    };
    // A mangled C++ name of the standard library (demangling can fail on
    // some templates) is machinery too.
    if ["_ZSt", "_ZNSt", "_ZNKSt", "_ZN9__gnu_cxx", "_ZNK9__gnu_cxx"].iter().any(|p| name.starts_with(p)) {
        return true;
    }
    let full = name.trim_start_matches('<');
    let name = crate::names::cxx_qualified_name(name).trim_start_matches('<');
    const PREFIXES: [&str; 21] = [
        "heapdump::",
        "__rustc::",
        "heapdump_preload::",
        "__rust_alloc",
        "__rust_realloc",
        "__rust_alloc_zeroed",
        "__rdl_",
        "__rg_",
        "alloc::",
        "core::",
        "std::",
        "hashbrown::",
        "malloc",
        "calloc",
        "realloc",
        "operator new",
        "__libc_",
        "_Unwind_",
        "posix_memalign",
        "aligned_alloc",
        "memalign",
    ];
    if PREFIXES.iter().any(|p| name.starts_with(p) || full.starts_with(p)) || name.starts_with("strdup") || is_glibc_allocator(name) {
        return true;
    }
    // Inlined frames carry short names (`alloc_impl`, `record`): judge them
    // by their source file: the Rust standard library, this runtime, or
    // the allocator crates.
    f.file.as_deref().is_some_and(|file| {
        const DIRS: [&str; 8] = [
            "/library/alloc/",
            "/library/core/",
            "/library/std/",
            "/crates/heapdump/src/",
            "/heapdump-0.",
            "/hashbrown-",
            "/crates/preload/src/",
            "/heapdump-preload-0.",
        ];
        DIRS.iter().any(|d| file.contains(d)) || file.starts_with("/rustc/")
    }) || name == "__rust_alloc"
        || name == "__rust_alloc_zeroed"
        || name == "__rust_realloc"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(n: &str) -> Frame {
        Frame { address: 0, function: Some(n.to_string()), file: None, line: None, module: None, debug: Default::default() }
    }

    #[test]
    fn cxx_standard_library_frames_are_machinery() {
        for n in [
            "void std::vector<Point, std::allocator<Point> >::_M_realloc_insert<Point>(__gnu_cxx::__normal_iterator<Point*>, Point&&)",
            "Point& std::vector<Point, std::allocator<Point> >::emplace_back<Point>(Point&&)",
            "std::__new_allocator<Point>::allocate(unsigned long, void const*)",
            "_ZSt11make_sharedI4NodeJEESt10shared_ptrINSt9enable_ifIXntsrSt8is_arrayIT_E5valueES4_E4typeEEDpOT0_",
            "operator new(unsigned long)",
            "alloc::raw_vec::finish_grow",
        ] {
            assert!(is_machinery(&named(n)), "{n}");
        }
        for n in ["main", "Point make_point(int)", "app::Cache<std::string>::insert(int)", "types::main"] {
            assert!(!is_machinery(&named(n)), "{n}");
        }
    }

    #[test]
    fn only_glibc_allocator_internals_are_machinery() {
        for n in ["__GI___libc_malloc", "__GI___libc_realloc", "__GI___strdup", "__GI___libc_free"] {
            assert!(is_machinery(&named(n)), "{n}");
        }
        for n in ["__GI___tsearch", "__GI___qsort_r", "__GI___getdelim", "__GI__IO_file_doallocate"] {
            assert!(!is_machinery(&named(n)), "{n}");
        }
    }
}
