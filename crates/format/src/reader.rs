//! The zero-copy validating reader.
//!
//! [`Dump::parse`] checks the file header; [`Dump::records`] walks the
//! records, checking every length against the bytes actually present with
//! checked arithmetic, and the trailer's counts and checksum against what
//! it walked. It never allocates and never panics, whatever the input: each
//! problem is an [`Error`] naming the byte offset. Records before a damaged
//! or missing part are yielded intact, so a dump cut short can still be
//! analysed as far as it goes.

use crate::dense::{self, Allocs};
use crate::error::Error;
use crate::items::Packed;
use crate::raw::{self, tag};
use crate::types::{
    Alloc, Backtrace, Header, History, LimitInfo, MemoryInfo, Mode, Module, Process, Reason, SignalInfo, SiteTotal, Static, Thread, Trailer,
};

/// A little-endian cursor over a byte slice that knows its file offset.
#[derive(Clone, Copy)]
struct Cur<'a> {
    data: &'a [u8],
    pos: usize,
    /// File offset of `data[0]`.
    base: u64,
    /// Offset reported for malformed-ness (the record header).
    record: u64,
}

impl<'a> Cur<'a> {
    fn new(data: &'a [u8], base: u64, record: u64) -> Self {
        Cur { data, pos: 0, base, record }
    }
    fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], Error> {
        let end = self.pos.checked_add(n).ok_or(Error::Malformed { offset: self.record, what })?;
        let out = self.data.get(self.pos..end).ok_or(Error::Malformed { offset: self.record, what })?;
        self.pos = end;
        Ok(out)
    }
    fn bytes_u64(&mut self, n: u64, what: &'static str) -> Result<&'a [u8], Error> {
        let n = usize::try_from(n).map_err(|_| Error::Malformed { offset: self.record, what })?;
        self.bytes(n, what)
    }
    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], Error> {
        let b = self.bytes(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }
    fn u8(&mut self, what: &'static str) -> Result<u8, Error> {
        Ok(self.array::<1>(what)?[0])
    }
    fn u16(&mut self, what: &'static str) -> Result<u16, Error> {
        self.array(what).map(u16::from_le_bytes)
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, Error> {
        self.array(what).map(u32::from_le_bytes)
    }
    fn u64(&mut self, what: &'static str) -> Result<u64, Error> {
        self.array(what).map(u64::from_le_bytes)
    }
    fn rest(&self) -> &'a [u8] {
        self.data.get(self.pos..).unwrap_or(&[])
    }
    fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }
    fn expect_end(&self, what: &'static str) -> Result<(), Error> {
        if self.pos == self.data.len() {
            Ok(())
        } else {
            Err(Error::Malformed { offset: self.record, what })
        }
    }
}

/// A dump whose header has been checked.
#[derive(Clone, Copy, Debug)]
pub struct Dump<'a> {
    data: &'a [u8],
    header: Header,
}

impl<'a> Dump<'a> {
    /// Checks the file header.
    pub fn parse(data: &'a [u8]) -> Result<Dump<'a>, Error> {
        let magic = data.get(..raw::MAGIC.len());
        match magic {
            Some(m) if m == raw::MAGIC => {}
            Some(_) => return Err(Error::NotADump),
            None => {
                // A prefix of the magic is a dump cut short; anything else is not a dump.
                if raw::MAGIC.starts_with(data) && !data.is_empty() {
                    return Err(Error::Truncated { offset: data.len() as u64, what: "file header" });
                }
                return Err(Error::NotADump);
            }
        }
        let mut c = Cur::new(data, 0, 0);
        c.pos = raw::MAGIC.len();
        let trunc = |_| Error::Truncated { offset: data.len() as u64, what: "file header" };
        let major = c.u16("major").map_err(trunc)?;
        let minor = c.u16("minor").map_err(trunc)?;
        if major != raw::MAJOR {
            return Err(Error::UnsupportedVersion { major, minor });
        }
        let pointer_size = c.u8("pointer size").map_err(trunc)?;
        if pointer_size != 8 {
            return Err(Error::BadHeader { offset: 12, what: "pointer size is not 8" });
        }
        let endian = c.u8("endianness").map_err(trunc)?;
        if endian != raw::LITTLE_ENDIAN {
            return Err(Error::BadHeader { offset: 13, what: "not little-endian" });
        }
        let mode = Mode::from_u8(c.u8("mode").map_err(trunc)?).ok_or(Error::BadHeader { offset: 14, what: "unknown mode" })?;
        let reason = Reason::from_u8(c.u8("reason").map_err(trunc)?).ok_or(Error::BadHeader { offset: 15, what: "unknown reason" })?;
        let page_size = c.u32("page size").map_err(trunc)?;
        if !page_size.is_power_of_two() || page_size < 512 {
            return Err(Error::BadHeader { offset: 16, what: "page size is not a power of two of at least 512" });
        }
        let pid = c.u32("pid").map_err(trunc)?;
        let time_ns = c.u64("time").map_err(trunc)?;
        let header = Header { major, minor, pointer_size, mode, reason, page_size, pid, time_ns };
        Ok(Dump { data, header })
    }

    /// The file header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The whole file.
    pub fn bytes(&self) -> &'a [u8] {
        self.data
    }

