//! EndpointPickerConfig hot reload: [`ConfigReloader`] polls `--config-file` by content hash
//! (`crate::file_watch`), loads a changed document through the normal loader (taking over
//! unchanged plugins with their state, `config::load_reusing`), starts the background services
//! of new plugins, swaps the scheduler (`scheduling::handle`: streams in flight finish on the
//! scheduler they started with) and then stops the services of plugins that left. A document
//! that does not load keeps the running config; every problem is logged with its path.
//! [`ServiceSet`] owns the running plugin background services (KV-event subscriptions).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus::{IntCounterVec, IntGauge};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::{self, LoadedConfig, Reusable};
use crate::extproc::service::Shared;
use crate::file_watch::{Change, ContentWatch, content_hash};
use crate::framework::build::BuildContext;
use crate::framework::plugin::{BackgroundService, ServiceContext};
use crate::plugins::registry::builtin;
use crate::scheduling::metrics::SchedulerMetrics;

/// Where the config comes from and how often it is checked (`--config-file`,
/// `--config-reload-interval`).
#[derive(Clone, Debug)]
pub struct ReloadSettings {
    /// The config file.
    pub path: PathBuf,
    /// Poll period.
    pub interval: Duration,
}

/// `epp_config_reloads_total{result}` and `epp_config_generation`.
#[derive(Clone, Debug)]
pub struct ReloadMetrics {
    reloads: IntCounterVec,
    generation: IntGauge,
}

impl ReloadMetrics {
    /// Registers the series; the generation starts at 1 (the config loaded at startup).
    pub fn register(registry: &prometheus::Registry) -> Result<Self, prometheus::Error> {
        let reloads = IntCounterVec::new(
            prometheus::Opts::new("epp_config_reloads_total", "EndpointPickerConfig reload attempts, by result."),
            &["result"],
        )?;
        let generation = IntGauge::new(
            "epp_config_generation",
            "Configs loaded since start: 1 for the startup config, +1 per successful reload.",
        )?;
        registry.register(Box::new(reloads.clone()))?;
        registry.register(Box::new(generation.clone()))?;
        for result in ["success", "failure"] {
            reloads.with_label_values(&[result]);
        }
        generation.set(1);
        Ok(Self { reloads, generation })
    }

    fn record(&self, ok: bool) {
        self.reloads.with_label_values(&[if ok { "success" } else { "failure" }]).inc();
        if ok {
            self.generation.inc();
        }
    }
}

/// The running plugin background services, each stoppable on its own.
#[derive(Debug)]
pub struct ServiceSet {
    base: ServiceContext,
    running: Mutex<Vec<(Arc<dyn BackgroundService>, CancellationToken)>>,
}

impl ServiceSet {
    /// No services yet; each started one gets a child token of `base.cancel`.
    pub fn new(base: ServiceContext) -> Self {
        Self { base, running: Mutex::new(Vec::new()) }
    }

    /// The running services.
    pub fn current(&self) -> Vec<Arc<dyn BackgroundService>> {
        self.lock().iter().map(|(s, _)| s.clone()).collect()
    }

    /// Starts those of `wanted` not running yet. On an error the ones this call started are
    /// stopped again and the error is returned.
    pub async fn start_new(
        &self,
        wanted: &[Arc<dyn BackgroundService>],
    ) -> Result<(), crate::framework::plugin::ServiceStartError> {
        let running = self.current();
        let mut started = Vec::new();
        for service in wanted.iter().filter(|w| !running.iter().any(|r| Arc::ptr_eq(r, w))) {
            let stop = self.base.cancel.child_token();
            let cx = ServiceContext { cancel: stop.clone(), ..self.base.clone() };
            if let Err(error) = service.start(cx).await {
                stop.cancel();
                started.iter().for_each(|(_, s): &(_, CancellationToken)| s.cancel());
                return Err(error);
            }
            started.push((service.clone(), stop));
        }
        self.lock().extend(started);
        Ok(())
    }

