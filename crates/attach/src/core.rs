//! An ELF core file (the kernel's or `gcore`'s) as the memory of a
//! process: its `PT_LOAD` segments, a register set per thread
//! (`NT_PRSTATUS`), the mapped files (`NT_FILE`) and the command line
//! (`NT_PRPSINFO`). Pages the core does not hold (file-backed text the
//! kernel left out, or cut short) are reported when read, never guessed.

use crate::error::{on_file, CoreDefect, Error, FileOp, Result, Unread};
use crate::live::ThreadRegs;
use crate::memory::{Map, Memory};
use object::read::elf::{FileHeader, ProgramHeader};
use object::Endianness;

const NT_PRSTATUS: u32 = 1;
const NT_PRPSINFO: u32 = 3;
const NT_FILE: u32 = 0x4649_4c45;
/// Where `pr_reg` starts in x86-64's `elf_prstatus`, and `pr_pid`.
const PR_REG: usize = 112;
const PR_PID: usize = 32;

struct Segment {
    vaddr: u64,
    memsz: u64,
    offset: u64,
    filesz: u64,
    /// The bytes of it the file holds (`filesz`, less what a file cut
    /// short lost).
    held: u64,
}

impl Segment {
    fn end(&self) -> u64 {
        self.vaddr + self.memsz
    }
}

#[derive(Default)]
struct Parsed {
    segments: Vec<Segment>,
    maps: Vec<Map>,
    threads: Vec<ThreadRegs>,
    pid: u32,
    cmdline: Vec<u8>,
}

/// A core file, mapped.
pub struct Core {
    data: memmap2::Mmap,
    segments: Vec<Segment>,
    maps: Vec<Map>,
    threads: Vec<ThreadRegs>,
    pid: u32,
    exe: String,
    cmdline: Vec<u8>,
    /// The bytes its program headers describe (more than `data` holds:
    /// the file is cut short).
    wanted: u64,
}

fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(off..off + 8)?.try_into().ok()?))
}

