//! Named workloads and fleets (`epp sim --preset`), from the published benchmark catalogue
//! (`performance-anchors.md` §9.1). A preset replaces the workload shape, pod count, rate,
//! request count and KV sizing of the flags; policy, seed, KV-event faults and engine
//! settings still come from the flags.

use crate::cli::SimArgs;
use crate::sim::WorkloadKind;

/// A named scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    /// W1, llm-d 73-capacity: 8 pods, 150 groups x 5, 6000/1200/1000 tokens, 3 -> 60 qps,
    /// prefixes at 73 % of the fleet's KV (307k tokens per pod).
    #[value(name = "llmd-73")]
    #[serde(rename = "llmd-73")]
    Llmd73,
    /// W3, SGLang generated-shared-prefix defaults: 64 groups x 16 prompts, 2048/128/256,
    /// each prompt once (1,024 requests), 8 pods at 16 qps, prefixes at 73 % of KV.
    SglangGsp,
    /// W8 at 100 pods: the default 8-pod shape (32 x 5 groups, 2000/400/200, 20 qps, 800
    /// requests) scaled at constant per-pod load (4 groups, 2.5 qps, 60 requests per pod).
    #[value(name = "fleet-100")]
    #[serde(rename = "fleet-100")]
    Fleet100,
    /// W8 at 1,000 pods (as `fleet-100`).
    #[value(name = "fleet-1000")]
    #[serde(rename = "fleet-1000")]
    Fleet1000,
}

impl Preset {
    /// Overwrites the scenario flags of `args` with this preset.
    pub fn apply(self, args: &mut SimArgs) {
        match self {
            Preset::Llmd73 => {
                shape(args, WorkloadKind::SharedPrefix, 8, (150, 5), (6000, 1200, 1000));
                (args.qps, args.qps_end, args.requests) = (3.0, Some(60.0), 3000);
            }
            Preset::SglangGsp => {
                shape(args, WorkloadKind::GeneratedSharedPrefix, 8, (64, 16), (2048, 128, 256));
                (args.qps, args.qps_end, args.requests) = (16.0, None, 64 * 16);
            }
            Preset::Fleet100 => fleet(args, 100),
            Preset::Fleet1000 => fleet(args, 1000),
        }
        args.kv_blocks = None;
        args.kv_fill = 0.73;
    }
}

fn shape(args: &mut SimArgs, kind: WorkloadKind, pods: usize, groups: (usize, usize), tokens: (usize, usize, usize)) {
    args.workload = kind;
    args.pods = pods;
    (args.groups, args.users) = groups;
    (args.system_tokens, args.question_tokens, args.output_tokens) = tokens;
}

fn fleet(args: &mut SimArgs, pods: usize) {
    shape(args, WorkloadKind::SharedPrefix, pods, (4 * pods, 5), (2000, 400, 200));
    (args.qps, args.qps_end, args.requests) = (2.5 * pods as f64, None, 60 * pods);
}
