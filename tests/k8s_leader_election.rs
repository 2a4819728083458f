//! Leader election between real epp processes against the mock API server: two replicas
//! elect exactly one leader (the only one ready; both keep their endpoints warm); a graceful
//! exit (SIGTERM) releases the Lease and the standby takes over within the retry period; a
//! SIGKILLed leader is replaced once its Lease expires (15 s, GIE's duration). Switch-over
//! times are measured from the signal to the first SERVING answer of the new leader's
//! `readiness` health name (polled every 20 ms) and printed.

mod common;

use std::time::{Duration, Instant};

use common::kube::{MockKube, pod, pool};
use common::process::EppProcess;
use common::*;
use epp::proto::grpc::health::v1::HealthCheckRequest;
use epp::proto::grpc::health::v1::health_check_response::ServingStatus;
use serde_json::json;

const POOLS: &str = "/apis/inference.networking.k8s.io/v1/namespaces/ns/inferencepools";
const PODS: &str = "/api/v1/namespaces/ns/pods";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/ns/leases";
const LEASE: &str = "epp-ns-pool.gateway-api-inference-extension.sigs.k8s.io";

fn replica(kubeconfig: &std::path::Path, name: &str) -> EppProcess {
    let args: Vec<String> = [
        "--pool-name=pool",
        "--pool-namespace=ns",
        "--ha-enable-leader-election",
        "--drain-grace=0s",
        "--refresh-metrics-interval=50ms",
        "--metrics-endpoint-auth=false",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("--kubeconfig={}", kubeconfig.display())])
    .collect();
    EppProcess::spawn(&args, &[("POD_NAME", name)])
}

async fn readiness(p: &mut EppProcess) -> Option<i32> {
    let mut client = p.health_client().await;
    client.check(HealthCheckRequest { service: "readiness".into() }).await.ok().map(|r| r.into_inner().status)
}

/// Polls the replicas until exactly one answers `readiness` SERVING (within `limit`); its
/// index and the time it took.
async fn wait_for_leader(replicas: &mut [&mut EppProcess], limit: Duration) -> (usize, Duration) {
    let start = Instant::now();
    loop {
        let mut serving = Vec::new();
        for (i, p) in replicas.iter_mut().enumerate() {
            if readiness(p).await == Some(ServingStatus::Serving as i32) {
                serving.push(i);
            }
        }
        assert!(serving.len() <= 1, "two leaders at once: {serving:?}");
        if let [leader] = serving[..] {
            return (leader, start.elapsed());
        }
        assert!(start.elapsed() < limit, "no leader within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn holder(mock: &MockKube) -> Option<String> {
    mock.object(LEASES, LEASE).and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
}

#[tokio::test]
async fn replicas_elect_one_leader_and_hand_over_on_exit_and_on_kill() {
    let fake = FakeVllm::start([127, 0, 0, 51], 0, 0, 0.0).await;
    let mock = MockKube::start().await;
    mock.apply(POOLS, pool("pool", json!({"app": "vllm"}), &[fake.addr.port()]));
    mock.apply(PODS, pod("vllm-0", json!({"app": "vllm"}), Some("127.0.0.51"), true));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = mock.kubeconfig(dir.path());
    let names = ["epp-a", "epp-b", "epp-c"];
    let mut a = replica(&kubeconfig, names[0]);
    let mut b = replica(&kubeconfig, names[1]);

    // Exactly one leader; the Lease names it; liveness is SERVING on both.
    let (first, _) = wait_for_leader(&mut [&mut a, &mut b], WAIT).await;
    assert_eq!(holder(&mock).as_deref(), Some(names[first]));
    for p in [&mut a, &mut b] {
        p.wait_health("liveness", ServingStatus::Serving).await;
        // Both replicas discover the pool (standbys stay warm).
        let deadline = Instant::now() + WAIT;
        while !scrape(p.metrics).await.contains("epp_k8s_pool_endpoints 1") {
            assert!(Instant::now() < deadline, "replica did not discover the pool");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let (mut leader, mut standby) = if first == 0 { (a, b) } else { (b, a) };
    let text = scrape(standby.metrics).await;
    assert!(text.contains("epp_k8s_leader 0"), "{text}");
    assert!(scrape(leader.metrics).await.contains("epp_k8s_leader 1"));

    // Graceful exit: the Lease is released and the standby leads within the retry period.
    let signal = Instant::now();
    leader.terminate();
    let (_, _) = wait_for_leader(&mut [&mut standby], Duration::from_secs(5)).await;
    let graceful = signal.elapsed();
    println!("switch-over after SIGTERM: {graceful:?}");
    assert!(graceful <= Duration::from_secs(3), "graceful switch-over took {graceful:?}");
    assert_eq!(holder(&mock).as_deref(), Some(if first == 0 { names[1] } else { names[0] }));
    assert!(leader.wait_exit(WAIT).await.is_some_and(|(s, _)| s.success()), "{}", leader.stderr());

    // A new standby; then the leader is killed: the Lease expires and the standby takes over.
    let mut c = replica(&kubeconfig, names[2]);
    c.wait_health("liveness", ServingStatus::Serving).await;
    c.wait_health("readiness", ServingStatus::NotServing).await;
    let signal = Instant::now();
    standby.kill();
    let (_, _) = wait_for_leader(&mut [&mut c], Duration::from_secs(25)).await;
    let killed = signal.elapsed();
    println!("switch-over after SIGKILL: {killed:?}");
    // Lease duration 15 s, observed from the standby's last sighting of a renewal (up to one
    // retry period late), plus one retry period to notice.
    assert!(killed <= Duration::from_secs(15 + 2 + 2 + 1), "switch-over after SIGKILL took {killed:?}");
    assert!(killed >= Duration::from_secs(10), "the Lease was taken before it could expire ({killed:?})");
    assert_eq!(holder(&mock).as_deref(), Some(names[2]));
    c.terminate();
    assert!(c.wait_exit(WAIT).await.is_some());
    assert_eq!(holder(&mock), None, "the last leader released the Lease");
}
