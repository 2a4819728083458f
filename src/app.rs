//! Wiring: loads the config, builds the scheduler (and, with the `flowControl` gate, the
//! Flow Control controller and its dispatch loop), starts discovery (`--endpoints-file` or a
//! `file-discovery` plugin), scrapers, `/v1/models` pollers, the ext_proc
//! server (TLS or h2c), the plaintext gRPC health server and the admin server, and owns
//! shutdown through one cancellation token. `App::start` binds every listener first and
//! reports the bound addresses, so tests can use port 0.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::{self, LoadedConfig};
use crate::endpoints::discovery::{load_endpoints_file_bytes, watch_endpoints_file};
use crate::endpoints::scraper::{ScrapeConfig, ScrapeMetrics, run_scrapers};
use crate::endpoints::served_models::{ModelsConfig, run_models_pollers};
use crate::endpoints::store::EndpointStore;
use crate::endpoints::vllm_metrics::{BUILTIN_ENGINES, builtin_engine};
use crate::extproc::service::{ExtProcOptions, ExtProcService, Shared};
use crate::extproc::streams::StreamTracker;
use crate::flowcontrol::FlowController;
use crate::flowcontrol::metrics::FlowControlMetrics;
use crate::framework::build::{BuildContext, PluginMetrics};
use crate::framework::plugin::ServiceContext;
use crate::health::HealthState;
use crate::plugins::registry::builtin;
use crate::proto::ext_proc::external_processor_server::ExternalProcessorServer;
use crate::reload::{ConfigReloader, ReloadMetrics, ServiceSet, services_of};
use crate::scheduling::handle::SchedulerHandle;
use crate::scheduling::metrics::SchedulerMetrics;
use crate::scrape_flags::ScrapeFlags;
use crate::telemetry::metrics::RequestMetrics;

pub use crate::health::EXT_PROC_SERVICE;

/// Everything the app needs to start.
#[derive(Clone, Debug)]
pub struct Settings {
    /// ext_proc listen address.
    pub grpc_addr: SocketAddr,
    /// Health listen address.
    pub health_addr: SocketAddr,
    /// Admin (`/metrics`) listen address.
    pub metrics_addr: SocketAddr,
    /// TLS on the ext_proc port.
    pub secure_serving: bool,
    /// Directory with `tls.crt` / `tls.key`.
    pub cert_path: Option<PathBuf>,
    /// Config text (already read from `--config-file` or `--config-text`); `None` = default.
    pub config_text: Option<String>,
    /// Hot reload of `--config-file` (the file `config_text` was read from).
    pub config_reload: Option<crate::reload::ReloadSettings>,
    /// Static endpoints file.
    pub endpoints_file: Option<PathBuf>,
    /// How often the endpoints file is checked for changes.
    pub endpoints_poll_interval: Duration,
    /// Scrape period.
    pub refresh_metrics_interval: Duration,
    /// Scrape timeout.
    pub scrape_timeout: Duration,
    /// ext_proc options.
    pub extproc: ExtProcOptions,
    /// Also serve gRPC health on the ext_proc port.
    pub health_checking: bool,
    /// Largest gRPC message accepted.
    pub grpc_max_recv_bytes: usize,
    /// Objective name -> priority (`--objective`).
    pub objectives: HashMap<String, i32>,
    /// Kubernetes access and the InferencePool to follow (`--pool-name`).
    pub kubernetes: Option<KubeSettings>,
    /// Largest gRPC message sent; `None` = unlimited.
    pub grpc_max_send_bytes: Option<usize>,
    /// TLS options of the ext_proc port (its `cert_path` is taken from [`Settings::cert_path`]).
    pub tls: crate::tls::TlsOptions,
    /// The Go EPPs' scrape flags (metric names, scheme, path, port).
    pub scrape_flags: ScrapeFlags,
    /// `--refresh-prometheus-metrics-interval` (pool-level gauges).
    pub refresh_prometheus_metrics_interval: Duration,
    /// `--enable-grpc-stream-metrics`.
    pub grpc_stream_metrics: bool,
    /// Connection hygiene and metrics staleness (`crate::net::limits`).
    pub limits: crate::net::limits::Limits,
    /// Replica state sharing through Redis (`--replica-sync-url`); `None` = off.
    pub replica_sync: Option<crate::replica::SyncSettings>,
    /// `--metrics-endpoint-auth`: `/metrics` needs a bearer token the API server authenticates
    /// and authorises (only with Kubernetes access).
    pub metrics_auth: bool,
    /// TLS on the metrics port (`--metrics-cert-dir`, `--metrics-client-ca-file`).
    pub metrics_tls: Option<MetricsTls>,
    /// `--metrics-naming`: which names of twin metric families `/metrics` exports.
    pub metrics_naming: crate::telemetry::naming::MetricsNaming,
}

