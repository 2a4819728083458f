//! The command line of `epp-tools`: `sim`, `demo` and `bench {decision, extproc, index}`, with
//! the flags they had as `epp` subcommands.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// epp-tools: the fleet simulator and the benchmarks of epp (they drive the epp library).
#[derive(Debug, Parser)]
#[command(name = "epp-tools", version, about)]
pub struct Cli {
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Benchmarks.
    Bench {
        /// What to benchmark.
        #[command(subcommand)]
        what: BenchCommand,
    },
    /// Fleet simulator: compares routing policies on simulated vLLM pods (deterministic,
    /// simulated time, epp's real scheduler in process).
    Sim(SimArgs),
    /// A small simulator preset with live progress and per-endpoint tables.
    Demo {
        /// RNG seed.
        #[arg(long, default_value_t = 7)]
        seed: u64,
    },
}

/// Flags of `epp-tools sim` (defaults: a CI-sized llm-d shared-prefix run).
#[derive(Clone, Debug, clap::Args)]
pub struct SimArgs {
    /// Workload family.
    #[arg(long, value_enum, default_value = "shared-prefix")]
    pub workload: crate::sim::WorkloadKind,
    /// Pods.
    #[arg(long, default_value_t = 8)]
    pub pods: usize,
    /// Prefix groups (system prompts).
    #[arg(long, default_value_t = 32)]
    pub groups: usize,
    /// Users per group (multi-turn: users in total).
    #[arg(long, default_value_t = 5)]
    pub users: usize,
    /// System prompt tokens.
    #[arg(long, default_value_t = 2000)]
    pub system_tokens: usize,
    /// Question tokens.
    #[arg(long, default_value_t = 400)]
    pub question_tokens: usize,
    /// Output tokens per request.
    #[arg(long, default_value_t = 200)]
    pub output_tokens: usize,
    /// Turns per conversation (multi-turn).
    #[arg(long, default_value_t = 5)]
    pub turns: usize,
    /// Arrival rate (requests per simulated second).
    #[arg(long, default_value_t = 20.0)]
    pub qps: f64,
    /// Rate at the end of the run (linear rise from --qps); fixed rate when absent.
    #[arg(long)]
    pub qps_end: Option<f64>,
    /// Requests.
    #[arg(long, default_value_t = 800)]
    pub requests: usize,
    /// RNG seed.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Policies to compare (comma-separated); `all` when absent.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub policy: Vec<crate::sim::Policy>,
    /// Tokens per KV block.
    #[arg(long, default_value_t = 16)]
    pub block_size: usize,
    /// KV blocks per pod; default: the workload's prefixes fill --kv-fill of the fleet.
    #[arg(long)]
    pub kv_blocks: Option<usize>,
    /// Fraction of fleet KV the distinct prefixes occupy when --kv-blocks is absent.
    #[arg(long, default_value_t = 0.73)]
    pub kv_fill: f64,
    /// Largest running batch per pod.
    #[arg(long, default_value_t = 256)]
    pub max_num_seqs: usize,
    /// Token budget per engine step.
    #[arg(long, default_value_t = 8192)]
    pub max_batched_tokens: usize,
    /// Multiplier on step times (2 = a GPU half as fast).
    #[arg(long, default_value_t = 1.0)]
    pub step_scale: f64,
    /// Extra multiplier on prefill time only (20 = Qwen3-32B TP2's cold 10k-token prefill).
    #[arg(long, default_value_t = 1.0)]
    pub prefill_scale: f64,
    /// KV-event delivery delay, milliseconds.
    #[arg(long, visible_alias = "kv-delay", alias = "event-delay-ms", default_value_t = 10.0)]
    pub kv_delay_ms: f64,
    /// Extra per-batch KV-event delay, uniform in [0, this), milliseconds (order kept).
    #[arg(long, visible_alias = "kv-jitter", default_value_t = 0.0)]
    pub kv_jitter_ms: f64,
    /// Probability that a KV-event batch is lost (the gap purges the pod from the index).
    #[arg(long, default_value_t = 0.0)]
    pub kv_loss: f64,
    /// Instead of the policy table, rerun precise over a ladder of KV-event delays and losses.
    #[arg(long)]
    pub kv_sweep: bool,
    /// Wire mode: route through a real epp on loopback (ext_proc, ZeroMQ, HTTP scrapes),
    /// paced by the wall clock; keep the fleet and run small.
    #[arg(long)]
    pub wire: bool,
    /// Wire mode: simulated seconds per wall second.
    #[arg(long, default_value_t = 1.0)]
    pub wire_speed: f64,
    /// Wire mode: run each epp replica as its own `epp` OS process (the binary of
    /// --epp-bin) instead of in this process.
    #[arg(long, requires = "wire")]
    pub wire_processes: bool,
    /// With --wire-processes: the `epp` binary (default: `epp` beside this executable).
    #[arg(long, env = "EPP_BIN", requires = "wire_processes")]
    pub epp_bin: Option<std::path::PathBuf>,
    /// A named workload and fleet; replaces the workload, pod, rate and KV-size flags.
    #[arg(long, value_enum)]
    pub preset: Option<crate::sim::Preset>,
    /// Load-metrics refresh period, milliseconds.
    #[arg(long, default_value_t = 50.0)]
    pub scrape_interval_ms: f64,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Replica counts to run behind a round-robin gateway (e.g. `1,2,4`); each replica is a
    /// scheduler with its own state (docs/sim.md#replicas). Default policy: approximate.
    #[arg(long, value_delimiter = ',')]
    pub replicas: Vec<usize>,
    /// With `--replicas`: share state through this Redis (`redis://...`), or `auto` to start
    /// a redis-server on loopback; every count then runs without and with sync, alternating.
    #[arg(long)]
    pub replica_sync: Option<String>,
    /// With `--replica-sync`: how long each replica's updates collect before they go out as
    /// one batch (epp's `--replica-sync-batch-window`).
    #[arg(long, default_value = "5ms", value_parser = humantime::parse_duration)]
    pub replica_sync_batch_window: std::time::Duration,
    /// With `--replicas`: repeat each without/with-sync pair this many times.
    #[arg(long, default_value_t = 1)]
    pub replica_rounds: usize,
    /// With `--replicas`: instead of the fleet simulation, route the workload's prompts at
    /// this many decisions per wall second over idle pods (sync lag and Redis cost under load).
    #[arg(long)]
    pub decision_rate: Option<f64>,
    /// With `--decision-rate`: seconds per run.
    #[arg(long, default_value_t = 10.0)]
    pub decision_seconds: f64,
}

