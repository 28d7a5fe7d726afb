//! The memory of a process seen from outside: its mappings, and reads of
//! them (a live process's, or a core file's).

use crate::error::{Error, Result, Unread};

/// One mapping, as `/proc/PID/maps` (or a core's program headers and
/// `NT_FILE` note) describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Map {
    /// First address.
    pub start: u64,
    /// One past the last.
    pub end: u64,
    /// Readable.
    pub read: bool,
    /// Writable.
    pub write: bool,
    /// Executable.
    pub exec: bool,
    /// Offset in the mapped file.
    pub offset: u64,
    /// The mapped file, or a pseudo-name (`[heap]`, `[stack]`), or none
    /// (anonymous).
    pub path: Option<String>,
}

impl Map {
    /// Whether the mapping is anonymous memory (no file, not a kernel
    /// pseudo-mapping other than `[heap]` and `[stack]`).
    pub fn anonymous(&self) -> bool {
        match self.path.as_deref() {
            None => true,
            Some(p) => p.starts_with("[anon"),
        }
    }

    /// Whether it maps a file.
    pub fn file(&self) -> Option<&str> {
        self.path.as_deref().filter(|p| p.starts_with('/'))
    }
}

/// Parses `/proc/PID/maps`.
pub fn parse_maps(text: &str) -> Vec<Map> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut f = line.split_ascii_whitespace();
        let (Some(range), Some(perms), Some(offset), Some(_dev), Some(_inode)) = (f.next(), f.next(), f.next(), f.next(), f.next()) else {
            continue;
        };
        let Some((a, b)) = range.split_once('-') else { continue };
        let (Ok(start), Ok(end), Ok(offset)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16), u64::from_str_radix(offset, 16))
        else {
            continue;
        };
        // The path is the rest of the line (it may hold spaces).
        let path = line.splitn(6, |c: char| c.is_ascii_whitespace()).nth(5).map(str::trim).filter(|p| !p.is_empty());
        let p = perms.as_bytes();
        out.push(Map {
            start,
            end,
            read: p.first() == Some(&b'r'),
            write: p.get(1) == Some(&b'w'),
            exec: p.get(2) == Some(&b'x'),
            offset,
            path: path.map(|p| p.trim_end_matches(" (deleted)").to_string()),
        });
    }
    out
}

/// Reads a process's memory.
pub trait Memory {
    /// Its mappings, in address order.
    fn maps(&self) -> &[Map];

    /// Fills `buf` from `addr`, or fails naming what could not be read.
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()>;

    /// The 8 bytes at `addr`.
    fn u64(&self, addr: u64) -> Result<u64> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Whether `[addr, addr + len)` can be read whole, said before a
    /// buffer of `len` bytes is allocated for it: a size read from the
    /// target (a crafted core's segment, a damaged header) never becomes
    /// an allocation of what is not there. By default, the range must lie
    /// in mappings that follow one another.
    fn readable(&self, addr: u64, len: u64) -> Result<()> {
        let end = addr.checked_add(len).ok_or(Error::Unreadable { addr, len, why: Unread::PastAddressSpace })?;
        let mut at = addr;
        while at < end {
            let m = self.map_of(at).ok_or(Error::Unreadable { addr: at, len: end - at, why: Unread::NotMapped })?;
            at = m.end;
        }
        Ok(())
    }

    /// `len` bytes from `addr`.
    fn bytes(&self, addr: u64, len: u64) -> Result<Vec<u8>> {
        self.readable(addr, len)?;
        let n = usize::try_from(len).map_err(|_| Error::Unreadable { addr, len, why: Unread::TooLarge })?;
        let mut v = vec![0u8; n];
        self.read(addr, &mut v)?;
        Ok(v)
    }

    /// The file a mapping names, as this machine has it, for what the
    /// memory does not hold (a core leaves modules' headers out): never
    /// for a live process, whose headers are in its memory and whose
    /// files may be another namespace's.
    /// `None`: not asked of this memory (a live process); else the file
    /// opened, or why not (one missing is worth saying).
    fn host_file(&self, _path: &str) -> Option<std::io::Result<std::fs::File>> {
        None
    }

    /// The parts of `[start, end)` that hold data (pages the process
    /// touched: resident or swapped), in address order: untouched pages of
    /// a large reservation are zeros not worth reading.
    fn present(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        vec![(start, end)]
    }

    /// The mapping holding `addr`.
    fn map_of(&self, addr: u64) -> Option<&Map> {
        let m = self.maps();
        let i = m.partition_point(|m| m.start <= addr).checked_sub(1)?;
        (addr < m[i].end).then_some(&m[i])
    }
}

/// A region of memory read once, for word reads within it.
pub struct Region {
    /// First address.
    pub start: u64,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

impl Region {
    /// Reads `[start, end)`.
    pub fn read(mem: &dyn Memory, start: u64, end: u64) -> Result<Region> {
        let len = end.checked_sub(start).ok_or(Error::Unreadable { addr: start, len: 0, why: Unread::EndsBeforeStart(end) })?;
        Ok(Region { start, bytes: mem.bytes(start, len)? })
    }

    /// One past its last address.
    pub fn end(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }

    /// The word at `addr`, when inside.
    pub fn u64(&self, addr: u64) -> Option<u64> {
        let off = usize::try_from(addr.checked_sub(self.start)?).ok()?;
        let b = self.bytes.get(off..off.checked_add(8)?)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }

    /// The bytes of `[addr, addr + len)`, when inside.
    pub fn slice(&self, addr: u64, len: u64) -> Option<&[u8]> {
        let off = usize::try_from(addr.checked_sub(self.start)?).ok()?;
        self.bytes.get(off..off.checked_add(usize::try_from(len).ok()?)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_parse_with_paths_holding_spaces() {
        let m = parse_maps(
            "55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0                          [heap]\n\
             7f1e2c000000-7f1e2c021000 rw-p 00000000 00:00 0 \n\
             7f1e2d400000-7f1e2d428000 r--p 00028000 fd:01 1234   /usr/lib/my lib.so (deleted)\n\
             garbage line\n",
        );
        assert_eq!(m.len(), 3);
        assert_eq!((m[0].start, m[0].end, m[0].write, m[0].path.as_deref()), (0x55d0c0a00000, 0x55d0c0a21000, true, Some("[heap]")));
        assert!(m[1].anonymous() && m[1].path.is_none());
        assert_eq!((m[2].offset, m[2].file(), m[2].write), (0x28000, Some("/usr/lib/my lib.so"), false));
    }
}
