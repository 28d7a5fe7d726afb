//! What the runtime counted per site since the program started and at the
//! heap's recorded peak (the SITE_TOTALS record, format 1.5): `top
//! --allocated`, `top --peak`, the peak in `summary`, pprof's
//! `alloc_space`/`alloc_objects`. Dumps taken from outside (attach, core)
//! and by older runtimes have none: each view says so.

use crate::error::{AnalyzeError, Result};
use crate::file::DumpFile;
use heapdump_format::{Record, SiteTotal};
use serde::Serialize;

/// What a dump's SITE_TOTALS record holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// The live bytes at the recorded peak (0: the heap never reached the
    /// runtime's floor for recording one, 1 MiB).
    pub peak_bytes: u64,
    /// When the peak was recorded, ns since the epoch (0: none).
    pub peak_time_ns: u64,
    /// One row per site that allocated or held bytes at the peak.
    pub rows: Vec<SiteTotal>,
}

/// The one-line error of a view that needs totals on a dump without them.
pub const NO_TOTALS: &str = "this dump has no totals/peak: the runtime keeps them with a site for every allocation (HEAPDUMP_BACKTRACE=all, the default), not with sampled sites or none; attach, core and older runtimes have none";

/// The one-line error of `top --peak` on a dump whose runtime kept totals
/// but no peak.
pub const NO_PEAK: &str =
    "this dump has no peak: the runtime records one with every site (unless HEAPDUMP_PEAK=0), once the heap passes 1 MiB";

/// Reads the SITE_TOTALS record of `file`, if it has one.
pub fn totals(file: &DumpFile) -> Result<Option<Totals>> {
    let dump = file.dump()?;
    for r in dump.records() {
        match r {
            Ok((_, Record::SiteTotals(t))) => {
                return Ok(Some(Totals { peak_bytes: t.peak_bytes, peak_time_ns: t.peak_time_ns, rows: t.rows().collect() }))
            }
            Ok(_) => {}
            Err(e) if e.is_truncation() => break,
            Err(source) => return Err(AnalyzeError::Format { path: file.path().to_path_buf(), source }),
        }
    }
    Ok(None)
}

/// One row of `top --allocated`. Field names are its JSON keys.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct AllocatedRow {
    /// The site.
    pub key: String,
    /// Allocations made there since start.
    pub allocations: u64,
    /// Bytes allocated there since start.
    pub bytes: u64,
    /// Of those allocations, the ones freed before their thread's next one.
    pub temporary: u64,
}

/// Rows by site label (sites that print alike merged), with `pick`'s
/// (allocations, bytes, temporary) of each, largest first by `order`.
fn rows_by(t: &Totals, label: &mut dyn FnMut(u32) -> String, pick: impl Fn(&SiteTotal) -> (u64, u64, u64)) -> Vec<AllocatedRow> {
    let mut by_name: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut rows: Vec<AllocatedRow> = Vec::new();
    for r in &t.rows {
        let (allocations, bytes, temporary) = pick(r);
        if allocations == 0 && bytes == 0 {
            continue;
        }
        let key = label(r.site);
        let i = *by_name.entry(key.clone()).or_insert_with(|| {
            rows.push(AllocatedRow { key, allocations: 0, bytes: 0, temporary: 0 });
            rows.len() - 1
        });
        let row = &mut rows[i];
        row.allocations += allocations;
        row.bytes += bytes;
        row.temporary += temporary;
    }
    rows
}

/// `top --allocated`: sites by bytes allocated since start (then
/// allocations), with their temporaries.
pub fn allocated(t: &Totals, label: &mut dyn FnMut(u32) -> String) -> Vec<AllocatedRow> {
    let mut rows = rows_by(t, label, |r| (r.allocations, r.bytes, r.temporary));
    rows.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(b.allocations.cmp(&a.allocations)).then_with(|| a.key.cmp(&b.key)));
    rows
}

/// `top --peak`: sites by their live bytes at the recorded peak.
pub fn at_peak(t: &Totals, label: &mut dyn FnMut(u32) -> String) -> Vec<crate::group::Row> {
    // A site's live count at the peak can read a little below zero (a
    // block freed by another thread whose counts were not yet summed):
    // nothing.
    let live = |v: u64| if (v as i64) < 0 { 0 } else { v };
    let mut rows: Vec<crate::group::Row> = rows_by(t, label, |r| (live(r.peak_count), live(r.peak_bytes), 0))
        .into_iter()
        .map(|r| crate::group::Row { key: r.key, allocations: r.allocations, bytes: r.bytes })
        .collect();
    rows.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.key.cmp(&b.key)));
    rows
}
