//! `/debug/pprof/` on the metrics port (`--enable-pprof`, GIE's flag): a CPU profile in
//! pprof's protobuf format (`/debug/pprof/profile?seconds=N`, sampled by the `pprof` crate
//! through `SIGPROF` only while a profile runs) and the allocators' heap statistics
//! (`/debug/pprof/heap`, mimalloc's committed bytes and glibc's `mallinfo2` as text; not a Go
//! heap profile: there is no
//! per-allocation-site data). One CPU profile runs at a time; a second request while one runs
//! gets `429 Too Many Requests`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use hyper::StatusCode;

/// Window of a CPU profile without `seconds` (Go's default).
pub const DEFAULT_PROFILE_SECONDS: u64 = 30;
/// Longest CPU profile window accepted.
pub const MAX_PROFILE_SECONDS: u64 = 120;
/// Sampling frequency of the CPU profiler, in Hz (Go's `runtime/pprof` default).
const SAMPLE_HZ: i32 = 100;
/// Frames of these libraries are not unwound (signal trampolines that backtraces choke on).
const BLOCKLIST: [&str; 4] = ["libc", "libgcc", "pthread", "vdso"];

/// An answer of a debug endpoint: status, content type, body.
#[derive(Debug)]
pub struct DebugReply {
    /// HTTP status.
    pub status: StatusCode,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// Body.
    pub body: Bytes,
}

impl DebugReply {
    /// A `text/plain` reply.
    pub fn text(status: StatusCode, body: impl Into<Bytes>) -> Self {
        Self { status, content_type: "text/plain; charset=utf-8", body: body.into() }
    }
}

/// Errors of a CPU profile request.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// `seconds` is not an integer in `1..=MAX_PROFILE_SECONDS`.
    #[error("seconds must be an integer in 1..={MAX_PROFILE_SECONDS}, got {0:?}")]
    BadSeconds(String),
    /// Another CPU profile is running.
    #[error("a CPU profile is already running")]
    Busy,
    /// The profiler failed.
    #[error("profiler: {0}")]
    Profiler(#[from] pprof::Error),
    /// The profile could not be encoded.
    #[error("encoding the profile: {0}")]
    Encode(String),
}

