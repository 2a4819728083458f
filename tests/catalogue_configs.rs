//! Seed configs load through the real loader; the KServe precise-prefix sample's undeclared
//! `pluginRef` gets a suggestion naming the declared plugin.

use std::path::Path;

use epp::framework::build::BuildContext;
use epp::scheduling::metrics::SchedulerMetrics;

fn load(text: &str) -> Result<epp::config::LoadedConfig, epp::config::ConfigErrors> {
    epp::app::load_config(Some(text), &BuildContext::default(), SchedulerMetrics::detached())
}

#[test]
fn every_config_fixture_loads() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/configs");
    let mut count = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let loaded = load(&std::fs::read_to_string(&path).unwrap());
            assert!(loaded.is_ok(), "{}: {}", path.display(), loaded.err().map(|e| e.to_string()).unwrap_or_default());
            count += 1;
        }
    }
    assert!(count >= 3);
}

#[test]
fn production_pd_config_wires_producers_and_handler() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/configs/kserve-pd-glm.yaml"),
    )
    .unwrap();
    let loaded = load(&text).unwrap();
    let producers: Vec<String> = loaded.scheduler.producers().iter().map(|p| p.name.to_string()).collect();
    let pos =
        |n: &str| producers.iter().position(|p| p == n).unwrap_or_else(|| panic!("{n} missing from {producers:?}"));
    assert!(pos("token-producer") < pos("approx-prefix-cache-producer"));
    assert!(pos("approx-prefix-cache-producer") < pos("inflight-load-producer"));
    assert_eq!(&*loaded.scheduler.handler().name, "disagg-profile-handler");
    let hooks: Vec<String> = loaded.scheduler.pre_request().iter().map(|h| h.name.to_string()).collect();
    assert!(
        hooks.contains(&"disagg-headers-handler".to_string()) && hooks.contains(&"disagg-profile-handler".to_string()),
        "{hooks:?}"
    );
}

#[test]
fn kserve_sample_undeclared_ref_suggests_the_declared_precise_scorer() {
    let text = "apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
  - type: single-profile-handler
  - type: precise-prefix-cache-scorer
    parameters: {tokenProcessorConfig: {blockSize: 64, hashSeed: \"42\"}, kvEventsConfig: {zmqEndpoint: \"tcp://*:5557\"}}
  - type: queue-scorer
  - type: kv-cache-utilization-scorer
  - type: max-score-picker
schedulingProfiles:
  - name: default
    plugins:
      - {pluginRef: queue-scorer, weight: 2}
      - {pluginRef: kv-cache-utilization-scorer, weight: 2}
      - {pluginRef: prefix-cache-scorer, weight: 3}
      - {pluginRef: max-score-picker}
";
    let errs = load(text).unwrap_err().0;
    let e = errs.iter().find(|e| e.path == "schedulingProfiles[default].plugins[2].pluginRef").expect("ref error");
    assert!(e.suggestion.as_deref().is_some_and(|s| s.contains("\"precise-prefix-cache-scorer\"")), "{e}");
}

#[test]
fn undeclared_ref_far_from_declared_names_suggests_a_type() {
    let text = "plugins: [{type: queue-scorer}]\nschedulingProfiles: [{name: p, plugins: [{pluginRef: queue-scorer}, {pluginRef: lora-affinity-scorer}]}]";
    let errs = load(text).unwrap_err().0;
    let e = errs.iter().find(|e| e.path == "schedulingProfiles[p].plugins[1].pluginRef").expect("ref error");
    assert!(e.suggestion.as_deref().is_some_and(|s| s.contains("- type: lora-affinity-scorer")), "{e}");
}

#[test]
fn deprecated_aliases_load() {
    for t in ["by-label-selector", "prefill-header-handler"] {
        let text = format!(
            "plugins: [{{type: {t}}}, {{type: queue-scorer}}]\nschedulingProfiles: [{{name: p, plugins: [{{pluginRef: queue-scorer}}]}}]"
        );
        assert!(load(&text).is_ok(), "{t}");
    }
}
