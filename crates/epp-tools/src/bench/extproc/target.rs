//! The server under load: an external epp (`--target host:port`, h2c; its CPU read from
//! `/proc/<--target-pid>` when given), one started in this process on loopback, on its own
//! runtime (threads named `epp-srv<run>-`) so its CPU can be told apart from the load
//! generator's, with simulated pods on a third runtime (`bench-pods`: `/metrics` servers and
//! KV-event publishers), or the no-op floor server (`floor`) on its own runtime
//! (`floor-srv<run>-`).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;

use super::args::ExtprocArgs;
use super::{floor, kv_events, pods::Pods};
use epp::app::{App, Settings};

/// Config used with `--kv-events`: the precise producer follows the pods' PUB sockets.
const KV_CONFIG: &str = r#"apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: precise-prefix-cache-producer
  parameters:
    tokenProcessorConfig: {blockSizeTokens: 16}
    kvEventsConfig: {discoverPods: true}
- type: prefix-cache-scorer
  parameters: {prefixMatchInfoProducerName: precise-prefix-cache-producer}
- type: queue-scorer
- type: kv-cache-utilization-scorer
schedulingProfiles:
- name: default
  plugins:
  - {pluginRef: queue-scorer, weight: 2}
  - {pluginRef: kv-cache-utilization-scorer, weight: 2}
  - {pluginRef: prefix-cache-scorer, weight: 3}
"#;

/// Where requests go.
pub struct Target {
    /// ext_proc address.
    pub addr: SocketAddr,
    /// Valid destinations (in process); `None` accepts any non-empty one.
    pub destinations: Option<HashSet<String>>,
    /// Where the server's CPU is read.
    pub cpu: CpuSource,
    /// What is served: `epp` or `floor`.
    pub name: &'static str,
    local: Option<Local>,
    floor: Option<(Runtime, CancellationToken)>,
}

/// Where a target's CPU time comes from.
#[derive(Clone, Debug)]
pub enum CpuSource {
    /// Threads of this process whose name starts with the prefix (`epp-srv<run>-`, unique in
    /// the process so concurrent runs are told apart).
    Threads(String),
    /// The whole process with this id (`--target-pid`).
    Process(u32),
    /// Not known.
    Unknown,
}

struct Local {
    server: Runtime,
    pods: Runtime,
    app: Option<App>,
    cancel: CancellationToken,
    endpoints_file: PathBuf,
}

impl Target {
    /// Connects nowhere yet: starts the in-process epp unless `--target` is given.
    pub fn start(args: &ExtprocArgs) -> anyhow::Result<Self> {
        match args.target {
            Some(addr) => {
                let cpu = args.target_pid.map_or(CpuSource::Unknown, CpuSource::Process);
                Ok(Self { addr, destinations: None, cpu, name: "epp", local: None, floor: None })
            }
            None => start_local(args),
        }
    }

    /// Starts the floor server (`floor`) on loopback, on `--server-threads` threads.
    pub fn start_floor(args: &ExtprocArgs) -> anyhow::Result<Self> {
        let threads = format!("floor-srv{}-", RUNS.fetch_add(1, Ordering::Relaxed));
        let server = runtime(args.server_threads, &threads)?;
        let listener = {
            let _entered = server.enter();
            floor::bind(SocketAddr::from(([127, 0, 0, 1], 0))).context("binding the floor server")?
        };
        let addr = listener.local_addr()?;
        let cancel = CancellationToken::new();
        server.spawn(floor::serve(listener, cancel.clone()));
        Ok(Self {
            addr,
            destinations: Some([floor::FLOOR_DESTINATION.to_string()].into()),
            cpu: CpuSource::Threads(threads),
            name: "floor",
            local: None,
            floor: Some((server, cancel)),
        })
    }

    /// KV blocks the in-process epp has applied (0 otherwise).
    pub fn kv_blocks_applied(&self) -> f64 {
        self.local.as_ref().and_then(|l| l.app.as_ref()).map_or(0.0, |a| kv_events::blocks_applied(&a.registry))
    }

