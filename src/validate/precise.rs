//! Precise prefix-cache cross-checks between the scheduler config and the vLLM pods. The
//! parameters are read from the raw YAML of any `precise-prefix-cache-scorer` /
//! `precise-prefix-cache-producer` plugin (whether or not this build registers the type):
//! - `tokenProcessorConfig.blockSize` / `blockSizeTokens` (16) vs vLLM `--block-size` (16);
//! - `tokenProcessorConfig.hashSeed` vs `PYTHONHASHSEED`;
//! - `tokenProcessorConfig.hashAlgorithm` (`cbor-fnv` | `xxh64` | `epp-xxh3`) and vLLM
//!   `--prefix-caching-hash-algo` (`sha256` | `sha256_cbor` | `xxhash` | `xxhash_cbor`);
//! - `kvEventsConfig` (`zmqEndpoint`, `topicFilter` `kv@`, pod discovery `socketPort` 5557)
//!   vs vLLM `--kv-events-config` (`endpoint`, `topic`, `enable_kv_cache_events`,
//!   `publisher`).
//!
//! Mismatched block size or seed only break the older indexers (llm-d <= v0.4 hashed like
//! vLLM); they are warnings. Wrong values, both sides binding, port or topic mismatches
//! and disabled events mean no events reach the EPP: errors.

use serde_yaml::Value;

use super::vllm::Workload;
use super::{Finding, at};

const TYPES: &[&str] = &["precise-prefix-cache-scorer", "precise-prefix-cache-producer"];
const VLLM_ALGOS: &[&str] = &["sha256", "sha256_cbor", "xxhash", "xxhash_cbor"];
const EPP_ALGOS: &[&str] = &["", "cbor-fnv", "xxh64", "epp-xxh3"];

