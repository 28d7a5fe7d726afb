//! Folded stacks and SVG flamegraphs of live bytes by site.

use heapdump_analyze::Analysis;
use heapdump_analyze::SiteId;
use std::collections::HashMap;
use std::io::Write;

/// Folded stack lines (`outer;...;inner bytes`), one per distinct stack of
/// program frames, sorted.
pub fn folded_lines(ex: &Analysis<'_>) -> Vec<String> {
    let mut acc: HashMap<String, f64> = HashMap::new();
    for t in ex.live_by_site(false) {
        let (site, bytes) = (t.site, t.bytes);
        // The stack `top` names the site by (`Analysis::stack`), as
        // pprof's: from the program's frame out to `main`.
        let mut names: Vec<String> =
            ex.stack(site).iter().map(|f| f.function.clone().unwrap_or_else(|| format!("{:#x}", f.address)).replace(';', ":")).collect();
        if names.is_empty() {
            names.push(if site == SiteId::NONE { "(no site recorded)".into() } else { format!("site {site}") });
        }
        names.reverse();
        *acc.entry(names.join(";")).or_default() += bytes;
    }
    let (keys, values): (Vec<String>, Vec<f64>) = acc.into_iter().unzip();
    let acc = keys.into_iter().zip(heapdump_analyze::round_keeping_sum(&values));
    let mut lines: Vec<String> = acc.into_iter().filter(|(_, b)| *b > 0).map(|(k, v)| format!("{k} {v}")).collect();
    lines.sort();
    lines
}

/// Writes folded stacks.
pub fn write_folded(ex: &Analysis<'_>, out: &mut dyn Write) -> crate::Result<()> {
    for l in folded_lines(ex) {
        writeln!(out, "{l}")?;
    }
    Ok(())
}

/// Writes an SVG flamegraph of live bytes by site (inferno).
pub fn write_svg(ex: &Analysis<'_>, out: &mut dyn Write) -> crate::Result<()> {
    let lines = folded_lines(ex);
    let mut opt = inferno::flamegraph::Options::default();
    opt.title = "Live heap by allocation site".into();
    opt.count_name = "bytes".into();
    opt.name_type = "Function:".into();
    // Colours from the names, not chance: the same heap draws the same.
    opt.deterministic = true;
    if lines.is_empty() {
        // inferno refuses empty input; an empty heap still gets a picture.
        return inferno::flamegraph::from_lines(&mut opt, ["(empty heap) 0"].iter().copied(), &mut *out).or_else(|_| {
            write!(
                out,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"400\" height=\"40\"><text x=\"10\" y=\"25\">empty heap</text></svg>"
            )
        });
    }
    inferno::flamegraph::from_lines(&mut opt, lines.iter().map(String::as_str), out).map_err(std::io::Error::other)
}
