//! One epp replica of a wire-mode run, however it runs: an `App` in this process (the
//! default: quick to start, shares this process' allocator and threads) or a real `epp`
//! OS process (`--wire-processes`: what a cluster runs). The rest of wire mode sees only
//! its ext_proc address, its `/metrics` text, and "has it scraped every pod yet".

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;

use super::process::{self, EppProcess, ProcessSpec};
use crate::sim::replicas::SyncTarget;
use epp::app::{App, Settings};

/// Bound on each setup wait (scrapes seen, admin port up).
pub const SETUP_WAIT: Duration = Duration::from_secs(30);
/// How often a process' `/debug/state` is polled while it starts.
const POLL: Duration = Duration::from_millis(20);

/// How wire mode runs epp.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Launch {
    /// `App::start` in this process.
    #[default]
    InProcess,
    /// The `epp` binary at this path, one OS process per replica.
    Processes(PathBuf),
}

/// What a replica is started with.
#[derive(Clone, Debug)]
pub struct ReplicaSpec<'a> {
    /// EndpointPickerConfig text.
    pub config_text: Option<String>,
    /// The static endpoints file naming the simulated pods.
    pub endpoints_file: PathBuf,
    /// Scrape period.
    pub refresh_metrics_interval: Duration,
    /// Replica sync through Redis.
    pub sync: Option<&'a SyncTarget>,
}

/// A running replica.
pub enum Epp {
    /// In this process.
    InProcess(App),
    /// A child process.
    Process(EppProcess),
}

/// Where a replica's metrics are read (cloneable, so it can outlive borrows of the replica).
#[derive(Clone, Debug)]
pub enum MetricsSource {
    /// The in-process app's registry.
    Registry(prometheus::Registry),
    /// A process' `/metrics` on this admin address.
    Http(SocketAddr),
}

impl MetricsSource {
    /// The Prometheus text exposition of the replica's metrics.
    pub async fn text(&self) -> anyhow::Result<String> {
        match self {
            Self::Registry(registry) => Ok(crate::sim::sync_stats::registry_text(registry)),
            Self::Http(addr) => process::get(*addr, "/metrics").await,
        }
    }
}

impl Epp {
    /// Starts a replica and waits until it has scraped every endpoint once.
    pub async fn start(launch: &Launch, spec: ReplicaSpec<'_>) -> anyhow::Result<Self> {
        match launch {
            Launch::InProcess => {
                let mut settings = Settings::loopback();
                settings.endpoints_file = Some(spec.endpoints_file);
                settings.config_text = spec.config_text;
                settings.refresh_metrics_interval = spec.refresh_metrics_interval;
                settings.replica_sync = spec.sync.map(SyncTarget::settings);
                let app = App::start(settings).await.context("starting epp")?;
                match wait_app_scraped(&app).await {
                    Ok(()) => Ok(Self::InProcess(app)),
                    Err(e) => {
                        app.shutdown().await;
                        Err(e)
                    }
                }
            }
            Launch::Processes(binary) => {
                let mut p = EppProcess::spawn(&ProcessSpec {
                    binary: binary.clone(),
                    config_text: spec.config_text,
                    endpoints_file: spec.endpoints_file,
                    refresh_metrics_interval: spec.refresh_metrics_interval,
                    sync: spec.sync.cloned(),
                })?;
                wait_process_scraped(&mut p).await?;
                Ok(Self::Process(p))
            }
        }
    }

    /// The ext_proc address.
    pub fn grpc_addr(&self) -> SocketAddr {
        match self {
            Self::InProcess(app) => app.grpc_addr,
            Self::Process(p) => p.grpc,
        }
    }

    /// Where its metrics are read.
    pub fn metrics(&self) -> MetricsSource {
        match self {
            Self::InProcess(app) => MetricsSource::Registry(app.registry.clone()),
            Self::Process(p) => MetricsSource::Http(p.metrics),
        }
    }

    /// Lets in-process work settle (a process has no such hook; callers poll).
    pub async fn flush(&self) {
        if let Self::InProcess(app) = self {
            app.flush().await;
        }
    }

    /// Stops the replica.
    pub async fn shutdown(self) {
        match self {
            Self::InProcess(app) => app.shutdown().await,
            Self::Process(p) => drop(p),
        }
    }
}

/// Waits until an in-process app has scraped every endpoint once (within [`SETUP_WAIT`]).
async fn wait_app_scraped(app: &App) -> anyhow::Result<()> {
    let mut updates = app.store.subscribe_metrics();
    let scraped = |app: &App| app.store.snapshot().entries.iter().all(|e| e.metrics.load().updated_at.is_some());
    let deadline = tokio::time::Instant::now() + SETUP_WAIT;
    while !scraped(app) {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout(left, updates.changed()).await {
            Ok(Ok(())) => {}
            _ => anyhow::bail!("epp did not scrape every simulated pod within {SETUP_WAIT:?}"),
        }
    }
    Ok(())
}

/// Polls a process' `/debug/state` until it lists endpoints and none is `never_scraped`.
async fn wait_process_scraped(p: &mut EppProcess) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + SETUP_WAIT;
    loop {
        if let Some(exit) = p.exited() {
            return Err(exit);
        }
        let last = match p.get("/debug/state").await.and_then(|s| Ok(serde_json::from_str::<serde_json::Value>(&s)?)) {
            Ok(state) => {
                let endpoints = state["endpoints"].as_array().cloned().unwrap_or_default();
                if !endpoints.is_empty() && endpoints.iter().all(|e| e["metrics_state"] != "never_scraped") {
                    return Ok(());
                }
                format!("{} endpoints, not all scraped", endpoints.len())
            }
            Err(e) => format!("{e:#}"),
        };
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "epp process not ready within {SETUP_WAIT:?} ({last}); its stderr:\n{}",
            p.stderr()
        );
        // Nothing signals readiness across the process boundary; poll at a modest rate.
        tokio::time::sleep(POLL).await;
    }
}
