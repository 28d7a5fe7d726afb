//! Dumps already checked against their checksum, remembered by the file's
//! identity. A cache is keyed by the dump's checksum, which its bytes must
//! match before a cache is looked at: at 100 M blocks that is 1.7 GB read
//! and hashed, most of a second from a cold disk and a fifth of one from a
//! warm one, paid again by every later question and by every opening of
//! the viewer. So, as git's index and make trust a file's `stat` for
//! "unchanged since I last read it", the checksum found good is kept in
//! the (private) cache directory under the file's identity: its device,
//! inode, length, modification and status-change times (the kernel sets
//! `ctime` to the clock at every write, truncation, rename or change of
//! mode; no call sets it back). The same identity later means the same
//! bytes, and the checksum is taken as checked; any change to the file
//! makes another identity, and the bytes are hashed again.
//!
//! The race git calls "racy clean": a file written within the clock's
//! tick after its identity was taken keeps the same times. So an identity
//! is only remembered when the file's last change is [`SETTLED`] older
//! than the moment its identity was taken (before its bytes were read):
//! a dump read just as it is written is hashed at every question until it
//! has settled.
//!
//! The file (`dumps.hdseen`, sealed like every cache file, bounded by
//! itself: never evicted, it would otherwise push out the files it serves
//! and be pushed out by them): the magic `HDSEEN\x02\0`, a count, then per
//! dump the identity's seven words, the tool version's hash and the
//! checksum (u64), the most recent last, at most [`KEPT`] of them.

use crate::cache_file::{map_checked, write_apart, Reader};
use std::path::Path;
use std::time::{Duration, SystemTime};

const MAGIC: &[u8; 8] = b"HDSEEN\x02\0";

/// The extension of the file remembering the dumps checked.
pub(crate) const EXT: &str = "hdseen";

/// Its name in the caches' directory.
const FILE: &str = "dumps.hdseen";

/// The most dumps remembered (the oldest forgotten first): as many as the
/// caches' directory keeps files.
pub(crate) const KEPT: usize = 64;

/// How much older than the moment its identity was taken a file's last
/// change must be for the identity to be remembered (see the module's
/// text): far beyond any filesystem's clock tick.
pub(crate) const SETTLED: Duration = Duration::from_secs(2);

/// What the filesystem says of a file that changes when its bytes do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Identity {
    /// Device, inode, length, modification time (seconds, nanoseconds),
    /// status-change time (seconds, nanoseconds).
    words: [u64; 7],
}

impl Identity {
    /// The identity `fstat` gave (`m`).
    pub(crate) fn of(m: &std::fs::Metadata) -> Identity {
        use std::os::unix::fs::MetadataExt;
        Identity { words: [m.dev(), m.ino(), m.len(), m.mtime() as u64, m.mtime_nsec() as u64, m.ctime() as u64, m.ctime_nsec() as u64] }
    }

    /// When the file last changed.
    fn changed(&self) -> SystemTime {
        let (s, ns) = (self.words[5] as i64, self.words[6] as u32);
        match u64::try_from(s) {
            Ok(s) => SystemTime::UNIX_EPOCH + Duration::new(s, ns.min(999_999_999)),
            // Before 1970: settled by any measure.
            Err(_) => SystemTime::UNIX_EPOCH,
        }
    }
}

/// One dump remembered: its identity's words, the version's hash, the
/// checksum.
type Entry = ([u64; 7], u64, u64);

/// The dumps remembered in `dir`, oldest first (none when the file is
/// missing, damaged or not one of these).
fn entries(dir: &Path) -> Vec<Entry> {
    let read = || -> Option<Vec<Entry>> {
        let sealed = map_checked(&dir.join(FILE)).ok()??;
        let mut r = Reader::body(&sealed);
        if r.take(8).ok()? != MAGIC {
            return None;
        }
        let n = usize::try_from(r.u64().ok()?).ok().filter(|&n| n <= KEPT)?;
        let mut all = Vec::with_capacity(n);
        for _ in 0..n {
            let mut words = [0u64; 7];
            for w in &mut words {
                *w = r.u64().ok()?;
            }
            all.push((words, r.u64().ok()?, r.u64().ok()?));
        }
        r.end().ok()?;
        Some(all)
    };
    read().unwrap_or_default()
}