/// TLS settings of the metrics port.
#[derive(Clone, Debug, Default)]
pub struct MetricsTls {
    /// Directory with `tls.crt` / `tls.key`; `None` = self-signed.
    pub cert_dir: Option<std::path::PathBuf>,
    /// PEM bundle of CAs that client certificates must chain to; `None` = no client check.
    pub client_ca: Option<std::path::PathBuf>,
}

/// Kubernetes settings of the app.
#[derive(Clone, Debug)]
pub struct KubeSettings {
    /// API server and credentials (loaded when the app starts).
    pub cluster: crate::k8s::client::KubeSource,
    /// Namespace of the pool and of namespaced notification sources.
    pub namespace: String,
    /// The pool whose pods become endpoints; `None` = Kubernetes only for plugins.
    pub pool: Option<crate::k8s::pool::PoolRef>,
    /// Standalone mode (`--endpoint-selector`): pods of `namespace` matching this selector,
    /// one endpoint per target port.
    pub standalone: Option<crate::k8s::pool::PoolSpec>,
    /// Watch retry settings.
    pub watch: crate::k8s::watch::WatchOptions,
    /// Leader election (`--ha-enable-leader-election`): the Lease and this replica's identity.
    pub leader_election: Option<LeaderElectionSettings>,
}

/// Leader election settings.
#[derive(Clone, Debug)]
pub struct LeaderElectionSettings {
    /// Lease name ([`crate::k8s::lease::lease_name`]).
    pub lease: String,
    /// Holder identity (the pod name).
    pub holder: String,
    /// Durations.
    pub timing: crate::k8s::lease::ElectionTiming,
}

impl Settings {
    /// Loopback settings on ephemeral ports (tests, demos).
    pub fn loopback() -> Self {
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        Self {
            grpc_addr: any,
            health_addr: any,
            metrics_addr: any,
            secure_serving: false,
            cert_path: None,
            config_text: None,
            config_reload: None,
            endpoints_file: None,
            endpoints_poll_interval: Duration::from_secs(1),
            refresh_metrics_interval: Duration::from_millis(50),
            scrape_timeout: Duration::from_secs(1),
            extproc: ExtProcOptions::default(),
            health_checking: false,
            grpc_max_recv_bytes: 64 << 20,
            objectives: HashMap::new(),
            kubernetes: None,
            grpc_max_send_bytes: None,
            tls: crate::tls::TlsOptions::default(),
            scrape_flags: ScrapeFlags { insecure_skip_verify: true, ..ScrapeFlags::default() },
            refresh_prometheus_metrics_interval: Duration::from_secs(5),
            grpc_stream_metrics: false,
            limits: crate::net::limits::Limits::default(),
            replica_sync: None,
            metrics_auth: false,
            metrics_tls: None,
            metrics_naming: Default::default(),
        }
    }
}

