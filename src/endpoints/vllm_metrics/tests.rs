use super::*;

const VLLM_0_33: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/metrics/vllm-0.33.0.txt"));
const VLLM_0_33_JSON: &str =
    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/metrics/vllm-0.33.0.json"));

fn vllm() -> EngineMapping {
    builtin_engine("vllm").expect("builtin")
}

#[test]
fn vllm_0_33_exposition_matches_recorded_snapshot() {
    let got = extract(VLLM_0_33, &vllm());
    let recorded: serde_json::Value = serde_json::from_str(VLLM_0_33_JSON).unwrap();
    let stats = &recorded["scheduler_stats_recorded"]["0"];
    let waiting = stats["num_waiting_reqs"].as_u64().unwrap() + stats["num_skipped_waiting_reqs"].as_u64().unwrap();
    assert_eq!(got.missing, []);
    assert!(got.extracted_any);
    assert_eq!(got.malformed_lines, 0);
    assert_eq!(
        got.metrics,
        PodMetrics {
            waiting_queue_size: waiting,
            running_requests: stats["num_running_reqs"].as_u64().unwrap(),
            kv_cache_usage: stats["kv_cache_usage"].as_f64().unwrap(),
            active_models: vec!["sql-lora".into()],
            waiting_models: vec!["chat-lora".into()],
            max_active_models: Some(4),
            cache_block_size: Some(16),
            cache_num_blocks: Some(27873),
        }
    );
}

#[test]
fn vllm_old_gpu_cache_usage_fallback_and_missing_families() {
    let text = "vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.25\nvllm:num_requests_running 2\n";
    let got = extract(text, &vllm());
    assert_eq!(got.metrics.kv_cache_usage, 0.25);
    assert_eq!(got.metrics.running_requests, 2);
    assert_eq!(got.missing, [MetricField::Queued, MetricField::Lora, MetricField::CacheInfo]);
    assert!(got.extracted_any);
    // The new name wins over the old one regardless of order.
    let both = "vllm:gpu_cache_usage_perc 0.9\nvllm:kv_cache_usage_perc 0.1\n";
    assert_eq!(extract(both, &vllm()).metrics.kv_cache_usage, 0.1);
}

#[test]
fn nothing_extracted_from_unrelated_text() {
    let got = extract("# HELP x\nprocess_cpu_seconds_total 1\n", &vllm());
    assert!(!got.extracted_any);
    assert_eq!(got.metrics, PodMetrics::default());
    assert_eq!(got.missing.len(), 5);
}

#[test]
fn gauge_selection_latest_timestamp_else_first() {
    let no_ts = "vllm:num_requests_waiting{engine=\"0\"} 5\nvllm:num_requests_waiting{engine=\"1\"} 9\n";
    assert_eq!(extract(no_ts, &vllm()).metrics.waiting_queue_size, 5);
    let ts = "vllm:num_requests_waiting 5 1000\nvllm:num_requests_waiting 9 3000\n\
              vllm:num_requests_waiting 7 2000\nvllm:num_requests_waiting 1\n";
    assert_eq!(extract(ts, &vllm()).metrics.waiting_queue_size, 9);
}

#[test]
fn lora_newest_series_and_list_parsing() {
    let text = r#"
vllm:lora_requests_info{max_lora="2",running_lora_adapters="old",waiting_lora_adapters=""} 1.0e+09
vllm:lora_requests_info{max_lora="4",running_lora_adapters=" a , b,,",waiting_lora_adapters=""} 1.7672256001e+09
vllm:lora_requests_info{max_lora="8",running_lora_adapters="nan",waiting_lora_adapters=""} NaN
vllm:lora_requests_info{max_lora="3",running_lora_adapters="mid",waiting_lora_adapters="w}x,\"q\""} 1.5e+09
"#;
    let m = extract(text, &vllm()).metrics;
    assert_eq!(m.active_models, ["a", "b"]);
    assert_eq!(m.waiting_models, Vec::<String>::new());
    assert_eq!(m.max_active_models, Some(4));
    let escaped = r#"vllm:lora_requests_info{waiting_lora_adapters="w}x,\"q\"",running_lora_adapters=""} 1"#;
    assert_eq!(extract(escaped, &vllm()).metrics.waiting_models, ["w}x", "\"q\""]);
}

#[test]
fn cache_info_none_values_and_nan_gauges() {
    let text = "vllm:cache_config_info{block_size=\"None\",num_gpu_blocks=\"None\"} 1.0\n\
                vllm:kv_cache_usage_perc NaN\nvllm:num_requests_running +Inf\n";
    let got = extract(text, &vllm());
    assert_eq!((got.metrics.cache_block_size, got.metrics.cache_num_blocks), (None, None));
    // NaN / Inf are invalid (a broken exporter), not missing: the scraper rejects the scrape.
    assert_eq!(got.invalid, [MetricField::Running, MetricField::KvUsage]);
    assert!(!got.missing.contains(&MetricField::KvUsage));
    assert!(!got.missing.contains(&MetricField::CacheInfo));
}

