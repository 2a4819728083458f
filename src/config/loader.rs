//! The loader: document -> instantiated plugins -> validated profiles and producers ->
//! `Scheduler`. Every problem is collected with its path; nothing stops at the first error.
//! Injected defaults (profile handler, picker, producers, saturation detector) are recorded
//! in `LoadedConfig::injected` and logged by the caller.

use std::sync::Arc;

use super::error::{ConfigError, ConfigErrors, closest, ref_suggestion};
use super::raw::{RawConfig, RawSaturationDetector};
use super::{API_VERSIONS, FEATURE_GATES, flow_control, producers, profiles};
use crate::flowcontrol::settings::FlowControlSettings;
use crate::framework::build::{BuildContext, PluginSpec, decode_params};
use crate::framework::plugin::{PluginInstance, PluginName};
use crate::plugins::datalayer::{file_discovery, models};
use crate::plugins::producer::passive::{CoreMetricsExtractorParams, MetricsDataSourceParams};
use crate::plugins::registry::Registry;
use crate::request::parsers::ParserSet;
use crate::scheduling::metrics::{ExtensionPoint, SchedulerMetrics};
use crate::scheduling::profile::Slot;
use crate::scheduling::scheduler::{AdmitterSlot, Scheduler, SchedulerParts};

/// A loaded config.
#[derive(Debug)]
pub struct LoadedConfig {
    /// The scheduler.
    pub scheduler: Scheduler,
    /// Every instantiated plugin (declared and injected), in order.
    pub plugins: Vec<PluginInstance>,
    /// Human-readable notes on injected defaults.
    pub injected: Vec<String>,
    /// Scraper settings from the data-layer plugins.
    pub data_layer: DataLayerSettings,
    /// Flow Control settings; `Some` only with the `flowControl` feature gate.
    pub flow_control: Option<FlowControlSettings>,
}

/// Settings the data-layer plugins give the app (scraper, models pollers, discovery).
#[derive(Clone, Debug, Default)]
pub struct DataLayerSettings {
    /// `metrics-data-source` parameters.
    pub source: MetricsDataSourceParams,
    /// `core-metrics-extractor` parameters.
    pub extractor: CoreMetricsExtractorParams,
    /// `models-data-source` parameters, when a source and a `models-data-extractor` are both
    /// declared (polling runs only then).
    pub models: Option<models::SourceParams>,
    /// `file-discovery` parameters, when declared.
    pub file_discovery: Option<file_discovery::Params>,
}

/// Instances under construction, with their specs.
pub(crate) struct Instances {
    pub(crate) items: Vec<(PluginSpec, PluginInstance)>,
    pub(crate) injected: Vec<String>,
    /// Every name declared in the document, including plugins that failed to build.
    pub(crate) declared: Vec<String>,
    /// Canonical types of declared plugins that failed to build (their errors are recorded).
    pub(crate) failed_types: Vec<&'static str>,
    /// Registered type names (for suggestions).
    pub(crate) types: Vec<&'static str>,
}

impl Instances {
    pub(crate) fn get(&self, name: &str) -> Option<&(PluginSpec, PluginInstance)> {
        self.items.iter().find(|(s, _)| &*s.name == name)
    }

    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.items.iter().map(|(s, _)| &*s.name)
    }

    /// The error for a reference to a plugin that does not exist, with a suggestion from
    /// the declared names or, failing that, the registered types.
    pub(crate) fn undefined_ref(&self, path: impl Into<String>, name: &str) -> ConfigError {
        let e = ConfigError::new(path, format!("references undefined plugin {name:?}"));
        let names = self.declared.iter().map(String::as_str).chain(self.names());
        match ref_suggestion(name, names, self.types.iter().copied()) {
            Some(s) => e.suggest(s),
            None => e,
        }
    }

    /// Instantiates a plugin of `type_name` with no parameters, as a default the loader adds.
    pub(crate) fn inject(
        &mut self,
        registry: &Registry,
        cx: &BuildContext,
        type_name: &str,
        why: &str,
    ) -> Result<PluginName, ConfigError> {
        let name: PluginName = type_name.into();
        if self.get(type_name).is_some() {
            return Ok(name);
        }
        let spec = PluginSpec {
            name: name.clone(),
            type_name: type_name.into(),
            parameters: serde_json::Value::Null,
            path: format!("<injected {type_name}>"),
        };
        let reg = registry.get(type_name).ok_or_else(|| ConfigError::new(&spec.path, "not registered"))?;
        let instance = (reg.factory)(&spec, cx).map_err(|e| ConfigError::new(e.path, e.message))?;
        self.injected.push(format!("{type_name} ({why})"));
        self.items.push((spec, instance));
        Ok(name)
    }
}

