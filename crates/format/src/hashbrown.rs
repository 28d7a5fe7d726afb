//! The layout of a hashbrown table (Rust's `HashMap` and `HashSet`), which
//! the writer proves on a block's contents and records in its ALLOC flags
//! (`raw::ALLOC_HASHBROWN_*`), so that a compact dump, which keeps no
//! contents, can still tell the analyser that an interior pointer into the
//! block is the table's own pointer to its control bytes.
//!
//! A table of `buckets` (a power of two, at least 4) is one block:
//! `[buckets × T, padded to 16][buckets + 16 control bytes]`, and the map
//! holds a pointer to the first control byte. Each control byte is EMPTY
//! (0xFF), DELETED (0x80) or a 7-bit hash (below 0x80), and the last 16
//! mirror the first ones (see [`ctrl_ok`] for tables smaller than 16).
//! A table never fills: at most [`capacity`] of its control bytes are FULL
//! or DELETED, so at least one in eight is EMPTY. That is what tells a
//! table from a C struct of small bytes or zeros (Tcl's pool of `Tcl_Obj`,
//! zeroed, passed the layout alone).

/// Offset of the control bytes of a table of `2^log2` buckets in a block of
/// `size` bytes, when the layout allows it.
pub fn ctrl_offset(size: u64, log2: u8) -> Option<u64> {
    if !(2..=62).contains(&log2) {
        return None;
    }
    let buckets = 1u64 << log2;
    let offset = size.checked_sub(buckets)?.checked_sub(16)?;
    (offset % 16 == 0 && offset >= buckets).then_some(offset)
}

/// How many buckets of a table of `buckets` may be FULL or DELETED
/// before it grows (hashbrown's `bucket_mask_to_capacity`): all but one
/// up to 8 buckets, 7 in 8 from 16.
pub fn capacity(buckets: usize) -> usize {
    if buckets <= 8 {
        buckets.saturating_sub(1)
    } else {
        buckets / 8 * 7
    }
}

/// Whether `ctrl` (the block's bytes from the control offset to its end)
/// are the control bytes of a table of `buckets` buckets: each EMPTY,
/// DELETED or a hash, the last 16 mirroring the first, and at most
/// [`capacity`] of them not EMPTY.
pub fn ctrl_ok(ctrl: &[u8], buckets: usize) -> bool {
    if ctrl.len() != buckets.wrapping_add(16) {
        return false;
    }
    // The mirrored group first: it rejects most blocks in 16 comparisons.
    let mirror = (buckets..buckets + 16).all(|j| ctrl[j] == mirrored(ctrl, buckets, j));
    mirror && ctrl.iter().all(|&b| b == 0xFF || b <= 0x80) && ctrl[..buckets].iter().filter(|&&b| b != 0xFF).count() <= capacity(buckets)
}

/// What byte `j` (from `buckets` to `buckets + 16`) of a table's control
/// bytes holds: hashbrown writes each control byte `i` twice, at `i` and at
/// `((i - 16) & (buckets - 1)) + 16`, so the last 16 bytes mirror the first
/// 16 of a large table; a table smaller than 16 has EMPTY bytes from
/// `buckets` to 16 and its mirror after them.
fn mirrored(ctrl: &[u8], buckets: usize, j: usize) -> u8 {
    if buckets >= 16 {
        ctrl[j - buckets]
    } else if j < 16 {
        0xFF
    } else {
        ctrl[j - 16]
    }
}

