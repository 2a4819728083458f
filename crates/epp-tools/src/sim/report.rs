//! Per-policy metrics of a run and their rendering: prefix hit rate (cached prompt tokens ÷
//! prompt tokens), simulated TTFT p50/p90, output throughput, load imbalance (max ÷ mean
//! requests per pod), regret against the oracle's hit rate, the wall time of the routing
//! decisions (epp's real scheduler, or the harness for round-robin and oracle), the KV-event
//! path's losses and gaps, and the simulator's own wall time and speed.

use std::fmt::Write as _;

use serde::Serialize;

use super::channel::ChannelStats;
use super::engine::RunResult;
use crate::bench::percentile;

/// One policy's results.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PolicyReport {
    /// Policy name.
    pub policy: &'static str,
    /// Requests completed.
    pub completed: usize,
    /// Cached prompt tokens ÷ prompt tokens.
    pub hit_rate: f64,
    /// Median simulated time to first token, seconds.
    pub ttft_p50_s: f64,
    /// 90th percentile TTFT, seconds.
    pub ttft_p90_s: f64,
    /// Output tokens per simulated second (first arrival to last completion).
    pub output_tok_per_s: f64,
    /// Max ÷ mean requests per pod.
    pub imbalance: f64,
    /// Oracle hit rate minus this hit rate (points of 1.0); `None` without an oracle run.
    pub regret: Option<f64>,
    /// Mean wall time of one routing decision, microseconds.
    pub decision_us: f64,
    /// Median wall time of one routing decision, microseconds.
    pub decision_p50_us: f64,
    /// 99th percentile wall time of one routing decision, microseconds.
    pub decision_p99_us: f64,
    /// Requests per pod.
    pub per_pod: Vec<usize>,
    /// Mean number of distinct pods each prefix group (first prompt block) was sent to:
    /// 1 keeps every group on one pod; higher duplicates prefixes across pods.
    pub pods_per_group: f64,
    /// KV blocks evicted over the fleet.
    pub evictions: u64,
    /// The KV-event path's counters (all zero for policies without an index).
    pub kv_events: ChannelStats,
    /// Wall time of the whole simulated run, seconds.
    pub sim_wall_s: f64,
    /// Requests routed per wall second of the run (simulator speed, not epp's).
    pub decisions_per_s: f64,
}

/// Summarises a run (`pods` pods) that took `wall_s` wall seconds.
pub fn summarize(run: &RunResult, pods: usize, wall_s: f64) -> PolicyReport {
    let done: Vec<_> = run.records.iter().filter(|r| r.finished.is_some()).collect();
    let prompt: usize = run.records.iter().map(|r| r.prompt_tokens).sum();
    let cached: usize = run.records.iter().map(|r| r.cached_tokens).sum();
    let mut ttft: Vec<f64> = run.records.iter().filter_map(|r| Some(r.first_token? - r.arrival)).collect();
    ttft.sort_by(f64::total_cmp);
    let start = run.records.iter().map(|r| r.arrival).fold(f64::INFINITY, f64::min);
    let end = done.iter().filter_map(|r| r.finished).fold(0.0, f64::max);
    let output: usize = done.iter().map(|r| r.output_tokens).sum();
    let mut per_pod = vec![0usize; pods];
    for r in &run.records {
        if let Some(n) = per_pod.get_mut(r.pod) {
            *n += 1;
        }
    }
    let mut decisions = run.decision_seconds.clone();
    decisions.sort_by(f64::total_cmp);
    let mean = run.records.len() as f64 / pods.max(1) as f64;
    let max = per_pod.iter().copied().max().unwrap_or(0) as f64;
    PolicyReport {
        policy: run.policy.name(),
        completed: done.len(),
        hit_rate: if prompt == 0 { 0.0 } else { cached as f64 / prompt as f64 },
        ttft_p50_s: percentile(&ttft, 50.0),
        ttft_p90_s: percentile(&ttft, 90.0),
        output_tok_per_s: if end > start { output as f64 / (end - start) } else { 0.0 },
        imbalance: if mean > 0.0 { max / mean } else { 0.0 },
        regret: None,
        decision_us: if run.decision_seconds.is_empty() {
            0.0
        } else {
            run.decision_seconds.iter().sum::<f64>() / run.decision_seconds.len() as f64 * 1e6
        },
        decision_p50_us: percentile(&decisions, 50.0) * 1e6,
        decision_p99_us: percentile(&decisions, 99.0) * 1e6,
        per_pod,
        pods_per_group: pods_per_group(&run.records),
        evictions: run.evictions,
        kv_events: run.channel,
        sim_wall_s: wall_s,
        decisions_per_s: if wall_s > 0.0 { run.decision_seconds.len() as f64 / wall_s } else { 0.0 },
    }
}

fn pods_per_group(records: &[super::engine::RequestRecord]) -> f64 {
    let mut pairs: Vec<(u64, usize)> = records.iter().map(|r| (r.group, r.pod)).collect();
    pairs.sort_unstable();
    pairs.dedup();
    let groups = pairs.windows(2).filter(|w| w[0].0 != w[1].0).count() + usize::from(!pairs.is_empty());
    if groups == 0 { 0.0 } else { pairs.len() as f64 / groups as f64 }
}

/// Fills `regret` from the oracle's row, when there is one.
pub fn add_regret(reports: &mut [PolicyReport]) {
    let Some(oracle) = reports.iter().find(|r| r.policy == "oracle").map(|r| r.hit_rate) else { return };
    for r in reports {
        r.regret = Some(oracle - r.hit_rate);
    }
}

/// The comparison table.
pub fn table(reports: &[PolicyReport]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<12} {:>6} {:>8} {:>10} {:>10} {:>10} {:>9} {:>8} {:>8} {:>12} {:>8}",
        "policy",
        "done",
        "hit",
        "ttft p50",
        "ttft p90",
        "out tok/s",
        "imbalance",
        "pods/grp",
        "regret",
        "decision µs",
        "wall s"
    );
    for r in reports {
        let regret = r.regret.map_or_else(|| "-".to_string(), |g| format!("{:.1}pt", g * 100.0));
        let _ = writeln!(
            s,
            "{:<12} {:>6} {:>7.1}% {:>9.3}s {:>9.3}s {:>10.0} {:>9.2} {:>8.2} {:>8} {:>12.1} {:>8.2}",
            r.policy,
            r.completed,
            r.hit_rate * 100.0,
            r.ttft_p50_s,
            r.ttft_p90_s,
            r.output_tok_per_s,
            r.imbalance,
            r.pods_per_group,
            regret,
            r.decision_us,
            r.sim_wall_s
        );
    }
    s
}

/// Requests per endpoint of one policy, one line.
pub fn per_pod_line(r: &PolicyReport) -> String {
    let parts: Vec<String> = r.per_pod.iter().enumerate().map(|(i, n)| format!("pod-{i}:{n}")).collect();
    format!("{:<12} {}", r.policy, parts.join(" "))
}