fn scalar(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn port(endpoint: &str) -> Option<u16> {
    endpoint.rsplit_once(':')?.1.parse().ok()
}

/// Findings for every precise plugin of the inline config against every vLLM pool.
pub fn check(config: &Value, pools: &[Workload]) -> Vec<Finding> {
    let mut out = Vec::new();
    let plugins = config.get("plugins").and_then(Value::as_sequence).into_iter().flatten().enumerate();
    for (i, p) in plugins.filter(|(_, p)| p.get("type").and_then(Value::as_str).is_some_and(|t| TYPES.contains(&t))) {
        let base = format!("spec.router.scheduler.config.inline.plugins[{i}].parameters");
        let params = p.get("parameters").cloned().unwrap_or(Value::Null);
        tokens(&params, &base, pools, &mut out);
        events(&params, &base, pools, &mut out);
    }
    out
}

fn tokens(params: &Value, base: &str, pools: &[Workload], out: &mut Vec<Finding>) {
    let tp = params.get("tokenProcessorConfig").or_else(|| at(params, &["indexerConfig", "tokenProcessorConfig"]));
    let tp_path = format!("{base}.tokenProcessorConfig");
    let block = tp
        .and_then(|t| scalar(t.get("blockSizeTokens")).or_else(|| scalar(t.get("blockSize"))))
        .unwrap_or_else(|| "16".into());
    let seed = tp.and_then(|t| scalar(t.get("hashSeed"))).unwrap_or_default();
    let algo = tp.and_then(|t| scalar(t.get("hashAlgorithm"))).unwrap_or_default();
    if !EPP_ALGOS.contains(&algo.as_str()) {
        out.push(Finding::error(
            format!("{tp_path}.hashAlgorithm"),
            format!("unknown hashAlgorithm {algo:?}"),
            "use cbor-fnv, xxh64 or epp-xxh3",
        ));
    }
    for w in pools {
        let args = format!("{}.containers", w.path);
        let vllm_block = w.flag("--block-size").unwrap_or_else(|| "16".into());
        if vllm_block != block {
            out.push(Finding::warning(
                format!("{tp_path}.blockSize"),
                format!("EPP block size {block} differs from vLLM --block-size {vllm_block} in {}", w.path),
                format!("set the same block size on both sides (--block-size {block} or blockSize: {vllm_block})"),
            ));
        }
        if !seed.is_empty() && w.env("PYTHONHASHSEED") != Some(seed.as_str()) {
            let found = w.env("PYTHONHASHSEED").map_or("unset".to_string(), |s| format!("{s:?}"));
            out.push(Finding::warning(
                format!("{tp_path}.hashSeed"),
                format!("hashSeed {seed:?} but PYTHONHASHSEED is {found} in {}", w.path),
                format!("set env PYTHONHASHSEED={seed:?} on the vLLM container"),
            ));
        }
        if let Some(a) = w.flag("--prefix-caching-hash-algo")
            && !VLLM_ALGOS.contains(&a.as_str())
        {
            out.push(Finding::error(
                format!("{args}.args"),
                format!("unknown --prefix-caching-hash-algo {a:?}"),
                format!("use one of {VLLM_ALGOS:?} (sha256_cbor is reproducible outside Python)"),
            ));
        }
    }
}

fn events(params: &Value, base: &str, pools: &[Workload], out: &mut Vec<Finding>) {
    let ev = params.get("kvEventsConfig");
    let ev_path = format!("{base}.kvEventsConfig");
    let central = ev.and_then(|e| scalar(e.get("zmqEndpoint"))).filter(|s| !s.is_empty());
    let topic_filter = ev.and_then(|e| scalar(e.get("topicFilter"))).unwrap_or_else(|| "kv@".into());
    let socket_port =
        ev.and_then(|e| at(e, &["podDiscoveryConfig", "socketPort"])).and_then(Value::as_u64).unwrap_or(5557);
    for w in pools.iter().filter(|w| w.role != "worker") {
        let Some(raw) = w.flag("--kv-events-config") else {
            out.push(Finding::warning(format!("{}.containers.args", w.path), format!("no --kv-events-config in {}: the precise index gets no events from these pods", w.path), "add --kv-events-config '{\"enable_kv_cache_events\":true,\"publisher\":\"zmq\",\"endpoint\":...,\"topic\":\"kv@...\"}'"));
            continue;
        };
        let path = format!("{}.containers.args", w.path);
        let Ok(cfg) = serde_json::from_str::<serde_json::Value>(&raw) else {
            out.push(Finding::error(
                path,
                "--kv-events-config is not valid JSON",
                "quote the JSON so vLLM receives it intact",
            ));
            continue;
        };
        let s = |k: &str| cfg.get(k).and_then(|v| v.as_str()).map(str::to_string);
        if cfg.get("enable_kv_cache_events").and_then(|v| v.as_bool()) != Some(true) {
            out.push(Finding::error(
                path.clone(),
                "enable_kv_cache_events is not true: vLLM publishes nothing",
                "set \"enable_kv_cache_events\": true",
            ));
        }
        if s("publisher").as_deref() == Some("null") {
            out.push(Finding::error(
                path.clone(),
                "publisher \"null\" publishes nothing",
                "set \"publisher\": \"zmq\"",
            ));
        }
        let endpoint = s("endpoint").unwrap_or_else(|| "tcp://*:5557".into());
        let binds = endpoint.contains('*') || endpoint.contains("::") || endpoint.starts_with("ipc://");
        match &central {
            Some(epp) if binds => out.push(Finding::error(format!("{ev_path}.zmqEndpoint"), format!("the EPP binds {epp} and vLLM also binds {endpoint}: nobody connects"), "in central mode point vLLM's endpoint at the EPP service (tcp://<epp-service>:<port>); or drop zmqEndpoint to use pod discovery")),
            Some(epp) if port(epp) != port(&endpoint) => out.push(Finding::error(format!("{ev_path}.zmqEndpoint"), format!("vLLM publishes to {endpoint} but the EPP listens on {epp}"), "use the same port on both sides")),
            None if port(&endpoint) != Some(u16::try_from(socket_port).unwrap_or(0)) => out.push(Finding::error(format!("{ev_path}.podDiscoveryConfig.socketPort"), format!("the EPP dials port {socket_port} but vLLM publishes on {endpoint}"), "set podDiscoveryConfig.socketPort to vLLM's port")),
            _ => {}
        }
        let topic = s("topic").unwrap_or_default();
        if !topic.starts_with(&topic_filter) {
            out.push(Finding::error(format!("{ev_path}.topicFilter"), format!("vLLM topic {topic:?} does not start with the EPP's topicFilter {topic_filter:?}: every message is filtered out"), format!("set vLLM \"topic\" to start with {topic_filter:?} (e.g. \"kv@$(POD_IP)@model\")")));
        }
    }
}
