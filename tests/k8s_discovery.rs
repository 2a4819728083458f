//! Kubernetes discovery against a mock API server on loopback: the endpoint store follows an
//! InferencePool's pods through readiness changes, deletion, a 410 Gone relist, a dropped
//! watch, bad lines and pool changes; `k8s-notification-source` delivers typed notifications;
//! and an epp started with `--pool-name` routes to a pod it discovered.

mod common;

use std::time::Duration;

use common::kube::{MockKube, pod, pool, pool_settings};
use common::*;
use epp::endpoints::store::EndpointStore;
use epp::framework::plugin::{BackgroundService, ServiceContext};
use epp::k8s::KubeHandle;
use epp::k8s::discovery::PoolDiscovery;
use epp::k8s::metrics::K8sMetrics;
use epp::k8s::notify::{Gvk, NotificationKind};
use epp::k8s::pool::{GROUP_V1, PoolRef};
use epp::k8s::watch::WatchOptions;
use epp::plugins::producer::k8s_notification::K8sNotificationSource;
use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

const POOLS: &str = "/apis/inference.networking.k8s.io/v1/namespaces/ns/inferencepools";
const PODS: &str = "/api/v1/namespaces/ns/pods";

fn fast() -> WatchOptions {
    WatchOptions {
        initial_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(50),
        timeout_seconds: 60,
    }
}

fn client(mock: &MockKube) -> ::kube::Client {
    epp::k8s::client::plain_http(&format!("http://{}", mock.addr)).unwrap()
}

/// Store ids, in order.
/// Discovery of pool `ns/pool` from `mock` into `store`, and its progress counter.
fn discovery(mock: &MockKube, store: &EndpointStore, metrics: K8sMetrics) -> (PoolDiscovery, watch::Receiver<u64>) {
    let progress = watch::channel(0).0;
    let seen = progress.subscribe();
    let discovery = PoolDiscovery {
        client: client(mock),
        pool: PoolRef { name: "pool".into(), namespace: "ns".into(), group: GROUP_V1.into() },
        store: store.clone(),
        options: fast(),
        metrics,
        progress,
        synced: watch::channel(false).0,
    };
    (discovery, seen)
}

fn ids(store: &EndpointStore) -> Vec<String> {
    store.snapshot().entries.iter().map(|e| e.endpoint.id.to_string()).collect()
}

/// Waits until discovery has published `events` watch events and the store holds `expected`.
async fn settle(progress: &mut watch::Receiver<u64>, store: &EndpointStore, events: u64, expected: &[&str]) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while *progress.borrow_and_update() < events {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let changed = tokio::time::timeout(left, progress.changed()).await;
        assert!(matches!(changed, Ok(Ok(()))), "discovery stuck at {} of {events} events", *progress.borrow());
    }
    assert_eq!(*progress.borrow(), events, "more watch events than the test produced");
    assert_eq!(ids(store), expected);
}

