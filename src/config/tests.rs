//! Loader tests: defaults, injections, and one test per validation error path.

use super::*;
use crate::framework::build::BuildContext;
use crate::plugins::registry::builtin;
use crate::scheduling::metrics::SchedulerMetrics;

fn try_load(text: &str) -> Result<LoadedConfig, ConfigErrors> {
    load(text, &builtin(), &BuildContext::default(), SchedulerMetrics::detached())
}

fn errors(text: &str) -> Vec<ConfigError> {
    match try_load(text) {
        Ok(_) => panic!("config unexpectedly loaded"),
        Err(e) => e.0,
    }
}

fn has_error(errs: &[ConfigError], path: &str, fragment: &str) -> bool {
    errs.iter().any(|e| e.path == path && e.message.contains(fragment))
}

#[test]
fn default_config_loads_with_documented_injections() {
    let loaded = try_load(defaults::DEFAULT_CONFIG).expect("default loads");
    let s = &loaded.scheduler;
    assert_eq!(s.profiles().len(), 1);
    let p = &s.profiles()[0];
    let weights: Vec<(String, f64)> = p.scorers.iter().map(|w| (w.slot.name.to_string(), w.weight)).collect();
    assert_eq!(
        weights,
        vec![
            ("queue-scorer".into(), 2.0),
            ("kv-cache-utilization-scorer".into(), 2.0),
            ("prefix-cache-scorer".into(), 3.0)
        ]
    );
    assert_eq!(&*p.picker.name, "max-score-picker");
    let producers: Vec<_> = s.producers().iter().map(|p| p.name.to_string()).collect();
    assert_eq!(producers, vec!["token-producer", "approx-prefix-cache-producer"], "token producer runs first");
    assert_eq!(s.defaults().prefix.as_deref(), Some("approx-prefix-cache-producer"));
    assert!(s.saturation().is_some());
    let injected = loaded.injected.join("\n");
    for t in [
        "single-profile-handler",
        "max-score-picker",
        "approx-prefix-cache-producer",
        "token-producer",
        "utilization-detector",
    ] {
        assert!(injected.contains(t), "{t} not injected: {injected}");
    }
}

#[test]
fn smallest_valid_config_gets_handler_picker_and_weight_one() {
    let loaded = try_load(
        "plugins: [{type: queue-scorer}]\nschedulingProfiles: [{name: p, plugins: [{pluginRef: queue-scorer}]}]",
    )
    .unwrap();
    let p = &loaded.scheduler.profiles()[0];
    assert_eq!(p.scorers[0].weight, 1.0);
    assert_eq!(&*p.picker.name, "max-score-picker");
}

#[test]
fn missing_profiles_become_a_default_profile() {
    let loaded = try_load("apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins: [{type: queue-scorer}, {type: random-picker}]").unwrap();
    let p = &loaded.scheduler.profiles()[0];
    assert_eq!(&*p.name, "default");
    assert_eq!(&*p.picker.name, "random-picker");
}

#[test]
fn unknown_fields_and_types_are_errors_with_suggestions() {
    let errs = errors("plugins: [{type: queue-scorer}]\nschedulingProfile: []");
    assert_eq!(errs[0].path, "<document>");
    assert!(errs[0].message.contains("schedulingProfile"));
    let errs = errors("plugins: [{type: queue-scorr}]");
    assert!(has_error(&errs, "plugins[0].type", "unknown plugin type"));
    assert_eq!(errs[0].suggestion.as_deref(), Some("did you mean \"queue-scorer\"?"));
    let errs = errors("plugins: [{type: max-score-picker, parameters: {maxEndpoints: 2}}]");
    assert!(has_error(&errs, "plugins[0].parameters", "unknown field"));
}

