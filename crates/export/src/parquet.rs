//! The dump as Parquet tables, for the engines that answer SQL over many
//! files (DuckDB, Spark, Trino, BigQuery): `blocks`, `edges`, `sites`,
//! `roots` and `dump`, with the columns and types DESIGN.md fixes. Every
//! row carries the dump's id (`PID-TIME_NS`, the same in all five tables
//! of a dump), so that the directories of many dumps read as one table.
//!
//! Streaming: rows go to the writer in batches of [`BATCH`], and a row
//! group is closed every [`ROW_GROUP`] rows, so the memory the export adds
//! is a few batches whatever the number of blocks (the analysis itself
//! holds the graph). Each file is written under a temporary name beside it
//! and renamed into place when complete.

use arrow_array::builder::{ListBuilder, StringBuilder, StructBuilder, UInt32Builder, UInt64Builder};
use arrow_array::{ArrayRef, BooleanArray, Float64Array, Int32Array, RecordBatch, StringArray, StructArray, UInt32Array, UInt64Array};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef};
use heapdump_analyze::leaks::LeakKind;
use heapdump_analyze::{Analysis, BlockId, RootKind, SiteId, Summary};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Rows per record batch handed to the writer.
pub const BATCH: usize = 64 * 1024;
/// Rows per row group: the unit a reader skips or reads in parallel, and
/// what the writer holds encoded before flushing it.
pub const ROW_GROUP: usize = 1024 * 1024;

/// One file written: its path and size.
#[derive(Clone, Debug)]
pub struct Written {
    /// Where.
    pub path: PathBuf,
    /// Its bytes.
    pub bytes: u64,
    /// Its rows.
    pub rows: u64,
}

fn other(e: impl std::error::Error + Send + Sync + 'static) -> std::io::Error {
    std::io::Error::other(e)
}

/// The dump's id in every table: its process and the time it was taken,
/// unique across the dumps of a fleet as long as no two processes of one
/// pid dump in the same nanosecond.
pub fn dump_id(ex: &Analysis<'_>) -> String {
    let h = &ex.heap().header;
    format!("{}-{}", h.pid, h.time_ns)
}

/// Writes the five tables into `dir` (made when missing): `dir/blocks.parquet`, ….
pub fn write_parquet(ex: &Analysis<'_>, dir: &Path) -> crate::Result<Vec<Written>> {
    std::fs::create_dir_all(dir)?;
    // The dominators before the leak classes (the blocks' table needs
    // both): asked for first, they are computed together, at one peak (see
    // `write_json`).
    ex.dominators();
    let id = dump_id(ex);
    let summary = Summary::of(ex.file()).map_err(other)?;
    let peak = if summary.truncated.is_none() { peak_of(ex)? } else { None };
    let mut out = vec![];
    out.push(table(dir, "dump", dump_schema(), |w| {
        w.write(&dump_batch(&id, &summary, peak.as_ref())?).map_err(other)?;
        Ok(1)
    })?);
    out.push(table(dir, "sites", sites_schema(), |w| write_sites(ex, &id, w))?);
    out.push(table(dir, "roots", roots_schema(), |w| write_roots(ex, &id, w))?);
    out.push(table(dir, "blocks", blocks_schema(), |w| write_blocks(ex, &id, w))?);
    out.push(table(dir, "edges", edges_schema(), |w| write_edges(ex, &id, w))?);
    Ok(out)
}

