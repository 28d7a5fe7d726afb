//! Lists of fixed-size values inside records (a module's segments, a
//! thread's registers), one type for the writer, given them as a slice,
//! and for the zero-copy reader, which decodes them from the dump's bytes.

use crate::reader::{le32, le64};
use crate::types::Segment;
use core::marker::PhantomData;

/// A list of fixed-size values in a record (a module's segments, a
/// thread's registers): a slice of them, as a writer is given them, or
/// their bytes in the dump, as the reader finds them ([`Packed`], no
/// copy). Either way nothing is allocated.
pub trait Items<T>: Copy {
    /// How many.
    fn count(&self) -> usize;
    /// The `i`th, or `None` past the end.
    fn at(&self, i: usize) -> Option<T>;
    /// Each in order.
    fn values(&self) -> ItemsIter<Self, T> {
        ItemsIter { items: *self, next: 0, end: self.count(), _item: PhantomData }
    }
}

impl<T: Copy> Items<T> for &[T] {
    fn count(&self) -> usize {
        self.len()
    }
    fn at(&self, i: usize) -> Option<T> {
        self.get(i).copied()
    }
}

/// A value stored in a fixed number of little-endian bytes.
pub trait Fixed: Sized {
    /// Bytes each takes in the dump.
    const SIZE: usize;
    /// Decodes one from exactly [`Fixed::SIZE`] bytes.
    fn decode(b: &[u8]) -> Self;
}

impl Fixed for u64 {
    const SIZE: usize = 8;
    fn decode(b: &[u8]) -> u64 {
        le64(b, 0)
    }
}

impl Fixed for Segment {
    const SIZE: usize = crate::raw::SEGMENT_SIZE;
    fn decode(s: &[u8]) -> Segment {
        Segment { vaddr: le64(s, 0), memsz: le64(s, 8), file_offset: le64(s, 16), flags: le32(s, 24) }
    }
}

/// Values as a dump stores them, [`Fixed::SIZE`] bytes each, decoded as
/// they are read.
#[derive(Debug)]
pub struct Packed<'a, T> {
    bytes: &'a [u8],
    _item: PhantomData<fn() -> T>,
}

impl<T> Clone for Packed<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Packed<'_, T> {}

impl<'a, T: Fixed> Packed<'a, T> {
    /// Over `bytes`, whose length the reader checked is a multiple of
    /// [`Fixed::SIZE`] (a trailing part is ignored).
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Packed { bytes, _item: PhantomData }
    }
}

impl<T: Fixed> Items<T> for Packed<'_, T> {
    fn count(&self) -> usize {
        self.bytes.len() / T::SIZE
    }
    fn at(&self, i: usize) -> Option<T> {
        let start = i.checked_mul(T::SIZE)?;
        self.bytes.get(start..start.checked_add(T::SIZE)?).map(T::decode)
    }
}

/// The values of an [`Items`] list, in order.
#[derive(Clone, Debug)]
pub struct ItemsIter<L, T> {
    items: L,
    next: usize,
    end: usize,
    _item: PhantomData<fn() -> T>,
}

impl<L: Items<T>, T> Iterator for ItemsIter<L, T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        if self.next >= self.end {
            return None;
        }
        let v = self.items.at(self.next);
        self.next += 1;
        v
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.end - self.next;
        (n, Some(n))
    }
}

impl<L: Items<T>, T> ExactSizeIterator for ItemsIter<L, T> {}
