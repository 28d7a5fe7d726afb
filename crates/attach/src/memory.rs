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

    /// The executable's file, for what its memory does not hold (its
    /// symbol table): a live process's own (`/proc/PID/exe`, the very file
    /// it runs, whichever namespace it is in); `None` where not asked of
    /// this memory (a core: its modules through `host_file`).
    fn exe_file(&self) -> Option<std::io::Result<std::fs::File>> {
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

/// The value (an offset from `base`) of the dynamic symbol `name` of the
/// ELF image mapped at `base`, read from the process's memory: its program
/// headers, its dynamic section (relocated in place by the dynamic linker,
/// or as the file has them in a core) and the symbol and string tables it
/// names. `None` when any of it is missing or out of bounds.
pub fn dynamic_symbol(mem: &dyn Memory, base: u64, name: &[u8]) -> Option<u64> {
    let eh = mem.bytes(base, 64).ok()?;
    if &eh[..4] != b"\x7fELF" {
        return None;
    }
    let phoff = u64::from_le_bytes(eh[32..40].try_into().ok()?);
    let phnum = u64::from(u16::from_le_bytes([eh[56], eh[57]])).min(64);
    let ph = mem.bytes(base.checked_add(phoff)?, phnum * 56).ok()?;
    let dynamic = ph.chunks_exact(56).find(|p| p[..4] == [2, 0, 0, 0])?;
    let at = base.checked_add(u64::from_le_bytes(dynamic[16..24].try_into().ok()?))?;
    let (mut symtab, mut strtab, mut strsz) = (0, 0, 0);
    for i in 0..256 {
        let tag = mem.u64(at.checked_add(16 * i)?).ok()?;
        let val = mem.u64(at.checked_add(16 * i + 8)?).ok()?;
        let ptr = if val < base { base.saturating_add(val) } else { val };
        match tag {
            0 => break,
            5 => strtab = ptr,
            6 => symtab = ptr,
            10 => strsz = val,
            _ => {}
        }
    }
    // The symbols run up to the strings (as linkers lay them out).
    if symtab == 0 || strtab <= symtab || strtab - symtab > 24 << 16 || strsz == 0 || strsz > 1 << 20 {
        return None;
    }
    let syms = mem.bytes(symtab, strtab - symtab).ok()?;
    let strs = mem.bytes(strtab, strsz).ok()?;
    syms.chunks_exact(24).find_map(|e| {
        let at = u32::from_le_bytes(e[..4].try_into().ok()?) as usize;
        let n = strs.get(at..at.checked_add(name.len() + 1)?)?;
        if n[..name.len()] != *name || n[name.len()] != 0 {
            return None;
        }
        Some(u64::from_le_bytes(e[8..16].try_into().ok()?))
    })
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
