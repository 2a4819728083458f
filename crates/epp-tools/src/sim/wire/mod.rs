//! Wire mode (`epp sim --wire`): the same simulated pods, but talking to a real epp on
//! loopback. Each pod serves its load as vLLM-style `/metrics` over HTTP and publishes its
//! KV events on a real ZeroMQ PUB socket (`pods`); every routing decision is a real ext_proc
//! stream to epp (`client`); epp is started from the policy's config with a static endpoints
//! file naming each pod's address and `kvEventsEndpoint`, either in this process
//! (`App::start`) or, with `--wire-processes`, as real `epp` OS processes started with the
//! same flags a deployment passes (`replica`, `process`). Simulated time is paced by the
//! wall clock (`fabric`), so keep runs small (a few pods, a few seconds).
//!
//! With `--replicas N` (`run_replicas`) N such epp servers (each with its own ports, state
//! and metrics) sit behind a round-robin gateway, sharing state through Redis when
//! `--replica-sync` is given; sync runs at its real pace. Everything read back from epp
//! (counters, sync lag) comes from its Prometheus text, the same for both launches.
//!
//! Harness-side policies (round-robin, oracle) do not involve epp and run in process.
//! Results are not reproducible to the digit: scrape timing, event delivery and picker
//! tie-breaks follow the real clock and epp's own threads.

pub mod client;
pub mod fabric;
pub mod pods;
pub mod process;
pub mod replica;
pub mod temp_file;

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

pub use client::WireError;
use fabric::{WireFabric, WireParts};
use pods::PodServer;
pub use replica::Launch;
use replica::{Epp, MetricsSource, ReplicaSpec, SETUP_WAIT};
use temp_file::TempFile;

use super::inproc::pod_metrics;
use super::pod::Pod;
use super::replicas::{RedisWatch, ReplicaReport, SyncTarget};
use super::router::MODEL;
use super::sync_stats::{self, SyncStats};
use super::{Policy, PolicyReport, Scenario, engine, report, workload};
use epp::endpoints::vllm_metrics::vllm_exposition;
use epp::kvcache::events::EventBatch;

/// Runs every policy of `policies` on the scenario, epp's policies through a real epp on
/// loopback (started as `launch` says), at `speed` simulated seconds per wall second.
pub fn run_policies(
    scenario: &Scenario,
    policies: &[Policy],
    speed: f64,
    launch: &Launch,
) -> anyhow::Result<Vec<PolicyReport>> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let requests = workload::generate(&scenario.workload);
    let mut reports = Vec::with_capacity(policies.len());
    for &policy in policies {
        if policy.uses_scheduler() {
            let wire = Wire { rt: &rt, scenario, requests: &requests, speed, launch };
            reports.push(wire.run(policy, 1, None)?.0);
        } else {
            reports.extend(super::run_policies(scenario, &[policy], &mut |_, _| {})?);
        }
    }
    report::add_regret(&mut reports);
    Ok(reports)
}

/// What every run of one wire-mode invocation shares.
struct Wire<'a> {
    rt: &'a tokio::runtime::Runtime,
    scenario: &'a Scenario,
    requests: &'a [workload::SimRequest],
    speed: f64,
    launch: &'a Launch,
}