/// Benchmark subcommands.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// In-process scheduling decisions over synthetic endpoints.
    Decision {
        /// Body size in bytes.
        #[arg(long, default_value_t = 10_000)]
        body_bytes: usize,
        /// Endpoints.
        #[arg(long, default_value_t = 8)]
        endpoints: usize,
        /// Decisions to time.
        #[arg(long, default_value_t = 20_000)]
        iterations: usize,
    },
    /// Open-loop ext_proc load generator: fixed-rate requests, each its own ext_proc stream,
    /// against an in-process epp with simulated pods (default) or `--target`.
    Extproc(crate::bench::extproc::args::ExtprocArgs),
    /// The no-op ext_proc floor server of `bench extproc --floor`, standalone (h2c), for
    /// measuring it in its own process (`--target`, callgrind, CPU quotas). Runs until Ctrl-C.
    FloorServer {
        /// Listen address.
        #[arg(long, default_value = "127.0.0.1:9102")]
        listen: std::net::SocketAddr,
        /// Worker threads.
        #[arg(long, default_value_t = 2)]
        threads: usize,
    },
    /// Replays a KV-event workload written by `workload.py` into the prefix index, checking
    /// every query answer (exit code 1 on a mismatch).
    Index {
        /// Directory with the workload files.
        #[arg(long)]
        workload: PathBuf,
        /// Index keys: `request` (epp's default: request keys computed from token ids, with
        /// per-source engine maps; each block's 16 tokens are derived from its hash) or
        /// `engine` (the hashes themselves).
        #[arg(long, value_enum, default_value_t = crate::bench::index::ReplayKeys::Request)]
        key_mode: crate::bench::index::ReplayKeys,
        /// Request-key algorithm of `request` mode: `epp-xxh3` (epp's default for an
        /// in-memory index), `cbor-fnv` (llm-d's, the default with a Redis index) or `xxh64`.
        #[arg(long, default_value = "epp-xxh3")]
        key_algo: epp::kvcache::RequestKeyAlgo,
    },
}
