//! `flowControl` block -> `FlowControlSettings`: Kubernetes quantities (`maxBytes`,
//! `maxRequests`; 0 or omitted = unlimited), Go durations (`defaultRequestTTL`; 0 = no queue
//! TTL), bands with their policy references resolved to declared policy plugins (or the
//! always-available defaults `global-strict-fairness-policy`, `fcfs-ordering-policy`,
//! `static-usage-limit-policy`), and the usage ceiling. Every problem is recorded with its
//! path. The block is checked with or without the `flowControl` gate; only the gate makes
//! the runtime use it.

use std::time::Duration;

use super::error::ConfigError;
use super::loader::Instances;
use super::raw::{RawFlowControl, RawPriorityBand};
use crate::flowcontrol::settings::{BandSettings, DEFAULT_BAND_MAX_BYTES, Fairness, FlowControlSettings, Ordering};

/// Policy types every config can name without declaring them.
const ALWAYS_AVAILABLE: &[&str] =
    &["global-strict-fairness-policy", "fcfs-ordering-policy", "static-usage-limit-policy"];

/// Validates the block; `None` when it has errors (recorded in `errors`).
pub(crate) fn build(
    raw: Option<&RawFlowControl>,
    instances: &Instances,
    errors: &mut Vec<ConfigError>,
) -> Option<FlowControlSettings> {
    let Some(raw) = raw else { return Some(FlowControlSettings::default()) };
    let before = errors.len();
    let mut s = FlowControlSettings {
        max_bytes: quantity(raw.max_bytes.as_ref(), "flowControl.maxBytes", errors),
        max_requests: quantity(raw.max_requests.as_ref(), "flowControl.maxRequests", errors),
        default_ttl: duration(raw.default_request_ttl.as_deref(), "flowControl.defaultRequestTTL", errors),
        no_endpoint_ttl: duration(raw.no_endpoint_request_ttl.as_deref(), "flowControl.noEndpointRequestTTL", errors),
        ..FlowControlSettings::default()
    };
    if let Some(b) = &raw.default_priority_band {
        s.default_band = band(b, "flowControl.defaultPriorityBand", instances, errors);
    }
    if let Some(b) = &raw.default_negative_priority_band {
        s.default_negative_band = Some(band(b, "flowControl.defaultNegativePriorityBand", instances, errors));
    }
    for (i, b) in raw.priority_bands.iter().flatten().enumerate() {
        let path = format!("flowControl.priorityBands[{i}]");
        let Some(priority) = b.priority else {
            errors.push(ConfigError::new(format!("{path}.priority"), "priority is required"));
            continue;
        };
        if s.bands.iter().any(|(p, _)| *p == priority) {
            errors
                .push(ConfigError::new(format!("{path}.priority"), format!("duplicate band for priority {priority}")));
            continue;
        }
        s.bands.push((priority, band(b, &path, instances, errors)));
    }
    if let Some(name) = raw.usage_limit_policy_plugin_ref.as_deref() {
        s.ceiling = ceiling(name, instances, errors).unwrap_or(1.0);
    }
    (errors.len() == before).then_some(s)
}

fn band(raw: &RawPriorityBand, path: &str, instances: &Instances, errors: &mut Vec<ConfigError>) -> BandSettings {
    let max_bytes = match &raw.max_bytes {
        Some(v) => quantity(Some(v), &format!("{path}.maxBytes"), errors),
        None => Some(DEFAULT_BAND_MAX_BYTES),
    };
    let fairness = raw.fairness_policy_ref.as_deref().map_or(Some(Fairness::default()), |name| {
        let at = format!("{path}.fairnessPolicyRef");
        match policy_type(name, &at, instances, errors)? {
            "global-strict-fairness-policy" => Some(Fairness::GlobalStrict),
            "round-robin-fairness-policy" => Some(Fairness::RoundRobin),
            other => match instances.get(name).and_then(|(_, inst)| inst.fairness.clone()) {
                // A stateful policy plugin (program-aware-fairness): every band naming it
                // shares the one instance.
                Some(policy) => Some(Fairness::Policy(policy)),
                None => not_a(name, other, "fairness policy", &at, errors),
            },
        }
    });
    let ordering = raw.ordering_policy_ref.as_deref().map_or(Some(Ordering::default()), |name| {
        let at = format!("{path}.orderingPolicyRef");
        match policy_type(name, &at, instances, errors)? {
            "fcfs-ordering-policy" => Some(Ordering::Fcfs),
            "edf-ordering-policy" => Some(Ordering::Edf),
            "slo-deadline-ordering-policy" => Some(Ordering::SloDeadline),
            other => not_a(name, other, "ordering policy", &at, errors),
        }
    });
    BandSettings {
        max_bytes,
        max_requests: quantity(raw.max_requests.as_ref(), &format!("{path}.maxRequests"), errors),
        ttl: duration(raw.default_request_ttl.as_deref(), &format!("{path}.defaultRequestTTL"), errors),
        fairness: fairness.unwrap_or_default(),
        ordering: ordering.unwrap_or_default(),
    }
}