/// Writes one table through a temporary file renamed into place.
fn table(
    dir: &Path,
    name: &str,
    schema: SchemaRef,
    rows: impl FnOnce(&mut ArrowWriter<std::io::BufWriter<std::fs::File>>) -> crate::Result<u64>,
) -> crate::Result<Written> {
    let path = dir.join(format!("{name}.parquet"));
    let tmp = dir.join(format!(".{name}.parquet.{}.tmp", std::process::id()));
    let file = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
    let result = (|| {
        let props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_max_row_group_row_count(Some(ROW_GROUP))
            .set_created_by(concat!("heapdump ", env!("CARGO_PKG_VERSION")).into())
            .build();
        let mut w = ArrowWriter::try_new(std::io::BufWriter::new(file), schema, Some(props)).map_err(other)?;
        let n = rows(&mut w)?;
        let mut inner = w.into_inner().map_err(other)?;
        inner.flush()?;
        inner.get_ref().sync_all()?;
        Ok::<u64, std::io::Error>(n)
    })();
    let rows = match result {
        Ok(n) => n,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    if let Err(e) = std::fs::rename(&tmp, &path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    let bytes = std::fs::metadata(&path)?.len();
    Ok(Written { path, bytes, rows })
}

fn field(name: &str, ty: DataType, nullable: bool) -> Field {
    Field::new(name, ty, nullable)
}

fn strings() -> DataType {
    DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)))
}

fn blocks_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        field("dump", DataType::Utf8, false),
        field("address", DataType::UInt64, false),
        field("size", DataType::UInt64, false),
        field("site", DataType::UInt32, true),
        field("type", DataType::Utf8, false),
        field("class", DataType::Utf8, false),
        field("retained", DataType::UInt64, false),
        field("dominator", DataType::UInt64, true),
    ]))
}

fn edges_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        field("dump", DataType::Utf8, false),
        field("from", DataType::UInt64, false),
        field("to", DataType::UInt64, false),
        field("offset", DataType::UInt64, false),
    ]))
}

fn sites_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        field("dump", DataType::Utf8, false),
        field("id", DataType::UInt32, false),
        field("name", DataType::Utf8, false),
        field("frames", strings(), false),
    ]))
}

fn roots_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        field("dump", DataType::Utf8, false),
        field("kind", DataType::Utf8, false),
        field("name", DataType::Utf8, false),
        field("to", DataType::UInt64, false),
        field("offset", DataType::UInt64, false),
    ]))
}

fn signal_fields() -> Fields {
    Fields::from(vec![
        field("number", DataType::UInt32, false),
        field("name", DataType::Utf8, false),
        field("code", DataType::Int32, false),
        field("tid", DataType::UInt32, false),
        field("address", DataType::Utf8, true),
        field("sender", DataType::UInt32, true),
    ])
}

fn limit_fields() -> Fields {
    Fields::from(vec![
        field("kind", DataType::Utf8, false),
        field("bytes", DataType::UInt64, false),
        field("used", DataType::UInt64, false),
    ])
}

/// `summary --json`'s `peak`: the recorded peak (when, how much, its
/// three biggest sites).
struct Peak {
    time_ns: u64,
    before_dump_s: f64,
    bytes: u64,
    sites: Vec<heapdump_analyze::group::Row>,
}

fn peak_of(ex: &Analysis<'_>) -> crate::Result<Option<Peak>> {
    let Some(t) = heapdump_analyze::totals::totals(ex.file()).map_err(other)? else { return Ok(None) };
    if t.peak_time_ns == 0 {
        return Ok(None);
    }
    let taken = ex.file().dump().map_err(other)?.header().time_ns;
    let mut sites = heapdump_analyze::totals::at_peak(&t, &mut |s| ex.site_label(SiteId(s)));
    sites.truncate(3);
    Ok(Some(Peak { time_ns: t.peak_time_ns, before_dump_s: taken.saturating_sub(t.peak_time_ns) as f64 / 1e9, bytes: t.peak_bytes, sites }))
}

fn peak_site_fields() -> Fields {
    Fields::from(vec![
        field("key", DataType::Utf8, false),
        field("allocations", DataType::UInt64, false),
        field("bytes", DataType::UInt64, false),
    ])
}

fn peak_fields() -> Fields {
    Fields::from(vec![
        field("time_ns", DataType::UInt64, false),
        field("before_dump_s", DataType::Float64, false),
        field("bytes", DataType::UInt64, false),
        field("sites", DataType::List(Arc::new(Field::new("item", DataType::Struct(peak_site_fields()), true))), false),
    ])
}