/// A running app.
#[derive(Debug)]
pub struct App {
    /// Bound ext_proc address.
    pub grpc_addr: SocketAddr,
    /// Bound health address.
    pub health_addr: SocketAddr,
    /// Bound admin address.
    pub metrics_addr: SocketAddr,
    /// The endpoint store.
    pub store: EndpointStore,
    /// The metrics registry.
    pub registry: prometheus::Registry,
    /// The Flow Control controller (gate `flowControl`).
    pub flow_control: Option<Arc<FlowController>>,
    /// Readiness state of the health servers.
    pub health: HealthState,
    /// Open ext_proc streams.
    pub streams: Arc<StreamTracker>,
    /// Replica state sharing, when on.
    pub replica_sync: Option<Arc<crate::replica::ReplicaSync>>,
    /// State every ext_proc stream shares (the scheduler's swap point among it).
    shared: Arc<Shared>,
    /// Stops accepting ext_proc connections (graceful: open streams finish).
    serving: CancellationToken,
    ext_proc: Option<tokio::task::JoinHandle<()>>,
    drain_metrics: crate::shutdown::DrainMetrics,
    /// Stops campaigning and releases the Lease (leader election only).
    election_stop: CancellationToken,
    cancel: CancellationToken,
    tasks: JoinSet<()>,
    services: Arc<ServiceSet>,
}

/// Loads and validates a config (or the default) against the built-in registry.
pub fn load_config(
    text: Option<&str>,
    cx: &BuildContext,
    metrics: SchedulerMetrics,
) -> Result<LoadedConfig, config::ConfigErrors> {
    let text = text.unwrap_or(config::defaults::DEFAULT_CONFIG);
    config::load(text, &builtin(), cx, metrics)
}

