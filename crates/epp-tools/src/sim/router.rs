//! The routing policies compared by the simulator. Four run epp's real scheduler, built from
//! config text by `app::load_config` over the simulator's `EndpointStore`: `random`
//! (random-picker), `load` (queue + KV-utilisation scorers, 1:1), `approximate` (the default
//! config: queue 2, KV 2, prefix 3 over the routing-history producer) and `precise` (the
//! precise producer, fed the simulated KV events through its index; prefix 2 : KV 1 :
//! queue 1 as in llm-d). Two are harness-side: `round-robin`, and `oracle` (the pod with the
//! longest prefix actually cached right now, ties broken by the smallest load).

use std::sync::Arc;
use std::time::Instant;

use super::pod::Pod;
use super::workload::SimRequest;
use epp::app::load_config;
use epp::config::{ConfigErrors, LoadedConfig};
use epp::endpoints::store::EndpointStore;
use epp::framework::ScheduleError;
use epp::framework::build::BuildContext;
use epp::framework::handles::RandomSource;
use epp::framework::replica::ReplicaHandle;
use epp::kvcache::PrefixIndex;
use epp::request::InferenceRequest;
use epp::request::openai::{ApiKind, ParsedBody, Prompt};
use epp::scheduling::metrics::SchedulerMetrics;

/// Model name of every simulated request (also the KV-event topic model).
pub const MODEL: &str = "sim-model";

/// A routing policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// epp's random-picker.
    Random,
    /// Harness-side round robin.
    RoundRobin,
    /// Queue + KV-utilisation scorers.
    Load,
    /// The default config (approximate prefix from routing history).
    Approximate,
    /// Precise prefix from the simulated KV events.
    Precise,
    /// Perfect knowledge of every pod's cache.
    Oracle,
}

impl Policy {
    /// Every policy, in report order.
    pub const ALL: [Policy; 6] =
        [Policy::Random, Policy::RoundRobin, Policy::Load, Policy::Approximate, Policy::Precise, Policy::Oracle];

    /// Report name.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Random => "random",
            Policy::RoundRobin => "round-robin",
            Policy::Load => "load",
            Policy::Approximate => "approximate",
            Policy::Precise => "precise",
            Policy::Oracle => "oracle",
        }
    }

    /// Config text of the policies that run the real scheduler (`None`: default config).
    /// `discover_pods` makes the precise producer subscribe to each endpoint's
    /// `kvEventsEndpoint` (wire mode); otherwise its index is fed directly.
    pub fn config_text(self, block_size: usize, discover_pods: bool) -> Option<String> {
        let kv_events = if discover_pods { "\n    kvEventsConfig: {discoverPods: true}" } else { "" };
        let head = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n";
        match self {
            Policy::Random => Some(format!(
                "{head}plugins:\n- type: random-picker\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: random-picker\n"
            )),
            Policy::Load => Some(format!(
                "{head}plugins:\n- type: queue-scorer\n- type: kv-cache-utilization-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n  - {{pluginRef: queue-scorer, weight: 1}}\n  - {{pluginRef: kv-cache-utilization-scorer, weight: 1}}\n"
            )),
            Policy::Precise => Some(format!(
                "{head}plugins:\n- type: precise-prefix-cache-producer\n  parameters:\n    tokenProcessorConfig: {{blockSizeTokens: {block_size}}}{kv_events}\n- type: prefix-cache-scorer\n  parameters: {{prefixMatchInfoProducerName: precise-prefix-cache-producer}}\n- type: queue-scorer\n- type: kv-cache-utilization-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n  - {{pluginRef: prefix-cache-scorer, weight: 2}}\n  - {{pluginRef: kv-cache-utilization-scorer, weight: 1}}\n  - {{pluginRef: queue-scorer, weight: 1}}\n"
            )),
            Policy::Approximate | Policy::RoundRobin | Policy::Oracle => None,
        }
    }

    /// Whether the policy runs epp's scheduler (the others are harness-side).
    pub fn uses_scheduler(self) -> bool {
        matches!(self, Policy::Random | Policy::Load | Policy::Approximate | Policy::Precise)
    }
}

