//! The one door into the analysis: [`open`] maps and loads a dump (or
//! reads its graph back from the cache) and hands back a [`Dump`], which
//! owns the dump, its graph and its caches (their directory, which files,
//! when they are written). Every question goes through it: one dump's
//! through its [`Analysis`] ([`Dump::analysis`]), questions across dumps
//! through the [`Dump`] itself ([`Dump::diff`]).
//!
//! Why two types rather than one: the [`Analysis`] borrows the mapping
//! and the graph (its symbolizer and type namer hold onto them), so it
//! lives inside a `Dump`'s borrow; a `Dump` can be asked for analyses, and
//! for diffs against other dumps, as long as it lives.

use crate::analysis::Analysis;
use crate::cache::{CacheFile, Writing};
use crate::error::Result;
use crate::group::Diff;
use crate::heap::Heap;
use crate::summary::Summary;
use crate::DumpFile;
use std::cell::RefCell;
use std::path::{Path, PathBuf};

/// The version the caches are keyed by: a cache written by another
/// version of the analysis is refused.
const CACHE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// How a dump is opened.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Options {
    /// Read and write the caches (`$XDG_CACHE_HOME/heapdump/analysis`, see
    /// [`crate::private_dir::analysis_dir`]): the loaded graph, the leak
    /// classes, the dominator tree, the paths' tree, the blocks vtables
    /// name. Default: on.
    pub cache: bool,
    /// Let a forked child write a large cache file while the answer is
    /// computed, and leave it to finish after the `Dump` and its analyses
    /// are dropped (a question asked meanwhile waits for it). For a
    /// short-lived process, the command line: a thread would end with it
    /// (see [`crate::cache::Writing`]). Default: off, the files are written
    /// in place and waited for when dropped (a library does not fork the
    /// program it is part of unasked).
    pub background_writers: bool,
    /// The questions will ask for the dominator tree (retained sizes, the
    /// tree, paths, suspects): a large heap's tables are then built in an
    /// unnamed file from the start (see [`crate::Analysis::dominators`]:
    /// they are read from a file from then on), rather than moved there
    /// when the tree is first asked for. Only how memory is used changes,
    /// never an answer. Default: off (the tables are moved if the tree is
    /// asked for).
    pub dominators: bool,
    /// A graph read back from the cache has its edges' tables (1.4 GB of
    /// the 3.0 GB of 10^8 blocks) checked when they are first read, not at
    /// opening: a process that may never read them (the viewer, whose
    /// summary, leaks and tree pages and expansions read none) opens sooner. If they are found
    /// damaged then, the file is removed and this is called with a
    /// one-line error (it does not return: the process ends, say; no
    /// answer is read from a damaged table). Default: `None`, every table
    /// checked at opening (a damaged file is then rebuilt).
    pub edges_checked_when_read: Option<fn(&str) -> !>,
}

impl Default for Options {
    fn default() -> Options {
        Options { cache: true, background_writers: false, dominators: false, edges_checked_when_read: None }
    }
}

impl Options {
    /// With or without the caches.
    pub fn cache(mut self, yes: bool) -> Options {
        self.cache = yes;
        self
    }

    /// Whether the questions will ask for the dominator tree.
    pub fn dominators(mut self, yes: bool) -> Options {
        self.dominators = yes;
        self
    }

    /// The edges' tables of a kept graph checked when first read, `on_damage`
    /// told if they are damaged (see [`Options::edges_checked_when_read`]).
    pub fn edges_checked_when_read(mut self, on_damage: fn(&str) -> !) -> Options {
        self.edges_checked_when_read = Some(on_damage);
        self
    }

    /// With or without writers left to finish on their own.
    pub fn background_writers(mut self, yes: bool) -> Options {
        self.background_writers = yes;
        self
    }
}

/// What the dump at `path` holds, from its records, without loading its
/// graph: the one question that needs no [`Dump`] (a damaged dump is
/// summarised up to the damage: [`Summary::truncated`]).
pub fn summary(path: &Path) -> Result<Summary> {
    Summary::of(&DumpFile::open(path)?)
}

/// Opens the dump at `path` (see [`open_with_progress`]).
pub fn open(path: &Path, options: &Options) -> Result<Dump> {
    open_with_progress(path, options, &mut |_, _| {})
}

/// Opens the dump at `path`: its graph read back from the cache when a
/// good copy of this very dump's is kept (its bytes checked against its
/// checksum), else loaded, `progress` told `(done, total)` as it goes.
pub fn open_with_progress(path: &Path, options: &Options, progress: &mut dyn FnMut(u64, u64)) -> Result<Dump> {
    let file = DumpFile::open(path)?;
    let mut events = Vec::new();
    let dir = if options.cache {
        match crate::private_dir::analysis_dir() {
            Ok(d) => Some(d),
            Err(why) => {
                events.push(Event::Said(format!("off ({why})")));
                None
            }
        }
    } else {
        None
    };
    let graph =
        dir.as_ref().and_then(|d| CacheFile::for_file(d, &file, CACHE_VERSION)).map(|c| c.in_background(options.background_writers));
    let checked = graph.as_ref().map(CacheFile::checksum_checked);
    if let Some(c) = &graph {
        let at = c.graph_path().display().to_string();
        let read = match options.edges_checked_when_read {
            Some(on_damage) => c.read_graph_edges_later(on_damage),
            None => c.read_graph(),
        };
        match read {
            Ok(Some(heap)) => {
                events.push(Event::Said(format!("hit {at}")));
                let mut d = Dump::new(path, file, heap, dir, None, events, options);
                d.checked = checked;
                return Ok(d);
            }
            Ok(None) => events.push(Event::Said(format!("miss {at}"))),
            Err(why) => events.push(Event::Said(format!("rebuilt {at} ({why})"))),
        }
    }
    let tables = options.dominators.then_some(crate::spill::TablesIn(dir.as_deref()));
    let heap = Heap::load_with(&file, progress, true, tables)?;
    let mut d = Dump::new(path, file, heap, dir, graph, events, options);
    d.checked = checked;
    Ok(d)
}

