//! The `epp` binary: parses flags (Go EPP syntax accepted), sets up logging, reads the config
//! and runs the app until SIGINT/SIGTERM, then drains (see `epp::shutdown`) and exits 0.

use anyhow::Context;
use epp::app::{App, Settings};
use epp::cli::{BodyModeArg, Cli, Command, MetricsScheme};
use epp::extproc::service::ExtProcOptions;
use epp::scrape_flags::ScrapeFlags;
use epp::shutdown::DrainPlan;

/// mimalloc (see `epp::memory`).
#[global_allocator]
static ALLOCATOR: epp::memory::Allocator = epp::memory::Allocator;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse_go();
    let serve = &cli.serve;
    let level =
        epp::telemetry::tracing::level_for_flags(serve.zap_log_level.as_deref(), serve.zap_devel, serve.verbosity)
            .map_err(anyhow::Error::msg)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let spans = {
        // The OTLP exporter's gRPC channel runs on this runtime.
        let _runtime = runtime.enter();
        let tracing = cli.command.is_none() && serve.tracing;
        let env = |k: &str| std::env::var(k).ok();
        match epp::telemetry::otel::export_plan(tracing, &env) {
            epp::telemetry::otel::ExportPlan::Otlp => {
                Ok(epp::telemetry::otel::otlp_provider(&env).map_err(anyhow::Error::msg)?)
            }
            epp::telemetry::otel::ExportPlan::Off(why) => Err(why),
        }
    };
    epp::telemetry::tracing::init_with_spans(
        &epp::telemetry::tracing::LogOptions {
            format: serve.log_format,
            level,
            time_encoding: serve.zap_time_encoding,
        },
        spans.as_ref().ok(),
    );
    match &spans {
        Ok(_) => tracing::info!("OpenTelemetry traces exported over OTLP/gRPC"),
        Err(why) if cli.command.is_none() => tracing::info!(reason = %why, "OpenTelemetry traces not exported"),
        Err(_) => {}
    }
    match cli.command {
        Some(Command::Validate { files, output }) => validate(&files, output),
        Some(Command::MovedToTools { .. }) => {
            eprintln!(
                "epp: `sim`, `demo` and `bench` moved to the epp-tools binary: run `epp-tools <subcommand> ...` (from a checkout: `cargo run --release -p epp-tools -- <subcommand> ...`)"
            );
            std::process::exit(2);
        }
        None => {
            let served = runtime.block_on(serve_until_drained(cli.serve));
            if let Ok(provider) = spans {
                // Flushes the spans still batched (over the runtime's gRPC channel).
                let _ = provider.shutdown();
            }
            // Blocking work still running (a tokenizer download, say) must not hold the exit.
            runtime.shutdown_timeout(std::time::Duration::from_millis(500));
            served
        }
    }
}

/// `epp validate`: prints the findings; exit status 1 when any is an error.
fn validate(files: &[std::path::PathBuf], output: epp::validate::OutputFormat) -> anyhow::Result<()> {
    let mut results = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        results.push((path.display().to_string(), epp::validate::validate_text(&text)));
    }
    println!("{}", epp::validate::render(&results, output));
    if epp::validate::has_errors(&results) {
        std::process::exit(1);
    }
    Ok(())
}

