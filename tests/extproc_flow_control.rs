//! Flow Control end to end (`featureGates: [flowControl]`): against a saturated fake vLLM,
//! a request in a band with a queue TTL gets 503 when the TTL passes, a full band rejects
//! with 429 while its request waits, the waiting request is routed once the pod's scraped
//! load drops, and a client that resets its stream leaves the queue. The controller's
//! queue-length watch is the barrier between steps.

mod common;

use common::*;

const CONFIG: &str = r#"
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: queue-scorer
schedulingProfiles:
- name: default
  plugins: [{pluginRef: queue-scorer}]
flowControl:
  defaultPriorityBand: {maxRequests: 1}
  priorityBands:
  - {priority: 5, defaultRequestTTL: 300ms}
"#;

async fn open(epp: &TestEpp, objective: &str) -> Exchange {
    let mut client = epp.client().await;
    let ex = Exchange::open(&mut client).await;
    let headers = [("x-gateway-inference-objective", objective), ("x-gateway-inference-fairness-id", "tenant-a")];
    ex.send(request_headers("/v1/chat/completions", &headers, false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(&chat("m", "hi", false), true)).await;
    ex
}

/// Waits (on the controller's queue-length watch) until `n` requests are queued.
async fn wait_queued(epp: &TestEpp, n: u64) {
    let controller = epp.app.flow_control.as_ref().expect("flow control enabled");
    let mut length = controller.subscribe_queued();
    let reached = tokio::time::timeout(WAIT, length.wait_for(|v| *v == n)).await;
    assert!(matches!(reached, Ok(Ok(_))), "queue length never reached {n} (now {})", controller.queued());
}

async fn saturated_epp(pod: &FakeVllm) -> TestEpp {
    let epp = TestEpp::start(&endpoints_yaml(&[("pod", pod.addr, &[])]), Some(CONFIG), |s| {
        s.objectives = [("urgent".to_string(), 5)].into();
    })
    .await;
    epp.wait_waiting(&[("pod", 9)]).await;
    epp
}

fn metric(text: &str, outcome: &str) -> bool {
    text.lines().any(|l| {
        l.starts_with("llm_d_epp_flow_control_requests_total{")
            && l.contains(&format!("outcome=\"{outcome}\""))
            && l.ends_with(" 1")
    })
}

#[tokio::test]
async fn queued_requests_wait_for_capacity_expire_or_overflow() {
    let pod = FakeVllm::start([127, 0, 0, 41], 9, 4, 0.95).await;
    let epp = saturated_epp(&pod).await;

    let mut urgent = open(&epp, "urgent").await;
    let (status, body) = immediate(&urgent.next().await).expect("expired in the queue");
    assert_eq!(status, 503);
    assert!(body.starts_with("inference error: ServiceUnavailable - request timed out in queue"), "{body}");

    // Band 0 holds one request: the second is rejected while the first waits.
    let mut waiting = open(&epp, "none").await;
    wait_queued(&epp, 1).await;
    let (status, body) = immediate(&open(&epp, "none").await.next().await).expect("band full");
    assert_eq!(status, 429);
    assert!(body.contains("request rejected by flow control"), "{body}");

    pod.set(0, 0, 0.1);
    let routed = waiting.next().await;
    assert_eq!(set_header(&routed, "x-gateway-destination-endpoint"), Some(pod.addr.to_string()));
    assert_eq!(epp.app.flow_control.as_ref().map(|c| c.queued()), Some(0));

    let text = scrape(epp.app.metrics_addr).await;
    for outcome in ["EvictedTTL", "RejectedCapacity", "Dispatched"] {
        assert!(metric(&text, outcome), "{outcome} not counted once");
    }
    assert!(text.contains("inference_extension_flow_control_pool_saturation"));
}

#[tokio::test]
async fn a_client_that_resets_its_stream_leaves_the_queue() {
    let pod = FakeVllm::start([127, 0, 0, 42], 9, 4, 0.95).await;
    let epp = saturated_epp(&pod).await;
    let queued = open(&epp, "none").await;
    wait_queued(&epp, 1).await;
    drop(queued);
    wait_queued(&epp, 0).await;
    assert!(metric(&scrape(epp.app.metrics_addr).await, "EvictedContextCancelled"));
}
