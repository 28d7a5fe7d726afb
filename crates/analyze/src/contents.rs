//! What a dump says about the contents of blocks: the words the leak
//! heuristics look at (a block's first words, or all of it in full dumps).

use crate::file::DumpFile;
use crate::heap::{BlockId, Heap, INTERIOR};
use heapdump_format::Record;
use std::collections::HashMap;

/// What the dump says about a block's contents, for the heuristics.
pub trait Contents {
    /// Word `i` (0 or 1) of the block, when the dump has it (compact dumps
    /// keep only the first).
    fn word(&self, b: BlockId, i: usize) -> Option<u64>;
    /// The bytes from `offset` to the block's end, when the dump has them.
    fn tail(&self, b: BlockId, offset: u64) -> Option<&[u8]>;
}

/// Contents of nothing: heuristics decide from sizes alone.
pub struct NoContents;
impl Contents for NoContents {
    fn word(&self, _: BlockId, _: usize) -> Option<u64> {
        None
    }
    fn tail(&self, _: BlockId, _: u64) -> Option<&[u8]> {
        None
    }
}

/// Contents of the blocks that interior pointers point into: what the
/// leak heuristics look at. Built by one more pass over the dump.
pub struct DumpContents<'a> {
    words: HashMap<u32, BlockWords<'a>>,
}

/// First word, second word (full dumps) and contents (full dumps).
type BlockWords<'a> = (u64, Option<u64>, Option<&'a [u8]>);

impl<'a> DumpContents<'a> {
    /// Collects the first words (and, in full dumps, the contents) of every
    /// block an interior pointer points into.
    pub fn build(file: &'a DumpFile, heap: &Heap) -> DumpContents<'a> {
        let mut wanted = std::collections::HashSet::new();
        for r in &heap.roots {
            if r.interior {
                wanted.insert(r.target.0);
            }
        }
        heap.edges_checked();
        for &k in heap.interior_into.keys() {
            wanted.insert(heap.edge_target[k as usize] & !INTERIOR);
        }
        let mut words = HashMap::new();
        if wanted.is_empty() {
            return DumpContents { words };
        }
        let Ok(dump) = heapdump_format::Dump::parse(file.bytes()) else { return DumpContents { words } };
        for r in dump.records() {
            let a = match r {
                Ok((_, Record::Alloc(a))) => a,
                Ok((_, Record::Allocs(a))) => {
                    // Compact: the first word alone, which may be the
                    // block's first pointer (its target's address plus
                    // its delta).
                    for e in a.entries() {
                        let Ok(e) = e else { break };
                        let Some(b) = heap.find_start(e.address).filter(|b| wanted.contains(&b.0)) else { continue };
                        let first = match e.first_word {
                            heapdump_format::FirstWord::Value(v) => v,
                            heapdump_format::FirstWord::FirstLink => e
                                .links
                                .clone()
                                .next()
                                .map_or(0, |l| heap.block_ordinal_address(l.target).map_or(0, |t| t.wrapping_add(l.delta))),
                        };
                        words.insert(b.0, (first, None, None));
                    }
                    continue;
                }
                Ok(_) => continue,
                Err(_) => break,
            };
            let Some(b) = heap.find_start(a.address) else { continue };
            if !wanted.contains(&b.0) {
                continue;
            }
            match a.contents {
                heapdump_format::ContentsRef::Full(bytes) => {
                    let w1 = bytes.get(8..16).map(|w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])));
                    words.insert(b.0, (a.first_word, w1, Some(bytes)));
                }
                heapdump_format::ContentsRef::Compact { .. } => {
                    words.insert(b.0, (a.first_word, None, None));
                }
            }
        }
        DumpContents { words }
    }
}

impl Contents for DumpContents<'_> {
    fn word(&self, b: BlockId, i: usize) -> Option<u64> {
        let e = self.words.get(&b.0)?;
        match i {
            0 => Some(e.0),
            1 => e.1,
            _ => None,
        }
    }
    fn tail(&self, b: BlockId, offset: u64) -> Option<&[u8]> {
        self.words.get(&b.0)?.2?.get(usize::try_from(offset).ok()?..)
    }
}
