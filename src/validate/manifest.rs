//! LLMInferenceService checks: the inline scheduler config through the loader, then the
//! manifest pitfalls of the seed guides: route rules without backendRefs to
//! `<name>-inference-pool`, `initContainers` on `spec.worker`, `replicas` with `scaling`,
//! `scaling` without `wva` or with both/neither of `keda`/`hpa`, `idleReplicaCount` >=
//! `minReplicas`, KV-transfer roles of the prefill and decode pools, P/D profile names vs the
//! handler's parameters. Role and label filters that match no pod template are in `labels`,
//! precise-prefix cross-checks in `precise`.

use serde_yaml::Value;

use super::vllm::{Workload, workloads};
use super::{Finding, KSERVE_API_VERSIONS, at, config_findings, join};

const INLINE: &str = "spec.router.scheduler.config.inline";

/// All findings for one manifest.
pub fn check(doc: &Value) -> Vec<Finding> {
    let mut out = api_version_and_inline_config(doc);
    let inline = at(doc, &["spec", "router", "scheduler", "config", "inline"]);
    let pools = workloads(doc);
    route(doc, &mut out);
    worker(doc, &mut out);
    scaling(doc.get("spec"), "spec", &mut out);
    scaling(at(doc, &["spec", "prefill"]), "spec.prefill", &mut out);
    kv_roles(doc, &pools, &mut out);
    if let Some(config) = inline {
        disagg_profiles(doc, config, &mut out);
        super::labels::check(config, &super::labels::pod_templates(doc), &mut out);
        out.extend(super::precise::check(config, &pools));
    }
    out
}

/// Findings every KServe document shares (LLMInferenceService and LLMInferenceServiceConfig):
/// an unknown apiVersion, and the inline scheduler config through the loader.
pub(super) fn api_version_and_inline_config(doc: &Value) -> Vec<Finding> {
    let mut out = Vec::new();
    let api = doc.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if !KSERVE_API_VERSIONS.contains(&api) {
        out.push(Finding::warning(
            "apiVersion",
            format!("apiVersion {api:?} is not one this validator knows"),
            format!("use one of {KSERVE_API_VERSIONS:?}"),
        ));
    }
    if let Some(config) = at(doc, &["spec", "router", "scheduler", "config", "inline"]) {
        out.extend(config_findings(config, &format!("{INLINE}.")));
    }
    out
}

fn route(doc: &Value, out: &mut Vec<Finding>) {
    let Some(spec) = at(doc, &["spec", "router", "route", "http", "spec"]) else { return };
    let name = at(doc, &["metadata", "name"]).and_then(Value::as_str).unwrap_or("<name>");
    let pool = format!("{name}-inference-pool");
    let has_hosts = spec.get("hostnames").and_then(Value::as_sequence).is_some_and(|h| !h.is_empty());
    let refs: Vec<&str> = spec
        .get("rules")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
        .flat_map(|r| r.get("backendRefs").and_then(Value::as_sequence).into_iter().flatten())
        .filter_map(|b| b.get("name").and_then(Value::as_str))
        .collect();
    let path = "spec.router.route.http.spec.rules";
    if has_hosts && refs.is_empty() {
        out.push(Finding::error(path, "the route sets hostnames but no rules[].backendRefs: the InferencePool is never attached to the Gateway (InferencePoolReady stays WaitingForGateway)", format!("add a rule with backendRefs [{{group: inference.networking.k8s.io, kind: InferencePool, name: {pool}}}]")));
    } else if !refs.is_empty() && !refs.contains(&pool.as_str()) {
        out.push(Finding::warning(
            path,
            format!("no backendRef names {pool:?} (found {refs:?})"),
            format!("point a backendRef at {pool}"),
        ));
    }
}

fn worker(doc: &Value, out: &mut Vec<Finding>) {
    if at(doc, &["spec", "worker", "initContainers"]).and_then(Value::as_sequence).is_some_and(|s| !s.is_empty()) {
        out.push(Finding::error(
            "spec.worker.initContainers",
            "initContainers on the worker make worker pods fail, so the gang never forms and the leader stays Pending",
            "move the routing sidecar to spec.template.initContainers (the leader) only",
        ));
    }
}