#[test]
fn every_problem_is_collected_in_one_pass() {
    let text = r#"
apiVersion: example.com/v1
featureGates: [flowControll]
plugins:
- type: queue-scorer
- type: queue-scorer
- type: nope
schedulingProfiles:
- name: decode
  plugins:
  - pluginRef: queue-scorer
    weight: -1
  - pluginRef: queue-scorr
"#;
    let errs = errors(text);
    assert!(has_error(&errs, "apiVersion", "unsupported"));
    assert!(has_error(&errs, "featureGates[0]", "unknown feature gate"));
    assert!(has_error(&errs, "plugins[1].name", "duplicate plugin name"));
    assert!(has_error(&errs, "plugins[2].type", "unknown plugin type"));
    assert!(has_error(&errs, "schedulingProfiles[decode].plugins[0].weight", "finite number"));
    assert!(has_error(&errs, "schedulingProfiles[decode].plugins[1].pluginRef", "undefined plugin"));
    assert!(errs.len() >= 6, "{errs:?}");
}

#[test]
fn plugin_in_the_wrong_role_is_an_error() {
    let errs = errors(
        "plugins: [{type: approx-prefix-cache-producer}, {type: queue-scorer}]\nschedulingProfiles: [{name: d, plugins: [{pluginRef: approx-prefix-cache-producer}, {pluginRef: queue-scorer}]}]",
    );
    assert!(has_error(&errs, "schedulingProfiles[d].plugins[0].pluginRef", "cannot be used in a scheduling profile"));
}

#[test]
fn handler_rules() {
    let two = "plugins: [{type: queue-scorer}]\nschedulingProfiles: [{name: a, plugins: [{pluginRef: queue-scorer}]}, {name: b, plugins: [{pluginRef: queue-scorer}]}]";
    assert!(has_error(&errors(two), "plugins", "no profile handler configured"));
    let single_two = "plugins: [{type: single-profile-handler}, {type: queue-scorer}]\nschedulingProfiles: [{name: a, plugins: [{pluginRef: queue-scorer}]}, {name: b, plugins: [{pluginRef: queue-scorer}]}]";
    assert!(has_error(&errors(single_two), "plugins[0]", "exactly one profile"));
    let dup = "plugins: [{type: single-profile-handler}, {name: h2, type: single-profile-handler}, {type: queue-scorer}]\nschedulingProfiles: [{name: a, plugins: [{pluginRef: queue-scorer}]}]";
    assert!(has_error(&errors(dup), "plugins", "more than one profile handler"));
}

#[test]
fn second_picker_in_a_profile_is_an_error() {
    let text = "plugins: [{type: max-score-picker}, {type: random-picker}]\nschedulingProfiles: [{name: a, plugins: [{pluginRef: max-score-picker}, {pluginRef: random-picker}]}]";
    assert!(has_error(&errors(text), "schedulingProfiles[a].plugins[1].pluginRef", "second picker"));
}

#[test]
fn named_producer_must_exist() {
    let text = "plugins: [{type: prefix-cache-scorer, parameters: {prefixMatchInfoProducerName: precise}}]";
    assert!(has_error(&errors(text), "plugins[0]", "does not exist"));
}

#[test]
fn saturation_detector_forms() {
    let r = "plugins: [{type: queue-scorer}, {name: det, type: utilization-detector, parameters: {queueDepthThreshold: 3, metricsStalenessThreshold: 1s}}]\nschedulingProfiles: [{name: a, plugins: [{pluginRef: queue-scorer}]}]\nsaturationDetector: {pluginRef: det}";
    assert!(try_load(r).unwrap().scheduler.saturation().is_some());
    let legacy = "plugins: [{type: queue-scorer}]\nsaturationDetector: {queueDepthThreshold: 8, kvCacheUtilThreshold: 0.9, metricsStalenessThreshold: 150ms}";
    assert!(try_load(legacy).unwrap().injected.iter().any(|n| n.contains("pre-v1.5")));
    let wrong = "plugins: [{type: queue-scorer}]\nsaturationDetector: {pluginRef: queue-scorer}";
    assert!(has_error(&errors(wrong), "saturationDetector.pluginRef", "not a saturation detector"));
    let bad = "plugins: [{type: utilization-detector, parameters: {kvCacheUtilThreshold: 1.5}}]";
    assert!(has_error(&errors(bad), "plugins[0].parameters.kvCacheUtilThreshold", "(0, 1]"));
}

