//! `models-data-source` + `models-data-extractor` + `served-model-filter` against real HTTP
//! servers on loopback: each endpoint's `/v1/models` list is polled into the store, an
//! adapter request goes to the endpoint that lists the adapter even when load says
//! otherwise, a model listed nowhere fails (429, every candidate filtered out), and a failing poll is counted while the
//! last list stays in use. The store's update watch is the barrier between steps.

mod common;

use common::*;

const CONFIG: &str = r#"
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: models-data-source
  parameters: {interval: 20ms}
- type: models-data-extractor
- type: served-model-filter
- type: queue-scorer
dataLayer:
  sources:
  - pluginRef: models-data-source
    extractors: [{pluginRef: models-data-extractor}]
schedulingProfiles:
- name: default
  plugins: [{pluginRef: served-model-filter}, {pluginRef: queue-scorer}]
"#;

/// Routes one chat request for `model`; the destination, or the immediate status.
async fn route(epp: &TestEpp, model: &str) -> Result<String, i32> {
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(&chat(model, "hi", false), true)).await;
    let reply = ex.next().await;
    match immediate(&reply) {
        Some((status, _)) => Err(status),
        None => Ok(set_header(&reply, "x-gateway-destination-endpoint").expect("destination")),
    }
}

fn listed(set: &epp::endpoints::store::EndpointSet, name: &str, id: &str) -> bool {
    set.get(name).is_some_and(|e| e.models.load().as_ref().is_some_and(|m| m.find(id).is_some()))
}

async fn two_pods() -> (FakeVllm, FakeVllm, TestEpp) {
    // The adapter pod is busier: the queue scorer alone would send everything to `base`.
    let base = FakeVllm::start([127, 0, 0, 71], 0, 0, 0.0).await;
    let adapter = FakeVllm::start([127, 0, 0, 72], 8, 0, 0.0).await;
    base.set_models(&["llama"]);
    adapter.set_models(&["llama", "sql-v3"]);
    let eps = endpoints_yaml(&[("base", base.addr, &[]), ("adapter", adapter.addr, &[])]);
    let epp = TestEpp::start(&eps, Some(CONFIG), |_| {}).await;
    epp.wait_waiting(&[("base", 0), ("adapter", 8)]).await;
    epp.wait_scraped(|set| listed(set, "base", "llama") && listed(set, "adapter", "sql-v3")).await;
    (base, adapter, epp)
}

#[tokio::test]
async fn requests_go_to_endpoints_that_list_their_model() {
    let (base, adapter, epp) = two_pods().await;
    assert_eq!(route(&epp, "sql-v3").await, Ok(adapter.addr.to_string()), "only `adapter` lists the adapter");
    assert_eq!(route(&epp, "llama").await, Ok(base.addr.to_string()), "both list the base; load decides");
    // Every candidate filtered out: this build answers 429 for any profile left empty.
    assert_eq!(route(&epp, "gemma").await, Err(429), "listed nowhere");
    let text = scrape(epp.app.metrics_addr).await;
    for line in [
        r#"llm_d_epp_served_model_filter_decisions_total{outcome="listed",plugin_name="served-model-filter"} 2"#,
        r#"llm_d_epp_served_model_filter_decisions_total{outcome="empty",plugin_name="served-model-filter"} 1"#,
        r#"llm_d_epp_served_model_filter_candidates_total{plugin_name="served-model-filter"} 6"#,
    ] {
        assert!(text.contains(line), "missing {line}\n{text}");
    }
}

#[tokio::test]
async fn failed_polls_are_counted_and_keep_the_last_list() {
    let (_base, adapter, epp) = two_pods().await;
    adapter.fail_models(500);
    let registry = epp.app.registry.clone();
    let errors = move || {
        registry
            .gather()
            .iter()
            .find(|f| f.name() == "llm_d_epp_datalayer_poll_errors_total")
            .and_then(|f| {
                f.get_metric()
                    .iter()
                    .find(|m| m.get_label().iter().any(|l| l.value() == "models-data-source"))
                    .map(|m| m.get_counter().get_value())
            })
            .unwrap_or(0.0)
    };
    // The /metrics scrapes keep the update barrier ticking while the failed polls add up.
    epp.wait_scraped(|_| errors() >= 2.0).await;
    assert!(listed(&epp.app.store.snapshot(), "adapter", "sql-v3"), "the last good list stays");
    assert_eq!(route(&epp, "sql-v3").await, Ok(adapter.addr.to_string()));
}