/// The largest bucket count (as log2, 0 for none) for which a block of
/// `size` bytes is laid out as a hashbrown table: `tail(offset)` gives the
/// block's bytes from `offset` to its end.
pub fn proven_log2<'a>(size: u64, tail: impl Fn(u64) -> &'a [u8]) -> u8 {
    // offset >= buckets and offset % 16 == 0 bound the candidates: 2^k at
    // most (size - 16) / 2, and below 16 buckets only when size % 16 is
    // 2^k (4 or 8); from 16 up only when size % 16 == 0. The dump checks
    // every block: most sizes leave nothing to look at.
    if size < 36 {
        return 0;
    }
    let top = (63 - ((size - 16) / 2).leading_zeros()) as u8;
    let mut log2 = if size % 16 == 0 { top.min(62) } else { top.min(3) };
    while log2 >= 2 {
        if let Some(offset) = ctrl_offset(size, log2) {
            if ctrl_ok(tail(offset), 1usize << log2) {
                return log2;
            }
        }
        log2 -= 1;
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(buckets: usize, t: usize, ctrl: impl Fn(usize) -> u8) -> ([u8; 512], usize, u64) {
        let data = (buckets * t).div_ceil(16) * 16;
        let size = data + buckets + 16;
        let mut b = [0x11u8; 512];
        for i in 0..buckets {
            b[data + i] = ctrl(i);
        }
        // As hashbrown's set_ctrl: each byte also at ((i - 16) & mask) + 16.
        for i in buckets..buckets + 16 {
            b[data + i] = 0xFF;
        }
        for i in 0..buckets {
            b[data + ((i.wrapping_sub(16)) & (buckets - 1)) + 16] = b[data + i];
        }
        (b, size, data as u64)
    }

    #[test]
    fn a_table_is_proven_at_its_bucket_count() {
        for (buckets, t) in [(4usize, 24usize), (8, 16), (16, 8), (32, 4), (64, 3)] {
            let (b, size, offset) = table(buckets, t, |i| if i % 3 == 0 { 0xFF } else { (i * 37 % 128) as u8 });
            let log2 = proven_log2(size as u64, |o| &b[o as usize..size]);
            assert_eq!(log2 as u32, buckets.trailing_zeros(), "{buckets} x {t}");
            assert_eq!(ctrl_offset(size as u64, log2), Some(offset));
        }
    }

    #[test]
    fn other_blocks_are_not() {
        // A node with pointers and a payload; a C string; all zeros but a
        // broken mirror; a control byte outside the three kinds.
        let mut node = [0u8; 48];
        node[..8].copy_from_slice(&0x5555_5555_a010u64.to_le_bytes());
        node[8..16].copy_from_slice(&0x5555_5555_b020u64.to_le_bytes());
        node[16..].fill(7);
        node[40] = 8;
        assert_eq!(proven_log2(48, |o| &node[o as usize..]), 0);
        let s = *b"the quick brown fox jumps over the lazy dog, twice\0\0";
        assert_eq!(proven_log2(s.len() as u64, |o| &s[o as usize..]), 0);
        let (mut b, size, offset) = table(16, 8, |_| 0x10);
        b[offset as usize + 16] = 0x10 ^ 1;
        assert_eq!(proven_log2(size as u64, |o| &b[o as usize..size]), 0);
        let (mut b, size, offset) = table(16, 8, |_| 0x10);
        b[offset as usize + 5] = 0x90;
        b[offset as usize + 16 + 5] = 0x90;
        assert_eq!(proven_log2(size as u64, |o| &b[o as usize..size]), 0);
    }

    #[test]
    fn a_table_never_full_is_one_full_is_not() {
        // Zeros pass every byte's test and the mirror: 48 zero bytes at the
        // end of a block (the last of Tcl's zeroed Tcl_Obj) read as a
        // table of 32 buckets, all FULL, which hashbrown never leaves.
        let z = [0u8; 96];
        assert_eq!(proven_log2(96, |o| &z[o as usize..]), 0);
        // 14 of 16 full: at capacity, a table; 15: not.
        for (full, log2) in [(14usize, 4u32), (15, 0)] {
            let (b, size, _) = table(16, 8, |i| if i < full { 0x21 } else { 0xFF });
            assert_eq!(proven_log2(size as u64, |o| &b[o as usize..size]) as u32, log2, "{full} of 16");
        }
        assert_eq!((capacity(4), capacity(8), capacity(16), capacity(64)), (3, 7, 14, 56));
    }
}
