//! `sim --replicas N`: N epp schedulers, each with its own plugin state, behind a round-robin
//! gateway (request `k` goes to replica `k mod N`), over one simulated fleet. With a Redis URL
//! every replica runs the real replica-sync module (`epp::replica`, docs/replicas.md): its
//! own publisher, reader and heartbeat tasks and its own metrics registry, all on one Redis
//! stream; without, each routes on what it alone has seen.
//!
//! Two drivers:
//! - `run`: the discrete-event fleet (`engine`), as `sim` runs it. Simulated time runs far
//!   ahead of the wall clock, so a real sync lag of a few milliseconds would stand for
//!   seconds of simulated time; the fabric therefore waits after each decision until every
//!   other replica has applied it (`converge`, bounded): the hit rate is that of replicas whose
//!   lag is small next to the request inter-arrival time. The real lag is measured all the
//!   same (the replicas' lag histograms) and reported, under that light load.
//! - `rate_run`: decisions only, at a fixed wall-clock rate, with no waiting for
//!   convergence: the workload's prompts are routed round robin over idle pods (not
//!   simulated) for the sync lag, the decision time and Redis's CPU and memory under load.
//!
//! Only the approximate producer shares state in the simulated configs (precise's index is
//! fed the same KV events on every replica; random and load keep none), so `converge` waits
//! for the approximate policy only: each of its decisions publishes one prefix update.

use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus::Registry;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::channel::{Channel, ChannelStats, Delivery};
use super::engine::{Fabric, FleetConfig};
use super::inproc::publish_load;
use super::pod::Pod;
use super::redis_server::{self, RedisError, RedisSample};
use super::router::{MODEL, Policy, RouteError, Router, pod_name};
use super::sync_stats::{self, SyncStats};
use super::workload::SimRequest;
use super::{PolicyReport, Scenario, engine, report, workload};
use epp::endpoints::store::EndpointStore;
use epp::framework::handles::RandomSource;
use epp::framework::replica::ReplicaHandle;
use epp::kvcache::events::EventBatch;
use epp::replica::{ReplicaSync, SyncError, SyncSettings};

/// Bound on waiting for the replicas to apply each other's updates.
const CONVERGE_WAIT: Duration = Duration::from_secs(10);

/// Why a replica run failed.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaRunError {
    /// Building or running a replica's scheduler.
    #[error(transparent)]
    Route(#[from] RouteError),
    /// Setting up replica sync.
    #[error(transparent)]
    Sync(#[from] SyncError),
    /// Reading Redis's own figures.
    #[error(transparent)]
    Redis(#[from] RedisError),
    /// The async runtime for the sync tasks.
    #[error("runtime: {0}")]
    Runtime(#[from] std::io::Error),
}

/// Redis's cost over one run (sync on).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct RedisUsage {
    /// Redis CPU seconds (user + sys) over the run.
    pub cpu_s: f64,
    /// Routing decisions per wall second over the run.
    pub decisions_per_s: f64,
    /// Redis CPU cores (CPU seconds per wall second) per 1,000 decisions per second.
    pub cpu_cores_per_1k_dps: f64,
    /// Growth of `used_memory` over the run, bytes.
    pub memory_growth_bytes: i64,
    /// Entries in the run's stream at its end.
    pub stream_entries: u64,
    /// `memory_growth_bytes / stream_entries`.
    pub bytes_per_entry: f64,
}

/// One run of `N` replicas through the fleet simulator.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ReplicaReport {
    /// Replicas behind the round-robin gateway.
    pub replicas: usize,
    /// Whether they shared state through Redis.
    pub sync: bool,
    /// The fleet's results (hit rate, TTFT, decision times, ...).
    pub run: PolicyReport,
    /// The replicas' sync metrics.
    pub sync_stats: SyncStats,
    /// Redis's cost (sync on).
    pub redis: Option<RedisUsage>,
}

/// One fixed-rate decisions-only run (`rate_run`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct RateReport {
    /// Replicas behind the round-robin gateway.
    pub replicas: usize,
    /// Whether they shared state through Redis.
    pub sync: bool,
    /// The policy.
    pub policy: &'static str,
    /// Target decisions per second.
    pub target_rate: f64,
    /// Decisions made.
    pub decisions: usize,
    /// Decisions per wall second achieved.
    pub achieved_rate: f64,
    /// Mean decision wall time, microseconds.
    pub decision_mean_us: f64,
    /// Median decision wall time, microseconds.
    pub decision_p50_us: f64,
    /// 99th percentile decision wall time, microseconds.
    pub decision_p99_us: f64,
    /// The replicas' sync metrics.
    pub sync_stats: SyncStats,
    /// Redis's cost (sync on).
    pub redis: Option<RedisUsage>,
}

