//! A cache file's seal (a CRC-32 per 64 KiB of its contents, their
//! length, a CRC-32 of both), read and forged by the tests that lie to
//! the caches.

/// The length of a cache file's contents (its seal follows).
pub fn body_len(b: &[u8]) -> usize {
    u64::from_le_bytes(b[b.len() - 12..b.len() - 4].try_into().unwrap()) as usize
}

/// The seal made right for the contents, as a forger would.
pub fn reseal(b: &mut [u8]) {
    let n = body_len(b);
    for (i, c) in (0..n).step_by(64 << 10).enumerate() {
        let crc = crc32fast::hash(&b[c..(c + (64 << 10)).min(n)]);
        b[n + 4 * i..n + 4 * i + 4].copy_from_slice(&crc.to_le_bytes());
    }
    let t = b.len() - 4;
    let crc = crc32fast::hash(&b[n..t]);
    b[t..].copy_from_slice(&crc.to_le_bytes());
}
