//! The allocation-free writer.
//!
//! Written by hand rather than with a serialization crate because it runs
//! inside the traced process, possibly inside its allocator or with the
//! world stopped: it owns no heap memory, stages bytes in a caller-supplied
//! buffer, and hands them to a [`Sink`] (a file descriptor via raw
//! `write(2)`). Every failure is returned as a [`WriteError`] value.

use crate::dense::{self, Link};
use crate::error::WriteError;
use crate::items::Items;
use crate::raw::{self, tag};
use crate::types::{
    Alloc, Header, History, LimitInfo, MemoryInfo, Mode, Module, Process, Segment, SignalInfo, SiteTotal, Static, Thread, Trailer,
};

/// Where dump bytes go.
///
/// # Signal safety
/// Implementations used inside a traced process must not allocate, block on
/// a lock or panic.
pub trait Sink {
    /// Writes all of `data` or fails with an `errno`.
    fn write_all(&mut self, data: &[u8]) -> Result<(), WriteError>;
}

/// A sink that collects the dump in memory (tests, tools; never the
/// runtime, which must not allocate).
#[cfg(feature = "std")]
impl Sink for std::vec::Vec<u8> {
    fn write_all(&mut self, data: &[u8]) -> Result<(), WriteError> {
        self.extend_from_slice(data);
        Ok(())
    }
}

/// A sink over a raw file descriptor, writing with `write(2)`: retries on
/// `EINTR`, continues after short writes, reports every other error.
#[derive(Debug)]
pub struct FdSink {
    fd: i32,
}

impl FdSink {
    /// Wraps `fd`. The descriptor is not closed when the sink is dropped.
    pub const fn new(fd: i32) -> FdSink {
        FdSink { fd }
    }
}

impl Sink for FdSink {
    // The format's own `no_std` file output, used by the runtime's dumps:
    // the one C library call of this crate (clippy.toml keeps the runtime's
    // others in its sys/ room).
    #[allow(clippy::disallowed_methods)]
    fn write_all(&mut self, mut data: &[u8]) -> Result<(), WriteError> {
        while !data.is_empty() {
            // SAFETY: `data` is a valid, initialised slice for its whole
            // length; write(2) reads at most `data.len()` bytes from it.
            let n = unsafe { libc::write(self.fd, data.as_ptr().cast(), data.len()) };
            if n < 0 {
                // SAFETY: __errno_location returns this thread's errno slot,
                // valid for the thread's lifetime.
                let errno = unsafe { *libc::__errno_location() };
                if errno == libc::EINTR {
                    continue;
                }
                return Err(WriteError::Sink { errno });
            }
            if n == 0 {
                // write(2) of a non-empty buffer returning 0 means no progress
                // can be made; treat it as a full device rather than spin.
                return Err(WriteError::Sink { errno: libc::ENOSPC });
            }
            // n > 0 and n <= data.len(), so the slice index is in bounds.
            data = data.get(n as usize..).unwrap_or(&[]);
        }
        Ok(())
    }
}

impl<S: Sink + ?Sized> Sink for &mut S {
    fn write_all(&mut self, data: &[u8]) -> Result<(), WriteError> {
        (**self).write_all(data)
    }
}

/// The contents of a root region or an allocation, as the dump's mode
/// stores them: one type for the writer (`I` any iterator of pairs) and the
/// reader (`I` = [`crate::Pointers`], named [`crate::ContentsRef`]).
#[derive(Clone, Copy, Debug)]
pub enum Contents<'a, I> {
    /// Full mode: the raw bytes, exactly the region's size.
    Full(&'a [u8]),
    /// Compact mode: `count` (offset, value) pairs for the words that point
    /// into a live allocation; `pointers` yields exactly `count` pairs.
    Compact {
        /// Number of pairs `pointers` yields.
        count: u64,
        /// The pairs, offsets relative to the region start.
        pointers: I,
    },
}

/// An empty pointer iterator, the `I` of [`Contents::Full`].
pub type NoPointers = core::iter::Empty<(u64, u64)>;

impl<'a> Contents<'a, NoPointers> {
    /// Full contents.
    pub fn full(bytes: &'a [u8]) -> Self {
        Contents::Full(bytes)
    }
}

/// Writes one dump. Stages bytes in the buffer given to [`Writer::new`] and
/// never allocates.
///
/// # Signal safety
/// No method allocates, takes a lock or panics, provided the sink doesn't.
pub struct Writer<'b, S: Sink> {
    sink: S,
    buf: &'b mut [u8],
    len: usize,
    written: u64,
    crc: crc32fast::Hasher,
    mode: Mode,
    /// Whether a record's payload is being written.
    open: bool,
    /// Bytes still owed to the open record.
    owed: u64,
    totals: Trailer,
    poisoned: bool,
    /// The ALLOCS record being gathered: its entries are encoded here
    /// until it is full (the record's length must precede them).
    batch: &'b mut [u8],
    batch_len: usize,
    batch_count: u32,
    batch_first: u64,
    batch_pointers: u64,
    batch_bytes: u64,
    /// The record's running state: end of the previous entry, its site.
    prev_end: u64,
    prev_site: u32,
    /// Address of the last allocation written with [`Writer::dense_alloc`].
    last_dense: Option<u64>,
}

