//! The ALLOCS record (format 1.2): the allocations of a compact dump in
//! address order, many to a record, with variable-length integers.
//!
//! A compact ALLOC record costs 52 bytes per allocation and 16 per pointer;
//! on a heap of small linked blocks the dump was larger than the heap. Here
//! an allocation costs a few bytes (its address as the gap from the end of
//! the previous one, its size, its site as a difference from the previous
//! site, its first word only when it is not already one of its pointers),
//! and a pointer three small numbers: the gap since the previous pointer's
//! word, the target allocation's *ordinal* (its number in the file, as a
//! difference from this one's) and the offset into it. A reader resolves a
//! pointer without looking its address up. `FORMAT.md` is normative.
//!
//! Written by hand (LEB128, zigzag): the encoder runs inside the traced
//! process with the world stopped, allocation-free.

use crate::error::Error;

/// Largest encoding of one varint.
pub(crate) const VARINT_MAX: usize = 10;

/// Writes `v` as an unsigned LEB128 into `out` (at least [`VARINT_MAX`]
/// bytes); returns the bytes used.
#[inline]
pub(crate) fn put_varint(out: &mut [u8], mut v: u64) -> usize {
    let mut n = 0;
    while v >= 0x80 {
        if let Some(b) = out.get_mut(n) {
            *b = (v as u8) | 0x80;
        }
        v >>= 7;
        n += 1;
    }
    if let Some(b) = out.get_mut(n) {
        *b = v as u8;
    }
    n + 1
}

/// Bytes [`put_varint`] takes for `v`.
#[inline]
pub(crate) fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// A signed difference as an unsigned number, small when near zero.
#[inline]
pub(crate) fn zigzag(d: i64) -> u64 {
    ((d << 1) ^ (d >> 63)) as u64
}

#[inline]
fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// First-word forms, bits 0-1 of an entry's `kind`.
pub(crate) mod form {
    /// The first word is zero.
    pub const ZERO: u64 = 0;
    /// The first word is the allocation's first pointer (at offset 0).
    pub const FIRST_LINK: u64 = 1;
    /// A varint follows.
    pub const VARINT: u64 = 2;
    /// Eight little-endian bytes follow.
    pub const RAW: u64 = 3;
}

/// One pointer of an allocation in an ALLOCS record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    /// Offset of the pointer word in its allocation.
    pub offset: u64,
    /// Ordinal of the allocation it points into: its number among the
    /// file's allocations (ALLOC records and ALLOCS entries) in file order.
    pub target: u64,
    /// Offset into the target it points at (0: its start).
    pub delta: u64,
}

impl Link {
    /// Bytes this pointer takes in the entry of allocation `ordinal`,
    /// after a pointer whose word ends at `next_offset` (0 for the first):
    /// what [`crate::Writer::dense_alloc_sized`] is told the links sum to.
    pub fn encoded_len(&self, next_offset: u64, ordinal: u64) -> u64 {
        link_len(next_offset, ordinal, self) as u64
    }
}

/// An allocation's first word in an ALLOCS record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FirstWord {
    /// The word itself.
    Value(u64),
    /// The allocation's first [`Link`] (at offset 0): the target's address
    /// plus its delta.
    FirstLink,
}

/// An ALLOCS record (compact mode, since 1.2).
#[derive(Clone, Copy, Debug)]
pub struct Allocs<'a> {
    /// Ordinal of its first allocation.
    pub first: u64,
    /// Number of allocations.
    pub count: u32,
    /// Sum of their pointer counts.
    pub pointers: u64,
    /// Sum of their sizes (wrapping).
    pub bytes: u64,
    entries: &'a [u8],
    record: u64,
}

/// One allocation of an ALLOCS record.
#[derive(Clone, Copy, Debug)]
pub struct DenseAlloc<'a> {
    /// Its ordinal.
    pub ordinal: u64,
    /// Address.
    pub address: u64,
    /// Requested size.
    pub size: u64,
    /// SITE id or `raw::NO_SITE`.
    pub site: u32,
    /// log2 of the alignment.
    pub align_log2: u8,
    /// `ALLOC_*` flags.
    pub flags: u8,
    /// The first word.
    pub first_word: FirstWord,
    /// Its pointers, in increasing offset order.
    pub links: Links<'a>,
}

/// The pointers of one [`DenseAlloc`], checked when its entry was read.
#[derive(Clone, Copy, Debug)]
pub struct Links<'a> {
    bytes: &'a [u8],
    left: u64,
    ordinal: u64,
    next_offset: u64,
}

