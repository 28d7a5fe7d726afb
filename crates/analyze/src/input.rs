//! Opening the files a dump names, and the dump itself: untrusted paths.
//!
//! A dump is shared between machines and people, so every path in it (the
//! modules, their separate debug files) and the dump's own path may name
//! anything: a FIFO (opening blocks), a device (`/dev/zero` never ends), a
//! kernel file (`/proc/kmsg` blocks, `/proc/self/pagemap` is endless), a
//! directory. Only regular files on a filesystem that stores files are
//! opened, without blocking (`O_NONBLOCK`, in case a FIFO is swapped in
//! after the check), checked again on the open descriptor, and mapped, never
//! read whole: what an analysis holds is bounded by what the files hold.

use std::fs::File;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Filesystems whose "files" are the kernel's: reading them blocks, never
/// ends or reads another process's memory.
const KERNEL_FILESYSTEMS: &[(u64, &str)] = &[
    (0x9fa0, "procfs"),
    (0x6265_6572, "sysfs"),
    (0x6462_6720, "debugfs"),
    (0x7472_6163, "tracefs"),
    (0x7363_6673, "securityfs"),
    (0x0027_e0eb, "cgroupfs"),
    (0x6367_7270, "cgroup2"),
    (0x6265_6570, "configfs"),
    (0xcafe_4a11, "bpffs"),
    (0xde5e_81e4, "efivarfs"),
    (0x6165_676c, "pstore"),
    (0x1cd1, "devpts"),
];

fn refuse(kind: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("not a regular file ({kind})"))
}

fn kind_of(ft: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() || ft.is_block_device() {
        "a device"
    } else {
        "a special file"
    }
}

/// Opens `path` for reading if it is a regular file on a filesystem that
/// stores files; returns it and its size.
pub fn open_regular(path: &Path) -> io::Result<(File, u64)> {
    let m = std::fs::metadata(path)?;
    if !m.is_file() {
        return Err(refuse(kind_of(m.file_type())));
    }
    let f = std::fs::OpenOptions::new().read(true).custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32).open(path)?;
    let m = f.metadata()?;
    if !m.is_file() {
        return Err(refuse(kind_of(m.file_type())));
    }
    if let Ok(fs) = rustix::fs::fstatfs(&f) {
        let magic = fs.f_type as u64;
        if let Some((_, name)) = KERNEL_FILESYSTEMS.iter().find(|(m, _)| *m == magic) {
            return Err(refuse(&format!("a {name} file")));
        }
    }
    Ok((f, m.len()))
}

/// Maps `path` read-only (see [`open_regular`]); `None` when it is empty.
pub fn map_regular(path: &Path) -> io::Result<Option<memmap2::Mmap>> {
    Ok(map_regular_stated(path)?.map(|(m, _)| m))
}

/// [`map_regular`], with what the open descriptor's `fstat` said of the
/// file mapped (its identity: see `seen.rs`).
pub(crate) fn map_regular_stated(path: &Path) -> io::Result<Option<(memmap2::Mmap, std::fs::Metadata)>> {
    let (f, len) = open_regular(path)?;
    if len == 0 {
        return Ok(None);
    }
    let meta = f.metadata()?;
    // SAFETY: a read-only private mapping of a regular file. A file
    // truncated by another process while mapped raises SIGBUS at the next
    // read past its new end, the risk of mapping (as ripgrep's searcher
    // documents): the command line ends then with a one-line error
    // (`cut_files_end_cleanly` in crates/cli/src/main.rs); a program using
    // this crate decides for itself.
    #[allow(unsafe_code)]
    let map = unsafe { memmap2::Mmap::map(&f) }?;
    Ok(Some((map, meta)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_on_disk_are_opened() {
        let e = |p: &str| open_regular(Path::new(p)).unwrap_err().to_string();
        assert_eq!(e("/"), "not a regular file (a directory)");
        assert_eq!(e("/dev/zero"), "not a regular file (a device)");
        assert_eq!(e("/proc/self/pagemap"), "not a regular file (a procfs file)");
        assert_eq!(e("/proc/kmsg"), "not a regular file (a procfs file)");
        assert!(open_regular(Path::new("/etc/passwd")).is_ok());
    }
}
