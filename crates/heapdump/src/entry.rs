//! A live allocation as the tracker records it: what the table stores, the
//! guard defers and the dump writes.
#![forbid(unsafe_code)]

/// One live allocation as the table stores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Address.
    pub addr: u64,
    /// Requested size.
    pub size: u64,
    /// log2 of the alignment.
    pub align_log2: u8,
    /// Site id (0 = none).
    pub site: u32,
    /// Whether the site came from sampling.
    pub sampled: bool,
}

impl Entry {
    /// The entry of a block at `p` of `size` bytes aligned to `align` (a power of two).
    #[inline]
    pub fn new(p: *mut u8, size: usize, align: usize, site: u32, sampled: bool) -> Entry {
        Entry { addr: p as u64, size: size as u64, align_log2: align.trailing_zeros() as u8, site, sampled }
    }
}
