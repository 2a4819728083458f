//! Command-line flags, compatible with the Go EPPs' names and defaults (`--grpc-port 9002`,
//! `--grpc-health-port 9003`, `--metrics-port 9090`, `--secure-serving=true`, ...), and the
//! subcommands (`validate`; `sim`, `demo` and `bench` live in the `epp-tools` binary).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Parser, Subcommand};

use crate::go_flags::{parse_go_bool, parse_go_duration, parse_quantity};
use crate::telemetry::tracing::{LogFormat, TimeEncoding};

/// epp: Endpoint Picker for LLM inference (Envoy ext_proc).
#[derive(Debug, Parser)]
// A repeated flag takes its last value, as Go's flag package does.
#[command(name = "epp", version, about, args_override_self = true)]
pub struct Cli {
    /// Subcommand; none = serve.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Server flags.
    #[command(flatten)]
    pub serve: ServeArgs,
}

impl Cli {
    /// Parses `std::env::args_os()` after Go-style normalization (see [`crate::go_flags`]);
    /// prints help or the error and exits on failure, as `clap::Parser::parse` does.
    pub fn parse_go() -> Self {
        match Self::try_parse_go(std::env::args_os()) {
            Ok(cli) => cli,
            Err(error) => error.exit(),
        }
    }

    /// Parses `args` (program name first) after Go-style normalization.
    pub fn try_parse_go<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString>,
    {
        use clap::{CommandFactory, FromArgMatches};
        let mut command = Self::command();
        let flags = crate::go_flags::long_flags(&command);
        let subcommands: Vec<String> = command
            .get_subcommands()
            .flat_map(|c| std::iter::once(c.get_name().to_string()).chain(c.get_all_aliases().map(String::from)))
            .chain(["help".to_string()])
            .collect();
        let args = crate::go_flags::normalize_args(args.into_iter().map(Into::into).collect(), &flags, &subcommands);
        let matches = command.try_get_matches_from_mut(args)?;
        Self::from_arg_matches(&matches).map_err(|e| e.format(&mut command))
    }
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Checks EndpointPickerConfig files, ConfigMaps holding one, and KServe
    /// LLMInferenceService(Config) manifests; exits 0 only when no finding is an error.
    Validate {
        /// Files to check (YAML; multi-document allowed).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value = "human")]
        output: crate::validate::OutputFormat,
    },
    /// `sim`, `demo` and `bench` moved to the `epp-tools` binary (crates/epp-tools); hidden,
    /// kept so that invoking one prints where it went and exits 2.
    #[command(name = "sim", aliases = ["demo", "bench"], hide = true, disable_help_flag = true)]
    MovedToTools {
        /// Ignored.
        #[arg(num_args = 0.., allow_hyphen_values = true, trailing_var_arg = true)]
        args: Vec<String>,
    },
}

fn parse_objective(s: &str) -> Result<(String, i32), String> {
    let (name, priority) = s.split_once('=').ok_or("expected NAME=PRIORITY")?;
    let priority = priority.trim().parse::<i32>().map_err(|e| format!("priority of {name:?}: {e}"))?;
    Ok((name.trim().to_string(), priority))
}

