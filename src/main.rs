//! The `epp` binary: parses flags, sets up logging, reads the config and runs the app until
//! SIGINT/SIGTERM.

use anyhow::Context;
use clap::Parser;
use epp::app::{App, Settings};
use epp::cli::{BodyModeArg, Cli, Command};
use epp::extproc::service::ExtProcOptions;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    epp::telemetry::tracing::init(cli.serve.log_format, cli.serve.verbosity);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    match cli.command {
        Some(Command::Bench { what }) => epp::bench::run(what),
        Some(Command::Validate { files, output }) => validate(&files, output),
        Some(Command::Sim(args)) => epp::sim::command::sim(&args),
        Some(Command::Demo { seed }) => epp::sim::command::demo(seed),
        None => runtime.block_on(serve(cli.serve)),
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

async fn serve(args: epp::cli::ServeArgs) -> anyhow::Result<()> {
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
        endpoints_file: args.endpoints_file.clone(),
        endpoints_poll_interval: args.endpoints_file_poll_interval,
        refresh_metrics_interval: args.refresh_metrics_interval,
        scrape_timeout: args.metrics_scrape_timeout,
        extproc: ExtProcOptions {
            default_buffered: args.default_request_body_mode == BodyModeArg::Buffered,
            disable_subset_filter: args.disable_endpoint_subset_filter,
            max_body_bytes: args.grpc_max_recv_msg_size,
        },
        health_checking: args.health_checking,
        grpc_max_recv_bytes: args.grpc_max_recv_msg_size.saturating_add(1 << 20),
        objectives: args.objectives.iter().cloned().collect(),
        kubernetes: args.kube_settings().map_err(anyhow::Error::msg)?,
        limits: args.limits.limits(),
    };
    if settings.endpoints_file.is_none() && args.pool_name.is_none() {
        tracing::warn!(
            "neither --endpoints-file nor --pool-name given: every request will get 503 until endpoints are configured"
        );
    }
    let app = App::start(settings).await?;
    let cancel = app.cancel_token();
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("Shutting down");
        cancel.cancel();
    });
    app.wait().await;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