    /// The numbers of ALLOC records and of their pointers that the END
    /// record at the end of the file claims, unverified (a reader's hint
    /// for sizing its tables; the walk of [`Dump::records`] checks them).
    /// `None` when the file does not end with a whole END record.
    pub fn claimed_counts(&self) -> Option<(u64, u64)> {
        if !ends_with_trailer(self.data) {
            return None;
        }
        let payload = &self.data[self.data.len() - raw::END_SIZE..];
        Some((le64(payload, 8), le64(payload, 32)))
    }

    /// The trailer's checksum when the file is complete and its bytes
    /// match it (one CRC pass over the file, no record decoded): what names
    /// a whole, unaltered dump, for caches of its analysis.
    pub fn checksum_if_intact(&self) -> Option<u32> {
        if !ends_with_trailer(self.data) {
            return None;
        }
        let at = self.data.len() - raw::END_SIZE + 64;
        let claimed = le32(self.data, at);
        (crc32fast::hash(&self.data[..at]) == claimed).then_some(claimed)
    }

    /// The records, in file order, ending with the trailer.
    pub fn records(&self) -> Records<'a> {
        let mut crc = crc32fast::Hasher::new();
        crc.update(self.data.get(..raw::FILE_HEADER_SIZE).unwrap_or(&[]));
        Records {
            data: self.data,
            pos: raw::FILE_HEADER_SIZE,
            mode: self.header.mode,
            counted: Trailer::default(),
            crc,
            done: false,
            limit: None,
        }
    }

    /// The records from file offset `from` up to (not including) `to`, for
    /// a reader that already walked the whole file with [`Dump::records`]
    /// and so knows both are record boundaries (say, to split the records
    /// between threads). Each record is still checked; the checksum and
    /// the trailer's counts are not (they cover the whole file).
    pub fn records_between(&self, from: u64, to: u64) -> Records<'a> {
        let to = usize::try_from(to).unwrap_or(usize::MAX).min(self.data.len());
        let from = usize::try_from(from).unwrap_or(usize::MAX).clamp(raw::FILE_HEADER_SIZE, to);
        Records {
            data: self.data,
            pos: from,
            mode: self.header.mode,
            counted: Trailer::default(),
            crc: crc32fast::Hasher::new(),
            done: false,
            limit: Some(to),
        }
    }
}

