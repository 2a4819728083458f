//! `sim --replicas`: replicas of epp's scheduler behind a round-robin gateway, sharing state
//! through a real redis-server (started by the tool itself, `--replica-sync auto`) with epp's
//! replica-sync module. On multi-turn chat every follow-up reaches another replica than the
//! turn before it; with sync the two replicas route as one. Small and bounded: 128 requests,
//! every wait inside the tool capped (redis-server's ready line, convergence after each
//! decision: 10 s).

use std::process::Command;

use epp_tools::sim::command::{demo_args, scenario};
use epp_tools::sim::redis_server::RedisChild;
use epp_tools::sim::replicas::{self, SyncTarget};
use epp_tools::sim::{Policy, WorkloadKind};
use serde_json::Value;

const MULTI_TURN: &[&str] = &[
    "--workload=multi-turn",
    "--pods=4",
    "--groups=4",
    "--users=16",
    "--turns=4",
    "--system-tokens=512",
    "--question-tokens=64",
    "--output-tokens=32",
    "--requests=128",
    "--qps=16",
];

fn field<'a>(row: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(row, |v, k| &v[k])
}

/// One `sim --replicas=1,2` run per seed: each row's fields are checked, and the hit rates
/// (1 replica, 2 unsynced, 2 synced) returned for the comparison over all seeds.
fn replica_rows(seed: u64) -> [f64; 3] {
    let out = Command::new(env!("CARGO_BIN_EXE_epp-tools"))
        .arg("sim")
        .args(MULTI_TURN)
        .args(["--replicas=1,2", "--replica-sync=auto", "--json", &format!("--seed={seed}")])
        .output()
        .expect("epp-tools runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    let rows = json["replica_runs"].as_array().expect("replica_runs");
    let row = |n: u64, sync: bool| {
        rows.iter().find(|r| r["replicas"] == n && r["sync"] == sync).unwrap_or_else(|| panic!("row {n} {sync}"))
    };
    let summary = serde_json::to_string_pretty(rows).unwrap_or_default();
    assert_eq!(rows.len(), 4, "1 and 2 replicas, each without and with sync: {summary}");
    for r in rows {
        assert_eq!(r["run"]["completed"], 128, "{summary}");
        for f in [
            "run.hit_rate",
            "run.ttft_p50_s",
            "run.ttft_p90_s",
            "run.decision_p50_us",
            "run.decision_p99_us",
            "sync_stats.lag_p50_ms",
            "sync_stats.lag_p99_ms",
            "sync_stats.sent",
            "sync_stats.applied",
            "sync_stats.dropped",
        ] {
            assert!(field(r, f).is_number(), "{f} missing: {summary}");
        }
    }
    let synced = row(2, true);
    assert!(field(synced, "sync_stats.sent").as_u64() >= Some(128), "one prefix update per decision: {summary}");
    assert!(field(synced, "sync_stats.applied").as_u64() >= Some(128), "each applied the other's: {summary}");
    assert_eq!(field(synced, "sync_stats.dropped"), 0, "{summary}");
    assert!(field(synced, "sync_stats.lag_p99_ms").as_f64() > Some(0.0), "lag measured: {summary}");
    assert!(field(synced, "redis.stream_entries").as_u64() >= Some(128), "{summary}");
    assert!(row(2, false)["redis"].is_null() && field(row(2, false), "sync_stats.sent") == 0, "{summary}");
    let hit = |n, sync| field(row(n, sync), "run.hit_rate").as_f64().expect("hit rate");
    [hit(1, false), hit(2, false), hit(2, true)]
}

/// 128 requests over 4 pods: which pod an idle group lands on is a random tie-break, worth a
/// few points of hit rate in one run, so the comparison is over the mean of three seeds.
#[test]
fn two_synced_replicas_hit_the_cache_more_than_two_unsynced_ones() {
    let runs: Vec<[f64; 3]> = (1..=3).map(replica_rows).collect();
    let mean = |i: usize| runs.iter().map(|r| r[i]).sum::<f64>() / runs.len() as f64;
    let (one, unsynced, synced) = (mean(0), mean(1), mean(2));
    assert!(synced > unsynced + 0.05, "sync raises two replicas' hit rate: {runs:?}");
    assert!((synced - one).abs() <= 0.02, "two synced replicas route as one: {runs:?}");
}

#[test]
fn a_fixed_rate_run_reports_decision_times_lag_and_redis_cost() {
    let mut a = demo_args(7);
    a.workload = WorkloadKind::MultiTurn;
    (a.pods, a.groups, a.users, a.turns, a.requests) = (4, 4, 8, 2, 32);
    (a.system_tokens, a.question_tokens, a.output_tokens) = (256, 32, 8);
    let s = scenario(&a);
    let redis = RedisChild::start().expect("redis-server starts");
    let target = SyncTarget::new(redis.url(), "test:rate");
    // 100 decisions at 400/s: a quarter of a second.
    let on = replicas::rate_run(&s, Policy::Approximate, 2, Some(&target), 400.0, 0.25).expect("rate run");
    let summary = format!("{on:#?}");
    assert_eq!(on.decisions, 100, "{summary}");
    assert!(on.decision_p99_us >= on.decision_p50_us && on.decision_p50_us > 0.0, "{summary}");
    assert!(on.sync_stats.sent >= 100 && on.sync_stats.applied >= 100, "{summary}");
    // Updates read during a reader's first catch-up page carry no lag sample.
    assert!(on.sync_stats.lag_samples >= 50 && on.sync_stats.lag_p99_ms > 0.0, "{summary}");
    let redis_usage = on.redis.expect("Redis cost measured with sync");
    // `used_memory` growth over so short a stream is within the allocator's noise (it can be
    // negative); only the entry count is checked here: an entry holds a batch window's updates.
    let entries = redis_usage.stream_entries;
    assert!(entries >= 1 && entries <= on.sync_stats.sent && redis_usage.cpu_s > 0.0, "{summary}");
    let off = replicas::rate_run(&s, Policy::Approximate, 2, None, 400.0, 0.25).expect("rate run");
    assert_eq!((off.decisions, off.sync_stats.sent), (100, 0), "{off:#?}");
}
