//! Controller behaviour under tokio's paused clock: saturation holds and releases, strict
//! priority through the dispatch loop, TTL expiry, capacity and no-endpoint rejections,
//! withdrawal when the caller goes away, and the dispatch order of the SLO-deadline ordering
//! and program-aware fairness policies. Fake detectors set the pool's saturation (or let a
//! fixed number of requests out per cycle).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::metrics::FlowControlMetrics;
use super::settings::FlowControlSettings;
use super::{FlowController, FlowRequest, Outcome};
use crate::endpoints::model::Candidate;
use crate::endpoints::store::EndpointStore;
use crate::framework::plugin::SaturationDetector;
use crate::test_util::endpoint;

/// Saturation set by the test.
#[derive(Debug, Default)]
struct FakeDetector(AtomicU64);

impl FakeDetector {
    fn set(&self, v: f64) {
        self.0.store(v.to_bits(), Ordering::SeqCst);
    }
}

impl SaturationDetector for FakeDetector {
    fn saturation(&self, _: &[Candidate], _: tokio::time::Instant) -> f64 {
        f64::from_bits(self.0.load(Ordering::SeqCst))
    }
}

struct Fixture {
    controller: Arc<FlowController>,
    detector: Arc<FakeDetector>,
    registry: prometheus::Registry,
}

fn fixture(settings: FlowControlSettings, saturation: f64) -> Fixture {
    let store = EndpointStore::new();
    store.replace(vec![endpoint("pod").endpoint()]);
    let detector = Arc::new(FakeDetector::default());
    detector.set(saturation);
    let registry = prometheus::Registry::new();
    let metrics = FlowControlMetrics::register(&registry, "pool-a").unwrap();
    let controller = Arc::new(FlowController::new(settings, store, Some(detector.clone()), metrics));
    Fixture { controller, detector, registry }
}

fn request(flow: &str, priority: i32) -> FlowRequest {
    FlowRequest { fairness_id: flow.into(), priority, bytes: 10, model: "m".into(), target: "m".into(), slo_ttft: None }
}

/// Waits (on the queue-length watch) until `n` requests are queued.
async fn until_queued(c: &FlowController, n: u64) {
    let mut length = c.subscribe_queued();
    let reached = tokio::time::timeout(Duration::from_secs(60), length.wait_for(|v| *v == n)).await;
    assert!(matches!(reached, Ok(Ok(_))), "expected {n} queued, found {}", c.queued());
}

/// `llm_d_epp_flow_control_requests_total{outcome}` of the fixture's pool.
fn outcomes(registry: &prometheus::Registry, outcome: &str) -> u64 {
    let families = registry.gather();
    let Some(f) = families.iter().find(|f| f.name() == "llm_d_epp_flow_control_requests_total") else { return 0 };
    f.get_metric()
        .iter()
        .filter(|m| m.get_label().iter().any(|l| l.name() == "outcome" && l.value() == outcome))
        .filter(|m| m.get_label().iter().any(|l| l.name() == "inference_pool" && l.value() == "pool-a"))
        .map(|m| m.get_counter().get_value() as u64)
        .sum()
}