impl Core {
    /// Maps and parses `path`.
    pub fn open(path: &std::path::Path) -> Result<Core> {
        let f = std::fs::File::open(path).map_err(on_file(FileOp::Open, path))?;
        // SAFETY: the file is mapped read-only; a core file being changed
        // while read is outside what this reads for (it would give wrong
        // bytes, not undefined behaviour in this process beyond SIGBUS on
        // truncation, which a core at rest does not see).
        let data = unsafe { memmap2::Mmap::map(&f) }.map_err(on_file(FileOp::Map, path))?;
        let bad = |why: CoreDefect| Error::NotACore { path: path.to_path_buf(), why };
        // The file header and program headers only: a core cut short (a
        // full disk, a killed writer) loses its section headers, which a
        // core does not need, and is read as far as it goes.
        let hdr = object::elf::FileHeader64::<Endianness>::parse(&*data).map_err(|e| bad(CoreDefect::Elf(e.to_string())))?;
        let e = hdr.endian().map_err(|e| bad(CoreDefect::Elf(e.to_string())))?;
        if hdr.e_type(e) != object::elf::ET_CORE {
            return Err(bad(CoreDefect::NotACore));
        }
        if hdr.e_machine(e) != object::elf::EM_X86_64 {
            return Err(bad(CoreDefect::OtherMachine));
        }
        let mut core = Parsed::default();
        let mut files: Vec<(u64, u64, u64, String)> = Vec::new();
        let mut first_file: Option<String> = None;
        let phdrs = hdr.program_headers(e, &*data).map_err(|err| bad(CoreDefect::Elf(err.to_string())))?;
        // Where the file ends short of what its headers describe.
        let wanted = phdrs.iter().map(|ph| ph.p_offset(e).saturating_add(ph.p_filesz(e))).max().unwrap_or(0);
        for ph in phdrs {
            match ph.p_type(e) {
                object::elf::PT_LOAD => {
                    let (vaddr, memsz, flags) = (ph.p_vaddr(e), ph.p_memsz(e), ph.p_flags(e).0);
                    // Sizes are the file's word, checked against the
                    // address space and against what the file holds
                    // before anything is read or allocated by them.
                    let Some(end) = vaddr.checked_add(memsz) else {
                        return Err(bad(CoreDefect::SegmentPastAddressSpace { vaddr, memsz }));
                    };
                    let (offset, filesz) = (ph.p_offset(e), ph.p_filesz(e).min(memsz));
                    let held = filesz.min((data.len() as u64).saturating_sub(offset));
                    core.segments.push(Segment { vaddr, memsz, offset, filesz, held });
                    core.maps.push(Map {
                        start: vaddr,
                        end,
                        read: flags & 4 != 0,
                        write: flags & 2 != 0,
                        exec: flags & 1 != 0,
                        offset: 0,
                        path: None,
                    });
                }
                object::elf::PT_NOTE => {
                    let Ok(Some(mut notes)) = ph.notes(e, &*data) else { continue };
                    while let Ok(Some(n)) = notes.next() {
                        if n.name() != b"CORE" {
                            continue;
                        }
                        let d = n.desc();
                        match n.n_type(e).0 {
                            NT_PRSTATUS if d.len() >= PR_REG + 27 * 8 => {
                                let r = |i: usize| u64_at(d, PR_REG + 8 * i).unwrap_or(0);
                                // user_regs_struct: r15 r14 r13 r12 rbp rbx r11 r10 r9 r8
                                // rax rcx rdx rsi rdi orig_rax rip cs eflags rsp ss fs_base …
                                let regs = [
                                    r(10),
                                    r(5),
                                    r(11),
                                    r(12),
                                    r(13),
                                    r(14),
                                    r(4),
                                    r(19),
                                    r(9),
                                    r(8),
                                    r(7),
                                    r(6),
                                    r(3),
                                    r(2),
                                    r(1),
                                    r(0),
                                    r(16),
                                ];
                                let tid = u32::from_le_bytes(d[PR_PID..PR_PID + 4].try_into().unwrap_or([0; 4]));
                                if core.threads.is_empty() {
                                    core.pid = tid;
                                }
                                core.threads.push(ThreadRegs { tid, ns_tid: tid, name: String::new(), regs, fs_base: r(21) });
                            }
                            NT_PRPSINFO if d.len() >= 136 => {
                                let args = &d[56..136];
                                let args = &args[..args.iter().position(|&c| c == 0).unwrap_or(args.len())];
                                core.cmdline = args
                                    .split(|&c| c == b' ')
                                    .filter(|a| !a.is_empty())
                                    .flat_map(|a| a.iter().copied().chain([0]))
                                    .collect();
                            }
                            NT_FILE => {
                                // As many entries as the note holds (24
                                // bytes each, then a name each): a count
                                // the note cannot hold is refused, not
                                // looped over.
                                let count = u64_at(d, 0).unwrap_or(0);
                                let page = u64_at(d, 8).unwrap_or(4096);
                                if count > (d.len().saturating_sub(16) / 25) as u64 {
                                    return Err(bad(CoreDefect::FileNoteCount { count, len: d.len() as u64 }));
                                }
                                let count = count as usize;
                                let mut names = d.get(16 + count * 24..).unwrap_or(&[]).split(|&c| c == 0);
                                for i in 0..count {
                                    let (Some(s), Some(end), Some(off)) =
                                        (u64_at(d, 16 + 24 * i), u64_at(d, 24 + 24 * i), u64_at(d, 32 + 24 * i))
                                    else {
                                        break;
                                    };
                                    let name = String::from_utf8_lossy(names.next().unwrap_or(&[])).into_owned();
                                    if first_file.is_none() {
                                        first_file = Some(name.clone());
                                    }
                                    files.push((s, end, off.saturating_mul(page), name));
                                }
                            }
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        // Name the segments by the files mapped there (a search of the
        // files sorted by address: a core may name tens of thousands).
        files.retain(|f| f.0 < f.1);
        files.sort_by_key(|f| f.0);
        let file_at = |a: u64| files.partition_point(|f| f.0 <= a).checked_sub(1).filter(|&i| a < files[i].1);
        for m in &mut core.maps {
            if let Some(f) = file_at(m.start).map(|i| &files[i]) {
                m.path = Some(f.3.clone());
                m.offset = f.2.saturating_add(m.start - f.0);
            }
        }
        core.maps.sort_by_key(|m| m.start);
        core.segments.sort_by_key(|s| s.vaddr);
        // A file's mappings the core left out entirely still tell where
        // the module is loaded: keep them as mappings with nothing in them.
        let mut left_out = Vec::new();
        for f in &files {
            let i = core.maps.partition_point(|m| m.start < f.1);
            if i == 0 || core.maps[i - 1].end <= f.0 {
                left_out.push(Map { start: f.0, end: f.1, read: true, write: false, exec: false, offset: f.2, path: Some(f.3.clone()) });
            }
        }
        core.maps.extend(left_out);
        core.maps.sort_by_key(|m| m.start);
        if core.threads.is_empty() {
            if wanted > data.len() as u64 {
                return Err(Error::CoreCutShort { path: path.to_path_buf(), len: data.len() as u64, wanted });
            }
            return Err(bad(CoreDefect::NoThreads));
        }
        let exe = first_file.unwrap_or_default();
        let Parsed { segments, maps, threads, pid, cmdline } = core;
        Ok(Core { data, segments, maps, threads, pid, exe, cmdline, wanted })
    }

    /// `(bytes held, bytes described)` when the file is cut short.
    pub fn cut_short(&self) -> Option<(u64, u64)> {
        (self.wanted > self.data.len() as u64).then_some((self.data.len() as u64, self.wanted))
    }

    /// The threads' registers.
    pub fn threads(&self) -> &[ThreadRegs] {
        &self.threads
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The executable (the first mapped file) and the command line.
    pub fn identity(&self) -> (String, Vec<u8>) {
        (self.exe.clone(), self.cmdline.clone())
    }

    /// Says that the executable is `exe` (when the core's file names are
    /// not this machine's).
    pub fn set_exe(&mut self, exe: String) {
        self.exe = exe;
    }
}

impl Memory for Core {
    fn maps(&self) -> &[Map] {
        &self.maps
    }

    /// The parts the core holds.
    fn present(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> =
            self.segments.iter().map(|s| (s.vaddr.max(start), (s.vaddr + s.held).min(end))).filter(|(a, b)| a < b).collect();
        out.sort_unstable();
        out
    }

    /// Whether the core file holds all of `[addr, addr + len)`: looked at
    /// before a buffer is allocated for it.
    fn readable(&self, addr: u64, len: u64) -> Result<()> {
        let end = addr.checked_add(len).ok_or(Error::Unreadable { addr, len, why: Unread::PastAddressSpace })?;
        let mut at = addr;
        while at < end {
            // Progress: `at` is inside what the segment holds.
            let (s, _) = self.held_at(at, end)?;
            at = (s.vaddr + s.held).min(end);
        }
        Ok(())
    }

    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        let len = buf.len() as u64;
        let end = addr.checked_add(len).ok_or(Error::Unreadable { addr, len, why: Unread::PastAddressSpace })?;
        let mut done = 0u64;
        while done < len {
            let a = addr + done;
            let (s, into) = self.held_at(a, end)?;
            let n = (s.held - into).min(len - done);
            let from = (s.offset + into) as usize;
            let src = self.data.get(from..from + n as usize).ok_or(Error::Unreadable { addr: a, len: n, why: Unread::CoreCutShort })?;
            buf[done as usize..(done + n) as usize].copy_from_slice(src);
            done += n;
        }
        Ok(())
    }

    fn host_file(&self, path: &str) -> Option<std::io::Result<std::fs::File>> {
        Some(std::fs::File::open(path))
    }
}

impl Core {
    /// The segment holding `a` and how far into it `a` is, when the file
    /// holds the byte at `a`; else why not (for the read up to `end`).
    fn held_at(&self, a: u64, end: u64) -> Result<(&Segment, u64)> {
        let i = self.segments.partition_point(|s| s.vaddr <= a);
        let Some(s) = i.checked_sub(1).map(|i| &self.segments[i]).filter(|s| a < s.end()) else {
            return Err(Error::Unreadable { addr: a, len: end - a, why: Unread::NotInCore });
        };
        let into = a - s.vaddr;
        if into >= s.held {
            let why = if into < s.filesz { Unread::CoreCutShort } else { Unread::NotInCoreFile };
            return Err(Error::Unreadable { addr: a, len: end - a, why });
        }
        Ok((s, into))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Region;

    /// A core of one thread and one writable segment at 0x10000 holding
    /// 4096 bytes of its `memsz`, with `extra` notes after NT_PRSTATUS.
    fn core_file(name: &str, memsz: u64, extra: &[u8]) -> std::path::PathBuf {
        let mut notes = Vec::new();
        notes.extend_from_slice(&5u32.to_le_bytes()); // namesz: "CORE\0"
        notes.extend_from_slice(&336u32.to_le_bytes()); // descsz: elf_prstatus
        notes.extend_from_slice(&NT_PRSTATUS.to_le_bytes());
        notes.extend_from_slice(b"CORE\0\0\0\0");
        notes.extend_from_slice(&[0u8; 336]);
        notes.extend_from_slice(extra);
        let (note_at, load_at) = (64 + 2 * 56, 4096u64);
        let mut f = vec![0u8; 64];
        f[..8].copy_from_slice(b"\x7fELF\x02\x01\x01\x00");
        f[16..18].copy_from_slice(&4u16.to_le_bytes()); // ET_CORE
        f[18..20].copy_from_slice(&62u16.to_le_bytes()); // EM_X86_64
        f[20..24].copy_from_slice(&1u32.to_le_bytes());
        f[32..40].copy_from_slice(&64u64.to_le_bytes()); // e_phoff
        f[52..54].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
        f[54..56].copy_from_slice(&56u16.to_le_bytes()); // e_phentsize
        f[56..58].copy_from_slice(&2u16.to_le_bytes()); // e_phnum
        #[rustfmt::skip]
        let phdr = |ty: u32, flags: u32, off: u64, vaddr: u64, filesz: u64, memsz: u64| {
            [ty.to_le_bytes().as_slice(), &flags.to_le_bytes(), &off.to_le_bytes(), &vaddr.to_le_bytes(),
             &0u64.to_le_bytes(), &filesz.to_le_bytes(), &memsz.to_le_bytes(), &4u64.to_le_bytes()].concat()
        };
        f.extend(phdr(4, 0, note_at, 0, notes.len() as u64, 0));
        f.extend(phdr(1, 6, load_at, 0x10000, 4096, memsz));
        f.extend_from_slice(&notes);
        f.resize(load_at as usize, 0);
        f.extend((0..4096u32).map(|i| i as u8));
        let p = std::env::temp_dir().join(format!("heapdump-attach-core-{}-{name}", std::process::id()));
        std::fs::write(&p, &f).unwrap();
        p
    }

    #[test]
    fn a_segment_claiming_more_than_the_core_holds_is_refused_before_it_is_allocated() {
        let p = core_file("tib", 1 << 40, &[]);
        let c = Core::open(&p).unwrap();
        let _ = std::fs::remove_file(&p);
        // What the file holds reads; 1 TiB more is refused, never allocated
        // (that allocation aborts the process).
        assert_eq!(c.bytes(0x10010, 4).unwrap(), [16, 17, 18, 19]);
        assert!(matches!(c.bytes(0x10000, 1 << 40), Err(Error::Unreadable { addr: 0x11000, .. })));
        assert!(matches!(Region::read(&c, 0x10000, 0x10000 + (1 << 40)), Err(Error::Unreadable { .. })));
        assert!(matches!(c.bytes(0x10000 + (1 << 40), 8), Err(Error::Unreadable { .. })));
        assert_eq!(c.present(0, u64::MAX), [(0x10000, 0x11000)]);
    }

    #[test]
    fn a_segment_past_the_address_space_or_a_file_count_past_its_note_is_refused() {
        let p = core_file("wrap", u64::MAX - 0x1000, &[]);
        let e = Core::open(&p).err().map(|e| e.to_string()).unwrap_or_default();
        let _ = std::fs::remove_file(&p);
        assert!(e.contains("runs past the address space"), "{e}");
        let mut nt = Vec::new();
        let desc: Vec<u8> = [1u64 << 40, 4096].iter().flat_map(|v| v.to_le_bytes()).collect();
        nt.extend_from_slice(&5u32.to_le_bytes());
        nt.extend_from_slice(&(desc.len() as u32).to_le_bytes());
        nt.extend_from_slice(&NT_FILE.to_le_bytes());
        nt.extend_from_slice(b"CORE\0\0\0\0");
        nt.extend_from_slice(&desc);
        let p = core_file("count", 4096, &nt);
        let e = Core::open(&p).err().map(|e| e.to_string()).unwrap_or_default();
        let _ = std::fs::remove_file(&p);
        assert!(e.contains("claims 1099511627776 files in 16 bytes"), "{e}");
    }
}
