//! Profile assembly: creates the `default` profile when none is declared, injects the
//! profile handler and picker the reference prescribes, resolves every `pluginRef` to a
//! plugin in a role that fits its slot, and checks weights. Paths name profiles by name:
//! `schedulingProfiles[decode].plugins[2].pluginRef`.

use std::sync::Arc;

use super::error::ConfigError;
use super::loader::Instances;
use super::raw::{RawConfig, RawProfile, RawProfilePlugin};
use crate::framework::build::BuildContext;
use crate::framework::plugin::{Picker, ProfileHandler};
use crate::plugins::profile_handler;
use crate::plugins::registry::Registry;
use crate::scheduling::metrics::{ExtensionPoint, SchedulerMetrics};
use crate::scheduling::profile::{Profile, Slot, WeightedScorer};

/// The handler and profiles of a config.
pub(crate) struct ProfileSet {
    /// The profile handler.
    pub handler: Slot<dyn ProfileHandler>,
    /// Profiles in declared order.
    pub profiles: Vec<Profile>,
}

/// Builds the profiles; `None` when errors were recorded.
pub(crate) fn build(
    raw: &RawConfig,
    registry: &Registry,
    cx: &BuildContext,
    metrics: &SchedulerMetrics,
    instances: &mut Instances,
    errors: &mut Vec<ConfigError>,
) -> Option<ProfileSet> {
    let mut raw_profiles = raw.scheduling_profiles.clone();
    if raw_profiles.is_empty() {
        let plugins = instances
            .items
            .iter()
            .filter(|(_, i)| i.filter.is_some() || i.scorer.is_some() || i.picker.is_some())
            .map(|(s, _)| RawProfilePlugin { plugin_ref: Some(s.name.to_string()), weight: None })
            .collect();
        raw_profiles.push(RawProfile { name: Some("default".into()), plugins });
        instances
            .injected
            .push("profile `default` with every filter, scorer and picker (no schedulingProfiles given)".into());
    }
    let handler = handler(&raw_profiles, registry, cx, metrics, instances, errors);
    ensure_pickers(&mut raw_profiles, registry, cx, instances, errors);
    let mut profiles = Vec::with_capacity(raw_profiles.len());
    let mut names = std::collections::HashSet::new();
    for (i, p) in raw_profiles.iter().enumerate() {
        let name = p.name.clone().unwrap_or_default();
        if name.is_empty() {
            errors.push(ConfigError::new(format!("schedulingProfiles[{i}].name"), "profile name is required"));
            continue;
        }
        if !names.insert(name.clone()) {
            errors.push(ConfigError::new(format!("schedulingProfiles[{name}]"), "duplicate profile name"));
            continue;
        }
        if let Some(profile) = profile(&name, p, metrics, instances, errors) {
            profiles.push(profile);
        }
    }
    Some(ProfileSet { handler: handler?, profiles })
}

fn handler(
    raw_profiles: &[RawProfile],
    registry: &Registry,
    cx: &BuildContext,
    metrics: &SchedulerMetrics,
    instances: &mut Instances,
    errors: &mut Vec<ConfigError>,
) -> Option<Slot<dyn ProfileHandler>> {
    let handlers: Vec<usize> =
        instances.items.iter().enumerate().filter(|(_, (_, i))| i.profile_handler.is_some()).map(|(k, _)| k).collect();
    let index = match handlers.as_slice() {
        // A declared handler that failed to build already has its own error.
        [] if instances.failed_types.iter().any(|t| profile_handler::TYPES.contains(t)) => return None,
        [] if raw_profiles.len() == 1 => {
            match instances.inject(registry, cx, "single-profile-handler", "one profile and no profile handler") {
                Ok(_) => instances.items.len() - 1,
                Err(e) => {
                    errors.push(e);
                    return None;
                }
            }
        }
        [] => {
            errors.push(
                ConfigError::new(
                    "plugins",
                    format!("no profile handler configured for {} profiles", raw_profiles.len()),
                )
                .suggest("add a `disagg-profile-handler` (prefill/decode) or use a single profile"),
            );
            return None;
        }
        [one] => *one,
        many => {
            let names: Vec<String> = many.iter().map(|k| instances.items[*k].0.name.to_string()).collect();
            errors.push(ConfigError::new("plugins", format!("more than one profile handler: {}", names.join(", "))));
            return None;
        }
    };
    let (spec, inst) = &instances.items[index];
    if inst.type_name == "single-profile-handler" && raw_profiles.len() > 1 {
        errors.push(
            ConfigError::new(
                spec.path.clone(),
                format!("single-profile-handler needs exactly one profile, found {}", raw_profiles.len()),
            )
            .suggest("use `disagg-profile-handler` for prefill/decode profiles"),
        );
    }
    let plugin = inst.profile_handler.clone()?;
    Some(Slot {
        name: spec.name.clone(),
        timer: metrics.plugin_timer(ExtensionPoint::ProfilePicker, inst.type_name, &spec.name),
        plugin,
    })
}

