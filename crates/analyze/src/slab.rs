//! An array the analysis either built or reads in place from a mapped
//! cache file: a repeat question on a dump of ten million blocks then
//! starts from the mapping, not from half a gigabyte copied into fresh
//! memory (the kernel's page clearing alone cost a repeat `leaks` half
//! its time).

use bytemuck::Pod;
use std::ops::{Deref, Range};
use std::sync::Arc;

/// A slice of `T`: owned, or a range of a mapped file kept alive with it.
pub struct Slab<T> {
    inner: Inner<T>,
}

enum Inner<T> {
    Owned(Owned<T>),
    Mapped { map: Arc<memmap2::Mmap>, bytes: Range<usize> },
}

/// An owned slice, whose pages may have been moved to a file in place
/// (see [`Slab::move_to_file`]): given back as anonymous memory before the
/// allocator has them again.
struct Owned<T> {
    v: Vec<T>,
    in_file: std::sync::atomic::AtomicBool,
}

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        if *self.in_file.get_mut() {
            let bytes = self.v.as_ptr() as usize..self.v.as_ptr() as usize + std::mem::size_of_val(self.v.as_slice());
            let _ = crate::spill::anonymous_again(bytes);
        }
    }
}

impl<T: Pod> Slab<T> {
    /// `bytes` of `map` as `T`s (little endian, as the caches write them),
    /// read in place when they are aligned for `T` on a little-endian
    /// machine, else copied; `None` when their length is not a whole
    /// number of `T`s or the range is outside the map.
    pub fn mapped(map: &Arc<memmap2::Mmap>, bytes: Range<usize>) -> Option<Slab<T>> {
        let b = map.get(bytes.clone())?;
        if cfg!(target_endian = "little") && bytemuck::try_cast_slice::<u8, T>(b).is_ok() {
            return Some(Slab { inner: Inner::Mapped { map: Arc::clone(map), bytes } });
        }
        let size = std::mem::size_of::<T>();
        if size == 0 || b.len() % size != 0 {
            return None;
        }
        // Unaligned (or big endian): copied, each item's bytes in the
        // machine's order.
        let v: Vec<T> = b
            .chunks_exact(size)
            .map(|c| {
                let mut item = T::zeroed();
                let out = bytemuck::bytes_of_mut(&mut item);
                out.copy_from_slice(c);
                if cfg!(target_endian = "big") {
                    swap_words(out);
                }
                item
            })
            .collect();
        Some(Slab::from(v))
    }

    /// The items to change, copied out of the mapping first when they are
    /// read in place (as `Cow::to_mut`).
    pub fn to_mut(&mut self) -> &mut Vec<T> {
        let in_file = match &self.inner {
            Inner::Owned(o) => o.in_file.load(std::sync::atomic::Ordering::Acquire),
            Inner::Mapped { .. } => true,
        };
        if in_file {
            self.inner = Slab::from(self.to_vec()).inner;
        }
        match &mut self.inner {
            Inner::Owned(o) => &mut o.v,
            Inner::Mapped { .. } => unreachable!("made owned above"),
        }
    }

    /// Whether it is read from a file: a mapped cache's, or moved or built
    /// in one.
    pub(crate) fn in_a_file(&self) -> bool {
        match &self.inner {
            Inner::Owned(o) => o.in_file.load(std::sync::atomic::Ordering::Acquire),
            Inner::Mapped { .. } => true,
        }
    }

    /// Whether it is read in place from a mapping.
    pub fn is_mapped(&self) -> bool {
        matches!(self.inner, Inner::Mapped { .. })
    }

    /// The bytes of an owned slice not yet marked as read from a file
    /// (see [`Slab::built_in_file`]).
    pub(crate) fn owned_bytes(&self) -> Option<Range<usize>> {
        match &self.inner {
            Inner::Owned(o) if !o.in_file.load(std::sync::atomic::Ordering::Acquire) => {
                let start = o.v.as_ptr() as usize;
                Some(start..start + std::mem::size_of_val(o.v.as_slice()))
            }
            _ => None,
        }
    }

    /// Marks an owned slice whose whole pages were mapped from a file
    /// before it was written (`spill::TableFile`): read and given back as
    /// a moved one is.
    pub(crate) fn built_in_file(&self) {
        if let Inner::Owned(o) = &self.inner {
            o.in_file.store(true, std::sync::atomic::Ordering::Release);
        }
    }