/// Where the replicas share state: a Redis URL and a stream key of this run's own.
#[derive(Clone, Debug)]
pub struct SyncTarget {
    /// Redis URL.
    pub url: String,
    /// Stream key (deleted after the run).
    pub key: String,
    /// The publishers' batch window (`--replica-sync-batch-window`).
    pub batch_window: Duration,
}

impl SyncTarget {
    /// A target with the default batch window.
    pub fn new(url: impl Into<String>, key: impl Into<String>) -> Self {
        Self { url: url.into(), key: key.into(), batch_window: epp::replica::settings::DEFAULT_BATCH_WINDOW }
    }

    /// A replica's sync settings for this target.
    pub fn settings(&self) -> SyncSettings {
        SyncSettings { key: self.key.clone(), batch_window: self.batch_window, ..SyncSettings::new(self.url.clone()) }
    }
}

struct Replica {
    router: Router,
    sync: Option<Arc<ReplicaSync>>,
    registry: Registry,
    /// This replica's KV-event path (precise: every replica subscribes to every pod).
    channel: Channel,
}

/// The fabric of `N` replicas over one endpoint store (every replica scrapes the same pods).
pub struct Replicated {
    rt: tokio::runtime::Runtime,
    cancel: CancellationToken,
    _tasks: JoinSet<()>,
    store: EndpointStore,
    replicas: Vec<Replica>,
    fleet: FleetConfig,
    next: usize,
    /// Prefix updates each replica has published (approximate with sync only).
    published: Vec<u64>,
    shares: bool,
    converge: bool,
}

impl std::fmt::Debug for Replicated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replicated").field("replicas", &self.replicas.len()).field("next", &self.next).finish()
    }
}

impl Replicated {
    /// `n` replicas of `policy`; with `sync`, each runs replica sync on it; `converge` makes
    /// every decision wait until the other replicas applied it.
    pub fn new(
        policy: Policy,
        fleet: &FleetConfig,
        seed: u64,
        n: usize,
        sync: Option<&SyncTarget>,
        converge: bool,
    ) -> Result<Self, ReplicaRunError> {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        let cancel = CancellationToken::new();
        let mut tasks = JoinSet::new();
        let store = EndpointStore::new();
        store.replace(crate::bench::synthetic::endpoints(fleet.pods));
        let mut replicas = Vec::with_capacity(n.max(1));
        let enter = rt.enter();
        for i in 0..n.max(1) {
            let registry = Registry::new();
            let sync = match sync {
                Some(t) => {
                    let mut settings = t.settings();
                    if converge {
                        // One decision at a time, each waiting until applied: nothing to batch,
                        // and a window would only add its length to every wait.
                        settings.batch_window = Duration::ZERO;
                    }
                    Some(Arc::new(ReplicaSync::new(settings, &registry)?))
                }
                None => None,
            };
            let handle = sync.as_ref().map(|s| s.handle()).unwrap_or_else(ReplicaHandle::default);
            let replica_seed = seed.wrapping_add(i as u64 * 0x9E37_79B9);
            let router = Router::with_replica(
                policy,
                store.clone(),
                fleet.pod.block_size,
                RandomSource::seeded(replica_seed),
                handle,
            )?;
            if let Some(s) = &sync {
                // The store is filled above: the endpoints are known from the start.
                s.spawn(&mut tasks, &cancel, tokio::sync::watch::channel(true).1);
            }
            replicas.push(Replica { router, sync, registry, channel: Channel::new(fleet.events, fleet.pods, seed) });
        }
        drop(enter);
        let shares = sync.is_some() && policy == Policy::Approximate;
        Ok(Self {
            rt,
            cancel,
            _tasks: tasks,
            store,
            published: vec![0; replicas.len()],
            replicas,
            fleet: fleet.clone(),
            next: 0,
            shares,
            converge,
        })
    }

