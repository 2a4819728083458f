//! `sim --replicas 1,2,4 [--replica-sync URL|auto] [--wire] [--decision-rate R]`: flags ->
//! replica runs (each count without sync, then with it, `--replica-rounds` times: the pairs
//! alternate so both sides see the same machine load) -> a table or JSON on stdout.

use std::fmt::Write as _;

use super::redis_server::RedisChild;
use super::replicas::{self, RateReport, ReplicaReport, SyncTarget};
use super::{Policy, Scenario};
use crate::cli::SimArgs;

/// Runs the replica comparison the flags describe.
pub fn run(args: &SimArgs, scenario: &Scenario) -> anyhow::Result<()> {
    // `auto`: the tool's own redis-server, alive until the last run is done.
    let (child, url) = match args.replica_sync.as_deref() {
        Some("auto") => {
            let child = RedisChild::start()?;
            let url = child.url().to_string();
            (Some(child), Some(url))
        }
        other => (None, other.map(str::to_string)),
    };
    let policies: Vec<Policy> = if args.policy.is_empty() { vec![Policy::Approximate] } else { args.policy.clone() };
    let modes: Vec<bool> = if url.is_some() { vec![false, true] } else { vec![false] };
    let mut runs = 0usize;
    let mut target = |sync: bool| {
        runs += 1;
        let key = format!("epp-sim:{}:{runs}", std::process::id());
        sync.then(|| SyncTarget {
            batch_window: args.replica_sync_batch_window,
            ..SyncTarget::new(url.clone().unwrap_or_default(), key)
        })
    };
    let launch = super::command::wire_launch(args)?;
    let mut fleet_rows: Vec<ReplicaReport> = Vec::new();
    let mut rate_rows: Vec<RateReport> = Vec::new();
    for &policy in &policies {
        for &n in &args.replicas {
            for _ in 0..args.replica_rounds.max(1) {
                for &sync in &modes {
                    let t = target(sync);
                    let t = t.as_ref();
                    match (args.decision_rate, args.wire) {
                        (Some(rate), _) => {
                            rate_rows.push(replicas::rate_run(scenario, policy, n, t, rate, args.decision_seconds)?)
                        }
                        (None, true) => fleet_rows.push(super::wire::run_replicas(
                            scenario,
                            policy,
                            n,
                            t,
                            args.wire_speed,
                            &launch,
                        )?),
                        (None, false) => fleet_rows.push(replicas::run(scenario, policy, n, t)?),
                    }
                }
            }
        }
    }
    drop(child);
    if args.json {
        let out = serde_json::json!({"scenario": scenario, "replica_runs": fleet_rows, "rate_runs": rate_rows});
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("{}", super::command::headline(scenario));
        if !fleet_rows.is_empty() {
            print!("{}", fleet_table(&fleet_rows));
        }
        if !rate_rows.is_empty() {
            print!("{}", rate_table(&rate_rows));
        }
    }
    Ok(())
}

/// Hit rate, TTFT, decision times, sync lag and messages per fleet run.
pub fn fleet_table(rows: &[ReplicaReport]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<12} {:>3} {:>4} {:>6} {:>7} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6} {:>9} {:>8}",
        "policy",
        "N",
        "sync",
        "done",
        "hit",
        "ttft p50",
        "ttft p90",
        "dec p50",
        "dec p99",
        "lag p50",
        "lag p99",
        "sent",
        "applied",
        "drop",
        "redis cpu",
        "redis MB"
    );
    for r in rows {
        let (p, st) = (&r.run, &r.sync_stats);
        let _ = writeln!(
            s,
            "{:<12} {:>3} {:>4} {:>6} {:>6.1}% {:>8.3}s {:>8.3}s {:>6.0}µs {:>6.0}µs {:>6.2}ms {:>6.2}ms {:>8} {:>8} {:>6} {:>9} {:>8}",
            p.policy,
            r.replicas,
            if r.sync { "on" } else { "off" },
            p.completed,
            p.hit_rate * 100.0,
            p.ttft_p50_s,
            p.ttft_p90_s,
            p.decision_p50_us,
            p.decision_p99_us,
            st.lag_p50_ms,
            st.lag_p99_ms,
            st.sent,
            st.applied,
            st.dropped,
            r.redis.map_or_else(|| "-".into(), |u| format!("{:.2}s", u.cpu_s)),
            r.redis.map_or_else(|| "-".into(), |u| format!("{:.1}", u.memory_growth_bytes as f64 / 1e6)),
        );
    }
    s
}

/// Decision times, sync lag and Redis cost per fixed-rate run.
pub fn rate_table(rows: &[RateReport]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<12} {:>3} {:>4} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6} {:>12} {:>10}",
        "policy",
        "N",
        "sync",
        "rate",
        "achieved",
        "dec mean",
        "dec p50",
        "dec p99",
        "lag p50",
        "lag p99",
        "sent",
        "drop",
        "cores/1k d/s",
        "B/entry"
    );
    for r in rows {
        let st = &r.sync_stats;
        let _ = writeln!(
            s,
            "{:<12} {:>3} {:>4} {:>8.0} {:>8.0} {:>6.1}µs {:>6.1}µs {:>6.1}µs {:>6.2}ms {:>6.2}ms {:>8} {:>6} {:>12} {:>10}",
            r.policy,
            r.replicas,
            if r.sync { "on" } else { "off" },
            r.target_rate,
            r.achieved_rate,
            r.decision_mean_us,
            r.decision_p50_us,
            r.decision_p99_us,
            st.lag_p50_ms,
            st.lag_p99_ms,
            st.sent,
            st.dropped,
            r.redis.map_or_else(|| "-".into(), |u| format!("{:.3}", u.cpu_cores_per_1k_dps)),
            r.redis.map_or_else(|| "-".into(), |u| format!("{:.0}", u.bytes_per_entry)),
        );
    }
    s
}