#[test]
fn data_layer_rules() {
    let empty = "plugins: [{type: queue-scorer}]\ndataLayer: {sources: []}";
    assert!(has_error(&errors(empty), "dataLayer.sources", "no data sources"));
    let undefined = "plugins: [{type: queue-scorer}]\ndataLayer: {sources: [{pluginRef: metrics-data-source}]}";
    assert!(has_error(&errors(undefined), "dataLayer.sources[0].pluginRef", "undefined plugin"));
    let custom = "plugins: [{type: queue-scorer}, {type: metrics-data-source, parameters: {path: /stats}}]";
    assert_eq!(try_load(custom).unwrap().data_layer.source.path, "/stats");
}

#[test]
fn deprecated_aliases_load() {
    let text = "plugins: [{type: kv-cache-scorer}]";
    let loaded = try_load(text).unwrap();
    assert_eq!(loaded.scheduler.profiles()[0].scorers.len(), 1);
}

#[test]
fn flow_control_block_is_typed_and_honoured_only_with_the_gate() {
    use crate::flowcontrol::settings::{Fairness, Ordering};
    let block = "plugins: [{type: queue-scorer}, {type: round-robin-fairness-policy, name: rr}, {type: edf-ordering-policy}, \
        {type: static-usage-limit-policy, name: limit, parameters: {threshold: 0.8}}]\n\
        flowControl: {maxBytes: 2Gi, maxRequests: \"1k\", defaultRequestTTL: 30s, noEndpointRequestTTL: 2s, usageLimitPolicyPluginRef: limit, \
        priorityBands: [{priority: 5, maxRequests: 10, fairnessPolicyRef: rr, orderingPolicyRef: edf-ordering-policy}]}";
    let off = try_load(block).unwrap();
    assert!(off.flow_control.is_none() && off.scheduler.legacy_shedding());
    let on = try_load(&format!("featureGates: [flowControl]\n{block}")).unwrap();
    assert!(!on.scheduler.legacy_shedding(), "Flow Control replaces the legacy shedding rule");
    let fc = on.flow_control.expect("gate on");
    assert_eq!((fc.max_bytes, fc.max_requests, fc.ceiling), (Some(2 << 30), Some(1000), 0.8));
    assert_eq!(fc.default_ttl, Some(std::time::Duration::from_secs(30)));
    assert_eq!(fc.no_endpoint_ttl, Some(std::time::Duration::from_secs(2)));
    let band = fc.band(5);
    assert_eq!(
        (band.max_requests, band.fairness.clone(), band.ordering),
        (Some(10), Fairness::RoundRobin, Ordering::Edf)
    );
    assert_eq!(band.max_bytes, Some(crate::flowcontrol::settings::DEFAULT_BAND_MAX_BYTES));
    assert_eq!(fc.band(0).fairness, Fairness::GlobalStrict);
}

