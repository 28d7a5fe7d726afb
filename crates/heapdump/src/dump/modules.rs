//! The module map: every loaded object, read with `dl_iterate_phdr` into
//! memory mapped from the kernel, at each dump (so libraries loaded with
//! `dlopen` after start-up are there).
//!
//! `dl_iterate_phdr` takes the loader's lock, so it is called before the
//! world is stopped: a stopped thread may hold that lock.

use crate::sys;
use core::ffi::c_void;
use heapdump_format::Segment;

/// Most modules recorded.
pub const MAX_MODULES: usize = 2048;
/// Most segments per module.
pub const MAX_SEGMENTS: usize = 16;
const PATH_ARENA: usize = 1 << 20;

/// One module.
#[derive(Clone, Copy)]
pub struct Module {
    /// Load bias.
    pub bias: u64,
    path_off: u32,
    path_len: u32,
    build_id: [u8; 40],
    build_id_len: u8,
    nseg: u8,
    segs: [Segment; MAX_SEGMENTS],
}

impl Module {
    /// The loadable segments.
    pub fn segments(&self) -> &[Segment] {
        &self.segs[..self.nseg as usize]
    }
    /// The build id.
    pub fn build_id(&self) -> &[u8] {
        &self.build_id[..self.build_id_len as usize]
    }
}

/// The module map, in mapped memory.
pub struct Modules {
    mods: *mut Module,
    paths: *mut u8,
    /// Number of modules.
    pub len: usize,
    paths_len: usize,
}

impl Modules {
    /// Maps the storage.
    pub fn new() -> Result<Modules, i32> {
        let mods = sys::mmap_anon(MAX_MODULES * core::mem::size_of::<Module>())?;
        let paths = sys::mmap_anon(PATH_ARENA)?;
        Ok(Modules { mods: mods.cast(), paths, len: 0, paths_len: 0 })
    }

    /// Re-reads the loaded objects.
    pub fn refresh(&mut self) {
        self.len = 0;
        self.paths_len = 0;
        // SAFETY: `each` takes the C library's info and a `Modules`, which
        // `self` is and outlives the call.
        unsafe { sys::for_each_object(each, (self as *mut Modules).cast()) };
    }

    /// The modules.
    pub fn iter(&self) -> impl Iterator<Item = &Module> {
        // SAFETY: the first `len` entries were written by `each`.
        (0..self.len).map(move |i| unsafe { &*self.mods.add(i) })
    }

    /// A module's path.
    pub fn path(&self, m: &Module) -> &[u8] {
        // SAFETY: (path_off, path_len) lie inside the written part of the arena.
        unsafe { core::slice::from_raw_parts(self.paths.add(m.path_off as usize), m.path_len as usize) }
    }

    fn push_path(&mut self, p: &[u8]) -> (u32, u32) {
        let n = p.len().min(PATH_ARENA - self.paths_len);
        // SAFETY: n bytes fit in the arena after paths_len.
        unsafe { core::ptr::copy_nonoverlapping(p.as_ptr(), self.paths.add(self.paths_len), n) };
        let off = self.paths_len;
        self.paths_len += n;
        (off as u32, n as u32)
    }
}

unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> i32 {
    // SAFETY: `data` is the `Modules` passed to dl_iterate_phdr, exclusively ours.
    let m = unsafe { &mut *data.cast::<Modules>() };
    if m.len >= MAX_MODULES {
        return 1;
    }
    // SAFETY: the loader passes a valid info for the duration of the callback.
    let info = unsafe { &*info };
    let bias = info.dlpi_addr;
    let mut rec =
        Module { bias, path_off: 0, path_len: 0, build_id: [0; 40], build_id_len: 0, nseg: 0, segs: [Segment::default(); MAX_SEGMENTS] };
    let name: &[u8] = if info.dlpi_name.is_null() {
        b""
    } else {
        // SAFETY: dlpi_name is a NUL-terminated string owned by the loader.
        unsafe { core::ffi::CStr::from_ptr(info.dlpi_name) }.to_bytes()
    };
    let mut exe = [0u8; 1024];
    let name = if name.is_empty() && m.len == 0 {
        // The main program: the loader gives no name.
        let n = crate::sys::procfs::exe_path(&mut exe);
        if n > 0 {
            &exe[..n]
        } else {
            name
        }
    } else {
        name
    };
    (rec.path_off, rec.path_len) = m.push_path(name);
    for i in 0..info.dlpi_phnum as usize {
        // SAFETY: dlpi_phdr points to dlpi_phnum program headers.
        let ph = unsafe { &*info.dlpi_phdr.add(i) };
        if ph.p_type == libc::PT_LOAD && (rec.nseg as usize) < MAX_SEGMENTS {
            rec.segs[rec.nseg as usize] = Segment { vaddr: ph.p_vaddr, memsz: ph.p_memsz, file_offset: ph.p_offset, flags: ph.p_flags };
            rec.nseg += 1;
        } else if ph.p_type == libc::PT_NOTE && rec.build_id_len == 0 {
            let start = bias.wrapping_add(ph.p_vaddr) as *const u8;
            // SAFETY: a PT_NOTE segment of a loaded object is mapped and
            // readable for p_memsz bytes (it lies inside a PT_LOAD).
            let notes = unsafe { core::slice::from_raw_parts(start, ph.p_memsz as usize) };
            if let Some(id) = find_build_id(notes) {
                let n = id.len().min(40);
                rec.build_id[..n].copy_from_slice(&id[..n]);
                rec.build_id_len = n as u8;
            }
        }
    }
    // SAFETY: m.len < MAX_MODULES, inside the mapping.
    unsafe { m.mods.add(m.len).write(rec) };
    m.len += 1;
    0
}

/// Finds the `NT_GNU_BUILD_ID` descriptor in a note segment.
pub fn find_build_id(mut notes: &[u8]) -> Option<&[u8]> {
    let align4 = |n: usize| (n + 3) & !3;
    while notes.len() >= 12 {
        let namesz = u32::from_ne_bytes(notes[0..4].try_into().ok()?) as usize;
        let descsz = u32::from_ne_bytes(notes[4..8].try_into().ok()?) as usize;
        let ntype = u32::from_ne_bytes(notes[8..12].try_into().ok()?);
        let name_end = 12usize.checked_add(align4(namesz))?;
        let desc_end = name_end.checked_add(align4(descsz))?;
        if desc_end > notes.len() {
            return None;
        }
        if ntype == 3 && namesz == 4 && &notes[12..16] == b"GNU\0" {
            return notes.get(name_end..name_end + descsz);
        }
        notes = &notes[desc_end..];
    }
    None
}