/// `summary --json`'s fields, one column each (the CLI's parquet test
/// keeps the two in step), after the dump's id.
fn dump_schema() -> SchemaRef {
    let u64c = |n: &str, null: bool| field(n, DataType::UInt64, null);
    Arc::new(Schema::new(vec![
        field("dump", DataType::Utf8, false),
        u64c("allocations", false),
        u64c("bytes", false),
        field("mode", DataType::Utf8, false),
        field("pid", DataType::UInt32, false),
        u64c("threads", false),
        u64c("threads_not_stopped", false),
        u64c("roots", false),
        field("reason", DataType::Utf8, false),
        field("signal", DataType::Struct(signal_fields()), true),
        field("limit", DataType::Struct(limit_fields()), true),
        u64c("peak_bytes", true),
        u64c("total_allocations", true),
        u64c("total_bytes", true),
        u64c("pause_us", true),
        field("time", DataType::Float64, false),
        field("exe", DataType::Utf8, false),
        field("cmdline", strings(), false),
        u64c("modules", false),
        u64c("sites", false),
        field("backtrace", DataType::Utf8, false),
        field("outside", DataType::Boolean, false),
        u64c("sample_mean", false),
        u64c("pointers", false),
        field("format_version", DataType::Utf8, false),
        u64c("file_bytes", false),
        field("truncated", DataType::Utf8, true),
        field("allocator", DataType::Utf8, true),
        field("warnings", strings(), false),
        u64c("resident_anon", true),
        field("peak", DataType::Struct(peak_fields()), true),
    ]))
}

fn dump_batch(id: &str, s: &Summary, peak: Option<&Peak>) -> crate::Result<RecordBatch> {
    let u = |v: u64| Arc::new(UInt64Array::from(vec![v])) as ArrayRef;
    let uo = |v: Option<u64>| Arc::new(UInt64Array::from(vec![v])) as ArrayRef;
    let st = |v: &str| Arc::new(StringArray::from(vec![v])) as ArrayRef;
    let signal: ArrayRef = {
        let g = s.signal.as_ref();
        Arc::new(StructArray::new(
            signal_fields(),
            vec![
                Arc::new(UInt32Array::from(vec![g.map_or(0, |g| g.number)])),
                Arc::new(StringArray::from(vec![g.map_or("", |g| g.name.as_str())])),
                Arc::new(Int32Array::from(vec![g.map_or(0, |g| g.code)])),
                Arc::new(UInt32Array::from(vec![g.map_or(0, |g| g.tid)])),
                Arc::new(StringArray::from(vec![g.and_then(|g| g.address.as_deref())])),
                Arc::new(UInt32Array::from(vec![g.and_then(|g| g.sender)])),
            ],
            Some(vec![g.is_some()].into()),
        ))
    };
    let limit: ArrayRef = {
        let l = s.limit.as_ref();
        Arc::new(StructArray::new(
            limit_fields(),
            vec![
                Arc::new(StringArray::from(vec![l.map_or("", |l| l.kind.as_str())])),
                Arc::new(UInt64Array::from(vec![l.map_or(0, |l| l.bytes)])),
                Arc::new(UInt64Array::from(vec![l.map_or(0, |l| l.used)])),
            ],
            Some(vec![l.is_some()].into()),
        ))
    };
    let mut cmdline = ListBuilder::new(StringBuilder::new());
    for a in &s.cmdline {
        cmdline.values().append_value(a);
    }
    cmdline.append(true);
    let mut warnings = ListBuilder::new(StringBuilder::new());
    for w in &s.warnings {
        warnings.values().append_value(w);
    }
    warnings.append(true);
    let peak: ArrayRef = {
        let mut sites = ListBuilder::new(StructBuilder::from_fields(peak_site_fields(), 3)).with_field(Arc::new(Field::new(
            "item",
            DataType::Struct(peak_site_fields()),
            true,
        )));
        for r in peak.map_or(&[][..], |p| &p.sites[..]) {
            let b = sites.values();
            b.field_builder::<StringBuilder>(0).expect("key").append_value(&r.key);
            b.field_builder::<UInt64Builder>(1).expect("allocations").append_value(r.allocations);
            b.field_builder::<UInt64Builder>(2).expect("bytes").append_value(r.bytes);
            b.append(true);
        }
        sites.append(true);
        Arc::new(StructArray::new(
            peak_fields(),
            vec![
                Arc::new(UInt64Array::from(vec![peak.map_or(0, |p| p.time_ns)])),
                Arc::new(Float64Array::from(vec![peak.map_or(0.0, |p| p.before_dump_s)])),
                Arc::new(UInt64Array::from(vec![peak.map_or(0, |p| p.bytes)])),
                Arc::new(sites.finish()),
            ],
            Some(vec![peak.is_some()].into()),
        ))
    };
    let columns: Vec<ArrayRef> = vec![
        st(id),
        u(s.allocations),
        u(s.bytes),
        st(&s.mode),
        Arc::new(UInt32Array::from(vec![s.pid])),
        u(s.threads),
        u(s.threads_not_stopped),
        u(s.roots),
        st(&s.reason),
        signal,
        limit,
        uo(s.peak_bytes),
        uo(s.total_allocations),
        uo(s.total_bytes),
        uo(s.pause_us),
        Arc::new(Float64Array::from(vec![s.time])),
        st(&s.exe),
        Arc::new(cmdline.finish()),
        u(s.modules),
        u(s.sites),
        st(&s.backtrace),
        Arc::new(BooleanArray::from(vec![s.outside])),
        u(s.sample_mean),
        u(s.pointers),
        st(&s.format_version),
        u(s.file_bytes),
        Arc::new(StringArray::from(vec![s.truncated.as_deref()])),
        Arc::new(StringArray::from(vec![s.allocator.as_deref()])),
        Arc::new(warnings.finish()),
        uo(s.resident_anon),
        peak,
    ];
    RecordBatch::try_new(dump_schema(), columns).map_err(other)
}

