//! The mark, the check and its report (see the module above).

use crate::stop::guard;
use crate::table::marks::{self, MarkError};
use heapdump_analyze::leaks::LeakKind;
use heapdump_analyze::{Analysis, BlockId, Options, PathLine, SiteId};
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;

/// Checks run one at a time: an analysis's memory (untracked, in
/// mappings of its own for its large arrays) would be scanned as a root by
/// another check's dump.
static CHECKS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Dumps of this process's checks, for their file names.
static SEQUENCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A mark on the current thread: from [`Mark::new`] until it is dropped,
/// the thread's allocations are followed, and [`Mark::check`] says which
/// of them are still live. One mark per thread at a time; it stays on
/// its thread (neither `Send` nor `Sync`).
///
/// ```no_run
/// # #[cfg(feature = "testing")] {
/// let mark = heapdump::testing::Mark::new();
/// let cache: Vec<u64> = (0..100).collect();
/// let report = mark.check();
/// assert_eq!(report.blocks(), 1);
/// report.assert_live_bytes_at_most(800);
/// drop(cache);
/// # }
/// ```
pub struct Mark {
    _thread: PhantomData<*const ()>,
}

impl Mark {
    /// Sets a mark on the current thread.
    ///
    /// # Panics
    /// When the thread already has a mark, or no memory can be mapped for
    /// its log.
    pub fn new() -> Mark {
        match marks::begin() {
            Ok(()) => {
                let mark = Mark { _thread: PhantomData };
                // A program whose global allocator is not `Tracked` would
                // pass every check, seeing nothing: one allocation says.
                let probe = std::hint::black_box(Box::new(0u64));
                let followed = marks::len() > 0;
                drop(probe);
                assert!(followed, "heapdump: a mark needs `heapdump::Tracked` as the program's global allocator");
                mark
            }
            Err(MarkError::Active) => panic!("heapdump: this thread already has a mark (one mark per thread at a time)"),
            Err(MarkError::NoMemory(errno)) => {
                panic!("heapdump: no memory for the mark's log: {}", std::io::Error::from_raw_os_error(errno))
            }
        }
    }

    /// Takes a dump and reports the blocks this thread allocated since
    /// the mark that are still live in it. The mark stays: a later check
    /// sees what is live then.
    ///
    /// # Panics
    /// When the dump cannot be written (in the temporary directory,
    /// `std::env::temp_dir`, removed at once) or read back.
    #[inline(always)]
    pub fn check(&self) -> Report {
        // The dump scans this thread's stack from the caller's frame up:
        // the slots of `check_now`'s frame that it has not written yet
        // still hold what the test's returned calls left there (the
        // address of a block it pushed into a global, say), and such a
        // stale word would be called what keeps the block alive. Zeroed
        // first, they hold nothing. (Inlined, so that no frame of
        // `check`'s own lies between the test's and the zeroed ones.)
        scrub_stack();
        self.check_now()
    }

    #[inline(never)]
    fn check_now(&self) -> Report {
        let _one = CHECKS.lock().unwrap_or_else(|e| e.into_inner());
        // Everything from here on this thread is the check's, not the
        // test's: untracked (the log still hears this thread's frees).
        let _untracked = guard::Internal::new();
        let n = SEQUENCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("heapdump-testing.{}.{n}.hdump", std::process::id()));
        let dumped = crate::dump(&path, crate::Mode::Compact);
        // The log as it stood at the dump (nothing of this thread's was
        // logged since: the thread is internal).
        let mut logged = Vec::with_capacity(marks::len());
        let unlogged = marks::for_each(|e| {
            if logged.len() < logged.capacity() {
                logged.push(e)
            }
        });
        if let Err(e) = dumped {
            let _ = std::fs::remove_file(&path);
            panic!("heapdump: the check's dump {} failed: {e}", path.display());
        }
        let report = analyse_apart(&path, &logged, unlogged);
        let _ = std::fs::remove_file(&path);
        report.unwrap_or_else(|e| panic!("heapdump: the check's dump could not be analysed: {e}"))
    }
}

