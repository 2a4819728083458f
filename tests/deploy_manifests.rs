//! The manifests under `deploy/kubernetes/` and `deploy/kserve/` fit together and fit epp: the
//! kustomization lists every file; the Deployment's args parse with epp's own CLI and its
//! probes name health services a running epp answers; Service, InferencePool, HTTPRoute,
//! DestinationRule, ServiceMonitor, PodDisruptionBudget and NetworkPolicy point at each other;
//! RBAC grants what the Go EPPs' charts grant; the securityContext is KServe's and matches the
//! image's user; the KServe config replaces nothing but the scheduler image. Core kinds are
//! also checked against the Kubernetes schemas by `deploy/kubernetes/validate.sh`; CRD kinds
//! (InferencePool, HTTPRoute, DestinationRule, ServiceMonitor) have no bundled schema, so their
//! fields that matter are checked here.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use clap::Parser;
use common::*;
use serde_yaml::Value;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

fn deploy(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy").join(rel)
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(deploy(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).expect("YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

/// Every document of the kustomization's resources, by kind (each kind once, except RBAC).
struct Manifests(Vec<Value>);

impl Manifests {
    fn load() -> Self {
        let kustomization: Value = serde_yaml::from_str(&read("kubernetes/kustomization.yaml")).unwrap();
        let resources = kustomization["resources"].as_sequence().expect("resources");
        Self(resources.iter().flat_map(|r| documents(&read(&format!("kubernetes/{}", r.as_str().unwrap())))).collect())
    }

    fn all(&self, kind: &str) -> Vec<&Value> {
        self.0.iter().filter(|d| d["kind"] == kind).collect()
    }

    fn one(&self, kind: &str) -> &Value {
        let all = self.all(kind);
        assert_eq!(all.len(), 1, "exactly one {kind}");
        all[0]
    }

    fn deployment(&self) -> &Value {
        self.one("Deployment")
    }

    fn container(&self) -> &Value {
        let containers = self.deployment()["spec"]["template"]["spec"]["containers"].as_sequence().unwrap();
        assert_eq!(containers.len(), 1);
        &containers[0]
    }

    fn pod_labels(&self) -> BTreeMap<String, String> {
        string_map(&self.deployment()["spec"]["template"]["metadata"]["labels"])
    }
}

fn string_map(v: &Value) -> BTreeMap<String, String> {
    serde_yaml::from_value(v.clone()).unwrap_or_default()
}

fn strs(v: &Value) -> Vec<&str> {
    v.as_sequence().into_iter().flatten().filter_map(Value::as_str).collect()
}

/// `selector` is non-empty and every label it asks for is on `labels`.
fn selects(selector: &Value, labels: &BTreeMap<String, String>) -> bool {
    let wanted = string_map(selector);
    !wanted.is_empty() && wanted.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn name(v: &Value) -> &str {
    v["metadata"]["name"].as_str().expect("metadata.name")
}

#[test]
fn kustomization_lists_every_manifest() {
    let kustomization: Value = serde_yaml::from_str(&read("kubernetes/kustomization.yaml")).unwrap();
    let listed: BTreeSet<&str> = strs(&kustomization["resources"]).into_iter().collect();
    let present: BTreeSet<String> = std::fs::read_dir(deploy("kubernetes"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|f| f.ends_with(".yaml") && f != "kustomization.yaml")
        .collect();
    assert_eq!(listed, present.iter().map(String::as_str).collect(), "resources vs files in deploy/kubernetes");
    assert!(listed.contains("networkpolicy.yaml"));
}

/// The container's args through epp's own parser (kubelet expands `$(NAMESPACE)`; left as is).
fn parse_args(extra: &[&str]) -> epp::cli::ServeArgs {
    let m = Manifests::load();
    let args = strs(&m.container()["args"]);
    let cli = epp::cli::Cli::try_parse_from(std::iter::once("epp").chain(args).chain(extra.iter().copied()))
        .unwrap_or_else(|e| panic!("Deployment args rejected by epp: {e}"));
    assert!(cli.command.is_none(), "args start the server");
    cli.serve
}

#[test]
fn deployment_args_parse_and_point_at_the_pool_and_the_config_map() {
    let m = Manifests::load();
    let serve = parse_args(&[]);
    let pool = m.one("InferencePool");
    assert_eq!(serve.pool_name.as_deref(), Some(name(pool)));
    assert_eq!(serve.pool_group, pool["apiVersion"].as_str().unwrap().split('/').next().unwrap());
    assert_eq!(serve.pool_namespace, "$(NAMESPACE)", "the pod's own namespace, from the downward API");
    let env: BTreeMap<&str, &str> = m.container()["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap(), e["valueFrom"]["fieldRef"]["fieldPath"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(env.get("NAMESPACE"), Some(&"metadata.namespace"));
    assert_eq!(env.get("POD_NAME"), Some(&"metadata.name"));

    // --config-file is a key of the ConfigMap mounted at its directory, and that key loads.
    let config = serve.config_file.expect("--config-file");
    let (dir, key) = (config.parent().unwrap().to_str().unwrap(), config.file_name().unwrap().to_str().unwrap());
    let mount = m.container()["volumeMounts"].as_sequence().unwrap().iter().find(|v| v["mountPath"] == dir).unwrap();
    assert_eq!(mount["readOnly"], true);
    let volumes = m.deployment()["spec"]["template"]["spec"]["volumes"].as_sequence().unwrap();
    let volume = volumes.iter().find(|v| v["name"] == mount["name"]).unwrap();
    let config_map = m.one("ConfigMap");
    assert_eq!(volume["configMap"]["name"].as_str(), Some(name(config_map)));
    let text = config_map["data"][key].as_str().unwrap_or_else(|| panic!("ConfigMap has no key {key}"));
    let loaded = epp::app::load_config(
        Some(text),
        &epp::framework::build::BuildContext::default(),
        epp::scheduling::metrics::SchedulerMetrics::detached(),
    );
    assert!(loaded.is_ok(), "{}", loaded.err().map(|e| e.to_string()).unwrap_or_default());
    assert_eq!(serve.grpc_port, 9002);
    assert_eq!(serve.grpc_health_port, 9003);
    assert_eq!(serve.metrics_port, 9090);
    assert!(serve.secure_serving, "TLS on, as the Go EPPs default");
}

#[test]
fn tls_component_adds_a_cert_path_that_is_mounted() {
    let component: Value = serde_yaml::from_str(&read("kubernetes/components/tls-secret/kustomization.yaml")).unwrap();
    assert_eq!(component["kind"], "Component");
    let patch = &component["patches"][0];
    assert_eq!(patch["target"]["name"].as_str(), Some(name(Manifests::load().deployment())));
    let ops: Vec<Value> = serde_yaml::from_str(patch["patch"].as_str().unwrap()).unwrap();
    let value_at = |path: &str| ops.iter().find(|o| o["path"] == path).map(|o| o["value"].clone()).unwrap();
    let arg = value_at("/spec/template/spec/containers/0/args/-");
    let serve = parse_args(&[arg.as_str().unwrap()]);
    let cert_path = serve.cert_path.expect("--cert-path");
    let mount = value_at("/spec/template/spec/containers/0/volumeMounts/-");
    assert_eq!(mount["mountPath"].as_str(), cert_path.to_str());
    let volume = value_at("/spec/template/spec/volumes/-");
    assert_eq!(volume["name"], mount["name"]);
    assert!(volume["secret"]["secretName"].as_str().is_some_and(|s| !s.is_empty()));
}

#[tokio::test]
async fn probes_name_health_services_epp_answers() {
    let m = Manifests::load();
    let container = m.container();
    let pod = FakeVllm::start([127, 0, 0, 61], 0, 0, 0.0).await;
    let epp = TestEpp::start(&endpoints_yaml(&[("pod", pod.addr, &[])]), None, |_| {}).await;
    let mut health = HealthClient::new(
        Channel::from_shared(format!("http://{}", epp.app.health_addr)).unwrap().connect().await.unwrap(),
    );
    for probe in ["livenessProbe", "readinessProbe"] {
        let grpc = &container[probe]["grpc"];
        assert_eq!(grpc["port"], 9003, "{probe} on the health port");
        let service = grpc["service"].as_str().unwrap_or("").to_string();
        let status = health.check(HealthCheckRequest { service: service.clone() }).await;
        assert_eq!(
            status.map(|r| r.into_inner().status).ok(),
            Some(ServingStatus::Serving as i32),
            "{probe} {service:?}"
        );
    }
    let ports: BTreeMap<&str, u64> = container["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), p["containerPort"].as_u64().unwrap()))
        .collect();
    assert_eq!(ports.get("grpc"), Some(&9002));
    assert_eq!(ports.get("grpc-health"), Some(&9003));
    assert_eq!(ports.get("metrics"), Some(&9090));
    let pre_stop = strs(&container["lifecycle"]["preStop"]["exec"]["command"]);
    assert_eq!(pre_stop, ["/bin/sh", "-c", "sleep 5"], "llm-d's preStop hook (the image ships /bin/sh)");
}

#[test]
fn security_context_is_kserves_and_matches_the_image_user() {
    let m = Manifests::load();
    let sc = &m.container()["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(strs(&sc["capabilities"]["drop"]), ["ALL"]);
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    let pod = &m.deployment()["spec"]["template"]["spec"];
    let containerfile = read("container/Containerfile");
    let user = containerfile.lines().find_map(|l| l.strip_prefix("USER ")).expect("USER in Containerfile");
    let uid = pod["securityContext"]["runAsUser"].as_u64().unwrap();
    let gid = pod["securityContext"]["runAsGroup"].as_u64().unwrap();
    assert_eq!(user.trim(), format!("{uid}:{gid}"));
    assert_eq!(uid, 65532);
    let requests = &m.container()["resources"]["requests"];
    assert_eq!((requests["cpu"].as_str(), requests["memory"].as_str()), (Some("256m"), Some("500Mi")));
    // preStop sleep (5 s) + epp's drain must fit the grace period.
    assert!(pod["terminationGracePeriodSeconds"].as_u64().unwrap() >= 35);
    assert_eq!(pod["serviceAccountName"].as_str(), Some(name(m.one("ServiceAccount"))));
}

#[test]
fn service_pool_route_and_istio_rule_point_at_each_other() {
    let m = Manifests::load();
    let service = m.one("Service");
    assert!(selects(&service["spec"]["selector"], &m.pod_labels()), "Service selects the EPP pods");
    let ports = service["spec"]["ports"].as_sequence().unwrap();
    let port = |n: u64| ports.iter().find(|p| p["port"] == n).unwrap_or_else(|| panic!("Service port {n}"));
    assert_eq!(port(9002)["appProtocol"], "http2");
    assert_eq!(port(9002)["targetPort"], "grpc");
    assert_eq!(port(9003)["targetPort"], "grpc-health");
    assert_eq!(port(9090)["targetPort"], "metrics");

    let pool = m.one("InferencePool");
    assert_eq!(pool["apiVersion"], "inference.networking.k8s.io/v1");
    let picker = &pool["spec"]["endpointPickerRef"];
    assert_eq!(picker["name"].as_str(), Some(name(service)));
    assert_eq!(picker["port"]["number"], 9002);
    assert!(["FailOpen", "FailClose"].contains(&picker["failureMode"].as_str().unwrap()));
    // The pool as epp's own watcher reads it.
    let json: serde_json::Value = serde_json::to_value(pool).unwrap();
    let spec = epp::k8s::pool::parse_pool(&json).expect("epp accepts the pool");
    assert_eq!(spec.target_ports, [8000]);
    assert!(!spec.selector.is_empty());

    let route = m.one("HTTPRoute");
    let refs = route["spec"]["rules"][0]["backendRefs"].as_sequence().unwrap();
    assert!(refs.iter().any(|r| r["group"] == "inference.networking.k8s.io"
        && r["kind"] == "InferencePool"
        && r["name"].as_str() == Some(name(pool))));
    assert!(!route["spec"]["parentRefs"].as_sequence().unwrap().is_empty());

    let rule = m.one("DestinationRule");
    assert_eq!(rule["spec"]["host"].as_str(), Some(name(service)), "short host: relative to the rule's namespace");
    assert_eq!(rule["spec"]["trafficPolicy"]["tls"]["mode"], "SIMPLE");
    assert_eq!(rule["spec"]["trafficPolicy"]["tls"]["insecureSkipVerify"], true);
}

#[test]
fn monitoring_disruption_budget_and_network_policy_select_the_epp() {
    let m = Manifests::load();
    let service = m.one("Service");
    let monitor = m.one("ServiceMonitor");
    assert!(selects(&monitor["spec"]["selector"]["matchLabels"], &string_map(&service["metadata"]["labels"])));
    let endpoint = &monitor["spec"]["endpoints"][0];
    let port = service["spec"]["ports"].as_sequence().unwrap().iter().find(|p| p["name"] == endpoint["port"]).unwrap();
    assert_eq!(port["port"], 9090);
    assert_eq!(endpoint["path"], "/metrics");

    let pdb = m.one("PodDisruptionBudget");
    assert!(selects(&pdb["spec"]["selector"]["matchLabels"], &m.pod_labels()));
    assert!(pdb["spec"]["maxUnavailable"].as_u64().is_some_and(|n| n >= 1), "a single replica must not block drains");

    let policy = m.one("NetworkPolicy");
    assert!(selects(&policy["spec"]["podSelector"]["matchLabels"], &m.pod_labels()));
    let rules = policy["spec"]["ingress"].as_sequence().unwrap();
    let rule_for = |port: u64| {
        rules
            .iter()
            .find(|r| r["ports"].as_sequence().unwrap().iter().any(|p| p["port"] == port))
            .unwrap_or_else(|| panic!("no ingress rule for {port}"))
    };
    for port in [9002, 9003, 9090, 5557] {
        rule_for(port);
    }
    assert!(rule_for(9003)["from"].is_null(), "kubelet probes come from the node: health open to all");
    let pool_pods = string_map(&m.one("InferencePool")["spec"]["selector"]["matchLabels"]);
    assert!(
        selects(&rule_for(5557)["from"][0]["podSelector"]["matchLabels"], &pool_pods),
        "KV events from the pool's pods"
    );
}

/// (apiGroup, resource) pairs a kind of role grants with all of `verbs`.
fn granted(m: &Manifests, kind: &str, verbs: &[&str]) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for role in m.all(kind) {
        for rule in role["rules"].as_sequence().unwrap() {
            if !verbs.iter().all(|v| strs(&rule["verbs"]).contains(v)) {
                continue;
            }
            for group in strs(&rule["apiGroups"]) {
                for resource in strs(&rule["resources"]) {
                    out.insert((group.to_string(), resource.to_string()));
                }
            }
        }
    }
    out
}

#[test]
fn rbac_grants_what_the_go_epps_charts_grant() {
    let m = Manifests::load();
    let read = granted(&m, "Role", &["get", "list", "watch"]);
    for (group, resource) in [
        ("", "pods"),
        ("inference.networking.k8s.io", "inferencepools"),
        ("inference.networking.x-k8s.io", "inferenceobjectives"),
        ("inference.networking.x-k8s.io", "inferencemodelrewrites"),
        ("llm-d.ai", "inferenceobjectives"),
        ("llm-d.ai", "inferencemodelrewrites"),
    ] {
        assert!(read.contains(&(group.into(), resource.into())), "Role: {group}/{resource}");
    }
    let leases = granted(&m, "Role", &["get", "create", "update"]);
    assert!(leases.contains(&("coordination.k8s.io".into(), "leases".into())));
    let create = granted(&m, "ClusterRole", &["create"]);
    assert!(create.contains(&("authentication.k8s.io".into(), "tokenreviews".into())));
    assert!(create.contains(&("authorization.k8s.io".into(), "subjectaccessreviews".into())));

    let account = name(m.one("ServiceAccount"));
    let binds_epp = |b: &&Value| {
        b["subjects"].as_sequence().unwrap().iter().any(|s| s["kind"] == "ServiceAccount" && s["name"] == account)
    };
    for (binding, role) in [("RoleBinding", "Role"), ("ClusterRoleBinding", "ClusterRole")] {
        let b = m.all(binding).into_iter().find(binds_epp).unwrap_or_else(|| panic!("no {binding} for epp"));
        assert_eq!(b["roleRef"]["kind"], role);
        let granted = m.all(role).into_iter().find(|r| r["metadata"]["name"] == b["roleRef"]["name"]);
        assert!(granted.is_some_and(|r| !r["rules"].as_sequence().unwrap().is_empty()), "{binding} names a {role}");
    }
    // --metrics-endpoint-auth: someone may `get /metrics`.
    let reader =
        m.all("ClusterRole").into_iter().any(|r| {
            r["rules"].as_sequence().unwrap().iter().any(|rule| {
                strs(&rule["nonResourceURLs"]).contains(&"/metrics") && strs(&rule["verbs"]).contains(&"get")
            })
        });
    assert!(reader, "a ClusterRole grants get on /metrics");
}

/// Leaf paths of a YAML tree (`a.b[0].c`).
fn leaves(v: &Value, path: String, out: &mut Vec<String>) {
    match v {
        Value::Mapping(map) => {
            for (k, child) in map {
                let key = k.as_str().unwrap_or("?");
                leaves(child, if path.is_empty() { key.into() } else { format!("{path}.{key}") }, out);
            }
        }
        Value::Sequence(seq) => {
            for (i, child) in seq.iter().enumerate() {
                leaves(child, format!("{path}[{i}]"), out);
            }
        }
        _ => out.push(path),
    }
}

#[test]
fn kserve_config_changes_only_the_scheduler_image() {
    let config: Value = serde_yaml::from_str(&read("kserve/llminferenceserviceconfig.yaml")).unwrap();
    assert_eq!(config["kind"], "LLMInferenceServiceConfig");
    let mut paths = Vec::new();
    leaves(&config["spec"], String::new(), &mut paths);
    assert_eq!(
        paths,
        ["router.scheduler.template.containers[0].name", "router.scheduler.template.containers[0].image"],
        "KServe merges containers by name: only `main`'s image may be set"
    );
    assert_eq!(config["spec"]["router"]["scheduler"]["template"]["containers"][0]["name"], "main");
    let image = config["spec"]["router"]["scheduler"]["template"]["containers"][0]["image"].as_str().unwrap();

    // The image build.sh tags, which the kustomization also deploys.
    let script = read("container/build.sh");
    let default_image =
        script.lines().find_map(|l| l.strip_prefix("IMAGE=${IMAGE:-")).and_then(|r| r.strip_suffix('}')).unwrap();
    assert_eq!(image, default_image);
    let kustomization: Value = serde_yaml::from_str(&read("kubernetes/kustomization.yaml")).unwrap();
    let images = &kustomization["images"][0];
    assert_eq!(format!("{}:{}", images["newName"].as_str().unwrap(), images["newTag"].as_str().unwrap()), image);

    let service: Value = serde_yaml::from_str(&read("kserve/llminferenceservice.yaml")).unwrap();
    assert_eq!(service["apiVersion"], config["apiVersion"]);
    let base_refs: Vec<&str> =
        service["spec"]["baseRefs"].as_sequence().unwrap().iter().filter_map(|r| r["name"].as_str()).collect();
    assert!(base_refs.contains(&name(&config)), "the service uses the config");
    assert!(service["spec"]["router"]["scheduler"].is_mapping(), "the managed scheduler is on");
}
