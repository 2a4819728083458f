//! The fleet simulator reproduces the published ordering of routing policies on a
//! shared-prefix workload under KV pressure (llm-d 73-capacity: random ≈ load ≪ approximate
//! < precise), precise prefix routing reaches ≥ 95 % of the oracle's hit rate, and a run is
//! a pure function of its seed. Lost KV-event batches make sequence gaps that purge the pod
//! from precise's index and cost it hit rate; on SGLang's generated-shared-prefix workload
//! the prefix-aware policies beat random as well.

use epp_tools::sim::command::{demo_args, scenario};
use epp_tools::sim::{Policy, PolicyReport, run_policies};

fn args(requests: usize) -> epp_tools::cli::SimArgs {
    let mut a = demo_args(42);
    a.pods = 8;
    a.groups = 16;
    a.users = 4;
    a.system_tokens = 1024;
    a.question_tokens = 128;
    a.output_tokens = 64;
    a.qps = 20.0;
    a.qps_end = None;
    a.requests = requests;
    a.kv_fill = 0.9;
    a
}

fn row<'a>(reports: &'a [PolicyReport], name: &str) -> &'a PolicyReport {
    reports.iter().find(|r| r.policy == name).expect("policy ran")
}

#[test]
fn published_ordering_on_shared_prefix() {
    let policies = [Policy::Random, Policy::Load, Policy::Approximate, Policy::Precise, Policy::Oracle];
    let reports = run_policies(&scenario(&args(300)), &policies, &mut |_, _| {}).expect("simulation runs");
    let hit = |name| row(&reports, name).hit_rate;
    let summary = format!("{reports:#?}");
    assert!(reports.iter().all(|r| r.completed == 300), "{summary}");
    assert!((hit("random") - hit("load")).abs() < 0.10, "random ≈ load: {summary}");
    assert!(
        hit("load") * 2.0 < hit("approximate") && hit("random") * 2.0 < hit("approximate"),
        "load, random ≪ approximate: {summary}"
    );
    assert!(hit("approximate") < hit("precise"), "approximate < precise: {summary}");
    assert!(hit("precise") >= 0.95 * hit("oracle"), "precise ≥ 95 % of oracle: {summary}");
    assert!(row(&reports, "precise").ttft_p90_s * 5.0 < row(&reports, "random").ttft_p90_s, "{summary}");
    assert!(row(&reports, "precise").output_tok_per_s > row(&reports, "random").output_tok_per_s * 1.5, "{summary}");
}

#[test]
fn same_seed_same_results() {
    let run = || {
        let mut reports = run_policies(&scenario(&args(80)), &Policy::ALL, &mut |_, _| {}).expect("simulation runs");
        for r in &mut reports {
            // Wall times, the only non-simulated numbers.
            (r.decision_us, r.decision_p50_us, r.decision_p99_us, r.sim_wall_s, r.decisions_per_s) =
                (0.0, 0.0, 0.0, 0.0, 0.0);
        }
        reports
    };
    assert_eq!(run(), run());
}

#[test]
fn kv_event_loss_purges_and_costs_precise_hit_rate() {
    let run = |loss: f64| {
        let mut a = args(300);
        a.kv_loss = loss;
        run_policies(&scenario(&a), &[Policy::Precise], &mut |_, _| {}).expect("simulation runs").remove(0)
    };
    let (clean, lossy) = (run(0.0), run(0.05));
    assert_eq!((clean.kv_events.lost, clean.kv_events.gaps), (0, 0), "{clean:#?}");
    assert!(lossy.kv_events.lost > 0 && lossy.kv_events.gaps > 0, "{lossy:#?}");
    assert!(lossy.kv_events.purged_entries > 0, "each gap purges the pod: {lossy:#?}");
    assert!(lossy.hit_rate + 0.05 < clean.hit_rate, "loss costs hit rate: {clean:#?} {lossy:#?}");
}

#[test]
fn generated_shared_prefix_prefers_prefix_aware_policies() {
    let mut a = args(0);
    a.workload = epp_tools::sim::WorkloadKind::GeneratedSharedPrefix;
    (a.groups, a.users, a.system_tokens, a.question_tokens, a.output_tokens) = (16, 16, 1024, 64, 64);
    a.requests = 256; // each (group, prompt) pair once
    let policies = [Policy::Random, Policy::Approximate, Policy::Precise];
    let reports = run_policies(&scenario(&a), &policies, &mut |_, _| {}).expect("simulation runs");
    let summary = format!("{reports:#?}");
    assert!(reports.iter().all(|r| r.completed == 256), "{summary}");
    let hit = |name| row(&reports, name).hit_rate;
    assert!(hit("random") * 2.0 < hit("approximate"), "{summary}");
    assert!(hit("random") * 2.0 < hit("precise"), "{summary}");
}
