//! `epp sim` and `epp demo`: flags -> `Scenario`, run, print (table or JSON on stdout; the
//! demo's live progress on stderr).

use std::io::Write as _;

use serde::Serialize;

use super::{
    ChannelConfig, FleetConfig, PodConfig, Policy, PolicyReport, Scenario, StepModel, WorkloadKind, WorkloadSpec,
    kv_blocks_for, report, run_policies,
};
use crate::cli::SimArgs;

/// The scenario the flags describe (after the preset, when one is named).
pub fn scenario(args: &SimArgs) -> Scenario {
    let mut preset_args;
    let args = match args.preset {
        Some(p) => {
            preset_args = args.clone();
            p.apply(&mut preset_args);
            &preset_args
        }
        None => args,
    };
    let workload = WorkloadSpec {
        kind: args.workload,
        groups: args.groups.max(1),
        users: args.users.max(1),
        system_tokens: args.system_tokens,
        question_tokens: args.question_tokens.max(1),
        output_tokens: args.output_tokens.max(1),
        turns: args.turns.max(1),
        qps: args.qps,
        qps_end: args.qps_end,
        requests: args.requests,
        seed: args.seed,
    };
    let block_size = args.block_size.max(1);
    let pods = args.pods.max(1);
    let kv_blocks = args.kv_blocks.unwrap_or_else(|| kv_blocks_for(&workload, pods, block_size, args.kv_fill));
    let pod = PodConfig {
        block_size,
        kv_blocks: kv_blocks.max(1),
        max_num_seqs: args.max_num_seqs.max(1),
        max_batched_tokens: args.max_batched_tokens.max(1),
        model: StepModel { scale: args.step_scale.max(1e-6), prefill_scale: args.prefill_scale.max(1e-6) },
    };
    Scenario {
        workload,
        fleet: FleetConfig {
            pods,
            pod,
            events: ChannelConfig {
                delay: args.kv_delay_ms.max(0.0) / 1e3,
                jitter: args.kv_jitter_ms.max(0.0) / 1e3,
                loss: args.kv_loss.clamp(0.0, 1.0),
            },
            scrape_interval: args.scrape_interval_ms.max(1.0) / 1e3,
        },
    }
}

#[derive(Serialize)]
struct SimOutput<'a> {
    scenario: &'a Scenario,
    results: &'a [PolicyReport],
}

/// `epp sim`.
pub fn sim(args: &SimArgs) -> anyhow::Result<()> {
    let scenario = scenario(args);
    if args.kv_sweep {
        let sweep = super::sweep::run(&scenario)?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&serde_json::json!({"scenario": &scenario, "sweep": &sweep}))?);
        } else {
            println!("{}", headline(&scenario));
            print!("{}", super::sweep::table(&sweep));
        }
        return Ok(());
    }
    if !args.replicas.is_empty() {
        return super::replica_command::run(args, &scenario);
    }
    let policies: Vec<Policy> = if args.policy.is_empty() { Policy::ALL.to_vec() } else { args.policy.clone() };
    let reports = if args.wire {
        super::wire::run_policies(&scenario, &policies, args.wire_speed, &wire_launch(args)?)?
    } else {
        run_policies(&scenario, &policies, &mut |_, _| {})?
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&SimOutput { scenario: &scenario, results: &reports })?);
    } else {
        println!("{}", headline(&scenario));
        print!("{}", report::table(&reports));
    }
    Ok(())
}

/// How wire mode starts epp: in this process, or (`--wire-processes`) as `epp` processes.
pub fn wire_launch(args: &SimArgs) -> anyhow::Result<super::wire::Launch> {
    Ok(if args.wire_processes {
        super::wire::Launch::Processes(super::wire::process::locate_binary(args.epp_bin.as_deref())?)
    } else {
        super::wire::Launch::InProcess
    })
}

/// One line describing the scenario.
pub fn headline(scenario: &Scenario) -> String {
    let w = &scenario.workload;
    format!(
        "{:?}: {} pods x {} KV blocks of {} tokens; {} groups x {} users, {}/{}/{} tokens; {} requests at {} qps{}; seed {}",
        w.kind,
        scenario.fleet.pods,
        scenario.fleet.pod.kv_blocks,
        scenario.fleet.pod.block_size,
        w.groups,
        w.users,
        w.system_tokens,
        w.question_tokens,
        w.output_tokens,
        w.requests,
        w.qps,
        w.qps_end.map(|e| format!(" -> {e}")).unwrap_or_default(),
        w.seed
    )
}

/// The demo preset: 4 pods, 12 groups x 4 users, 1024/128/64 tokens, rising 4 -> 24 qps,
/// prefixes filling 90 % of the fleet's KV cache.
pub fn demo_args(seed: u64) -> SimArgs {
    SimArgs {
        workload: WorkloadKind::SharedPrefix,
        pods: 4,
        groups: 12,
        users: 4,
        system_tokens: 1024,
        question_tokens: 128,
        output_tokens: 64,
        turns: 5,
        qps: 4.0,
        qps_end: Some(24.0),
        requests: 300,
        seed,
        policy: Vec::new(),
        block_size: 16,
        kv_blocks: None,
        kv_fill: 0.9,
        max_num_seqs: 256,
        max_batched_tokens: 8192,
        step_scale: 1.0,
        prefill_scale: 1.0,
        kv_delay_ms: 10.0,
        kv_jitter_ms: 0.0,
        kv_loss: 0.0,
        kv_sweep: false,
        wire: false,
        wire_speed: 1.0,
        wire_processes: false,
        epp_bin: None,
        preset: None,
        scrape_interval_ms: 50.0,
        json: false,
        replicas: Vec::new(),
        replica_sync: None,
        replica_sync_batch_window: epp::replica::settings::DEFAULT_BATCH_WINDOW,
        replica_rounds: 1,
        decision_rate: None,
        decision_seconds: 10.0,
    }
}

/// `epp demo`.
pub fn demo(seed: u64) -> anyhow::Result<()> {
    let args = demo_args(seed);
    let scenario = scenario(&args);
    let total = scenario.workload.requests;
    let mut reports = Vec::new();
    for policy in Policy::ALL {
        let mut stderr = std::io::stderr();
        let mut last = usize::MAX;
        let mut rows = run_policies(&scenario, &[policy], &mut |p, progress| {
            if progress.routed * 20 / total.max(1) != last {
                last = progress.routed * 20 / total.max(1);
                let _ = write!(
                    stderr,
                    "\r{:<12} routed {:>4}/{total}  finished {:>4}  t={:>7.2}s",
                    p.name(),
                    progress.routed,
                    progress.finished,
                    progress.now
                );
                let _ = stderr.flush();
            }
        })?;
        let _ = writeln!(stderr);
        if let Some(r) = rows.pop() {
            println!("{}", report::per_pod_line(&r));
            println!(
                "{:<12} hit {:.1}%  ttft p50 {:.3}s  p90 {:.3}s\n",
                "",
                r.hit_rate * 100.0,
                r.ttft_p50_s,
                r.ttft_p90_s
            );
            reports.push(r);
        }
    }
    report::add_regret(&mut reports);
    print!("{}", report::table(&reports));
    Ok(())
}
