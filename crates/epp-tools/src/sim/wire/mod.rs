//! Wire mode (`epp sim --wire`): the same simulated pods, but talking to a real epp on
//! loopback. Each pod serves its load as vLLM-style `/metrics` over HTTP and publishes its
//! KV events on a real ZeroMQ PUB socket (`pods`); every routing decision is a real ext_proc
//! stream to epp (`client`); epp is started with `App::start` from the policy's config with
//! a static endpoints file naming each pod's address and `kvEventsEndpoint`. Simulated time
//! is paced by the wall clock (`fabric`), so keep runs small (a few pods, a few seconds).
//!
//! With `--replicas N` (`run_replicas`) N such epp servers (each an `App` with its own
//! ports, state and registry, in this process) sit behind a round-robin gateway, sharing
//! state through Redis when `--replica-sync` is given; sync runs at its real pace.
//!
//! Harness-side policies (round-robin, oracle) do not involve epp and run in process.
//! Results are not reproducible to the digit: scrape timing, event delivery and picker
//! tie-breaks follow the real clock and epp's own threads.

pub mod client;
pub mod fabric;
pub mod pods;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

pub use client::WireError;
use fabric::{WireFabric, WireParts};
use pods::PodServer;

use super::inproc::pod_metrics;
use super::pod::Pod;
use super::replicas::{RedisWatch, ReplicaReport, SyncTarget};
use super::router::MODEL;
use super::sync_stats::{self, SyncStats};
use super::{Policy, PolicyReport, Scenario, engine, report, workload};
use epp::app::{App, Settings};
use epp::endpoints::vllm_metrics::vllm_exposition;
use epp::kvcache::events::EventBatch;

/// Bound on each setup wait (scrapes seen, subscriptions joined).
const SETUP_WAIT: Duration = Duration::from_secs(10);

/// Runs every policy of `policies` on the scenario, epp's policies through a real epp on
/// loopback, at `speed` simulated seconds per wall second.
pub fn run_policies(scenario: &Scenario, policies: &[Policy], speed: f64) -> anyhow::Result<Vec<PolicyReport>> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let requests = workload::generate(&scenario.workload);
    let mut reports = Vec::with_capacity(policies.len());
    for &policy in policies {
        if policy.uses_scheduler() {
            reports.push(run_one(&rt, scenario, policy, &requests, speed)?);
        } else {
            reports.extend(super::run_policies(scenario, &[policy], &mut |_, _| {})?);
        }
    }
    report::add_regret(&mut reports);
    Ok(reports)
}

fn run_one(
    rt: &tokio::runtime::Runtime,
    scenario: &Scenario,
    policy: Policy,
    requests: &[workload::SimRequest],
    speed: f64,
) -> anyhow::Result<PolicyReport> {
    Ok(run_replicated(rt, scenario, policy, requests, speed, 1, None)?.0)
}

/// Runs `policy` through `replicas` epp servers behind a round-robin gateway (each with
/// `--replica-sync-url` when `sync` is given); also returns their sync metrics.
fn run_replicated(
    rt: &tokio::runtime::Runtime,
    scenario: &Scenario,
    policy: Policy,
    requests: &[workload::SimRequest],
    speed: f64,
    replicas: usize,
    sync: Option<&SyncTarget>,
) -> anyhow::Result<(PolicyReport, SyncStats)> {
    let fleet = &scenario.fleet;
    let cancel = CancellationToken::new();
    let mut pods = rt.block_on(async {
        let mut pods = Vec::with_capacity(fleet.pods);
        for _ in 0..fleet.pods {
            pods.push(PodServer::start(MODEL, cancel.clone()).await?);
        }
        Ok::<_, std::io::Error>(pods)
    })?;
    let idle = vllm_exposition(&pod_metrics(&Pod::new(fleet.pod), fleet));
    for p in &pods {
        p.set_metrics(idle.clone());
    }
    let file = EndpointsFile::write(&pods)?;
    let mut apps = Vec::with_capacity(replicas.max(1));
    let mut started = Ok(());
    for _ in 0..replicas.max(1) {
        let mut settings = Settings::loopback();
        settings.endpoints_file = Some(file.0.clone());
        settings.config_text = policy.config_text(fleet.pod.block_size, true);
        settings.refresh_metrics_interval =
            Duration::from_secs_f64((fleet.scrape_interval / speed.max(1e-3)).max(0.005));
        settings.replica_sync = sync.map(SyncTarget::settings);
        match rt.block_on(App::start(settings)).context("starting epp") {
            Ok(app) => apps.push(app),
            Err(e) => {
                started = Err(e);
                break;
            }
        }
    }
    let result = started.and_then(|()| {
        let wants_events = policy == Policy::Precise;
        let mut seq_base = vec![0; pods.len()];
        let mut clients = Vec::with_capacity(apps.len());
        for app in &apps {
            rt.block_on(wait_scraped(app))?;
            if wants_events {
                rt.block_on(join_subscriptions(app, &mut pods, &mut seq_base))?;
            }
            clients.push(rt.block_on(client::connect(app.grpc_addr))?);
        }
        let registries: Vec<prometheus::Registry> = apps.iter().map(|a| a.registry.clone()).collect();
        let parts = WireParts {
            rt: rt.handle().clone(),
            clients,
            pods,
            seq_base,
            wants_events,
            speed,
            gaps: Box::new(move || registries.iter().map(|r| counter(r, "epp_kv_sequence_gaps_total")).sum()),
        };
        let seed = scenario.workload.seed.wrapping_add(policy as u64);
        let mut fabric = WireFabric::new(parts, fleet, seed);
        let wall = Instant::now();
        let run = engine::run(policy, &mut fabric, fleet, requests, &mut |_| {})?;
        let report = report::summarize(&run, fleet.pods, wall.elapsed().as_secs_f64());
        let registries: Vec<&prometheus::Registry> = apps.iter().map(|a| &a.registry).collect();
        Ok::<_, anyhow::Error>((report, sync_stats::gather(&registries)))
    });
    cancel.cancel();
    for app in apps {
        rt.block_on(app.shutdown());
    }
    result
}

