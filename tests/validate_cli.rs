//! `epp validate`: the corpus under `tests/fixtures/validate/` with asserted findings (path and
//! severity), and the exit codes and JSON output of the built binary.

use std::path::{Path, PathBuf};
use std::process::Command;

use epp::validate::{Finding, Severity, validate_text};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/validate").join(name)
}

fn findings(name: &str) -> Vec<Finding> {
    validate_text(&std::fs::read_to_string(fixture(name)).unwrap())
}

fn assert_has(all: &[Finding], severity: Severity, path: &str) {
    assert!(all.iter().any(|f| f.severity == severity && f.path == path), "no {severity:?} at {path} in {all:#?}");
}

const INLINE: &str = "spec.router.scheduler.config.inline";

#[test]
fn production_pd_manifest_is_clean() {
    let all = findings("pd-glm-ok.yaml");
    assert!(all.is_empty(), "{all:#?}");
}

#[test]
fn broken_pd_manifest_reports_every_pitfall() {
    let all = findings("pd-glm-broken.yaml");
    assert_has(&all, Severity::Error, "spec.router.route.http.spec.rules");
    assert_has(&all, Severity::Error, "spec.worker.initContainers");
    assert_has(&all, Severity::Error, "spec.prefill.replicas");
    assert_has(&all, Severity::Error, "spec.prefill.scaling.wva");
    assert_has(&all, Severity::Error, "spec.prefill.scaling.wva.keda.idleReplicaCount");
    assert_has(&all, Severity::Error, "spec.prefill.template.containers.args");
    assert_has(&all, Severity::Error, &format!("{INLINE}.plugins[2].parameters.profiles.decode"));
    assert_has(&all, Severity::Warning, &format!("{INLINE}.plugins[5]"));
}

#[test]
fn kserve_precise_sample_flags_the_undeclared_ref_with_a_suggestion() {
    let all = findings("kserve-precise-sample.yaml");
    let path = format!("{INLINE}.schedulingProfiles[default].plugins[2].pluginRef");
    let f = all.iter().find(|f| f.path == path).unwrap_or_else(|| panic!("{all:#?}"));
    assert_eq!(f.severity, Severity::Error);
    assert!(f.fix.contains("precise-prefix-cache-scorer"), "{f:?}");
    assert_has(&all, Severity::Warning, "spec.template.containers.args");
    // blockSize 64 = --block-size 64 and hashSeed 42 = PYTHONHASHSEED: no drift findings.
    assert!(
        !all.iter()
            .any(|f| f.path.ends_with("tokenProcessorConfig.blockSize")
                || f.path.ends_with("tokenProcessorConfig.hashSeed")),
        "{all:#?}"
    );
}

#[test]
fn precise_drift_is_reported_from_raw_parameters() {
    let all = findings("precise-mismatch.yaml");
    let tp = format!("{INLINE}.plugins[0].parameters.tokenProcessorConfig");
    assert_has(&all, Severity::Warning, &format!("{tp}.blockSize"));
    assert_has(&all, Severity::Warning, &format!("{tp}.hashSeed"));
    assert_has(&all, Severity::Error, &format!("{tp}.hashAlgorithm"));
    assert_has(&all, Severity::Error, "spec.template.containers.args");
    let ev = format!("{INLINE}.plugins[0].parameters.kvEventsConfig");
    assert_has(&all, Severity::Error, &format!("{ev}.podDiscoveryConfig.socketPort"));
    assert_has(&all, Severity::Error, &format!("{ev}.topicFilter"));
}

#[test]
fn scaling_rules() {
    let all = findings("scaling-broken.yaml");
    assert_has(&all, Severity::Error, "spec.scaling.wva");
    assert_has(&all, Severity::Error, "spec.prefill.scaling.wva.keda.idleReplicaCount");
}

#[test]
fn configs_and_multi_document_files() {
    let all = findings("config-broken.yaml");
    let f =
        all.iter().find(|f| f.path == "plugins[1].parameters.deciders.prefill").unwrap_or_else(|| panic!("{all:#?}"));
    assert!(f.message.contains("prefix-based-pd-decider"));
    assert_eq!(all.len(), 1, "the handler that failed to build is the only finding: {all:#?}");
    let all = findings("multi-doc.yaml");
    assert_eq!(all.len(), 1, "{all:#?}");
    assert_eq!((all[0].document, all[0].path.as_str()), (1, "spec.worker.initContainers"));
}