#[tokio::test]
async fn store_follows_pool_pods_through_readiness_deletion_relist_and_drops() {
    let mock = MockKube::start().await;
    let app = json!({"app": "vllm"});
    mock.apply(POOLS, pool("pool", app.clone(), &[8000]));
    mock.apply(POOLS, pool("other-pool", json!({"app": "other"}), &[9000]));
    mock.apply(PODS, pod("a", json!({"app": "vllm", "llm-d.ai/role": "decode"}), Some("127.0.0.21"), true));
    mock.apply(PODS, pod("x", json!({"app": "other"}), Some("127.0.0.29"), true));

    let store = EndpointStore::new();
    let metrics = K8sMetrics::unregistered();
    let (discovery, mut seen) = discovery(&mock, &store, metrics.clone());
    let cancel = CancellationToken::new();
    let task = tokio::spawn(discovery.run(cancel.clone()));

    // Pool LIST, then pod LIST (the selector keeps pod x out).
    settle(&mut seen, &store, 2, &["a-rank-0"]).await;
    let a = store.snapshot().get("a-rank-0").unwrap().endpoint.clone();
    assert_eq!((&*a.host_port, a.label("llm-d.ai/role"), a.rank), ("127.0.0.21:8000", Some("decode"), 0));

    // Added but not ready: no endpoint. Then ready: endpoint.
    mock.apply(PODS, pod("b", app.clone(), Some("127.0.0.22"), false));
    settle(&mut seen, &store, 3, &["a-rank-0"]).await;
    mock.apply(PODS, pod("b", app.clone(), Some("127.0.0.22"), true));
    settle(&mut seen, &store, 4, &["a-rank-0", "b-rank-0"]).await;
    // Ready without an IP yet: no endpoint.
    mock.apply(PODS, pod("c", app.clone(), None, true));
    settle(&mut seen, &store, 5, &["a-rank-0", "b-rank-0"]).await;
    // Unready, then deleted.
    mock.apply(PODS, pod("a", app.clone(), Some("127.0.0.21"), false));
    settle(&mut seen, &store, 6, &["b-rank-0"]).await;
    mock.delete(PODS, "b");
    settle(&mut seen, &store, 7, &[]).await;
    assert_eq!(metrics.ready_pods.get(), 0);

    // 410 Gone: the watch ends with an ERROR event and the client relists (one more LIST).
    let (lists, _) = mock.calls(PODS);
    mock.apply(PODS, pod("c", app.clone(), Some("127.0.0.23"), true));
    settle(&mut seen, &store, 8, &["c-rank-0"]).await;
    mock.expire(PODS);
    settle(&mut seen, &store, 9, &["c-rank-0"]).await;
    assert_eq!(mock.calls(PODS).0, lists + 1, "410 Gone forces a relist");
    assert_eq!(metrics.failures.with_label_values(&["pods", "gone"]).get(), 1);
    mock.wait_until("pod watch reopened after relist", |m| m.open_watches(PODS) == 1).await;

    // A dropped connection: the client resumes from its last version without relisting and
    // sees the change made while it was disconnected.
    let (lists, watches) = mock.calls(PODS);
    mock.drop_watches(PODS);
    mock.apply(PODS, pod("d", app.clone(), Some("127.0.0.24"), true));
    settle(&mut seen, &store, 10, &["c-rank-0", "d-rank-0"]).await;
    let (lists_after, watches_after) = mock.calls(PODS);
    assert_eq!(lists_after, lists, "a dropped watch resumes without a relist");
    assert!(watches_after > watches);

    // A line that is not JSON is counted and skipped; the watch goes on.
    mock.inject(PODS, "{not json");
    mock.apply(PODS, pod("a", app.clone(), Some("127.0.0.21"), true));
    settle(&mut seen, &store, 11, &["a-rank-0", "c-rank-0", "d-rank-0"]).await;
    assert_eq!(metrics.failures.with_label_values(&["pods", "decode"]).get(), 1);

    // Two target ports: two ranks per pod. An unusable pool keeps the endpoints.
    mock.apply(POOLS, pool("pool", app.clone(), &[8000, 8001]));
    let two = ["a-rank-0", "a-rank-1", "c-rank-0", "c-rank-1", "d-rank-0", "d-rank-1"];
    settle(&mut seen, &store, 12, &two).await;
    assert_eq!(&*store.snapshot().get("c-rank-1").unwrap().endpoint.host_port, "127.0.0.23:8001");
    mock.apply(POOLS, pool("pool", app.clone(), &[]));
    settle(&mut seen, &store, 13, &two).await;
    assert_eq!(metrics.failures.with_label_values(&["inferencepools", "decode"]).get(), 1);

    // The pool is deleted: nothing is left.
    mock.delete(POOLS, "pool");
    settle(&mut seen, &store, 14, &[]).await;

    cancel.cancel();
    tokio::time::timeout(WAIT, task).await.expect("discovery stops").unwrap().unwrap();
}

#[tokio::test]
async fn selector_change_restarts_the_pod_watch() {
    let mock = MockKube::start().await;
    mock.apply(POOLS, pool("pool", json!({"app": "vllm"}), &[8000]));
    mock.apply(PODS, pod("v", json!({"app": "vllm"}), Some("127.0.0.31"), true));
    mock.apply(PODS, pod("s", json!({"app": "sglang"}), Some("127.0.0.32"), true));
    let store = EndpointStore::new();
    let (discovery, mut seen) = discovery(&mock, &store, K8sMetrics::unregistered());
    let cancel = CancellationToken::new();
    tokio::spawn(discovery.run(cancel.clone()));
    settle(&mut seen, &store, 2, &["v-rank-0"]).await;
    mock.apply(POOLS, pool("pool", json!({"app": "sglang"}), &[8000]));
    // The pool event filters the old pods out at once; the new LIST brings the new ones.
    settle(&mut seen, &store, 4, &["s-rank-0"]).await;
    cancel.cancel();
}

