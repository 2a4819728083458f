//! Every shipped file under `deploy/` loads: EndpointPickerConfigs through the real loader,
//! the endpoints example through discovery, and the Envoy configs have the processing modes
//! the README says.

use std::path::Path;

use epp::framework::build::BuildContext;
use epp::scheduling::metrics::SchedulerMetrics;

fn deploy(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy").join(rel)
}

#[test]
fn every_shipped_config_loads() {
    let mut count = 0;
    for entry in std::fs::read_dir(deploy("configs")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let loaded = epp::app::load_config(Some(&text), &BuildContext::default(), SchedulerMetrics::detached());
        assert!(loaded.is_ok(), "{}: {}", path.display(), loaded.err().map(|e| e.to_string()).unwrap_or_default());
        count += 1;
    }
    assert!(count >= 3);
}

#[test]
fn shipped_default_matches_the_embedded_default() {
    let shipped: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(deploy("configs/default.yaml")).unwrap()).unwrap();
    let embedded: serde_yaml::Value = serde_yaml::from_str(epp::config::defaults::DEFAULT_CONFIG).unwrap();
    assert_eq!(shipped, embedded);
}

#[test]
fn example_endpoints_file_loads() {
    let (eps, _) = epp::endpoints::discovery::load_endpoints_file_bytes(&deploy("examples/endpoints.yaml")).unwrap();
    assert_eq!(eps.len(), 2);
}

fn ext_proc_mode(file: &str) -> serde_yaml::Value {
    let doc: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(deploy(file)).unwrap()).unwrap();
    let hcm = &doc["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"];
    let filter = &hcm["http_filters"][0];
    assert_eq!(filter["name"], "envoy.filters.http.ext_proc");
    filter["typed_config"]["processing_mode"].clone()
}

#[test]
fn envoy_configs_use_the_documented_modes() {
    let fd = ext_proc_mode("envoy/envoy-full-duplex.yaml");
    assert_eq!(fd["request_body_mode"], "FULL_DUPLEX_STREAMED");
    assert_eq!(fd["request_trailer_mode"], "SEND", "full duplex requires trailer mode SEND");
    let b = ext_proc_mode("envoy/envoy-buffered.yaml");
    assert_eq!(b["request_body_mode"], "BUFFERED");
}

#[test]
fn example_rbac_grants_what_pool_discovery_reads() {
    let text = std::fs::read_to_string(deploy("examples/rbac.yaml")).unwrap();
    let mut granted = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let doc = <serde_yaml::Value as serde::Deserialize>::deserialize(doc).unwrap();
        if doc["kind"].as_str() != Some("Role") {
            continue;
        }
        for rule in doc["rules"].as_sequence().unwrap() {
            let verbs: Vec<&str> = rule["verbs"].as_sequence().unwrap().iter().filter_map(|v| v.as_str()).collect();
            for group in rule["apiGroups"].as_sequence().unwrap() {
                for resource in rule["resources"].as_sequence().unwrap() {
                    if ["get", "list", "watch"].iter().all(|v| verbs.contains(v)) {
                        granted.push((group.as_str().unwrap().to_string(), resource.as_str().unwrap().to_string()));
                    }
                }
            }
        }
    }
    for (group, resource) in [("", "pods"), (epp::k8s::pool::GROUP_V1, "inferencepools")] {
        assert!(granted.contains(&(group.to_string(), resource.to_string())), "{group}/{resource} not granted");
    }
}

/// Every KServe manifest and the Kubernetes ConfigMap pass `epp validate` with no finding.
#[test]
fn kserve_manifests_and_the_config_map_validate_clean() {
    let mut files: Vec<_> = std::fs::read_dir(deploy("kserve")).unwrap().map(|e| e.unwrap().path()).collect();
    files.push(deploy("kubernetes/configmap.yaml"));
    assert!(files.len() >= 3);
    for path in files {
        let findings = epp::validate::validate_text(&std::fs::read_to_string(&path).unwrap());
        assert!(findings.is_empty(), "{}: {findings:#?}", path.display());
    }
}