    /// Stops the in-process epp and pods.
    pub fn shutdown(mut self) {
        if let Some((server, cancel)) = self.floor.take() {
            cancel.cancel();
            server.shutdown_timeout(Duration::from_secs(1));
        }
        if let Some(mut local) = self.local.take() {
            // The epp first, so it never scrapes pods that are already gone.
            if let Some(app) = local.app.take() {
                local.server.block_on(app.shutdown());
            }
            local.cancel.cancel();
            let _ = std::fs::remove_file(&local.endpoints_file);
            local.server.shutdown_timeout(Duration::from_secs(1));
            local.pods.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

fn runtime(threads: usize, name: &str) -> anyhow::Result<Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(threads).thread_name(name).enable_all().build()?)
}

/// Server runtimes started in this process (numbers their thread names).
static RUNS: AtomicU64 = AtomicU64::new(0);

fn start_local(args: &ExtprocArgs) -> anyhow::Result<Target> {
    let run = RUNS.fetch_add(1, Ordering::Relaxed);
    let server_threads = format!("epp-srv{run}-");
    let pods_rt = runtime(1, "bench-pods")?;
    let server = runtime(args.server_threads, &server_threads)?;
    let cancel = CancellationToken::new();
    let kv = args.kv_events > 0.0;
    let mut pods = pods_rt.block_on(Pods::start(args.endpoints, kv, &cancel)).context("starting simulated pods")?;
    let name = format!("epp-bench-{}-{run}-endpoints.yaml", std::process::id());
    let endpoints_file = std::env::temp_dir().join(name);
    std::fs::write(&endpoints_file, pods.endpoints_yaml()).context("writing the endpoints file")?;
    let mut settings = Settings::loopback();
    settings.endpoints_file = Some(endpoints_file.clone());
    settings.config_text = kv.then(|| KV_CONFIG.to_string());
    let app = server.block_on(App::start(settings))?;
    server.block_on(wait_scraped(&app, pods.addrs.len()))?;
    if kv {
        let topics = pods.addrs.iter().map(|a| kv_events::topic(*a)).collect();
        let publishers = std::mem::take(&mut pods.publishers);
        pods_rt.spawn(kv_events::publish(publishers, topics, args.kv_events, cancel.clone()));
        server.block_on(wait_ingesting(&app))?;
    }
    Ok(Target {
        addr: app.grpc_addr,
        destinations: Some(pods.addrs.iter().map(|a| a.to_string()).collect()),
        cpu: CpuSource::Threads(server_threads),
        name: "epp",
        local: Some(Local { server, pods: pods_rt, app: Some(app), cancel, endpoints_file }),
        floor: None,
    })
}

/// Waits (bounded) until the first KV events are applied: ZeroMQ drops what is published
/// before a subscription is established, so ingest starts some time after the PUB sockets.
async fn wait_ingesting(app: &App) -> anyhow::Result<()> {
    for _ in 0..500 {
        app.flush().await;
        if kv_events::blocks_applied(&app.registry) > 0.0 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    anyhow::bail!("no KV events were applied within 10 s")
}

/// Waits (bounded, on the store's metric-update barrier) until every pod has been scraped.
async fn wait_scraped(app: &App, n: usize) -> anyhow::Result<()> {
    let mut updates = app.store.subscribe_metrics();
    let ready = || {
        let set = app.store.snapshot();
        set.entries.len() == n && set.entries.iter().all(|e| e.metrics.load().updated_at.is_some())
    };
    let waited = tokio::time::timeout(Duration::from_secs(10), async {
        while !ready() {
            if updates.changed().await.is_err() {
                return;
            }
        }
    })
    .await;
    anyhow::ensure!(waited.is_ok() && ready(), "simulated pods were not scraped within 10 s");
    Ok(())
}
