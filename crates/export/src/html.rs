//! The self-contained HTML report: summary, flamegraph, the dominator
//! tree of the top retainers, leaks by site and a size histogram. No
//! external resource; works offline.

use crate::json::{tree, Node};
use heapdump_analyze::leaks::LeakKind;
use heapdump_analyze::Analysis;
use std::collections::HashMap;
use std::io::Write;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Bytes as a short human figure: `512 B`, `1.5 KiB`, `3.2 MiB`.
pub fn human(n: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < U.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", U[u])
    }
}

fn write_tree(out: &mut dyn Write, n: &Node, total: u64) -> std::io::Result<()> {
    let pct = n.retained as f64 * 100.0 / total.max(1) as f64;
    let cls = match n.class {
        LeakKind::DefinitelyLost | LeakKind::IndirectlyLost => "lost",
        LeakKind::PossiblyLost => "possible",
        _ => "",
    };
    // The site is shown when the name (a type) does not already say it.
    let site = if n.site == n.name { String::new() } else { esc(&n.site) };
    if n.children.is_empty() {
        writeln!(
            out,
            "<div class=\"leaf {cls}\"><span class=\"num\">{}</span> <span class=\"pct\">{pct:.1}%</span> {} <code>{}</code> <span class=\"site\">{site}</span></div>",
            human(n.retained),
            esc(&n.name),
            n.address,
        )?;
        return Ok(());
    }
    writeln!(
        out,
        "<details><summary class=\"{cls}\"><span class=\"num\">{}</span> <span class=\"pct\">{pct:.1}%</span> {} <code>{}</code> <span class=\"site\">{site} — dominates {} blocks</span></summary>",
        human(n.retained),
        esc(&n.name),
        n.address,
        n.dominated
    )?;
    for c in &n.children {
        write_tree(out, c, total)?;
    }
    writeln!(out, "</details>")
}

