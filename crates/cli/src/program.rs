//! What `run` learns of the program before it starts it: whether the
//! preload library can be loaded into it at all.
//!
//! The library is built for glibc's loader, and only a loader loads it.
//! A static program has none: it would run untraced and leave no dump,
//! saying nothing. musl's loader does load it and then ends the program
//! (exit 127: glibc's symbols and libgcc's unwinder are missing), before
//! its `main`. Both are refused here, with what to use instead, before
//! anything starts; so are programs for another machine or a 32-bit one
//! (glibc's loader would skip the library, and the program run untraced).
//! A script is looked at through its `#!` interpreter (and through `env`
//! to the program it starts). Whatever cannot be read is left to the
//! kernel and the loader to judge, as without heapdump.

use anyhow::Result;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// Refuses, before anything starts, a program the preload library cannot
/// trace.
pub fn check_preloadable(program: &OsStr) -> Result<()> {
    match verdict(program, 0) {
        Some(why) => Err(crate::output::Usage(format!("cannot trace {}: {why}", program.to_string_lossy())).into()),
        None => Ok(()),
    }
}

/// What to use for a static glibc program, which the preload library
/// cannot enter but `attach` and `core` read.
const OUTSIDE: &str = "take its heap from outside instead: heapdump attach PID while it runs, or heapdump core CORE";

/// What is said of a program heapdump cannot read at all yet.
const NOT_YET: &str = "heapdump reads glibc's heap of x86-64 programs only, for now (attach and core too)";

/// Why `program` cannot be traced, a sentence with its subject (`None`:
/// it can, or we cannot tell). `depth` counts the `#!` interpreters
/// followed (the kernel's limit is 4).
fn verdict(program: &OsStr, depth: u32) -> Option<String> {
    why_not(program, depth).map(|(subject, why)| format!("{subject} {why}"))
}

/// [`verdict`]'s subject ("it", "its interpreter /x") and predicate.
fn why_not(program: &OsStr, depth: u32) -> Option<(String, String)> {
    let path = resolve(program)?;
    let head = read_head(&path)?;
    if let Some(line) = head.strip_prefix(b"#!") {
        if depth >= 4 {
            return None;
        }
        let (interp, arg) = shebang(line)?;
        let of_interp = why_not(&interp, depth + 1).map(|(_, w)| (format!("its interpreter {}", Path::new(&interp).display()), w));
        if of_interp.is_some() || Path::new(&interp).file_name() != Some(OsStr::new("env")) {
            return of_interp;
        }
        // `#!/usr/bin/env NAME`: the program env starts; `-S` splits the
        // rest into words.
        let target = env_target(arg.as_deref()?)?;
        return why_not(&target, depth + 1).map(|(_, w)| (format!("the program its #! line starts ({})", target.to_string_lossy()), w));
    }
    let elf = Elf::parse(&path, &head)?;
    elf.verdict(&path).map(|w| ("it".to_string(), w))
}