fn not_a<T>(name: &str, type_name: &str, role: &str, path: &str, errors: &mut Vec<ConfigError>) -> Option<T> {
    errors.push(ConfigError::new(path, format!("plugin {name:?} ({type_name}) is not a {role}")));
    None
}

/// The type of the policy plugin `name` refers to.
fn policy_type<'a>(
    name: &'a str,
    path: &str,
    instances: &'a Instances,
    errors: &mut Vec<ConfigError>,
) -> Option<&'a str> {
    if let Some((_, inst)) = instances.get(name) {
        return Some(inst.type_name);
    }
    if let Some(t) = ALWAYS_AVAILABLE.iter().find(|t| **t == name) {
        return Some(t);
    }
    if !instances.declared.iter().any(|d| d == name) {
        errors.push(instances.undefined_ref(path, name));
    }
    None
}

fn ceiling(name: &str, instances: &Instances, errors: &mut Vec<ConfigError>) -> Option<f64> {
    let path = "flowControl.usageLimitPolicyPluginRef";
    match policy_type(name, path, instances, errors)? {
        "static-usage-limit-policy" => {}
        other => return not_a(name, other, "usage limit policy", path, errors),
    }
    let threshold = instances.get(name).and_then(|(spec, _)| spec.parameters.get("threshold").cloned());
    match threshold {
        None => Some(1.0),
        Some(v) => match v.as_f64() {
            Some(t) if t > 0.0 && t.is_finite() => Some(t),
            _ => {
                let at = instances.get(name).map_or_else(|| path.to_string(), |(s, _)| s.path.clone());
                errors.push(ConfigError::new(format!("{at}.parameters.threshold"), "must be a number > 0"));
                None
            }
        },
    }
}

fn duration(text: Option<&str>, path: &str, errors: &mut Vec<ConfigError>) -> Option<Duration> {
    let text = text?.trim();
    if text == "0" {
        return None;
    }
    match humantime::parse_duration(text) {
        Ok(d) if d.is_zero() => None,
        Ok(d) => Some(d),
        Err(e) => {
            errors.push(ConfigError::new(path, format!("invalid duration {text:?}: {e}")).suggest("e.g. 30s, 1m30s"));
            None
        }
    }
}

fn quantity(value: Option<&serde_yaml::Value>, path: &str, errors: &mut Vec<ConfigError>) -> Option<u64> {
    let parsed = match value? {
        serde_yaml::Value::Number(n) => n.as_u64().ok_or_else(|| format!("{n} is not a non-negative whole number")),
        serde_yaml::Value::String(s) => parse_quantity(s),
        other => Err(format!("expected a quantity, found {other:?}")),
    };
    match parsed {
        Ok(0) => None,
        Ok(n) => Some(n),
        Err(message) => {
            errors.push(ConfigError::new(path, message).suggest("use a Kubernetes quantity such as 1000, 500M or 2Gi"));
            None
        }
    }
}

/// Parses a Kubernetes quantity (`1000`, `1.5k`, `500M`, `2Gi`, `1e3`) into a whole number,
/// rounding fractions up.
pub fn parse_quantity(text: &str) -> Result<u64, String> {
    const SUFFIXES: &[(&str, f64)] = &[
        ("Ki", 1024.0),
        ("Mi", 1048576.0),
        ("Gi", 1073741824.0),
        ("Ti", 1099511627776.0),
        ("Pi", 1125899906842624.0),
        ("Ei", 1152921504606846976.0),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
        ("m", 1e-3),
    ];
    let t = text.trim();
    let (number, factor) = SUFFIXES.iter().find_map(|(s, f)| t.strip_suffix(s).map(|n| (n, *f))).unwrap_or((t, 1.0));
    let value: f64 = number.parse().map_err(|_| format!("invalid quantity {text:?}"))?;
    let total = (value * factor).ceil();
    if !total.is_finite() || total < 0.0 || total > u64::MAX as f64 {
        return Err(format!("quantity {text:?} is out of range"));
    }
    Ok(total as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("1000"), Ok(1000));
        assert_eq!(parse_quantity("2Gi"), Ok(2 << 30));
        assert_eq!(parse_quantity("1.5k"), Ok(1500));
        assert_eq!(parse_quantity("500M"), Ok(500_000_000));
        assert_eq!(parse_quantity("1e3"), Ok(1000));
        assert_eq!(parse_quantity("1500m"), Ok(2));
        assert!(parse_quantity("lots").is_err());
        assert!(parse_quantity("-1").is_err());
    }
}
