//! The dominator computation's tables on transparent huge pages.
//!
//! Its tables are arrays of 10^7 to 10^8 entries, each read at random (a
//! node's record, its DFS parent, its predecessors, its retained sum, by
//! node number). On 4 KiB pages each such read is a TLB miss, and each
//! page's first touch a fault whose page the kernel clears (1.5 M faults
//! for one `retained` of 10^8 blocks). Where the kernel gives huge pages
//! only on request (`/sys/kernel/mm/transparent_hugepage/enabled` =
//! `madvise`, the usual default), they are asked for here, table by table,
//! before the table is first touched; where it gives them always or never,
//! the request changes nothing.
//!
//! Only the tables written whole are advised: a huge page is backed whole
//! at its first touch, so a table written sparsely (a block's heuristic)
//! would cost its full size. The leak classes' states and lost blocks'
//! leaders are advised too (`leaks.rs`): the states are all written; the
//! leaders only where blocks are lost, but where few are (a heap mostly
//! reachable) the table is left untouched, and where many are it is
//! written nearly whole, each leader at random (mostly-lost 100 M blocks:
//! the leak classes 0.83x the time, 3 rounds, the states' and leaders'
//! tables on huge pages; 4 bytes a block at most, counted in the budget). (Every large allocation
//! of the command line advised, as a global allocator, made the dense 10 M
//! heap's `retained` peak 37.4 B a block instead of 33.5, and `leaks` 1.10x
//! the CPU, for no gain of its own.)

/// Tables of at least this many bytes are advised (a huge page's size:
/// smaller ones cannot hold one).
pub const HUGE_MIN: usize = 2 << 20;

/// Asks for huge pages over the 2 MiB-aligned part of `table`'s capacity
/// (before its pages are touched: pages already present stay small until
/// the kernel's background collapsing finds them).
pub(crate) fn huge_pages<T>(table: &Vec<T>) {
    advise(table.as_ptr().cast(), table.capacity() * std::mem::size_of::<T>());
}

/// Asks for huge pages over the 2 MiB-aligned part of `[p, p + len)`.
fn advise(p: *const u8, len: usize) {
    if p.is_null() || len < HUGE_MIN {
        return;
    }
    let start = (p as usize).next_multiple_of(HUGE_MIN);
    let end = (p as usize + len) & !(HUGE_MIN - 1);
    if end > start {
        // SAFETY: the range lies inside an allocation the caller owns; the
        // advice changes how its pages are backed, never what they hold.
        // An error (a kernel without THP) is ignored: the pages stay small.
        #[allow(unsafe_code, clippy::disallowed_methods)]
        let _ = unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `VmFlags` of the mapping holding `addr`, from /proc/self/smaps.
    fn vm_flags(addr: usize) -> String {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ').filter(|(r, _)| r.contains('-') && !r.ends_with(':')) {
                let (lo, hi) = range.split_once('-').unwrap();
                let (lo, hi) = (usize::from_str_radix(lo, 16).unwrap(), usize::from_str_radix(hi, 16).unwrap());
                inside = (lo..hi).contains(&addr);
            } else if inside && line.starts_with("VmFlags:") {
                return line.to_string();
            }
        }
        panic!("no mapping holds {addr:#x}")
    }

    /// A table of 8 MiB is advised (`hg` in its mapping's flags: the
    /// kernel backs it with huge pages where THP is on request), keeps its
    /// bytes when it grows, and a small one is left alone.
    #[test]
    fn large_tables_ask_for_huge_pages_and_keep_their_bytes() {
        if !std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").is_ok_and(|s| !s.contains("[never]")) {
            return; // no THP: the advice is refused, and nothing changes
        }
        let mut big: Vec<u8> = Vec::with_capacity(8 << 20);
        huge_pages(&big);
        let mid = (big.as_ptr() as usize).next_multiple_of(HUGE_MIN) + 4096;
        assert!(vm_flags(mid).contains(" hg"), "{}", vm_flags(mid));
        big.extend((0..8 << 20).map(|i| (i % 251) as u8));
        big.reserve(16 << 20);
        assert!(big.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8), "grown, the table keeps its bytes");
        let small: Vec<u64> = vec![0; 8 << 10];
        huge_pages(&small);
        assert!(!vm_flags(small.as_ptr() as usize).contains(" hg"), "{}", vm_flags(small.as_ptr() as usize));
    }
}
