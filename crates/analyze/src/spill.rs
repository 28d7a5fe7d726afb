//! The loaded heap's large tables moved to a file (issue 43's memory
//! goal): a question about a large heap holds, at its peak (the end of
//! the dominators' walk), the heap's blocks and edges (about 30 bytes a
//! block) beside the walk's own tables. Written once to an unnamed file
//! on disk and read from its mapping from then on, the tables are
//! page cache the kernel can write back and drop, not anonymous memory:
//! the answers read the same bytes.
//!
//! They are moved in place, when the dominators are first asked for (the
//! questions that never ask, `leaks`, `top`, stay under the goal without
//! it and pay nothing): each table's whole pages are written to the file,
//! then the file mapped over them at the same addresses (`MAP_FIXED`), so
//! that every slice of them the analysis holds reads on, the same bytes,
//! from the file's pages; the anonymous pages go back to the kernel as
//! each chunk is mapped (and the file's next pages reuse them). Before a
//! moved table's memory goes back to the allocator, its pages are made
//! anonymous again (`Slab`'s drop).
//!
//! The file has no name from the start (`O_TMPFILE`, or created and
//! unlinked at once where the file system lacks it): nothing is left
//! behind when the process ends, however it ends. It goes in the caches'
//! directory, or for a question without caches the temporary one
//! (`$TMPDIR`, else `/tmp`), or `/var/tmp`; never on a file system held in
//! memory (tmpfs, ramfs: its pages would be shared memory, no less
//! resident than the tables).

use crate::heap::Heap;
use std::io;
use std::ops::Range;
use std::path::Path;

/// Heaps of this many blocks and more are moved (their tables some 30
/// MB): below, the copy is not worth its time.
pub(crate) const FROM_BLOCKS: usize = 1 << 20;

/// Bytes written and mapped at a time: each chunk's anonymous pages go
/// back to the kernel once it is mapped from the file, so that the file's
/// next pages reuse them (on a VM, pages the process has not touched
/// before cost a fault each in the host too).
const CHUNK: usize = 8 << 20;

/// Bytes a write call takes: 32 KiB. The file system gives a larger write
/// larger folios, and on a VM those are pages the host has not backed yet
/// (a fault each there): the tables of 10 M blocks (300 MB) took 0.6-1.4
/// s written in 8 MiB calls, 0.2-0.5 s in 64 KiB ones, 0.24-0.72 s in 4
/// KiB ones (a call each page), 0.14-0.19 s in 32 KiB ones.
const WRITE: usize = 4 << 10;

/// Whether `dir` is on a file system that keeps its files in memory.
fn in_memory(dir: &Path) -> io::Result<bool> {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    let t = rustix::fs::statfs(dir)?.f_type as i64;
    Ok(t == TMPFS_MAGIC || t == RAMFS_MAGIC)
}

fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system. (The analysis is
    // not the traced process: it calls the C library directly.)
    #[allow(unsafe_code, clippy::disallowed_methods)]
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).unwrap_or(4096)
}

/// The whole pages inside `bytes` (an address range).
fn pages(bytes: Range<usize>) -> Range<usize> {
    let page = page_size();
    let start = bytes.start.next_multiple_of(page);
    start..(bytes.end / page * page).max(start)
}