async fn serve_until_drained(args: epp::cli::ServeArgs) -> anyhow::Result<()> {
    for warning in args.compat_warnings() {
        tracing::warn!("{warning}");
    }
    let config_text = match (&args.config_file, &args.config_text) {
        (Some(path), _) => {
            Some(std::fs::read_to_string(path).with_context(|| format!("reading --config-file {}", path.display()))?)
        }
        (None, Some(text)) => Some(text.clone()),
        (None, None) => None,
    };
    let settings = Settings {
        grpc_addr: args.addr(args.grpc_port),
        health_addr: args.addr(args.grpc_health_port),
        metrics_addr: args.addr(args.metrics_port),
        secure_serving: args.secure_serving,
        cert_path: args.cert_path.clone(),
        config_text,
        config_reload: args
            .config_file
            .clone()
            .map(|path| epp::reload::ReloadSettings { path, interval: args.config_reload_interval }),
        endpoints_file: args.endpoints_file.clone(),
        endpoints_poll_interval: args.endpoints_file_poll_interval,
        refresh_metrics_interval: args.refresh_metrics_interval,
        scrape_timeout: args.metrics_scrape_timeout,
        extproc: ExtProcOptions {
            default_buffered: args.default_request_body_mode == BodyModeArg::Buffered,
            disable_subset_filter: args.disable_endpoint_subset_filter,
            max_body_bytes: args.grpc_max_recv_msg_size,
            idle_stream_timeout: args.limits.idle_stream_timeout(),
        },
        health_checking: args.health_checking,
        grpc_max_recv_bytes: args.grpc_max_recv_msg_size.saturating_add(1 << 20),
        objectives: args.objectives.iter().cloned().collect(),
        kubernetes: args.kube_settings().map_err(anyhow::Error::msg)?,
        grpc_max_send_bytes: args.grpc_max_send_msg_size,
        tls: epp::tls::TlsOptions {
            cert_path: None,
            reload: args.enable_cert_reload,
            min_version: args.tls_min_version.clone(),
            cipher_suites: args.tls_cipher_suites.clone(),
            ..Default::default()
        },
        scrape_flags: ScrapeFlags {
            queued: args.total_queued_requests_metric.clone(),
            running: args.total_running_requests_metric.clone(),
            kv_usage: args.kv_cache_usage_percentage_metric.clone(),
            lora: args.lora_info_metric.clone(),
            cache_info: args.cache_info_metric.clone(),
            https: args.model_server_metrics_scheme == MetricsScheme::Https,
            path: args.model_server_metrics_path.clone(),
            port: (args.model_server_metrics_port != 0).then_some(args.model_server_metrics_port),
            insecure_skip_verify: args.model_server_metrics_https_insecure_skip_verify,
        },
        refresh_prometheus_metrics_interval: args.refresh_prometheus_metrics_interval,
        grpc_stream_metrics: args.enable_grpc_stream_metrics,
        limits: args.limits.limits(),
        replica_sync: args.replica_sync.settings(),
        metrics_auth: args.metrics_endpoint_auth.unwrap_or(true),
        metrics_tls: args.metrics_tls(),
        metrics_naming: args.metrics_naming,
        enable_pprof: args.enable_pprof,
        enable_debug_state: args.enable_debug_state,
    };
    if settings.endpoints_file.is_none() && args.pool_name.is_none() && args.endpoint_selector.is_none() {
        tracing::warn!(
            "none of --endpoints-file, --pool-name, --endpoint-selector given: every request will get 503 until endpoints are configured"
        );
    }
    let mut signals = ShutdownSignals::install();
    let app = App::start(settings).await?;
    signals.recv().await;
    let plan = DrainPlan { grace: args.drain_grace.min(args.drain_timeout), timeout: args.drain_timeout };
    tracing::info!(grace = ?plan.grace, timeout = ?plan.timeout, "Shutdown signal received");
    // A second signal ends the drain at once.
    tokio::select! {
        report = app.drain(plan) => tracing::info!(cut_streams = report.cut_streams, "Exiting"),
        () = signals.recv() => tracing::warn!("Second shutdown signal; exiting without waiting for open streams"),
    }
    Ok(())
}

/// SIGINT and SIGTERM, caught from before the app starts: readiness can turn SERVING inside
/// `App::start`, and a SIGTERM right after it must drain, not kill the process.
struct ShutdownSignals {
    #[cfg(unix)]
    streams: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl ShutdownSignals {
    /// Installs the handlers (inside the runtime).
    fn install() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let streams = signal(SignalKind::interrupt()).ok().zip(signal(SignalKind::terminate()).ok());
            Self { streams }
        }
        #[cfg(not(unix))]
        {
            Self {}
        }
    }

    /// The next signal.
    async fn recv(&mut self) {
        #[cfg(unix)]
        if let Some((interrupt, terminate)) = &mut self.streams {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}
