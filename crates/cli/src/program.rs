//! What `run` learns of the program before it starts it: whether the
//! preload library can be loaded into it at all.

use anyhow::Result;
use std::ffi::OsStr;

/// Refuses, before anything starts, a program the preload library cannot
/// trace.
pub fn check_preloadable(_program: &OsStr) -> Result<()> {
    Ok(())
}