/// Maps `len` bytes at `addr` from `f` at `off` (`f`: None, fresh
/// anonymous memory), over whatever was mapped there.
fn map_over(addr: usize, len: usize, f: Option<(&std::fs::File, u64)>) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let (flags, fd, off) = match f {
        Some((f, off)) => (libc::MAP_SHARED, f.as_raw_fd(), off),
        None => (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0),
    };
    let off = libc::off_t::try_from(off).map_err(|_| io::Error::other("offset"))?;
    // SAFETY: `addr..addr + len` is whole pages of one allocation this
    // process owns, mapped read-write (see the callers), replaced by a
    // read-write mapping of the same bytes (the file's, just written from
    // them) or, when their allocation goes, by zeros: nothing reads other
    // bytes there than it read before.
    #[allow(unsafe_code, clippy::disallowed_methods)]
    let p = unsafe { libc::mmap(addr as *mut libc::c_void, len, libc::PROT_READ | libc::PROT_WRITE, flags | libc::MAP_FIXED, fd, off) };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The pages of `bytes` (an allocation's, being given back) anonymous
/// memory again.
pub(crate) fn anonymous_again(bytes: Range<usize>) -> io::Result<()> {
    let p = pages(bytes);
    if p.is_empty() {
        return Ok(());
    }
    map_over(p.start, p.len(), None)
}

/// Writes the whole pages of `bytes` to `f` at `*at` (rounded up to a
/// page), a chunk at a time, each chunk then mapped from there at its own
/// addresses; `moving` is called before the first is. `Ok(false)`: no
/// whole page. On an error the chunks not mapped yet stay as they were.
pub(crate) fn move_pages(bytes: &[u8], f: &std::fs::File, at: &mut u64, moving: impl FnOnce()) -> io::Result<bool> {
    use std::os::unix::fs::FileExt;
    let base = bytes.as_ptr() as usize;
    let p = pages(base..base + bytes.len());
    if p.is_empty() {
        return Ok(false);
    }
    // (At a multiple of the write size too: a write fills whole folios.)
    let off = at.next_multiple_of(page_size().max(WRITE) as u64);
    moving();
    let mut done = p.start;
    while done < p.end {
        let end = (done + CHUNK).min(p.end);
        let file_at = |a: usize| off + (a - p.start) as u64;
        for w in (done..end).step_by(WRITE) {
            f.write_all_at(&bytes[w - base..(w + WRITE).min(end) - base], file_at(w))?;
        }
        if let Err(e) = map_over(done, end - done, Some((f, file_at(done)))) {
            // The old pages may be gone: fresh ones, the bytes read back.
            let back = map_over(done, end - done, None).and_then(|()| {
                // SAFETY: the pages just mapped anonymous, whole inside
                // `bytes`, given back the bytes they held.
                #[allow(unsafe_code)]
                let b = unsafe { std::slice::from_raw_parts_mut(done as *mut u8, end - done) };
                f.read_exact_at(b, file_at(done))
            });
            if back.is_err() {
                eprintln!("heapdump: the heap's tables could not be moved to a file, nor read back ({e})");
                std::process::abort();
            }
            return Err(e);
        }
        done = end;
    }
    *at = off + p.len() as u64;
    Ok(true)
}

/// An unnamed file a large heap's tables are built in from the start:
/// each table's memory, zeroed and not yet written, has the file mapped
/// over its whole pages (the file's fresh bytes read as zeros too), so
/// that the load writes the tables straight into page cache and the
/// dominators find them there, with nothing to move (on
/// benches/c/mostly_lost.c's 100 M blocks, moving the 3 GB of tables
/// took 1-11 s, most of it the kernel finding fresh pages for the copy:
/// on a VM, pages the host has to back first). A table the load then
/// grows elsewhere (a dump whose trailer understates its blocks), or
/// makes anew (a dump out of address order), is simply not marked, and
/// is moved as before.
/// Where a large heap's tables are built in a file (see [`TableFile`]):
/// the caches' directory, when they are on.
#[derive(Clone, Copy)]
pub(crate) struct TablesIn<'a>(pub(crate) Option<&'a Path>);

pub(crate) struct TableFile {
    f: std::fs::File,
    at: u64,
    /// The address ranges mapped from the file.
    mapped: Vec<Range<usize>>,
}

impl TableFile {
    /// Tables of this many bytes and more are built in the file: their
    /// memory is a mapping of its own, which the allocator gives back to
    /// the kernel when it is freed (glibc maps every allocation above 32
    /// MiB on its own), so that no page of the file stays behind in the
    /// allocator's heap whichever way the table goes. Smaller ones are
    /// moved when the dominators are asked for, as before.
    const FROM_BYTES: usize = 32 << 20;

    /// A file for the tables of a heap of `blocks` blocks, in the caches'
    /// directory `cache_dir`, else where [`before_dominators`] puts it;
    /// `None` for a heap too small to move or where no directory takes
    /// it.
    pub(crate) fn new(blocks: usize, TablesIn(cache_dir): TablesIn<'_>) -> Option<TableFile> {
        if blocks < FROM_BLOCKS {
            return None;
        }
        let f = dirs(cache_dir).into_iter().find_map(|d| match in_memory(&d) {
            Ok(false) => tempfile::tempfile_in(&d).ok(),
            _ => None,
        })?;
        Some(TableFile { f, at: 0, mapped: Vec::new() })
    }

    /// Maps the file over the whole pages of `v`, zeroed memory nothing
    /// has written yet (a table of [`TableFile::FROM_BYTES`] or more):
    /// the same zeros read from there, and what is written goes to the
    /// file. Nothing changes when the file cannot be grown or mapped.
    pub(crate) fn build_in<T: bytemuck::Pod>(&mut self, v: &mut [T]) {
        let base = v.as_ptr() as usize;
        let bytes = std::mem::size_of_val(v);
        let p = pages(base..base + bytes);
        if bytes < Self::FROM_BYTES || p.is_empty() {
            return;
        }
        let off = self.at.next_multiple_of(page_size() as u64);
        if self.f.set_len(off + p.len() as u64).is_err() || map_over(p.start, p.len(), Some((&self.f, off))).is_err() {
            return;
        }
        // Faulted in a page at a time, as anonymous memory is, not read
        // ahead in large folios (which on a VM come from memory the host
        // has to back first: 0.75 s more system time loading 10 M blocks).
        // SAFETY: the range is the mapping just made; the advice changes
        // how its pages are faulted in, not what they hold.
        #[allow(unsafe_code, clippy::disallowed_methods)]
        let _ = unsafe { libc::madvise(p.start as *mut libc::c_void, p.len(), libc::MADV_RANDOM) };
        self.at = off + p.len() as u64;
        self.mapped.push(p);
    }