impl Links<'_> {
    /// Pointers left.
    pub fn len(&self) -> usize {
        self.left as usize
    }
    /// Whether none are left.
    pub fn is_empty(&self) -> bool {
        self.left == 0
    }
}

impl Iterator for Links<'_> {
    type Item = Link;
    #[inline]
    fn next(&mut self) -> Option<Link> {
        if self.left == 0 {
            return None;
        }
        let mut c = Dec { data: self.bytes, pos: 0, record: 0 };
        let skip = c.varint().ok()?;
        let target = c.varint().ok()?;
        let delta = c.varint().ok()?;
        self.bytes = self.bytes.get(c.pos..).unwrap_or(&[]);
        self.left -= 1;
        let offset = self.next_offset.wrapping_add(skip);
        self.next_offset = offset.wrapping_add(8);
        Some(Link { offset, target: self.ordinal.wrapping_add(unzigzag(target) as u64), delta })
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.len(), Some(self.len()))
    }
}

impl ExactSizeIterator for Links<'_> {}

/// A varint cursor.
struct Dec<'a> {
    data: &'a [u8],
    pos: usize,
    record: u64,
}

impl Dec<'_> {
    /// One varint; most are a single byte, read inline.
    #[inline(always)]
    fn varint(&mut self) -> Result<u64, Error> {
        match self.data.get(self.pos) {
            Some(&b) if b < 0x80 => {
                self.pos += 1;
                Ok(u64::from(b))
            }
            _ => self.varint_long(),
        }
    }

    #[inline(never)]
    fn varint_long(&mut self) -> Result<u64, Error> {
        // Eight bytes at once when there are eight: the first byte without
        // its high bit ends the number; its 7-bit groups are gathered with
        // shifts, no loop.
        if let Some(b) = self.data.get(self.pos..self.pos + 8) {
            let mut w = [0u8; 8];
            w.copy_from_slice(b);
            let x = u64::from_le_bytes(w);
            let stop = !x & 0x8080_8080_8080_8080;
            if stop != 0 {
                let len = stop.trailing_zeros() / 8 + 1;
                let x = if len == 8 { x } else { x & ((1u64 << (8 * len)) - 1) };
                let mut v = 0u64;
                let mut k = 0;
                while k < 8 {
                    v |= (x >> k) & (0x7f << (7 * k));
                    k += 1;
                }
                self.pos += len as usize;
                return Ok(v);
            }
        }
        let mut v = 0u64;
        for i in 0..VARINT_MAX {
            let Some(&b) = self.data.get(self.pos + i) else {
                return Err(Error::Malformed { offset: self.record, what: "ALLOCS entry runs past the record" });
            };
            if i == VARINT_MAX - 1 && b > 1 {
                break;
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                self.pos += i + 1;
                return Ok(v);
            }
        }
        Err(Error::Malformed { offset: self.record, what: "ALLOCS varint longer than 64 bits" })
    }
    fn u64(&mut self) -> Result<u64, Error> {
        let b = self
            .data
            .get(self.pos..self.pos + 8)
            .ok_or(Error::Malformed { offset: self.record, what: "ALLOCS entry runs past the record" })?;
        self.pos += 8;
        let mut w = [0u8; 8];
        w.copy_from_slice(b);
        Ok(u64::from_le_bytes(w))
    }
}

/// Fixed part of an ALLOCS payload.
pub(crate) const ALLOCS_FIXED: usize = 32;
/// Smallest entry: kind, gap, size, site and pointer count, a byte each.
pub(crate) const ENTRY_MIN: u64 = 5;
/// Smallest pointer: three one-byte varints.
pub(crate) const LINK_MIN: u64 = 3;

/// Parses an ALLOCS payload's fixed part (`first` is checked by the caller
/// against the allocations before it).
pub(crate) fn allocs(payload: &[u8], record: u64) -> Result<Allocs<'_>, Error> {
    let bad = |what| Error::Malformed { offset: record, what };
    if payload.len() < ALLOCS_FIXED {
        return Err(bad("ALLOCS record shorter than its fixed part"));
    }
    let le = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&payload[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let first = le(0);
    let count = le(8) as u32;
    if le(8) >> 32 != 0 {
        return Err(bad("reserved ALLOCS field is not zero"));
    }
    let pointers = le(16);
    let bytes = le(24);
    let entries = &payload[ALLOCS_FIXED..];
    let room = entries.len() as u64;
    // Counts bounded by what the bytes can hold: a reader may size tables
    // by them.
    if u64::from(count).saturating_mul(ENTRY_MIN).saturating_add(pointers.saturating_mul(LINK_MIN)) > room {
        return Err(bad("ALLOCS counts larger than the record can hold"));
    }
    if count == 0 && !entries.is_empty() {
        return Err(bad("ALLOCS record with bytes but no allocation"));
    }
    Ok(Allocs { first, count, pointers, bytes, entries, record })
}

