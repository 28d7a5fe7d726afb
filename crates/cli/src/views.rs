//! The analyses as the command line shows them: load with progress,
//! compute with `heapdump-analyze`, print a table or one JSON document.

use crate::output::{self, Table};
use anyhow::{Context, Result};
use heapdump_analyze::group::{self, GroupBy};
use heapdump_analyze::leaks::{self, LeakKind, Leaks};
use heapdump_analyze::symbols::Symbolizer;
use heapdump_analyze::types::{Types, UNKNOWN};
use heapdump_analyze::{dominators, paths, BlockId, DumpFile, Heap};
use serde::Serialize;
use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::Path;

/// Maps and loads a dump, with a progress bar when stderr is a terminal,
/// and a warning when it is incomplete.
pub fn load(path: &Path) -> Result<(DumpFile, Heap)> {
    let file = DumpFile::open(path)?;
    let bar = if std::io::stderr().is_terminal() && file.bytes().len() > 64 << 20 {
        let b = indicatif::ProgressBar::new(100);
        b.set_style(
            indicatif::ProgressStyle::with_template("loading {msg} [{bar:40}] {percent}%")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b.set_message(path.display().to_string());
        Some(b)
    } else {
        None
    };
    let heap = Heap::load(&file, &mut |done, total| {
        if let Some(b) = &bar {
            b.set_position(done * 100 / total.max(1));
        }
    })?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if let Some(t) = &heap.truncated {
        eprintln!(
            "heapdump: warning: {}: incomplete dump, analysed up to the damage ({t}); allocations after it are missing",
            path.display()
        );
    }
    Ok((file, heap))
}

fn hex(a: u64) -> String {
    format!("{a:#x}")
}

// --- top -------------------------------------------------------------------------

pub fn top(path: &Path, by: GroupBy, n: usize, depth: usize, skip: Option<regex::Regex>, json: bool) -> Result<()> {
    let (file, heap) = load(path)?;
    let mut sym = Symbolizer::new(&heap);
    sym.depth(depth);
    sym.skip(skip);
    let mut types = Types::new(&file, &heap);
    let mut rows = group::top(&heap, &mut sym, &mut types, by);
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

// --- leaks -----------------------------------------------------------------------

/// A group of lost blocks from one site.
#[derive(Serialize)]
pub struct LeakGroup {
    kind: LeakKind,
    site: String,
    /// What the blocks hold, where the site or a vtable says.
    #[serde(rename = "type")]
    ty: String,
    blocks: u64,
    bytes: u64,
    indirect_blocks: u64,
    indirect_bytes: u64,
    example: String,
    stack: Vec<String>,
    /// The example's address, to order groups that tie on bytes and site
    /// (two sites can print alike) the same way on every run.
    #[serde(skip)]
    example_addr: u64,
}

#[derive(Serialize)]
pub struct LeakReport {
    definitely_lost: leaks::Count,
    indirectly_lost: leaks::Count,
    possibly_lost: leaks::Count,
    still_reachable: leaks::Count,
    via_heuristic: HashMap<&'static str, leaks::Count>,
    /// Threads the dump could not stop: their stacks were read while they
    /// waited in the kernel (or not at all), their registers are unknown,
    /// so a block only they hold may be counted lost.
    threads_not_stopped: u64,
    groups: Vec<LeakGroup>,
}

pub fn leak_report(heap: &Heap, l: &Leaks, sym: &mut Symbolizer<'_>, types: &mut Types<'_>) -> LeakReport {
    // Indirect bytes per clique leader.
    let mut indirect: HashMap<u32, (u64, u64)> = HashMap::new();
    for (i, k) in l.kind.iter().enumerate() {
        if *k == LeakKind::IndirectlyLost {
            let e = indirect.entry(l.leader[i]).or_default();
            e.0 += 1;
            e.1 += heap.size(BlockId(i as u32));
        }
    }
    let mut groups: HashMap<(LeakKind, u32), LeakGroup> = HashMap::new();
    for (i, k) in l.kind.iter().enumerate() {
        if !matches!(k, LeakKind::DefinitelyLost | LeakKind::PossiblyLost) {
            continue;
        }
        let b = heap.block(BlockId(i as u32));
        let g = groups.entry((*k, b.site)).or_insert_with(|| LeakGroup {
            kind: *k,
            site: sym.site_label(b.site),
            ty: types.of_block(sym, heap, BlockId(i as u32)),
            blocks: 0,
            bytes: 0,
            indirect_blocks: 0,
            indirect_bytes: 0,
            example: hex(b.addr),
            stack: user_frames(sym, b.site, 12),
            example_addr: b.addr,
        });
        g.blocks += 1;
        g.bytes += b.size;
        if let Some(&(nb, bytes)) = indirect.get(&(i as u32)) {
            g.indirect_blocks += nb;
            g.indirect_bytes += bytes;
        }
    }
    let mut groups: Vec<LeakGroup> = groups.into_values().collect();
    groups.sort_by(|a, b| {
        (b.bytes + b.indirect_bytes)
            .cmp(&(a.bytes + a.indirect_bytes))
            .then_with(|| a.site.cmp(&b.site))
            .then_with(|| a.example_addr.cmp(&b.example_addr))
    });
    let report = LeakReport {
        definitely_lost: l.definitely_lost,
        indirectly_lost: l.indirectly_lost,
        possibly_lost: l.possibly_lost,
        still_reachable: l.still_reachable,
        via_heuristic: l.via_heuristic.iter().map(|(h, c)| (h.as_str(), *c)).collect(),
        threads_not_stopped: heap.threads.iter().filter(|t| t.flags & heapdump_format::raw::THREAD_NOT_STOPPED != 0).count() as u64,
        groups,
    };
    report
}

pub fn leaks(path: &Path, n: usize, json: bool) -> Result<bool> {
    let (file, heap) = load(path)?;
    let mut sym = Symbolizer::new(&heap);
    let mut types = Types::new(&file, &heap);
    let r = leak_report(&heap, &leaks::of_dump(&file, &heap), &mut sym, &mut types);
    // Without the roots (a dump cut before its thread and static records
    // ended) nothing can be called lost or reachable: no verdict.
    let verdict = heap.has_roots();
    if json {
        output::json(&r)?;
    } else {
        print_leaks(&mut std::io::stdout().lock(), &r, n)?;
    }
    if !verdict {
        eprintln!(
            "heapdump: {}: the dump was cut short before its roots (thread stacks, static data) were complete: no leak verdict ({})",
            path.display(),
            heap.truncated.as_deref().unwrap_or("roots missing")
        );
    }
    Ok(verdict)
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
    writeln!(out, "\nLargest lost groups by allocation site:")?;
    let more = r.groups.len().saturating_sub(n);
    for g in r.groups.iter().take(n) {
        let kind = match g.kind {
            LeakKind::DefinitelyLost => "definitely lost",
            _ => "possibly lost",
        };
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

/// The frames of a site from the first one outside the allocator machinery.
pub fn user_frames(sym: &mut Symbolizer<'_>, site: u32, n: usize) -> Vec<String> {
    let frames = sym.site_frames(site);
    let mut out = Vec::new();
    for f in frames.iter().filter(|f| !heapdump_analyze::symbols::is_machinery(f)).take(n) {
        out.push(f.label());
        if f.function.as_deref() == Some("main") {
            break;
        }
    }
    if out.is_empty() {
        out.extend(frames.iter().take(n).map(|f| f.label()));
    }
    out
}

// --- retained --------------------------------------------------------------------

#[derive(Serialize)]
pub struct Retainer {
    pub address: String,
    size: u64,
    retained: u64,
    site: String,
    dominated: u32,
    #[serde(rename = "type")]
    ty: String,
    class: LeakKind,
}

pub fn retainers(
    heap: &Heap,
    l: &Leaks,
    d: &dominators::Dominators,
    sym: &mut Symbolizer<'_>,
    types: &mut Types<'_>,
    n: usize,
) -> Vec<Retainer> {
    let mut ids: Vec<usize> = (0..heap.len()).collect();
    ids.sort_by(|&a, &b| d.retained[b].cmp(&d.retained[a]).then(a.cmp(&b)));
    ids.truncate(n);
    ids.into_iter()
        .map(|i| {
            let b = heap.block(BlockId(i as u32));
            Retainer {
                address: hex(b.addr),
                size: b.size,
                retained: d.retained[i],
                site: sym.site_label(b.site),
                dominated: d.dominated[i],
                ty: types.of_block(sym, heap, BlockId(i as u32)),
                class: l.kind[i],
            }
        })
        .collect()
}

pub fn retained(path: &Path, n: usize, json: bool) -> Result<()> {
    let (file, heap) = load(path)?;
    let mut sym = Symbolizer::new(&heap);
    let mut types = Types::new(&file, &heap);
    let (l, d) = dominators::of_dump(&file, &heap);
    let rows = retainers(&heap, &l, &d, &mut sym, &mut types, n);
    if json {
        return output::json(&rows);
    }
    print_retainers(&mut std::io::stdout().lock(), &rows, heap.total_bytes())?;
    Ok(())
}

/// `retained --by site|type`: groups and what each retains.
pub fn retained_grouped(path: &Path, by: heapdump_analyze::group::GroupBy, n: usize, json: bool) -> Result<()> {
    let (file, heap) = load(path)?;
    let mut sym = Symbolizer::new(&heap);
    let mut types = Types::new(&file, &heap);
    let (_, d) = dominators::of_dump(&file, &heap);
    let mut rows = heapdump_analyze::group::retained_by(&heap, &d, &mut sym, &mut types, by);
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
            format!("{} blocks", r.dominated),
            r.address.clone(),
        ];
        if typed {
            cells.push(r.ty.clone());
        }
        cells.push(r.site.clone());
        t.row(cells);
    }
    t.print(out)
}

// --- path ------------------------------------------------------------------------

#[derive(Serialize)]
struct JsonStep {
    from: String,
    to: String,
    offset: u64,
}

pub fn path(dump: &Path, address: &str, json: bool) -> Result<()> {
    let addr = parse_address(address)?;
    let (file, heap) = load(dump)?;
    let (target, _) = heap.find(addr).ok_or(heapdump_analyze::AnalyzeError::NoSuchAllocation { address: addr })?;
    let mut sym = Symbolizer::new(&heap);
    let l = leaks::of_dump(&file, &heap);
    let leader = l.leader[target.index()];
    let fallback = (leader != u32::MAX).then_some(BlockId(leader));
    let class = l.kind[target.index()].as_str();
    if fallback == Some(target) {
        // The head of a lost structure: nothing points to it at all.
        if json {
            return output::json(&Vec::<JsonStep>::new());
        }
        println!(
            "{} ({} bytes, {class}, {}) has no pointer to it from any root or block.",
            hex(heap.block(target).addr),
            heap.block(target).size,
            sym.site_label(heap.block(target).site)
        );
        return Ok(());
    }
    let p = paths::shortest(&heap, target, fallback).ok_or_else(|| anyhow::anyhow!("no chain of pointers leads to {addr:#x} ({class})"))?;
    // Every step's offset is relative to what its `from` names: the first
    // step from a static root to the symbol it names (or the region).
    let mut first_offset = None;
    let start = match &p.start {
        paths::PathStart::Root(r) => {
            let (text, off) = describe_root(&heap, &mut sym, r);
            first_offset = off;
            text
        }
        paths::PathStart::LostBlock(b) => {
            format!("lost block {} (definitely lost, {})", hex(heap.block(*b).addr), sym.site_label(heap.block(*b).site))
        }
    };
    let mut steps = Vec::new();
    for (i, s) in p.steps.iter().enumerate() {
        let from = match s.from {
            Some(b) => hex(heap.block(b).addr),
            None if i == 0 => start.clone(),
            None => String::new(),
        };
        let offset = if i == 0 && s.from.is_none() { first_offset.unwrap_or(s.offset) } else { s.offset };
        steps.push(JsonStep { from, to: hex(heap.block(s.to).addr), offset });
    }
    if let paths::PathStart::LostBlock(b) = p.start {
        if steps.is_empty() {
            steps.push(JsonStep { from: start.clone(), to: hex(heap.block(b).addr), offset: 0 });
        } else {
            steps[0].from = format!("{} <- {start}", steps[0].from);
        }
    }
    if json {
        return output::json(&steps);
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{} ({} bytes, {class}, {}) is reached by:",
        hex(heap.block(target).addr),
        heap.block(target).size,
        sym.site_label(heap.block(target).site)
    )?;
    writeln!(out, "  {start}")?;
    for (s, step) in p.steps.iter().zip(&steps) {
        let b = heap.block(s.to);
        let how = if s.interior { " (interior pointer)" } else { "" };
        writeln!(out, "  -> at offset {:<6} {} ({} bytes, {}){how}", step.offset, hex(b.addr), b.size, sym.site_label(b.site))?;
    }
    Ok(())
}

/// A root, named; for a static, by the symbol holding the word, with the
/// word's offset in that symbol.
fn describe_root(heap: &Heap, sym: &mut Symbolizer<'_>, r: &heapdump_analyze::Root) -> (String, Option<u64>) {
    use heapdump_analyze::RootSource;
    match heap.root_source(r) {
        RootSource::Static { module, name, address } => match sym.data_symbol_at(address) {
            Some((s, off)) => (format!("static {s} in {module} at {:#x}", address - off), Some(off)),
            None => (format!("static {name} of {module} at {address:#x}"), Some(0)),
        },
        other => (other.to_string(), None),
    }
}

pub fn parse_address(s: &str) -> Result<u64> {
    let t = s.trim();
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => t.parse::<u64>(),
    };
    r.with_context(|| format!("invalid address {s:?}: expected hexadecimal (0x...) or decimal"))
}

// --- diff ------------------------------------------------------------------------

pub fn diff(old: &Path, new: &Path, json: bool) -> Result<()> {
    let (fo, ho) = load(old)?;
    let (fnew, hn) = load(new)?;
    let d = group::diff((&fo, &ho), (&fnew, &hn));
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
