//! The binaries' allocator (`epp::memory::Allocator`, mimalloc) in a process of its own: memory
//! freed after a burst goes back to the kernel once `epp::memory::trim` has run, as glibc's does
//! with `malloc_trim` (the unit tests of `epp::memory` cover glibc).

#[global_allocator]
static ALLOCATOR: epp::memory::Allocator = epp::memory::Allocator;

#[test]
fn freed_memory_goes_back_to_the_kernel_after_a_trim() {
    let rss_kib = || epp::memory::resident_kib().expect("VmRSS of /proc/self/status");
    let start = rss_kib();
    // 160 MiB in 8 KiB blocks, each followed by a small block that stays (so no whole region
    // becomes free by itself), as a burst of request bodies leaves the heap.
    let mut big = Vec::with_capacity(20_000);
    let mut pins = Vec::with_capacity(20_000);
    for i in 0..20_000u32 {
        big.push(vec![i as u8; 8 * 1024]);
        pins.push(Box::new(i));
    }
    let peak = rss_kib();
    drop(big);
    epp::memory::trim();
    let after = rss_kib();
    assert!(peak > start + 120 * 1024, "the burst did not show: {start} -> {peak} KiB");
    assert!(after < start + 60 * 1024, "freed memory stayed: {start} -> {peak} -> {after} KiB");
    assert!(epp::telemetry::profiling::heap_statistics().contains("mimalloc_committed_bytes "));
    drop(pins);
}