/// The analysis of the check's dump in a forked child, which sends back
/// the report: the analysis's memory, freed or not, never stays in the
/// test process, where glibc keeps freed chunks' words and the next
/// check's dump would scan a heap mapping holding only them as a root
/// (a stale copy of an address would keep a block "reachable"). Where
/// no child can be forked, here.
fn analyse_apart(path: &std::path::Path, logged: &[marks::Logged], unlogged: u64) -> Result<Report, String> {
    let out = path.with_extension("report");
    match crate::sys::fork() {
        Ok(0) => {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| analyse(path, logged, unlogged)));
            let code = match r {
                Ok(Ok(report)) => i32::from(std::fs::write(&out, report.encode()).is_err()),
                Ok(Err(e)) => {
                    let _ = std::fs::write(&out, e);
                    2
                }
                Err(_) => 3,
            };
            crate::sys::exit_now(code)
        }
        Ok(pid) => {
            let status = crate::sys::waitpid(pid);
            let text = std::fs::read_to_string(&out);
            let _ = std::fs::remove_file(&out);
            match (status, text) {
                (Ok(0), Ok(t)) => Report::decode(&t).ok_or_else(|| "the report came back garbled".to_string()),
                (Ok(s), Ok(t)) if s == 2 << 8 => Err(t),
                (s, _) => Err(format!("the analysing child ended with wait status {s:?}")),
            }
        }
        Err(_) => analyse(path, logged, unlogged),
    }
}

/// Reads the check's dump and reports the logged blocks live in it.
fn analyse(path: &std::path::Path, logged: &[marks::Logged], unlogged: u64) -> Result<Report, String> {
    let dump = heapdump_analyze::open(path, &Options::default().cache(false)).map_err(|e| e.to_string())?;
    let a = dump.analysis();
    let mut ours = Vec::new();
    let heap = a.heap();
    for e in logged {
        if let Some(b) = heap.find_start(e.addr) {
            let blk = heap.block(b);
            if blk.size == e.size && (e.site == 0 || blk.site.0 == 0 || blk.site.0 == e.site) {
                ours.push(b);
            }
        }
    }
    Ok(Report::of(&a, &ours, unlogged))
}

/// Zeroes 16 KiB of stack below the caller's frame, where the next call's
/// frames will lie.
#[inline(never)]
fn scrub_stack() {
    let mut room = [0u64; 2048];
    // The compiler may not drop the writes: the array is looked at.
    std::hint::black_box(&mut room);
}

impl Default for Mark {
    fn default() -> Mark {
        Mark::new()
    }
}

impl Drop for Mark {
    fn drop(&mut self) {
        marks::end();
    }
}

/// Live blocks of one site and type, allocated by the marked thread since
/// its mark.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Group {
    /// What the blocks hold, where the site or a vtable says (`unknown`
    /// if not), spelled as `heapdump top --by type` spells it.
    pub ty: String,
    /// The site, as `heapdump top` names it.
    pub site: String,
    /// The program's frames of the site, innermost first.
    pub stack: Vec<String>,
    /// Live blocks.
    pub blocks: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Of them, definitely or indirectly lost.
    pub lost_blocks: u64,
    /// Their bytes.
    pub lost_bytes: u64,
    /// One block's address (a lost one where there is one).
    pub example: u64,
    /// Its leak class: "still reachable", "definitely lost", ….
    pub class: &'static str,
    /// How the example is kept: the root (`static SESSIONS in … at …`,
    /// `stack of thread 7 (main) at …`), or the lost structure it is in;
    /// `None` when nothing points to it at all.
    pub kept_by: Option<String>,
    /// The path's steps from there to the example, as `heapdump path`
    /// prints them.
    pub path: Vec<String>,
}

/// What [`Mark::check`] found: the blocks the thread allocated since the
/// mark that are live in the dump, grouped by site and type (largest
/// first). `Display` prints every group with its stack and path.
#[derive(Clone, Debug)]
pub struct Report {
    groups: Vec<Group>,
    /// Allocations the log missed for want of memory.
    unlogged: u64,
}

/// Frames of a test thread's start and of catching its panics, which a
/// stack without `main` reaches (`program_frames` stops at `main`).
const THREAD_MACHINERY: [&str; 4] = ["__rust_try", "start_thread", "clone3", "clone "];

fn is_lost(k: LeakKind) -> bool {
    matches!(k, LeakKind::DefinitelyLost | LeakKind::IndirectlyLost)
}

impl Report {
    fn of(a: &Analysis<'_>, ours: &[BlockId], unlogged: u64) -> Report {
        let heap = a.heap();
        let kinds = &a.leaks().kind;
        let mut by: HashMap<(SiteId, String), Vec<BlockId>> = HashMap::new();
        for &b in ours {
            by.entry((heap.block(b).site, a.type_of_block(b))).or_default().push(b);
        }
        let mut groups: Vec<Group> = by
            .into_iter()
            .map(|((site, ty), blocks)| {
                let bytes = blocks.iter().map(|&b| heap.block(b).size).sum();
                let lost: Vec<BlockId> = blocks.iter().copied().filter(|b| is_lost(kinds[b.index()])).collect();
                let example = lost.first().or(blocks.first()).copied().expect("a group has blocks");
                let addr = heap.block(example).addr;
                let (kept_by, path) = path_of(a, addr);
                Group {
                    ty,
                    site: a.site_label(site),
                    stack: a
                        .program_frames(site)
                        .iter()
                        .map(|f| f.label())
                        .filter(|l| !THREAD_MACHINERY.iter().any(|m| l.starts_with(m)))
                        .collect(),
                    blocks: blocks.len() as u64,
                    bytes,
                    lost_blocks: lost.len() as u64,
                    lost_bytes: lost.iter().map(|&b| heap.block(b).size).sum(),
                    example: addr,
                    class: kinds[example.index()].as_str(),
                    kept_by,
                    path,
                }
            })
            .collect();
        groups.sort_by(|x, y| y.bytes.cmp(&x.bytes).then_with(|| x.ty.cmp(&y.ty)).then_with(|| x.site.cmp(&y.site)));
        Report { groups, unlogged }
    }