    /// Waits (bounded) until every replica has applied every prefix update the others
    /// published.
    pub fn converge(&self) -> Result<(), RouteError> {
        if !self.shares {
            return Ok(());
        }
        let total: u64 = self.published.iter().sum();
        for (replica, own) in self.replicas.iter().zip(&self.published) {
            let Some(sync) = &replica.sync else { continue };
            let expected = total - own;
            let mut applied = sync.applied();
            let done = self
                .rt
                .block_on(async {
                    tokio::time::timeout(CONVERGE_WAIT, applied.wait_for(|c| c.prefix >= expected)).await
                })
                .is_ok_and(|r| r.is_ok());
            if !done {
                return Err(RouteError::Sync(format!(
                    "a replica applied {} of {expected} prefix updates within {CONVERGE_WAIT:?}",
                    applied.borrow().prefix
                )));
            }
        }
        Ok(())
    }

    /// The replicas' sync metrics so far.
    pub fn sync_stats(&self) -> SyncStats {
        let texts: Vec<String> = self.replicas.iter().map(|r| sync_stats::registry_text(&r.registry)).collect();
        sync_stats::gather(&texts)
    }
}

impl Drop for Replicated {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl Fabric for Replicated {
    fn route(&mut self, req: &SimRequest, pods: &[Pod]) -> Result<(usize, f64), RouteError> {
        let i = self.next % self.replicas.len();
        self.next += 1;
        let picked = self.replicas[i].router.route(req, pods)?;
        if self.shares {
            self.published[i] += 1;
            if self.converge {
                self.converge()?;
            }
        }
        Ok(picked)
    }

    fn wants_events(&self) -> bool {
        self.replicas[0].router.kv_index().is_some()
    }

    fn publish(&mut self, pod: usize, end: f64) -> Option<Delivery> {
        self.replicas[0].channel.publish(pod, end)
    }

    fn deliver(&mut self, pod: usize, seq: u64, batch: EventBatch) {
        for r in &mut self.replicas {
            if let Some(index) = r.router.kv_index() {
                r.channel.deliver(index, pod, &pod_name(pod), MODEL, seq, &batch);
            }
        }
    }

    fn publish_load(&mut self, pods: &[Pod]) {
        publish_load(&self.store, pods, &self.fleet);
    }

    fn advance_to(&mut self, _at: f64) {}

    fn channel_stats(&self) -> ChannelStats {
        self.replicas[0].channel.stats()
    }
}

/// Redis's figures before a run, to take the difference after it.
#[derive(Debug)]
pub struct RedisWatch {
    target: SyncTarget,
    before: RedisSample,
    started: Instant,
}

impl RedisWatch {
    /// Samples Redis now (`None` without sync).
    pub fn start(target: Option<&SyncTarget>) -> Result<Option<Self>, RedisError> {
        let Some(target) = target else { return Ok(None) };
        Ok(Some(Self { target: target.clone(), before: redis_server::sample(&target.url)?, started: Instant::now() }))
    }

