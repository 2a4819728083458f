//! The argument lists that KServe's, GIE's and llm-d's templates render for the Go EPPs
//! (tests/fixtures/args/*.txt) start the real `epp` binary against the mock Kubernetes API
//! server, which then reports ready on the template's probe service and routes a real ext_proc
//! request (over TLS where the list leaves secure serving on).

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::kube::{MockKube, pod, pool};
use common::process::EppProcess;
use common::*;
use epp::proto::grpc::health::v1::health_check_response::ServingStatus;
use serde_json::json;

const PODS: &str = "/api/v1/namespaces/ns/pods";
const POOLS: &str = "/apis/inference.networking.k8s.io/v1/namespaces/ns/inferencepools";

/// One fixture: header settings and the argument list.
struct Fixture {
    headers: BTreeMap<String, Vec<String>>,
    args: Vec<String>,
}

fn fixture(name: &str) -> Fixture {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/args").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut args = Vec::new();
    for line in text.lines() {
        if let Some(header) = line.strip_prefix("# ") {
            let (k, v) = header.split_once(": ").expect("header `# key: value`");
            headers.entry(k.to_string()).or_default().push(v.to_string());
        } else if line == "<empty>" {
            args.push(String::new());
        } else {
            args.push(line.to_string());
        }
    }
    Fixture { headers, args }
}

impl Fixture {
    fn header(&self, key: &str) -> &str {
        self.headers.get(key).and_then(|v| v.first()).map(String::as_str).unwrap_or_else(|| panic!("no `# {key}:`"))
    }
}

/// The GIE chart's default-plugins.yaml for `engine` (the chart sets `defaultEngine` for
/// engines other than vllm).
fn gie_config(engine: &str) -> String {
    let template = include_str!("fixtures/args/gie-default-plugins.yaml");
    let params =
        if engine == "vllm" { String::new() } else { format!("  parameters:\n    defaultEngine: \"{engine}\"\n") };
    template.replace("{EXTRACTOR_PARAMETERS}\n", &params)
}

/// Starts the fixture's argument list against a mock API server holding one pool (`pool_name`)
/// or none (standalone), one Ready pod backed by a fake vLLM, and routes one request.
async fn run(name: &str, engine: &str, pod_ip: [u8; 4]) {
    let fixture = fixture(name);
    let fake = FakeVllm::start(pod_ip, 1, 1, 0.1).await;
    let ip = fake.addr.ip().to_string();
    let mock = MockKube::start().await;
    let labels = json!({"app": "vllm", "tier": "serving"});
    let pool_name =
        fixture.args.iter().position(|a| a == "--pool-name" || a == "--poolName").map(|i| fixture.args[i + 1].clone());
    if let Some(pool_name) = &pool_name {
        mock.apply(POOLS, pool(pool_name, json!({"app": "vllm"}), &[fake.addr.port()]));
    }
    mock.apply(PODS, pod("vllm-0", labels, Some(&ip), true));

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = mock.kubeconfig(dir.path());
    std::fs::write(dir.path().join("default-plugins.yaml"), gie_config(engine)).unwrap();
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    let (cert, key) = epp::tls::self_signed().unwrap();
    std::fs::write(certs.join("tls.crt"), cert).unwrap();
    std::fs::write(certs.join("tls.key"), key).unwrap();
    let args: Vec<String> = fixture
        .args
        .iter()
        .map(|a| {
            a.replace("{CONFIG_DIR}", dir.path().to_str().unwrap())
                .replace("{CERT_DIR}", certs.to_str().unwrap())
                .replace("{TARGET_PORT}", &fake.addr.port().to_string())
        })
        .chain(["--drain-grace=100ms".to_string()])
        .collect();
    let env = [("KUBECONFIG", kubeconfig.to_str().unwrap()), ("NAMESPACE", "ns"), ("POD_NAME", "epp-0")];
    let mut epp = EppProcess::spawn(&args, &env);

    let readiness = fixture.header("readiness").to_string();
    epp.wait_health("liveness", ServingStatus::Serving).await;
    epp.wait_health(&readiness, ServingStatus::Serving).await;

    let tls = fixture.header("tls") == "on";
    let mut client = epp.ext_proc_client(tls).await;
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(&chat("m", "hello", false), true)).await;
    let reply = ex.next().await;
    assert_eq!(set_header(&reply, "x-gateway-destination-endpoint"), Some(fake.addr.to_string()), "{name}");

    let stderr = epp.stderr();
    for expected in fixture.headers.get("warns").into_iter().flatten() {
        assert!(stderr.contains(expected.as_str()), "{name}: no warning naming {expected}:\n{stderr}");
    }
    // `--zap-encoder json`: every line is a zap-style JSON object.
    let first = stderr.lines().next().expect("a log line");
    let line: serde_json::Value = serde_json::from_str(first).unwrap_or_else(|e| panic!("{name}: {e}: {first}"));
    assert!(line["ts"].is_string() && line["msg"].is_string() && line["level"].is_string(), "{first}");

    drop((ex, client));
    epp.terminate();
    let (status, _) = epp.wait_exit(std::time::Duration::from_secs(40)).await.expect("exits after SIGTERM");
    assert!(status.success(), "{name}: exit {status}:\n{}", epp.stderr());
}

#[tokio::test]
async fn kserve_v1alpha1_scheduler_args() {
    run("kserve-v1alpha1.txt", "vllm", [127, 0, 1, 1]).await;
}

#[tokio::test]
async fn kserve_v1alpha2_scheduler_args() {
    run("kserve-v1alpha2.txt", "vllm", [127, 0, 1, 2]).await;
    run("kserve-v1alpha2-tls.txt", "vllm", [127, 0, 1, 3]).await;
    run("kserve-v1alpha2-notls.txt", "vllm", [127, 0, 1, 4]).await;
}

#[tokio::test]
async fn gie_chart_args_for_each_model_server_type() {
    for (i, engine) in ["vllm", "sglang", "triton-tensorrt-llm", "trtllm-serve"].into_iter().enumerate() {
        let i = i as u8;
        run(&format!("gie-{engine}-1-replica.txt"), engine, [127, 0, 2, 1 + 2 * i]).await;
        run(&format!("gie-{engine}-2-replica.txt"), engine, [127, 0, 2, 2 + 2 * i]).await;
    }
}

#[tokio::test]
async fn llmd_router_chart_args() {
    run("llmd-pool.txt", "vllm", [127, 0, 3, 1]).await;
    run("llmd-standalone-2-replica.txt", "vllm", [127, 0, 3, 2]).await;
}