#[test]
fn negative_values_are_invalid_not_zero() {
    let text = "vllm:num_requests_waiting -4
vllm:num_requests_running 2
vllm:kv_cache_usage_perc -0.5
";
    let got = extract(text, &vllm());
    assert_eq!(got.invalid, [MetricField::Queued, MetricField::KvUsage]);
    assert_eq!(got.metrics.running_requests, 2);
    let fine = extract(
        "vllm:num_requests_waiting 0
vllm:kv_cache_usage_perc 0.25
",
        &vllm(),
    );
    assert!(fine.invalid.is_empty() && fine.extracted_any);
}

#[test]
fn malformed_lines_of_mapped_families_are_counted_and_skipped() {
    let text = "vllm:num_requests_running{engine=\"0\" 3\nvllm:num_requests_running 4\nother{ x\n";
    let got = extract(text, &vllm());
    assert_eq!(got.metrics.running_requests, 4);
    assert_eq!(got.malformed_lines, 1);
}

#[test]
fn sglang_mapping() {
    let text = "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name=\"q\"} 6.0\n\
                sglang:num_running_reqs{model_name=\"q\"} 2.0\nsglang:token_usage{model_name=\"q\"} 0.5\n\
                sglang:cache_config_info{num_pages=\"1000\",page_size=\"64\"} 1\n";
    let got = extract(text, &builtin_engine("sglang").unwrap());
    assert_eq!(got.missing, []);
    let m = got.metrics;
    assert_eq!((m.waiting_queue_size, m.running_requests, m.kv_cache_usage), (6, 2, 0.5));
    assert_eq!((m.cache_block_size, m.cache_num_blocks), (Some(64), Some(1000)));
}

#[test]
fn trtllm_and_triton_mappings() {
    let text = "trtllm_num_requests_waiting 1\ntrtllm_num_requests_running 2\n\
                trtllm_kv_cache_utilization 0.3\ntrtllm_kv_cache_tokens_per_block 32\n\
                trtllm_kv_cache_max_blocks 500\n";
    let m = extract(text, &builtin_engine("trtllm-serve").unwrap()).metrics;
    assert_eq!((m.waiting_queue_size, m.running_requests), (1, 2));
    assert_eq!((m.cache_block_size, m.cache_num_blocks), (Some(32), Some(500)));
    let text = r#"nv_trt_llm_request_metrics{model="e",request_type="context"} 9
nv_trt_llm_request_metrics{model="e",request_type="scheduled"} 4
nv_trt_llm_request_metrics{model="e",request_type="waiting"} 3
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction",model="e"} 0.75
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="tokens_per",model="e"} 64
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="e"} 2048
"#;
    let got = extract(text, &builtin_engine("triton-tensorrt-llm").unwrap());
    assert_eq!(got.missing, []);
    let m = got.metrics;
    assert_eq!((m.waiting_queue_size, m.running_requests, m.kv_cache_usage), (3, 4, 0.75));
    assert_eq!((m.cache_block_size, m.cache_num_blocks), (Some(64), Some(2048)));
    assert!(builtin_engine("default").is_none());
    assert!(BUILTIN_ENGINES.iter().all(|e| builtin_engine(e).is_some()));
}

#[test]
fn disabled_specs_are_not_missing() {
    let mut mapping = vllm();
    mapping.lora = None;
    mapping.cache_info = None;
    let got = extract("vllm:num_requests_running 1\n", &mapping);
    assert_eq!(got.missing, [MetricField::Queued, MetricField::KvUsage]);
}

proptest::proptest! {
    #[test]
    fn extract_never_panics_on_arbitrary_text(text in "\\PC{0,300}") {
        let _ = extract(&text, &vllm());
    }

    #[test]
    fn extract_never_panics_on_damaged_fixture(cut in 0usize..53136, at in 0usize..53136, byte in 0u8..128) {
        let mut bytes = VLLM_0_33.as_bytes()[..cut.min(VLLM_0_33.len())].to_vec();
        if let Some(b) = bytes.get_mut(at) {
            *b = byte;
        }
        let text = String::from_utf8_lossy(&bytes);
        let _ = extract(&text, &vllm());
    }
}

#[test]
fn vllm_exposition_round_trips_through_extract() {
    let m = PodMetrics {
        waiting_queue_size: 3,
        running_requests: 7,
        kv_cache_usage: 0.25,
        cache_block_size: Some(16),
        cache_num_blocks: Some(1112),
        ..Default::default()
    };
    let mapping = builtin_engine("vllm").expect("vllm mapping");
    let got = extract(&vllm_exposition(&m), &mapping);
    assert_eq!(got.metrics, m);
    assert_eq!(got.malformed_lines, 0);
}
