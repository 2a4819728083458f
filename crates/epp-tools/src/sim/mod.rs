//! The fleet simulator (`epp sim`, `epp demo`): a deterministic discrete-event simulation of
//! vLLM pods, driven by epp's real scheduler in process, that compares routing policies on
//! the same request stream.
//!
//! Module map (one job each):
//! - `workload`: the seeded request stream (shared-prefix groups, SGLang generated shared
//!   prefix, multi-turn chat); `preset`: named workloads and fleets.
//! - `kv`: a pod's KV block pool: hash-chained blocks, refcounts, LRU free queue, KV events.
//! - `timing`: step-time model (Dynamo mocker polynomials).
//! - `pod`: a pod: FCFS queue, running batch, chunked prefill, admission by reservation.
//! - `router`: the policies (real scheduler from config text, or harness-side).
//! - `engine`: the event loop of one run in simulated time, over a `Fabric`.
//! - `channel`: the KV-event path's delay, jitter and loss, and the gap purge.
//! - `inproc`: the in-process fabric (scheduler, endpoint store, index, channel).
//! - `sweep`: precise routing over a ladder of KV-event delays and losses.
//! - `wire`: wire mode: the pods behind real `/metrics` HTTP servers and ZeroMQ publishers,
//!   routed by a real epp over ext_proc on loopback.
//! - `replicas`: `--replicas N`: N schedulers, each with its own state, behind a round-robin
//!   gateway, sharing state through Redis with epp's replica sync (or not); `redis_server`
//!   starts the tool's own redis-server and reads Redis's CPU and memory; `sync_stats` sums
//!   the replicas' sync metrics (messages, lag quantiles).
//! - `report`: per-policy metrics and tables.
//! - `command`: the `epp sim` / `epp demo` entry points.
//!
//! Data flow of a run:
//! ```text
//! workload --SimRequest--> router (Scheduler::schedule over EndpointStore candidates) --pod-->
//!   pod::step --load--> EndpointStore (every scrape interval)
//!            --KV events (BlockStored/BlockRemoved)--> channel (delay, jitter, loss, gap purge)
//!                                                      --> PrefixIndex::apply
//!            --admissions, first tokens, completions--> report
//! ```
//! Not here: preemption, CPU-offload tiers.

pub mod channel;
pub mod command;
pub mod engine;
pub mod inproc;
pub mod kv;
pub mod pod;
pub mod preset;
pub mod redis_server;
pub mod replica_command;
pub mod replicas;
pub mod report;
pub mod router;
pub mod sweep;
pub mod sync_stats;
pub mod timing;
pub mod wire;
pub mod workload;

pub use channel::ChannelConfig;
pub use engine::{Fabric, FleetConfig, Progress, RunResult};
pub use pod::PodConfig;
pub use preset::Preset;
pub use report::PolicyReport;
pub use router::{Policy, RouteError};
pub use timing::StepModel;
pub use workload::{WorkloadKind, WorkloadSpec};

/// A workload on a fleet.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Scenario {
    /// The request stream.
    pub workload: WorkloadSpec,
    /// The pods.
    pub fleet: FleetConfig,
}

/// KV blocks per pod such that the workload's distinct prefixes (`groups × (system + users ×
/// question)` tokens) fill `fraction` of the fleet's KV cache (llm-d's capacity sizing).
pub fn kv_blocks_for(workload: &WorkloadSpec, pods: usize, block_size: usize, fraction: f64) -> usize {
    let resident = workload.groups * (workload.system_tokens + workload.users * workload.question_tokens);
    let per_pod = resident as f64 / fraction.max(1e-3) / pods.max(1) as f64;
    (per_pod / block_size.max(1) as f64).ceil().max(1.0) as usize
}

/// Runs every policy in `policies` on the same stream; `progress` sees each run's progress.
/// Picker tie-breaks draw from an RNG seeded from the workload seed (handed to the build as
/// a `RandomSource`), so equal inputs give equal reports (apart from the measured wall times).
pub fn run_policies(
    scenario: &Scenario,
    policies: &[Policy],
    progress: &mut dyn FnMut(Policy, Progress),
) -> Result<Vec<PolicyReport>, RouteError> {
    let requests = workload::generate(&scenario.workload);
    let mut reports = Vec::with_capacity(policies.len());
    for policy in policies {
        let seed = scenario.workload.seed.wrapping_add(*policy as u64);
        let wall = std::time::Instant::now();
        let run = inproc::InProcess::new(*policy, &scenario.fleet, seed)
            .and_then(|mut f| engine::run(*policy, &mut f, &scenario.fleet, &requests, &mut |p| progress(*policy, p)));
        let wall = wall.elapsed().as_secs_f64();
        reports.push(report::summarize(&run?, scenario.fleet.pods, wall));
    }
    report::add_regret(&mut reports);
    Ok(reports)
}