fn scaling(workload: Option<&Value>, base: &str, out: &mut Vec<Finding>) {
    let Some(w) = workload else { return };
    let Some(scaling) = w.get("scaling") else { return };
    if w.get("replicas").is_some() {
        out.push(Finding::error(
            join(base, "replicas"),
            "replicas and scaling are mutually exclusive",
            format!("remove {base}.replicas (scaling.minReplicas sets the floor)"),
        ));
    }
    let path = join(base, "scaling");
    let Some(wva) = scaling.get("wva") else {
        out.push(Finding::error(
            join(&path, "wva"),
            "scaling requires wva",
            "add scaling.wva with exactly one of keda or hpa",
        ));
        return;
    };
    match (wva.get("keda").is_some(), wva.get("hpa").is_some()) {
        (true, true) => out.push(Finding::error(
            join(&path, "wva"),
            "wva sets both keda and hpa",
            "keep exactly one of keda or hpa",
        )),
        (false, false) => out.push(Finding::error(
            join(&path, "wva"),
            "wva sets neither keda nor hpa",
            "add exactly one of keda or hpa",
        )),
        _ => {}
    }
    let min = scaling.get("minReplicas").and_then(Value::as_i64).unwrap_or(1);
    if let Some(idle) = wva.get("keda").and_then(|k| k.get("idleReplicaCount")).and_then(Value::as_i64)
        && idle >= min
    {
        out.push(Finding::error(
            join(&path, "wva.keda.idleReplicaCount"),
            format!("idleReplicaCount ({idle}) must be below minReplicas ({min})"),
            "lower idleReplicaCount or raise minReplicas (both have a minimum of 1)",
        ));
    }
}

/// `kv_role` of `--kv-transfer-config` in a pool, when set.
fn kv_role(w: &Workload) -> Option<String> {
    let json: serde_json::Value = serde_json::from_str(&w.flag("--kv-transfer-config")?).ok()?;
    json.get("kv_role").and_then(|r| r.as_str()).map(str::to_string)
}

fn kv_roles(doc: &Value, pools: &[Workload], out: &mut Vec<Finding>) {
    if at(doc, &["spec", "prefill"]).is_none() {
        return;
    }
    for w in pools {
        let Some(role) = kv_role(w) else { continue };
        let (ok, want): (&[&str], &str) = if w.role == "prefill" {
            (&["kv_producer", "kv_both"], "kv_producer or kv_both")
        } else {
            (&["kv_consumer", "kv_both"], "kv_consumer or kv_both")
        };
        if !ok.contains(&role.as_str()) {
            out.push(Finding::error(
                format!("{}.containers.args", w.path),
                format!("{} pool has kv_role {role:?} in --kv-transfer-config", w.role),
                format!("use {want} for the {} pool", w.role),
            ));
        }
    }
}

/// Plugin `(type, parameters)` of the inline config.
fn plugins(config: &Value) -> Vec<(String, String, Value)> {
    config
        .get("plugins")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let t = p.get("type").and_then(Value::as_str)?.to_string();
            let name = p.get("name").and_then(Value::as_str).map_or_else(|| t.clone(), str::to_string);
            Some((t, name, p.get("parameters").cloned().unwrap_or(Value::Null)))
        })
        .collect()
}

fn profile_names(config: &Value) -> Vec<String> {
    config
        .get("schedulingProfiles")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("name").and_then(Value::as_str))
        .map(str::to_string)
        .collect()
}

fn disagg_profiles(doc: &Value, config: &Value, out: &mut Vec<Finding>) {
    let profiles = profile_names(config);
    let handler = plugins(config)
        .into_iter()
        .enumerate()
        .find(|(_, (t, _, _))| t == "disagg-profile-handler" || t == "pd-profile-handler");
    let has_prefill_pool = at(doc, &["spec", "prefill"]).is_some();
    let Some((i, (_, _, params))) = handler else {
        if has_prefill_pool {
            out.push(Finding::warning(INLINE, "spec.prefill declares a prefill pool but the scheduler config has no disagg-profile-handler: prefill pods never get traffic", "add disagg-profile-handler with deciders.prefill and prefill/decode profiles"));
        }
        return;
    };
    let name_of = |nested: &str, flat: &str, default: &str| {
        at(&params, &["profiles", nested])
            .or_else(|| params.get(flat))
            .and_then(Value::as_str)
            .unwrap_or(default)
            .to_string()
    };
    let base = format!("{INLINE}.plugins[{i}].parameters");
    let decode = name_of("decode", "decodeProfile", "decode");
    if !profiles.contains(&decode) {
        out.push(Finding::error(
            format!("{base}.profiles.decode"),
            format!("decode profile {decode:?} is not among schedulingProfiles {profiles:?}: every request fails"),
            "name the decode profile in profiles.decode or rename the profile",
        ));
    }
    let prefill = name_of("prefill", "prefillProfile", "prefill");
    if has_prefill_pool && !profiles.contains(&prefill) {
        out.push(Finding::warning(format!("{base}.profiles.prefill"), format!("prefill profile {prefill:?} is not among schedulingProfiles {profiles:?}: requests always go decode-only"), "name the prefill profile in profiles.prefill or rename the profile"));
    }
}
