//! Opening a dump: the one place that maps a file into memory.

use crate::error::{AnalyzeError, Result};
use heapdump_format::Dump;
use std::path::{Path, PathBuf};

/// A dump file mapped into memory.
pub struct DumpFile {
    path: PathBuf,
    map: Option<memmap2::Mmap>,
}

impl DumpFile {
    /// Maps `path` read-only.
    pub fn open(path: impl AsRef<Path>) -> Result<DumpFile> {
        let path = path.as_ref().to_path_buf();
        let file = std::fs::File::open(&path).map_err(|source| AnalyzeError::Io { path: path.clone(), source })?;
        let len = file.metadata().map_err(|source| AnalyzeError::Io { path: path.clone(), source })?.len();
        if len == 0 {
            // mmap of an empty file fails; an empty file is simply not a dump.
            return Ok(DumpFile { path, map: None });
        }
        // SAFETY: the mapping is read-only and private. Dumps are written
        // once, with O_EXCL, and never modified in place; a file truncated
        // by another process while mapped would raise SIGBUS, which is the
        // accepted risk of mapping (as ripgrep's searcher documents).
        #[allow(unsafe_code)]
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|source| AnalyzeError::Io { path: path.clone(), source })?;
        Ok(DumpFile { path, map: Some(map) })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }

    /// Parses the header.
    pub fn dump(&self) -> Result<Dump<'_>> {
        Dump::parse(self.bytes()).map_err(|source| AnalyzeError::Format { path: self.path.clone(), source })
    }
}