    /// Moves the pages of an owned slice to `f` at `*at` (on): its whole
    /// pages are written there and mapped from there at the same
    /// addresses, so that every reference to it reads on, the same bytes,
    /// from file-backed pages (see `spill.rs`). `Ok(false)`: nothing to
    /// move (mapped already, moved already, or under a page).
    pub(crate) fn move_to_file(&self, f: &std::fs::File, at: &mut u64) -> std::io::Result<bool> {
        match &self.inner {
            Inner::Owned(o) if !o.in_file.load(std::sync::atomic::Ordering::Acquire) => {
                let bytes: &[u8] = bytemuck::cast_slice(&o.v);
                crate::spill::move_pages(bytes, f, at, || o.in_file.store(true, std::sync::atomic::Ordering::Release))
            }
            _ => Ok(false),
        }
    }
}

/// The caches' items are little-endian words of 2, 4 or 8 bytes (a
/// `Packed` block is two u64s): each word's bytes reversed (reading them
/// on a big-endian machine, and writing them there).
pub(crate) fn swap_words(item: &mut [u8]) {
    let w = match item.len() {
        2 | 4 | 8 => item.len(),
        _ => 8,
    };
    for c in item.chunks_exact_mut(w) {
        c.reverse();
    }
}

impl<T> From<Vec<T>> for Slab<T> {
    fn from(v: Vec<T>) -> Slab<T> {
        Slab { inner: Inner::Owned(Owned { v, in_file: false.into() }) }
    }
}

impl<T> Default for Slab<T> {
    fn default() -> Slab<T> {
        Slab::from(Vec::new())
    }
}

impl<T: Pod> Deref for Slab<T> {
    type Target = [T];
    #[inline]
    fn deref(&self) -> &[T] {
        match &self.inner {
            Inner::Owned(o) => &o.v,
            // Checked castable when made (`Slab::mapped`), and the map
            // never changes: this cannot fail.
            Inner::Mapped { map, bytes } => bytemuck::cast_slice(&map[bytes.clone()]),
        }
    }
}

impl<'a, T: Pod> IntoIterator for &'a Slab<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> std::slice::Iter<'a, T> {
        self.iter()
    }
}

impl<T: Pod> Clone for Slab<T> {
    fn clone(&self) -> Slab<T> {
        match &self.inner {
            Inner::Owned(o) => Slab::from(o.v.clone()),
            Inner::Mapped { map, bytes } => Slab { inner: Inner::Mapped { map: Arc::clone(map), bytes: bytes.clone() } },
        }
    }
}

impl<T: Pod + std::fmt::Debug> std::fmt::Debug for Slab<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: Pod + PartialEq> PartialEq for Slab<T> {
    fn eq(&self, other: &Slab<T>) -> bool {
        **self == **other
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn map_of(bytes: &[u8]) -> Arc<memmap2::Mmap> {
        let dir = std::env::temp_dir().join(format!("heapdump-slab-{}-{}", std::process::id(), bytes.len()));
        let mut f = std::fs::File::create(&dir).unwrap();
        f.write_all(bytes).unwrap();
        let m = crate::input::map_regular(&dir).unwrap().unwrap();
        std::fs::remove_file(&dir).unwrap();
        Arc::new(m)
    }

    #[test]
    fn aligned_ranges_are_read_in_place_and_the_rest_copied() {
        let words: Vec<u8> = (0u32..9).flat_map(|x| x.to_le_bytes()).collect();
        let m = map_of(&words);
        let s: Slab<u32> = Slab::mapped(&m, 4..36).unwrap();
        assert!(s.is_mapped());
        assert_eq!(&*s, &[1, 2, 3, 4, 5, 6, 7, 8]);
        // Off by one byte: copied, the same values read across words.
        let odd: Slab<u16> = Slab::mapped(&m, 1..5).unwrap();
        assert!(!odd.is_mapped());
        assert_eq!(&*odd, &[0, 0x100]);
        assert!(Slab::<u32>::mapped(&m, 0..6).is_none(), "not a whole number of items");
        assert!(Slab::<u32>::mapped(&m, 32..40).is_none(), "past the end");
        let c = s.clone();
        assert_eq!(c, s);
    }
}