#[test]
fn new_flow_control_policies_and_admitters_are_wired() {
    use crate::flowcontrol::settings::{Fairness, Ordering};
    let text = "featureGates: [flowControl]\n\
        plugins: [{type: queue-scorer}, {type: program-aware-fairness, name: pa, parameters: {lasHalfLifeSeconds: 30}}, \
        {type: slo-deadline-ordering-policy}, {type: probabilistic-admitter, parameters: {k: 100}}, \
        {type: latency-slo-admitter, name: slo}]\n\
        flowControl: {defaultPriorityBand: {fairnessPolicyRef: pa, orderingPolicyRef: slo-deadline-ordering-policy}, \
        priorityBands: [{priority: 3, fairnessPolicyRef: pa}]}";
    let loaded = try_load(text).unwrap();
    let fc = loaded.flow_control.expect("gate on");
    let shared = match (&fc.band(0).fairness, &fc.band(3).fairness) {
        (Fairness::Policy(a), Fairness::Policy(b)) => std::sync::Arc::ptr_eq(a, b),
        other => panic!("{other:?}"),
    };
    assert!(shared, "both bands share the one program-aware instance");
    assert_eq!((fc.band(0).ordering, fc.band(3).ordering), (Ordering::SloDeadline, Ordering::Fcfs));
    let admitters: Vec<&str> = loaded.scheduler.admitters().iter().map(|a| &*a.slot.name).collect();
    assert_eq!(admitters, ["probabilistic-admitter", "slo"], "every admitter, in declaration order");
    assert!(
        loaded.scheduler.producers().iter().any(|p| &*p.name == "predicted-latency-producer"),
        "the SLO admitter's predictions are produced by the default producer"
    );
    assert!(loaded.scheduler.pre_request().iter().any(|p| &*p.name == "pa"), "program-aware tracks dispatches");
    let errs = errors(
        "plugins: [{type: queue-scorer}, {type: latency-slo-admitter, name: slo}, {type: program-aware-fairness}]\n\
        flowControl: {defaultPriorityBand: {fairnessPolicyRef: slo, orderingPolicyRef: program-aware-fairness}}",
    );
    assert!(
        has_error(&errs, "flowControl.defaultPriorityBand.fairnessPolicyRef", "is not a fairness policy"),
        "{errs:?}"
    );
    assert!(
        has_error(&errs, "flowControl.defaultPriorityBand.orderingPolicyRef", "is not a ordering policy"),
        "{errs:?}"
    );
}

#[test]
fn flow_control_errors_have_paths() {
    let errs = errors(
        "plugins: [{type: queue-scorer}]\nflowControl: {maxBytes: lots, defaultRequestTTL: soon, \
        defaultPriorityBand: {fairnessPolicyRef: queue-scorer}, \
        priorityBands: [{maxRequests: 1}, {priority: 1, orderingPolicyRef: fifo-policy}]}",
    );
    assert!(has_error(&errs, "flowControl.maxBytes", "invalid quantity"), "{errs:?}");
    assert!(has_error(&errs, "flowControl.defaultRequestTTL", "invalid duration"), "{errs:?}");
    assert!(
        has_error(&errs, "flowControl.defaultPriorityBand.fairnessPolicyRef", "is not a fairness policy"),
        "{errs:?}"
    );
    assert!(has_error(&errs, "flowControl.priorityBands[0].priority", "required"), "{errs:?}");
    assert!(has_error(&errs, "flowControl.priorityBands[1].orderingPolicyRef", "undefined plugin"), "{errs:?}");
}

#[test]
fn a_profile_handler_that_fails_to_build_is_reported_once() {
    let errs = errors(
        "plugins: [{type: disagg-profile-handler, parameters: {deciders: {prefill: nope}}}, {type: decode-filter}, \
        {type: prefill-filter}]\nschedulingProfiles: [{name: prefill, plugins: [{pluginRef: prefill-filter}]}, \
        {name: decode, plugins: [{pluginRef: decode-filter}]}]",
    );
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(errs[0].path.starts_with("plugins[0].parameters.deciders"), "{errs:?}");
}

#[test]
fn parsers_come_from_request_handler_then_parser_else_openai() {
    use crate::request::parsers::{ParserKind, ParserSet};
    const BASE: &str = "plugins: [{type: queue-scorer}, {name: grpc, type: vllmgrpc-parser}, \
                        {name: sg, type: sglanghttp-parser}, {name: oa, type: openai-parser}]\n";
    let load = |extra: &str| try_load(&format!("{BASE}{extra}")).expect("loads").scheduler.parsers().clone();
    assert_eq!(load(""), ParserSet::default(), "declared but not referenced: default openai");
    assert_eq!(load("parser: {pluginRef: grpc}"), ParserSet::new([ParserKind::VllmGrpc]));
    assert_eq!(
        load("requestHandler: {parsers: [{pluginRef: sg}, {pluginRef: oa}]}\nparser: {pluginRef: grpc}"),
        ParserSet::new([ParserKind::SglangHttp, ParserKind::OpenAi, ParserKind::VllmGrpc])
    );
    let errs = errors(&format!("{BASE}requestHandler: {{parsers: [{{pluginRef: queue-scorer}}]}}"));
    assert!(has_error(&errs, "requestHandler.parsers[0].pluginRef", "not a request parser"), "{errs:?}");
    let errs = errors(&format!("{BASE}parser: {{pluginRef: nope}}"));
    assert!(errs.iter().any(|e| e.path == "parser.pluginRef"), "{errs:?}");
    let errs = errors("plugins: [{type: vertexai-parser, parameters: {model: x}}]");
    assert!(errs.iter().any(|e| e.path == "plugins[0].parameters"), "{errs:?}");
}

