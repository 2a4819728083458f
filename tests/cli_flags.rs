//! Go-style command lines parse as the Go EPPs parse them: both value forms, Go booleans,
//! quantities, Go durations, camelCase spellings, quoted values, a repeated flag's last value,
//! and unknown flags still fail with a suggestion.

use std::time::Duration;

use epp::cli::{Cli, MetricsScheme};

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_go(std::iter::once("epp").chain(args.iter().copied()))
}

#[test]
fn go_value_forms_and_types() {
    let cli = parse(&[
        "--grpc-max-recv-msg-size=10MiB",
        "--grpc-max-send-msg-size",
        "4Mi",
        "--drain-timeout=1m30s",
        "--refresh-metrics-interval",
        "500ms",
        "--refresh-prometheus-metrics-interval=2s",
        "--model-server-metrics-https-insecure-skip-verify=false",
        "--model-server-metrics-scheme",
        "https",
        "--model-server-metrics-port=9400",
        "--secure-serving=False",
        "--health-checking",
        "--enable-grpc-stream-metrics=1",
        "--lora-info-metric",
        "\"\"",
        "--kv-cache-usage-percentage-metric=\"sglang:token_usage\"",
        "--total-queued-requests-metric",
        "nv_trt_llm_request_metrics{request_type=waiting}",
        "-v=4",
    ])
    .unwrap();
    let s = cli.serve;
    assert_eq!((s.grpc_max_recv_msg_size, s.grpc_max_send_msg_size), (10 << 20, Some(4 << 20)));
    assert_eq!(s.drain_timeout, Duration::from_secs(90));
    assert_eq!(s.refresh_metrics_interval, Duration::from_millis(500));
    assert_eq!(s.refresh_prometheus_metrics_interval, Duration::from_secs(2));
    assert!(!s.model_server_metrics_https_insecure_skip_verify);
    assert_eq!(s.model_server_metrics_scheme, MetricsScheme::Https);
    assert_eq!(s.model_server_metrics_port, 9400);
    assert!(!s.secure_serving && s.health_checking && s.enable_grpc_stream_metrics);
    assert_eq!(s.lora_info_metric.as_deref(), Some(""));
    assert_eq!(s.kv_cache_usage_percentage_metric.as_deref(), Some("sglang:token_usage"));
    assert_eq!(s.total_queued_requests_metric.as_deref(), Some("nv_trt_llm_request_metrics{request_type=waiting}"));
    assert_eq!(s.verbosity, 4);
}

#[test]
fn go_defaults() {
    let s = parse(&[]).unwrap().serve;
    assert_eq!((s.grpc_port, s.grpc_health_port, s.metrics_port), (9002, 9003, 9090));
    assert!(s.secure_serving && !s.enable_cert_reload && !s.health_checking);
    assert!(s.model_server_metrics_https_insecure_skip_verify);
    assert_eq!(s.model_server_metrics_scheme, MetricsScheme::Http);
    assert_eq!(s.model_server_metrics_port, 0);
    assert_eq!(s.drain_timeout, Duration::from_secs(30));
    assert_eq!(s.refresh_metrics_interval, Duration::from_millis(50));
    assert_eq!(s.refresh_prometheus_metrics_interval, Duration::from_secs(5));
    assert_eq!(s.pool_group, "inference.networking.k8s.io");
    assert_eq!(s.verbosity, 2);
    assert!(s.compat_warnings().is_empty());
}

#[test]
fn camel_case_repeats_and_empty_arguments() {
    let s = parse(&["--poolName", "p", "-grpcPort", "1", "--grpc-port=2", "", "--objective", "a=1", "--objective=b=2"])
        .unwrap()
        .serve;
    assert_eq!(s.pool_name.as_deref(), Some("p"));
    assert_eq!(s.grpc_port, 2, "the last value wins, as in Go");
    assert_eq!(s.objectives, [("a".to_string(), 1), ("b".to_string(), 2)]);
}