    /// Marks each of `heap`'s tables whose whole pages lie in a range
    /// mapped from the file, as the load left them.
    pub(crate) fn mark(&self, heap: &Heap) {
        let built = |b: Option<Range<usize>>| {
            b.map(pages).is_some_and(|p| !p.is_empty() && self.mapped.iter().any(|m| m.start == p.start && p.end <= m.end))
        };
        if built(heap.blocks.packed.owned_bytes()) {
            heap.blocks.packed.built_in_file();
        }
        if built(heap.edge_start.owned_bytes()) {
            heap.edge_start.built_in_file();
        }
        if built(heap.edge_target.owned_bytes()) {
            heap.edge_target.built_in_file();
        }
        if built(heap.edge_offset.deltas.owned_bytes()) {
            heap.edge_offset.deltas.built_in_file();
        }
    }
}

impl Heap {
    /// Moves the pages of the heap's large tables (blocks, edges, their
    /// offsets, the block of each record) to an unnamed file in `dir`,
    /// mapped at the same addresses: the same bytes read on from
    /// file-backed pages, their anonymous memory given back. `Ok(false)`:
    /// nothing moved (`dir` keeps its files in memory, or the tables are
    /// read from a mapping already); on an error the tables not moved yet
    /// stay as they were. The answers are the same: the same bytes are
    /// read, at the same addresses.
    pub fn spill(&self, dir: &Path) -> io::Result<bool> {
        if in_memory(dir)? {
            return Ok(false);
        }
        let f = tempfile::tempfile_in(dir)?;
        let mut at = 0;
        let mut moved = self.blocks.packed.move_to_file(&f, &mut at)?;
        moved |= self.edge_start.move_to_file(&f, &mut at)?;
        moved |= self.edge_target.move_to_file(&f, &mut at)?;
        moved |= self.edge_offset.deltas.move_to_file(&f, &mut at)?;
        moved |= self.edge_offset.anchors.move_to_file(&f, &mut at)?;
        if let Some(b) = &self.block_of {
            moved |= b.move_to_file(&f, &mut at)?;
        }
        Ok(moved)
    }
}

/// Before the dominators of a heap are computed: its tables moved to a
/// file (see [`Heap::spill`]) when it is large, in the caches' directory
/// `cache_dir`, else the temporary one, or `/var/tmp` when that one is in
/// memory (as `/tmp` is on many systems); kept where they are when none
/// will take them.
pub(crate) fn before_dominators(heap: &Heap, cache_dir: Option<&Path>) {
    if heap.len() < FROM_BLOCKS {
        return;
    }
    for d in dirs(cache_dir) {
        if heap.spill(&d).unwrap_or(false) {
            return;
        }
    }
}

/// Where the tables may go, in order (see [`before_dominators`]).
fn dirs(cache_dir: Option<&Path>) -> Vec<std::path::PathBuf> {
    match cache_dir {
        Some(d) => vec![d.to_path_buf()],
        None => vec![std::env::temp_dir(), "/var/tmp".into()],
    }
}

/// Once the dominators of one of several dumps are computed (`growth`
/// asks every dump of a series, and computes the next one's while it
/// holds this one's): the leak classes let go (`growth` reads none of an
/// older dump's), and the tree's large tables (each block's immediate
/// dominator, retained size, dominated count, the children lists) moved
/// to a file as the heap's are (see [`Heap::spill`]), so that the dumps
/// before the last hold their answers in page cache, not anonymous
/// memory, while the next is computed. The same bytes are read at the
/// same addresses.
pub(crate) fn after_dominators(a: &mut crate::Analysis<'_>) {
    if a.heap().len() < FROM_BLOCKS {
        return;
    }
    a.forget_leaks();
    let d = a.dominators();
    let c = d.children();
    let cache_dir = a.cache_file().and_then(|c| c.path().parent());
    for dir in dirs(cache_dir) {
        let moved = (|| -> io::Result<bool> {
            if in_memory(&dir)? {
                return Ok(false);
            }
            let f = tempfile::tempfile_in(&dir)?;
            let mut at = 0;
            let mut moved = d.retained.move_to_file(&f, &mut at)?;
            moved |= d.dominated.move_to_file(&f, &mut at)?;
            moved |= d.idom_table().move_to_file(&f, &mut at)?;
            moved |= c.start.move_to_file(&f, &mut at)?;
            moved |= c.list.move_to_file(&f, &mut at)?;
            Ok(moved)
        })();
        if moved.unwrap_or(false) {
            return;
        }
    }
}

/// The C library's allocator told to give freed tables of 1 MiB and more
/// back to the kernel for the rest of the process: each is mapped on its
/// own, and unmapped when freed. (By default glibc raises that threshold
/// to the size of the largest such table freed so far, up to 32 MiB, and
/// serves the next ones from its heap, which keeps their pages when they
/// are freed: `growth`, which computes one dump's dominators after
/// another, held some 25 MB of such pages at 10 M blocks beside the last
/// dump's computation.)
pub(crate) fn freed_tables_back() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt sets a tunable of the allocator; no memory is
    // touched. (The analysis is not the traced process.)
    #[allow(unsafe_code, clippy::disallowed_methods)]
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}
