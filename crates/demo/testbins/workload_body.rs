// The allocations both workload binaries make: 100 buffers of capacity
// 10001..=10100 in a Vec (2400 bytes of Vec headers), then a dump at exit.

#[inline(never)]
fn build() -> Vec<Vec<u8>> {
    (0..100).map(|i| Vec::with_capacity(10_001 + i)).collect()
}

fn main() {
    let v = build();
    let total: usize = v.iter().map(|b| b.capacity()).sum();
    assert_eq!(total, 100 * 10_001 + 4950);
    // Keep it live until exit: the dump at exit sees it.
    std::mem::forget(v);
}
