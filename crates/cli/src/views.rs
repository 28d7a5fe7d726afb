//! The analyses as the command line shows them: load with progress, ask
//! one [`Analysis`], print its answer as a table or one JSON document.
//! Nothing here decides anything about the heap.

use crate::output::{self, Table};
use anyhow::Result;
use heapdump_analyze::group::GroupBy;
use heapdump_analyze::leaks::{self, LeakKind};
use heapdump_analyze::suppress::Suppressions;
use heapdump_analyze::types::UNKNOWN;
use heapdump_analyze::{Analysis, Dump, LeakReport, Options, PathLine, Retainer};
use std::io::{IsTerminal, Write};
use std::path::Path;

/// No analysis cache (`--no-cache`).
static NO_CACHE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `--no-cache`: analyses neither read nor write a cache.
pub fn set_no_cache(v: bool) {
    NO_CACHE.store(v, std::sync::atomic::Ordering::Relaxed);
}

/// How the command line opens a dump: the caches unless `--no-cache`, and
/// their large files written by a child that outlives the command (a
/// short-lived process: see `heapdump_analyze::Options`).
fn options() -> Options {
    let o = Options::default()
        .cache(!NO_CACHE.load(std::sync::atomic::Ordering::Relaxed))
        .background_writers(true)
        .dominators(DOMINATORS.load(std::sync::atomic::Ordering::Relaxed));
    if EDGES_WHEN_READ.load(std::sync::atomic::Ordering::Relaxed) {
        o.edges_checked_when_read(damaged_graph)
    } else {
        o
    }
}

/// The viewer opens its dumps with a kept graph's edges checked when
/// first read (see `Options::edges_checked_when_read`).
static EDGES_WHEN_READ: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether a kept graph's edges are checked when first read (the viewer:
/// its summary, leaks and tree pages read none); found damaged then, the
/// process ends with a one-line error and exit status 1 (the file removed:
/// the next opening rebuilds it).
pub fn set_edges_checked_when_read(v: bool) {
    EDGES_WHEN_READ.store(v, std::sync::atomic::Ordering::Relaxed);
}

/// A kept graph found damaged after opening: one line, exit status 1 (no
/// answer is read from it).
fn damaged_graph(why: &str) -> ! {
    crate::say_error(why);
    std::process::exit(1)
}

/// The command asks for the dominator tree (see `Options::dominators`).
static DOMINATORS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether the command asks for the dominator tree.
pub fn set_dominators(v: bool) {
    DOMINATORS.store(v, std::sync::atomic::Ordering::Relaxed);
}

/// One [`Analysis`] of an opened dump; when it ends,
/// `HEAPDUMP_CACHE_REPORT=1` has it say on stderr what the cache did (hit,
/// miss, rebuilt, wrote).
pub struct Session<'h>(Analysis<'h>);

impl<'h> std::ops::Deref for Session<'h> {
    type Target = Analysis<'h>;
    fn deref(&self) -> &Analysis<'h> {
        &self.0
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        if report() {
            for e in self.0.cache_events() {
                eprintln!("heapdump: cache: {e}");
            }
        }
    }
}

/// `HEAPDUMP_CACHE_REPORT=1`: say what the cache did (waiting for the
/// files being written to know).
fn report() -> bool {
    std::env::var_os("HEAPDUMP_CACHE_REPORT").is_some_and(|v| v == "1")
}

/// The [`Session`] of an opened dump.
pub fn session(dump: &Dump) -> Session<'_> {
    Session(dump.analysis())
}