impl<'a> Allocs<'a> {
    /// The allocations, each checked as it is read: an entry that runs past
    /// the record, an address that does not increase, a pointer outside
    /// its allocation or totals that disagree with the record's end the
    /// walk with an error.
    pub fn entries(&self) -> Entries<'a> {
        Entries {
            c: Dec { data: self.entries, pos: 0, record: self.record },
            left: self.count,
            ordinal: self.first,
            prev_end: 0,
            prev_address: None,
            prev_site: 0,
            pointers: 0,
            bytes: 0,
            want_pointers: self.pointers,
            want_bytes: self.bytes,
            failed: false,
        }
    }
}

/// The allocations of an ALLOCS record; see [`Allocs::entries`].
pub struct Entries<'a> {
    c: Dec<'a>,
    left: u32,
    ordinal: u64,
    prev_end: u64,
    prev_address: Option<u64>,
    prev_site: u32,
    pointers: u64,
    bytes: u64,
    want_pointers: u64,
    want_bytes: u64,
    failed: bool,
}

impl<'a> Entries<'a> {
    fn entry(&mut self) -> Result<DenseAlloc<'a>, Error> {
        let record = self.c.record;
        let bad = |what| Error::Malformed { offset: record, what };
        let kind = self.c.varint()?;
        if kind >> 16 != 0 {
            return Err(bad("reserved ALLOCS kind bits are set"));
        }
        let gap = self.c.varint()?;
        let size = self.c.varint()?;
        let site_d = self.c.varint()?;
        let address = self.prev_end.checked_add_signed(unzigzag(gap)).ok_or(bad("ALLOCS address outside the address space"))?;
        if self.prev_address.is_some_and(|p| address <= p) {
            return Err(bad("ALLOCS addresses do not increase"));
        }
        let end = address.checked_add(size).ok_or(bad("allocation wraps the address space"))?;
        let site = i64::from(self.prev_site).wrapping_add(unzigzag(site_d));
        let site = u32::try_from(site).map_err(|_| bad("ALLOCS site id out of range"))?;
        let first_word = match kind & 3 {
            form::ZERO => FirstWord::Value(0),
            form::FIRST_LINK => FirstWord::FirstLink,
            form::VARINT => FirstWord::Value(self.c.varint()?),
            _ => FirstWord::Value(self.c.u64()?),
        };
        let n = self.c.varint()?;
        if n > size / 8 {
            return Err(bad("more ALLOCS pointers than words"));
        }
        let start = self.c.pos;
        let mut next_offset = 0u64;
        for i in 0..n {
            let skip = self.c.varint()?;
            let offset = next_offset.checked_add(skip).ok_or(bad("ALLOCS pointer offset overflows"))?;
            if offset.checked_add(8).is_none_or(|e| e > size) {
                return Err(bad("ALLOCS pointer offset outside the allocation"));
            }
            if i == 0 && kind & 3 == form::FIRST_LINK && offset != 0 {
                return Err(bad("ALLOCS first word names a pointer that is not at offset 0"));
            }
            self.c.varint()?;
            self.c.varint()?;
            next_offset = offset + 8;
        }
        if n == 0 && kind & 3 == form::FIRST_LINK {
            return Err(bad("ALLOCS first word names a pointer that is not there"));
        }
        let links = Links { bytes: self.c.data.get(start..self.c.pos).unwrap_or(&[]), left: n, ordinal: self.ordinal, next_offset: 0 };
        let out = DenseAlloc {
            ordinal: self.ordinal,
            address,
            size,
            site,
            align_log2: ((kind >> 2) & 0x3f) as u8,
            flags: (kind >> 8) as u8,
            first_word,
            links,
        };
        self.ordinal += 1;
        self.prev_end = end;
        self.prev_address = Some(address);
        self.prev_site = site;
        self.pointers += n;
        self.bytes = self.bytes.wrapping_add(size);
        Ok(out)
    }
}

impl<'a> Iterator for Entries<'a> {
    type Item = Result<DenseAlloc<'a>, Error>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if self.left == 0 {
            let record = self.c.record;
            let what = if self.c.pos != self.c.data.len() {
                "extra bytes after the ALLOCS entries"
            } else if self.pointers != self.want_pointers {
                "ALLOCS pointer count disagrees with its entries"
            } else if self.bytes != self.want_bytes {
                "ALLOCS byte count disagrees with its entries"
            } else {
                return None;
            };
            self.failed = true;
            return Some(Err(Error::Malformed { offset: record, what }));
        }
        self.left -= 1;
        let r = self.entry();
        if r.is_err() {
            self.failed = true;
        }
        Some(r)
    }
}