impl App {
    /// Starts everything; returns once every listener is bound.
    pub async fn start(settings: Settings) -> anyhow::Result<Self> {
        let registry = prometheus::Registry::new();
        let store = EndpointStore::with_staleness_threshold(settings.limits.metrics_staleness_threshold);
        if settings.refresh_metrics_interval >= settings.limits.metrics_staleness_threshold {
            warn!(staleness = ?settings.limits.metrics_staleness_threshold, refresh = ?settings.refresh_metrics_interval,
                "--refresh-metrics-interval is not below --metrics-staleness-threshold: endpoint load will often be unknown");
        }
        let mut loaded_bytes = Vec::new();
        if let Some(path) = &settings.endpoints_file {
            let (endpoints, bytes) = load_endpoints_file_bytes(path)?;
            info!(path = %path.display(), count = endpoints.len(), "Endpoints loaded");
            store.replace(endpoints);
            loaded_bytes = bytes;
        }
        let replica_sync = match &settings.replica_sync {
            Some(s) => Some(Arc::new(crate::replica::ReplicaSync::new(s.clone(), &registry)?)),
            None => None,
        };
        let cx = BuildContext {
            endpoints: store.clone(),
            metrics: PluginMetrics::register(&registry)?,
            replica: replica_sync.as_ref().map(|r| r.handle()).unwrap_or_default(),
            ..Default::default()
        };
        let scheduler_metrics = SchedulerMetrics::register(&registry)?;
        let mut loaded = load_config(settings.config_text.as_deref(), &cx, scheduler_metrics.clone())?;
        for note in &loaded.injected {
            info!(default = %note, "Config default injected");
        }
        let objectives = crate::objectives::ObjectiveStore::with_metrics(settings.objectives.clone(), &registry)?;
        loaded.scheduler = loaded.scheduler.with_objectives(objectives.clone());
        let file_watch = file_discovery(&settings, &loaded, &store)?;
        let mut warnings = Vec::new();
        let scrape = scrape_config(&settings, &loaded, &mut warnings)?;
        let services = services_of(&loaded);
        let reusable = std::mem::take(&mut loaded.reusable);
        let flow_control = match loaded.flow_control.take() {
            Some(fc) => {
                info!(ceiling = fc.ceiling, "Flow Control enabled");
                let pool = settings.kubernetes.as_ref().and_then(|k| k.pool.as_ref()).map_or("", |p| p.name.as_str());
                let metrics = FlowControlMetrics::register(&registry, pool)?;
                let detector = loaded.scheduler.saturation().cloned();
                Some(Arc::new(FlowController::new(fc, store.clone(), detector, metrics)))
            }
            None => None,
        };
        let shared = Arc::new(Shared {
            scheduler: SchedulerHandle::new(loaded.scheduler),
            store: store.clone(),
            metrics: Arc::new(RequestMetrics::register(&registry)?),
            options: settings.extproc.clone(),
            flow_control: flow_control.clone(),
        });
        let scrape_metrics = ScrapeMetrics::register(&registry)?;
        let pool_name = settings.kubernetes.as_ref().and_then(|k| k.pool.as_ref()).map_or("", |p| p.name.as_str());
        let pool_gauges = crate::telemetry::pool_gauges::PoolGauges::register(&registry, pool_name)?;
        crate::telemetry::process::register(&registry)?;
        let kube = match &settings.kubernetes {
            Some(k) => Some(crate::k8s::KubeHandle {
                client: crate::k8s::client::connect(&k.cluster).await.context("Kubernetes client")?,
                namespace: k.namespace.clone(),
                metrics: crate::k8s::metrics::K8sMetrics::register(&registry)?,
                options: k.watch,
            }),
            None => None,
        };

        let grpc = TcpListener::bind(settings.grpc_addr)
            .await
            .with_context(|| format!("bind ext_proc {}", settings.grpc_addr))?;
        let health = TcpListener::bind(settings.health_addr)
            .await
            .with_context(|| format!("bind health {}", settings.health_addr))?;
        let admin = TcpListener::bind(settings.metrics_addr)
            .await
            .with_context(|| format!("bind metrics {}", settings.metrics_addr))?;
        let (grpc_addr, health_addr, metrics_addr) = (grpc.local_addr()?, health.local_addr()?, admin.local_addr()?);

        let cancel = CancellationToken::new();
        let mut tasks = JoinSet::new();
        // Nothing to wait for without a Kubernetes source: files are loaded by now.
        let health_state = HealthState::new();
        if settings.kubernetes.as_ref().is_none_or(|k| k.pool.is_none() && k.standalone.is_none()) {
            health_state.mark_synced();
        }
        // ext_proc stops accepting when the drain grace ends (`serving`); the others at `cancel`.
        let serving = cancel.child_token();
        let limits = settings.limits;
        let conn_metrics = crate::net::metrics::ConnMetrics::register(&registry)?;
        let incoming = |listener, l, name: &str, stop: &CancellationToken| {
            crate::net::incoming::guarded(listener, l, limits.tcp_keepalive, conn_metrics.listener(name), stop.clone())
        };
        let (grpc, health, admin) = (
            incoming(grpc, limits.ext_proc, "ext_proc", &serving),
            incoming(health, limits.admin, "health", &cancel),
            incoming(admin, limits.admin, "admin", &cancel),
        );
        // Keep-alive PINGs find dead peers; the stream cap bounds one connection's state.
        let grpc_builder = move || {
            tonic::transport::Server::builder()
                .http2_keepalive_interval(limits.http2_keepalive_interval)
                .http2_keepalive_timeout(Some(limits.http2_keepalive_timeout))
                .max_concurrent_streams(limits.max_concurrent_streams)
                .layer(crate::net::layer::TrackStreams)
        };
        let health_service = health_state.service();
        let c = cancel.clone();
        tasks.spawn(async move {
            let served =
                grpc_builder().add_service(health_service).serve_with_incoming_shutdown(health, c.cancelled()).await;
            if let Err(error) = served {
                warn!(%error, "health server stopped");
            }
        });

        let streams = StreamTracker::new(&registry, settings.grpc_stream_metrics)?;
        let mut ext_proc =
            ExternalProcessorServer::new(ExtProcService::new(shared.clone()).with_stream_tracker(streams.clone()))
                .max_decoding_message_size(settings.grpc_max_recv_bytes);
        if let Some(limit) = settings.grpc_max_send_bytes {
            ext_proc = ext_proc.max_encoding_message_size(limit);
        }
        // One stream per HTTP request, many per connection: gateways end streams early (reset)
        // whenever a request finishes or is cancelled, which must not count as abuse.
        let mut builder = grpc_builder().http2_max_local_error_reset_streams(None);
        let mut router = builder.add_service(ext_proc);
        if settings.health_checking {
            router = router.add_service(health_state.service());
        }
        let tls = match settings.secure_serving {
            true => {
                let options = crate::tls::TlsOptions { cert_path: settings.cert_path.clone(), ..settings.tls.clone() };
                let (tls, notes) = crate::tls::server_tls(&options)?;
                warnings.extend(notes);
                if let Some(reloading) = tls.reloading.clone() {
                    tasks.spawn(reloading.watch(options.reload_interval, cancel.clone()));
                }
                Some((tls.config, options.handshake_timeout))
            }
            false => None,
        };
        let stop = serving.clone();
        let ext_proc_task = tokio::spawn(async move {
            let served = match tls {
                Some((config, handshake)) => {
                    let incoming = crate::tls::tls_incoming(grpc, config, handshake, stop.clone());
                    router.serve_with_incoming_shutdown(incoming, stop.cancelled()).await
                }
                // The guarded accept loop turns Nagle off: with delayed ACKs it would add
                // ~20-40 ms to every small reply.
                None => router.serve_with_incoming_shutdown(grpc, stop.cancelled()).await,
            };
            if let Err(error) = served {
                warn!(%error, "ext_proc server stopped");
            }
        });
        for warning in &warnings {
            warn!("{warning}");
        }

        let ready_store = store.clone();
        let ready_registry = registry.clone();
        let kv_status = cx.metrics.kv.status.clone();
        let ready: crate::telemetry::admin::ReadinessCheck = Arc::new(move || {
            if ready_store.snapshot().is_empty() {
                return Err("no endpoints known".into());
            }
            let mut details = kv_status.drift_details();
            details.extend(crate::kvcache::metrics::readiness_details(&ready_registry));
            Ok(details)
        });
        let guard = metrics_guard(settings.metrics_auth, kube.as_ref());
        let admin_tls = match &settings.metrics_tls {
            Some(t) => Some(
                crate::tls::metrics_server_config(t.cert_dir.as_deref(), t.client_ca.as_deref())
                    .context("metrics port TLS")?,
            ),
            None => None,
        };
        let admin_options =
            crate::telemetry::admin::AdminOptions { naming: settings.metrics_naming, guard, tls: admin_tls };
        tasks.spawn(crate::telemetry::admin::serve(admin, registry.clone(), ready, admin_options, cancel.clone()));
        tasks.spawn(pool_gauges.run(store.clone(), settings.refresh_prometheus_metrics_interval, cancel.clone()));
        if let Some(path) = settings.endpoints_file.clone() {
            tasks.spawn(watch_endpoints_file(
                path,
                loaded_bytes,
                store.clone(),
                settings.endpoints_poll_interval,
                cancel.clone(),
            ));
        }
        if let Some((path, bytes)) = file_watch {
            tasks.spawn(watch_endpoints_file(
                path,
                bytes,
                store.clone(),
                settings.endpoints_poll_interval,
                cancel.clone(),
            ));
        }
        if let Some(models) = &loaded.data_layer.models {
            let config = ModelsConfig {
                path: models.path.clone(),
                interval: models.interval.unwrap_or(settings.refresh_metrics_interval),
                timeout: settings.scrape_timeout,
            };
            info!(path = %config.path, interval = ?config.interval, "Polling endpoints' model lists");
            let errors = scrape_metrics.poll_errors.clone();
            tasks.spawn(run_models_pollers(store.clone(), Arc::new(config), errors, cancel.clone()));
        }
        // Files are loaded by now; a Kubernetes source signals its first sync.
        let mut endpoints_synced = tokio::sync::watch::channel(true).1;
        if let (Some(kube), Some(k)) = (&kube, &settings.kubernetes) {
            endpoints_synced = start_pool_discovery(kube, k, &store, &health_state, &cancel, &mut tasks);
            if let Some(pool) = &k.pool {
                // Objects reference an InferencePool; standalone mode has none to match.
                let pool = crate::k8s::objectives::PoolIdentity { name: pool.name.clone(), group: pool.group.clone() };
                tasks.spawn(crate::k8s::objectives::run(kube.clone(), pool, objectives.clone(), cancel.clone()));
            }
        }
        let election_stop = cancel.child_token();
        if let (Some(kube), Some(election)) =
            (&kube, settings.kubernetes.as_ref().and_then(|k| k.leader_election.as_ref()))
        {
            start_leader_election(kube, election, &health_state, &election_stop, &mut tasks);
        }
        if let Some(controller) = flow_control.clone() {
            tasks.spawn(controller.run(cancel.clone()));
        }
        tasks.spawn(run_scrapers(store.clone(), Arc::new(scrape), scrape_metrics, cancel.clone()));
        tasks.spawn(crate::memory::run_trimmer(crate::memory::TRIM_PERIOD, cancel.clone()));
        if let Some(sync) = &replica_sync {
            sync.spawn(&mut tasks, &cancel, endpoints_synced);
        }
        info!(%grpc_addr, %health_addr, %metrics_addr, tls = settings.secure_serving, "epp serving");
        let service_set =
            Arc::new(ServiceSet::new(ServiceContext { endpoints: store.clone(), cancel: cancel.clone(), kube }));
        if let Err(error) = service_set.start_new(&services).await {
            cancel.cancel();
            anyhow::bail!("starting a plugin's background service failed: {error}");
        }
        let reload_metrics = ReloadMetrics::register(&registry)?;
        if let (Some(reload), Some(text)) = (settings.config_reload.clone(), settings.config_text.clone())
            && !reload.interval.is_zero()
        {
            info!(path = %reload.path.display(), interval = ?reload.interval, "Watching the config file for changes");
            let reloader = ConfigReloader {
                settings: reload,
                build: cx,
                scheduler_metrics,
                objectives: objectives.clone(),
                flow_control: flow_control.is_some(),
                shared: shared.clone(),
                services: service_set.clone(),
                metrics: reload_metrics,
            };
            tasks.spawn(reloader.run(text, reusable, cancel.clone()));
        }
        let drain_metrics = crate::shutdown::DrainMetrics::register(&registry)?;
        Ok(Self {
            grpc_addr,
            health_addr,
            metrics_addr,
            store,
            registry,
            flow_control,
            health: health_state,
            streams,
            replica_sync,
            shared,
            serving,
            ext_proc: Some(ext_proc_task),
            drain_metrics,
            election_stop,
            cancel,
            tasks,
            services: service_set,
        })
    }