impl Wire<'_> {
    /// Runs `policy` through `replicas` epp servers behind a round-robin gateway (each with
    /// `--replica-sync-url` when `sync` is given); also returns their sync metrics.
    fn run(
        &self,
        policy: Policy,
        replicas: usize,
        sync: Option<&SyncTarget>,
    ) -> anyhow::Result<(PolicyReport, SyncStats)> {
        let (rt, fleet) = (self.rt, &self.scenario.fleet);
        let cancel = CancellationToken::new();
        let pods = rt.block_on(async {
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
        let file = endpoints_file(&pods)?;
        let spec = ReplicaSpec {
            config_text: policy.config_text(fleet.pod.block_size, true),
            endpoints_file: file.path().to_path_buf(),
            refresh_metrics_interval: Duration::from_secs_f64(
                (fleet.scrape_interval / self.speed.max(1e-3)).max(0.005),
            ),
            sync,
        };
        let mut epps = Vec::with_capacity(replicas.max(1));
        let mut started = Ok(());
        for _ in 0..replicas.max(1) {
            match rt.block_on(Epp::start(self.launch, spec.clone())) {
                Ok(epp) => epps.push(epp),
                Err(e) => {
                    started = Err(e);
                    break;
                }
            }
        }
        let result = started.and_then(|()| self.drive(policy, &epps, pods));
        cancel.cancel();
        for epp in epps {
            rt.block_on(epp.shutdown());
        }
        result
    }

    /// The run itself, over started replicas and pods.
    fn drive(
        &self,
        policy: Policy,
        epps: &[Epp],
        mut pods: Vec<PodServer>,
    ) -> anyhow::Result<(PolicyReport, SyncStats)> {
        let (rt, fleet) = (self.rt, &self.scenario.fleet);
        let wants_events = policy == Policy::Precise;
        let mut seq_base = vec![0; pods.len()];
        let mut clients = Vec::with_capacity(epps.len());
        for epp in epps {
            if wants_events {
                rt.block_on(join_subscriptions(epp, &mut pods, &mut seq_base))?;
            }
            clients.push(rt.block_on(client::connect(epp.grpc_addr()))?);
        }
        let sources: Vec<MetricsSource> = epps.iter().map(Epp::metrics).collect();
        let handle = rt.handle().clone();
        let gap_sources = sources.clone();
        let parts = WireParts {
            rt: rt.handle().clone(),
            clients,
            pods,
            seq_base,
            wants_events,
            speed: self.speed,
            gaps: Box::new(move || {
                let texts = handle.block_on(texts(&gap_sources)).unwrap_or_default();
                sync_stats::sum(&texts, "epp_kv_sequence_gaps_total", &[]) as u64
            }),
        };
        let seed = self.scenario.workload.seed.wrapping_add(policy as u64);
        let mut fabric = WireFabric::new(parts, fleet, seed);
        let wall = Instant::now();
        let run = engine::run(policy, &mut fabric, fleet, self.requests, &mut |_| {})?;
        let report = report::summarize(&run, fleet.pods, wall.elapsed().as_secs_f64());
        Ok((report, sync_stats::gather(&rt.block_on(texts(&sources))?)))
    }
}

/// The metrics text of every replica.
async fn texts(sources: &[MetricsSource]) -> anyhow::Result<Vec<String>> {
    let mut texts = Vec::with_capacity(sources.len());
    for source in sources {
        texts.push(source.text().await?);
    }
    Ok(texts)
}

/// `sim --wire --replicas N`: `policy` through `replicas` epp servers, each on its own
/// loopback ports with its own state and metrics, sharing through `sync` when given.
pub fn run_replicas(
    scenario: &Scenario,
    policy: Policy,
    replicas: usize,
    sync: Option<&SyncTarget>,
    speed: f64,
    launch: &Launch,
) -> anyhow::Result<ReplicaReport> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let requests = workload::generate(&scenario.workload);
    let watch = RedisWatch::start(sync)?;
    let wire = Wire { rt: &rt, scenario, requests: &requests, speed, launch };
    let (run, sync_stats) = wire.run(policy, replicas, sync)?;
    let redis = watch.map(|w| w.finish(requests.len())).transpose()?;
    Ok(ReplicaReport { replicas: replicas.max(1), sync: sync.is_some(), run, sync_stats, redis })
}

/// Publishes empty batches from each pod in turn until epp has received one (a PUB socket
/// drops what it sends before the subscriber has joined); `next_seq` holds each pod's next
/// sequence number and advances past the ones used.
async fn join_subscriptions(epp: &Epp, pods: &mut [PodServer], next_seq: &mut [u64]) -> anyhow::Result<()> {
    let source = epp.metrics();
    let received = || async { Ok::<_, anyhow::Error>(sync_stats::sum(&[source.text().await?], RECEIVED, &[])) };
    for (pod, seq) in pods.iter_mut().zip(next_seq.iter_mut()) {
        let before = received().await?;
        let deadline = Instant::now() + SETUP_WAIT;
        loop {
            pod.publish(*seq, &EventBatch::default()).await?;
            *seq += 1;
            epp.flush().await;
            if received().await? > before {
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "epp never subscribed to {}", pod.kv_endpoint);
            // The subscriber connects on its own schedule; poll it at a modest rate.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Ok(())
}

/// epp's count of KV-event messages received.
const RECEIVED: &str = "epp_kv_messages_received_total";

/// A temporary endpoints file naming each pod (`pod-{i}`).
fn endpoints_file(pods: &[PodServer]) -> std::io::Result<TempFile> {
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
    TempFile::write("epp-sim-wire", "yaml", &s)
}