/// `sim --wire --replicas N`: `policy` through `replicas` epp servers, each an `App` on its
/// own loopback ports with its own state and registry, sharing through `sync` when given.
pub fn run_replicas(
    scenario: &Scenario,
    policy: Policy,
    replicas: usize,
    sync: Option<&SyncTarget>,
    speed: f64,
) -> anyhow::Result<ReplicaReport> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let requests = workload::generate(&scenario.workload);
    let watch = RedisWatch::start(sync)?;
    let (run, sync_stats) = run_replicated(&rt, scenario, policy, &requests, speed, replicas, sync)?;
    let redis = watch.map(|w| w.finish(requests.len())).transpose()?;
    Ok(ReplicaReport { replicas: replicas.max(1), sync: sync.is_some(), run, sync_stats, redis })
}

/// Waits until epp has scraped every pod once.
async fn wait_scraped(app: &App) -> anyhow::Result<()> {
    let mut updates = app.store.subscribe_metrics();
    let deadline = tokio::time::Instant::now() + SETUP_WAIT;
    while !app.store.snapshot().entries.iter().all(|e| e.metrics.load().updated_at.is_some()) {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout(left, updates.changed()).await {
            Ok(Ok(())) => {}
            _ => anyhow::bail!("epp did not scrape every simulated pod within {SETUP_WAIT:?}"),
        }
    }
    Ok(())
}

/// Publishes empty batches from each pod in turn until epp has received one (a PUB socket
/// drops what it sends before the subscriber has joined); `next_seq` holds each pod's next
/// sequence number and advances past the ones used.
async fn join_subscriptions(app: &App, pods: &mut [PodServer], next_seq: &mut [u64]) -> anyhow::Result<()> {
    const RECEIVED: &str = "epp_kv_messages_received_total";
    for (pod, seq) in pods.iter_mut().zip(next_seq.iter_mut()) {
        let before = counter(&app.registry, RECEIVED);
        let deadline = Instant::now() + SETUP_WAIT;
        loop {
            pod.publish(*seq, &EventBatch::default()).await?;
            *seq += 1;
            app.flush().await;
            if counter(&app.registry, RECEIVED) > before {
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "epp never subscribed to {}", pod.kv_endpoint);
            // The subscriber connects on its own schedule; poll it at a modest rate.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Ok(())
}

/// Sum of a counter family's values in `registry`.
fn counter(registry: &prometheus::Registry, name: &str) -> u64 {
    registry
        .gather()
        .iter()
        .filter(|f| f.name() == name)
        .flat_map(|f| f.get_metric())
        .map(|m| m.get_counter().get_value() as u64)
        .sum()
}

/// A temporary endpoints file naming each pod (`pod-{i}`), removed on drop.
struct EndpointsFile(std::path::PathBuf);

impl EndpointsFile {
    fn write(pods: &[PodServer]) -> std::io::Result<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!("epp-sim-wire-{}-{}.yaml", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let path = std::env::temp_dir().join(name);
        let mut s = String::from("endpoints:\n");
        for (i, p) in pods.iter().enumerate() {
            s.push_str(&format!(
                "  - name: {}\n    address: \"{}\"\n    port: {}\n    kvEventsEndpoint: \"{}\"\n",
                super::router::pod_name(i),
                p.addr.ip(),
                p.addr.port(),
                p.kv_endpoint
            ));
        }
        std::fs::write(&path, s)?;
        Ok(Self(path))
    }
}

impl Drop for EndpointsFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