/// One record.
#[derive(Clone, Copy, Debug)]
pub enum Record<'a> {
    /// PROCESS.
    Process(Process<'a>),
    /// MODULE.
    Module(Module<'a>),
    /// THREAD, with the stack's contents.
    Thread(WithContents<'a, Thread<'a>>),
    /// STATIC, with the segment's contents.
    Static(WithContents<'a, Static<'a>>),
    /// SITE.
    Site(Site<'a>),
    /// ALLOC, with the allocation's contents.
    Alloc(WithContents<'a, Alloc>),
    /// ALLOCS (compact dumps since 1.2): many allocations.
    Allocs(Allocs<'a>),
    /// SIGNAL (since 1.2): the signal the dump was taken for.
    Signal(SignalInfo),
    /// LIMIT (since 1.2): the memory limit a near-limit dump was taken for.
    Limit(LimitInfo),
    /// HISTORY (since 1.2): peak and totals since the program started.
    History(History),
    /// ALLOCATOR (since 1.4): the allocator whose heap the dump read, and
    /// its version (`jemalloc 5.3.0`).
    Allocator(&'a [u8]),
    /// SITE_TOTALS (since 1.5): per-site totals since start and each site
    /// at the recorded peak.
    SiteTotals(SiteTotals<'a>),
    /// MEMORY (since 1.6): the process's resident anonymous memory.
    Memory(MemoryInfo),
    /// The verified trailer.
    End(Trailer),
    /// A record this reader does not know (from a newer minor version).
    Unknown {
        /// Its tag.
        tag: u32,
        /// Its payload.
        payload: &'a [u8],
    },
}

/// A THREAD, STATIC or ALLOC record as the reader yields it: the
/// record's fields, read through it (`t.tid`, `a.size`), and the contents
/// of the region it describes.
#[derive(Clone, Copy, Debug)]
pub struct WithContents<'a, R> {
    /// The record's fields.
    pub record: R,
    /// The region's contents, as the dump's mode stores them.
    pub contents: Contents<'a>,
}

impl<R> core::ops::Deref for WithContents<'_, R> {
    type Target = R;
    fn deref(&self) -> &R {
        &self.record
    }
}

/// The SITE_TOTALS record (since 1.5).
#[derive(Clone, Copy, Debug)]
pub struct SiteTotals<'a> {
    /// The live bytes of the recorded peak (0: none was recorded).
    pub peak_bytes: u64,
    /// When it was recorded, ns since the epoch (0: none).
    pub peak_time_ns: u64,
    rows: &'a [u8],
}

impl<'a> SiteTotals<'a> {
    /// The rows, in the record's order (a padding row, site `u32::MAX`,
    /// is left out).
    pub fn rows(&self) -> impl Iterator<Item = SiteTotal> + 'a {
        self.rows.chunks_exact(raw::SITE_TOTAL_SIZE).filter_map(|b| {
            let w = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
            let site = u32::from_le_bytes(b[0..4].try_into().unwrap_or_default());
            (site != 0 && site != u32::MAX).then(|| SiteTotal {
                site,
                allocations: w(8),
                bytes: w(16),
                temporary: w(24),
                peak_count: w(32),
                peak_bytes: w(40),
            })
        })
    }
}

/// A SITE record.
#[derive(Clone, Copy, Debug)]
pub struct Site<'a> {
    /// Id (never `raw::NO_SITE`).
    pub id: u32,
    frames: &'a [u8],
}

impl<'a> Site<'a> {
    /// Return addresses, innermost first.
    pub fn frames(&self) -> impl ExactSizeIterator<Item = u64> + 'a {
        self.frames.chunks_exact(8).map(|r| le64(r, 0))
    }
}

/// A region's contents as a dump read holds them: the writer's
/// [`Contents`](crate::Contents), its compact pairs read in place.
pub type Contents<'a> = crate::writer::Contents<'a, Pointers<'a>>;

impl<'a> Contents<'a> {
    /// Every candidate pointer word: in compact mode the recorded pairs, in
    /// full mode every 8-byte-aligned word of the region (`base` is the
    /// region's address, used to find the alignment).
    pub fn words(&self, base: u64) -> Words<'a> {
        match *self {
            Contents::Compact { pointers, .. } => Words::Compact(pointers),
            Contents::Full(bytes) => {
                let skip = ((8 - (base % 8)) % 8) as usize;
                let bytes = bytes.get(skip..).unwrap_or(&[]);
                Words::Full { chunks: bytes.chunks_exact(8), off: skip as u64 }
            }
        }
    }
}

/// Iterator of (offset, value) words; see [`Contents::words`].
#[derive(Clone, Debug)]
pub enum Words<'a> {
    /// From compact pairs.
    Compact(Pointers<'a>),
    /// From raw bytes.
    Full {
        /// Remaining aligned words.
        chunks: core::slice::ChunksExact<'a, u8>,
        /// Offset of the next word.
        off: u64,
    },
}

impl Iterator for Words<'_> {
    type Item = (u64, u64);
    fn next(&mut self) -> Option<(u64, u64)> {
        match self {
            Words::Compact(p) => p.next(),
            Words::Full { chunks, off } => {
                let w = chunks.next()?;
                let o = *off;
                *off += 8;
                Some((o, le64(w, 0)))
            }
        }
    }
}

/// The (offset, value) pairs of compact contents.
#[derive(Clone, Copy, Debug)]
pub struct Pointers<'a> {
    entries: &'a [u8],
}

