//! Scheduler metrics: end-to-end decision latency, attempts by outcome, per-plugin call
//! latency (`extension_point`, `plugin_type`, `plugin_name`), with GIE and llm-d names, and
//! epp's own admitter decision counter (`epp_admitter_decisions_total`).

use prometheus::{IntCounter, IntCounterVec, Opts, Registry};

use crate::telemetry::twin::{SCHEDULER_BUCKETS, TwinCounterVec, TwinHistogram, TwinHistogramVec};

/// Extension points as they appear in the `extension_point` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExtensionPoint {
    /// Profile handler pick.
    ProfilePicker,
    /// Filter.
    Filter,
    /// Scorer.
    Scorer,
    /// Picker.
    Picker,
    /// Profile handler result processing.
    ProcessProfilesResults,
    /// Pre-request hook.
    PreRequest,
    /// Data producer.
    DataProducer,
    /// Admitter (GIE/llm-d `AdmissionExtensionPoint`).
    Admission,
}

impl ExtensionPoint {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ProfilePicker => "ProfilePicker",
            Self::Filter => "Filter",
            Self::Scorer => "Scorer",
            Self::Picker => "Picker",
            Self::ProcessProfilesResults => "ProcessProfilesResults",
            Self::PreRequest => "PreRequest",
            Self::DataProducer => "DataProducer",
            Self::Admission => "Admission",
        }
    }
}

/// Handles of the scheduler's metric families.
#[derive(Clone, Debug)]
pub struct SchedulerMetrics {
    e2e: TwinHistogram,
    plugin: TwinHistogramVec,
    attempts: TwinCounterVec,
    admissions: IntCounterVec,
}

/// Counters of one admitter's decisions (resolved once at build time).
#[derive(Clone, Debug)]
pub struct AdmissionCounters {
    /// Requests admitted.
    pub admitted: IntCounter,
    /// Requests denied.
    pub rejected: IntCounter,
}

impl SchedulerMetrics {
    /// Registers the families.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let e2e = TwinHistogramVec::register(
            registry,
            "inference_extension_scheduler_e2e_duration_seconds",
            "llm_d_epp_scheduler_e2e_duration_seconds",
            "End-to-end scheduling latency in seconds.",
            SCHEDULER_BUCKETS,
            &[],
        )?
        .with(&[]);
        let plugin = TwinHistogramVec::register(
            registry,
            "inference_extension_plugin_duration_seconds",
            "llm_d_epp_plugin_duration_seconds",
            "Plugin call latency in seconds.",
            SCHEDULER_BUCKETS,
            &["extension_point", "plugin_type", "plugin_name"],
        )?;
        let attempts = TwinCounterVec::register(
            registry,
            "inference_extension_scheduler_attempts_total",
            "llm_d_epp_scheduler_attempts_total",
            "Scheduling attempts by status.",
            &["status"],
        )?;
        let admissions = IntCounterVec::new(
            Opts::new("epp_admitter_decisions_total", "Admitter decisions by plugin (admitted / rejected)."),
            &["plugin_type", "plugin_name", "decision"],
        )?;
        registry.register(Box::new(admissions.clone()))?;
        Ok(Self { e2e, plugin, attempts, admissions })
    }

    /// Unregistered handles for tests and benchmarks.
    pub fn detached() -> Self {
        Self::register(&Registry::new()).expect("a fresh registry has no name clashes")
    }

    /// Timer handle of one plugin at one extension point (resolve once at build time).
    pub fn plugin_timer(&self, point: ExtensionPoint, plugin_type: &str, plugin_name: &str) -> TwinHistogram {
        self.plugin.with(&[point.as_str(), plugin_type, plugin_name])
    }

    /// Decision counters of one admitter (resolve once at build time).
    pub fn admission_counters(&self, plugin_type: &str, plugin_name: &str) -> AdmissionCounters {
        AdmissionCounters {
            admitted: self.admissions.with_label_values(&[plugin_type, plugin_name, "admitted"]),
            rejected: self.admissions.with_label_values(&[plugin_type, plugin_name, "rejected"]),
        }
    }

    /// Records a decision's latency and outcome.
    pub fn record_decision(&self, seconds: f64, success: bool) {
        self.e2e.observe(seconds);
        self.attempts.with(&[if success { "success" } else { "failure" }]).inc();
    }
}
