//! The preload library the `heapdump` executable carries (`build.rs`
//! embeds it), so that a `heapdump` copied alone or installed with `cargo
//! install` can trace programs.
//!
//! The first `run` writes it to a per-user cache directory
//! (`$XDG_CACHE_HOME/heapdump`, else `~/.cache/heapdump`) made with mode
//! 0700, under a name that carries a hash of its contents; every later
//! `run` checks, before handing it to the loader, that the directory is
//! still private to this user and that the file is this user's, not
//! writable by others, and byte for byte the one embedded, and writes it
//! again when it is not (a stale or damaged copy is replaced, never used).

use anyhow::{bail, Context, Result};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

static EMBEDDED: &[u8] = include_bytes!(env!("HEAPDUMP_EMBEDDED_PRELOAD"));

/// FNV-1a, 64 bits: names the cached copy by its contents (the copy is
/// compared byte for byte anyway).
fn hash(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3))
}

fn cache_base() -> Result<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from).filter(|p| p.is_absolute()) {
        return Ok(x);
    }
    match std::env::var_os("HOME").map(PathBuf::from).filter(|p| p.is_absolute()) {
        Some(h) => Ok(h.join(".cache")),
        None => bail!("no cache directory for the preload library (neither XDG_CACHE_HOME nor HOME is set): set HEAPDUMP_PRELOAD"),
    }
}

/// Whether `m` is owned by this user and writable by no one else.
fn private(m: &std::fs::Metadata) -> bool {
    m.uid() == rustix::process::geteuid().as_raw() && m.mode() & 0o022 == 0
}

/// Whether `lib` (a library found beside the executable) may be loaded
/// into the traced program: a regular file of this user, writable by no
/// one else, in a directory of this user writable by no one else.
pub fn trusted_beside(lib: &Path) -> bool {
    let Ok(m) = std::fs::symlink_metadata(lib) else { return false };
    let Some(dir) = lib.parent() else { return false };
    let Ok(d) = std::fs::metadata(dir) else { return false };
    m.is_file() && private(&m) && private(&d)
}

/// Whether `path` is this user's private, unaltered copy of the library.
fn intact(path: &Path) -> bool {
    let Ok(m) = std::fs::symlink_metadata(path) else { return false };
    m.is_file() && private(&m) && m.len() == EMBEDDED.len() as u64 && std::fs::read(path).is_ok_and(|b| b == EMBEDDED)
}

/// `$XDG_CACHE_HOME/heapdump` (or `~/.cache/heapdump`), and `sub` below
/// it when given: made with mode 0700, and refused unless it is a
/// directory of this user that no one else may write to.
pub fn private_dir(sub: Option<&str>) -> Result<PathBuf> {
    let base = cache_base()?;
    std::fs::create_dir_all(&base).with_context(|| format!("cannot create {}", base.display()))?;
    let mut dir = base.join("heapdump");
    for d in std::iter::once(None).chain(sub.map(Some)) {
        if let Some(s) = d {
            dir = dir.join(s);
        }
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(anyhow::Error::new(e).context(format!("cannot create {}", dir.display()))),
        }
        let m = std::fs::symlink_metadata(&dir).with_context(|| format!("cannot read {}", dir.display()))?;
        if !m.is_dir() || !private(&m) {
            bail!(
                "{} is not a private directory of this user (owner {}, mode {:o}): remove it, or set HEAPDUMP_PRELOAD",
                dir.display(),
                m.uid(),
                m.mode() & 0o7777
            );
        }
    }
    Ok(dir)
}

/// The embedded library, in the private cache (written when missing or
/// not intact).
pub fn cached() -> Result<PathBuf> {
    let dir = private_dir(None)?;
    let name = format!("libheapdump_preload-{:016x}.so", hash(EMBEDDED));
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
