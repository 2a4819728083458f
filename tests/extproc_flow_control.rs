//! Flow Control end to end (`featureGates: [flowControl]`): against a saturated fake vLLM,
//! a request in a band with a queue TTL gets 503 when the TTL passes, a full band rejects
//! with 429 while its request waits, and the waiting request is routed once the pod's
//! scraped load drops.

mod common;

use common::*;
use epp::proto::ext_proc::ProcessingResponse;

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
    let epp = TestEpp::start(&endpoints_yaml(&[("pod", pod.addr, &[])]), Some(CONFIG), |s| {
        s.objectives = [("urgent".to_string(), 5)].into();
    })
    .await;
    epp.wait_waiting(&[("pod", 9)]).await;

    let mut urgent = open(&epp, "urgent").await;
    let (status, body) = immediate(&urgent.next().await).expect("expired in the queue");
    assert_eq!(status, 503);
    assert!(body.starts_with("inference error: ServiceUnavailable - request timed out in queue"), "{body}");

    // Band 0 holds one request: of two, one waits and the other is rejected.
    let (mut a, mut b) = (open(&epp, "none").await, open(&epp, "none").await);
    let (first, waiting): (ProcessingResponse, &mut Exchange) = tokio::select! {
        r = a.next() => (r, &mut b),
        r = b.next() => (r, &mut a),
    };
    let (status, body) = immediate(&first).expect("band full");
    assert_eq!(status, 429);
    assert!(body.contains("request rejected by flow control"), "{body}");

    pod.set(0, 0, 0.1);
    let routed = waiting.next().await;
    assert_eq!(set_header(&routed, "x-gateway-destination-endpoint"), Some(pod.addr.to_string()));

    let text = scrape(epp.app.metrics_addr).await;
    for outcome in ["EvictedTTL", "RejectedCapacity", "Dispatched"] {
        assert!(metric(&text, outcome), "{outcome} not counted once");
    }
    assert!(text.contains("inference_extension_flow_control_pool_saturation"));
}
