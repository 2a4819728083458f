//! The stateful Flow Control policies end to end: with `featureGates: [flowControl]`, bands
//! using `program-aware-fairness` and `slo-deadline-ordering-policy` admit and route a
//! request through a real ext_proc stream, and the response's token usage becomes the
//! program's attained service (`prompt + 2 x completion`) in the program-aware gauges.

mod common;

use common::*;

const CONFIG: &str = r#"
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: queue-scorer
- type: program-aware-fairness
  parameters: {lasHalfLifeSeconds: 0, lasDecayFactor: 1}
- type: slo-deadline-ordering-policy
schedulingProfiles:
- name: default
  plugins: [{pluginRef: queue-scorer}]
flowControl:
  defaultPriorityBand:
    fairnessPolicyRef: program-aware-fairness
    orderingPolicyRef: slo-deadline-ordering-policy
"#;

fn gauge(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
}

#[tokio::test]
async fn program_aware_bands_route_and_account_attained_service() {
    let pod = FakeVllm::start([127, 0, 0, 63], 0, 0, 0.1).await;
    let epp = TestEpp::start(&endpoints_yaml(&[("pod", pod.addr, &[])]), Some(CONFIG), |_| {}).await;
    epp.wait_waiting(&[("pod", 0)]).await;
    assert!(epp.app.flow_control.is_some(), "flow control on");

    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    let headers = [("x-llm-d-inference-fairness-id", "agent-7"), ("x-slo-ttft-ms", "500")];
    ex.send(request_headers("/v1/chat/completions", &headers, false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(&chat("m", "hello", false), true)).await;
    let routed = ex.take(2).await;
    let dest = routed.iter().find_map(|r| set_header(r, "x-gateway-destination-endpoint"));
    assert_eq!(dest, Some(pod.addr.to_string()));

    ex.send(response_headers("200", "application/json")).await;
    ex.next().await;
    let body = br#"{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":7,"completion_tokens":3}}"#;
    ex.send(response_body(body, true)).await;
    ex.next().await;

    let metrics = scrape(epp.app.metrics_addr).await;
    let attained = r#"llm_d_epp_program_aware_attained_service_tokens{program_id="agent-7"}"#;
    assert_eq!(gauge(&metrics, attained), Some(13.0), "7 + 2 x 3\n{metrics}");
    let wait = r#"llm_d_epp_program_aware_avg_wait_time_milliseconds{program_id="agent-7"}"#;
    assert!(gauge(&metrics, wait).is_some_and(|ms| ms >= 0.0), "{metrics}");
    assert_eq!(gauge(&metrics, "llm_d_epp_program_aware_jains_fairness_index"), Some(1.0));
}
