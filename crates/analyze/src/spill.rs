//! The loaded heap's large tables moved to a file (issue 43's memory
//! goal): a question about a large heap holds, at its peak (the end of
//! the dominators' walk), the heap's blocks and edges (about 30 bytes a
//! block) beside the walk's own tables. Written once after the load to an
//! unnamed file on disk and read back from its mapping, the tables are
//! page cache the kernel can write back and drop, not anonymous memory:
//! the answers read the same bytes.
//!
//! The file has no name from the start (`O_TMPFILE`, or created and
//! unlinked at once where the file system lacks it): nothing is left
//! behind when the process ends, however it ends. It goes in the caches'
//! directory, or the temporary one (`$TMPDIR`) for a question without
//! caches; never on a file system held in memory (tmpfs, ramfs: its pages
//! would be shared memory, no less resident than the tables).

use crate::heap::Heap;
use crate::slab::Slab;
use bytemuck::Pod;
use std::io;
use std::path::Path;
use std::sync::Arc;

/// Heaps of this many blocks and more are moved (their tables some 30
/// MB): below, the copy is not worth its time.
pub(crate) const FROM_BLOCKS: usize = 1 << 20;

/// Where the file goes, when anywhere: `dir` (the caches' directory), else
/// the temporary directory.
pub(crate) fn dir_for(cache_dir: Option<&Path>) -> std::path::PathBuf {
    cache_dir.map_or_else(std::env::temp_dir, Path::to_path_buf)
}

/// Whether `dir` is on a file system that keeps its files in memory.
fn in_memory(dir: &Path) -> io::Result<bool> {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    let t = rustix::fs::statfs(dir)?.f_type as i64;
    Ok(t == TMPFS_MAGIC || t == RAMFS_MAGIC)
}

/// Bytes written at a time, their memory given back once written (so
/// that the file's pages reuse the table's: on a VM, pages the process has
/// not touched before cost a fault each in the host too).
const CHUNK: usize = 8 << 20;

/// The pages given back are 4 KiB ones (where they are larger, the
/// madvise call is refused and the memory goes with the table instead).
const PAGE: usize = 4096;

/// Bytes a write call takes: a page. The file system gives a larger write
/// larger folios, and on a VM those are pages the host has not backed yet
/// (a fault each there: 300 MB written in 16 MiB calls took 3 s, in pages
/// 0.3 s).
const WRITE: usize = PAGE;

/// Gives back the memory of the whole pages inside `b` (its bytes are
/// zero from now on).
fn give_back(b: &mut [u8]) {
    let start = (b.as_ptr() as usize).next_multiple_of(PAGE);
    let end = (b.as_ptr() as usize + b.len()) / PAGE * PAGE;
    if end > start {
        // SAFETY: `start..end` is whole pages inside `b`, which this call
        // borrows mutably: no other reference sees them turn to zeros,
        // and the allocation they belong to stays as it was (its bytes
        // only).
        #[allow(unsafe_code)]
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
        }
    }
}

/// What became of a table (see [`move_out`]).
enum Moved {
    /// Read from the file now.
    Yes,
    /// As it was (not written, or not mapped).
    Kept,
    /// Given back but not read back: the heap is not whole.
    Lost(io::Error),
}

/// Writes `s` to `f` at `*at` (rounded up to a page) a chunk at a time,
/// each chunk's memory given back once written, then reads it from the
/// file's mapping (unless it is read from a mapping already). On an error
/// the bytes given back are read back from the file.
fn move_out<T: Pod>(f: &std::fs::File, at: &mut u64, s: &mut Slab<T>) -> Moved {
    use std::os::unix::fs::FileExt;
    if s.is_mapped() || s.is_empty() {
        return Moved::Yes;
    }
    let off = at.next_multiple_of(1 << 16);
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(s.to_mut().as_mut_slice());
    let len = bytes.len();
    let mut done = 0;
    let wrote = loop {
        if done == len {
            break Ok(());
        }
        // (A page of the table across two chunks stays until the table
        // goes: one in 2,048.)
        let end = (done + CHUNK).min(len);
        if let Err(e) = bytes[done..end].chunks(WRITE).enumerate().try_for_each(|(i, w)| f.write_all_at(w, off + (done + i * WRITE) as u64))
        {
            break Err(e);
        }
        give_back(&mut bytes[done..end]);
        done = end;
    };
    // SAFETY: a read-only mapping of the bytes just written to a file no
    // other process can open by name (it has none), which this one writes
    // no more: they do not change under the mapping.
    #[allow(unsafe_code)]
    let map = wrote.and_then(|()| unsafe { memmap2::MmapOptions::new().offset(off).len(len).map(f) });
    match map.map(|m| Slab::mapped(&Arc::new(m), 0..len)) {
        Ok(Some(m)) => {
            *s = m;
            *at = off + len as u64;
            Moved::Yes
        }
        _ => match f.read_exact_at(&mut bytes[..done], off) {
            Ok(()) => Moved::Kept,
            Err(lost) => Moved::Lost(lost),
        },
    }
}

impl Heap {
    /// Moves the heap's large tables (blocks, edges, their offsets, the
    /// block of each record) to an unnamed file in `dir` and reads them
    /// from its mapping from now on, their memory given back as they are
    /// written. `Ok(false)`: kept in memory, as they were (`dir` keeps its
    /// files in memory, or could not take them); an error: a table was
    /// given back and could not be read back (the heap must not be used).
    /// The answers are the same: the same bytes are read.
    pub fn spill(&mut self, dir: &Path) -> crate::Result<bool> {
        if !in_memory(dir).is_ok_and(|m| !m) {
            return Ok(false);
        }
        let Ok(f) = tempfile::tempfile_in(dir) else { return Ok(false) };
        let mut at = 0;
        // Until one is not moved (the rest would not be either).
        let moved = |m: Moved| match m {
            Moved::Yes => Ok(true),
            Moved::Kept => Ok(false),
            Moved::Lost(source) => Err(crate::AnalyzeError::Io { path: dir.to_path_buf(), source }),
        };
        let ok = moved(move_out(&f, &mut at, &mut self.blocks.packed))?
            && moved(move_out(&f, &mut at, &mut self.edge_start))?
            && moved(move_out(&f, &mut at, &mut self.edge_target))?
            && moved(move_out(&f, &mut at, &mut self.edge_offset.deltas))?
            && moved(move_out(&f, &mut at, &mut self.edge_offset.anchors))?;
        match &mut self.block_of {
            Some(b) if ok => moved(move_out(&f, &mut at, b)),
            _ => Ok(ok),
        }
    }
}