impl Pointers<'_> {
    /// Number of pairs left.
    pub fn len(&self) -> usize {
        self.entries.len() / raw::POINTER_ENTRY
    }
    /// Whether none are left.
    pub fn is_empty(&self) -> bool {
        self.entries.len() < raw::POINTER_ENTRY
    }
}

impl Iterator for Pointers<'_> {
    type Item = (u64, u64);
    fn next(&mut self) -> Option<(u64, u64)> {
        let e = self.entries.get(..raw::POINTER_ENTRY)?;
        let out = (le64(e, 0), le64(e, 8));
        self.entries = self.entries.get(raw::POINTER_ENTRY..).unwrap_or(&[]);
        Some(out)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.len(), Some(self.len()))
    }
}

impl ExactSizeIterator for Pointers<'_> {}

/// The records of a dump; see [`Dump::records`]. After the first error, or
/// after the trailer, it yields nothing more.
#[derive(Clone)]
pub struct Records<'a> {
    data: &'a [u8],
    pos: usize,
    mode: Mode,
    counted: Trailer,
    crc: crc32fast::Hasher,
    done: bool,
    /// Where a [`Dump::records_between`] walk stops.
    limit: Option<usize>,
}

impl<'a> Records<'a> {
    /// File offset of the next record.
    pub fn offset(&self) -> u64 {
        self.pos as u64
    }

    /// Totals of the records read so far.
    pub fn counted(&self) -> &Trailer {
        &self.counted
    }

    fn step(&mut self) -> Result<Option<(u64, Record<'a>)>, Error> {
        let start = self.pos;
        let offset = start as u64;
        if start == self.data.len() {
            return Err(Error::Truncated { offset, what: "the trailer is missing" });
        }
        let head = self.data.get(start..).unwrap_or(&[]);
        let mut c = Cur::new(head, offset, offset);
        let trunc = |_| Error::Truncated { offset, what: "record header" };
        let tag = c.u32("tag").map_err(trunc)?;
        let len = c.u64("length").map_err(trunc)?;
        let available = (head.len() - raw::RECORD_HEADER_SIZE) as u64;
        if len > available {
            // A file that still ends with a whole trailer was not cut short:
            // this length is damaged, not the file truncated.
            if ends_with_trailer(self.data) && tag != tag::END {
                return Err(Error::Malformed { offset, what: "record length runs past the trailer" });
            }
            return Err(Error::Truncated { offset, what: "record runs past the end of the file" });
        }
        // len <= available <= usize::MAX, so the cast is lossless.
        let payload = c.bytes(len as usize, "payload").map_err(trunc)?;
        let end = start + raw::RECORD_HEADER_SIZE + len as usize;
        let whole = self.data.get(start..end).unwrap_or(&[]);
        let p = Cur::new(payload, offset + raw::RECORD_HEADER_SIZE as u64, offset);
        if tag == tag::END {
            // The checksum covers the trailer up to its own field.
            self.crc.update(whole.get(..whole.len().saturating_sub(8)).unwrap_or(&[]));
            let t = self.trailer(p, offset)?;
            self.pos = end;
            if end != self.data.len() {
                return Err(Error::TrailingData { offset: end as u64 });
            }
            return Ok(Some((offset, Record::End(t))));
        }
        let rec = match tag {
            tag::PROCESS => Record::Process(process(p)?),
            tag::MODULE => {
                self.counted.modules += 1;
                Record::Module(module(p)?)
            }
            tag::THREAD => {
                self.counted.threads += 1;
                Record::Thread(thread(p, self.mode)?)
            }
            tag::STATIC => {
                self.counted.statics += 1;
                Record::Static(static_root(p, self.mode)?)
            }
            tag::SITE => {
                self.counted.sites += 1;
                Record::Site(site(p)?)
            }
            tag::ALLOC => {
                let a = alloc(p, self.mode)?;
                self.counted.allocations += 1;
                self.counted.alloc_bytes = self.counted.alloc_bytes.wrapping_add(a.size);
                if let Contents::Compact { pointers: ptrs, .. } = a.contents {
                    self.counted.pointers += ptrs.len() as u64;
                }
                Record::Alloc(a)
            }
            tag::SIGNAL => Record::Signal(signal(p)?),
            tag::ALLOCATOR => {
                if payload.is_empty() || payload.len() > raw::ALLOCATOR_MAX {
                    return Err(Error::Malformed { offset, what: "ALLOCATOR record of the wrong length" });
                }
                Record::Allocator(payload)
            }
            tag::LIMIT => Record::Limit(limit(p)?),
            tag::SITE_TOTALS => {
                let fixed = raw::SITE_TOTALS_FIXED;
                if payload.len() < fixed {
                    return Err(Error::Malformed { offset, what: "SITE_TOTALS record too short" });
                }
                let word = |i: usize| u64::from_le_bytes(payload[i..i + 8].try_into().unwrap_or_default());
                let count = u32::from_le_bytes(payload[16..20].try_into().unwrap_or_default());
                if payload[20..24] != [0; 4] || (payload.len() - fixed) != count as usize * raw::SITE_TOTAL_SIZE {
                    return Err(Error::Malformed { offset, what: "SITE_TOTALS record of the wrong length" });
                }
                Record::SiteTotals(SiteTotals { peak_bytes: word(0), peak_time_ns: word(8), rows: &payload[fixed..] })
            }
            tag::MEMORY => {
                let mut p = p;
                let m = MemoryInfo { resident_anon: p.u64("MEMORY record too short")? };
                p.expect_end("MEMORY record of the wrong length")?;
                Record::Memory(m)
            }
            tag::HISTORY => {
                let mut p = p;
                let h = History {
                    peak_bytes: p.u64("peak")?,
                    total_allocations: p.u64("total allocations")?,
                    total_bytes: p.u64("total bytes")?,
                };
                p.expect_end("HISTORY record of the wrong length")?;
                Record::History(h)
            }
            tag::ALLOCS => {
                if self.mode != Mode::Compact {
                    return Err(Error::Malformed { offset, what: "ALLOCS record in a full dump" });
                }
                let a = dense::allocs(payload, offset)?;
                // Ordinals count the file's allocations in order: a record
                // must start where the ones before it end (only a whole
                // walk knows; a walk between offsets trusts the first one).
                if self.limit.is_none() && a.first != self.counted.allocations {
                    return Err(Error::Malformed { offset, what: "ALLOCS record out of sequence" });
                }
                self.counted.allocations += u64::from(a.count);
                self.counted.alloc_bytes = self.counted.alloc_bytes.wrapping_add(a.bytes);
                self.counted.pointers = self.counted.pointers.wrapping_add(a.pointers);
                Record::Allocs(a)
            }
            _ => Record::Unknown { tag, payload },
        };
        self.counted.records += 1;
        self.crc.update(whole);
        self.pos = end;
        Ok(Some((offset, rec)))
    }