/// The checksum a dump of identity `id` was found to match, when this
/// tool's version (`version`) remembered one in `dir`.
pub(crate) fn recall(dir: &Path, id: &Identity, version: &str) -> Option<u32> {
    let v = heapdump_format::fnv1a64(version.as_bytes());
    entries(dir).iter().rev().find(|e| e.0 == id.words && e.1 == v).and_then(|e| u32::try_from(e.2).ok())
}

/// Remembers that the dump of identity `id`, taken at `taken`, matched
/// `checksum`, when it had settled by then (see [`SETTLED`]); whether it
/// was (a failure only means the next question hashes the dump again;
/// two questions remembering at once may keep only one of their dumps).
pub(crate) fn remember(dir: &Path, id: &Identity, taken: SystemTime, version: &str, checksum: u32) -> bool {
    if id.changed().checked_add(SETTLED).is_none_or(|settled| settled > taken) {
        return false;
    }
    let v = heapdump_format::fnv1a64(version.as_bytes());
    let mut all = entries(dir);
    all.retain(|e| e.0 != id.words || e.1 != v);
    all.push((id.words, v, u64::from(checksum)));
    let all = &all[all.len().saturating_sub(KEPT)..];
    write_apart(&dir.join(FILE), |o| {
        o.raw(MAGIC);
        o.u64(all.len() as u64);
        for (words, v, c) in all {
            for &w in words {
                o.u64(w);
            }
            o.u64(*v);
            o.u64(*c);
        }
    })
    .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("heapdump-seen-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn identity_of(path: &Path) -> Identity {
        Identity::of(&std::fs::metadata(path).unwrap())
    }

    /// A moment after which every file written so far has settled.
    fn later() -> SystemTime {
        SystemTime::now() + SETTLED + Duration::from_millis(10)
    }

    /// A settled file's checksum is recalled under its identity and this
    /// version only; a write to the file (same length, same bytes even)
    /// gives it another identity.
    #[test]
    fn a_checksum_is_recalled_for_the_same_file_unchanged_only() {
        let d = dir("recall");
        let f = d.join("dump");
        std::fs::write(&f, b"sixteen bytes ok").unwrap();
        let id = identity_of(&f);
        assert!(remember(&d, &id, later(), "v1", 0xfeed));
        assert_eq!(recall(&d, &id, "v1"), Some(0xfeed));
        assert_eq!(recall(&d, &id, "v2"), None, "another version's");
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&f, b"sixteen bytes ok").unwrap();
        let id2 = identity_of(&f);
        assert_ne!(id2, id, "a write changes the identity");
        assert_eq!(recall(&d, &id2, "v1"), None);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A file changed less than SETTLED before its identity was taken is
    /// not remembered: a write in the same clock tick would not show.
    #[test]
    fn a_file_just_written_is_not_remembered() {
        let d = dir("racy");
        let f = d.join("dump");
        std::fs::write(&f, b"x").unwrap();
        let id = identity_of(&f);
        assert!(!remember(&d, &id, SystemTime::now(), "v1", 7));
        assert_eq!(recall(&d, &id, "v1"), None);
        assert!(!d.join(FILE).exists());
        let _ = std::fs::remove_dir_all(&d);
    }

    /// The file keeps the last KEPT dumps, one entry each however often
    /// remembered; a damaged file remembers none.
    #[test]
    fn the_most_recent_dumps_are_kept_and_a_damaged_file_believed_for_none() {
        let d = dir("bounded");
        let id = |i: u64| Identity { words: [1, i, 3, 4, 5, 6, 7] };
        for i in 0..KEPT as u64 + 10 {
            assert!(remember(&d, &id(i), later(), "v1", i as u32));
            assert!(remember(&d, &id(0), later(), "v1", 1000), "remembered again, the most recent");
        }
        assert_eq!(entries(&d).len(), KEPT);
        assert_eq!(recall(&d, &id(0), "v1"), Some(1000));
        assert_eq!(recall(&d, &id(10), "v1"), None, "the oldest forgotten");
        assert_eq!(recall(&d, &id(KEPT as u64 + 9), "v1"), Some(KEPT as u32 + 9));
        let good = std::fs::read(d.join(FILE)).unwrap();
        let mut bad = good.clone();
        bad[40] ^= 1;
        std::fs::write(d.join(FILE), &bad).unwrap();
        assert_eq!(recall(&d, &id(0), "v1"), None, "a flipped bit");
        assert!(entries(&d).is_empty());
        std::fs::write(d.join(FILE), &good).unwrap();
        assert_eq!(recall(&d, &id(0), "v1"), Some(1000));
        let _ = std::fs::remove_dir_all(&d);
    }
}