/// Loads a config document.
pub fn load(
    text: &str,
    registry: &Registry,
    cx: &BuildContext,
    metrics: SchedulerMetrics,
) -> Result<LoadedConfig, ConfigErrors> {
    crate::yaml_limits::check(text, crate::yaml_limits::CONFIG)
        .map_err(|e| ConfigErrors(vec![ConfigError::new("<document>", format!("refused before parsing: {e}"))]))?;
    let raw: RawConfig =
        serde_yaml::from_str(text).map_err(|e| ConfigErrors(vec![ConfigError::new("<document>", e.to_string())]))?;
    let mut errors = Vec::new();
    check_header(&raw, &mut errors);
    let mut instances = instantiate(&raw, registry, cx, &mut errors);
    let profile_list = profiles::build(&raw, registry, cx, &metrics, &mut instances, &mut errors);
    let producer_plan = producers::plan(registry, cx, &mut instances, &mut errors);
    let saturation = saturation_detector(&raw, registry, cx, &mut instances, &mut errors);
    let data_layer = data_layer(&raw, &instances, &mut errors);
    let flow_settings = flow_control::build(raw.flow_control.as_ref(), &instances, &mut errors);
    check_refs(&raw, &instances, &mut errors);
    let parsers = parser_set(&raw, &instances, &mut errors);
    if !errors.is_empty() {
        return Err(ConfigErrors(errors));
    }
    let Some(profile_list) = profile_list else {
        return Err(ConfigErrors(vec![ConfigError::new("schedulingProfiles", "no usable profile")]));
    };
    let slot = |point, spec: &PluginSpec, inst: &PluginInstance| {
        (metrics.plugin_timer(point, inst.type_name, &spec.name), spec.name.clone())
    };
    let producers = producer_plan
        .order
        .iter()
        .filter_map(|name| instances.get(name))
        .filter_map(|(spec, inst)| {
            let (timer, name) = slot(ExtensionPoint::DataProducer, spec, inst);
            inst.producer.clone().map(|plugin| Slot { name, plugin, timer })
        })
        .collect();
    let pre_request = instances
        .items
        .iter()
        .filter_map(|(spec, inst)| {
            let (timer, name) = slot(ExtensionPoint::PreRequest, spec, inst);
            inst.pre_request.clone().map(|plugin| Slot { name, plugin, timer })
        })
        .collect();
    let admitters = instances
        .items
        .iter()
        .filter_map(|(spec, inst)| {
            let plugin = inst.admitter.clone()?;
            let (timer, name) = slot(ExtensionPoint::Admission, spec, inst);
            let counters = metrics.admission_counters(inst.type_name, &spec.name);
            Some(AdmitterSlot { slot: Slot { name, plugin, timer }, counters })
        })
        .collect();
    let response = instances.items.iter().filter_map(|(_, i)| i.response.clone()).collect();
    let flow_control = flow_settings.filter(|_| raw.feature_gates.iter().any(|g| g == "flowControl"));
    let stage = producers::stage(&instances, &producer_plan);
    let scheduler = Scheduler::new(SchedulerParts {
        handler: profile_list.handler,
        profiles: profile_list.profiles,
        producers,
        admitters,
        pre_request,
        response,
        defaults: producer_plan.defaults,
        metrics,
        saturation,
        // With Flow Control, admission (not the legacy shedding rule) decides who waits.
        legacy_shedding: flow_control.is_none(),
        objectives: crate::objectives::ObjectiveStore::default(),
        parsers,
        stage,
    });
    Ok(LoadedConfig {
        scheduler,
        injected: instances.injected,
        plugins: instances.items.into_iter().map(|(_, i)| i).collect(),
        data_layer,
        flow_control,
    })
}