    /// Stops every running service not in `wanted`; returns how many stopped.
    pub fn stop_others(&self, wanted: &[Arc<dyn BackgroundService>]) -> usize {
        let mut running = self.lock();
        let before = running.len();
        running.retain(|(service, stop)| {
            let keep = wanted.iter().any(|w| Arc::ptr_eq(w, service));
            if !keep {
                stop.cancel();
            }
            keep
        });
        before - running.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(Arc<dyn BackgroundService>, CancellationToken)>> {
        // The lock is never held across an await or a call that can panic.
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The background services of a loaded config.
pub fn services_of(loaded: &LoadedConfig) -> Vec<Arc<dyn BackgroundService>> {
    loaded.plugins.iter().filter_map(|p| p.background.clone()).collect()
}

/// Reloads the config when its file changes.
#[derive(Debug)]
pub struct ConfigReloader {
    /// Where and how often.
    pub settings: ReloadSettings,
    /// The context plugins are built with (as at startup).
    pub build: BuildContext,
    /// Scheduler metric families (shared by every generation).
    pub scheduler_metrics: SchedulerMetrics,
    /// Objective priorities (`--objective` and the InferenceObjective watch), one store shared
    /// by every scheduler generation.
    pub objectives: crate::objectives::ObjectiveStore,
    /// Whether the running app has a Flow Control controller (the gate cannot change).
    pub flow_control: bool,
    /// The swap point.
    pub shared: Arc<Shared>,
    /// The running background services.
    pub services: Arc<ServiceSet>,
    /// Reload counters.
    pub metrics: ReloadMetrics,
}

impl ConfigReloader {
    /// Polls the file until `cancel`; `current` is the text loaded at startup and `previous`
    /// its plugins.
    pub async fn run(self, current: String, mut previous: Reusable, cancel: CancellationToken) {
        let path = self.settings.path.clone();
        let mut watch =
            ContentWatch::new(self.settings.interval, Some(&current.into_bytes()), move || std::fs::read(&path));
        while let Some(change) = watch.next(&cancel).await {
            let bytes = match change {
                Change::Changed(bytes) => bytes,
                Change::Unreadable(error) => {
                    warn!(path = %self.settings.path.display(), %error, "Config file unreadable; keeping the running config");
                    continue;
                }
            };
            let hash = content_hash(&bytes);
            match self.apply(&bytes, &previous).await {
                Ok((plugins, reused)) => {
                    self.metrics.record(true);
                    info!(path = %self.settings.path.display(), hash = format!("{hash:016x}"), ?reused, "Config reloaded");
                    previous = plugins;
                }
                Err(problems) => {
                    self.metrics.record(false);
                    for problem in &problems {
                        warn!(path = %self.settings.path.display(), hash = format!("{hash:016x}"), %problem, "Config reload rejected");
                    }
                }
            }
        }
    }

    /// Loads `bytes` and, when it is valid, swaps it in. Returns the new plugins (reusable by
    /// the next reload) and the names taken over, or every problem found.
    async fn apply(
        &self,
        bytes: &[u8],
        previous: &Reusable,
    ) -> Result<(Reusable, Vec<crate::framework::plugin::PluginName>), Vec<String>> {
        let text = std::str::from_utf8(bytes).map_err(|e| vec![format!("<document>: not UTF-8: {e}")])?;
        let loaded = config::load_reusing(text, &builtin(), &self.build, self.scheduler_metrics.clone(), previous)
            .map_err(|errors| errors.0.iter().map(ToString::to_string).collect::<Vec<_>>())?;
        if loaded.flow_control.is_some() != self.flow_control {
            return Err(vec![
                "featureGates: the flowControl gate (and the flowControl section's presence) cannot change on reload; restart epp"
                    .into(),
            ]);
        }
        let services = services_of(&loaded);
        self.services.start_new(&services).await.map_err(|e| vec![format!("plugin background service: {e}")])?;
        let scheduler = loaded.scheduler.with_objectives(self.objectives.clone());
        drop(self.shared.scheduler.replace(scheduler));
        let stopped = self.services.stop_others(&services);
        if stopped > 0 {
            info!(stopped, "Background services of removed or rebuilt plugins stopped");
        }
        Ok((loaded.reusable, loaded.reused))
    }
}