#[tokio::test]
async fn notification_source_delivers_typed_events() {
    let mock = MockKube::start().await;
    mock.set_discovery(
        "/api/v1",
        json!([{"name": "configmaps", "kind": "ConfigMap", "namespaced": true},
        {"name": "configmaps/status", "kind": "ConfigMap", "namespaced": true}]),
    );
    let cms = "/api/v1/namespaces/ns/configmaps";
    mock.apply(cms, json!({"metadata": {"name": "one", "namespace": "ns"}, "data": {"k": "1"}}));

    let gvk = Gvk { group: String::new(), version: "v1".into(), kind: "ConfigMap".into() };
    let source = K8sNotificationSource::new("cm-source".into(), gvk);
    let mut events = source.subscribe();
    let metrics = K8sMetrics::unregistered();
    let cancel = CancellationToken::new();
    let kube = KubeHandle { client: client(&mock), namespace: "ns".into(), metrics: metrics.clone(), options: fast() };
    let cx = ServiceContext { endpoints: EndpointStore::new(), cancel: cancel.clone(), kube: Some(kube) };
    source.start(cx).await.unwrap();

    let mut next = async || tokio::time::timeout(WAIT, events.recv()).await.expect("notification in time").unwrap();
    let n = next().await;
    assert_eq!((n.kind, n.name(), n.namespace()), (NotificationKind::AddOrUpdate, "one", "ns"));
    assert_eq!(n.object["data"]["k"], "1");
    assert_eq!(n.gvk.kind, "ConfigMap");

    mock.wait_until("configmap watch open", |m| m.open_watches(cms) == 1).await;
    mock.apply(cms, json!({"metadata": {"name": "one", "namespace": "ns"}, "data": {"k": "2"}}));
    let n = next().await;
    assert_eq!((n.kind, n.object["data"]["k"].as_str()), (NotificationKind::AddOrUpdate, Some("2")));

    // A relist with nothing changed repeats nothing; the next event is the next change.
    mock.expire(cms);
    mock.wait_until("configmap relisted", |m| m.calls(cms).0 == 2).await;
    mock.delete(cms, "one");
    let n = next().await;
    assert_eq!((n.kind, n.name()), (NotificationKind::Delete, "one"));

    // Deletions missed while disconnected surface after the relist.
    mock.apply(cms, json!({"metadata": {"name": "two", "namespace": "ns"}}));
    assert_eq!(next().await.name(), "two");
    mock.wait_until("configmap watch open", |m| m.open_watches(cms) == 1).await;
    mock.drop_watches(cms);
    mock.delete(cms, "two");
    mock.expire(cms);
    let n = next().await;
    assert_eq!((n.kind, n.name()), (NotificationKind::Delete, "two"));
    let count = |e: &str| metrics.notifications.with_label_values(&["cm-source", "configmaps", e]).get();
    assert_eq!((count("add_or_update"), count("delete")), (3, 2));
    cancel.cancel();
}

#[tokio::test]
async fn epp_with_pool_name_routes_to_a_discovered_pod() {
    let fake = FakeVllm::start([127, 0, 0, 41], 0, 0, 0.0).await;
    let mock = MockKube::start().await;
    mock.apply(POOLS, pool("vllm-pool", json!({"app": "vllm"}), &[fake.addr.port()]));
    mock.apply(PODS, pod("vllm-0", json!({"app": "vllm"}), Some("127.0.0.41"), true));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = mock.kubeconfig(dir.path());
    let kube = pool_settings(&kubeconfig);
    assert_eq!(kube.pool.as_ref().map(|p| p.group.as_str()), Some(GROUP_V1));
    let mut settings = epp::app::Settings::loopback();
    settings.kubernetes = Some(kube);
    settings.refresh_metrics_interval = Duration::from_millis(10);
    let app = epp::app::App::start(settings).await.expect("epp starts");

    let mut changes = app.store.subscribe();
    let deadline = tokio::time::Instant::now() + WAIT;
    while ids(&app.store) != ["vllm-0-rank-0"] {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        assert!(matches!(tokio::time::timeout(left, changes.changed()).await, Ok(Ok(()))), "pod not discovered");
    }
    let mut client = epp::proto::ext_proc::external_processor_client::ExternalProcessorClient::connect(format!(
        "http://{}",
        app.grpc_addr
    ))
    .await
    .unwrap();
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(&chat("m", "hi", false), true)).await;
    let reply = ex.next().await;
    assert_eq!(set_header(&reply, "x-gateway-destination-endpoint"), Some(fake.addr.to_string()));
    let text = scrape(app.metrics_addr).await;
    assert!(text.contains("epp_k8s_pool_endpoints 1"), "{text}");
    // Graceful shutdown waits for open ext_proc streams.
    drop((ex, client));
    tokio::time::timeout(WAIT, app.shutdown()).await.expect("epp stops");
}