fn check_header(raw: &RawConfig, errors: &mut Vec<ConfigError>) {
    match raw.api_version.as_deref() {
        Some(v) if API_VERSIONS.contains(&v) => {}
        Some(v) => errors.push(
            ConfigError::new("apiVersion", format!("unsupported apiVersion {v:?}"))
                .suggest(format!("use one of {API_VERSIONS:?}")),
        ),
        None => {}
    }
    if let Some(kind) = raw.kind.as_deref()
        && kind != "EndpointPickerConfig"
    {
        errors.push(ConfigError::new("kind", format!("expected EndpointPickerConfig, found {kind:?}")));
    }
    for (i, gate) in raw.feature_gates.iter().enumerate() {
        if !FEATURE_GATES.contains(&gate.as_str()) {
            let mut e = ConfigError::new(format!("featureGates[{i}]"), format!("unknown feature gate {gate:?}"));
            if let Some(s) = closest(gate, FEATURE_GATES.iter().copied()) {
                e = e.suggest(format!("did you mean {s:?}?"));
            }
            errors.push(e);
        }
    }
}

fn instantiate(raw: &RawConfig, registry: &Registry, cx: &BuildContext, errors: &mut Vec<ConfigError>) -> Instances {
    let declared: Vec<String> = raw
        .plugins
        .iter()
        .filter_map(|p| p.name.clone().filter(|n| !n.is_empty()).or_else(|| p.type_name.clone()))
        .collect();
    let mut out = Instances {
        items: Vec::new(),
        injected: Vec::new(),
        declared: declared.clone(),
        failed_types: Vec::new(),
        types: registry.names(),
    };
    for (i, p) in raw.plugins.iter().enumerate() {
        let path = format!("plugins[{i}]");
        let Some(type_name) = p.type_name.as_deref().filter(|t| !t.is_empty()) else {
            errors.push(ConfigError::new(format!("{path}.type"), "plugin type is required"));
            continue;
        };
        let name = p.name.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| type_name.to_string());
        if out.get(&name).is_some() {
            errors.push(
                ConfigError::new(format!("{path}.name"), format!("duplicate plugin name {name:?}"))
                    .suggest("give each instance a unique `name`"),
            );
            continue;
        }
        let Some(reg) = registry.get(type_name) else {
            let mut e = ConfigError::new(format!("{path}.type"), format!("unknown plugin type {type_name:?}"));
            if let Some(s) = closest(type_name, registry.names()) {
                e = e.suggest(format!("did you mean {s:?}?"));
            }
            errors.push(e);
            continue;
        };
        let parameters = match p.parameters.as_ref().map(serde_json::to_value).transpose() {
            Ok(v) => v.unwrap_or(serde_json::Value::Null),
            Err(e) => {
                errors.push(ConfigError::new(format!("{path}.parameters"), e.to_string()));
                continue;
            }
        };
        let spec = PluginSpec { name: name.into(), type_name: type_name.to_string(), parameters, path };
        let mut plugin_cx = cx.clone();
        plugin_cx.earlier = out.items.iter().map(|(_, i)| i.clone()).collect();
        plugin_cx.declared = declared.clone();
        match (reg.factory)(&spec, &plugin_cx) {
            Ok(instance) => out.items.push((spec, instance)),
            Err(e) => {
                out.failed_types.push(reg.type_name);
                errors.push(ConfigError::new(e.path, e.message));
            }
        }
    }
    out
}