/// Injects `max-score-picker` when no picker exists and appends the first picker to every
/// profile that lacks one.
fn ensure_pickers(
    raw_profiles: &mut [RawProfile],
    registry: &Registry,
    cx: &BuildContext,
    instances: &mut Instances,
    errors: &mut Vec<ConfigError>,
) {
    let first_picker = instances.items.iter().find(|(_, i)| i.picker.is_some()).map(|(s, _)| s.name.to_string());
    let picker = match first_picker {
        Some(p) => p,
        None => match instances.inject(registry, cx, "max-score-picker", "no picker configured") {
            Ok(n) => n.to_string(),
            Err(e) => {
                errors.push(e);
                return;
            }
        },
    };
    for p in raw_profiles.iter_mut() {
        let has_picker = p
            .plugins
            .iter()
            .any(|r| r.plugin_ref.as_deref().and_then(|n| instances.get(n)).is_some_and(|(_, i)| i.picker.is_some()));
        if !has_picker {
            p.plugins.push(RawProfilePlugin { plugin_ref: Some(picker.clone()), weight: None });
        }
    }
}

fn profile(
    name: &str,
    p: &RawProfile,
    metrics: &SchedulerMetrics,
    instances: &Instances,
    errors: &mut Vec<ConfigError>,
) -> Option<Profile> {
    let mut filters = Vec::new();
    let mut scorers = Vec::new();
    let mut picker: Option<Slot<dyn Picker>> = None;
    let before = errors.len();
    for (j, r) in p.plugins.iter().enumerate() {
        let path = format!("schedulingProfiles[{name}].plugins[{j}]");
        let Some(plugin_ref) = r.plugin_ref.as_deref().filter(|s| !s.is_empty()) else {
            errors.push(ConfigError::new(format!("{path}.pluginRef"), "pluginRef is required"));
            continue;
        };
        let Some((spec, inst)) = instances.get(plugin_ref) else {
            // A declared plugin that failed to build already has its own error.
            if !instances.declared.iter().any(|d| d == plugin_ref) {
                errors.push(instances.undefined_ref(format!("{path}.pluginRef"), plugin_ref));
            }
            continue;
        };
        let timer = |point| metrics.plugin_timer(point, inst.type_name, &spec.name);
        let mut fitted = false;
        if let Some(f) = &inst.filter {
            filters.push(Slot { name: spec.name.clone(), plugin: f.clone(), timer: timer(ExtensionPoint::Filter) });
            fitted = true;
        }
        if let Some(s) = &inst.scorer {
            let weight = r.weight.unwrap_or(1.0);
            if !weight.is_finite() || weight < 0.0 {
                errors.push(ConfigError::new(
                    format!("{path}.weight"),
                    format!("weight must be a finite number >= 0, found {weight}"),
                ));
            }
            scorers.push(WeightedScorer {
                slot: Slot { name: spec.name.clone(), plugin: s.clone(), timer: timer(ExtensionPoint::Scorer) },
                weight,
            });
            fitted = true;
        }
        if let Some(pk) = &inst.picker {
            if let Some(prev) = &picker {
                errors.push(ConfigError::new(
                    format!("{path}.pluginRef"),
                    format!("a second picker in profile {name:?} (already has {:?})", prev.name),
                ));
            }
            picker = Some(Slot { name: spec.name.clone(), plugin: pk.clone(), timer: timer(ExtensionPoint::Picker) });
            fitted = true;
        }
        if !fitted {
            errors.push(ConfigError::new(format!("{path}.pluginRef"), format!(
                "plugin {plugin_ref:?} ({}) is a {}, which cannot be used in a scheduling profile (only filters, scorers and pickers can)",
                inst.type_name,
                inst.roles()
            )).suggest("declare it under `plugins` only; it runs without a profile reference"));
        }
    }
    let Some(picker) = picker else {
        if errors.len() == before {
            errors.push(ConfigError::new(format!("schedulingProfiles[{name}]"), "profile has no picker"));
        }
        return None;
    };
    (errors.len() == before).then(|| Profile { name: Arc::from(name), filters, scorers, picker })
}
