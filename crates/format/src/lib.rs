//! The heapdump file format.
//!
//! This crate is the bottom of the heapdump stack: the runtime inside the
//! traced process (`heapdump`) writes dumps with [`Writer`], and the
//! offline analyser (`heapdump-analyze`) reads them with [`Dump`]. The
//! normative description of the bytes is `FORMAT.md` beside this crate;
//! [`raw`] mirrors it constant by constant.
//!
//! Design constraints:
//! - `no_std` at its core: the writer runs inside an allocator or with the
//!   world stopped, so it never allocates, never locks and never panics;
//! - the reader is zero-copy over a byte slice (a memory-mapped file) and
//!   never panics, hangs or allocates, whatever the input.
//!
//! ```
//! use heapdump_format::{Alloc, Contents, Dump, Header, Mode, Reason, Record, Writer};
//!
//! let mut buf = [0u8; 4096];
//! let mut w = Writer::new(Vec::new(), &mut buf, &Header::new(Mode::Full, Reason::Api, 4096, 42, 0)).unwrap();
//! let info = Alloc { address: 0x1000, size: 4, site: 0, align_log2: 3, flags: 0, first_word: 0 };
//! w.alloc(&info, Contents::full(&[1, 2, 3, 4])).unwrap();
//! let (bytes, _) = w.finish(0).unwrap();
//!
//! let dump = Dump::parse(&bytes).unwrap();
//! let allocs = dump.records().filter_map(|r| match r.unwrap().1 { Record::Alloc(a) => Some(a.size), _ => None });
//! assert_eq!(allocs.sum::<u64>(), 4);
//! ```
#![no_std]
#![deny(missing_docs)]

#[cfg(feature = "std")]
extern crate std;

mod dense;
mod error;
pub mod hashbrown;
mod items;
pub mod lookup;
pub mod raw;
mod reader;
pub mod report;
pub mod settings;
mod types;
mod writer;

pub use dense::{Allocs, DenseAlloc, Entries, FirstWord, Link, Links};
pub use error::{Error, WriteError};
pub use items::{Fixed, Items, ItemsIter, Packed};
pub use reader::{ends_with_trailer, Contents as ContentsRef, Dump, Pointers, Record, Records, Site, SiteTotals, WithContents, Words};
pub use types::{
    Alloc, Backtrace, Header, History, LimitInfo, MemoryInfo, Mode, Module, Process, Reason, Segment, SignalInfo, SiteTotal, Static,
    Thread, Trailer,
};
pub use writer::{Contents, DenseEncoder, Encoded, FdSink, LinkEncoder, NoPointers, Sink, Writer, MIN_BUFFER};

/// FNV-1a, 64 bits, of `b`: the names heapdump gives things by their
/// contents (the embedded preload library's copy, an analysis cache, the
/// report channel's socket). A name, not a check: what it names is
/// compared or checked anyway.
pub fn fnv1a64(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3))
}

/// [`Process`] under the name the writer's callers first knew it by: the
/// same type, not a second one.
pub type ProcessInfo<'a> = Process<'a>;

/// A MODULE record to write, its segments a slice: [`Module`] as the
/// writer's callers hold it.
pub type ModuleInfo<'a> = Module<'a, &'a [Segment]>;

/// A THREAD record to write, its registers a slice: [`Thread`] as the
/// writer's callers hold it.
pub type ThreadInfo<'a> = Thread<'a, &'a [u64]>;

/// [`Static`] under the name the writer's callers first knew it by.
pub type StaticInfo<'a> = Static<'a>;

/// [`Alloc`] under the name the writer's callers first knew it by.
pub type AllocInfo = Alloc;