#[test]
fn unimplemented_behaviour_is_warned_only_when_asked_for() {
    let s = parse(&["--tracing=false", "--metrics-endpoint-auth=false", "--enable-pprof=false"]).unwrap().serve;
    assert!(s.compat_warnings().is_empty());
    assert!(!s.tracing);
    assert!(parse(&[]).unwrap().serve.tracing, "--tracing defaults to true, as GIE");
    let s =
        parse(&["--tracing", "--ha-enable-leader-election", "--metrics-endpoint-auth=true", "--metrics-cert-dir=/c"])
            .unwrap()
            .serve;
    let warnings = s.compat_warnings();
    assert!(s.tracing, "--tracing is implemented: no warning");
    assert!(warnings.is_empty(), "election, metrics auth and TLS are implemented: {warnings:?}");
    let pprof = parse(&["--enable-pprof"]).unwrap().serve;
    assert!(pprof.enable_pprof && pprof.compat_warnings().is_empty(), "--enable-pprof is implemented: no warning");
    assert!(parse(&[]).unwrap().serve.enable_pprof, "--enable-pprof defaults to true, as GIE");
    assert!(!parse(&["--enable-pprof=false"]).unwrap().serve.enable_pprof);
}

#[test]
fn bad_command_lines_fail_clearly() {
    let unknown = parse(&["--pool-nam", "p"]).unwrap_err();
    assert_eq!(unknown.kind(), clap::error::ErrorKind::UnknownArgument);
    assert!(unknown.to_string().contains("--pool-name"), "{unknown}");
    assert!(parse(&["--grpc-max-recv-msg-size=lots"]).is_err());
    assert!(parse(&["--drain-timeout=soon"]).is_err());
    assert!(parse(&["--secure-serving=yes"]).is_err());
    assert!(parse(&["--pool-name=p", "--endpoint-selector=app=x"]).is_err());
    assert!(parse(&["--endpoint-target-ports=8000"]).is_err(), "target ports need a selector");
}

#[test]
fn endpoint_selector_becomes_a_standalone_pool() {
    let s = parse(&["--endpoint-selector", "app=vllm, tier=serving", "--endpoint-target-ports", "8000,8001"])
        .unwrap()
        .serve;
    let spec = s.standalone_pool().unwrap().unwrap();
    assert_eq!(spec.label_selector(), "app=vllm,tier=serving");
    assert_eq!(spec.target_ports, [8000, 8001]);
    for bad in [&["--endpoint-selector", "app"][..], &["--endpoint-selector", "app!=x", "--endpoint-target-ports", "1"]]
    {
        assert!(parse(bad).unwrap().serve.standalone_pool().is_err(), "{bad:?}");
    }
    let no_ports = parse(&["--endpoint-selector", "app=x"]).unwrap().serve;
    assert!(no_ports.standalone_pool().unwrap_err().contains("--endpoint-target-ports"));
}

#[test]
fn replica_sync_is_off_by_default_and_takes_its_flags() {
    let off = parse(&[]).unwrap().serve.replica_sync;
    assert!(off.settings().is_none() || std::env::var_os("EPP_REPLICA_SYNC_URL").is_some());
    let on = parse(&[
        "--replica-sync-url=valkey://cache:6379/2",
        "--replica-sync-key",
        "epp:pool-a",
        "--replica-sync-stream-len=5000",
        "--replica-sync-heartbeat=250ms",
        "--replica-sync-batch-window=2ms",
    ])
    .unwrap()
    .serve
    .replica_sync
    .settings()
    .expect("on");
    assert_eq!((on.url.as_str(), on.key.as_str(), on.stream_len), ("valkey://cache:6379/2", "epp:pool-a", 5000));
    assert_eq!((on.heartbeat, on.batch_window), (Duration::from_millis(250), Duration::from_millis(2)));
    assert_eq!(off.replica_sync_key, "epp:replica-sync");
    assert_eq!(off.replica_sync_batch_window, Duration::from_millis(5));
}
