//! `epp sim --kv-sweep`: precise routing rerun over a ladder of KV-event delays, jitters and
//! loss rates on one scenario, next to the policies that do not read KV events (approximate,
//! oracle) as fixed references. Shows how fast precise routing degrades when the event path
//! is slow or lossy (each lost batch makes a sequence gap, and the gap purges the pod).

use std::fmt::Write as _;

use serde::Serialize;

use super::{ChannelConfig, Policy, PolicyReport, RouteError, Scenario, run_policies};

/// `(delay ms, jitter ms, loss probability)` of each rung.
pub const LADDER: [(f64, f64, f64); 10] = [
    (10.0, 0.0, 0.0),
    (100.0, 0.0, 0.0),
    (1000.0, 0.0, 0.0),
    (5000.0, 0.0, 0.0),
    (10.0, 100.0, 0.0),
    (10.0, 0.0, 0.001),
    (10.0, 0.0, 0.01),
    (100.0, 0.0, 0.01),
    (10.0, 0.0, 0.05),
    (10.0, 0.0, 0.2),
];

/// One rung: its KV-event path and precise's report on it.
#[derive(Clone, Debug, Serialize)]
pub struct SweepRow {
    /// The path's faults.
    pub events: ChannelConfig,
    /// Precise routing over that path.
    pub precise: PolicyReport,
}

/// The sweep's result.
#[derive(Clone, Debug, Serialize)]
pub struct Sweep {
    /// Policies that do not read KV events, run once.
    pub references: Vec<PolicyReport>,
    /// One row per rung of `LADDER`.
    pub rows: Vec<SweepRow>,
}

/// Runs the sweep on `scenario` (its own KV-event settings are replaced by each rung).
pub fn run(scenario: &Scenario) -> Result<Sweep, RouteError> {
    let references = run_policies(scenario, &[Policy::Approximate, Policy::Oracle], &mut |_, _| {})?;
    let mut rows = Vec::with_capacity(LADDER.len());
    for (delay_ms, jitter_ms, loss) in LADDER {
        let mut s = scenario.clone();
        s.fleet.events = ChannelConfig { delay: delay_ms / 1e3, jitter: jitter_ms / 1e3, loss };
        let mut precise = run_policies(&s, &[Policy::Precise], &mut |_, _| {})?;
        let Some(precise) = precise.pop() else { continue };
        rows.push(SweepRow { events: s.fleet.events, precise });
    }
    Ok(Sweep { references, rows })
}

/// The sweep as a table: hit rate, TTFT p90, throughput and the path's counters per rung.
pub fn table(sweep: &Sweep) -> String {
    let mut s = String::new();
    for r in &sweep.references {
        let _ = writeln!(
            s,
            "reference {:<12} hit {:>5.1}%  ttft p90 {:>8.3}s  out tok/s {:>6.0}",
            r.policy,
            r.hit_rate * 100.0,
            r.ttft_p90_s,
            r.output_tok_per_s
        );
    }
    let _ = writeln!(
        s,
        "{:>9} {:>9} {:>6} {:>7} {:>10} {:>10} {:>8} {:>6} {:>9} {:>9}",
        "delay ms", "jitter ms", "loss", "hit", "ttft p90", "out tok/s", "lost", "gaps", "purged", "rejected"
    );
    for row in &sweep.rows {
        let (e, p, k) = (&row.events, &row.precise, &row.precise.kv_events);
        let _ = writeln!(
            s,
            "{:>9.0} {:>9.0} {:>5.1}% {:>6.1}% {:>9.3}s {:>10.0} {:>8} {:>6} {:>9} {:>9}",
            e.delay * 1e3,
            e.jitter * 1e3,
            e.loss * 100.0,
            p.hit_rate * 100.0,
            p.ttft_p90_s,
            p.output_tok_per_s,
            k.lost,
            k.gaps,
            k.purged_entries,
            k.events_rejected
        );
    }
    s
}
