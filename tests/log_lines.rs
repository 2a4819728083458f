//! The real `epp` process with `--zap-encoder json` logs the Go EPPs' messages and key names
//! for the common events (startup, endpoint added, request received / handled / answered,
//! failed request), at the verbosity GIE's logr levels give them (`-v 1` hides the per-request
//! lines, `-v 3` shows `Request handled`).

mod common;

use std::time::{Duration, Instant};

use common::process::EppProcess;
use common::*;
use epp::proto::grpc::health::v1::health_check_response::ServingStatus;
use serde_json::Value;

/// An epp process with one fake vLLM in an endpoints file, JSON logs and `-v` = `verbosity`.
async fn epp_logging(fake: &FakeVllm, dir: &tempfile::TempDir, verbosity: &str) -> EppProcess {
    let file = dir.path().join("endpoints.yaml");
    std::fs::write(&file, endpoints_yaml(&[("pod", fake.addr, &[])])).unwrap();
    let args: Vec<String> =
        ["--endpoints-file", file.to_str().unwrap(), "--secure-serving=false", "--zap-encoder=json", verbosity]
            .iter()
            .map(|s| s.to_string())
            .collect();
    let mut epp = EppProcess::spawn(&args, &[]);
    epp.wait_health("readiness", ServingStatus::Serving).await;
    epp
}

/// Every complete stderr line, parsed; each must be a zap-shaped JSON object. A line still
/// being written (no newline yet) is left for the next call.
fn json_lines(epp: &EppProcess) -> Vec<Value> {
    let text = epp.stderr();
    let complete = text.rfind('\n').map_or("", |end| &text[..end]);
    complete
        .lines()
        .map(|l| {
            let line: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            for key in ["ts", "level", "msg", "logger", "caller"] {
                assert!(line[key].is_string(), "no {key}: {l}");
            }
            line
        })
        .collect()
}

/// The first line with message `msg` (None when absent).
fn find(lines: &[Value], msg: &str) -> Option<Value> {
    lines.iter().find(|l| l["msg"] == msg).cloned()
}

/// Polls stderr until a line with message `msg` appears (bounded by `WAIT`).
async fn wait_for_line(epp: &EppProcess, msg: &str) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(line) = find(&json_lines(epp), msg) {
            return line;
        }
        assert!(Instant::now() < deadline, "no {msg:?} line:\n{}", epp.stderr());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn routed_request_logs_the_go_epp_messages_and_keys() {
    let fake = FakeVllm::start([127, 0, 30, 1], 0, 0, 0.0).await;
    let dir = tempfile::tempdir().unwrap();
    let mut epp = epp_logging(&fake, &dir, "--v=3").await;

    let lines = json_lines(&epp);
    let ext_proc = lines
        .iter()
        .find(|l| l["msg"] == "gRPC server listening" && l["name"] == "ext-proc")
        .unwrap_or_else(|| panic!("no ext-proc listening line:\n{}", epp.stderr()));
    assert_eq!(ext_proc["port"], epp.grpc.port(), "{ext_proc}");
    assert!(lines.iter().any(|l| l["msg"] == "gRPC server listening" && l["name"] == "health"));
    let added = find(&lines, "Pod added").expect("Pod added");
    assert_eq!((added["level"].as_str(), added["name"].as_str()), (Some("info"), Some("pod")), "{added}");
    assert!(find(&lines, "A configuration wasn't specified. A default one is being used.").is_some());

    let mut client = epp.ext_proc_client(false).await;
    let mut ex = Exchange::open(&mut client).await;
    let id = [("x-request-id", "req-log-1")];
    ex.send(request_headers("/v1/chat/completions", &id, false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(&chat("m", "hi", false), true)).await;
    assert_eq!(set_header(&ex.next().await, "x-gateway-destination-endpoint"), Some(fake.addr.to_string()));
    ex.send(response_headers("200", "application/json")).await;
    ex.send(response_body(br#"{"choices":[]}"#, true)).await;

    let answered = wait_for_line(&epp, "EPP sent response body back to proxy").await;
    assert_eq!(answered["x-request-id"], "req-log-1", "{answered}");
    let lines = json_lines(&epp);
    let received = find(&lines, "EPP received request").expect("EPP received request");
    assert_eq!((received["level"].as_str(), received["x-request-id"].as_str()), (Some("info"), Some("req-log-1")));
    let handled = find(&lines, "Request handled").expect("Request handled at -v 3");
    assert_eq!(handled["level"], "debug", "{handled}");
    for (key, want) in [
        ("x-request-id", "req-log-1"),
        ("incomingModelName", "m"),
        ("targetModelName", "m"),
        ("targetModel", "m"),
        ("objectiveKey", ""),
        ("endpoint", fake.addr.to_string().as_str()),
    ] {
        assert_eq!(handled[key], want, "{key}: {handled}");
    }
    let sent = find(&lines, "EPP sent request body response(s) to proxy").expect("body response line");
    assert_eq!((sent["modelName"].as_str(), sent["targetModelName"].as_str()), (Some("m"), Some("m")), "{sent}");
    assert_eq!(sent["x-request-id"], "req-log-1");

    drop((ex, client));
    epp.terminate();
    epp.wait_exit(Duration::from_secs(15)).await.expect("exit");
}

#[tokio::test]
async fn below_default_verbosity_hides_request_lines_but_not_failures() {
    let fake = FakeVllm::start([127, 0, 30, 2], 0, 0, 0.0).await;
    let dir = tempfile::tempdir().unwrap();
    let mut epp = epp_logging(&fake, &dir, "--v=1").await;

    let mut client = epp.ext_proc_client(false).await;
    let mut ok = Exchange::open(&mut client).await;
    ok.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ok.send(request_body(&chat("m", "hi", false), true)).await;
    assert_eq!(set_header(&ok.next().await, "x-gateway-destination-endpoint"), Some(fake.addr.to_string()));
    let mut bad = Exchange::open(&mut client).await;
    let id = [("x-request-id", "req-bad")];
    bad.send(request_headers("/v1/chat/completions", &id, false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    bad.send(request_body(b"{not json", true)).await;
    assert_eq!(immediate(&bad.next().await).map(|(status, _)| status), Some(400));

    // The failure is logged after the good request's lines would have been.
    let failed = wait_for_line(&epp, "Failed to process request").await;
    assert_eq!((failed["level"].as_str(), failed["x-request-id"].as_str()), (Some("error"), Some("req-bad")));
    assert!(failed["error"].is_string(), "{failed}");
    let lines = json_lines(&epp);
    for quiet in ["EPP received request", "EPP sent request body response(s) to proxy", "Pod added"] {
        assert!(find(&lines, quiet).is_none(), "{quiet:?} logged at -v 1:\n{}", epp.stderr());
    }
    assert!(find(&lines, "gRPC server listening").is_some(), "startup lines stay at -v 1");

    drop((ok, bad, client));
    epp.terminate();
    epp.wait_exit(Duration::from_secs(15)).await.expect("exit");
}
