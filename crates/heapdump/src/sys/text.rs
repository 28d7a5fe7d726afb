//! Numbers as text, without allocating: what the dump path, the stop and
//! the reports write into fixed buffers and read from /proc.
#![forbid(unsafe_code)]

/// Formats `v` in decimal into `out`; returns the length.
pub fn fmt_u64(mut v: u64, out: &mut [u8]) -> usize {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let n = (tmp.len() - i).min(out.len());
    out[..n].copy_from_slice(&tmp[i..i + n]);
    n
}

/// Lower-case hexadecimal digits (no prefix), at most 16 of them.
pub fn parse_hex(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    let mut v: u64 = 0;
    for &c in s {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            _ => return None,
        };
        v = v << 4 | u64::from(d);
    }
    Some(v)
}

pub use heapdump_format::settings::parse_u64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_round_trip() {
        let mut b = [0u8; 20];
        for v in [0u64, 7, 10, 12345, u64::MAX] {
            let n = fmt_u64(v, &mut b);
            assert_eq!(parse_u64(&b[..n]), Some(v));
        }
        assert_eq!(parse_hex(b"7fff0a"), Some(0x7fff0a));
        assert_eq!(parse_hex(b"ffffffffffffffff"), Some(u64::MAX));
        for bad in [&b""[..], b"1ffffffffffffffff", b"0x10", b"AB", b"-1"] {
            assert_eq!(parse_hex(bad), None, "{bad:?}");
        }
    }
}