/// A thing the graph's cache did, or its file being written.
enum Event {
    Said(String),
    Writing(Writing),
}

/// An opened dump: the file, its graph, and its caches. Dropped, it
/// starts keeping its graph (when it was loaded, not read back: after the
/// questions, so that the writer's fresh pages do not slow them), then
/// leaves the files still being written to finish on their own
/// ([`Options::background_writers`]) or waits for them.
pub struct Dump {
    path: PathBuf,
    file: DumpFile,
    heap: Heap,
    /// The caches' directory, when they are on.
    dir: Option<PathBuf>,
    /// The graph's cache, while the graph is still to be kept.
    graph: RefCell<Option<CacheFile>>,
    events: RefCell<Vec<Event>>,
    background: bool,
    /// How the dump's bytes were found to match its checksum before the
    /// caches were looked at (`None`: they were not).
    checked: Option<crate::cache::Checked>,
}

impl Dump {
    fn new(
        path: &Path,
        file: DumpFile,
        heap: Heap,
        dir: Option<PathBuf>,
        graph: Option<CacheFile>,
        events: Vec<Event>,
        o: &Options,
    ) -> Dump {
        Dump {
            path: path.to_path_buf(),
            file,
            heap,
            dir,
            graph: RefCell::new(graph),
            events: RefCell::new(events),
            background: o.background_writers,
            checked: None,
        }
    }

    /// The path it was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The mapped file.
    pub fn file(&self) -> &DumpFile {
        &self.file
    }

    /// The graph of its live blocks.
    pub fn heap(&self) -> &Heap {
        &self.heap
    }

    /// An analysis of the dump, answering from the cache what an earlier
    /// one kept and keeping what it computes (see [`crate::cache`]).
    pub fn analysis(&self) -> Analysis<'_> {
        let a = Analysis::new(&self.file, &self.heap);
        let cache = self
            .dir
            .as_ref()
            .and_then(|d| CacheFile::for_dump(d, &self.heap, self.file.bytes().len() as u64, CACHE_VERSION))
            .map(|c| c.in_background(self.background));
        match cache {
            Some(c) => a.with_cache(c),
            None => a,
        }
    }

    /// Moves the graph's large tables (blocks, edges) to an unnamed file
    /// in the caches' directory or the temporary one, read from its
    /// mapping from then on, when the heap is large (2^20 blocks or more;
    /// see `spill.rs`): page cache, not anonymous memory. The dominators do
    /// so for the heap they are computed on; a command that holds several
    /// dumps (`growth`) does so for each as it is loaded, so that the next
    /// one is loaded and computed beside page cache. Answers are the same.
    pub fn tables_to_file(&self) {
        crate::spill::before_dominators(&self.heap, self.dir.as_deref());
    }

    /// What grew and shrank from the `older` dump to this one, by site and
    /// by type.
    pub fn diff(&self, older: &Dump) -> Diff {
        crate::group::diff((&older.file, &older.heap), (&self.file, &self.heap))
    }

    /// Starts keeping the graph now, when it is to be kept (a process that
    /// runs on, the viewer, need not wait for the dump to be dropped).
    pub fn keep_graph(&self) {
        if let Some(c) = self.graph.borrow_mut().take() {
            self.events.borrow_mut().push(Event::Writing(c.write_graph(&self.heap)));
        }
    }

    /// How the dump's bytes were found to match its checksum before its
    /// caches were looked at: hashed, or recalled from an earlier question
    /// on the same file unchanged (`None`: no cache was looked at).
    pub fn checksum_checked(&self) -> Option<crate::cache::Checked> {
        self.checked
    }

    /// What the graph's cache did since the last call: `hit PATH`, `miss
    /// PATH`, `rebuilt PATH (why)`, `wrote PATH`, `not written PATH (why)`,
    /// in order, waiting for the files being written (the analyses'
    /// caches say theirs: [`Analysis::cache_events`]).
    pub fn cache_events(&self) -> Vec<String> {
        std::mem::take(&mut *self.events.borrow_mut())
            .into_iter()
            .map(|e| match e {
                Event::Writing(w) => {
                    let path = w.path().display().to_string();
                    match w.wait() {
                        Ok(()) => format!("wrote {path}"),
                        Err(why) => format!("not written {path} ({why})"),
                    }
                }
                Event::Said(s) => s,
            })
            .collect()
    }
}

impl Drop for Dump {
    fn drop(&mut self) {
        self.keep_graph();
        if self.background {
            for e in self.events.get_mut().drain(..) {
                if let Event::Writing(w) = e {
                    w.detach();
                }
            }
        }
    }
}