    /// The scheduler's swap point (config hot reload): `replace` serves streams that start
    /// afterwards; streams in flight finish on the scheduler they started with.
    pub fn scheduler(&self) -> &SchedulerHandle {
        &self.shared.scheduler
    }

    /// Barrier: resolves once every plugin background service (e.g. KV-event subscribers) has
    /// applied everything it received so far.
    pub async fn flush(&self) {
        for service in self.services.current() {
            service.flush().await;
        }
    }

    /// A token that stops the app when cancelled.
    pub fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Stops every task and waits for them.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        if let Some(task) = self.ext_proc.take() {
            let _ = task.await;
        }
        while self.tasks.join_next().await.is_some() {}
    }

    /// Waits until every task has ended (after cancellation).
    pub async fn wait(mut self) {
        if let Some(task) = self.ext_proc.take() {
            let _ = task.await;
        }
        while self.tasks.join_next().await.is_some() {}
    }

    /// Graceful shutdown (SIGTERM), bounded by `plan.timeout` whatever the peers do: see
    /// [`crate::shutdown`].
    pub async fn drain(mut self, plan: crate::shutdown::DrainPlan) -> crate::shutdown::DrainReport {
        // A leader releases its Lease at once so a standby takes over within a retry period.
        self.election_stop.cancel();
        let ext_proc = self.ext_proc.take();
        let report =
            crate::shutdown::drain(plan, &self.health, &self.streams, &self.drain_metrics, &self.serving, ext_proc)
                .await;
        self.cancel.cancel();
        // Background tasks end promptly once cancelled; never wait past a short bound.
        let tasks = async { while self.tasks.join_next().await.is_some() {} };
        let _ = tokio::time::timeout(crate::shutdown::TASKS_BOUND, tasks).await;
        report
    }
}

