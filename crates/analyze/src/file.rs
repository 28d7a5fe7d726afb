//! Opening a dump: the one place that maps a file into memory.

use crate::error::{AnalyzeError, Result};
use heapdump_format::Dump;
use std::path::{Path, PathBuf};

/// A dump file mapped into memory.
pub struct DumpFile {
    path: PathBuf,
    map: Option<memmap2::Mmap>,
    /// The mapped file's identity and when it was taken (see `seen.rs`).
    identity: Option<(crate::seen::Identity, std::time::SystemTime)>,
}

impl DumpFile {
    /// Maps `path` read-only.
    pub fn open(path: impl AsRef<Path>) -> Result<DumpFile> {
        let path = path.as_ref().to_path_buf();
        // A FIFO, a device or a directory given as the dump is refused at
        // once (reading a FIFO waits for a writer: `summary` would hang); an
        // empty file is simply not a dump.
        let mapped = crate::input::map_regular_stated(&path).map_err(|source| AnalyzeError::Io { path: path.clone(), source })?;
        let identity = mapped.as_ref().map(|(_, m)| (crate::seen::Identity::of(m), std::time::SystemTime::now()));
        Ok(DumpFile { path, map: mapped.map(|(m, _)| m), identity })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }

    /// The file's identity as the descriptor mapped said it (`None`: an
    /// empty file), and when that was asked.
    pub(crate) fn identity(&self) -> Option<(crate::seen::Identity, std::time::SystemTime)> {
        self.identity
    }

    /// Parses the header.
    pub fn dump(&self) -> Result<Dump<'_>> {
        Dump::parse(self.bytes()).map_err(|source| AnalyzeError::Format { path: self.path.clone(), source })
    }
}