/// Smallest staging buffer: must hold the largest fixed record part.
pub const MIN_BUFFER: usize = 256;

impl<'b, S: Sink> Writer<'b, S> {
    /// Starts a dump: writes the file header.
    pub fn new(sink: S, buf: &'b mut [u8], header: &Header) -> Result<Self, WriteError> {
        if buf.len() < MIN_BUFFER {
            return Err(WriteError::BufferTooSmall);
        }
        let mut w = Writer {
            sink,
            buf,
            len: 0,
            written: 0,
            crc: crc32fast::Hasher::new(),
            mode: header.mode,
            open: false,
            owed: 0,
            totals: Trailer::default(),
            poisoned: false,
            batch: &mut [],
            batch_len: 0,
            batch_count: 0,
            batch_first: 0,
            batch_pointers: 0,
            batch_bytes: 0,
            prev_end: 0,
            prev_site: 0,
            last_dense: None,
        };
        w.put(&raw::MAGIC)?;
        w.u16(header.major)?;
        w.u16(header.minor)?;
        w.u8(header.pointer_size)?;
        w.u8(raw::LITTLE_ENDIAN)?;
        w.u8(header.mode.to_u8())?;
        w.u8(header.reason.to_u8())?;
        w.u32(header.page_size)?;
        w.u32(header.pid)?;
        w.u64(header.time_ns)?;
        Ok(w)
    }

    /// The dump's mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Bytes handed to the writer so far (including staged ones).
    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    /// Totals so far (what the trailer will say).
    pub fn totals(&self) -> &Trailer {
        &self.totals
    }

    /// Writes the PROCESS record.
    pub fn process(&mut self, p: &Process<'_>) -> Result<(), WriteError> {
        let len = raw::PROCESS_FIXED as u64 + p.exe.len() as u64 + p.cmdline.len() as u64;
        self.begin(tag::PROCESS, len)?;
        self.u8(p.backtrace.to_u8())?;
        self.u8(p.flags)?;
        self.put(&[0; 2])?;
        self.u32(p.max_frames)?;
        self.u64(p.sample_mean)?;
        self.u32(len32(p.exe.len(), "executable path")?)?;
        self.u32(len32(p.cmdline.len(), "command line")?)?;
        self.put(p.exe)?;
        self.put(p.cmdline)?;
        self.end()
    }

    /// Writes the SIGNAL record: the signal the dump was taken for.
    pub fn signal(&mut self, s: &SignalInfo) -> Result<(), WriteError> {
        self.begin(tag::SIGNAL, raw::SIGNAL_SIZE as u64)?;
        let mut b = [0u8; raw::SIGNAL_SIZE];
        b[0..4].copy_from_slice(&s.signal.to_le_bytes());
        b[4..8].copy_from_slice(&s.code.to_le_bytes());
        b[8..12].copy_from_slice(&s.tid.to_le_bytes());
        b[16..24].copy_from_slice(&s.address.to_le_bytes());
        b[24..28].copy_from_slice(&s.sender.to_le_bytes());
        self.put(&b)?;
        self.end()
    }

    /// Writes the HISTORY record: peak and totals since start.
    pub fn history(&mut self, h: &History) -> Result<(), WriteError> {
        self.begin(tag::HISTORY, raw::HISTORY_SIZE as u64)?;
        let mut b = [0u8; raw::HISTORY_SIZE];
        b[0..8].copy_from_slice(&h.peak_bytes.to_le_bytes());
        b[8..16].copy_from_slice(&h.total_allocations.to_le_bytes());
        b[16..24].copy_from_slice(&h.total_bytes.to_le_bytes());
        self.put(&b)?;
        self.end()
    }

    /// Writes the MEMORY record (since 1.6): the process's resident
    /// anonymous memory.
    pub fn memory(&mut self, m: &MemoryInfo) -> Result<(), WriteError> {
        self.begin(tag::MEMORY, raw::MEMORY_SIZE as u64)?;
        self.put(&m.resident_anon.to_le_bytes())?;
        self.end()
    }