/// Why routing failed.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    /// The policy's config did not load.
    #[error("policy {policy}: config: {source}")]
    Config {
        /// Policy.
        policy: &'static str,
        /// Errors.
        #[source]
        source: ConfigErrors,
    },
    /// The scheduler returned an error.
    #[error("scheduling request {request}: {source}")]
    Schedule {
        /// Request id.
        request: usize,
        /// Error.
        #[source]
        source: ScheduleError,
    },
    /// Wire mode: the ext_proc call to epp failed.
    #[error("routing request {request} through epp")]
    Wire {
        /// Request id.
        request: usize,
        /// Error.
        #[source]
        source: super::wire::WireError,
    },
    /// Replica mode: the replicas did not apply each other's updates in time.
    #[error("replica sync: {0}")]
    Sync(String),
    /// The scheduler chose an endpoint the simulator does not know.
    #[error("scheduler chose unknown endpoint {0:?}")]
    UnknownEndpoint(String),
}

/// A policy bound to one run's endpoint store.
#[derive(Debug)]
pub struct Router {
    policy: Policy,
    store: EndpointStore,
    loaded: Option<LoadedConfig>,
    index: Option<Arc<PrefixIndex>>,
    next: usize,
}

impl Router {
    /// Builds the policy (loading its config when it runs the real scheduler).
    /// Pickers draw from `random`.
    pub fn new(
        policy: Policy,
        store: EndpointStore,
        block_size: usize,
        random: RandomSource,
    ) -> Result<Self, RouteError> {
        Self::with_replica(policy, store, block_size, random, ReplicaHandle::default())
    }

    /// As [`Router::new`], the plugins sharing what they learn through `replica` (one
    /// replica of several, `sim::replicas`).
    pub fn with_replica(
        policy: Policy,
        store: EndpointStore,
        block_size: usize,
        random: RandomSource,
        replica: ReplicaHandle,
    ) -> Result<Self, RouteError> {
        let mut loaded = None;
        let mut index = None;
        if policy.uses_scheduler() {
            let cx = BuildContext { endpoints: store.clone(), random, replica, ..Default::default() };
            let text = policy.config_text(block_size, false);
            let l = load_config(text.as_deref(), &cx, SchedulerMetrics::detached())
                .map_err(|source| RouteError::Config { policy: policy.name(), source })?;
            index = cx.indexes.first_prefix_index();
            loaded = Some(l);
        }
        Ok(Self { policy, store, loaded, index, next: 0 })
    }

    /// The prefix index fed with KV events (precise policy only).
    pub fn kv_index(&self) -> Option<&Arc<PrefixIndex>> {
        self.index.as_ref()
    }

    /// Picks a pod index for `req`; also returns the wall time of the decision in seconds
    /// (candidates + `Scheduler::schedule`, or the harness pick; building the request is
    /// not timed).
    pub fn route(&mut self, req: &SimRequest, pods: &[Pod]) -> Result<(usize, f64), RouteError> {
        let request = self.loaded.as_ref().map(|_| inference_request(req));
        let start = Instant::now();
        let chosen = match (&self.loaded, request) {
            (Some(loaded), Some(request)) => {
                let decision = loaded
                    .scheduler
                    .schedule(&request, self.store.candidates())
                    .map_err(|source| RouteError::Schedule { request: req.id, source })?;
                let target = decision
                    .result
                    .primary()
                    .and_then(|p| p.targets.first())
                    .map(|c| c.endpoint.id.to_string())
                    .unwrap_or_default();
                pod_index(&target).filter(|i| *i < pods.len()).ok_or(RouteError::UnknownEndpoint(target))?
            }
            _ if self.policy == Policy::Oracle => oracle(req, pods),
            _ => {
                self.next += 1;
                (self.next - 1) % pods.len().max(1)
            }
        };
        Ok((chosen, start.elapsed().as_secs_f64()))
    }
}

/// Endpoint id of pod `i`.
pub fn pod_name(i: usize) -> String {
    format!("pod-{i}")
}

fn pod_index(id: &str) -> Option<usize> {
    id.strip_prefix("pod-")?.parse().ok()
}

