//! The whole analysis as one JSON document, for scripts.

use heapdump_analyze::group;
use heapdump_analyze::leaks::LeakKind;
use heapdump_analyze::Analysis;
use heapdump_analyze::BlockId;
use serde::Serialize;
use std::collections::HashMap;
use std::io::Write;

#[derive(Serialize)]
struct Doc<'a> {
    pid: u32,
    exe: &'a str,
    mode: &'static str,
    reason: &'static str,
    allocations: u64,
    bytes: u64,
    edges: u64,
    roots: u64,
    leaks: Leaks,
    top_sites: Vec<Row>,
    top_types: Vec<Row>,
    size_classes: Vec<Row>,
    retainers: Vec<Node>,
}

#[derive(Serialize)]
struct Row {
    key: String,
    allocations: u64,
    bytes: u64,
}

#[derive(Serialize)]
struct Count {
    bytes: u64,
    blocks: u64,
}

#[derive(Serialize)]
struct Leaks {
    definitely_lost: Count,
    indirectly_lost: Count,
    possibly_lost: Count,
    still_reachable: Count,
    by_site: Vec<LeakRow>,
}

/// A lost group (`Analysis::leak_report`): its site's definitely or
/// possibly lost blocks and the indirectly lost ones they hold.
#[derive(Serialize)]
struct LeakRow {
    kind: LeakKind,
    site: String,
    blocks: u64,
    bytes: u64,
    indirect_blocks: u64,
    indirect_bytes: u64,
}

/// A node of the dominator tree.
#[derive(Serialize)]
pub(crate) struct Node {
    pub address: String,
    pub size: u64,
    pub retained: u64,
    pub dominated: u32,
    pub name: String,
    pub site: String,
    pub class: LeakKind,
    pub children: Vec<Node>,
}

/// The dominator tree from `b` down to `depth` levels, `width` children each.
pub(crate) fn tree(ex: &Analysis<'_>, b: u32, depth: usize, width: usize, names: &mut HashMap<heapdump_analyze::SiteId, String>) -> Node {
    let blk = ex.heap().block(BlockId(b));
    let children = if depth == 0 {
        vec![]
    } else {
        ex.dominated_by(Some(BlockId(b))).iter().take(width).map(|&c| tree(ex, c, depth - 1, width, names)).collect()
    };
    Node {
        address: format!("{:#x}", blk.addr),
        size: blk.size,
        retained: ex.dominators().retained[b as usize],
        dominated: ex.dominators().dominated[b as usize],
        name: ex.block_name(BlockId(b), names),
        site: ex.site_label(blk.site),
        class: ex.leaks().kind[b as usize],
        children,
    }
}

/// Writes the document.
pub fn write_json(ex: &Analysis<'_>, out: &mut dyn Write) -> crate::Result<()> {
    let heap = ex.heap();
    // The dominators first: asked for before the leak classes, they are
    // computed with them (both cores, one peak); the classes computed
    // alone first stay beside the dominators' computation, which then
    // builds the predecessor lists during its whole walk (3.5 bytes a
    // block more at the peak on a heap that is mostly lost).
    ex.dominators();
    let l = ex.leak_report();
    let c = |x: &heapdump_analyze::leaks::Count| Count { bytes: x.bytes, blocks: x.blocks };
    let rows =
        |by| ex.top(by).into_iter().take(50).map(|r| Row { key: r.key, allocations: r.allocations, bytes: r.bytes }).collect::<Vec<_>>();
    let top_sites = rows(group::GroupBy::Site);
    let top_types = rows(group::GroupBy::Type);
    let size_classes = rows(group::GroupBy::Size);
    let mut names = HashMap::new();
    let retainers = ex.dominated_by(None).iter().take(30).map(|&b| tree(ex, b, 3, 10, &mut names)).collect();
    let doc = Doc {
        pid: heap.header.pid,
        exe: &heap.exe,
        mode: heap.header.mode.as_str(),
        reason: heap.header.reason.as_str(),
        allocations: heap.len() as u64,
        bytes: heap.total_bytes(),
        edges: heap.edge_count() as u64,
        roots: ex.roots(),
        leaks: Leaks {
            definitely_lost: c(&l.definitely_lost),
            indirectly_lost: c(&l.indirectly_lost),
            possibly_lost: c(&l.possibly_lost),
            still_reachable: c(&l.still_reachable),
            by_site: l
                .groups
                .iter()
                .take(100)
                .map(|g| LeakRow {
                    kind: g.kind,
                    site: g.site.clone(),
                    blocks: g.blocks,
                    bytes: g.bytes,
                    indirect_blocks: g.indirect_blocks,
                    indirect_bytes: g.indirect_bytes,
                })
                .collect(),
        },
        top_sites,
        top_types,
        size_classes,
        retainers,
    };
    serde_json::to_writer_pretty(&mut *out, &doc)?;
    writeln!(out)?;
    Ok(())
}