/// Opens a dump (see `heapdump_analyze::open`), with a progress bar when
/// stderr is a terminal, and a warning when it is incomplete.
pub fn load(path: &Path) -> Result<Loaded> {
    let big = std::fs::metadata(path).is_ok_and(|m| m.len() > 64 << 20);
    let mut bar: Option<indicatif::ProgressBar> = None;
    let dump = heapdump_analyze::open_with_progress(path, &options(), &mut |done, total| {
        if !big || !std::io::stderr().is_terminal() {
            return;
        }
        let b = bar.get_or_insert_with(|| {
            let b = indicatif::ProgressBar::new(100);
            b.set_style(
                indicatif::ProgressStyle::with_template("loading {msg} [{bar:40}] {percent}%")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            b.set_message(path.display().to_string());
            b
        });
        b.set_position(done * 100 / total.max(1));
    })?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if let Some(c) = dump.checksum_checked().filter(|_| report()) {
        eprintln!("heapdump: dump checksum: {c}");
    }
    if let Some(t) = &dump.heap().truncated {
        eprintln!(
            "heapdump: warning: {}: incomplete dump, analysed up to the damage ({t}); allocations after it are missing",
            path.display()
        );
    }
    Ok(Loaded(dump))
}

/// An opened dump; when it ends, `HEAPDUMP_CACHE_REPORT=1` has it say on
/// stderr what its graph's cache did (waiting for the graph's writer).
pub struct Loaded(Dump);

impl std::ops::Deref for Loaded {
    type Target = Dump;
    fn deref(&self) -> &Dump {
        &self.0
    }
}

impl Loaded {
    /// Keeps the graph now and waits for it (the viewer, which runs on: no
    /// writer left unreaped), saying how it went under
    /// `HEAPDUMP_CACHE_REPORT=1`.
    pub fn settle(&self) {
        self.0.keep_graph();
        let events = self.0.cache_events();
        if report() {
            for e in events {
                eprintln!("heapdump: graph cache: {e}");
            }
        }
    }
}

impl Drop for Loaded {
    fn drop(&mut self) {
        if report() {
            self.settle();
        }
    }
}

// --- top -------------------------------------------------------------------------

pub fn top(path: &Path, by: GroupBy, n: usize, depth: usize, skip: Option<regex::Regex>, json: bool) -> Result<()> {
    let loaded = load(path)?;
    let heap = loaded.heap();
    let a = session(&loaded);
    a.name_sites(depth, skip);
    let mut rows = a.top(by);
    rows.truncate(n);
    if json {
        return output::json(&rows);
    }
    let mut t = Table::new(&[
        ">bytes",
        ">%",
        ">allocations",
        match by {
            GroupBy::Site => "site",
            GroupBy::Size => "size class",
            GroupBy::Type => "type",
        },
    ]);
    let total = heap.total_bytes().max(1) as f64;
    for r in &rows {
        t.row(vec![output::bytes(r.bytes), format!("{:.1}", r.bytes as f64 * 100.0 / total), r.allocations.to_string(), r.key.clone()]);
    }
    t.print(&mut std::io::stdout().lock())?;
    Ok(())
}

/// `top --peak` and `top --allocated`: the sites as the runtime counted
/// them at the recorded peak, or since the start (the SITE_TOTALS record).
pub fn top_totals(
    path: &Path,
    peak: bool,
    n: usize,
    depth: usize,
    skip: Option<regex::Regex>,
    json: bool,
) -> Result<std::process::ExitCode> {
    use std::process::ExitCode;
    let loaded = load(path)?;
    let a = session(&loaded);
    let Some(t) = heapdump_analyze::totals::totals(a.file())? else {
        eprintln!("heapdump: {}: {}", path.display(), heapdump_analyze::totals::NO_TOTALS);
        return Ok(ExitCode::FAILURE);
    };
    if peak && t.peak_time_ns == 0 {
        eprintln!("heapdump: {}: {}", path.display(), heapdump_analyze::totals::NO_PEAK);
        return Ok(ExitCode::FAILURE);
    }
    a.name_sites(depth, skip);
    let mut label = |s: u32| a.site_label(heapdump_analyze::SiteId(s));
    let out = &mut std::io::stdout().lock();
    if peak {
        let mut rows = heapdump_analyze::totals::at_peak(&t, &mut label);
        rows.truncate(n);
        if json {
            output::json(&rows)?;
            return Ok(ExitCode::SUCCESS);
        }
        let mut tb = Table::new(&[">bytes", ">%", ">allocations", "site (at the peak)"]);
        let total = t.peak_bytes.max(1) as f64;
        for r in &rows {
            tb.row(vec![
                output::bytes(r.bytes),
                format!("{:.1}", r.bytes as f64 * 100.0 / total),
                r.allocations.to_string(),
                r.key.clone(),
            ]);
        }
        tb.print(out)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut rows = heapdump_analyze::totals::allocated(&t, &mut label);
    rows.truncate(n);
    if json {
        output::json(&rows)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut tb = Table::new(&[">bytes", ">allocations", ">temporary", "site (since the start)"]);
    for r in &rows {
        tb.row(vec![output::bytes(r.bytes), r.allocations.to_string(), r.temporary.to_string(), r.key.clone()]);
    }
    tb.print(out)?;
    Ok(ExitCode::SUCCESS)
}

/// `top --tree`: the caller tree, roots (allocating functions) largest
/// first, callers indented below; callers under 0.5% of the heap folded.
pub fn top_tree(path: &Path, n: usize, depth: usize, skip: Option<regex::Regex>, json: bool) -> Result<()> {
    let loaded = load(path)?;
    let heap = loaded.heap();
    let a = session(&loaded);
    a.name_sites(1, skip);
    let mut roots = a.caller_tree(depth);
    roots.truncate(n);
    if json {
        return output::json(&roots);
    }
    let total = heap.total_bytes().max(1);
    let mut t = Table::new(&[">bytes", ">%", ">allocations", "function < callers"]);
    fn rows(t: &mut Table, nodes: &[heapdump_analyze::CallerNode], level: usize, total: u64) {
        let (shown, rest): (Vec<_>, Vec<_>) = nodes.iter().partition(|c| level == 0 || c.bytes * 200 >= total);
        for c in shown {
            let indent = if level == 0 { String::new() } else { format!("{}< ", "  ".repeat(level)) };
            t.row(vec![
                output::bytes(c.bytes),
                format!("{:.1}", c.bytes as f64 * 100.0 / total as f64),
                c.allocations.to_string(),
                format!("{indent}{}", c.key),
            ]);
            rows(t, &c.callers, level + 1, total);
        }
        if !rest.is_empty() {
            let bytes: u64 = rest.iter().map(|c| c.bytes).sum();
            t.row(vec![
                output::bytes(bytes),
                format!("{:.1}", bytes as f64 * 100.0 / total as f64),
                rest.iter().map(|c| c.allocations).sum::<u64>().to_string(),
                format!("{}< ({} more callers, each under 0.5%)", "  ".repeat(level), rest.len()),
            ]);
        }
    }
    rows(&mut t, &roots, 0, total);
    t.print(&mut std::io::stdout().lock())?;
    Ok(())
}

// --- leaks -----------------------------------------------------------------------

pub fn leaks(path: &Path, n: usize, kind: Option<LeakKind>, mut sup: Option<Suppressions>, json: bool) -> Result<bool> {
    let loaded = load(path)?;
    let a = session(&loaded);
    let r = a.leak_report_with(kind, sup.as_mut());
    // A dump cut before its roots were complete: the classes are what was
    // read, and the report says first that they are no verdict (its
    // "No lost blocks." read as a clean bill), `--json` in `verdict`.
    let verdict = a.leak_verdict();
    if json {
        output::json(&leaks_json(&r, &a)?)?;
    } else {
        let mut out = std::io::stdout().lock();
        if let Err(none) = &verdict {
            writeln!(out, "NO LEAK VERDICT: {none}. The counts below are only what the dump held.")?;
        }
        print_leaks(&mut out, &r, n)?;
    }
    match verdict {
        Ok(()) => Ok(true),
        Err(none) => {
            eprintln!("heapdump: error: {}: {none}", path.display());
            Ok(false)
        }
    }
}

/// `leaks --json` (and the viewer's `/api/leaks`): the report, and
/// whether it is a verdict (`verdict`; `no_verdict`: why not).
pub fn leaks_json(r: &LeakReport, a: &Analysis<'_>) -> Result<serde_json::Value> {
    let mut v = serde_json::to_value(r)?;
    let verdict = a.leak_verdict();
    if let Some(o) = v.as_object_mut() {
        o.insert("verdict".into(), verdict.is_ok().into());
        if let Err(none) = &verdict {
            o.insert("no_verdict".into(), none.to_string().into());
        }
    }
    Ok(v)
}

pub fn print_leaks(out: &mut impl Write, r: &LeakReport, n: usize) -> std::io::Result<()> {
    let line = |c: &leaks::Count| format!("{} bytes in {} blocks", c.bytes, c.blocks);
    writeln!(out, "LEAK SUMMARY (valgrind memcheck's meanings):")?;
    writeln!(out, "   definitely lost: {}", line(&r.definitely_lost))?;
    writeln!(out, "   indirectly lost: {}", line(&r.indirectly_lost))?;
    writeln!(out, "     possibly lost: {}", line(&r.possibly_lost))?;
    writeln!(out, "   still reachable: {}", line(&r.still_reachable))?;
    let mut via: Vec<_> = r.via_heuristic.iter().collect();
    via.sort_by_key(|(h, _)| **h);
    for (h, c) in via {
        writeln!(out, "      of which reachable via heuristic {h}: {}", line(c))?;
    }
    if let Some(s) = &r.suppressed {
        writeln!(out, "        suppressed: {}", line(s))?;
    }
    if !r.unused_suppressions.is_empty() {
        writeln!(out, "   unused suppressions (they matched nothing): {}", r.unused_suppressions.join(", "))?;
    }
    if r.threads_not_stopped > 0 {
        writeln!(
            out,
            "   warning: {} thread(s) not stopped (they block every signal): their stacks were read as they waited in the kernel, \
             their registers are unknown; a block held only in one of their registers counts as lost",
            r.threads_not_stopped
        )?;
    }
    if r.groups.is_empty() {
        writeln!(out, "\nNo lost blocks.")?;
        return Ok(());
    }
    let what = if r.groups.iter().all(|g| g.kind == LeakKind::StillReachable) { "still reachable" } else { "lost" };
    writeln!(out, "\nLargest {what} groups by allocation site:")?;
    let more = r.groups.len().saturating_sub(n);
    for g in r.groups.iter().take(n) {
        let kind = g.kind.as_str();
        write!(out, "\n{} bytes in {} blocks {kind}", g.bytes, g.blocks)?;
        if g.indirect_blocks > 0 {
            write!(out, " (+{} bytes in {} blocks indirectly lost)", g.indirect_bytes, g.indirect_blocks)?;
        }
        if g.ty != UNKNOWN {
            write!(out, ", {}", g.ty)?;
        }
        writeln!(out, ", e.g. {}", g.example)?;
        for f in g.stack.iter().take(8) {
            writeln!(out, "    at {f}")?;
        }
        if g.stack.is_empty() {
            writeln!(out, "    at {}", g.site)?;
        }
    }
    if more > 0 {
        let (bytes, blocks) = r.groups[n..].iter().fold((0, 0), |a, g| (a.0 + g.bytes, a.1 + g.blocks));
        writeln!(out, "\n... and {more} more groups ({bytes} bytes in {blocks} blocks): -n {} shows them all", r.groups.len())?;
    }
    Ok(())
}

// --- retained --------------------------------------------------------------------

pub fn retained(path: &Path, n: usize, json: bool) -> Result<()> {
    let loaded = load(path)?;
    let heap = loaded.heap();
    let rows = session(&loaded).retainers(n);
    if json {
        return output::json(&rows);
    }
    print_retainers(&mut std::io::stdout().lock(), &rows, heap.total_bytes())?;
    Ok(())
}

/// `retained --by site|type`: groups and what each retains.
pub fn retained_grouped(path: &Path, by: heapdump_analyze::group::GroupBy, n: usize, json: bool) -> Result<()> {
    let loaded = load(path)?;
    let heap = loaded.heap();
    let mut rows = session(&loaded).retained_by(by);
    rows.truncate(n);
    if json {
        return output::json(&rows);
    }
    let total = heap.total_bytes();
    let mut t =
        Table::new(&[">retained", ">%", ">bytes", ">blocks", if by == heapdump_analyze::group::GroupBy::Type { "type" } else { "site" }]);
    for r in &rows {
        t.row(vec![
            output::bytes(r.retained),
            format!("{:.1}", r.retained as f64 * 100.0 / total.max(1) as f64),
            output::bytes(r.bytes),
            r.blocks.to_string(),
            r.key.clone(),
        ]);
    }
    t.print(&mut std::io::stdout().lock())?;
    Ok(())
}

pub fn print_retainers(out: &mut impl Write, rows: &[Retainer], total: u64) -> std::io::Result<()> {
    let typed = rows.iter().any(|r| r.ty != UNKNOWN);
    let mut t = Table::new(if typed {
        &[">retained", ">%", ">size", ">dominates", "address", "type", "site"]
    } else {
        &[">retained", ">%", ">size", ">dominates", "address", "site"]
    });
    for r in rows {
        let mut cells = vec![
            output::bytes(r.retained),
            format!("{:.1}", r.retained as f64 * 100.0 / total.max(1) as f64),
            r.size.to_string(),
            if r.chain > 1 { format!("{} blocks, a chain of {}", r.dominated, r.chain) } else { format!("{} blocks", r.dominated) },
            r.address.to_string(),
        ];
        if typed {
            cells.push(r.ty.clone());
        }
        // A list is one row saying what it is (its head's site in `site`
        // would name one node of 40000).
        cells.push(match &r.list {
            Some(list) => list.to_string(),
            None => r.site.clone(),
        });
        t.row(cells);
    }
    t.print(out)
}

// --- path ------------------------------------------------------------------------

pub fn path(dump: &Path, address: &str, json: bool) -> Result<()> {
    let addr = parse_address(address)?;
    let loaded = load(dump)?;
    let a = session(&loaded);
    let p = a.path(addr)?;
    if json {
        return output::json(&p.steps);
    }
    let class = p.class.as_str();
    let mut out = std::io::stdout().lock();
    let Some(start) = &p.start else {
        // The head of a lost structure: nothing points to it at all.
        writeln!(out, "{} ({} bytes, {class}, {}) has no pointer to it from any root or block.", p.address, p.size, p.site)?;
        return Ok(());
    };
    writeln!(out, "{} ({} bytes, {class}, {}) is reached by:", p.address, p.size, p.site)?;
    writeln!(out, "  {start}")?;
    // The hops through a list's nodes are one line (`path --json` keeps
    // every step).
    for line in a.path_lines(&p.steps) {
        match line {
            PathLine::Step(s) => {
                let how = if s.interior { " (interior pointer)" } else { "" };
                writeln!(out, "  -> at offset {:<6} {} ({} bytes, {}){how}", s.offset, s.to, s.size, s.site)?;
            }
            hops => writeln!(out, "  {hops}")?,
        }
    }
    Ok(())
}

/// `path --all`: every pointer to the allocation, and how each holding
/// block is reached.
pub fn path_all(dump: &Path, address: &str, n: usize, json: bool) -> Result<()> {
    let addr = parse_address(address)?;
    let loaded = load(dump)?;
    let a = session(&loaded);
    let (p, holders, total) = a.holders(addr, n)?;
    if json {
        return output::json(&holders);
    }
    let mut out = std::io::stdout().lock();
    let s = if total == 1 { "" } else { "s" };
    writeln!(out, "{} ({} bytes, {}, {}) is held by {total} pointer{s}:", p.address, p.size, p.class.as_str(), p.site)?;
    for h in &holders {
        let how = if h.interior { ", interior" } else { "" };
        match (h.size, &h.site, h.class) {
            (Some(size), Some(site), Some(class)) => {
                writeln!(out, "\n  {} ({size} bytes, {}, {site}) at offset {}{how}, reached by:", h.from, class.as_str(), h.offset)?;
                if h.path.is_empty() {
                    writeln!(out, "      nothing: it heads a lost structure")?;
                }
                for line in a.path_lines(&h.path) {
                    match line {
                        PathLine::Step(st) => writeln!(out, "      {} -> at offset {} {}", st.from, st.offset, st.to)?,
                        hops => writeln!(out, "      {hops}")?,
                    }
                }
            }
            _ => writeln!(out, "\n  {} at offset {}{how} (a root)", h.from, h.offset)?,
        }
    }
    if total > holders.len() {
        writeln!(out, "\n... and {} more: -n {total} shows them all", total - holders.len())?;
    }
    Ok(())
}

pub fn parse_address(s: &str) -> Result<u64> {
    let t = s.trim();
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => t.parse::<u64>(),
    };
    // Bad usage (exit 2), as any argument that does not parse.
    r.map_err(|e| output::Usage(format!("invalid address {s:?}: expected hexadecimal (0x...) or decimal ({e})")).into())
}

// --- diff ------------------------------------------------------------------------

/// `growth`: the structures that grow across dumps of one process.
pub fn growth(paths: &[std::path::PathBuf], n: usize, json: bool) -> Result<()> {
    // Each dump's tables moved to a file as it is loaded: the next is
    // loaded beside page cache (issue 43's memory goal).
    let loaded = paths
        .iter()
        .map(|p| {
            let l = load(p)?;
            l.tables_to_file();
            Ok(l)
        })
        .collect::<Result<Vec<_>>>()?;
    let dumps: Vec<&Dump> = loaded.iter().map(|l| &**l).collect();
    let g = heapdump_analyze::growth(&dumps, n)?;
    if json {
        return output::json(&g.rows);
    }
    let mut out = std::io::stdout().lock();
    let live: Vec<String> = g.live.iter().map(|&b| output::bytes(b)).collect();
    writeln!(out, "{} dumps of process {} ({}) over {}; live bytes {}", paths.len(), g.pid, g.exe, duration(g.span_ns), live.join(" -> "))?;
    if g.rows.is_empty() {
        writeln!(out, "nothing grows: no structure held more at half the steps or more and kept what it gained")?;
        return Ok(());
    }
    let shown = if g.growing > g.rows.len() { format!(" ({} shown)", g.rows.len()) } else { String::new() };
    writeln!(
        out,
        "{} structure{} grow{}{shown}:\n",
        g.growing,
        if g.growing == 1 { "" } else { "s" },
        if g.growing == 1 { "s" } else { "" }
    )?;
    for (i, r) in g.rows.iter().enumerate() {
        let (first, last) = (r.bytes[0], r.bytes[r.bytes.len() - 1]);
        let per_hour = if g.span_ns > 0 { format!(", {} per hour", signed_bytes(r.per_hour)) } else { String::new() };
        writeln!(
            out,
            "{:>2}. {}: {} -> {} ({} per step{per_hour}), grew at {} of {} steps",
            i + 1,
            r.key,
            output::bytes(first),
            output::bytes(last),
            signed_bytes(r.per_step),
            r.steps_grown,
            r.steps
        )?;
        let bytes: Vec<String> = r.bytes.iter().map(|&b| output::bytes(b)).collect();
        let blocks: Vec<String> = r.blocks.iter().map(u64::to_string).collect();
        writeln!(out, "    bytes: {}; blocks: {}", bytes.join(", "), blocks.join(", "))?;
        if !r.root.is_empty() && r.root != r.key {
            writeln!(out, "    held by {}", r.root)?;
        }
        if r.path.len() > 1 {
            writeln!(out, "    path: {} steps from the root", r.path.len())?;
        }
        for (j, s) in r.sites.iter().enumerate() {
            writeln!(out, "    {} {:>10}  {}", if j == 0 { "added by" } else { "        " }, signed_bytes(s.bytes), s.site)?;
        }
        writeln!(out)?;
    }
    Ok(())
}

/// `+1.5 MiB`, `-12 B`.
fn signed_bytes(n: i64) -> String {
    format!("{}{}", if n < 0 { "-" } else { "+" }, output::bytes(n.unsigned_abs()))
}

/// A span of nanoseconds, as a person says it.
fn duration(ns: u64) -> String {
    let s = ns as f64 / 1e9;
    match s {
        s if s < 120.0 => format!("{s:.1} s"),
        s if s < 7200.0 => format!("{:.1} min", s / 60.0),
        s => format!("{:.1} h", s / 3600.0),
    }
}

pub fn diff(old: &Path, new: &Path, json: bool) -> Result<()> {
    // The older dump's tables moved to a file before the newer one is
    // loaded beside them (issue 43's memory goal; see `growth`).
    let o = load(old)?;
    o.tables_to_file();
    let n = load(new)?;
    let d = n.diff(&o);
    if json {
        return output::json(&d);
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "live bytes: {} -> {} ({:+})",
        output::bytes(d.old_bytes),
        output::bytes(d.new_bytes),
        d.new_bytes as i64 - d.old_bytes as i64
    )?;
    writeln!(
        out,
        "{}: {} new blocks ({} bytes), {} gone ({} bytes)\n",
        if d.same_process { "same process" } else { "different processes, compared by site" },
        d.new.blocks,
        d.new.bytes,
        d.gone.blocks,
        d.gone.bytes
    )?;
    for (title, rows) in [("growth by site", &d.by_site), ("growth by type", &d.by_type)] {
        writeln!(out, "{title}:")?;
        let mut t = Table::new(&[">delta bytes", ">delta blocks", ">old bytes", ">new bytes", "key"]);
        for r in rows.iter().take(15) {
            t.row(vec![
                format!("{:+}", r.delta_bytes),
                format!("{:+}", r.delta_allocations),
                r.old_bytes.to_string(),
                r.new_bytes.to_string(),
                r.key.clone(),
            ]);
        }
        t.print(&mut out)?;
        writeln!(out)?;
    }
    Ok(())
}

// --- suspects --------------------------------------------------------------------

/// `summary`'s last lines: what to look at first (the suspects of
/// `heapdump_analyze::suspects`). Said only of a whole dump (a cut one's
/// summary already says what is missing).
pub fn summary_suspects(out: &mut impl Write, path: &Path) -> Result<()> {
    let loaded = load(path)?;
    let a = session(&loaded);
    let list = a.suspects(None);
    write_peak(out, &a)?;
    write_suspects(out, &a, &list)?;
    Ok(())
}

/// `summary`'s line on the recorded peak (when the dump has one): when,
/// how much, and its three biggest sites.
fn write_peak(out: &mut impl Write, a: &Analysis<'_>) -> Result<()> {
    let Some(t) = heapdump_analyze::totals::totals(a.file())? else { return Ok(()) };
    if t.peak_time_ns == 0 {
        return Ok(());
    }
    let taken = a.file().dump()?.header().time_ns;
    let before = taken.saturating_sub(t.peak_time_ns) as f64 / 1e9;
    let rows = heapdump_analyze::totals::at_peak(&t, &mut |s| a.site_label(heapdump_analyze::SiteId(s)));
    let top: Vec<String> = rows.iter().take(3).map(|r| format!("{} {}", output::bytes(r.bytes), r.key)).collect();
    writeln!(out, "peak recorded {before:.1} s before the dump, {} live: {}", output::bytes(t.peak_bytes), top.join(", "))?;
    Ok(())
}

/// `summary --json`'s `peak`: the recorded peak as `summary`'s text says
/// it, `{"time_ns", "before_dump_s", "bytes", "sites"}` (`sites`: its
/// three biggest, as `top --peak --json` rows), or null when the dump has
/// none.
pub fn peak_json(path: &Path) -> Result<serde_json::Value> {
    // Only a dump with a recorded peak is loaded for the sites' names.
    let file = heapdump_analyze::DumpFile::open(path)?;
    match heapdump_analyze::totals::totals(&file)? {
        Some(t) if t.peak_time_ns != 0 => {}
        _ => return Ok(serde_json::Value::Null),
    }
    let loaded = load(path)?;
    let a = session(&loaded);
    peak_json_of(&a)
}

/// [`peak_json`] of a dump already open for questions (the viewer's).
pub fn peak_json_of(a: &Analysis<'_>) -> Result<serde_json::Value> {
    let Some(t) = heapdump_analyze::totals::totals(a.file())? else { return Ok(serde_json::Value::Null) };
    if t.peak_time_ns == 0 {
        return Ok(serde_json::Value::Null);
    }
    let taken = a.file().dump()?.header().time_ns;
    let mut rows = heapdump_analyze::totals::at_peak(&t, &mut |s| a.site_label(heapdump_analyze::SiteId(s)));
    rows.truncate(3);
    Ok(serde_json::json!({
        "time_ns": t.peak_time_ns,
        "before_dump_s": taken.saturating_sub(t.peak_time_ns) as f64 / 1e9,
        "bytes": t.peak_bytes,
        "sites": rows,
    }))
}

/// `summary --json`'s document: the summary's fields and `peak` (null for
/// a cut dump), as the command line prints it and the viewer serves it.
pub fn summary_json(s: &heapdump_analyze::Summary, peak: impl FnOnce() -> Result<serde_json::Value>) -> Result<serde_json::Value> {
    let mut v = serde_json::to_value(s)?;
    if let serde_json::Value::Object(m) = &mut v {
        // The recorded peak (#41), as the text's line says it.
        m.insert("peak".into(), if s.truncated.is_none() { peak()? } else { serde_json::Value::Null });
    }
    Ok(v)
}

/// The suspects as text: a headline each (what it holds, why it is
/// suspected), the path to it and the sites adding the most bytes.
pub fn write_suspects(out: &mut impl Write, a: &Analysis<'_>, list: &[heapdump_analyze::suspects::Suspect]) -> std::io::Result<()> {
    use heapdump_analyze::suspects::SuspectKind;
    writeln!(out)?;
    if list.is_empty() {
        return writeln!(out, "suspects: none (nothing retains 10% of the heap, nothing is lost)");
    }
    writeln!(out, "suspects (what to look at first):")?;
    for (i, s) in list.iter().enumerate() {
        let (verb, of) = match s.kind {
            SuspectKind::Retains => ("retains", "of the heap"),
            SuspectKind::Lost => ("lost", "of the heap"),
            SuspectKind::Grew => ("grew by", "of the growth"),
        };
        let held = s.held_by.as_deref().map(|h| format!(", held by {h}")).unwrap_or_default();
        writeln!(out, "  {}. {verb} {} ({:.1}% {of}): {}{held}", i + 1, output::bytes(s.bytes), s.share, s.what)?;
        if let Some(first) = s.path.first() {
            write!(out, "     path: {}", first.from)?;
            for line in a.path_lines(&s.path) {
                match line {
                    PathLine::Step(st) => write!(out, " -> {}", st.to)?,
                    hops => write!(out, " {hops}")?,
                }
            }
            writeln!(out)?;
        } else if let Some(addr) = s.address {
            writeln!(out, "     block: {addr} (nothing points to it)")?;
        }
        let sites: Vec<String> =
            s.sites.iter().map(|x| format!("{} ({} in {} blocks)", x.site, output::bytes(x.bytes), x.blocks)).collect();
        if !sites.is_empty() {
            writeln!(out, "     sites: {}", sites.join("; "))?;
        }
    }
    Ok(())
}