impl ProfileError {
    fn status(&self) -> StatusCode {
        match self {
            ProfileError::BadSeconds(_) => StatusCode::BAD_REQUEST,
            ProfileError::Busy => StatusCode::TOO_MANY_REQUESTS,
            ProfileError::Profiler(_) | ProfileError::Encode(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// Set while a CPU profile runs (the profiler is process-wide).
static PROFILING: AtomicBool = AtomicBool::new(false);

/// Clears [`PROFILING`] when the profile ends, also when its request is dropped.
struct ProfilingSlot;

impl ProfilingSlot {
    fn take() -> Result<Self, ProfileError> {
        PROFILING.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).map_err(|_| ProfileError::Busy)?;
        Ok(ProfilingSlot)
    }
}

impl Drop for ProfilingSlot {
    fn drop(&mut self) {
        PROFILING.store(false, Ordering::Release);
    }
}

/// Answers a `GET` under `/debug/pprof/` (`path` without the query).
pub async fn handle(path: &str, query: Option<&str>) -> DebugReply {
    match path.trim_end_matches('/') {
        "/debug/pprof" => DebugReply::text(StatusCode::OK, INDEX),
        "/debug/pprof/profile" => match cpu_profile(query).await {
            Ok(body) => DebugReply { status: StatusCode::OK, content_type: "application/octet-stream", body },
            Err(error) => DebugReply::text(error.status(), format!("{error}\n")),
        },
        "/debug/pprof/heap" => DebugReply::text(StatusCode::OK, heap_statistics()),
        _ => DebugReply::text(StatusCode::NOT_FOUND, "not found; see /debug/pprof/\n"),
    }
}

const INDEX: &str = "\
/debug/pprof/profile?seconds=N  CPU profile over N seconds (default 30, at most 120), pprof protobuf; one at a time
/debug/pprof/heap               heap statistics of the allocators (mimalloc, glibc mallinfo2), text; not a Go heap profile
/debug/state                    endpoints, prefix index, KV-event subscriptions and flow-control queues, JSON
";

/// The `seconds` of a query string (default [`DEFAULT_PROFILE_SECONDS`]).
pub fn profile_seconds(query: Option<&str>) -> Result<u64, ProfileError> {
    let value = query
        .unwrap_or_default()
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find_map(|(key, value)| (key == "seconds").then_some(value));
    match value {
        None => Ok(DEFAULT_PROFILE_SECONDS),
        Some(v) => match v.parse::<u64>() {
            Ok(n) if (1..=MAX_PROFILE_SECONDS).contains(&n) => Ok(n),
            _ => Err(ProfileError::BadSeconds(v.to_string())),
        },
    }
}

/// Samples the CPU for the query's window and returns the profile as pprof protobuf.
async fn cpu_profile(query: Option<&str>) -> Result<Bytes, ProfileError> {
    let seconds = profile_seconds(query)?;
    let slot = ProfilingSlot::take()?;
    let guard = pprof::ProfilerGuardBuilder::default().frequency(SAMPLE_HZ).blocklist(&BLOCKLIST).build()?;
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    // Symbolising the stacks takes a while: off the async workers. The slot stays taken until
    // the profiler is stopped, even if the request goes away meanwhile.
    let encode = move || {
        let report = guard.report().build()?;
        drop(guard);
        drop(slot);
        let profile = report.pprof()?;
        let mut body = Vec::new();
        pprof::protos::Message::encode(&profile, &mut body).map_err(|e| ProfileError::Encode(e.to_string()))?;
        Ok::<_, ProfileError>(Bytes::from(body))
    };
    tokio::task::spawn_blocking(encode).await.map_err(|e| ProfileError::Encode(e.to_string()))?
}

/// The allocators' counters as `name value` lines: mimalloc's (the binaries' allocator, see
/// `crate::memory`), then glibc's `mallinfo2` (C libraries and tests allocate there).
pub fn heap_statistics() -> String {
    let mut out = String::from("# mimalloc process info (the allocator of epp; not a Go heap profile)\n");
    let (mut commit, mut peak_commit) = (0usize, 0usize);
    let none = std::ptr::null_mut();
    // SAFETY: mi_process_info writes through each pointer that is not null (the two given are
    // valid) and skips the null ones.
    unsafe { libmimalloc_sys::mi_process_info(none, none, none, none, none, &mut commit, &mut peak_commit, none) };
    let mimalloc = [
        ("mimalloc_committed_bytes", commit, "memory mimalloc holds from the system, read/write"),
        ("mimalloc_peak_committed_bytes", peak_commit, "the most it held"),
    ];
    for (name, value, meaning) in mimalloc {
        out.push_str(&format!("{name} {value}  # {meaning}\n"));
    }
    out.push_str(&glibc_statistics());
    out
}

/// glibc's `mallinfo2` counters as `name value` lines.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn glibc_statistics() -> String {
    // SAFETY: mallinfo2 takes no arguments and returns a plain struct by value.
    let info = unsafe { libc::mallinfo2() };
    let lines = [
        ("arena_bytes", info.arena, "bytes obtained from the system with brk (main arena)"),
        ("mmapped_bytes", info.hblkhd, "bytes in chunks allocated with mmap"),
        ("in_use_bytes", info.uordblks, "bytes in allocated chunks"),
        ("free_bytes", info.fordblks, "bytes in free chunks"),
        ("releasable_bytes", info.keepcost, "free bytes at the top of the heap that could be trimmed"),
        ("free_chunks", info.ordblks, "free chunks"),
        ("mmapped_chunks", info.hblks, "chunks allocated with mmap"),
    ];
    let mut out = String::from("# glibc mallinfo2 (main arena and mmapped chunks)\n");
    for (name, value, meaning) in lines {
        out.push_str(&format!("{name} {value}  # {meaning}\n"));
    }
    out
}

/// glibc's counters exist only with glibc.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn glibc_statistics() -> String {
    String::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_are_bounded() {
        assert_eq!(profile_seconds(None).unwrap(), DEFAULT_PROFILE_SECONDS);
        assert_eq!(profile_seconds(Some("debug=1&seconds=5")).unwrap(), 5);
        for bad in ["seconds=0", "seconds=121", "seconds=-1", "seconds=x", "seconds="] {
            assert!(matches!(profile_seconds(Some(bad)), Err(ProfileError::BadSeconds(_))), "{bad}");
        }
    }

    #[test]
    fn heap_statistics_report_allocated_bytes() {
        let held = vec![0u8; 1 << 20];
        let text = heap_statistics();
        std::hint::black_box(&held);
        let value = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("{name} missing: {text}"))
        };
        // Tests allocate with glibc; the binaries' mimalloc is reported too.
        assert!(value("mmapped_bytes ") + value("in_use_bytes ") >= 1 << 20, "{text}");
        value("mimalloc_committed_bytes ");
    }
}