fn saturation_detector(
    raw: &RawConfig,
    registry: &Registry,
    cx: &BuildContext,
    instances: &mut Instances,
    errors: &mut Vec<ConfigError>,
) -> Option<Arc<dyn crate::framework::plugin::SaturationDetector>> {
    let flow_ref =
        raw.flow_control.as_ref().and_then(|f| f.saturation_detector.as_ref()).and_then(|r| r.plugin_ref.clone());
    let (path, name) = match (&raw.saturation_detector, flow_ref) {
        (_, Some(name)) => ("flowControl.saturationDetector.pluginRef", name),
        (Some(RawSaturationDetector::Ref(r)), None) if r.plugin_ref.as_deref().is_some_and(|n| !n.is_empty()) => {
            ("saturationDetector.pluginRef", r.plugin_ref.clone().unwrap_or_default())
        }
        (Some(RawSaturationDetector::Legacy(t)), None) => return legacy_detector(t, registry, cx, instances, errors),
        _ => match instances.inject(registry, cx, "utilization-detector", "default saturation detector") {
            Ok(n) => ("<injected>", n.to_string()),
            Err(e) => {
                errors.push(e);
                return None;
            }
        },
    };
    match instances.get(&name) {
        Some((_, inst)) if inst.saturation.is_some() => inst.saturation.clone(),
        Some((_, inst)) => {
            errors.push(ConfigError::new(
                path,
                format!("plugin {name:?} ({}) is not a saturation detector", inst.type_name),
            ));
            None
        }
        None => {
            errors.push(instances.undefined_ref(path, &name));
            None
        }
    }
}

fn legacy_detector(
    t: &super::raw::RawLegacyThresholds,
    registry: &Registry,
    cx: &BuildContext,
    instances: &mut Instances,
    errors: &mut Vec<ConfigError>,
) -> Option<Arc<dyn crate::framework::plugin::SaturationDetector>> {
    let mut params = serde_json::Map::new();
    if let Some(q) = t.queue_depth_threshold {
        params.insert("queueDepthThreshold".into(), q.into());
    }
    if let Some(k) = t.kv_cache_util_threshold {
        params.insert("kvCacheUtilThreshold".into(), k.into());
    }
    if let Some(s) = &t.metrics_staleness_threshold {
        params.insert("metricsStalenessThreshold".into(), s.clone().into());
    }
    let spec = PluginSpec {
        name: "utilization-detector".into(),
        type_name: "utilization-detector".into(),
        parameters: params.into(),
        path: "saturationDetector".into(),
    };
    let factory = registry.get("utilization-detector")?.factory;
    match factory(&spec, cx) {
        Ok(inst) => {
            let detector = inst.saturation.clone();
            instances.injected.push("utilization-detector (from the pre-v1.5 saturationDetector thresholds)".into());
            instances.items.push((spec, inst));
            detector
        }
        Err(e) => {
            errors.push(ConfigError::new(e.path, e.message));
            None
        }
    }
}

fn data_layer(raw: &RawConfig, instances: &Instances, errors: &mut Vec<ConfigError>) -> DataLayerSettings {
    let mut settings = DataLayerSettings::default();
    let (key, layer) = match (&raw.data_layer, &raw.data) {
        (Some(l), _) => ("dataLayer", Some(l)),
        (None, Some(l)) => ("data", Some(l)),
        _ => ("dataLayer", None),
    };
    if let Some(sources) = layer.and_then(|l| l.sources.as_ref())
        && sources.is_empty()
        && !raw.feature_gates.iter().any(|g| g == "enableLegacyMetrics")
    {
        errors.push(
            ConfigError::new(format!("{key}.sources"), "data layer enabled but no data sources configured")
                .suggest("remove `sources: []` to use the default metrics source"),
        );
    }
    let mut models_source = None;
    let mut has_extractor = false;
    for (spec, inst) in &instances.items {
        match inst.type_name {
            "metrics-data-source" => settings.source = decode_params(spec).unwrap_or_default(),
            "core-metrics-extractor" => settings.extractor = decode_params(spec).unwrap_or_default(),
            models::EXTRACTOR_TYPE => has_extractor = true,
            // Parameters were validated by the factories; a second instance is an error.
            models::SOURCE_TYPE => {
                if models_source.is_some() {
                    errors.push(ConfigError::new(&spec.path, "only one models-data-source is supported"));
                }
                models_source = models::source_params(spec).ok();
            }
            file_discovery::TYPE => {
                if settings.file_discovery.is_some() {
                    errors.push(ConfigError::new(&spec.path, "only one file-discovery is supported"));
                }
                settings.file_discovery = file_discovery::params(spec).ok();
            }
            _ => {}
        }
    }
    let needs_models = instances.items.iter().find(|(_, i)| i.type_name == crate::plugins::filter::served_model::TYPE);
    if let Some((spec, _)) = needs_models
        && !has_extractor
    {
        errors.push(
            ConfigError::new(
                &spec.path,
                "served-model-filter reads the /v1/models lists, but no models-data-extractor is declared",
            )
            .suggest("declare models-data-source and models-data-extractor plugins"),
        );
    }
    match (&models_source, has_extractor) {
        (Some(_), false) => tracing::warn!("models-data-source has no models-data-extractor; /v1/models is not polled"),
        (None, true) => tracing::warn!("models-data-extractor has no models-data-source; /v1/models is not polled"),
        _ => {}
    }
    settings.models = models_source.filter(|_| has_extractor);
    settings
}

