//! Memory made of a few runs of bytes and their mappings, with a library's
//! file at hand or not (a core, a live process): what the walkers' unit
//! tests read.

use crate::error::{Error, Result};
use crate::memory::{Map, Memory};
use std::path::{Path, PathBuf};

pub(crate) struct Fake {
    pub(crate) maps: Vec<Map>,
    pub(crate) runs: Vec<(u64, Vec<u8>)>,
    pub(crate) file: Option<PathBuf>,
}

impl Memory for Fake {
    fn maps(&self) -> &[Map] {
        &self.maps
    }

    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        for (start, bytes) in &self.runs {
            let Some(off) = addr.checked_sub(*start) else { continue };
            if let Some(b) = bytes.get(off as usize..off as usize + buf.len()) {
                buf.copy_from_slice(b);
                return Ok(());
            }
        }
        Err(Error::Unreadable { addr, len: buf.len() as u64, why: crate::Unread::NotMapped })
    }

    fn host_file(&self, path: &str) -> Option<std::io::Result<std::fs::File>> {
        self.file.as_ref().map(|f| {
            assert_eq!(Path::new(path), f);
            std::fs::File::open(f)
        })
    }
}
