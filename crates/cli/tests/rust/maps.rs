//! Hash tables held only through their maps: hashbrown points a map at its
//! table's control bytes, inside the block, so each table is found through
//! an interior pointer that the `hashbrown` heuristic must prove (in
//! compact dumps, from the layout the writer checked). Prints the number
//! of tables it keeps.
use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

static MAPS: OnceLock<Vec<HashMap<u64, u64>>> = OnceLock::new();
static SETS: OnceLock<Vec<HashSet<u32>>> = OnceLock::new();

fn main() {
    let sizes = [3u64, 7, 28, 100, 1000, 5000];
    let maps = sizes.iter().map(|&n| (0..n).map(|i| (i, i * 3)).collect::<HashMap<u64, u64>>()).collect::<Vec<_>>();
    let sets = sizes.iter().map(|&n| (0..n as u32).collect::<HashSet<u32>>()).collect::<Vec<_>>();
    let tables = maps.len() + sets.len();
    MAPS.set(maps).unwrap();
    SETS.set(sets).unwrap();
    println!("TABLES {tables}");
}