/// A completions request with token-id prompt, as `request::openai` would parse it.
fn inference_request(req: &SimRequest) -> InferenceRequest {
    let body = ParsedBody {
        model: MODEL.into(),
        api: ApiKind::Completions,
        prompt: Prompt::TokenIds(vec![req.prompt.to_vec()]),
        cache_salt: None,
        stream: false,
        max_output_tokens: Some(req.output_len as u64),
    };
    InferenceRequest {
        request_id: format!("sim-{}", req.id),
        incoming_model: MODEL.into(),
        target_model: MODEL.into(),
        body_len: req.prompt.len() * 6,
        body: Some(body),
        ..Default::default()
    }
}

/// Longest cached prefix; ties by fewest waiting + running requests, then lowest index.
fn oracle(req: &SimRequest, pods: &[Pod]) -> usize {
    let mut best = (0usize, usize::MAX, 0usize);
    // Every pod has the same block size: hash the prompt once.
    let hashes = pods.first().map(|p| super::kv::chain(&req.prompt, p.block_size())).unwrap_or_default();
    for (i, pod) in pods.iter().enumerate() {
        let cached = pod.cached_prefix_blocks(&hashes);
        let load = pod.load();
        let busy = load.waiting + load.running;
        if i == 0 || cached > best.0 || (cached == best.0 && busy < best.1) {
            best = (cached, busy, i);
        }
    }
    best.2
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::pod::PodConfig;
    use crate::sim::timing::StepModel;

    fn pods(n: usize) -> Vec<Pod> {
        (0..n)
            .map(|_| {
                Pod::new(PodConfig {
                    block_size: 4,
                    kv_blocks: 64,
                    max_num_seqs: 8,
                    max_batched_tokens: 64,
                    model: StepModel::default(),
                })
            })
            .collect()
    }

    fn req(id: usize, prompt: Vec<u32>) -> SimRequest {
        SimRequest { id, arrival: 0.0, prompt: prompt.into(), output_len: 2 }
    }

    #[test]
    fn oracle_follows_the_cache_and_round_robin_rotates() {
        let mut fleet = pods(3);
        fleet[2].enqueue(req(0, (0..16).collect()));
        while fleet[2].has_work() {
            fleet[2].step();
        }
        let store = EndpointStore::new();
        store.replace(crate::bench::synthetic::endpoints(3));
        let mut oracle = Router::new(Policy::Oracle, store.clone(), 4, RandomSource::thread()).expect("builds");
        assert_eq!(oracle.route(&req(1, (0..16).collect()), &fleet).expect("routes").0, 2);
        assert_eq!(
            oracle.route(&req(2, (50..66).collect()), &fleet).expect("routes").0,
            0,
            "no cache anywhere: least loaded, lowest index"
        );
        let mut rr = Router::new(Policy::RoundRobin, store, 4, RandomSource::thread()).expect("builds");
        let picks: Vec<usize> = (0..4).map(|i| rr.route(&req(i, vec![1]), &fleet).expect("routes").0).collect();
        assert_eq!(picks, vec![0, 1, 2, 0]);
    }

    #[test]
    fn every_scheduler_policy_config_loads() {
        for policy in Policy::ALL {
            let store = EndpointStore::new();
            store.replace(crate::bench::synthetic::endpoints(2));
            let router = Router::new(policy, store, 16, RandomSource::thread()).expect("config loads");
            assert_eq!(router.kv_index().is_some(), policy == Policy::Precise);
        }
    }

    #[test]
    fn precise_follows_the_simulated_kv_events() {
        let mut fleet = pods(3);
        let prompt: Vec<u32> = (100..164).collect();
        fleet[1].enqueue(req(0, prompt.clone()));
        let store = EndpointStore::new();
        store.replace(crate::bench::synthetic::endpoints(3));
        let mut precise = Router::new(Policy::Precise, store, 4, RandomSource::thread()).expect("builds");
        let index = precise.kv_index().cloned().expect("precise has an index");
        while fleet[1].has_work() {
            let out = fleet[1].step();
            let batch = epp::kvcache::events::EventBatch { events: out.events, ..Default::default() };
            index.apply(&pod_name(1), MODEL, &batch);
        }
        for id in 1..6 {
            assert_eq!(precise.route(&req(id, prompt.clone()), &fleet).expect("routes").0, 1);
        }
    }
}
