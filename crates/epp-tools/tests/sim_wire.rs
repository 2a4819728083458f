//! Wire mode end to end on loopback: simulated pods serve `/metrics` over HTTP and publish
//! KV events on real ZeroMQ PUB sockets, a real epp (started in process) scrapes and
//! subscribes to them, and every routing decision is a real ext_proc stream. The prefix-aware
//! policies (approximate from routing history, precise from the KV events that crossed the
//! wire) reach a clearly higher hit rate than random. Bounded: 64 requests per policy at
//! twice real time (about 2 s of wall time each), every setup wait capped at 10 s.

use epp_tools::sim::command::{demo_args, scenario};
use epp_tools::sim::{Policy, PolicyReport};

#[test]
fn wire_mode_prefix_policies_beat_random() {
    let mut a = demo_args(42);
    a.pods = 4;
    a.groups = 6;
    a.users = 4;
    a.system_tokens = 256;
    a.question_tokens = 32;
    a.output_tokens = 16;
    a.requests = 64;
    a.qps = 16.0;
    a.qps_end = None;
    a.kv_fill = 0.9;
    let policies = [Policy::Random, Policy::Approximate, Policy::Precise];
    let reports =
        epp_tools::sim::wire::run_policies(&scenario(&a), &policies, 2.0, &Default::default()).expect("wire run");
    let row = |name: &str| -> &PolicyReport { reports.iter().find(|r| r.policy == name).expect("policy ran") };
    let summary = format!("{reports:#?}");
    assert!(reports.iter().all(|r| r.completed == 64), "{summary}");
    let random = row("random").hit_rate;
    assert!(row("approximate").hit_rate > random + 0.15, "approximate > random: {summary}");
    assert!(row("precise").hit_rate > random + 0.15, "precise > random: {summary}");
    let events = row("precise").kv_events;
    assert!(events.published > 0 && events.lost == 0, "precise's events went over ZeroMQ: {summary}");
}