    fn trailer(&self, mut p: Cur<'a>, offset: u64) -> Result<Trailer, Error> {
        if p.data.len() != raw::END_SIZE {
            return Err(Error::Malformed { offset, what: "trailer has the wrong length" });
        }
        let t = Trailer {
            records: p.u64("records")?,
            allocations: p.u64("allocations")?,
            alloc_bytes: p.u64("bytes")?,
            sites: p.u64("sites")?,
            pointers: p.u64("pointers")?,
            threads: p.u32("threads")?,
            statics: p.u32("statics")?,
            modules: p.u32("modules")?,
            pause_ns: {
                let reserved = p.u32("reserved")?;
                if reserved != 0 {
                    return Err(Error::Malformed { offset, what: "reserved trailer field is not zero" });
                }
                p.u64("pause")?
            },
            checksum: p.u32("checksum")?,
        };
        if p.u32("reserved")? != 0 {
            return Err(Error::Malformed { offset, what: "reserved trailer field is not zero" });
        }
        let computed = self.crc.clone().finalize();
        if computed != t.checksum {
            return Err(Error::ChecksumMismatch { offset, stored: t.checksum, computed });
        }
        let c = &self.counted;
        let checks: [(&'static str, u64, u64); 8] = [
            ("records", t.records, c.records),
            ("allocations", t.allocations, c.allocations),
            ("allocated bytes", t.alloc_bytes, c.alloc_bytes),
            ("sites", t.sites, c.sites),
            ("pointers", t.pointers, c.pointers),
            ("threads", t.threads.into(), c.threads.into()),
            ("static roots", t.statics.into(), c.statics.into()),
            ("modules", t.modules.into(), c.modules.into()),
        ];
        for (what, stored, counted) in checks {
            if stored != counted {
                return Err(Error::CountMismatch { offset, what, stored, counted });
            }
        }
        Ok(t)
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<(u64, Record<'a>), Error>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.limit.is_some_and(|l| self.pos >= l) {
            return None;
        }
        match self.step() {
            Ok(Some(r)) => {
                if matches!(r.1, Record::End(_)) {
                    self.done = true;
                }
                Some(Ok(r))
            }
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

impl core::iter::FusedIterator for Records<'_> {}

fn process(mut p: Cur<'_>) -> Result<Process<'_>, Error> {
    let off = p.record;
    let backtrace = Backtrace::from_u8(p.u8("backtrace mode")?).ok_or(Error::Malformed { offset: off, what: "unknown backtrace mode" })?;
    let flags = p.u8("flags")?;
    p.bytes(2, "reserved")?;
    let max_frames = p.u32("max frames")?;
    let sample_mean = p.u64("sample mean")?;
    let exe_len = p.u32("executable length")?;
    let cmd_len = p.u32("command line length")?;
    let exe = p.bytes_u64(exe_len.into(), "executable path runs past the record")?;
    let cmdline = p.bytes_u64(cmd_len.into(), "command line runs past the record")?;
    p.expect_end("extra bytes after the command line")?;
    Ok(Process { backtrace, max_frames, sample_mean, exe, cmdline, flags })
}

fn module(mut p: Cur<'_>) -> Result<Module<'_>, Error> {
    let bias = p.u64("bias")?;
    let path_len = p.u32("path length")?;
    let build_id_len = p.u16("build id length")?;
    p.u16("reserved")?;
    let nseg = p.u32("segment count")?;
    p.u32("reserved")?;
    let path = p.bytes_u64(path_len.into(), "module path runs past the record")?;
    let build_id = p.bytes_u64(build_id_len.into(), "build id runs past the record")?;
    let seg_bytes = u64::from(nseg) * raw::SEGMENT_SIZE as u64;
    let segments = p.bytes_u64(seg_bytes, "segments run past the record")?;
    p.expect_end("extra bytes after the segments")?;
    Ok(Module { bias, path, build_id, segments: Packed::new(segments) })
}

fn contents<'a>(p: &mut Cur<'a>, mode: Mode, size: u64) -> Result<Contents<'a>, Error> {
    match mode {
        Mode::Full => {
            let bytes = p.bytes_u64(size, "contents shorter than the region size")?;
            p.expect_end("contents longer than the region size")?;
            Ok(Contents::Full(bytes))
        }
        Mode::Compact => {
            let n = p.u64("pointer count")?;
            let rest = p.rest();
            let want = n.checked_mul(raw::POINTER_ENTRY as u64);
            if want != Some(rest.len() as u64) {
                return Err(Error::Malformed { offset: p.record, what: "pointer count disagrees with the record length" });
            }
            let entries = rest;
            // Every offset must lie inside the region.
            let mut ptrs = Pointers { entries };
            if ptrs.any(|(off, _)| off >= size || size - off < 8) {
                return Err(Error::Malformed { offset: p.record, what: "pointer offset outside the region" });
            }
            p.pos = p.data.len();
            let _ = p.offset();
            let pointers = Pointers { entries };
            Ok(Contents::Compact { count: pointers.len() as u64, pointers })
        }
    }
}

fn thread(mut p: Cur<'_>, mode: Mode) -> Result<WithContents<'_, Thread<'_>>, Error> {
    let off = p.record;
    let tid = p.u32("tid")?;
    let flags = p.u32("flags")?;
    let stack_start = p.u64("stack start")?;
    let stack_end = p.u64("stack end")?;
    let tls = p.u64("tls")?;
    let name_len = p.u16("name length")?;
    let nregs = p.u16("register count")?;
    p.u32("reserved")?;
    let size = stack_end.checked_sub(stack_start).ok_or(Error::Malformed { offset: off, what: "stack end below stack start" })?;
    let name = p.bytes(name_len.into(), "thread name runs past the record")?;
    let regs = p.bytes(usize::from(nregs) * 8, "registers run past the record")?;
    let contents = contents(&mut p, mode, size)?;
    Ok(WithContents { record: Thread { tid, flags, stack_start, stack_end, tls, name, regs: Packed::new(regs) }, contents })
}

fn static_root(mut p: Cur<'_>, mode: Mode) -> Result<WithContents<'_, Static<'_>>, Error> {
    let address = p.u64("address")?;
    let size = p.u64("size")?;
    let module = p.u32("module")?;
    let name_len = p.u16("name length")?;
    p.u16("reserved")?;
    let name = p.bytes(name_len.into(), "static name runs past the record")?;
    if address.checked_add(size).is_none() {
        return Err(Error::Malformed { offset: p.record, what: "static region wraps the address space" });
    }
    let contents = contents(&mut p, mode, size)?;
    Ok(WithContents { record: Static { address, size, module, name }, contents })
}

fn signal(mut p: Cur<'_>) -> Result<SignalInfo, Error> {
    let signal = p.u32("signal")?;
    let code = p.u32("signal code")? as i32;
    let tid = p.u32("signal thread")?;
    let r1 = p.u32("reserved")?;
    let address = p.u64("fault address")?;
    let sender = p.u32("sender")?;
    let r2 = p.u32("reserved")?;
    p.expect_end("SIGNAL record of the wrong length")?;
    if r1 != 0 || r2 != 0 || signal == 0 || signal > 64 {
        return Err(Error::Malformed { offset: p.record, what: "SIGNAL record with a bad signal number or reserved bits" });
    }
    Ok(SignalInfo { signal, code, tid, address, sender })
}

fn limit(mut p: Cur<'_>) -> Result<LimitInfo, Error> {
    let kind = p.u32("limit kind")?;
    let reserved = p.u32("reserved")?;
    let bytes = p.u64("limit")?;
    let used = p.u64("limit usage")?;
    p.expect_end("LIMIT record of the wrong length")?;
    if reserved != 0 || !(1..=6).contains(&kind) || bytes == 0 {
        return Err(Error::Malformed { offset: p.record, what: "LIMIT record with an unknown kind, no limit or reserved bits" });
    }
    Ok(LimitInfo { kind, bytes, used })
}

fn site(mut p: Cur<'_>) -> Result<Site<'_>, Error> {
    let id = p.u32("site id")?;
    if id == raw::NO_SITE {
        return Err(Error::Malformed { offset: p.record, what: "site id 0 is reserved" });
    }
    let n = p.u32("frame count")?;
    let frames = p.bytes_u64(u64::from(n) * 8, "frames run past the record")?;
    p.expect_end("extra bytes after the frames")?;
    Ok(Site { id, frames })
}

fn alloc(mut p: Cur<'_>, mode: Mode) -> Result<WithContents<'_, Alloc>, Error> {
    let address = p.u64("address")?;
    let size = p.u64("size")?;
    let site = p.u32("site")?;
    let align_log2 = p.u8("alignment")?;
    let flags = p.u8("flags")?;
    p.u16("reserved")?;
    if address.checked_add(size).is_none() {
        return Err(Error::Malformed { offset: p.record, what: "allocation wraps the address space" });
    }
    if align_log2 >= 64 {
        return Err(Error::Malformed { offset: p.record, what: "alignment of 2^64 or more" });
    }
    let first_word = match mode {
        Mode::Compact => p.u64("first word")?,
        Mode::Full => {
            let mut w = [0u8; 8];
            let rest = p.rest();
            let n = rest.len().min(8).min(usize::try_from(size).unwrap_or(usize::MAX));
            w[..n].copy_from_slice(&rest[..n]);
            u64::from_le_bytes(w)
        }
    };
    let contents = contents(&mut p, mode, size)?;
    Ok(WithContents { record: Alloc { address, size, site, align_log2, flags, first_word }, contents })
}

/// Whether `data` (a whole file, or only its last
/// [`raw::RECORD_HEADER_SIZE`] + [`raw::END_SIZE`] bytes) ends with a whole
/// END record: the writer finished the file.
pub fn ends_with_trailer(data: &[u8]) -> bool {
    let Some(start) = data.len().checked_sub(raw::RECORD_HEADER_SIZE + raw::END_SIZE) else { return false };
    let h = &data[start..];
    le32(h, 0) == tag::END && le64(h, 4) == raw::END_SIZE as u64
}

/// The little-endian word at `at` in `b`, 0 where `b` is too short.
pub(crate) fn le64(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        w.copy_from_slice(s);
    }
    u64::from_le_bytes(w)
}

/// The little-endian 32-bit word at `at` in `b`, 0 where `b` is too short.
pub(crate) fn le32(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        w.copy_from_slice(s);
    }
    u32::from_le_bytes(w)
}
