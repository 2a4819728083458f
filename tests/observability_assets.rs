//! The Grafana dashboard (deploy/grafana/) and the Prometheus alert rules (deploy/prometheus/)
//! only name metrics epp exports: a real epp on loopback (Flow Control, a local tokenizer,
//! the precise prefix-cache producer, one live and one unreachable model server) serves one
//! routed and one rejected request, then its `/metrics` is scraped and every metric name in
//! every PromQL expression must be a sample name there (histograms by `_bucket`, `_sum`,
//! `_count`). Labelled families that get a series only when their event happens (hash
//! drift, dropped KV messages) are listed in [`EVENT_ONLY`] and must be registered under that
//! name in src/. The rules also pass `promtool check rules` when promtool is installed.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use common::*;

const DASHBOARD: &str = "deploy/grafana/epp-dashboard.json";
const RULES: &str = "deploy/prometheus/epp-alerts.yaml";

/// Families with no series until their event happens (label values come from the event).
const EVENT_ONLY: &[&str] = &[
    "epp_kv_drift_mismatches_total",
    "epp_kv_drift_checks_total",
    "epp_kv_dropped_messages_total",
    "epp_kv_rejected_frames_total",
    "epp_kv_events_total",
    "epp_kv_endpoint_block_size",
    "epp_kv_index_endpoint_blocks",
    "inference_extension_flow_control_queue_size",
    "inference_extension_flow_control_queue_bytes",
];

/// Series Prometheus itself adds to every target.
const SCRAPE_SYNTHETIC: &[&str] = &["up"];

/// PromQL keywords and aggregation operators (`sum by (le) (...)`: not followed by `(`).
const PROMQL_WORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "sum",
    "avg",
    "min",
    "max",
    "count",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
    "group",
];

fn config(tokenizer_dir: &str) -> String {
    format!(
        r#"apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: token-producer
  parameters: {{local: {{models: {{m: "{tokenizer_dir}"}}, timeout: 10s}}}}
- type: precise-prefix-cache-producer
  parameters:
    tokenProcessorConfig: {{blockSizeTokens: 16}}
    kvEventsConfig: {{discoverPods: true}}
- type: approx-prefix-cache-producer
- type: prefix-cache-scorer
  name: precise-scorer
  parameters: {{prefixMatchInfoProducerName: precise-prefix-cache-producer}}
- type: prefix-cache-scorer
  name: approx-scorer
  parameters: {{prefixMatchInfoProducerName: approx-prefix-cache-producer}}
- type: queue-scorer
schedulingProfiles:
- name: default
  plugins:
  - {{pluginRef: precise-scorer, weight: 3}}
  - {{pluginRef: approx-scorer, weight: 1}}
  - {{pluginRef: queue-scorer, weight: 1}}
"#
    )
}

/// Metric names in one PromQL expression: identifiers that are not functions (followed by
/// `(`), keywords, label names (inside `{}` or a `by (...)` list), strings, durations or numbers.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let (mut i, mut braces, mut brackets) = (0, 0usize, 0usize);
    let mut grouping = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' => {
                i += 1;
                while i < chars.len() && chars[i] != c {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
            }
            '{' => braces += 1,
            '}' => braces = braces.saturating_sub(1),
            '[' => brackets += 1,
            ']' => brackets = brackets.saturating_sub(1),
            ')' => grouping = false,
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':') {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let next = chars[i..].iter().find(|c| !c.is_whitespace());
                let in_labels = braces > 0 || brackets > 0 || grouping;
                if ["by", "without", "on", "ignoring", "group_left", "group_right"].contains(&word.as_str()) {
                    grouping = next == Some(&'(');
                } else if next != Some(&'(') && !in_labels && !PROMQL_WORDS.contains(&word.as_str()) {
                    names.insert(word);
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    names
}

fn dashboard_exprs(text: &str) -> Vec<String> {
    let dashboard: serde_json::Value = serde_json::from_str(text).expect("dashboard is JSON");
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            exprs.push(target["expr"].as_str().expect("expr").to_string());
        }
    }
    for variable in dashboard["templating"]["list"].as_array().expect("templating") {
        if let Some(q) = variable["query"]["query"].as_str() {
            // label_values(metric, label): the label is not a metric.
            let inner = q.trim_start_matches("label_values(").trim_end_matches(')');
            exprs.push(inner.split(',').next().unwrap_or("").to_string());
        }
    }
    exprs
}

fn rule_exprs(text: &str) -> Vec<String> {
    let rules: serde_json::Value = serde_yaml::from_str(text).expect("rules are YAML");
    let mut exprs = Vec::new();
    for group in rules["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            exprs.push(rule["expr"].as_str().expect("expr").to_string());
        }
    }
    exprs
}

fn sample_names(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

/// Every `.rs` file under `dir`, concatenated.
fn sources(dir: &Path) -> String {
    let mut out = String::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read src").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push_str(&std::fs::read_to_string(&path).expect("read source"));
            }
        }
    }
    out
}