/// Endpoints from a `file-discovery` plugin: loaded into the store now; returns the file to
/// watch when `watchFile` is set. The same file as `--endpoints-file` is already loaded (and
/// watched) by the flag; a different one is an error.
fn file_discovery(
    settings: &Settings,
    loaded: &LoadedConfig,
    store: &EndpointStore,
) -> anyhow::Result<Option<(PathBuf, Vec<u8>)>> {
    let Some(fd) = &loaded.data_layer.file_discovery else { return Ok(None) };
    if let Some(flag) = &settings.endpoints_file {
        let same = match (std::fs::canonicalize(flag), std::fs::canonicalize(&fd.path)) {
            (Ok(a), Ok(b)) => a == b,
            _ => flag == &fd.path,
        };
        if same {
            info!(path = %fd.path.display(), "file-discovery names the --endpoints-file file; using the flag's watcher");
            return Ok(None);
        }
        anyhow::bail!(
            "--endpoints-file {} and the file-discovery plugin's path {} name different files; use one of them",
            flag.display(),
            fd.path.display()
        );
    }
    let (endpoints, bytes) = load_endpoints_file_bytes(&fd.path).context("file-discovery")?;
    info!(path = %fd.path.display(), count = endpoints.len(), watch = fd.watch_file, "Endpoints loaded (file-discovery)");
    store.replace(endpoints);
    Ok(fd.watch_file.then(|| (fd.path.clone(), bytes)))
}