#[test]
fn encoder_cache_scorer_gets_a_default_producer() {
    let loaded = try_load("plugins: [{type: mm-embeddings-cache-scorer}]").unwrap();
    assert!(loaded.injected.iter().any(|i| i.starts_with("mm-embeddings-cache-producer")), "{:?}", loaded.injected);
    assert_eq!(loaded.scheduler.defaults().encoder_cache.as_deref(), Some("mm-embeddings-cache-producer"));
    assert!(loaded.scheduler.producers().iter().any(|p| &*p.name == "mm-embeddings-cache-producer"));
    assert!(!loaded.injected.iter().any(|i| i.starts_with("token-producer")), "no tokenizer is forced on it");
}

#[test]
fn encoder_cache_scorer_binds_a_named_producer() {
    let text = "plugins: [{name: mm-a, type: mm-embeddings-cache-producer, parameters: {cacheSizeInEmbeddingsPerServer: 8192}}, {name: mm-b, type: mm-embeddings-cache-producer}, {type: mm-embeddings-cache-scorer, parameters: {producerName: mm-b}}]";
    let loaded = try_load(text).unwrap();
    assert!(loaded.injected.iter().all(|i| !i.starts_with("mm-embeddings-cache-producer")));
    assert_eq!(loaded.scheduler.defaults().encoder_cache.as_deref(), Some("mm-a"), "first declared");
    let wrong = "plugins: [{name: mm-a, type: mm-embeddings-cache-producer}, {type: mm-embeddings-cache-scorer, parameters: {producerName: mm-x}}]";
    let errs = errors(wrong);
    assert!(has_error(&errs, "plugins[1]", "does not exist"), "{errs:?}");
    let not_a_producer =
        "plugins: [{type: queue-scorer}, {type: mm-embeddings-cache-scorer, parameters: {producerName: queue-scorer}}]";
    assert!(has_error(&errors(not_a_producer), "plugins[1]", "does not produce"));
    let both = "plugins: [{type: mm-embeddings-cache-producer, parameters: {cacheSizeInMBPerServer: 1, cacheSizeInEmbeddingsPerServer: 1}}]";
    assert!(has_error(&errors(both), "plugins[0].parameters", "cannot both be set"));
}

#[test]
fn latency_producer_encoder_cache_features_bind_the_mm_producer() {
    let on = "plugins: [{type: predicted-latency-producer, parameters: {predictionServerUrls: ['http://127.0.0.1:1'], training: false, useEncoderCacheFeatures: true}}]";
    let loaded = try_load(on).unwrap();
    assert!(loaded.injected.iter().any(|i| i.starts_with("mm-embeddings-cache-producer")), "{:?}", loaded.injected);
    let order: Vec<&str> = loaded.scheduler.producers().iter().map(|p| &*p.name).collect();
    let (mm, lp) = (
        order.iter().position(|n| *n == "mm-embeddings-cache-producer"),
        order.iter().position(|n| *n == "predicted-latency-producer"),
    );
    assert!(mm < lp, "the encoder-cache producer runs first: {order:?}");
    let named = "plugins: [{type: predicted-latency-producer, parameters: {predictionServerUrls: ['http://127.0.0.1:1'], training: false, useEncoderCacheFeatures: true, encoderCacheMatchInfoProducerName: mm}}]";
    assert!(has_error(&errors(named), "plugins[0]", "does not exist"));
    let off = "plugins: [{type: predicted-latency-producer, parameters: {predictionServerUrls: ['http://127.0.0.1:1'], training: false, encoderCacheMatchInfoProducerName: mm}}]";
    assert!(try_load(off).unwrap().injected.iter().all(|i| !i.starts_with("mm-embeddings")), "ignored unless enabled");
}

