//! The per-user cache directory (`$XDG_CACHE_HOME/heapdump`, else
//! `~/.cache/heapdump`) and the checks that keep it private: the analysis
//! caches live in its `analysis` folder (`open.rs` asks for it), and the
//! command line keeps its copy of the preload library at its top (it calls
//! [`private_dir`] and [`checked_chain`] for that; one set of checks for
//! both).
//!
//! A directory is used only when every directory from `/` down to it is
//! owned by root or this user and writable by no one else (a sticky
//! directory such as `/tmp` counts when the entry below it is root's or
//! this user's, since no one else may rename it), as OpenSSH's StrictModes
//! asks of `~/.ssh`; the path handed back is resolved, with no symbolic
//! link left in it. Nothing is ever created in a directory another user
//! can write to: a missing directory is made (mode 0700) only under one
//! that is this user's (or root's) alone.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

/// Why a directory was refused, or could not be read or made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DirError {
    /// A check failed: the message names the directory and why.
    #[error("{0}")]
    Refused(String),
    /// The system refused a look or a `mkdir`.
    #[error("{what}")]
    Io {
        /// What was being done (`cannot read PATH`).
        what: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> DirError {
    move |source| DirError::Io { what, source }
}

fn cache_base() -> Result<PathBuf, DirError> {
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from).filter(|p| p.is_absolute()) {
        return Ok(x);
    }
    match std::env::var_os("HOME").map(PathBuf::from).filter(|p| p.is_absolute()) {
        Some(h) => Ok(h.join(".cache")),
        None => Err(DirError::Refused("no cache directory (neither XDG_CACHE_HOME nor HOME is set)".into())),
    }
}

fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Whether `m` is owned by this user and writable by no one else.
pub fn private(m: &std::fs::Metadata) -> bool {
    m.uid() == euid() && m.mode() & 0o022 == 0
}

/// Why the directory `m` describes may not lie on the way to what is
/// loaded or kept, if it may not: it must be root's or this user's, and
/// writable by no one else unless sticky (then no one else may rename
/// what is in it).
fn unsafe_ancestor(m: &std::fs::Metadata) -> Option<String> {
    if !m.is_dir() {
        return Some("not a directory".into());
    }
    if m.uid() != 0 && m.uid() != euid() {
        return Some(format!("owned by uid {}", m.uid()));
    }
    if m.mode() & 0o022 != 0 && m.mode() & 0o1000 == 0 {
        return Some(format!("writable by others (mode {:o})", m.mode() & 0o7777));
    }
    None
}

/// `path` resolved (no symbolic link left), after checking that every
/// directory from `/` down to it is root's or this user's and writable by
/// no one else (sticky ones excepted, see the module's doc); an error
/// names the first that is not, why, and `what` another user could then
/// swap (`what heapdump loads or writes`, `the analysis cache`).
pub fn checked_chain(path: &Path, what: &str) -> Result<PathBuf, DirError> {
    let real = std::fs::canonicalize(path).map_err(io(format!("cannot resolve {}", path.display())))?;
    let mut at = PathBuf::new();
    for c in real.components() {
        at.push(c);
        let m = std::fs::symlink_metadata(&at).map_err(io(format!("cannot read {}", at.display())))?;
        if let Some(why) = unsafe_ancestor(&m) {
            return Err(DirError::Refused(format!("{} is {why}: another user could swap {what} below it", at.display())));
        }
    }
    Ok(real)
}