/// The `/metrics` guard of `--metrics-endpoint-auth`: Kubernetes token and access reviews
/// (see [`crate::k8s::review`]). Without Kubernetes access there is nobody to ask: /metrics
/// is served open, with a warning.
fn metrics_guard(
    enabled: bool,
    kube: Option<&crate::k8s::KubeHandle>,
) -> Option<crate::telemetry::admin::MetricsGuard> {
    use crate::k8s::review::{MetricsReviewer, Verdict};
    use hyper::StatusCode;
    if !enabled {
        return None;
    }
    let Some(kube) = kube else {
        tracing::warn!(
            "--metrics-endpoint-auth is on but there is no Kubernetes access (no kubeconfig, not in a cluster): \
             /metrics is served without authentication"
        );
        return None;
    };
    info!("/metrics requires a bearer token allowed to get /metrics (TokenReview + SubjectAccessReview)");
    let reviewer = Arc::new(MetricsReviewer::new(kube.client.clone()));
    Some(Arc::new(move |token: Option<String>| {
        let reviewer = reviewer.clone();
        Box::pin(async move {
            let Some(token) = token else { return StatusCode::UNAUTHORIZED };
            match reviewer.review(&token).await {
                Ok(Verdict::Allowed) => StatusCode::OK,
                Ok(Verdict::Unauthenticated) => StatusCode::UNAUTHORIZED,
                Ok(Verdict::Forbidden) => StatusCode::FORBIDDEN,
                Err(error) => {
                    tracing::warn!(%error, "/metrics: token review failed");
                    StatusCode::INTERNAL_SERVER_ERROR
                }
            }
        })
    }))
}

/// Campaigns for the Lease; readiness follows leadership (see [`crate::health`]).
fn start_leader_election(
    kube: &crate::k8s::KubeHandle,
    settings: &LeaderElectionSettings,
    health: &HealthState,
    stop: &CancellationToken,
    tasks: &mut JoinSet<()>,
) {
    health.enable_leader_election();
    info!(lease = %settings.lease, holder = %settings.holder, namespace = %kube.namespace, "Leader election on");
    let election = crate::k8s::lease::LeaderElection {
        api: kube::Api::namespaced(kube.client.clone(), &kube.namespace),
        name: settings.lease.clone(),
        holder: settings.holder.clone(),
        timing: settings.timing,
        metrics: kube.metrics.clone(),
    };
    let (leading, mut leading_rx) = tokio::sync::watch::channel(false);
    tasks.spawn(election.run(leading, stop.clone()));
    let health = health.clone();
    tasks.spawn(async move {
        while leading_rx.changed().await.is_ok() {
            health.set_leader(*leading_rx.borrow_and_update());
        }
    });
}

