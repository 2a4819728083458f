//! The process allocator, and giving freed heap memory back to the operating system after a
//! burst.
//!
//! The binaries (`epp`, `epp-tools`) allocate with [`Allocator`], mimalloc (crate `mimalloc`,
//! Microsoft's allocator built from its C source): on a realistic 10 KB chat request (about 60
//! messages, two strings each) glibc's `malloc`/`free` cost about 84,000 instructions, a fifth
//! of epp's work per request, as blocks of a kilobyte and more miss its per-thread cache and go
//! through the shared bins; mimalloc's per-thread free lists take about 22,000 (callgrind,
//! `docs/benchmarks.md`). It is built without transparent huge pages (feature `no_thp`): with
//! them an idle epp held 9-24 MB more. Test binaries and other users of the library keep the
//! system allocator, so the functions here handle both.
//!
//! glibc's allocator keeps what a burst of streams freed inside its per-thread arenas: measured
//! here, 10,000 streams of 100 KB bodies at 5,000/s took a release epp from 15 MB to 249 MB of
//! RSS, and it stayed there after the streams closed. Every `TRIM_PERIOD` this task calls
//! `malloc_trim(0)`, which returns the free pages of every arena (glibc >= 2.8) and costs well
//! under a millisecond on an idle heap. mimalloc hands back the pages a thread freed on its own,
//! after a short delay, the next time that thread allocates or frees; the same task also calls
//! `mi_collect`, which returns at once what its own thread and exited threads hold (after the
//! burst above: 27-64 MB 10 s later with mimalloc, 28 MB with glibc and the trim). The glibc
//! calls are written by hand (libc exposes them, no crate wraps them); mimalloc's come from
//! `libmimalloc-sys`.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How often freed memory is handed back.
pub const TRIM_PERIOD: Duration = Duration::from_secs(5);

/// Runs until `cancel`, trimming the heap every `period`.
pub async fn run_trimmer(period: Duration, cancel: CancellationToken) {
    let mut ticks = crate::periodic::Periodic::new(period);
    while ticks.tick(&cancel).await {
        trim();
    }
}

/// The binaries' global allocator: `#[global_allocator] static A: Allocator = Allocator;`.
pub use mimalloc::MiMalloc as Allocator;

/// This process's resident set in KiB (`VmRSS` of `/proc/self/status`); `None` where that
/// file is missing or unreadable. What memory tests and benches measure.
pub fn resident_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    line.split_whitespace().next()?.parse().ok()
}

/// Returns both allocators' free pages to the kernel (glibc's only on glibc targets).
pub fn trim() {
    // SAFETY: mi_collect frees nothing in use; it returns the pages of empty segments of the
    // calling thread's heap and of abandoned ones, and is callable from any thread.
    unsafe {
        libmimalloc_sys::mi_collect(true);
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists under its arena locks; it
    // takes no pointer from us and is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn trimmer_stops_when_cancelled() {
        let cancel = CancellationToken::new();
        let task = tokio::spawn(run_trimmer(Duration::from_secs(1), cancel.clone()));
        tokio::time::advance(Duration::from_secs(3)).await;
        cancel.cancel();
        task.await.expect("trimmer ends without panicking");
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn trim_returns_freed_heap_pages() {
        let rss_kib = || resident_kib().expect("VmRSS of /proc/self/status");
        // Blocks below the mmap threshold (so they live in an arena), each followed by a small
        // pinned block that stays: freeing the big ones leaves holes the allocator never hands
        // back by itself (no free space at the top of the heap), only malloc_trim does.
        let mut big = Vec::with_capacity(20_000);
        let mut pins = Vec::with_capacity(20_000);
        for i in 0..20_000u32 {
            big.push(vec![i as u8; 8 * 1024]);
            pins.push(Box::new(i));
        }
        drop(big);
        let before_trim = rss_kib();
        trim();
        let after = rss_kib();
        // About half of the 160 MB comes back: only whole pages inside a free chunk can be.
        assert!(before_trim > after + 50 * 1024, "trim returned too little: {before_trim} -> {after} KiB");
        drop(pins);
    }
}
