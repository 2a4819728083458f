//! `program-aware-fairness` gauges, under llm-d's names: `llm_d_epp_program_aware_jains_fairness_index`,
//! `llm_d_epp_program_aware_avg_wait_time_milliseconds{program_id}` and
//! `llm_d_epp_program_aware_attained_service_tokens{program_id}`. Program ids come from a
//! client header, so at most 1000 distinct ids become label values (later ones share
//! `other`); an evicted program's series are removed and its slot freed.

use prometheus::{Gauge, GaugeVec, Opts, Registry};

use crate::telemetry::labels::BoundedLabels;

/// Distinct program ids kept as label values.
const PROGRAM_CAP: usize = 1000;

/// Handles of the families.
#[derive(Debug)]
pub struct ProgramAwareMetrics {
    fairness_index: Gauge,
    avg_wait: GaugeVec,
    attained: GaugeVec,
    programs: BoundedLabels,
}

impl ProgramAwareMetrics {
    /// Registers the families.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let fairness_index = Gauge::with_opts(Opts::new(
            "llm_d_epp_program_aware_jains_fairness_index",
            "Jain's fairness index over the mean queue wait of each program (1 = equal waits).",
        ))?;
        let avg_wait = GaugeVec::new(
            Opts::new(
                "llm_d_epp_program_aware_avg_wait_time_milliseconds",
                "Mean Flow Control queue wait per program, in milliseconds.",
            ),
            &["program_id"],
        )?;
        let attained = GaugeVec::new(
            Opts::new(
                "llm_d_epp_program_aware_attained_service_tokens",
                "Time-decayed attained service (prompt + 2 x completion tokens) per program.",
            ),
            &["program_id"],
        )?;
        registry.register(Box::new(fairness_index.clone()))?;
        registry.register(Box::new(avg_wait.clone()))?;
        registry.register(Box::new(attained.clone()))?;
        Ok(Self { fairness_index, avg_wait, attained, programs: BoundedLabels::new(PROGRAM_CAP) })
    }

    /// Jain's index now.
    pub fn fairness_index(&self, v: f64) {
        self.fairness_index.set(v);
    }

    /// A program's mean wait.
    pub fn average_wait(&self, program: &str, ms: f64) {
        self.avg_wait.with_label_values(&[&self.programs.get(program)]).set(ms);
    }

    /// A program's attained service.
    pub fn attained(&self, program: &str, tokens: f64) {
        self.attained.with_label_values(&[&self.programs.get(program)]).set(tokens);
    }

    /// Drops an evicted program's series (unless it was folded into `other`).
    pub fn forget(&self, program: &str) {
        if self.programs.forget(program) {
            let _ = self.avg_wait.remove_label_values(&[program]);
            let _ = self.attained.remove_label_values(&[program]);
        }
    }
}