    /// The report as text, for the analysing child to send back: groups
    /// split by RS, fields by US, list items by GS (none of them in a
    /// name or a path).
    fn encode(&self) -> String {
        let mut out = format!("{}", self.unlogged);
        for g in &self.groups {
            let kept = g.kept_by.as_ref().map_or("-".to_string(), |k| format!("+{k}"));
            let fields = [
                g.ty.clone(),
                g.site.clone(),
                g.stack.join("\x1d"),
                g.blocks.to_string(),
                g.bytes.to_string(),
                g.lost_blocks.to_string(),
                g.lost_bytes.to_string(),
                g.example.to_string(),
                g.class.to_string(),
                kept,
                g.path.join("\x1d"),
            ];
            out.push('\x1e');
            out.push_str(&fields.join("\x1f"));
        }
        out
    }

    /// [`Report::encode`] read back.
    fn decode(text: &str) -> Option<Report> {
        let mut parts = text.split('\x1e');
        let unlogged = parts.next()?.parse().ok()?;
        let list = |s: &str| s.split('\x1d').filter(|x| !x.is_empty()).map(str::to_string).collect::<Vec<_>>();
        let mut groups = Vec::new();
        for p in parts {
            let f: Vec<&str> = p.split('\x1f').collect();
            let [ty, site, stack, blocks, bytes, lost_blocks, lost_bytes, example, class, kept, path] = f[..] else { return None };
            let class = [LeakKind::StillReachable, LeakKind::PossiblyLost, LeakKind::DefinitelyLost, LeakKind::IndirectlyLost]
                .into_iter()
                .map(LeakKind::as_str)
                .find(|k| *k == class)?;
            groups.push(Group {
                ty: ty.to_string(),
                site: site.to_string(),
                stack: list(stack),
                blocks: blocks.parse().ok()?,
                bytes: bytes.parse().ok()?,
                lost_blocks: lost_blocks.parse().ok()?,
                lost_bytes: lost_bytes.parse().ok()?,
                example: example.parse().ok()?,
                class,
                kept_by: kept.strip_prefix('+').map(str::to_string),
                path: list(path),
            });
        }
        Some(Report { groups, unlogged })
    }

    /// The groups, largest first.
    pub fn groups(&self) -> &[Group] {
        &self.groups
    }

    /// Live blocks allocated since the mark.
    pub fn blocks(&self) -> u64 {
        self.groups.iter().map(|g| g.blocks).sum()
    }

    /// Their bytes (as the program asked for them).
    pub fn bytes(&self) -> u64 {
        self.groups.iter().map(|g| g.bytes).sum()
    }

    /// The groups whose type names `T` (see the module's "Types").
    pub fn of_type<T: ?Sized>(&self) -> Vec<&Group> {
        let want = heapdump_analyze::types::pretty(std::any::type_name::<T>());
        self.groups.iter().filter(|g| names_type(&g.ty, &want)).collect()
    }

    /// Panics, naming each block's type, site and the path that keeps it,
    /// when a block whose type names `T` is still live.
    #[track_caller]
    pub fn assert_none_alive<T: ?Sized>(&self) {
        let found = self.of_type::<T>();
        if !found.is_empty() {
            let n: u64 = found.iter().map(|g| g.blocks).sum();
            let head = format!(
                "{} of {} allocated by this thread since the mark {} still live",
                plural(n, "block"),
                heapdump_analyze::types::pretty(std::any::type_name::<T>()),
                if n == 1 { "is" } else { "are" }
            );
            fail(&head, &found, self.unlogged);
        }
    }

    /// Panics, listing what is live, when the blocks allocated since the
    /// mark and still live hold more than `limit` bytes.
    #[track_caller]
    pub fn assert_live_bytes_at_most(&self, limit: u64) {
        let bytes = self.bytes();
        if bytes > limit {
            let head = format!(
                "{bytes} bytes in {} allocated by this thread since the mark are still live, more than the {limit} allowed",
                plural(self.blocks(), "block")
            );
            fail(&head, &self.groups.iter().collect::<Vec<_>>(), self.unlogged);
        }
    }

