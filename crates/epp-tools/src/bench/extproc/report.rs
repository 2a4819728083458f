//! One result row per offered rate (JSON line or table row), and the max sustained rate: the
//! highest rate whose achieved rate is at least 99 % of the offered one with p99 within the
//! objective.

use serde::Serialize;

/// One rate's results.
#[derive(Clone, Debug, Serialize)]
pub struct RateReport {
    /// What was loaded: `epp` or `floor`.
    pub server: &'static str,
    /// Body mode.
    pub body_mode: super::args::BodyMode,
    /// Body shape.
    pub body_shape: super::args::BodyShape,
    /// Body bytes per request.
    pub body_bytes: usize,
    /// Offered rate, requests per second.
    pub rate_target: f64,
    /// Requests answered with a valid destination per second.
    pub rate_achieved: f64,
    /// Requests issued.
    pub sent: u64,
    /// Requests answered with a valid destination.
    pub ok: u64,
    /// Failed requests (errors, timeouts, bad destinations).
    pub errors: u64,
    /// Requests dropped at the in-flight cap.
    pub dropped: u64,
    /// Latency percentiles from the scheduled send time, microseconds.
    pub p50_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// 99.9th percentile.
    pub p999_us: u64,
    /// Largest latency.
    pub max_us: u64,
    /// CPU of the server per answered request: the in-process server's threads, or the
    /// `--target-pid` process (`None` for `--target` without a pid).
    pub cpu_us_per_req: Option<f64>,
    /// CPU of this whole process per answered request: epp + load generator + simulated pods
    /// in process; the load generator alone with `--target`.
    pub process_cpu_us_per_req: Option<f64>,
    /// Time the server's threads were runnable but waited for a CPU, as a percentage
    /// of the step's wall time (summed over threads): other processes' share of the tail.
    pub epp_runq_wait_pct: Option<f64>,
    /// Voluntary context switches of the server's threads per answered request: a thread that
    /// ran out of work and parked, woken again by another thread or a timer (hand-offs).
    pub parks_per_req: Option<f64>,
    /// KV block events the epp applied per second during the step.
    pub kv_events_per_s: f64,
    /// Achieved >= 99 % of offered, p99 within the objective, no errors.
    pub sustained: bool,
}

impl RateReport {
    /// Sets `sustained` against a p99 objective in microseconds.
    pub fn judge(&mut self, slo_us: f64) {
        self.sustained = self.ok > 0
            && self.errors == 0
            && self.rate_achieved >= 0.99 * self.rate_target
            && (self.p99_us as f64) <= slo_us;
    }
}

/// Highest offered rate that was sustained.
pub fn max_sustained(reports: &[RateReport]) -> Option<f64> {
    reports.iter().filter(|r| r.sustained).map(|r| r.rate_target).max_by(f64::total_cmp)
}

/// A human table of the rows.
pub fn table(reports: &[RateReport]) -> String {
    let mut out = format!(
        "{:>6} {:>8} {:>9} {:>8} {:>8} {:>9} {:>9} {:>9} {:>6} {:>7} {:>9} {:>9} {:>7} {:>8} {:>7}\n",
        "server",
        "offered",
        "achieved",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "max us",
        "ok",
        "errors",
        "dropped",
        "srv us/r",
        "proc us/r",
        "parks/r",
        "kv ev/s",
        "runq %"
    );
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
    for r in reports {
        out.push_str(&format!(
            "{:>6} {:>8.0} {:>9.0} {:>8} {:>8} {:>9} {:>9} {:>9} {:>6} {:>7} {:>9} {:>9} {:>7} {:>8.0} {:>7}{}\n",
            r.server,
            r.rate_target,
            r.rate_achieved,
            r.p50_us,
            r.p99_us,
            r.p999_us,
            r.max_us,
            r.ok,
            r.errors,
            r.dropped,
            opt(r.cpu_us_per_req),
            opt(r.process_cpu_us_per_req),
            r.parks_per_req.map_or("-".to_string(), |v| format!("{v:.1}")),
            r.kv_events_per_s,
            opt(r.epp_runq_wait_pct),
            if r.sustained { "" } else { "  (not sustained)" }
        ));
    }
    out
}

/// Per rate, epp's CPU per request over the floor's; then epp's max sustained rate over the
/// floor's.
pub fn floor_ratios(reports: &[RateReport]) -> String {
    let mut out = String::new();
    let of = |server: &'static str| reports.iter().filter(move |r| r.server == server);
    for epp in of("epp") {
        let Some(floor) = of("floor").find(|f| f.rate_target == epp.rate_target) else { continue };
        let ratio = epp.cpu_us_per_req.zip(floor.cpu_us_per_req).map(|(e, f)| e / f.max(1e-9));
        let text = ratio.map_or("-".to_string(), |r| format!("{r:.2}x"));
        out.push_str(&format!("at {:.0}/s: epp CPU per request {text} the floor's\n", epp.rate_target));
    }
    let max = |server: &'static str| max_sustained(&of(server).cloned().collect::<Vec<_>>());
    if let (Some(e), Some(f)) = (max("epp"), max("floor")) {
        out.push_str(&format!("epp max sustained rate {:.2}x the floor's (of the offered rates)\n", e / f));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(rate: f64, achieved: f64, p99: u64, errors: u64) -> RateReport {
        let mut r = RateReport {
            server: "epp",
            body_mode: super::super::args::BodyMode::Buffered,
            body_shape: super::super::args::BodyShape::Plain,
            body_bytes: 10_000,
            rate_target: rate,
            rate_achieved: achieved,
            sent: 100,
            ok: 100 - errors,
            errors,
            dropped: 0,
            p50_us: p99 / 2,
            p99_us: p99,
            p999_us: p99,
            max_us: p99,
            cpu_us_per_req: None,
            process_cpu_us_per_req: Some(100.0),
            epp_runq_wait_pct: None,
            parks_per_req: None,
            kv_events_per_s: 0.0,
            sustained: false,
        };
        r.judge(5_000.0);
        r
    }

    #[test]
    fn max_sustained_is_the_highest_rate_meeting_rate_latency_and_errors() {
        let rows = [
            row(1000.0, 999.0, 800, 0),
            row(2000.0, 1995.0, 4_900, 0),
            row(5000.0, 4990.0, 9_000, 0),
            row(3000.0, 2900.0, 900, 0),
        ];
        assert_eq!(max_sustained(&rows), Some(2000.0));
        assert!(!row(500.0, 500.0, 100, 1).sustained, "errors disqualify");
        assert_eq!(max_sustained(&[row(5000.0, 4000.0, 100, 0)]), None);
        let t = table(&rows);
        assert_eq!(t.lines().count(), 5);
        assert!(t.contains("(not sustained)"));
    }

    #[test]
    fn floor_ratios_pair_rows_by_rate() {
        let with = |server, rate, cpu, p99| {
            let mut r = row(rate, rate, p99, 0);
            r.server = server;
            r.cpu_us_per_req = Some(cpu);
            r.judge(5_000.0);
            r
        };
        let rows = [
            with("floor", 1000.0, 20.0, 300),
            with("epp", 1000.0, 30.0, 400),
            with("floor", 2000.0, 20.0, 400),
            with("epp", 2000.0, 50.0, 9_000),
        ];
        let text = floor_ratios(&rows);
        assert!(text.contains("at 1000/s: epp CPU per request 1.50x"), "{text}");
        assert!(text.contains("at 2000/s: epp CPU per request 2.50x"), "{text}");
        assert!(text.contains("max sustained rate 0.50x"), "{text}");
    }
}