    /// Writes the SITE_TOTALS record (since 1.5): the recorded peak's live
    /// bytes and time (0, 0: none recorded), then `count` rows, which
    /// `rows` hands to its argument one by one (exactly `count` of them).
    pub fn site_totals(
        &mut self,
        peak_bytes: u64,
        peak_time_ns: u64,
        count: u32,
        rows: impl FnOnce(&mut dyn FnMut(&SiteTotal) -> Result<(), WriteError>),
    ) -> Result<(), WriteError> {
        self.begin(tag::SITE_TOTALS, (raw::SITE_TOTALS_FIXED + count as usize * raw::SITE_TOTAL_SIZE) as u64)?;
        let mut h = [0u8; raw::SITE_TOTALS_FIXED];
        h[0..8].copy_from_slice(&peak_bytes.to_le_bytes());
        h[8..16].copy_from_slice(&peak_time_ns.to_le_bytes());
        h[16..20].copy_from_slice(&count.to_le_bytes());
        self.put(&h)?;
        let mut res = Ok(());
        let mut n = 0u32;
        rows(&mut |r: &SiteTotal| {
            if res.is_err() || n == count {
                return res;
            }
            n += 1;
            let mut b = [0u8; raw::SITE_TOTAL_SIZE];
            b[0..4].copy_from_slice(&r.site.to_le_bytes());
            b[8..16].copy_from_slice(&r.allocations.to_le_bytes());
            b[16..24].copy_from_slice(&r.bytes.to_le_bytes());
            b[24..32].copy_from_slice(&r.temporary.to_le_bytes());
            b[32..40].copy_from_slice(&r.peak_count.to_le_bytes());
            b[40..48].copy_from_slice(&r.peak_bytes.to_le_bytes());
            res = self.put(&b);
            res
        });
        res?;
        // Fewer rows than announced (the counts moved between the two
        // passes): padding rows of a site that cannot exist keep the length;
        // readers leave them out.
        while n < count {
            let mut b = [0u8; raw::SITE_TOTAL_SIZE];
            b[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
            self.put(&b)?;
            n += 1;
        }
        self.end()
    }

    /// Writes the ALLOCATOR record: the allocator whose heap the dump read
    /// (`jemalloc 5.3.0`), cut to its longest length.
    pub fn allocator(&mut self, name: &[u8]) -> Result<(), WriteError> {
        let name = &name[..name.len().min(raw::ALLOCATOR_MAX)];
        self.begin(tag::ALLOCATOR, name.len() as u64)?;
        self.put(name)?;
        self.end()
    }

    /// Writes the LIMIT record: the memory limit of a near-limit dump.
    pub fn limit(&mut self, l: &LimitInfo) -> Result<(), WriteError> {
        self.begin(tag::LIMIT, raw::LIMIT_SIZE as u64)?;
        let mut b = [0u8; raw::LIMIT_SIZE];
        b[0..4].copy_from_slice(&l.kind.to_le_bytes());
        b[8..16].copy_from_slice(&l.bytes.to_le_bytes());
        b[16..24].copy_from_slice(&l.used.to_le_bytes());
        self.put(&b)?;
        self.end()
    }

    /// Writes a MODULE record.
    pub fn module<L: Items<Segment>>(&mut self, m: &Module<'_, L>) -> Result<(), WriteError> {
        let build_id_len =
            u16::try_from(m.build_id.len()).map_err(|_| WriteError::LengthMismatch { what: "build id longer than 65535 bytes" })?;
        let len = raw::MODULE_FIXED as u64
            + m.path.len() as u64
            + m.build_id.len() as u64
            + (m.segments.count() as u64) * raw::SEGMENT_SIZE as u64;
        self.begin(tag::MODULE, len)?;
        self.u64(m.bias)?;
        self.u32(len32(m.path.len(), "module path")?)?;
        self.u16(build_id_len)?;
        self.u16(0)?;
        self.u32(len32(m.segments.count(), "segment count")?)?;
        self.u32(0)?;
        self.put(m.path)?;
        self.put(m.build_id)?;
        for s in m.segments() {
            self.u64(s.vaddr)?;
            self.u64(s.memsz)?;
            self.u64(s.file_offset)?;
            self.u32(s.flags)?;
            self.u32(0)?;
        }
        self.totals.modules += 1;
        self.end()
    }

    /// Writes a THREAD record with its stack contents.
    pub fn thread<R, I>(&mut self, t: &Thread<'_, R>, contents: Contents<'_, I>) -> Result<(), WriteError>
    where
        R: Items<u64>,
        I: Iterator<Item = (u64, u64)>,
    {
        let size = t.stack_end.checked_sub(t.stack_start).ok_or(WriteError::LengthMismatch { what: "stack end below stack start" })?;
        let name_len = u16::try_from(t.name.len()).map_err(|_| WriteError::LengthMismatch { what: "thread name too long" })?;
        let nregs = u16::try_from(t.regs.count()).map_err(|_| WriteError::LengthMismatch { what: "too many registers" })?;
        let fixed = raw::THREAD_FIXED as u64 + t.name.len() as u64 + 8 * t.regs.count() as u64;
        let len = fixed + self.contents_len(size, &contents)?;
        self.begin(tag::THREAD, len)?;
        self.u32(t.tid)?;
        self.u32(t.flags)?;
        self.u64(t.stack_start)?;
        self.u64(t.stack_end)?;
        self.u64(t.tls)?;
        self.u16(name_len)?;
        self.u16(nregs)?;
        self.u32(0)?;
        self.put(t.name)?;
        for r in t.regs() {
            self.u64(r)?;
        }
        self.contents(contents)?;
        self.totals.threads += 1;
        self.end()
    }

    /// Writes a STATIC record with the segment's contents.
    pub fn static_root<I>(&mut self, s: &Static<'_>, contents: Contents<'_, I>) -> Result<(), WriteError>
    where
        I: Iterator<Item = (u64, u64)>,
    {
        let name_len = u16::try_from(s.name.len()).map_err(|_| WriteError::LengthMismatch { what: "static name too long" })?;
        let len = raw::STATIC_FIXED as u64 + s.name.len() as u64 + self.contents_len(s.size, &contents)?;
        self.begin(tag::STATIC, len)?;
        self.u64(s.address)?;
        self.u64(s.size)?;
        self.u32(s.module)?;
        self.u16(name_len)?;
        self.u16(0)?;
        self.put(s.name)?;
        self.contents(contents)?;
        self.totals.statics += 1;
        self.end()
    }

    /// Writes a SITE record. `id` must not be `raw::NO_SITE`.
    pub fn site(&mut self, id: u32, frames: &[u64]) -> Result<(), WriteError> {
        if id == raw::NO_SITE {
            return Err(WriteError::LengthMismatch { what: "site id 0 is reserved" });
        }
        let len = raw::SITE_FIXED as u64 + 8 * frames.len() as u64;
        self.begin(tag::SITE, len)?;
        self.u32(id)?;
        self.u32(len32(frames.len(), "frame count")?)?;
        for &f in frames {
            self.u64(f)?;
        }
        self.totals.sites += 1;
        self.end()
    }

    /// Writes an ALLOC record.
    pub fn alloc<I>(&mut self, a: &Alloc, contents: Contents<'_, I>) -> Result<(), WriteError>
    where
        I: Iterator<Item = (u64, u64)>,
    {
        let mut len = raw::ALLOC_FIXED as u64 + self.contents_len(a.size, &contents)?;
        if self.mode == Mode::Compact {
            len += 8;
        }
        let npointers = match &contents {
            Contents::Compact { count, .. } => *count,
            Contents::Full(_) => 0,
        };
        self.begin(tag::ALLOC, len)?;
        // The fixed part in one piece: this runs once per allocation.
        let mut fixed = [0u8; raw::ALLOC_FIXED + 8];
        fixed[0..8].copy_from_slice(&a.address.to_le_bytes());
        fixed[8..16].copy_from_slice(&a.size.to_le_bytes());
        fixed[16..20].copy_from_slice(&a.site.to_le_bytes());
        fixed[20] = a.align_log2;
        fixed[21] = a.flags;
        fixed[24..32].copy_from_slice(&a.first_word.to_le_bytes());
        let n = if self.mode == Mode::Compact { raw::ALLOC_FIXED + 8 } else { raw::ALLOC_FIXED };
        self.put(&fixed[..n])?;
        self.contents(contents)?;
        self.totals.allocations += 1;
        self.totals.alloc_bytes = self.totals.alloc_bytes.wrapping_add(a.size);
        self.totals.pointers += npointers;
        self.end()
    }

    /// Gives the writer the buffer in which [`Writer::dense_alloc`] gathers
    /// an ALLOCS record (a record's length precedes its payload, so its
    /// entries are staged here; 64 KiB or more keeps the records' own cost
    /// negligible). Without one, each allocation is a record of its own.
    pub fn set_batch_buffer(&mut self, batch: &'b mut [u8]) -> Result<(), WriteError> {
        self.flush_batch()?;
        self.batch = batch;
        Ok(())
    }

    /// The ordinal the next allocation written will have: the number of
    /// allocations written so far. [`Link::target`] names allocations so.
    pub fn next_ordinal(&self) -> u64 {
        self.totals.allocations
    }

    /// Writes an allocation into an ALLOCS record (compact mode, since
    /// 1.2): allocations in strictly increasing address order, `count`
    /// pointers from `links` in increasing offset order, each naming its
    /// target by ordinal. `links` is walked twice when the entry is too
    /// large for the batch buffer (its exact length is counted first), so
    /// it must yield the same pointers each time.
    ///
    /// An allocation out of order, a pointer outside it or out of order,
    /// or a count that disagrees with `links` is an error that writes
    /// nothing, unless the entry was being streamed (then the writer is
    /// poisoned).
    pub fn dense_alloc<I>(&mut self, a: &Alloc, count: u64, links: I) -> Result<(), WriteError>
    where
        I: Iterator<Item = Link> + Clone,
    {
        self.dense_alloc_sized(a, count, None, links)
    }

    /// [`Writer::dense_alloc`], told the encoded length of `links` (the
    /// sum of [`Link::encoded_len`] over them, each after the one before):
    /// an entry too large for the batch buffer is then streamed without a
    /// walk of `links` to measure it first (for a block of millions of
    /// pointers, a scan of the block). A length or a count that `links`
    /// disagrees with poisons the writer.
    pub fn dense_alloc_sized<I>(&mut self, a: &Alloc, count: u64, links_len: Option<u64>, links: I) -> Result<(), WriteError>
    where
        I: Iterator<Item = Link> + Clone,
    {
        self.dense_open()?;
        placed(a, self.last_dense)?;
        let ordinal = self.totals.allocations;
        let bound = (dense::ENTRY_HEAD_MAX as u64).saturating_add(count.saturating_mul(dense::LINK_MAX as u64));
        if (self.batch_len as u64).saturating_add(bound) > self.batch.len() as u64 {
            self.flush_batch()?;
        }
        if bound <= self.batch.len() as u64 {
            if self.batch_count == 0 {
                self.batch_first = ordinal;
                self.prev_end = 0;
                self.prev_site = 0;
            }
            let start = self.batch_len;
            let n = put_entry(&mut self.batch[start..], self.prev_end, self.prev_site, ordinal, a, count, links)?;
            self.batch_len = start + n;
            self.batch_count += 1;
            self.batch_pointers += count;
            self.batch_bytes = self.batch_bytes.wrapping_add(a.size);
            self.prev_end = a.address + a.size;
            self.prev_site = a.site;
        } else {
            // Alone in a record, its length counted first.
            let first = dense::first_form(a.first_word, links.clone().next().is_some_and(|l| l.offset == 0));
            let mut head = [0u8; dense::ENTRY_HEAD_MAX];
            let hn = dense::put_head(&mut head, 0, 0, a.address, a.size, a.site, a.align_log2, a.flags, first, count);
            let len = match links_len {
                Some(len) => len,
                None => {
                    let mut len = 0u64;
                    checked_links(links.clone(), count, a.size, |l, next_offset| len += dense::link_len(next_offset, ordinal, l) as u64)?;
                    len
                }
            };
            self.begin(tag::ALLOCS, (dense::ALLOCS_FIXED + hn) as u64 + len)?;
            self.allocs_fixed(ordinal, 1, count, a.size)?;
            self.put(&head[..hn])?;
            let mut one = [0u8; dense::LINK_MAX];
            let mut written = Ok(());
            // Checked again as written: a length given by the caller was
            // not checked against `links` above. The record is open: a
            // disagreement poisons the writer (and `put` refuses a byte
            // past the declared length).
            checked_links(links, count, a.size, |l, next_offset| {
                if written.is_ok() {
                    let n = dense::put_link(&mut one, next_offset, ordinal, l);
                    written = self.put(&one[..n]);
                }
            })
            .or_else(|e| self.poison(e))?;
            written?;
            self.end()?;
        }
        self.counted_dense(1, a.size, count, a.address);
        Ok(())
    }

    /// Writes the allocations a [`DenseEncoder`] encoded (`bytes`, its
    /// output) as one ALLOCS record. They must be the next ones: their
    /// first ordinal the writer's next, their first address past the last
    /// one written. Allocations gathered for a record of the writer's own
    /// go first.
    pub fn allocs_encoded(&mut self, e: &Encoded, bytes: &[u8]) -> Result<(), WriteError> {
        self.dense_open()?;
        if e.count == 0 {
            return Ok(());
        }
        if e.first != self.totals.allocations || bytes.len() != e.len {
            return Err(WriteError::LengthMismatch { what: "encoded allocations out of ordinal order" });
        }
        if self.last_dense.is_some_and(|p| e.first_address <= p) {
            return Err(WriteError::LengthMismatch { what: "allocations out of address order" });
        }
        self.flush_batch()?;
        self.begin(tag::ALLOCS, (dense::ALLOCS_FIXED + bytes.len()) as u64)?;
        self.allocs_fixed(e.first, e.count, e.pointers, e.bytes)?;
        self.put(bytes)?;
        self.end()?;
        self.counted_dense(u64::from(e.count), e.bytes, e.pointers, e.last_address);
        Ok(())
    }

    /// Writes allocation `a` with the pointers a [`LinkEncoder`] encoded
    /// for it (`bytes`, its output): one allocation of many pointers
    /// encoded by another thread, written here without a scan of them.
    /// The encoder must have been made for this allocation (its ordinal
    /// the writer's next, its size `a`'s).
    pub fn dense_alloc_encoded(&mut self, a: &Alloc, links: &LinkEncoder, bytes: &[u8]) -> Result<(), WriteError> {
        self.dense_open()?;
        let ordinal = self.totals.allocations;
        if links.ordinal != ordinal || links.size != a.size || bytes.len() != links.len {
            return Err(WriteError::LengthMismatch { what: "encoded pointers of another allocation" });
        }
        placed(a, self.last_dense)?;
        let first = dense::first_form(a.first_word, links.first_at_zero);
        let mut head = [0u8; dense::ENTRY_HEAD_MAX];
        let hn = dense::put_head(&mut head, 0, 0, a.address, a.size, a.site, a.align_log2, a.flags, first, links.count);
        self.flush_batch()?;
        self.begin(tag::ALLOCS, (dense::ALLOCS_FIXED + hn + bytes.len()) as u64)?;
        self.allocs_fixed(ordinal, 1, links.count, a.size)?;
        self.put(&head[..hn])?;
        self.put(bytes)?;
        self.end()?;
        self.counted_dense(1, a.size, links.count, a.address);
        Ok(())
    }

    /// Whether compact allocations may be written now.
    fn dense_open(&self) -> Result<(), WriteError> {
        if self.poisoned {
            return Err(WriteError::Poisoned);
        }
        if self.mode != Mode::Compact {
            return Err(WriteError::ModeMismatch);
        }
        Ok(())
    }

    /// Counts compact allocations written: how many, their sizes' sum,
    /// their pointers, the address of the last.
    fn counted_dense(&mut self, allocations: u64, bytes: u64, pointers: u64, last_address: u64) {
        self.totals.allocations += allocations;
        self.totals.alloc_bytes = self.totals.alloc_bytes.wrapping_add(bytes);
        self.totals.pointers += pointers;
        self.last_dense = Some(last_address);
    }

    /// Writes the trailer and flushes. Returns the sink and the file size.
    pub fn finish(mut self, pause_ns: u64) -> Result<(S, u64), WriteError> {
        if self.poisoned || self.open {
            return Err(WriteError::Poisoned);
        }
        self.flush_batch()?;
        let mut t = Trailer { pause_ns, ..self.totals };
        self.begin(tag::END, raw::END_SIZE as u64)?;
        self.u64(t.records)?;
        self.u64(t.allocations)?;
        self.u64(t.alloc_bytes)?;
        self.u64(t.sites)?;
        self.u64(t.pointers)?;
        self.u32(t.threads)?;
        self.u32(t.statics)?;
        self.u32(t.modules)?;
        self.u32(0)?;
        self.u64(t.pause_ns)?;
        // The checksum covers every byte before its own field: fold the
        // staged bytes in first.
        self.flush()?;
        t.checksum = self.crc.clone().finalize();
        self.u32(t.checksum)?;
        self.u32(0)?;
        self.end()?;
        self.flush()?;
        Ok((self.sink, self.written))
    }

    // --- internals -------------------------------------------------------

    fn allocs_fixed(&mut self, first: u64, count: u32, pointers: u64, bytes: u64) -> Result<(), WriteError> {
        let mut fixed = [0u8; dense::ALLOCS_FIXED];
        fixed[0..8].copy_from_slice(&first.to_le_bytes());
        fixed[8..12].copy_from_slice(&count.to_le_bytes());
        fixed[16..24].copy_from_slice(&pointers.to_le_bytes());
        fixed[24..32].copy_from_slice(&bytes.to_le_bytes());
        self.put(&fixed)
    }

    /// Writes the ALLOCS record gathered so far, if any.
    fn flush_batch(&mut self) -> Result<(), WriteError> {
        if self.batch_count == 0 {
            return Ok(());
        }
        let (len, count) = (self.batch_len, self.batch_count);
        self.batch_len = 0;
        self.batch_count = 0;
        self.begin(tag::ALLOCS, (dense::ALLOCS_FIXED + len) as u64)?;
        self.allocs_fixed(self.batch_first, count, self.batch_pointers, self.batch_bytes)?;
        self.batch_pointers = 0;
        self.batch_bytes = 0;
        // The batch is a distinct buffer: lend it out while `put` copies.
        let batch = core::mem::take(&mut self.batch);
        let r = self.put(batch.get(..len).unwrap_or(&[]));
        self.batch = batch;
        r?;
        self.end()
    }

    fn contents_len<I>(&self, size: u64, c: &Contents<'_, I>) -> Result<u64, WriteError> {
        match (self.mode, c) {
            (Mode::Full, Contents::Full(bytes)) => {
                if bytes.len() as u64 != size {
                    return Err(WriteError::LengthMismatch { what: "contents differ from the region size" });
                }
                Ok(size)
            }
            (Mode::Compact, Contents::Compact { count, .. }) => count
                .checked_mul(raw::POINTER_ENTRY as u64)
                .and_then(|n| n.checked_add(8))
                .ok_or(WriteError::LengthMismatch { what: "pointer count overflows" }),
            _ => Err(WriteError::ModeMismatch),
        }
    }

    fn contents<I>(&mut self, c: Contents<'_, I>) -> Result<(), WriteError>
    where
        I: Iterator<Item = (u64, u64)>,
    {
        match c {
            Contents::Full(bytes) => self.put(bytes),
            Contents::Compact { count, pointers } => {
                self.u64(count)?;
                let mut n = 0u64;
                for (off, val) in pointers {
                    n += 1;
                    if n > count {
                        return self.poison(WriteError::LengthMismatch { what: "more pointers than declared" });
                    }
                    let mut pair = [0u8; 16];
                    pair[..8].copy_from_slice(&off.to_le_bytes());
                    pair[8..].copy_from_slice(&val.to_le_bytes());
                    self.put(&pair)?;
                }
                if n != count {
                    return self.poison(WriteError::LengthMismatch { what: "fewer pointers than declared" });
                }
                Ok(())
            }
        }
    }

    fn begin(&mut self, tag: u32, len: u64) -> Result<(), WriteError> {
        if self.poisoned {
            return Err(WriteError::Poisoned);
        }
        // Another record: the gathered allocations go first, so ordinals
        // stay in file order.
        if tag != tag::ALLOCS && self.batch_count > 0 && !self.open {
            self.flush_batch()?;
        }
        if self.open {
            return self.poison(WriteError::LengthMismatch { what: "record started before the previous one ended" });
        }
        let mut head = [0u8; raw::RECORD_HEADER_SIZE];
        head[..4].copy_from_slice(&tag.to_le_bytes());
        head[4..].copy_from_slice(&len.to_le_bytes());
        self.put(&head)?;
        self.open = true;
        self.owed = len;
        if tag != tag::END {
            self.totals.records += 1;
        }
        Ok(())
    }

    fn end(&mut self) -> Result<(), WriteError> {
        if self.owed != 0 {
            return self.poison(WriteError::LengthMismatch { what: "record shorter than declared" });
        }
        self.open = false;
        Ok(())
    }

    fn poison(&mut self, e: WriteError) -> Result<(), WriteError> {
        self.poisoned = true;
        Err(e)
    }

    fn u8(&mut self, v: u8) -> Result<(), WriteError> {
        self.put(&[v])
    }
    fn u16(&mut self, v: u16) -> Result<(), WriteError> {
        self.put(&v.to_le_bytes())
    }
    fn u32(&mut self, v: u32) -> Result<(), WriteError> {
        self.put(&v.to_le_bytes())
    }
    fn u64(&mut self, v: u64) -> Result<(), WriteError> {
        self.put(&v.to_le_bytes())
    }

    fn put(&mut self, data: &[u8]) -> Result<(), WriteError> {
        if self.poisoned {
            return Err(WriteError::Poisoned);
        }
        let n = data.len() as u64;
        if self.open {
            if n > self.owed {
                return self.poison(WriteError::LengthMismatch { what: "record longer than declared" });
            }
            self.owed -= n;
        }
        self.written += n;
        if data.len() > self.buf.len() - self.len {
            self.flush()?;
            if data.len() >= self.buf.len() / 2 {
                // Large contents go straight to the sink: no copy.
                self.crc.update(data);
                return self.sink_write(data);
            }
        }
        let end = self.len + data.len();
        if let Some(dst) = self.buf.get_mut(self.len..end) {
            dst.copy_from_slice(data);
        }
        self.len = end;
        Ok(())
    }

    fn flush(&mut self) -> Result<(), WriteError> {
        if self.len == 0 {
            return Ok(());
        }
        let len = self.len;
        self.len = 0;
        let Some(staged) = self.buf.get(..len) else {
            return self.poison(WriteError::BufferTooSmall);
        };
        self.crc.update(staged);
        // Split borrow: the sink and the buffer are distinct fields.
        let r = self.sink.write_all(staged);
        if let Err(e) = r {
            return self.poison(e);
        }
        Ok(())
    }

    fn sink_write(&mut self, data: &[u8]) -> Result<(), WriteError> {
        if let Err(e) = self.sink.write_all(data) {
            return self.poison(e);
        }
        Ok(())
    }
}

/// Encodes a run of allocations as the entries of one ALLOCS record, into
/// a buffer of the caller's, as [`Writer::dense_alloc`] gathers them: so
/// that another thread can encode allocations for the writer's thread to
/// write with [`Writer::allocs_encoded`]. Allocation-free, as the writer.
#[derive(Clone, Debug)]
pub struct DenseEncoder {
    e: Encoded,
    prev_end: u64,
    prev_site: u32,
}

/// Encodes the pointers of one allocation into a buffer of the caller's,
/// as its ALLOCS entry holds them, for [`Writer::dense_alloc_encoded`]:
/// so that another thread can encode a block of millions of pointers
/// while the writer's writes others. Allocation-free, as the writer.
#[derive(Clone, Debug)]
pub struct LinkEncoder {
    ordinal: u64,
    size: u64,
    next_offset: u64,
    count: u64,
    len: usize,
    first_at_zero: bool,
}

impl LinkEncoder {
    /// The most bytes one pointer takes.
    pub const MAX_LINK: usize = dense::LINK_MAX;

    /// An encoder of the pointers of allocation `ordinal`, of `size` bytes.
    pub fn new(ordinal: u64, size: u64) -> LinkEncoder {
        LinkEncoder { ordinal, size, next_offset: 0, count: 0, len: 0, first_at_zero: false }
    }

    /// Appends pointer `l` (after every one so far, inside the allocation)
    /// to `out`, where the pointers so far end. Nothing is written when it
    /// is out of order or outside (an error), or might not fit (false).
    pub fn push(&mut self, out: &mut [u8], l: &Link) -> Result<bool, WriteError> {
        if l.offset < self.next_offset || l.offset.checked_add(8).is_none_or(|e| e > self.size) {
            return Err(WriteError::LengthMismatch { what: "pointers out of order, outside the allocation or more than declared" });
        }
        if out.len().saturating_sub(self.len) < dense::LINK_MAX {
            return Ok(false);
        }
        if self.count == 0 {
            self.first_at_zero = l.offset == 0;
        }
        self.len += dense::put_link(&mut out[self.len..], self.next_offset, self.ordinal, l);
        self.next_offset = l.offset + 8;
        self.count += 1;
        Ok(true)
    }

    /// Pointers encoded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Bytes they take.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// What a [`DenseEncoder`] encoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Encoded {
    /// Ordinal of the first allocation.
    pub first: u64,
    /// How many.
    pub count: u32,
    /// Their pointers.
    pub pointers: u64,
    /// Their sizes' sum.
    pub bytes: u64,
    /// Bytes of the entries.
    pub len: usize,
    /// Address of the first.
    pub first_address: u64,
    /// Address of the last.
    pub last_address: u64,
}

impl DenseEncoder {
    /// An encoder of the allocations from ordinal `first` on.
    pub fn new(first: u64) -> DenseEncoder {
        DenseEncoder { e: Encoded { first, ..Encoded::default() }, prev_end: 0, prev_site: 0 }
    }

    /// Appends allocation `a` with its pointers `links` (in offset order,
    /// inside it) to `out`, where the entries so far end. When it is out
    /// of order or invalid (an error), or might not fit in `out` (false),
    /// the entries so far stay as they were.
    pub fn push(&mut self, out: &mut [u8], a: &Alloc, links: &[Link]) -> Result<bool, WriteError> {
        placed(a, (self.e.count > 0).then_some(self.e.last_address))?;
        let count = links.len() as u64;
        let bound = dense::ENTRY_HEAD_MAX + links.len().saturating_mul(dense::LINK_MAX);
        if self.e.count == u32::MAX || out.len().saturating_sub(self.e.len) < bound {
            checked_links(links.iter().copied(), count, a.size, |_, _| {})?;
            return Ok(false);
        }
        let ordinal = self.e.first + u64::from(self.e.count);
        let n = put_entry(&mut out[self.e.len..], self.prev_end, self.prev_site, ordinal, a, count, links.iter().copied())?;
        if self.e.count == 0 {
            self.e.first_address = a.address;
        }
        self.e.len += n;
        self.e.count += 1;
        self.e.pointers += count;
        self.e.bytes = self.e.bytes.wrapping_add(a.size);
        self.e.last_address = a.address;
        self.prev_end = a.address + a.size;
        self.prev_site = a.site;
        Ok(true)
    }

    /// What was encoded so far.
    pub fn encoded(&self) -> Encoded {
        self.e
    }
}

/// The checks of a compact allocation before anything of it is written:
/// past the last one (`after`), inside the address space.
fn placed(a: &Alloc, after: Option<u64>) -> Result<(), WriteError> {
    if after.is_some_and(|p| a.address <= p) {
        return Err(WriteError::LengthMismatch { what: "allocations out of address order" });
    }
    if a.address.checked_add(a.size).is_none() || a.align_log2 >= 64 {
        return Err(WriteError::LengthMismatch { what: "allocation wraps the address space" });
    }
    Ok(())
}

/// Encodes allocation `a` (ordinal `ordinal`, after an entry ending at
/// `prev_end` of site `prev_site`) as an ALLOCS entry at the start of `b`,
/// which has room for its head and `count` pointers: the head, then the
/// pointers, checked as they are written. Returns its length; on an
/// error, what it wrote counts for nothing.
fn put_entry<I>(b: &mut [u8], prev_end: u64, prev_site: u32, ordinal: u64, a: &Alloc, count: u64, links: I) -> Result<usize, WriteError>
where
    I: Iterator<Item = Link> + Clone,
{
    let first = dense::first_form(a.first_word, links.clone().next().is_some_and(|l| l.offset == 0));
    let mut n = dense::put_head(b, prev_end, prev_site, a.address, a.size, a.site, a.align_log2, a.flags, first, count);
    checked_links(links, count, a.size, |l, next_offset| n += dense::put_link(&mut b[n..], next_offset, ordinal, l))?;
    Ok(n)
}

/// Walks an allocation's pointers for [`Writer::dense_alloc`], checking
/// them (in increasing offset order, inside the `size` bytes, exactly
/// `count`) and calling `each` with each and the end of the previous
/// one's word; nothing is written on an error.
fn checked_links<I: Iterator<Item = Link>>(links: I, count: u64, size: u64, mut each: impl FnMut(&Link, u64)) -> Result<(), WriteError> {
    let (mut next_offset, mut k) = (0u64, 0u64);
    for l in links {
        k += 1;
        if k > count || l.offset < next_offset || l.offset.checked_add(8).is_none_or(|e| e > size) {
            return Err(WriteError::LengthMismatch { what: "pointers out of order, outside the allocation or more than declared" });
        }
        each(&l, next_offset);
        next_offset = l.offset + 8;
    }
    if k != count {
        return Err(WriteError::LengthMismatch { what: "fewer pointers than declared" });
    }
    Ok(())
}

fn len32(n: usize, what: &'static str) -> Result<u32, WriteError> {
    u32::try_from(n).map_err(|_| WriteError::LengthMismatch { what })
}