#[test]
fn models_and_discovery_data_layer_checks() {
    let base = |plugins: &str, extra: &str| {
        format!(
            "plugins:\n{plugins}- type: queue-scorer\n{extra}schedulingProfiles:\n- name: d\n  plugins: [{{pluginRef: queue-scorer}}]\n"
        )
    };
    let errs = errors(&base("- type: served-model-filter\n- type: models-data-source\n", ""));
    assert!(has_error(&errs, "plugins[0]", "no models-data-extractor"), "{errs:?}");
    let errs = errors(&base(
        "- {name: a, type: models-data-source}\n- {name: b, type: models-data-source}\n- type: models-data-extractor\n",
        "",
    ));
    assert!(has_error(&errs, "plugins[1]", "only one models-data-source"), "{errs:?}");
    let errs = errors(&base(
        "- type: file-discovery\n  parameters: {path: a.yaml}\n",
        "dataLayer:\n  discovery: {pluginRef: k8s}\n",
    ));
    assert!(has_error(&errs, "dataLayer.discovery.pluginRef", "undefined plugin"), "{errs:?}");

    let loaded = try_load(&base(
        "- type: models-data-source\n  parameters: {interval: 2s}\n- type: models-data-extractor\n- type: file-discovery\n  parameters: {path: eps.yaml, watchFile: true}\n",
        "dataLayer:\n  discovery: {pluginRef: file-discovery}\n",
    ))
    .expect("loads");
    let models = loaded.data_layer.models.expect("polling enabled with source + extractor");
    assert_eq!(models.interval, Some(std::time::Duration::from_secs(2)));
    let fd = loaded.data_layer.file_discovery.expect("file discovery");
    assert_eq!((fd.path.to_str(), fd.watch_file), (Some("eps.yaml"), true));
    let source_only = try_load(&base("- type: models-data-source\n", "")).expect("loads");
    assert!(source_only.data_layer.models.is_none(), "no extractor, no polling");
}

#[test]
fn reload_reuses_unchanged_plugins_and_rebuilds_changed_ones() {
    let doc = |threshold: u32| {
        format!(
            "plugins:
  - type: prefix-cache-scorer
  - name: cap
    type: max-score-picker
    parameters: {{maxNumOfEndpoints: {threshold}}}
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: prefix-cache-scorer
      - pluginRef: cap
"
        )
    };
    let cx = BuildContext::default();
    let first = load(&doc(1), &builtin(), &cx, SchedulerMetrics::detached()).expect("loads");
    let second =
        load_reusing(&doc(2), &builtin(), &cx, SchedulerMetrics::detached(), &first.reusable).expect("reloads");
    let scorer =
        |l: &LoadedConfig| l.plugins.iter().find(|p| &*p.name == "prefix-cache-scorer").and_then(|p| p.scorer.clone());
    let picker = |l: &LoadedConfig| l.plugins.iter().find(|p| &*p.name == "cap").and_then(|p| p.picker.clone());
    let (Some(old), Some(new)) = (scorer(&first), scorer(&second)) else { panic!("scorers") };
    assert!(std::sync::Arc::ptr_eq(&old, &new), "unchanged plugin keeps its instance (and its prefix index)");
    let (Some(old), Some(new)) = (picker(&first), picker(&second)) else { panic!("pickers") };
    assert!(!std::sync::Arc::ptr_eq(&old, &new), "changed parameters rebuild the plugin");
    assert_eq!(second.reused.iter().map(|n| &**n).collect::<Vec<_>>(), ["prefix-cache-scorer"]);
}
