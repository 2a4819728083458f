//! The plugin catalogue: plugin type name -> factory, built once by `builtin()`, the one module
//! that names every plugin. A factory turns a `PluginSpec` (name, type, raw parameters, config
//! path) into a `PluginInstance`, decoding its parameters strictly. Deprecated aliases map to
//! their replacement and log once.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{
    admitter, attribute_reporter, datalayer, decider, fairness, filter, picker, producer, profile_handler,
    request_parser, scorer, served_verifier,
};
use crate::framework::build::{BuildContext, BuildError, PluginSpec};
use crate::framework::plugin::PluginInstance;

/// Factory signature.
pub type Factory = fn(&PluginSpec, &BuildContext) -> Result<PluginInstance, BuildError>;

/// A registered type.
#[derive(Clone, Copy, Debug)]
pub struct Registration {
    /// Canonical type name.
    pub type_name: &'static str,
    /// Factory.
    pub factory: Factory,
    /// For an alias: the canonical type it stands for.
    pub alias_of: Option<&'static str>,
}

/// Type name -> registration.
#[derive(Debug, Default)]
pub struct Registry {
    types: HashMap<&'static str, Registration>,
    warned: HashMap<&'static str, Arc<AtomicBool>>,
}

impl Registry {
    /// Registers a type; a duplicate name is a programming error reported at startup.
    pub fn add(&mut self, type_name: &'static str, factory: Factory) -> &mut Self {
        let previous = self.types.insert(type_name, Registration { type_name, factory, alias_of: None });
        assert!(previous.is_none(), "plugin type {type_name} registered twice");
        self
    }

    /// Registers a deprecated alias of an already registered type.
    pub fn alias(&mut self, alias: &'static str, canonical: &'static str) -> &mut Self {
        let target = self.types.get(canonical).copied();
        let target = target.unwrap_or_else(|| panic!("alias {alias} of unregistered {canonical}"));
        self.types
            .insert(alias, Registration { type_name: canonical, factory: target.factory, alias_of: Some(canonical) });
        self.warned.insert(alias, Arc::new(AtomicBool::new(false)));
        self
    }

    /// Looks a type (or alias) up; logs a deprecation once per alias.
    pub fn get(&self, type_name: &str) -> Option<Registration> {
        let reg = self.types.get(type_name).copied()?;
        if let (Some(canonical), Some(flag)) = (reg.alias_of, self.warned.get(type_name))
            && !flag.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(alias = type_name, replacement = canonical, "Deprecated plugin type; it still loads");
        }
        Some(reg)
    }

    /// Every registered name (types and aliases), sorted.
    pub fn names(&self) -> Vec<&'static str> {
        let mut v: Vec<_> = self.types.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// True when the name is a deprecated alias.
    pub fn is_alias(&self, type_name: &str) -> bool {
        self.types.get(type_name).is_some_and(|r| r.alias_of.is_some())
    }
}

/// The built-in catalogue: the one list of every plugin type epp knows.
pub fn builtin() -> Registry {
    let mut r = Registry::default();
    r.add(profile_handler::single::TYPE, profile_handler::single::build)
        .add(picker::max_score::TYPE, picker::max_score::build)
        .add(picker::random::TYPE, picker::random::build)
        .add(picker::weighted_random::TYPE, picker::weighted_random::build)
        .add(scorer::queue::TYPE, scorer::queue::build)
        .add(scorer::kv_utilization::TYPE, scorer::kv_utilization::build)
        .add(scorer::prefix_cache::TYPE, scorer::prefix_cache::build)
        .add(scorer::running::TYPE, scorer::running::build)
        .add(scorer::lora::TYPE, scorer::lora::build)
        .add(scorer::load_aware::TYPE, scorer::load_aware::build)
        .add(scorer::active_request::TYPE, scorer::active_request::build)
        .add(scorer::token_load::TYPE, scorer::token_load::build)
        .add(scorer::no_hit_lru::TYPE, scorer::no_hit_lru::build)
        .add(scorer::session_affinity::TYPE, scorer::session_affinity::build)
        .add(scorer::context_length::TYPE, scorer::context_length::build)
        .add(producer::approx_prefix::TYPE, producer::approx_prefix::build)
        .add(producer::precise_prefix::TYPE, producer::precise_prefix::build)
        .add(scorer::precise_prefix::TYPE, scorer::precise_prefix::build)
        .add(producer::token::TYPE, producer::token::build)
        .add(producer::inflight::TYPE, producer::inflight::build)
        .add(producer::session_id::TYPE, producer::session_id::build)
        .add(producer::mm_cache::TYPE, producer::mm_cache::build)
        .add(scorer::mm_cache::TYPE, scorer::mm_cache::build)
        .add(producer::k8s_notification::TYPE, producer::k8s_notification::build)
        .add(filter::utilization::TYPE, filter::utilization::build)
        .add(filter::role::DECODE, filter::role::build_decode)
        .add(filter::role::PREFILL, filter::role::build_prefill)
        .add(filter::role::ENCODE, filter::role::build_encode)
        .add(filter::label_selector::TYPE, filter::label_selector::build)
        .add(filter::by_label::TYPE, filter::by_label::build)
        .add(filter::prefix_affinity::TYPE, filter::prefix_affinity::build)
        .add(filter::concurrency::TYPE, filter::concurrency::build)
        .add(filter::header_testing::TYPE, filter::header_testing::build)
        .add(served_verifier::TYPE, served_verifier::build)
        .add(attribute_reporter::TYPE, attribute_reporter::build)
        .add(datalayer::file_discovery::TYPE, datalayer::file_discovery::build)
        .add(datalayer::models::SOURCE_TYPE, datalayer::models::build_source)
        .add(datalayer::models::EXTRACTOR_TYPE, datalayer::models::build_extractor)
        .add(filter::served_model::TYPE, filter::served_model::build)
        .add(filter::slo_headroom_tier::TYPE, filter::slo_headroom_tier::build)
        .add(scorer::latency::TYPE, scorer::latency::build)
        .add(producer::predicted_latency::TYPE, producer::predicted_latency::build)
        .add(profile_handler::disagg::TYPE, profile_handler::disagg::build)
        .add(profile_handler::disagg::pd::TYPE, profile_handler::disagg::pd::build)
        .add(profile_handler::data_parallel::TYPE, profile_handler::data_parallel::build)
        .add(profile_handler::disagg_headers::TYPE, profile_handler::disagg_headers::build)
        .add(decider::ALWAYS_PD, decider::build_always)
        .add(decider::prefix_based::TYPE, decider::prefix_based::build)
        .add(decider::multimodal::TYPE, decider::multimodal::build)
        .add(admitter::latency_slo::TYPE, admitter::latency_slo::build)
        .add(admitter::probabilistic::TYPE, admitter::probabilistic::build)
        .add(fairness::program_aware::TYPE, fairness::program_aware::build);
    for (type_name, factory) in producer::passive::TYPES {
        r.add(type_name, *factory);
    }
    for (type_name, factory) in request_parser::TYPES {
        r.add(type_name, factory);
    }
    r.alias(scorer::kv_utilization::OLD_TYPE, scorer::kv_utilization::TYPE)
        .alias(producer::token::OLD_TYPE, producer::token::TYPE)
        .alias(profile_handler::disagg_headers::OLD_TYPE, profile_handler::disagg_headers::TYPE)
        .alias(filter::label_selector::OLD_TYPE, filter::label_selector::TYPE);
    r
}
