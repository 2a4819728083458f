//! deploy/kubernetes/networkpolicy.yaml parses and admits what docs/security.md says: the
//! ext_proc port from gateway pods only, gRPC health from anywhere, metrics from the
//! monitoring namespace only.

use serde_yaml::Value;

fn policy() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes/networkpolicy.yaml");
    serde_yaml::from_str(&std::fs::read_to_string(path).expect("policy file")).expect("valid YAML")
}

/// The ingress rule admitting `port`.
fn rule_for(policy: &Value, port: u64) -> Value {
    let rules = policy["spec"]["ingress"].as_sequence().expect("ingress rules");
    rules
        .iter()
        .find(|r| r["ports"].as_sequence().is_some_and(|ps| ps.iter().any(|p| p["port"].as_u64() == Some(port))))
        .cloned()
        .unwrap_or_else(|| panic!("no rule for port {port}"))
}

#[test]
fn policy_admits_each_port_from_its_documented_peers_only() {
    let p = policy();
    assert_eq!(p["kind"].as_str(), Some("NetworkPolicy"));
    assert_eq!(p["apiVersion"].as_str(), Some("networking.k8s.io/v1"));
    let types: Vec<&str> = p["spec"]["policyTypes"].as_sequence().unwrap().iter().filter_map(Value::as_str).collect();
    assert_eq!(types, ["Ingress"], "egress stays open: API server, model servers, DNS");
    let ext_proc = rule_for(&p, 9002);
    let key = &ext_proc["from"][0]["podSelector"]["matchExpressions"][0]["key"];
    assert_eq!(key.as_str(), Some("gateway.networking.k8s.io/gateway-name"));
    assert!(rule_for(&p, 9003)["from"].is_null(), "health is open to kubelet and gateways");
    let metrics = rule_for(&p, 9090);
    let ns = &metrics["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"];
    assert_eq!(ns.as_str(), Some("monitoring"));
}