/// Flags of the server.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// ext_proc gRPC port.
    #[arg(long, default_value_t = 9002)]
    pub grpc_port: u16,
    /// Plaintext gRPC health port.
    #[arg(long, default_value_t = 9003)]
    pub grpc_health_port: u16,
    /// Prometheus `/metrics` port.
    #[arg(long, default_value_t = 9090)]
    pub metrics_port: u16,
    /// Address every server binds.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind_address: IpAddr,
    /// TLS on the ext_proc port (`--secure-serving=false` for plaintext h2c).
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub secure_serving: bool,
    /// Directory holding `tls.crt` and `tls.key` (empty: self-signed).
    #[arg(long)]
    pub cert_path: Option<PathBuf>,
    /// EndpointPickerConfig file.
    #[arg(long, conflicts_with = "config_text")]
    pub config_file: Option<PathBuf>,
    /// EndpointPickerConfig YAML text.
    #[arg(long)]
    pub config_text: Option<String>,
    /// How often `--config-file` is checked for changes (hot reload); `0s` turns reload off.
    #[arg(long, default_value = "1s", value_parser = parse_go_duration)]
    pub config_reload_interval: Duration,
    /// Static endpoint list (YAML), reloaded when it changes.
    #[arg(long)]
    pub endpoints_file: Option<PathBuf>,
    /// How often the endpoints file is checked for changes.
    #[arg(long, default_value = "1s", value_parser = parse_go_duration)]
    pub endpoints_file_poll_interval: Duration,
    /// Model-server metrics scrape period.
    #[arg(long, default_value = "50ms", value_parser = parse_go_duration)]
    pub refresh_metrics_interval: Duration,
    /// Per-scrape timeout.
    #[arg(long, default_value = "1s", value_parser = parse_go_duration)]
    pub metrics_scrape_timeout: Duration,
    /// Ignore the gateway's `envoy.lb.subset_hint`.
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub disable_endpoint_subset_filter: bool,
    /// Also register gRPC health on the ext_proc port.
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub health_checking: bool,
    /// Request body mode assumed when Envoy sends no `protocol_config` (older Envoys).
    #[arg(long, value_enum, default_value = "full-duplex")]
    pub default_request_body_mode: BodyModeArg,
    /// Largest gRPC message (and request body) accepted: bytes or a quantity (`10MiB`, `4Mi`).
    #[arg(long, default_value = "64Mi", value_parser = parse_quantity)]
    pub grpc_max_recv_msg_size: usize,
    /// Largest gRPC message sent (quantity); unlimited when absent.
    #[arg(long, value_parser = parse_quantity)]
    pub grpc_max_send_msg_size: Option<usize>,
    /// Objective priority, `NAME=PRIORITY` (repeatable), for names no InferenceObjective
    /// object carries (an object of the same name wins); requests whose objective header
    /// names a negative priority are shed with 429 while the pool is saturated.
    #[arg(long = "objective", value_parser = parse_objective)]
    pub objectives: Vec<(String, i32)>,
    /// Log verbosity (logr levels: 2 default, 4 debug, 5 trace).
    #[arg(short = 'v', long = "v", default_value_t = 2)]
    pub verbosity: u8,
    /// Log encoding.
    #[arg(long = "zap-encoder", value_enum, default_value = "console")]
    pub log_format: LogFormat,
    /// zap level: `debug`, `info`, `error`, or an integer logr verbosity; overrides `-v`.
    #[arg(long)]
    pub zap_log_level: Option<String>,
    /// zap development mode: console encoding and debug level unless set otherwise.
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub zap_devel: bool,
    /// Accepted for compatibility (Rust logs carry no stack traces).
    #[arg(long)]
    pub zap_stacktrace_level: Option<String>,
    /// Time encoding of `ts` in JSON logs.
    #[arg(long, value_enum, default_value = "rfc3339")]
    pub zap_time_encoding: TimeEncoding,

    // Go EPP parity (GIE runner options and llm-d router additions); see docs/flags.md.
    /// Serve the certificate under --cert-path and follow changes to it without a restart.
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub enable_cert_reload: bool,
    /// Lowest TLS version of the ext_proc port: `1.2` (or `VersionTLS12`) or `1.3`.
    #[arg(long)]
    pub tls_min_version: Option<String>,
    /// TLS 1.2 cipher suites, comma-separated IANA names as Go names them (TLS 1.3 suites are
    /// always enabled, as in Go).
    #[arg(long)]
    pub tls_cipher_suites: Option<String>,
    /// Longest time from SIGTERM to exit; streams still open then are cut (and counted).
    #[arg(long, default_value = "30s", value_parser = parse_go_duration)]
    pub drain_timeout: Duration,
    /// After SIGTERM, new connections and streams are still accepted this long (readiness
    /// already reports NOT_SERVING) while gateways learn that the pod is leaving.
    #[arg(long, default_value = "5s", value_parser = parse_go_duration)]
    pub drain_grace: Duration,
    /// Registers per-method gRPC stream metrics (`grpc_server_*`).
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub enable_grpc_stream_metrics: bool,
    /// Accepted for compatibility (llm-d); epp does not emit per-endpoint scores yet.
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub emit_endpoint_scores: bool,
    /// Which names of dual-named metric families `/metrics` exports: `both` (GIE and llm-d, as
    /// llm-d dual-emits), `gie` or `llm-d` (half the series).
    #[arg(long, value_enum, default_value = "both")]
    pub metrics_naming: crate::telemetry::naming::MetricsNaming,
    /// Refresh period of pool-level Prometheus gauges.
    #[arg(long, default_value = "5s", value_parser = parse_go_duration)]
    pub refresh_prometheus_metrics_interval: Duration,
    /// Waiting-queue metric of the default engine (selector, e.g. `vllm:num_requests_waiting`).
    #[arg(long)]
    pub total_queued_requests_metric: Option<String>,
    /// Running-requests metric of the default engine.
    #[arg(long)]
    pub total_running_requests_metric: Option<String>,
    /// KV-cache usage metric of the default engine.
    #[arg(long)]
    pub kv_cache_usage_percentage_metric: Option<String>,
    /// LoRA info metric of the default engine; empty disables LoRA metrics.
    #[arg(long)]
    pub lora_info_metric: Option<String>,
    /// Cache-config info metric of the default engine; empty disables it.
    #[arg(long)]
    pub cache_info_metric: Option<String>,
    /// Scheme of model-server metric scrapes.
    #[arg(long, value_enum, default_value = "http")]
    pub model_server_metrics_scheme: MetricsScheme,
    /// Path of model-server metric scrapes (default `/metrics`).
    #[arg(long)]
    pub model_server_metrics_path: Option<String>,
    /// Port of model-server metric scrapes; 0 = the endpoint's own port.
    #[arg(long, default_value_t = 0)]
    pub model_server_metrics_port: u16,
    /// With https scrapes, skip certificate verification (model servers use self-signed certs).
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub model_server_metrics_https_insecure_skip_verify: bool,
    /// Standalone mode: pods in the pool namespace matching `k=v,...` become the endpoints
    /// (no InferencePool; exclusive with --pool-name and --endpoints-file).
    #[arg(long, conflicts_with_all = ["pool_name", "endpoints_file"])]
    pub endpoint_selector: Option<String>,
    /// Standalone mode: serving ports of each matching pod (comma-separated; rank = index).
    #[arg(long, value_delimiter = ',', requires = "endpoint_selector")]
    pub endpoint_target_ports: Vec<u16>,
    /// This pod's name (downward API).
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,
    /// Leader election on the Lease `epp-<pool-namespace>-<pool-name>.gateway-api-inference-extension.sigs.k8s.io`
    /// (holder `--pod-name`/POD_NAME): only the leader reports ready; standbys keep their
    /// endpoint and metrics state warm. In standalone mode (`--endpoint-selector`) the pool
    /// part is `standalone-<hash of the selector>`.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub ha_enable_leader_election: Option<bool>,
    /// OpenTelemetry traces, exported over OTLP/gRPC when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
    /// `OTEL_TRACES_EXPORTER=otlp`) is set; see docs/observability.md.
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub tracing: bool,
    /// Authenticated `/metrics` (default true, as GIE): a bearer token checked with a
    /// TokenReview and a SubjectAccessReview (`get` on `/metrics`). Without Kubernetes access
    /// /metrics is served open (warned). `/healthz` and `/readyz` stay open.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub metrics_endpoint_auth: Option<bool>,
    /// PEM CA bundle: the metrics port is TLS and every client must present a certificate
    /// it signed.
    #[arg(long)]
    pub metrics_client_ca_file: Option<PathBuf>,
    /// Directory with `tls.crt`/`tls.key`: the metrics port is TLS with this certificate
    /// (self-signed when only `--metrics-client-ca-file` is given).
    #[arg(long)]
    pub metrics_cert_dir: Option<PathBuf>,
    /// `/debug/pprof/` on the metrics port (default true, as GIE): a CPU profile in pprof's
    /// protobuf format and the allocator's heap statistics, behind the `/metrics` auth.
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub enable_pprof: bool,
    /// `/debug/state` on the metrics port (default true): endpoints, prefix index, KV-event
    /// subscriptions and flow-control queues as JSON, behind the `/metrics` auth.
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub enable_debug_state: bool,
    /// InferencePool whose Ready pods become the endpoints (Kubernetes discovery; exclusive
    /// with --endpoints-file). Pods match the pool's selector; each target port is one
    /// endpoint `<pod>-rank-<i>`.
    #[arg(long, conflicts_with = "endpoints_file")]
    pub pool_name: Option<String>,
    /// Namespace of the pool (and of namespaced `k8s-notification-source` objects); falls
    /// back to env NAMESPACE, then `default`.
    #[arg(long, env = "NAMESPACE", default_value = "default")]
    pub pool_namespace: String,
    /// API group of the pool: `inference.networking.k8s.io` (v1) or
    /// `inference.networking.x-k8s.io` (v1alpha2).
    #[arg(long, default_value = crate::k8s::pool::GROUP_V1)]
    pub pool_group: String,
    /// Kubeconfig file for reaching the API server outside a cluster (its current context;
    /// everything kube-rs loads: tokens, client certificates, exec plugins, auth providers,
    /// proxy-url). Without it epp uses the in-cluster service account.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Accepted for compatibility; alpha plugins load regardless.
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub allow_experimental_plugins: bool,
    /// Connection hygiene and input limits (src/net/limits.rs).
    #[command(flatten)]
    pub limits: crate::net::limits::LimitArgs,
    /// Replica state sharing through Redis (docs/replicas.md).
    #[command(flatten)]
    pub replica_sync: crate::replica::ReplicaArgs,
}