#[test]
fn pool_flags_are_checked() {
    use clap::Parser;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, "current-context: a\ncontexts: [{name: a, context: {cluster: c}}]\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n").unwrap();
    let parse = |extra: &[&str]| {
        let mut args = vec!["epp", "--kubeconfig", kubeconfig.to_str().unwrap()];
        args.extend_from_slice(extra);
        epp::cli::Cli::try_parse_from(args)
    };
    let bad_group = parse(&["--pool-name", "p", "--pool-group", "example.com"]).unwrap();
    assert!(bad_group.serve.kube_settings().unwrap_err().contains("--pool-group"));
    let alpha =
        parse(&["--pool-name", "p", "--pool-group", "inference.networking.x-k8s.io", "--pool-namespace", "llm"]);
    let kube = alpha.unwrap().serve.kube_settings().unwrap().unwrap();
    let pool = kube.pool.unwrap();
    let api = pool.api_resource().unwrap();
    assert_eq!(
        (api.api_version.as_str(), api.plural.as_str()),
        ("inference.networking.x-k8s.io/v1alpha2", "inferencepools")
    );
    assert_eq!(pool.namespace, "llm");
    assert!(parse(&["--pool-name", "p", "--endpoints-file", "e.yaml"]).is_err(), "pool and file are exclusive");
    let no_pool = parse(&[]).unwrap().serve.kube_settings().unwrap().unwrap();
    assert!(no_pool.pool.is_none(), "a kubeconfig alone gives plugins access without discovery");
}

#[tokio::test]
async fn standalone_mode_follows_selected_pods_without_an_inference_pool() {
    use epp::k8s::pool::PoolSpec;
    let mock = MockKube::start().await;
    let selected = json!({"app": "vllm", "tier": "serving"});
    mock.apply(PODS, pod("a", selected.clone(), Some("127.0.0.61"), true));
    mock.apply(PODS, pod("other", json!({"app": "vllm"}), Some("127.0.0.62"), true));
    let store = EndpointStore::new();
    let (discovery, mut seen) = discovery(&mock, &store, K8sMetrics::unregistered());
    let synced = discovery.synced.subscribe();
    let spec = PoolSpec {
        selector: [("app".to_string(), "vllm".to_string()), ("tier".to_string(), "serving".to_string())].into(),
        target_ports: vec![8000, 8001],
    };
    let cancel = CancellationToken::new();
    tokio::spawn(discovery.run_standalone(spec, cancel.clone()));
    // One pod LIST; one endpoint per target port; the pod without `tier` is not selected.
    settle(&mut seen, &store, 1, &["a-rank-0", "a-rank-1"]).await;
    assert!(*synced.borrow(), "standalone discovery is synced after the pod LIST");
    assert_eq!(&*store.snapshot().get("a-rank-1").unwrap().endpoint.host_port, "127.0.0.61:8001");
    mock.apply(PODS, pod("b", selected.clone(), Some("127.0.0.63"), true));
    settle(&mut seen, &store, 2, &["a-rank-0", "a-rank-1", "b-rank-0", "b-rank-1"]).await;
    mock.delete(PODS, "a");
    settle(&mut seen, &store, 3, &["b-rank-0", "b-rank-1"]).await;
    assert_eq!(mock.calls(POOLS), (0, 0), "no InferencePool is read in standalone mode");
    cancel.cancel();
}
