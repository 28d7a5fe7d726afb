//! pprof (`profile.proto`, gzipped): in-use objects and bytes by site.
//!
//! Messages are declared with prost's derive (no code generator needed);
//! field numbers follow google/pprof's `proto/profile.proto`.

use heapdump_analyze::Analysis;
use std::collections::HashMap;
use std::io::Write;

/// `perftools.profiles.Profile`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    /// Sample types.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// Samples.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// Mappings.
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    /// Locations.
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// Functions.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Strings; index 0 is "".
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// Time of the dump.
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// Period type.
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// Period (the sampling mean, in bytes, for sampled dumps).
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// Comments.
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    /// The default sample type's name, as a string index (pprof's
    /// `default_sample_type`; unset, the last type).
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// `ValueType`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueType {
    /// Type, as a string index.
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// Unit, as a string index.
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// `Sample`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    /// Locations, leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per sample type.
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    /// Labels.
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// `Label`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Label {
    /// Key, as a string index.
    #[prost(int64, tag = "1")]
    pub key: i64,
    /// String value, as a string index.
    #[prost(int64, tag = "2")]
    pub str: i64,
    /// Numeric value.
    #[prost(int64, tag = "3")]
    pub num: i64,
    /// Unit of `num`.
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

/// `Mapping`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Mapping {
    /// Id (1-based).
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Start address.
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    /// Limit address.
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    /// File offset of `memory_start`.
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    /// File name, as a string index.
    #[prost(int64, tag = "5")]
    pub filename: i64,
    /// Build id (hex), as a string index.
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    /// Functions resolved.
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    /// File names resolved.
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    /// Line numbers resolved.
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    /// Inlined frames resolved.
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

/// `Location`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Location {
    /// Id (1-based).
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Mapping id, 0 for none.
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// Address.
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// Lines, innermost (inlined) first.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

/// `Line`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Line {
    /// Function id.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// Line number.
    #[prost(int64, tag = "2")]
    pub line: i64,
}

/// `Function`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Function {
    /// Id (1-based).
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Name, as a string index.
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// System (mangled) name, as a string index.
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// File name, as a string index.
    #[prost(int64, tag = "4")]
    pub filename: i64,
    /// Start line.
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}

struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Strings {
        Strings { table: vec![String::new()], index: HashMap::from([(String::new(), 0)]) }
    }
    fn id(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// Builds the profile: one sample per allocation site with the in-use
/// object count and bytes (sampled sites scaled by their weights), a
/// `type` label, locations with their mappings and symbolized lines.
pub fn profile(ex: &Analysis<'_>) -> Profile {
    let heap = ex.heap();
    let mut s = Strings::new();
    // What the runtime counted since the start, when the dump has it
    // (SITE_TOTALS): Go's heap profiles' alloc_objects and alloc_space
    // come first, as theirs do.
    let totals = heapdump_analyze::totals::totals(ex.file()).ok().flatten();
    let mut sample_type = Vec::new();
    if totals.is_some() {
        sample_type.push(ValueType { r#type: s.id("alloc_objects"), unit: s.id("count") });
        sample_type.push(ValueType { r#type: s.id("alloc_space"), unit: s.id("bytes") });
    }
    sample_type.push(ValueType { r#type: s.id("inuse_objects"), unit: s.id("count") });
    sample_type.push(ValueType { r#type: s.id("inuse_space"), unit: s.id("bytes") });
    let mut p = Profile {
        sample_type,
        // A string index: the type pprof opens on, bytes (as Go's heap
        // profiles, whose last type, the default, is inuse_space).
        default_sample_type: 0,
        time_nanos: heap.header.time_ns as i64,
        ..Default::default()
    };
    if heap.sample_mean > 0 {
        p.period_type = Some(ValueType { r#type: s.id("space"), unit: s.id("bytes") });
        p.period = heap.sample_mean as i64;
    }
    p.default_sample_type = s.id("inuse_space");
    p.comment.push(s.id(&format!("heapdump of pid {} ({})", heap.header.pid, heap.exe)));
    // Mappings: one per module with an executable segment.
    let mut mapping_of_module: HashMap<usize, u64> = HashMap::new();
    for (mi, m) in heap.modules.iter().enumerate() {
        let Some(seg) = m.segments.iter().find(|s| s.flags & heapdump_format::raw::SEG_X != 0) else { continue };
        let id = p.mapping.len() as u64 + 1;
        let build_id: String = m.build_id.iter().map(|b| format!("{b:02x}")).collect();
        p.mapping.push(Mapping {
            id,
            memory_start: m.bias.wrapping_add(seg.vaddr),
            memory_limit: m.bias.wrapping_add(seg.vaddr).wrapping_add(seg.memsz),
            file_offset: seg.file_offset,
            filename: s.id(&m.path),
            build_id: s.id(&build_id),
            has_functions: true,
            has_filenames: true,
            has_line_numbers: true,
            has_inline_frames: true,
        });
        mapping_of_module.insert(mi, id);
    }
    let mut functions: HashMap<(String, String), u64> = HashMap::new();
    // By return address and lines (function, line).
    let mut locations: HashMap<(u64, Vec<(u64, i64)>), u64> = HashMap::new();
    // Aggregate blocks by site, and by type where blocks of one site have
    // types of their own (trait objects named by their vtables).
    let sites = ex.live_by_site(ex.has_block_types());
    let type_key = s.id("type");
    // Whole numbers that add up to the totals they estimate.
    let counts = heapdump_analyze::round_keeping_sum(&sites.iter().map(|t| t.count).collect::<Vec<_>>());
    let byte_counts = heapdump_analyze::round_keeping_sum(&sites.iter().map(|t| t.bytes).collect::<Vec<_>>());
    let mut samples: Vec<(heapdump_analyze::SiteId, Option<String>, u64, u64)> =
        sites.into_iter().zip(counts.into_iter().zip(byte_counts)).map(|(t, (count, bytes))| (t.site, t.ty, count, bytes)).collect();
    // Each site's totals go on its first sample; a site with none live
    // gets a sample of its own (nothing in use).
    let mut allocated: HashMap<u32, (u64, u64)> = HashMap::new();
    if let Some(t) = &totals {
        for r in &t.rows {
            let e = allocated.entry(r.site).or_default();
            e.0 += r.allocations;
            e.1 += r.bytes;
        }
        let live: std::collections::HashSet<u32> = samples.iter().map(|x| x.0 .0).collect();
        let mut gone: Vec<u32> = allocated.keys().copied().filter(|k| !live.contains(k)).collect();
        gone.sort_unstable();
        samples.extend(gone.into_iter().map(|k| (heapdump_analyze::SiteId(k), None, 0, 0)));
    }
    for (site, ty, count, bytes) in samples {
        let mut loc_ids = Vec::new();
        // The stack `top` names the site by (`Analysis::stack`): it starts
        // at the program's frame, so that the program's function, not
        // malloc, is the leaf.
        let stack = ex.stack(site);
        if stack.is_empty() {
            // A location standing for "no site recorded".
            let id = *locations.entry((u64::MAX, vec![])).or_insert_with(|| {
                let fid = p.function.len() as u64 + 1;
                p.function.push(Function { id: fid, name: s.id("(no site recorded)"), system_name: 0, filename: 0, start_line: 0 });
                let id = p.location.len() as u64 + 1;
                p.location.push(Location { id, mapping_id: 0, address: 0, line: vec![Line { function_id: fid, line: 0 }] });
                id
            });
            loc_ids.push(id);
        }
        // One location per return address, its frames (inlined first) as
        // its lines; an address whose inner frames the stack leaves out is
        // a location of its own.
        for frames in stack.chunk_by(|a, b| a.address == b.address) {
            let a = frames[0].address;
            let mut lines = Vec::new();
            for f in frames {
                let name = f.function.clone().unwrap_or_else(|| format!("{a:#x}"));
                let file = f.file.clone().unwrap_or_default();
                let fid = *functions.entry((name.clone(), file.clone())).or_insert_with(|| {
                    let fid = p.function.len() as u64 + 1;
                    p.function.push(Function {
                        id: fid,
                        name: s.id(&name),
                        system_name: s.id(&name),
                        filename: s.id(&file),
                        start_line: 0,
                    });
                    fid
                });
                lines.push(Line { function_id: fid, line: i64::from(f.line.unwrap_or(0)) });
            }
            let key = (a, lines.iter().map(|l| (l.function_id, l.line)).collect::<Vec<_>>());
            let id = match locations.get(&key) {
                Some(&id) => id,
                None => {
                    let id = p.location.len() as u64 + 1;
                    let mapping_id = heap.code_module(a).and_then(|mi| mapping_of_module.get(&mi).copied()).unwrap_or(0);
                    // pprof's addresses are the call instruction: return address - 1.
                    p.location.push(Location { id, mapping_id, address: a.saturating_sub(1), line: lines });
                    locations.insert(key, id);
                    id
                }
            };
            loc_ids.push(id);
        }
        // A site with nothing live (its totals only) has no type to say.
        let label = if count == 0 && bytes == 0 && ty.is_none() {
            vec![]
        } else {
            let ty = ty.unwrap_or_else(|| ex.type_of(site));
            vec![Label { key: type_key, str: s.id(&ty), num: 0, num_unit: 0 }]
        };
        let mut value = Vec::with_capacity(4);
        if totals.is_some() {
            let (n, b) = allocated.remove(&site.0).unwrap_or_default();
            value.extend([n as i64, b as i64]);
        }
        value.extend([count as i64, bytes as i64]);
        p.sample.push(Sample { location_id: loc_ids, value, label });
    }
    p.string_table = s.table;
    p
}

/// Writes the gzipped profile.
pub fn write_pprof(ex: &Analysis<'_>, out: &mut dyn Write) -> crate::Result<()> {
    let p = profile(ex);
    let bytes = prost::Message::encode_to_vec(&p);
    let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    gz.write_all(&bytes)?;
    gz.finish()?;
    Ok(())
}
