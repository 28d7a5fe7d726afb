//! The preload library the `heapdump` executable carries (`build.rs`
//! embeds it), so that a `heapdump` copied alone or installed with `cargo
//! install` can trace programs. The per-user cache directory it is kept
//! in, and its checks, are `heapdump_analyze::private_dir`'s (the
//! analysis caches live below it, in the directory that crate owns).
//!
//! What is handed to the dynamic loader must be exactly what was checked,
//! and no other local user may be able to change it in between. Two ways
//! meet that:
//!
//! - a file in the cache (`$XDG_CACHE_HOME/heapdump`, else
//!   `~/.cache/heapdump`), used only when every directory from `/` down to
//!   it is owned by root or this user and writable by no one else (a
//!   sticky directory such as `/tmp` counts when the entry below it is
//!   root's or this user's, since no one else may rename it), as OpenSSH's
//!   StrictModes asks of `~/.ssh`; the loader gets the resolved path, with
//!   no symbolic link left in it, so nobody else can swap any part of it
//!   between the check and the load;
//! - otherwise a sealed memory file holding the embedded bytes, handed to
//!   the loader as `/proc/self/fd/N`: no file system at all, and nothing
//!   written anywhere. Its descriptor is inherited by the program (set at
//!   the top of the descriptor table, where a program's own files do not
//!   land); a descendant started after the program closed every descriptor
//!   runs untraced, with a warning from the loader.
//!
//! Nothing is ever created in a directory another user can write to: the
//! cache's missing directories are made only under one that passes the
//! check (`heapdump_analyze::private_dir`).

use anyhow::{bail, Context, Result};
use heapdump_analyze::private_dir::{checked_chain, private, private_dir};
use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// What another user could swap below a directory that fails the checks
/// (for the error).
const WHAT: &str = "what heapdump loads or writes";

static EMBEDDED: &[u8] = include_bytes!(env!("HEAPDUMP_EMBEDDED_PRELOAD"));

/// The preload library as the loader will get it.
pub enum Library {
    /// A file, every directory on the way to it checked.
    File(PathBuf),
    /// A sealed memory file, kept open (not closed on exec) so that the
    /// program inherits it.
    Sealed(OwnedFd),
}

impl Library {
    /// The name to put in `LD_PRELOAD`.
    pub fn loader_path(&self) -> OsString {
        match self {
            Library::File(p) => p.clone().into_os_string(),
            Library::Sealed(fd) => format!("/proc/self/fd/{}", fd.as_raw_fd()).into(),
        }
    }
}

/// Whether `lib` (a library found beside the executable) may be loaded
/// into the traced program: a regular file of this user, writable by no
/// one else, every directory on the way to it root's or this user's and
/// writable by no one else. Returns the resolved path.
pub fn trusted_beside(lib: &Path) -> Option<PathBuf> {
    let real = checked_chain(lib.parent()?, WHAT).ok()?.join(lib.file_name()?);
    let m = std::fs::symlink_metadata(&real).ok()?;
    (m.is_file() && private(&m)).then_some(real)
}

/// Whether `path` is this user's private, unaltered copy of the library.
fn intact(path: &Path) -> bool {
    let Ok(m) = std::fs::symlink_metadata(path) else { return false };
    m.is_file() && private(&m) && m.len() == EMBEDDED.len() as u64 && std::fs::read(path).is_ok_and(|b| b == EMBEDDED)
}

/// The embedded library: a file in the private cache (written when
/// missing or not intact) when the cache's whole chain is safe, else a
/// sealed memory file.
pub fn embedded() -> Result<Library> {
    match cached() {
        Ok(p) => Ok(Library::File(p)),
        Err(cache) => sealed().map(Library::Sealed).map_err(|e| e.context(format!("{cache:#}"))),
    }
}

/// The embedded library in the private cache.
fn cached() -> Result<PathBuf> {
    let dir = private_dir(None, WHAT)?;
    // Named by its contents (compared byte for byte anyway).
    let name = format!("libheapdump_preload-{:016x}.so", heapdump_format::fnv1a64(EMBEDDED));
    let path = dir.join(&name);
    if intact(&path) {
        return Ok(path);
    }
    // Written beside it and renamed over it: a reader never sees half.
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("cannot create {}", tmp.display()))?;
    let written =
        f.write_all(EMBEDDED).and_then(|()| f.sync_all()).and_then(|()| f.set_permissions(std::fs::Permissions::from_mode(0o500)));
    drop(f);
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, &path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(anyhow::Error::new(e).context(format!("cannot write {}", path.display())));
    }
    if !intact(&path) {
        bail!("{} does not hold the library just written", path.display());
    }
    Ok(path)
}

/// The embedded bytes in a memory file sealed against any change, at the
/// top of the descriptor table and inherited across exec.
fn sealed() -> Result<OwnedFd> {
    use rustix::fs::{MemfdFlags, SealFlags};
    // The name shows in the program's maps as `/memfd:<name>`: the analysis
    // knows the runtime's frames by it.
    let fd = rustix::fs::memfd_create("libheapdump_preload.so", MemfdFlags::ALLOW_SEALING | MemfdFlags::CLOEXEC)
        .context("cannot make a memory file for the preload library")?;
    let mut f = std::fs::File::from(fd);
    f.write_all(EMBEDDED).context("cannot fill the preload library's memory file")?;
    rustix::fs::fcntl_add_seals(&f, SealFlags::SHRINK | SealFlags::GROW | SealFlags::WRITE | SealFlags::SEAL)
        .context("cannot seal the preload library's memory file")?;
    // The highest descriptor the program may have: the kernel hands out the
    // lowest free one, so the program's own files come nowhere near it.
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current.unwrap_or(1024);
    let top = soft.clamp(64, 1 << 20) as i32 - 1;
    let fd = match rustix::io::fcntl_dupfd_cloexec(&f, top) {
        Ok(high) => high,
        // The table is full up there: where it was made will do.
        Err(_) => OwnedFd::from(f),
    };
    rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::empty()).context("cannot pass on the preload library's memory file")?;
    Ok(fd)
}