/// Encodes one entry's fixed part into `out` (at least [`ENTRY_HEAD_MAX`]
/// bytes); returns the bytes used. `prev_end` and `prev_site` are the
/// record's running state.
#[allow(clippy::too_many_arguments)]
pub(crate) fn put_head(
    out: &mut [u8],
    prev_end: u64,
    prev_site: u32,
    address: u64,
    size: u64,
    site: u32,
    align_log2: u8,
    flags: u8,
    first: (u64, u64),
    npointers: u64,
) -> usize {
    let kind = first.0 | u64::from(align_log2 & 0x3f) << 2 | u64::from(flags) << 8;
    let mut n = put_varint(out, kind);
    n += put_varint(&mut out[n..], zigzag(address.wrapping_sub(prev_end) as i64));
    n += put_varint(&mut out[n..], size);
    n += put_varint(&mut out[n..], zigzag(i64::from(site) - i64::from(prev_site)));
    match first.0 {
        form::VARINT => n += put_varint(&mut out[n..], first.1),
        form::RAW => {
            out[n..n + 8].copy_from_slice(&first.1.to_le_bytes());
            n += 8;
        }
        _ => {}
    }
    n + put_varint(&mut out[n..], npointers)
}

/// Largest encoding of an entry's fixed part: kind (3), gap (10), size
/// (10), site (5), first word (9 at most, as a varint below 2^56 or raw),
/// pointer count (10).
pub(crate) const ENTRY_HEAD_MAX: usize = 48;
/// Largest encoding of one pointer.
pub(crate) const LINK_MAX: usize = 3 * VARINT_MAX;

/// Encodes one pointer; `next_offset` is the end of the previous one's word.
#[inline]
pub(crate) fn put_link(out: &mut [u8], next_offset: u64, ordinal: u64, l: &Link) -> usize {
    let mut n = put_varint(out, l.offset.wrapping_sub(next_offset));
    n += put_varint(&mut out[n..], zigzag(l.target.wrapping_sub(ordinal) as i64));
    n + put_varint(&mut out[n..], l.delta)
}

/// The bytes [`put_link`] takes.
#[inline]
pub(crate) fn link_len(next_offset: u64, ordinal: u64, l: &Link) -> usize {
    varint_len(l.offset.wrapping_sub(next_offset)) + varint_len(zigzag(l.target.wrapping_sub(ordinal) as i64)) + varint_len(l.delta)
}

/// The first-word form and value for an allocation whose first word is
/// `w`; `first_link` says whether its first pointer is at offset 0.
pub(crate) fn first_form(w: u64, first_link: bool) -> (u64, u64) {
    if first_link {
        (form::FIRST_LINK, 0)
    } else if w == 0 {
        (form::ZERO, 0)
    } else if w < 1 << 56 {
        (form::VARINT, w)
    } else {
        (form::RAW, w)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    #[test]
    fn varints_round_trip_at_every_length() {
        for v in [0u64, 1, 127, 128, 16383, 16384, 1 << 35, 1 << 56, (1 << 63) - 1, 1 << 63, u64::MAX] {
            let mut b = [0u8; VARINT_MAX];
            let n = put_varint(&mut b, v);
            assert_eq!(n, varint_len(v), "{v}");
            let mut d = Dec { data: &b[..n], pos: 0, record: 0 };
            assert_eq!(d.varint().unwrap(), v);
            assert_eq!(d.pos, n);
            // With bytes after it, as inside a record (the eight-byte path).
            let mut padded = b[..n].to_vec();
            padded.extend_from_slice(&[0xff; 12]);
            let mut d = Dec { data: &padded, pos: 0, record: 0 };
            assert_eq!(d.varint().unwrap(), v, "{v} followed by more bytes");
            assert_eq!(d.pos, n);
        }
        for d in [0i64, -1, 1, i64::MIN, i64::MAX] {
            assert_eq!(unzigzag(zigzag(d)), d);
        }
    }

    #[test]
    fn an_overlong_varint_is_refused() {
        let b = [0xffu8; 11];
        assert!(Dec { data: &b, pos: 0, record: 0 }.varint().is_err());
        let mut b = [0x80u8; 10];
        b[9] = 2; // bit 64
        assert!(Dec { data: &b, pos: 0, record: 0 }.varint().is_err());
    }
}