    /// Panics, naming each lost block's type, site and lost structure,
    /// when a block allocated since the mark is definitely or indirectly
    /// lost (as `heapdump check` and valgrind count them).
    #[track_caller]
    pub fn assert_nothing_lost(&self) {
        let lost: Vec<&Group> = self.groups.iter().filter(|g| g.lost_blocks > 0).collect();
        if !lost.is_empty() {
            let (n, bytes): (u64, u64) = lost.iter().fold((0, 0), |(n, b), g| (n + g.lost_blocks, b + g.lost_bytes));
            let head = format!("{bytes} bytes in {} allocated by this thread since the mark are lost", plural(n, "block"));
            fail(&head, &lost, self.unlogged);
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} bytes in {} allocated since the mark are live", self.bytes(), plural(self.blocks(), "block"))?;
        write_groups(f, &self.groups.iter().collect::<Vec<_>>(), self.unlogged)
    }
}

fn plural(n: u64, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

#[track_caller]
fn fail(head: &str, groups: &[&Group], unlogged: u64) -> ! {
    struct Groups<'a>(&'a [&'a Group], u64);
    impl fmt::Display for Groups<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write_groups(f, self.0, self.1)
        }
    }
    panic!("heapdump: {head}:\n{}", Groups(groups, unlogged))
}

/// Groups beyond which a message says only how many more there are.
const SHOWN: usize = 10;

fn write_groups(f: &mut fmt::Formatter<'_>, groups: &[&Group], unlogged: u64) -> fmt::Result {
    for g in groups.iter().take(SHOWN) {
        let lost = if g.lost_blocks > 0 && g.lost_blocks < g.blocks { format!(", {} lost", g.lost_blocks) } else { String::new() };
        writeln!(f, "  {}: {}, {} bytes ({}{lost}), e.g. {:#x}", g.ty, plural(g.blocks, "block"), g.bytes, g.class, g.example)?;
        match g.stack.split_first() {
            Some((first, rest)) => {
                writeln!(f, "    allocated at {first}")?;
                for fr in rest {
                    writeln!(f, "      by {fr}")?;
                }
            }
            None => writeln!(f, "    allocated at {}", g.site)?,
        }
        match &g.kept_by {
            Some(k) if g.class.ends_with("lost") => writeln!(f, "    held only by {k}")?,
            Some(k) => writeln!(f, "    kept alive by {k}")?,
            None => writeln!(f, "    nothing points to it: it heads a lost structure")?,
        }
        for line in &g.path {
            writeln!(f, "      {line}")?;
        }
    }
    if groups.len() > SHOWN {
        writeln!(f, "  and {} more groups", groups.len() - SHOWN)?;
    }
    if unlogged > 0 {
        writeln!(f, "  ({unlogged} allocations were not followed: no memory for the mark's log)")?;
    }
    Ok(())
}

/// Whether the type name `ty` names `want`, alone or as a type argument
/// (`want` not part of a longer path or name).
fn names_type(ty: &str, want: &str) -> bool {
    let part = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
    !want.is_empty()
        && ty.match_indices(want).any(|(i, _)| !part(ty[..i].chars().next_back()) && !part(ty[i + want.len()..].chars().next()))
}

/// How the block at `addr` is kept, as `heapdump path` says it: the start
/// (a root, or the lost structure's head) and the steps.
fn path_of(a: &Analysis<'_>, addr: u64) -> (Option<String>, Vec<String>) {
    let Ok(p) = a.path(addr) else { return (Some("nothing the analysis could find a path from".into()), vec![]) };
    let Some(start) = &p.start else { return (None, vec![]) };
    let lines = a
        .path_lines(&p.steps)
        .into_iter()
        .map(|line| match line {
            PathLine::Step(s) => {
                let how = if s.interior { " (interior pointer)" } else { "" };
                format!("-> at offset {:<6} {} ({} bytes, {}){how}", s.offset, s.to, s.size, s.site)
            }
            hops => hops.to_string(),
        })
        .collect();
    (Some(start.to_string()), lines)
}

#[cfg(test)]
mod tests {
    use super::names_type;

    #[test]
    fn a_type_is_named_alone_or_as_an_argument_never_as_part_of_another() {
        assert!(names_type("app::Session", "app::Session"));
        assert!(names_type("Vec<app::Session>", "app::Session"));
        assert!(names_type("HashMap<String, app::Session>", "app::Session"));
        assert!(names_type("Rc<RefCell<app::Session>>", "app::Session"));
        assert!(!names_type("Vec<app::SessionId>", "app::Session"));
        assert!(!names_type("Box<other::app::Session>", "app::Session"));
        assert!(!names_type("unknown", "app::Session"));
        assert!(!names_type("Vec<u8>", ""));
    }
}