/// The request parsers: `requestHandler.parsers` (llm-d) then `parser` (GIE), in order;
/// neither -> `openai-parser` alone. Each reference must name a request-parser plugin
/// (undefined names are reported by [`check_refs`]).
fn parser_set(raw: &RawConfig, instances: &Instances, errors: &mut Vec<ConfigError>) -> ParserSet {
    let handler = raw.request_handler.iter().flat_map(|h| h.parsers.iter()).enumerate();
    let refs = handler
        .map(|(i, p)| (format!("requestHandler.parsers[{i}].pluginRef"), p))
        .chain(raw.parser.iter().map(|p| ("parser.pluginRef".to_string(), p)));
    let mut kinds = Vec::new();
    for (path, r) in refs {
        let Some((_, inst)) = r.plugin_ref.as_deref().and_then(|n| instances.get(n)) else { continue };
        match inst.parser {
            Some(kind) => kinds.push(kind),
            None => errors.push(ConfigError::new(
                path,
                format!("plugin {:?} ({}) is a {}, not a request parser", &*inst.name, inst.type_name, inst.roles()),
            )),
        }
    }
    if kinds.is_empty() { ParserSet::default() } else { ParserSet::new(kinds) }
}

/// Checks plain `pluginRef`s outside profiles (data layer, parsers).
fn check_refs(raw: &RawConfig, instances: &Instances, errors: &mut Vec<ConfigError>) {
    let mut refs: Vec<(String, Option<String>)> = Vec::new();
    let layer = raw.data_layer.as_ref().or(raw.data.as_ref());
    if let Some(l) = layer {
        if let Some(d) = &l.discovery {
            refs.push(("dataLayer.discovery.pluginRef".into(), d.plugin_ref.clone()));
        }
        for (i, s) in l.sources.iter().flatten().enumerate() {
            refs.push((format!("dataLayer.sources[{i}].pluginRef"), s.plugin_ref.clone()));
            for (j, e) in s.extractors.iter().enumerate() {
                refs.push((format!("dataLayer.sources[{i}].extractors[{j}].pluginRef"), e.plugin_ref.clone()));
            }
        }
    }
    if let Some(p) = &raw.parser {
        refs.push(("parser.pluginRef".into(), p.plugin_ref.clone()));
    }
    for (i, p) in raw.request_handler.iter().flat_map(|h| h.parsers.iter()).enumerate() {
        refs.push((format!("requestHandler.parsers[{i}].pluginRef"), p.plugin_ref.clone()));
    }
    for (path, name) in refs {
        match name.as_deref() {
            None | Some("") => errors.push(ConfigError::new(path, "pluginRef is required")),
            Some(n) if instances.get(n).is_none() => errors.push(instances.undefined_ref(path, n)),
            Some(_) => {}
        }
    }
}