/// A column of `n` copies of the dump's id.
fn ids(id: &str, n: usize) -> ArrayRef {
    let mut b = StringBuilder::with_capacity(n, n * id.len());
    for _ in 0..n {
        b.append_value(id);
    }
    Arc::new(b.finish())
}

type Writer = ArrowWriter<std::io::BufWriter<std::fs::File>>;

fn write_sites(ex: &Analysis<'_>, id: &str, w: &mut Writer) -> crate::Result<u64> {
    let mut sites: Vec<SiteId> = ex.heap().sites.keys().copied().filter(|s| *s != SiteId::NONE).collect();
    sites.sort();
    let schema = sites_schema();
    let mut rows = 0u64;
    for chunk in sites.chunks(BATCH) {
        let mut idc = UInt32Builder::with_capacity(chunk.len());
        let mut name = StringBuilder::new();
        let mut frames = ListBuilder::new(StringBuilder::new());
        for &s in chunk {
            idc.append_value(s.0);
            name.append_value(ex.site_label(s));
            for f in ex.site_frames(s) {
                frames.values().append_value(f.label());
            }
            frames.append(true);
        }
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![ids(id, chunk.len()), Arc::new(idc.finish()), Arc::new(name.finish()), Arc::new(frames.finish())],
        )
        .map_err(other)?;
        w.write(&b).map_err(other)?;
        rows += chunk.len() as u64;
    }
    Ok(rows)
}

fn write_roots(ex: &Analysis<'_>, id: &str, w: &mut Writer) -> crate::Result<u64> {
    let heap = ex.heap();
    let schema = roots_schema();
    let mut rows = 0u64;
    for chunk in heap.roots.chunks(BATCH) {
        let mut kind = StringBuilder::new();
        let mut name = StringBuilder::new();
        let mut to = UInt64Builder::with_capacity(chunk.len());
        let mut offset = UInt64Builder::with_capacity(chunk.len());
        for r in chunk {
            let region = &heap.root_regions[r.region as usize];
            kind.append_value(match region.kind {
                RootKind::Stack => "stack",
                RootKind::Registers => "registers",
                RootKind::Static => "static",
            });
            let n = ex.name_root(r);
            name.append_value(n.long());
            to.append_value(heap.block(r.target).addr);
            offset.append_value(n.offset().unwrap_or(r.offset));
        }
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![ids(id, chunk.len()), Arc::new(kind.finish()), Arc::new(name.finish()), Arc::new(to.finish()), Arc::new(offset.finish())],
        )
        .map_err(other)?;
        w.write(&b).map_err(other)?;
        rows += chunk.len() as u64;
    }
    Ok(rows)
}