/// The path the kernel would run: as given when it has a slash, else the
/// first executable file of that name in `PATH` (as `execvp` looks).
fn resolve(program: &OsStr) -> Option<PathBuf> {
    if program.as_bytes().contains(&b'/') {
        return Some(PathBuf::from(program));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/local/bin:/bin:/usr/bin"));
    std::env::split_paths(&path).map(|d| d.join(program)).find(|p| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// The file's first 4 KiB (what the kernel reads to decide).
fn read_head(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    let f = std::fs::File::open(path).ok()?;
    let mut head = Vec::with_capacity(4096);
    f.take(4096).read_to_end(&mut head).ok()?;
    Some(head)
}

/// A `#!` line's interpreter and its one optional argument, as the kernel
/// splits it (the first 255 bytes, up to the newline).
fn shebang(line: &[u8]) -> Option<(OsString, Option<OsString>)> {
    let line = &line[..line.len().min(255)];
    let line = line.split(|&b| b == b'\n').next()?;
    let line = line.trim_ascii();
    let (interp, rest) = match line.iter().position(|b| b.is_ascii_whitespace()) {
        Some(i) => (&line[..i], line[i..].trim_ascii()),
        None => (line, &b""[..]),
    };
    if interp.is_empty() {
        return None;
    }
    let arg = (!rest.is_empty()).then(|| OsString::from_vec(rest.to_vec()));
    Some((OsString::from_vec(interp.to_vec()), arg))
}

/// The program `env ARG` starts: the first word that is neither an option
/// nor a `NAME=VALUE` setting (`-S` puts the words in one argument).
fn env_target(arg: &OsStr) -> Option<OsString> {
    let mut words = arg.as_bytes().split(|b| b.is_ascii_whitespace()).filter(|w| !w.is_empty());
    let mut skip_value = false;
    for w in words.by_ref() {
        if skip_value {
            skip_value = false;
            continue;
        }
        if w == b"-S" || w == b"--split-string" {
            continue;
        }
        // Options taking a separate value.
        if matches!(w, b"-u" | b"--unset" | b"-C" | b"--chdir") {
            skip_value = true;
            continue;
        }
        if w.starts_with(b"-") || w.contains(&b'=') {
            continue;
        }
        return Some(OsString::from_vec(w.to_vec()));
    }
    None
}

/// What the ELF headers say of how the program is loaded.
struct Elf {
    class64: bool,
    machine: u16,
    /// PT_INTERP's path.
    interp: Option<Vec<u8>>,
    /// Whether it has a dynamic section (a static-pie or a loader run as a
    /// program have one, and no interpreter).
    dynamic: bool,
    /// DT_SONAME, for a shared object run as a program (a loader).
    soname: Option<Vec<u8>>,
}

const EM_X86_64: u16 = 62;
const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const DT_NULL: u64 = 0;
const DT_STRTAB: u64 = 5;
const DT_SONAME: u64 = 14;

impl Elf {
    /// Reads the headers that matter; `None` when it is no ELF file or its
    /// headers do not add up (left to the kernel).
    fn parse(path: &Path, head: &[u8]) -> Option<Elf> {
        if head.len() < 20 || &head[..4] != b"\x7fELF" || head[5] != 1 {
            return None;
        }
        let u16_at = |b: &[u8], o: usize| b.get(o..o + 2).map(|s| u16::from_le_bytes([s[0], s[1]]));
        let machine = u16_at(head, 18)?;
        if head[4] != 2 {
            return Some(Elf { class64: false, machine, interp: None, dynamic: false, soname: None });
        }
        let file = std::fs::read(path).ok()?;
        let u32_at = |o: usize| file.get(o..o + 4).map(|s| u32::from_le_bytes(s.try_into().unwrap()));
        let u64_at = |o: usize| file.get(o..o + 8).map(|s| u64::from_le_bytes(s.try_into().unwrap()));
        let phoff = usize::try_from(u64_at(32)?).ok()?;
        let phentsize = usize::from(u16_at(&file, 54)?);
        let phnum = usize::from(u16_at(&file, 56)?);
        if phentsize < 56 {
            return None;
        }
        let mut elf = Elf { class64: true, machine, interp: None, dynamic: false, soname: None };
        let mut loads = vec![];
        let mut dynamic = None;
        for i in 0..phnum {
            let ph = phoff.checked_add(i.checked_mul(phentsize)?)?;
            let (kind, offset, vaddr, filesz) = (u32_at(ph)?, u64_at(ph + 8)?, u64_at(ph + 16)?, u64_at(ph + 32)?);
            let range = || usize::try_from(offset).ok().and_then(|o| Some(o..o.checked_add(usize::try_from(filesz).ok()?)?));
            match kind {
                PT_INTERP => {
                    let b = file.get(range()?)?;
                    elf.interp = Some(b.split(|&c| c == 0).next().unwrap_or(b).to_vec());
                }
                PT_DYNAMIC => {
                    elf.dynamic = true;
                    dynamic = range();
                }
                PT_LOAD => loads.push((vaddr, offset, filesz)),
                _ => {}
            }
        }
        if elf.interp.is_none() {
            if let Some(d) = dynamic {
                elf.soname = soname(&file, d, &loads);
            }
        }
        Some(elf)
    }

    /// The predicate of [`verdict`]'s sentence, for the file at `path`.
    fn verdict(&self, path: &Path) -> Option<String> {
        if !self.class64 {
            return Some(format!("is a 32-bit program, and the preload library is built for x86-64; {NOT_YET}"));
        }
        if self.machine != EM_X86_64 {
            return Some(format!(
                "is built for another machine (ELF machine {}), and the preload library for x86-64; {NOT_YET}",
                self.machine
            ));
        }
        let musl = |s: &[u8]| s.windows(4).any(|w| w == b"musl");
        match (&self.interp, &self.soname) {
            (Some(i), _) if musl(i) => Some(format!(
                "is linked with musl's C library (its loader is {}), and the preload library needs glibc's; {OUTSIDE}",
                String::from_utf8_lossy(i)
            )),
            (Some(_), _) => None,
            // A loader run as a program (`ld-linux-x86-64.so.2 ./app`):
            // glibc's honours LD_PRELOAD; musl's (no soname) is musl.
            _ if self.dynamic && musl(path.as_os_str().as_bytes()) => {
                Some(format!("is musl's loader, and the preload library needs glibc's; {OUTSIDE}"))
            }
            (None, Some(_)) => None,
            (None, None) => Some(format!(
                "is statically linked{}: no library can be preloaded into it, and it would run without a dump; {OUTSIDE}",
                if self.dynamic { " (static-pie)" } else { "" }
            )),
        }
    }
}

/// DT_SONAME of the dynamic section at `dynamic` (file range), found
/// through the string table's address in the PT_LOAD segments.
fn soname(file: &[u8], dynamic: std::ops::Range<usize>, loads: &[(u64, u64, u64)]) -> Option<Vec<u8>> {
    let d = file.get(dynamic)?;
    let (mut strtab, mut name) = (None, None);
    for e in d.chunks_exact(16) {
        let tag = u64::from_le_bytes(e[..8].try_into().ok()?);
        let val = u64::from_le_bytes(e[8..].try_into().ok()?);
        match tag {
            DT_NULL => break,
            DT_STRTAB => strtab = Some(val),
            DT_SONAME => name = Some(val),
            _ => {}
        }
    }
    let (strtab, name) = (strtab?, name?);
    let &(vaddr, offset, _) = loads.iter().find(|&&(v, _, sz)| strtab >= v && strtab < v.saturating_add(sz))?;
    let at = usize::try_from(strtab - vaddr + offset).ok()?.checked_add(usize::try_from(name).ok()?)?;
    let s = file.get(at..)?;
    Some(s[..s.iter().position(|&c| c == 0)?].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shebang_lines_split_as_the_kernel_splits_them() {
        let (i, a) = shebang(b"/bin/sh -e\nexit 0\n").unwrap();
        assert_eq!((i.as_os_str(), a.as_deref()), (OsStr::new("/bin/sh"), Some(OsStr::new("-e"))));
        let (i, a) = shebang(b" /usr/bin/python3\n").unwrap();
        assert_eq!((i.as_os_str(), a), (OsStr::new("/usr/bin/python3"), None));
        assert!(shebang(b"\n").is_none());
    }

    #[test]
    fn env_finds_the_program_it_starts() {
        assert_eq!(env_target(OsStr::new("python3")).as_deref(), Some(OsStr::new("python3")));
        assert_eq!(env_target(OsStr::new("-S A=1 -u B node --flag")).as_deref(), Some(OsStr::new("node")));
        assert_eq!(env_target(OsStr::new("-i")), None);
    }

    /// The glibc programs on this machine pass; the loader run as a
    /// program too (it honours LD_PRELOAD).
    #[test]
    fn glibc_programs_and_their_loader_pass() {
        assert_eq!(verdict(OsStr::new("sh"), 0), None);
        assert_eq!(verdict(OsStr::new("/proc/self/exe"), 0), None);
        for l in ["/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"] {
            if Path::new(l).exists() {
                assert_eq!(verdict(OsStr::new(l), 0), None, "{l}");
            }
        }
    }
}