/// Starts InferencePool or standalone (`--endpoint-selector`) discovery; readiness follows
/// its first sync. Returns that sync's signal (true at once when there is nothing to discover).
fn start_pool_discovery(
    kube: &crate::k8s::KubeHandle,
    k: &KubeSettings,
    store: &EndpointStore,
    health: &HealthState,
    cancel: &CancellationToken,
    tasks: &mut JoinSet<()>,
) -> tokio::sync::watch::Receiver<bool> {
    let (synced, mut synced_rx) = tokio::sync::watch::channel(false);
    let endpoints_synced = synced_rx.clone();
    let pool = match (&k.pool, &k.standalone) {
        (Some(pool), _) => pool.clone(),
        (None, Some(spec)) => crate::k8s::pool::PoolRef {
            name: format!("standalone({})", spec.label_selector()),
            namespace: k.namespace.clone(),
            group: crate::k8s::pool::GROUP_V1.into(),
        },
        (None, None) => return tokio::sync::watch::channel(true).1,
    };
    let discovery = crate::k8s::discovery::PoolDiscovery {
        client: kube.client.clone(),
        pool,
        store: store.clone(),
        options: kube.options,
        metrics: kube.metrics.clone(),
        progress: tokio::sync::watch::channel(0).0,
        synced,
    };
    let health = health.clone();
    tasks.spawn(async move {
        if synced_rx.wait_for(|s| *s).await.is_ok() {
            info!("Endpoint source synced; readiness SERVING");
            health.mark_synced();
        }
    });
    let c = cancel.clone();
    match (&k.pool, &k.standalone) {
        (Some(pool), _) => {
            info!(pool = %pool.name, namespace = %pool.namespace, group = %pool.group, "InferencePool discovery");
            tasks.spawn(async move {
                if let Err(error) = discovery.run(c).await {
                    tracing::error!(%error, "InferencePool discovery stopped");
                }
            });
        }
        (None, Some(spec)) => {
            info!(selector = %spec.label_selector(), ports = ?spec.target_ports, namespace = %k.namespace,
                "Standalone discovery (--endpoint-selector)");
            tasks.spawn(discovery.run_standalone(spec.clone(), c));
        }
        (None, None) => {}
    }
    endpoints_synced
}

/// The scraper's settings: built-in engines, the config's `engineConfigs`, then the Go EPPs'
/// scrape flags (see [`crate::scrape_flags`]).
fn scrape_config(
    settings: &Settings,
    loaded: &LoadedConfig,
    warnings: &mut Vec<String>,
) -> anyhow::Result<ScrapeConfig> {
    let extractor = &loaded.data_layer.extractor;
    let mut engines = HashMap::new();
    for name in BUILTIN_ENGINES {
        if let Some(m) = builtin_engine(name) {
            engines.insert(name.to_string(), m);
        }
    }
    // Validated by the extractor's factory; a user entry replaces the built-in wholesale.
    for custom in &extractor.engine_configs {
        if let Ok(m) = custom.to_mapping() {
            engines.insert(custom.name.clone(), m);
        }
    }
    let flags = &settings.scrape_flags;
    flags.apply_metrics(&mut engines, extractor, warnings)?;
    let target = flags.target(&loaded.data_layer.source, warnings);
    let tls = match target.https {
        true => {
            let check = match target.insecure_skip_verify {
                true => crate::http_client::ServerCheck::SkipVerify,
                false => crate::http_client::ServerCheck::Verify { extra_roots_pem: Vec::new() },
            };
            Some(
                crate::http_client::client_tls(&check)
                    .map_err(|e| anyhow::anyhow!("model-server metrics over https: {e}"))?,
            )
        }
        false => None,
    };
    Ok(ScrapeConfig {
        interval: settings.refresh_metrics_interval,
        timeout: settings.scrape_timeout,
        path: target.path,
        engines,
        engine_label: extractor.engine_label_key.clone(),
        default_engine: extractor.default_engine.clone(),
        tls,
        port: target.port,
    })
}