/// A leak class as the `leaks --json` keys name it.
fn class(k: LeakKind) -> &'static str {
    match k {
        LeakKind::DefinitelyLost => "definitely_lost",
        LeakKind::IndirectlyLost => "indirectly_lost",
        LeakKind::PossiblyLost => "possibly_lost",
        LeakKind::StillReachable => "still_reachable",
    }
}

fn write_blocks(ex: &Analysis<'_>, id: &str, w: &mut Writer) -> crate::Result<u64> {
    let heap = ex.heap();
    let kinds = &ex.leaks().kind;
    let d = ex.dominators();
    let schema = blocks_schema();
    let n = heap.len();
    let mut start = 0;
    while start < n {
        let end = (start + BATCH).min(n);
        let len = end - start;
        let mut address = UInt64Builder::with_capacity(len);
        let mut size = UInt64Builder::with_capacity(len);
        let mut site = UInt32Builder::with_capacity(len);
        let mut ty = StringBuilder::new();
        let mut cls = StringBuilder::with_capacity(len, len * 15);
        let mut retained = UInt64Builder::with_capacity(len);
        let mut dominator = UInt64Builder::with_capacity(len);
        for (i, &kind) in kinds.iter().enumerate().take(end).skip(start) {
            let b = BlockId(i as u32);
            let blk = heap.block(b);
            address.append_value(blk.addr);
            size.append_value(blk.size);
            site.append_option((blk.site != SiteId::NONE).then_some(blk.site.0));
            ty.append_value(ex.type_of_block(b));
            cls.append_value(class(kind));
            retained.append_value(d.retained[i]);
            dominator.append_option(d.idom(b).map(|p| heap.block(p).addr));
        }
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                ids(id, len),
                Arc::new(address.finish()),
                Arc::new(size.finish()),
                Arc::new(site.finish()),
                Arc::new(ty.finish()),
                Arc::new(cls.finish()),
                Arc::new(retained.finish()),
                Arc::new(dominator.finish()),
            ],
        )
        .map_err(other)?;
        w.write(&batch).map_err(other)?;
        start = end;
    }
    Ok(n as u64)
}

fn write_edges(ex: &Analysis<'_>, id: &str, w: &mut Writer) -> crate::Result<u64> {
    let heap = ex.heap();
    let schema = edges_schema();
    let mut from = UInt64Builder::with_capacity(BATCH);
    let mut to = UInt64Builder::with_capacity(BATCH);
    let mut offset = UInt64Builder::with_capacity(BATCH);
    let mut rows = 0u64;
    let mut pending = 0usize;
    let mut flush = |from: &mut UInt64Builder, to: &mut UInt64Builder, offset: &mut UInt64Builder, len: usize| -> crate::Result<()> {
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![ids(id, len), Arc::new(from.finish()), Arc::new(to.finish()), Arc::new(offset.finish())],
        )
        .map_err(other)?;
        w.write(&b).map_err(other)
    };
    for i in 0..heap.len() {
        let b = BlockId(i as u32);
        let addr = heap.block(b).addr;
        for e in heap.edges(b) {
            from.append_value(addr);
            to.append_value(heap.block(e.target).addr);
            offset.append_value(e.offset);
            pending += 1;
            if pending == BATCH {
                flush(&mut from, &mut to, &mut offset, pending)?;
                rows += pending as u64;
                pending = 0;
            }
        }
    }
    if pending > 0 || rows == 0 {
        flush(&mut from, &mut to, &mut offset, pending)?;
        rows += pending as u64;
    }
    Ok(rows)
}