#[test]
fn promql_names_skip_functions_labels_and_keywords() {
    let names = metric_names(
        r#"histogram_quantile(0.99, sum by (le, x) (rate(a_seconds_bucket{name=~"$p", y="z(q)"}[5m]))) > 0.05 and on (job) up == 0"#,
    );
    assert_eq!(names.into_iter().collect::<Vec<_>>(), ["a_seconds_bucket", "up"]);
}

#[tokio::test]
async fn dashboard_and_rules_name_only_exported_metrics() {
    let root = env!("CARGO_MANIFEST_DIR");
    let pod = FakeVllm::start([127, 0, 0, 2], 0, 0, 0.1).await;
    // Nothing listens there: its scrapes fail and are counted.
    let dead = std::net::SocketAddr::from(([127, 0, 0, 1], 1));
    let tokenizer = format!("{root}/tests/fixtures/tokenizers/llama3");
    let epp = TestEpp::start(
        &endpoints_yaml(&[("pod", pod.addr, &[]), ("dead", dead, &[])]),
        Some(&config(&tokenizer)),
        |s| {
            s.refresh_prometheus_metrics_interval = Duration::from_millis(20);
        },
    )
    .await;
    epp.wait_endpoints(&["pod", "dead"]).await;
    epp.wait_scraped(|set| set.get("pod").is_some_and(|e| e.metrics.load().updated_at.is_some())).await;

    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v1/chat/completions", &[], false, Some((BUFFERED, NONE)))).await;
    assert!(is_request_headers(&ex.next().await));
    ex.send(request_body(&chat("m", "hello", false), true)).await;
    assert_eq!(set_header(&ex.next().await, "x-gateway-destination-endpoint"), Some(pod.addr.to_string()));
    // The response's end records the request duration.
    ex.send(response_headers("200", "application/json")).await;
    let _ = ex.next().await;
    ex.send(response_body(br#"{"usage":{"prompt_tokens":3,"completion_tokens":2}}"#, true)).await;
    let _ = ex.next().await;
    let mut bad = Exchange::open(&mut client).await;
    bad.send(request_headers("/v1/chat/completions", &[], false, Some((BUFFERED, NONE)))).await;
    assert!(is_request_headers(&bad.next().await));
    bad.send(request_body(b"{not json", true)).await;
    let _rejected = bad.next().await;

    // The pool gauges refresh every 20 ms; the failed scrape of `dead` is counted by then too.
    let deadline = tokio::time::Instant::now() + WAIT;
    let exported = loop {
        let text = scrape(epp.app.metrics_addr).await;
        let names = sample_names(&text);
        let ready = text.contains("inference_pool_ready_pods{name=\"\"} 1")
            && names.contains("llm_d_epp_datalayer_poll_errors_total")
            && names.contains("inference_objective_request_error_total");
        if ready {
            break names;
        }
        assert!(tokio::time::Instant::now() < deadline, "pool gauges and counters not exported in time:\n{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };

    let src = sources(&Path::new(root).join("src"));
    let mut missing = Vec::new();
    let mut used_event_only = BTreeSet::new();
    for (file, exprs) in [
        (DASHBOARD, dashboard_exprs(&std::fs::read_to_string(Path::new(root).join(DASHBOARD)).expect("dashboard"))),
        (RULES, rule_exprs(&std::fs::read_to_string(Path::new(root).join(RULES)).expect("rules"))),
    ] {
        assert!(!exprs.is_empty(), "{file} has no expressions");
        for name in exprs.iter().flat_map(|e| metric_names(e)) {
            let family = ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(&name);
            if EVENT_ONLY.contains(&family) {
                used_event_only.insert(family.to_string());
            }
            if exported.contains(&name) || SCRAPE_SYNTHETIC.contains(&name.as_str()) {
                continue;
            }
            if EVENT_ONLY.contains(&family) {
                assert!(src.contains(&format!("\"{family}\"")), "{family} (event-only) is not registered in src/");
                continue;
            }
            missing.push(format!("{file}: {name}"));
        }
    }
    assert!(missing.is_empty(), "not exported by epp: {missing:#?}");
    let unused: Vec<_> = EVENT_ONLY.iter().filter(|n| !used_event_only.contains(**n)).collect();
    assert!(unused.is_empty(), "EVENT_ONLY entries no expression uses: {unused:?}");
}

#[test]
fn alert_rules_pass_promtool() {
    let promtool = Path::new("/usr/bin/promtool");
    if !promtool.exists() {
        println!("NOTICE: /usr/bin/promtool not installed (Debian package `prometheus`); rule syntax not checked");
        return;
    }
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join(RULES);
    let out =
        std::process::Command::new(promtool).arg("check").arg("rules").arg(&rules).output().expect("run promtool");
    assert!(
        out.status.success(),
        "promtool check rules failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