    /// The usage since `start`; deletes the run's stream.
    pub fn finish(self, decisions: usize) -> Result<RedisUsage, RedisError> {
        let wall = self.started.elapsed().as_secs_f64();
        let after = redis_server::sample(&self.target.url)?;
        let entries = redis_server::stream_len(&self.target.url, &self.target.key)?;
        redis_server::delete(&self.target.url, &self.target.key)?;
        let cpu_s = (after.cpu_s - self.before.cpu_s).max(0.0);
        let decisions_per_s = if wall > 0.0 { decisions as f64 / wall } else { 0.0 };
        let growth = after.used_memory as i64 - self.before.used_memory as i64;
        Ok(RedisUsage {
            cpu_s,
            decisions_per_s,
            cpu_cores_per_1k_dps: if decisions_per_s > 0.0 { cpu_s / wall / (decisions_per_s / 1e3) } else { 0.0 },
            memory_growth_bytes: growth,
            stream_entries: entries,
            bytes_per_entry: if entries > 0 { growth as f64 / entries as f64 } else { 0.0 },
        })
    }
}

/// Runs `policy` on the scenario through `n` replicas (sharing through `sync` when given),
/// each decision converged before the next.
pub fn run(
    scenario: &Scenario,
    policy: Policy,
    n: usize,
    sync: Option<&SyncTarget>,
) -> Result<ReplicaReport, ReplicaRunError> {
    let requests = workload::generate(&scenario.workload);
    let seed = scenario.workload.seed.wrapping_add(policy as u64);
    let mut fabric = Replicated::new(policy, &scenario.fleet, seed, n, sync, true)?;
    let watch = RedisWatch::start(sync)?;
    let wall = Instant::now();
    let result = engine::run(policy, &mut fabric, &scenario.fleet, &requests, &mut |_| {})?;
    let wall = wall.elapsed().as_secs_f64();
    let redis = watch.map(|w| w.finish(requests.len())).transpose()?;
    Ok(ReplicaReport {
        replicas: n.max(1),
        sync: sync.is_some(),
        run: report::summarize(&result, scenario.fleet.pods, wall),
        sync_stats: fabric.sync_stats(),
        redis,
    })
}

/// Routes the scenario's prompts (cycled) round robin through `n` replicas at `rate`
/// decisions per wall second for `seconds`, over idle pods, without waiting for convergence;
/// at the end waits (bounded) until every update was applied, then reads the lag.
pub fn rate_run(
    scenario: &Scenario,
    policy: Policy,
    n: usize,
    sync: Option<&SyncTarget>,
    rate: f64,
    seconds: f64,
) -> Result<RateReport, ReplicaRunError> {
    let requests = workload::generate(&scenario.workload);
    let seed = scenario.workload.seed.wrapping_add(policy as u64);
    let mut fabric = Replicated::new(policy, &scenario.fleet, seed, n, sync, false)?;
    let pods: Vec<Pod> = (0..scenario.fleet.pods).map(|_| Pod::new(scenario.fleet.pod)).collect();
    fabric.publish_load(&pods);
    let rate = rate.max(1.0);
    let total = if requests.is_empty() { 0 } else { (rate * seconds.max(0.0)).round() as usize };
    let mut times = Vec::with_capacity(total);
    let watch = RedisWatch::start(sync)?;
    let start = Instant::now();
    for k in 0..total {
        let due = start + Duration::from_secs_f64(k as f64 / rate);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            // Open-loop pacing of the tool's own load, not a wait for an effect.
            std::thread::sleep(wait);
        }
        if k % 1024 == 0 {
            // Keep the load fresh against the scorers' staleness threshold.
            fabric.publish_load(&pods);
        }
        let (_, secs) = fabric.route(&requests[k % requests.len()], &pods)?;
        times.push(secs);
    }
    let elapsed = start.elapsed().as_secs_f64();
    fabric.converge()?;
    let redis = watch.map(|w| w.finish(times.len())).transpose()?;
    let mean = if times.is_empty() { 0.0 } else { times.iter().sum::<f64>() / times.len() as f64 };
    times.sort_by(f64::total_cmp);
    Ok(RateReport {
        replicas: n.max(1),
        sync: sync.is_some(),
        policy: policy.name(),
        target_rate: rate,
        decisions: times.len(),
        achieved_rate: if elapsed > 0.0 { times.len() as f64 / elapsed } else { 0.0 },
        decision_mean_us: mean * 1e6,
        decision_p50_us: crate::bench::percentile(&times, 50.0) * 1e6,
        decision_p99_us: crate::bench::percentile(&times, 99.0) * 1e6,
        sync_stats: fabric.sync_stats(),
        redis,
    })
}