/// Makes `dir` (mode 0700) and whatever it lacks above it, each only in a
/// directory this user or root owns and no one else may write to, then
/// checks the whole chain; returns it resolved.
fn make_checked(dir: &Path, what: &str) -> Result<PathBuf, DirError> {
    let mut at = PathBuf::new();
    for c in dir.components() {
        if matches!(c, Component::ParentDir | Component::CurDir) {
            return Err(DirError::Refused(format!("{} is not a plain absolute path", dir.display())));
        }
        let parent = at.clone();
        at.push(c);
        match std::fs::symlink_metadata(&at) {
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(format!("cannot read {}", at.display()))(e)),
        }
        // Never written into a directory others may write to, sticky or
        // not: they could have made the name first, or fill it.
        let pm = std::fs::metadata(&parent).map_err(io(format!("cannot read {}", parent.display())))?;
        if (pm.uid() != 0 && pm.uid() != euid()) || pm.mode() & 0o022 != 0 {
            return Err(DirError::Refused(format!(
                "{} is missing and {} is not this user's alone (owner {}, mode {:o}): heapdump writes nothing there",
                at.display(),
                parent.display(),
                pm.uid(),
                pm.mode() & 0o7777
            )));
        }
        match std::fs::DirBuilder::new().mode(0o700).create(&at) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(format!("cannot create {}", at.display()))(e)),
        }
    }
    checked_chain(dir, what)
}

/// `$XDG_CACHE_HOME/heapdump` (or `~/.cache/heapdump`), and `sub` below
/// it when given, resolved: made with mode 0700 where missing, and refused
/// unless every directory from `/` down is root's or this user's and
/// writable by no one else, and the last ones are this user's alone.
/// `what` names what is kept there, for the error (see [`checked_chain`]).
pub fn private_dir(sub: Option<&str>, what: &str) -> Result<PathBuf, DirError> {
    private_dir_in(&cache_base()?, sub, what)
}

/// [`private_dir`] under the cache base `base`.
fn private_dir_in(base: &Path, sub: Option<&str>, what: &str) -> Result<PathBuf, DirError> {
    let mut dir = base.join("heapdump");
    if let Some(s) = sub {
        dir = dir.join(s);
    }
    let real = make_checked(&dir, what)?;
    let mut own = Some(real.as_path());
    for _ in 0..1 + usize::from(sub.is_some()) {
        let Some(d) = own else { break };
        let m = std::fs::symlink_metadata(d).map_err(io(format!("cannot read {}", d.display())))?;
        if !m.is_dir() || !private(&m) {
            return Err(DirError::Refused(format!(
                "{} is not a private directory of this user (owner {}, mode {:o}): remove it",
                d.display(),
                m.uid(),
                m.mode() & 0o7777
            )));
        }
        own = d.parent();
    }
    Ok(real)
}

/// The analysis caches' directory, `$XDG_CACHE_HOME/heapdump/analysis`
/// (see [`private_dir`]); an error says it is the analysis cache's.
pub fn analysis_dir() -> Result<PathBuf, DirError> {
    analysis_dir_in(&cache_base()?)
}

fn analysis_dir_in(base: &Path) -> Result<PathBuf, DirError> {
    private_dir_in(base, Some("analysis"), "the analysis cache").map_err(|e| match e {
        DirError::Refused(m) => DirError::Refused(format!("no analysis cache: {m}")),
        DirError::Io { what, source } => DirError::Io { what: format!("no analysis cache: {what}"), source },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("heapdump-private-dir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        d
    }

    /// Made where missing, 0700 each, and handed back resolved.
    #[test]
    fn the_analysis_directory_is_made_private() {
        let d = scratch("made");
        let dir = analysis_dir_in(&d.join("base")).unwrap();
        assert_eq!(dir, d.canonicalize().unwrap().join("base/heapdump/analysis"));
        for p in [dir.as_path(), dir.parent().unwrap()] {
            assert_eq!(std::fs::metadata(p).unwrap().permissions().mode() & 0o777, 0o700, "{p:?}");
        }
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Nothing is made in a directory others may write to, and the error
    /// says it is the analysis cache that is refused.
    #[test]
    fn a_base_others_may_write_to_is_refused_naming_the_analysis_cache() {
        let d = scratch("open");
        let open = d.join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = analysis_dir_in(&open.join("base")).unwrap_err().to_string();
        assert!(e.starts_with("no analysis cache: ") && e.contains("heapdump writes nothing there"), "{e}");
        assert!(!open.join("base").exists(), "nothing made");
        // An existing chain through it: refused too, naming what could be swapped.
        std::fs::create_dir_all(open.join("base/heapdump/analysis")).unwrap();
        let e = analysis_dir_in(&open.join("base")).unwrap_err().to_string();
        assert!(e.contains("another user could swap the analysis cache below it"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
