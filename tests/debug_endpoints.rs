//! `/debug/pprof/` and `/debug/state` on the metrics port: a CPU profile taken while this
//! process burns CPU decodes as pprof protobuf and holds samples; a second profile while one
//! runs is refused (429); heap statistics and the index are text; `seconds` is bounded. The
//! real binary serves both by default and answers 404 with `--enable-pprof=false
//! --enable-debug-state=false`. (The auth guard on `/debug/*` is checked in
//! tests/metrics_auth.rs.)

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::process::EppProcess;
use common::{WAIT, http_get, http_get_bytes};
use epp::app::{App, Settings};
use epp::proto::grpc::health::v1::health_check_response::ServingStatus;
use pprof::protos::Message as _;

/// Keeps one core busy until `stop` (or a bound of 60 s), so the profile has samples.
#[inline(never)]
fn burn_cpu_for_the_profile(stop: &AtomicBool) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        x = std::hint::black_box(x);
    }
    x
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_profile_is_pprof_protobuf_with_samples_and_one_runs_at_a_time() {
    let app = App::start(Settings::loopback()).await.expect("epp starts");
    let addr = app.metrics_addr;
    let stop = Arc::new(AtomicBool::new(false));
    let burner = {
        let stop = stop.clone();
        std::thread::spawn(move || burn_cpu_for_the_profile(&stop))
    };
    // Two overlapping 3 s windows: exactly one profiles, the other is refused.
    let path = "/debug/pprof/profile?seconds=3";
    let (first, second) = tokio::join!(http_get_bytes(addr, path, None), http_get_bytes(addr, path, None));
    stop.store(true, Ordering::Relaxed);
    burner.join().expect("burner");
    let (profile, refused) = if first.0 == 200 { (first, second) } else { (second, first) };
    assert_eq!(profile.0, 200, "{:?}", String::from_utf8_lossy(&profile.1));
    assert_eq!(refused.0, 429, "{:?}", String::from_utf8_lossy(&refused.1));

    let decoded = pprof::protos::Profile::decode(&profile.1[..]).expect("pprof protobuf");
    assert!(!decoded.sample.is_empty(), "the profile has samples");
    assert!(!decoded.sample_type.is_empty() && decoded.period > 0, "sample types and period are set");
    assert!(
        decoded.string_table.iter().any(|s| s.contains("burn_cpu_for_the_profile")),
        "the busy function is in the profile"
    );
    // The slot is free again.
    let (status, _) = http_get_bytes(addr, "/debug/pprof/profile?seconds=1", None).await;
    assert_eq!(status, 200);

    for bad in ["/debug/pprof/profile?seconds=0", "/debug/pprof/profile?seconds=121", "/debug/pprof/profile?seconds=x"]
    {
        assert_eq!(http_get(addr, bad).await.0, 400, "{bad}");
    }
    let (status, heap) = http_get(addr, "/debug/pprof/heap").await;
    assert_eq!(status, 200);
    assert!(heap.contains("in_use_bytes ") && heap.contains("mallinfo2"), "{heap}");
    let (status, index) = http_get(addr, "/debug/pprof/").await;
    assert_eq!(status, 200);
    assert!(index.contains("/debug/pprof/profile") && index.contains("/debug/pprof/heap"), "{index}");
    assert_eq!(http_get(addr, "/debug/pprof/goroutine").await.0, 404);
    app.shutdown().await;
}

#[tokio::test]
async fn debug_endpoints_are_not_found_when_disabled() {
    let mut settings = Settings::loopback();
    settings.enable_pprof = false;
    settings.enable_debug_state = false;
    let app = App::start(settings).await.expect("epp starts");
    for path in ["/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/profile?seconds=1", "/debug/state"] {
        assert_eq!(http_get(app.metrics_addr, path).await.0, 404, "{path}");
    }
    assert_eq!(http_get(app.metrics_addr, "/metrics").await.0, 200);
    app.shutdown().await;
}

/// Status of `GET path` on a spawned binary's metrics port.
async fn status_of(epp: &EppProcess, path: &str) -> u16 {
    tokio::time::timeout(WAIT, http_get(epp.metrics, path)).await.expect("answer in time").0
}

#[tokio::test]
async fn the_binary_serves_debug_endpoints_by_default_and_not_when_turned_off() {
    let mut on = EppProcess::spawn(&[], &[]);
    on.wait_health("liveness", ServingStatus::Serving).await;
    assert_eq!(status_of(&on, "/debug/pprof/").await, 200);
    assert_eq!(status_of(&on, "/debug/pprof/heap").await, 200);
    let (status, body) = http_get(on.metrics, "/debug/state").await;
    assert_eq!(status, 200);
    let state: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert!(state["endpoints"].as_array().is_some_and(Vec::is_empty), "{state}");
    assert!(!on.stderr().contains("--enable-pprof is accepted but not implemented"), "{}", on.stderr());

    let off = ["--enable-pprof=false".to_string(), "--enable-debug-state=false".to_string()];
    let mut off = EppProcess::spawn(&off, &[]);
    off.wait_health("liveness", ServingStatus::Serving).await;
    assert_eq!(status_of(&off, "/debug/pprof/").await, 404);
    assert_eq!(status_of(&off, "/debug/state").await, 404);
}