#[test]
fn configs_inside_config_maps_and_llmisvc_configs_are_loaded() {
    let all = findings("embedded.yaml");
    let at = |doc: usize, path: &str| {
        all.iter().any(|f| f.document == doc && f.severity == Severity::Error && f.path == path)
    };
    assert!(at(0, "data.config.yaml.schedulingProfiles[default].plugins[0].pluginRef"), "{all:#?}");
    assert!(at(2, &format!("{INLINE}.schedulingProfiles[default].plugins[0].pluginRef")), "{all:#?}");
    assert!(at(2, "spec.router.scheduler.template.containers[0].image"), "{all:#?}");
    assert_eq!(all.len(), 3, "the clean ConfigMap and the non-config data value add nothing: {all:#?}");
    let empty = validate_text("apiVersion: v1\nkind: ConfigMap\ndata: {a: b}\n");
    assert_eq!((empty.len(), empty[0].severity, empty[0].path.as_str()), (1, Severity::Warning, "data"));
}

#[test]
fn label_filters_are_checked_against_the_pod_templates() {
    let all = findings("label-selectors.yaml");
    let warned: Vec<&str> = all
        .iter()
        .filter(|f| f.severity == Severity::Warning && f.message.contains("matches no pod template"))
        .map(|f| f.path.as_str())
        .collect();
    let plugin = |i: usize| format!("{INLINE}.plugins[{i}]");
    assert_eq!(warned, [plugin(0), plugin(2), plugin(4)], "{all:#?}");
    assert!(!all.iter().any(|f| f.severity == Severity::Error), "{all:#?}");
}

fn epp(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_epp")).args(args).output().expect("run epp")
}

#[test]
fn exit_codes_and_json_output() {
    let ok = fixture("pd-glm-ok.yaml");
    let broken = fixture("pd-glm-broken.yaml");
    let out = epp(&["validate", ok.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    let out = epp(&["validate", ok.to_str().unwrap(), broken.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let out = epp(&["validate", "--output", "json", broken.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json on stdout");
    let items = json.as_array().unwrap();
    assert!(items.iter().any(|i| i["severity"] == "error"
        && i["path"] == "spec.worker.initContainers"
        && i["file"].as_str().is_some_and(|f| f.ends_with("pd-glm-broken.yaml"))));
    // Warnings alone do not fail.
    let dir = tempfile::tempdir().unwrap();
    let warn_only = dir.path().join("w.yaml");
    std::fs::write(&warn_only, "apiVersion: v1\nkind: ConfigMap\n").unwrap();
    assert_eq!(epp(&["validate", warn_only.to_str().unwrap()]).status.code(), Some(0));
    assert_ne!(epp(&["validate", "/nonexistent/file.yaml"]).status.code(), Some(0));
}

#[test]
fn moved_tool_subcommands_point_to_epp_tools_and_exit_2() {
    for args in [&["sim", "--pods", "2"][..], &["demo"], &["bench", "index", "--workload", "/nonexistent"]] {
        let out = epp(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains("epp-tools"), "{stderr}");
    }
}

/// `kvBlockIndexConfig.redisConfig` (llm-d's shared index) validates; a bad address is an error
/// at its path, in the library and through the binary.
#[test]
fn redis_index_config_is_accepted_and_a_bad_address_names_its_path() {
    let config = |address: &str| {
        format!(
            "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n\
             - type: precise-prefix-cache-producer\n  parameters:\n    indexerConfig:\n      \
             kvBlockIndexConfig: {{redisConfig: {{address: \"{address}\"}}}}\n    \
             kvEventsConfig: {{zmqEndpoint: \"tcp://*:5557\"}}\n\
             - type: prefix-cache-scorer\n  parameters: {{prefixMatchInfoProducerName: precise-prefix-cache-producer}}\n\
             - type: max-score-picker\nschedulingProfiles:\n- name: default\n  plugins:\n  \
             - {{pluginRef: prefix-cache-scorer}}\n  - {{pluginRef: max-score-picker}}\n"
        )
    };
    let ok = validate_text(&config("redis://redis.epp.svc:6379"));
    assert!(ok.iter().all(|f| f.severity != Severity::Error), "{ok:#?}");
    let bad = validate_text(&config("http://redis:6379"));
    let path = "plugins[0].parameters.indexerConfig.kvBlockIndexConfig.redisConfig.address";
    assert_has(&bad, Severity::Error, path);
    let dir = tempfile::tempdir().unwrap();
    let (good_file, bad_file) = (dir.path().join("ok.yaml"), dir.path().join("bad.yaml"));
    std::fs::write(&good_file, config("127.0.0.1:6379")).unwrap();
    std::fs::write(&bad_file, config("http://redis:6379")).unwrap();
    let out = epp(&["validate", good_file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    let out = epp(&["validate", bad_file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("redisConfig.address"));
}