/// Spawns a waiter that reports `(name, outcome)` when its admission ends.
fn waiter(
    c: &Arc<FlowController>,
    r: FlowRequest,
    name: &'static str,
    done: &mpsc::UnboundedSender<(&'static str, Outcome)>,
) -> tokio::task::JoinHandle<()> {
    let (c, done) = (c.clone(), done.clone());
    tokio::spawn(async move {
        let outcome = c.enqueue_and_wait(r).await;
        let _ = done.send((name, outcome));
    })
}

#[tokio::test(start_paused = true)]
async fn saturation_holds_every_band_until_load_drops_then_releases_by_priority() {
    let f = fixture(FlowControlSettings::default(), 1.0);
    let cancel = CancellationToken::new();
    let dispatcher = tokio::spawn(f.controller.clone().run(cancel.clone()));
    let (tx, mut rx) = mpsc::unbounded_channel();
    waiter(&f.controller, request("a", 0), "low", &tx);
    waiter(&f.controller, request("b", -1), "sheddable", &tx);
    waiter(&f.controller, request("a", 7), "high", &tx);
    until_queued(&f.controller, 3).await;
    // 50 ms of dispatch cycles at saturation 1.0 (= the ceiling): nothing leaves.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(f.controller.queued(), 3);
    assert!(rx.try_recv().is_err());
    f.detector.set(0.5);
    let mut order = Vec::new();
    for _ in 0..3 {
        let (name, outcome) = rx.recv().await.unwrap();
        assert_eq!(outcome, Outcome::Dispatched);
        order.push(name);
    }
    assert_eq!(order, ["high", "low", "sheddable"]);
    assert_eq!(outcomes(&f.registry, "Dispatched"), 3);
    cancel.cancel();
    dispatcher.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_dispatch_cycle_stops_at_the_ceiling() {
    let f = fixture(FlowControlSettings { ceiling: 0.8, ..FlowControlSettings::default() }, 0.9);
    let (tx, _rx) = mpsc::unbounded_channel();
    waiter(&f.controller, request("a", 0), "a", &tx);
    until_queued(&f.controller, 1).await;
    assert_eq!(f.controller.dispatch_cycle(), 0, "0.9 >= ceiling 0.8 holds");
    f.detector.set(0.79);
    assert_eq!(f.controller.dispatch_cycle(), 1);
    assert_eq!(f.controller.queued(), 0);
}

#[tokio::test(start_paused = true)]
async fn requests_past_their_ttl_leave_with_evicted_ttl() {
    let settings = FlowControlSettings { default_ttl: Some(Duration::from_secs(5)), ..FlowControlSettings::default() };
    let f = fixture(settings, 2.0);
    let start = tokio::time::Instant::now();
    let outcome = f.controller.enqueue_and_wait(request("a", 0)).await;
    assert_eq!(outcome, Outcome::EvictedTtl(Duration::from_secs(5)));
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    assert_eq!(f.controller.queued(), 0);
    assert_eq!(outcomes(&f.registry, "EvictedTTL"), 1);
}

#[tokio::test(start_paused = true)]
async fn full_queues_reject_with_capacity() {
    let f = fixture(FlowControlSettings { max_requests: Some(1), ..FlowControlSettings::default() }, 1.0);
    let (tx, _rx) = mpsc::unbounded_channel();
    waiter(&f.controller, request("a", 0), "a", &tx);
    until_queued(&f.controller, 1).await;
    let outcome = f.controller.enqueue_and_wait(request("b", 9)).await;
    assert!(matches!(&outcome, Outcome::RejectedCapacity(m) if m.contains("maxRequests")), "{outcome:?}");
    assert_eq!(f.controller.queued(), 1);
    assert_eq!(outcomes(&f.registry, "RejectedCapacity"), 1);
}

#[tokio::test(start_paused = true)]
async fn an_empty_pool_rejects_at_once() {
    let f = fixture(FlowControlSettings::default(), 0.0);
    let empty = FlowController::new(
        FlowControlSettings::default(),
        EndpointStore::new(),
        Some(f.detector.clone()),
        FlowControlMetrics::detached(),
    );
    assert_eq!(empty.enqueue_and_wait(request("a", 0)).await, Outcome::RejectedNoEndpoints);
    assert_eq!(empty.queued(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_goes_away_is_withdrawn() {
    let f = fixture(FlowControlSettings::default(), 1.0);
    let (tx, _rx) = mpsc::unbounded_channel();
    let task = waiter(&f.controller, request("a", 0), "a", &tx);
    until_queued(&f.controller, 1).await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert_eq!(f.controller.queued(), 0);
    assert_eq!(outcomes(&f.registry, "EvictedContextCancelled"), 1);
    f.detector.set(0.0);
    assert_eq!(f.controller.dispatch_cycle(), 0, "nothing left to release");
}

#[tokio::test(start_paused = true)]
async fn with_no_endpoint_ttl_a_request_waits_for_the_pool_to_get_an_endpoint() {
    let settings =
        FlowControlSettings { no_endpoint_ttl: Some(Duration::from_secs(5)), ..FlowControlSettings::default() };
    let store = EndpointStore::new();
    let detector = Arc::new(FakeDetector::default());
    let controller =
        Arc::new(FlowController::new(settings, store.clone(), Some(detector.clone()), FlowControlMetrics::detached()));
    tokio::spawn(controller.clone().run(CancellationToken::new()));
    // Nobody adds an endpoint: rejected when the TTL passes, not before.
    let t0 = tokio::time::Instant::now();
    assert_eq!(controller.enqueue_and_wait(request("a", 0)).await, Outcome::RejectedNoEndpoints);
    assert_eq!(t0.elapsed(), Duration::from_secs(5));
    // An endpoint arrives while the request waits: it is queued and dispatched.
    let waiting = tokio::spawn({
        let c = controller.clone();
        async move { c.enqueue_and_wait(request("b", 0)).await }
    });
    tokio::task::yield_now().await;
    store.replace(vec![endpoint("pod").endpoint()]);
    assert_eq!(waiting.await.expect("join"), Outcome::Dispatched);
}

/// Lets exactly `budget` requests out per refill: unsaturated while budget remains.
#[derive(Debug, Default)]
struct BudgetDetector(AtomicU64);

impl SaturationDetector for BudgetDetector {
    fn saturation(&self, _: &[Candidate], _: tokio::time::Instant) -> f64 {
        let took = self.0.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| b.checked_sub(1)).is_ok();
        if took { 0.0 } else { 1.0 }
    }
}

/// Queues `requests` in order (each queued before the next arrives), then releases them one
/// dispatch cycle at a time; returns the names in dispatch order.
async fn dispatch_order(
    settings: FlowControlSettings,
    requests: Vec<(FlowRequest, &'static str)>,
) -> Vec<&'static str> {
    let store = EndpointStore::new();
    store.replace(vec![endpoint("pod").endpoint()]);
    let detector = Arc::new(BudgetDetector::default());
    let c = Arc::new(FlowController::new(settings, store, Some(detector.clone()), FlowControlMetrics::detached()));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let n = requests.len();
    for (i, (r, name)) in requests.into_iter().enumerate() {
        waiter(&c, r, name, &tx);
        until_queued(&c, i as u64 + 1).await;
        tokio::time::advance(Duration::from_millis(1)).await;
    }
    let mut order = Vec::new();
    for _ in 0..n {
        detector.0.store(1, Ordering::SeqCst);
        assert_eq!(c.dispatch_cycle(), 1, "one release per unit of budget");
        let (name, outcome) = rx.recv().await.expect("a waiter finished");
        assert_eq!(outcome, Outcome::Dispatched);
        order.push(name);
    }
    order
}

#[tokio::test(start_paused = true)]
async fn slo_deadline_ordering_dispatches_the_tightest_ttft_slo_first() {
    use super::settings::{BandSettings, Ordering as Order};
    let band = BandSettings { ordering: Order::SloDeadline, ..BandSettings::default() };
    let settings = FlowControlSettings { default_band: band, ..FlowControlSettings::default() };
    let slo = |flow, ms: Option<u64>| FlowRequest { slo_ttft: ms.map(Duration::from_millis), ..request(flow, 0) };
    let order = dispatch_order(
        settings,
        vec![(slo("a", None), "no-slo"), (slo("b", Some(900)), "loose"), (slo("a", Some(100)), "tight")],
    )
    .await;
    assert_eq!(order, ["tight", "loose", "no-slo"]);
}

#[tokio::test(start_paused = true)]
async fn program_aware_fairness_dispatches_the_least_served_program_first() {
    use super::settings::{BandSettings, Fairness};
    use crate::framework::build::{BuildContext, PluginSpec};
    use crate::plugins::fairness::program_aware;
    let spec = PluginSpec {
        name: "pa".into(),
        type_name: "program-aware-fairness".into(),
        parameters: serde_json::Value::Null,
        path: "plugins[0]".into(),
    };
    let inst = program_aware::build(&spec, &BuildContext::default()).expect("builds");
    let policy = inst.fairness.clone().expect("fairness role");
    // "heavy" already consumed 3000 weighted tokens.
    let heavy = crate::request::InferenceRequest {
        headers: crate::request::headers::RequestHeaders {
            all: vec![("x-llm-d-inference-fairness-id".into(), "heavy".into())],
        },
        ..Default::default()
    };
    let usage = crate::request::usage::Usage { prompt_tokens: 1000, completion_tokens: 1000, cached_tokens: None };
    let result = crate::framework::result::SchedulingResult {
        primary_profile: "p".into(),
        profiles: Vec::new(),
        destination_port: None,
    };
    inst.response.expect("response role").on_response_complete(&heavy, &result, Some(&usage));
    let band = BandSettings { fairness: Fairness::Policy(policy), ..BandSettings::default() };
    let settings = FlowControlSettings { default_band: band, ..FlowControlSettings::default() };
    let order = dispatch_order(
        settings,
        vec![
            (request("heavy", 0), "h1"),
            (request("heavy", 0), "h2"),
            (request("light", 0), "l1"),
            (request("light", 0), "l2"),
        ],
    )
    .await;
    assert_eq!(order, ["l1", "l2", "h1", "h2"], "global-strict would give h1 h2 l1 l2");
}