/// Writes the report; with `diff` (from `heapdump_analyze::group::diff`
/// against an older dump), a section on the growth since then.
pub fn write_html(ex: &Analysis<'_>, diff: Option<&heapdump_analyze::group::Diff>, out: &mut dyn Write) -> crate::Result<()> {
    let heap = ex.heap();
    let total = heap.total_bytes();
    // The dominators before the leak classes: computed together, at one
    // peak (see `write_json`).
    ex.dominators();
    let l = &ex.leaks();
    let mut svg = Vec::new();
    crate::flame::write_svg(ex, &mut svg)?;
    let svg_b64 = base64(&svg);
    write!(
        out,
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>heapdump report: pid {pid}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }}
h1 {{ font-size: 1.4em; }} h2 {{ font-size: 1.15em; margin-top: 2em; border-bottom: 1px solid #ccc; }}
table {{ border-collapse: collapse; }} td, th {{ padding: 2px 10px; text-align: left; border-bottom: 1px solid #eee; }}
td.n, th.n {{ text-align: right; font-variant-numeric: tabular-nums; }}
details {{ margin-left: 1.2em; }} summary {{ cursor: pointer; }} .leaf {{ margin-left: 2.4em; }}
.num {{ display: inline-block; min-width: 6em; text-align: right; font-variant-numeric: tabular-nums; }}
.pct {{ color: #666; display: inline-block; min-width: 4em; text-align: right; }} .site {{ color: #555; font-size: 0.9em; }}
.lost {{ color: #a00; }} .possible {{ color: #a60; }} code {{ font-size: 0.9em; }}
img.flame {{ width: 100%; border: 1px solid #ddd; }} #filter {{ margin: 0.5em 0; }}
</style></head>
<body>
<h1>heapdump report</h1>
<h2 id="summary">Summary</h2>
<table>
<tr><th>program</th><td>{exe}</td></tr>
<tr><th>pid</th><td>{pid}</td></tr>
<tr><th>reason</th><td>{reason}</td></tr>
<tr><th>mode</th><td>{mode}</td></tr>
<tr><th>live allocations</th><td id="allocations">{allocs}</td></tr>
<tr><th>live bytes</th><td id="bytes">{total} ({total_h})</td></tr>
<tr><th>pointers</th><td>{edges}</td></tr>
<tr><th>roots</th><td>{roots}</td></tr>
</table>
"#,
        pid = heap.header.pid,
        exe = esc(&if heap.cmdline.is_empty() { heap.exe.clone() } else { heap.cmdline.join(" ") }),
        reason = heap.header.reason.as_str(),
        mode = heap.header.mode.as_str(),
        allocs = heap.len(),
        total_h = human(total),
        edges = heap.edge_count(),
        roots = ex.roots(),
    )?;
    write_suspects(ex, &ex.suspects(diff), out)?;
    write!(
        out,
        r#"<h2 id="leaks">Leaks (valgrind memcheck's meanings)</h2>
<table id="leak-summary">
<tr><th>definitely lost</th><td class="n">{dl_b} bytes</td><td class="n">{dl_n} blocks</td></tr>
<tr><th>indirectly lost</th><td class="n">{il_b} bytes</td><td class="n">{il_n} blocks</td></tr>
<tr><th>possibly lost</th><td class="n">{pl_b} bytes</td><td class="n">{pl_n} blocks</td></tr>
<tr><th>still reachable</th><td class="n">{sr_b} bytes</td><td class="n">{sr_n} blocks</td></tr>
</table>
"#,
        dl_b = l.definitely_lost.bytes,
        dl_n = l.definitely_lost.blocks,
        il_b = l.indirectly_lost.bytes,
        il_n = l.indirectly_lost.blocks,
        pl_b = l.possibly_lost.bytes,
        pl_n = l.possibly_lost.blocks,
        sr_b = l.still_reachable.bytes,
        sr_n = l.still_reachable.blocks,
    )?;
    writeln!(out, "<input id=\"filter\" type=\"search\" placeholder=\"filter leaks by site\">")?;
    writeln!(out, "<table id=\"leak-sites\"><tr><th>class</th><th class=\"n\">blocks</th><th class=\"n\">bytes</th><th>site</th></tr>")?;
    let report = ex.leak_report();
    if report.groups.is_empty() {
        writeln!(out, "<tr><td colspan=\"4\">No lost blocks.</td></tr>")?;
    }
    for g in report.groups.iter().take(50) {
        let indirect = if g.indirect_blocks > 0 {
            format!(" (+{} in {} blocks indirectly lost)", g.indirect_bytes, g.indirect_blocks)
        } else {
            String::new()
        };
        writeln!(
            out,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}{indirect}</td><td>{}</td></tr>",
            g.kind.as_str(),
            g.blocks,
            g.bytes,
            esc(&g.site)
        )?;
    }
    writeln!(out, "</table>")?;
    if let Some(d) = diff {
        writeln!(out, "<h2 id=\"growth\">Growth since the baseline</h2>")?;
        writeln!(
            out,
            "<p>Live bytes {} → {} ({:+} bytes); {} new blocks ({} bytes), {} gone ({} bytes){}.</p>",
            human(d.old_bytes),
            human(d.new_bytes),
            d.new_bytes as i64 - d.old_bytes as i64,
            d.new.blocks,
            d.new.bytes,
            d.gone.blocks,
            d.gone.bytes,
            if d.same_process { "" } else { ", compared by site (different processes)" }
        )?;
        for (title, rows) in [("by site", &d.by_site), ("by type", &d.by_type)] {
            writeln!(out, "<table class=\"growth\"><tr><th class=\"n\">Δ bytes</th><th class=\"n\">Δ blocks</th><th class=\"n\">before</th><th class=\"n\">after</th><th>{title}</th></tr>")?;
            for r in rows.iter().take(20) {
                writeln!(
                    out,
                    "<tr><td class=\"n\">{:+}</td><td class=\"n\">{:+}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
                    r.delta_bytes,
                    r.delta_allocations,
                    r.old_bytes,
                    r.new_bytes,
                    esc(&r.key)
                )?;
            }
            writeln!(out, "</table>")?;
        }
    }
    writeln!(out, "<h2 id=\"flamegraph\">Live bytes by allocation site</h2>")?;
    writeln!(out, "<img class=\"flame\" alt=\"flamegraph of live bytes by site\" src=\"data:image/svg+xml;base64,{svg_b64}\">")?;
    writeln!(out, "<h2 id=\"retainers\">Top retainers (dominator tree)</h2><div id=\"tree\">")?;
    let mut names = HashMap::new();
    for &b in ex.dominated_by(None).iter().take(20) {
        let t = tree(ex, b, 4, 10, &mut names);
        write_tree(out, &t, total)?;
    }
    writeln!(out, "</div>")?;
    // Size histogram.
    let classes = ex.size_histogram();
    let maxb = classes.iter().map(|r| r.bytes).max().unwrap_or(1).max(1);
    let h = 22 * classes.len() + 10;
    writeln!(out, "<h2 id=\"sizes\">Size histogram</h2>")?;
    writeln!(out, "<svg id=\"histogram\" xmlns=\"http://www.w3.org/2000/svg\" width=\"900\" height=\"{h}\" font-size=\"12\">")?;
    for (i, r) in classes.iter().enumerate() {
        let y = 5 + i * 22;
        let w = (r.bytes as f64 / maxb as f64 * 560.0).max(1.0);
        writeln!(
            out,
            "<text x=\"0\" y=\"{}\">{}</text><rect x=\"120\" y=\"{y}\" width=\"{w:.0}\" height=\"16\" fill=\"#6a9fd4\"/><text x=\"{:.0}\" y=\"{}\">{} in {} blocks</text>",
            y + 12,
            esc(&r.key),
            130.0 + w,
            y + 12,
            human(r.bytes),
            r.allocations
        )?;
    }
    writeln!(out, "</svg>")?;
    write!(
        out,
        r##"<p id="status"></p>
<script>
window.addEventListener("error", function (e) {{ document.getElementById("status").textContent = "error: " + e.message; }});
document.getElementById("filter").addEventListener("input", function () {{
  var q = this.value.toLowerCase();
  document.querySelectorAll("#leak-sites tr").forEach(function (tr, i) {{
    if (i > 0) tr.style.display = tr.textContent.toLowerCase().indexOf(q) >= 0 ? "" : "none";
  }});
}});
document.body.setAttribute("data-ready", "1");
</script>
</body></html>
"##
    )?;
    Ok(())
}

/// The suspects (see `heapdump_analyze::suspects`): what to look at first,
/// each with its path and sites.
fn write_suspects(ex: &Analysis<'_>, list: &[heapdump_analyze::suspects::Suspect], out: &mut dyn Write) -> std::io::Result<()> {
    use heapdump_analyze::suspects::SuspectKind;
    writeln!(out, "<h2 id=\"suspects\">What to look at first</h2>")?;
    if list.is_empty() {
        return writeln!(out, "<p>Nothing stands out: nothing retains 10% of the heap, nothing is lost.</p>");
    }
    writeln!(out, "<ol class=\"suspects\">")?;
    for s in list {
        let (verb, of, cls) = match s.kind {
            SuspectKind::Retains => ("retains", "of the heap", "retains"),
            SuspectKind::Lost => ("lost", "of the heap", "lost"),
            SuspectKind::Grew => ("grew by", "of the growth", "grew"),
        };
        let held = s.held_by.as_deref().map(|h| format!(", held by {}", esc(h))).unwrap_or_default();
        writeln!(out, "<li class=\"suspect {cls}\"><b>{verb} {}</b> ({:.1}% {of}): {}{held}", human(s.bytes), s.share, esc(&s.what))?;
        if let Some(first) = s.path.first() {
            let mut line = esc(&first.from.to_string());
            for l in ex.path_lines(&s.path) {
                match l {
                    heapdump_analyze::PathLine::Step(st) => line.push_str(&format!(" → <code>{}</code>", st.to)),
                    hops => line.push_str(&format!(" {}", esc(&hops.to_string()))),
                }
            }
            writeln!(out, "<div class=\"site\">path: {line}</div>")?;
        } else if let Some(a) = s.address {
            writeln!(out, "<div class=\"site\">block <code>{a}</code>: nothing points to it</div>")?;
        }
        let sites: Vec<String> = s.sites.iter().map(|x| format!("{} ({} in {} blocks)", esc(&x.site), human(x.bytes), x.blocks)).collect();
        if !sites.is_empty() {
            writeln!(out, "<div class=\"site\">sites: {}</div>", sites.join("; "))?;
        }
        writeln!(out, "</li>")?;
    }
    writeln!(out, "</ol>")
}

/// Standard base64 (for the inlined flamegraph).
fn base64(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(data)
}