/// Scheme of model-server metric scrapes (`--model-server-metrics-scheme`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum MetricsScheme {
    /// Plain HTTP.
    Http,
    /// HTTPS (rustls).
    Https,
}

/// Request body modes for `--default-request-body-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BodyModeArg {
    /// `FULL_DUPLEX_STREAMED` (GIE's reference mode).
    FullDuplex,
    /// `BUFFERED`.
    Buffered,
}

impl ServeArgs {
    /// One warning per flag whose value asks for behaviour epp does not have yet; the process
    /// still starts and routes.
    pub fn compat_warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut lacking = |on: bool, flag: &str, what: &str| {
            if on {
                out.push(format!("{flag} is accepted but not implemented yet: {what}"));
            }
        };
        lacking(self.emit_endpoint_scores, "--emit-endpoint-scores", "endpoint scores are not emitted");
        out
    }

    /// The standalone pool from `--endpoint-selector` / `--endpoint-target-ports`, if given.
    pub fn standalone_pool(&self) -> Result<Option<crate::k8s::pool::PoolSpec>, String> {
        let Some(selector) = &self.endpoint_selector else { return Ok(None) };
        let mut labels = std::collections::BTreeMap::new();
        for pair in selector.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| format!("--endpoint-selector: {pair:?} is not key=value (only equality selectors)"))?;
            let k = k.trim().trim_end_matches('=');
            if k.is_empty() || k.ends_with('!') {
                return Err(format!("--endpoint-selector: {pair:?} is not key=value (only equality selectors)"));
            }
            labels.insert(k.to_string(), v.trim().to_string());
        }
        if labels.is_empty() {
            return Err("--endpoint-selector is empty: it would select every pod of the namespace".into());
        }
        if self.endpoint_target_ports.is_empty() {
            return Err("--endpoint-selector needs --endpoint-target-ports".into());
        }
        if self.endpoint_target_ports.len() > crate::k8s::pool::MAX_TARGET_PORTS
            || self.endpoint_target_ports.contains(&0)
        {
            return Err(format!("--endpoint-target-ports: 1 to {} non-zero ports", crate::k8s::pool::MAX_TARGET_PORTS));
        }
        Ok(Some(crate::k8s::pool::PoolSpec { selector: labels, target_ports: self.endpoint_target_ports.clone() }))
    }

    /// Leader-election settings when `--ha-enable-leader-election` is on. The holder is
    /// `--pod-name`/POD_NAME, else HOSTNAME (a pod's hostname is its name).
    fn leader_election(
        &self,
        pool: Option<&crate::k8s::pool::PoolRef>,
    ) -> Result<Option<crate::app::LeaderElectionSettings>, String> {
        if self.ha_enable_leader_election != Some(true) {
            return Ok(None);
        }
        let pool_part = match (pool, self.standalone_pool()?) {
            (Some(pool), _) => pool.name.clone(),
            (None, Some(spec)) => standalone_lease_part(&spec.label_selector()),
            (None, None) => {
                return Err("--ha-enable-leader-election needs --pool-name or --endpoint-selector \
                     (the Lease is named after the pool)"
                    .into());
            }
        };
        let holder = self
            .pod_name
            .clone()
            .filter(|n| !n.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok().filter(|n| !n.is_empty()))
            .ok_or("--ha-enable-leader-election needs --pod-name (or env POD_NAME / HOSTNAME) as the Lease holder")?;
        Ok(Some(crate::app::LeaderElectionSettings {
            lease: crate::k8s::lease::lease_name(&self.pool_namespace, &pool_part),
            holder,
            timing: Default::default(),
        }))
    }

    /// TLS of the metrics port: on when `--metrics-cert-dir` or `--metrics-client-ca-file`
    /// is given (an empty value counts as absent).
    pub fn metrics_tls(&self) -> Option<crate::app::MetricsTls> {
        let given = |p: &Option<PathBuf>| p.clone().filter(|p| !p.as_os_str().is_empty());
        let tls = crate::app::MetricsTls {
            cert_dir: given(&self.metrics_cert_dir),
            client_ca: given(&self.metrics_client_ca_file),
        };
        (tls.cert_dir.is_some() || tls.client_ca.is_some()).then_some(tls)
    }

    /// Listen address of a port.
    pub fn addr(&self, port: u16) -> SocketAddr {
        SocketAddr::new(self.bind_address, port)
    }

    /// Kubernetes access: `--kubeconfig`/KUBECONFIG, else the in-cluster service account.
    /// Required with `--pool-name`; otherwise optional (used by `k8s-notification-source`).
    /// Files are read when the app starts (kube's loader); errors here are ready to print.
    pub fn kube_settings(&self) -> Result<Option<crate::app::KubeSettings>, String> {
        let cluster = crate::k8s::client::KubeSource::detect(self.kubeconfig.as_deref());
        let pool = self.pool_name.as_ref().map(|name| crate::k8s::pool::PoolRef {
            name: name.clone(),
            namespace: self.pool_namespace.clone(),
            group: self.pool_group.clone(),
        });
        if let Some(pool) = &pool {
            pool.version().map_err(|e| e.to_string())?;
        }
        let standalone = self.standalone_pool()?;
        match (cluster, pool, standalone) {
            (Some(cluster), pool, standalone) => Ok(Some(crate::app::KubeSettings {
                cluster,
                namespace: self.pool_namespace.clone(),
                leader_election: self.leader_election(pool.as_ref())?,
                pool,
                standalone,
                watch: Default::default(),
            })),
            (None, ..) if self.ha_enable_leader_election == Some(true) => {
                Err("--ha-enable-leader-election needs Kubernetes access: run in a cluster \
                     (KUBERNETES_SERVICE_HOST) or give --kubeconfig"
                    .into())
            }
            (None, None, None) => Ok(None),
            (None, ..) => Err("--pool-name and --endpoint-selector need Kubernetes access: run in a cluster \
                 (KUBERNETES_SERVICE_HOST) or give --kubeconfig"
                .into()),
        }
    }
}

/// The pool part of the Lease name in standalone mode (no pool name): `standalone-` and a
/// hash of the selector, so replicas of one deployment share a Lease and two deployments in
/// one namespace do not.
fn standalone_lease_part(selector: &str) -> String {
    format!("standalone-{:08x}", xxhash_rust::xxh3::xxh3_64(selector.as_bytes()) as u32)
}
