//! Producer planning: every consumed data key must have a producer. A consumer that names
//! none binds the default producer of that kind, created automatically when absent
//! (`approx-prefix-cache-producer` for prefix matches, `token-producer` with the `estimate`
//! backend for tokens, `inflight-load-producer` for load, `predicted-latency-producer` for
//! latency predictions, `session-id-producer` for session ids, `mm-embeddings-cache-producer`
//! for encoder-cache matches). A named producer must exist and
//! produce that key. Producers then run in dependency order; a cycle is an error. The stage
//! before the decision awaits the producers' stage capabilities in that same order.

use super::error::{ConfigError, closest};
use super::loader::Instances;
use crate::framework::build::BuildContext;
use crate::framework::context::DataKey;
use crate::framework::data::DefaultProducers;
use crate::framework::plugin::PluginName;
use crate::plugins::registry::Registry;
use crate::scheduling::stage::{Stage, StagePredictor};

/// Producer order and defaults.
#[derive(Debug, Default)]
pub struct ProducerPlan {
    /// Producer instance names in run order.
    pub order: Vec<PluginName>,
    /// The producer that answers, per data kind, for consumers that name none.
    pub defaults: DefaultProducers,
}

fn default_type(key: &DataKey) -> &'static str {
    match key {
        DataKey::TokenizedPrompt => "token-producer",
        DataKey::PrefixCacheMatchInfo(_) => "approx-prefix-cache-producer",
        DataKey::InFlightLoad(_) => "inflight-load-producer",
        DataKey::LatencyPredictionInfo(_) => "predicted-latency-producer",
        DataKey::SessionId => "session-id-producer",
        DataKey::EncoderCacheMatchInfo(_) => "mm-embeddings-cache-producer",
    }
}

/// Normalises a produced key to its kind (dropping the instance name).
fn kind(key: &DataKey) -> DataKey {
    match key {
        DataKey::TokenizedPrompt => DataKey::TokenizedPrompt,
        DataKey::PrefixCacheMatchInfo(_) => DataKey::PrefixCacheMatchInfo(None),
        DataKey::InFlightLoad(_) => DataKey::InFlightLoad(None),
        DataKey::LatencyPredictionInfo(_) => DataKey::LatencyPredictionInfo(None),
        DataKey::SessionId => DataKey::SessionId,
        DataKey::EncoderCacheMatchInfo(_) => DataKey::EncoderCacheMatchInfo(None),
    }
}

/// Plans producers, injecting defaults; records problems in `errors`.
pub(crate) fn plan(
    registry: &Registry,
    cx: &BuildContext,
    instances: &mut Instances,
    errors: &mut Vec<ConfigError>,
) -> ProducerPlan {
    let mut plan = ProducerPlan::default();
    // Bounded fixpoint: each round may inject one default producer per kind (6 kinds).
    for _ in 0..7 {
        let mut needed: Vec<(String, DataKey)> = Vec::new();
        for (spec, inst) in &instances.items {
            let consumed =
                inst.consumer.iter().flat_map(|c| c.consumes()).chain(inst.producer.iter().flat_map(|p| p.consumes()));
            needed.extend(consumed.map(|k| (spec.path.clone(), k)));
        }
        let mut injected_any = false;
        for (path, key) in needed {
            match &key {
                DataKey::PrefixCacheMatchInfo(Some(name))
                | DataKey::InFlightLoad(Some(name))
                | DataKey::LatencyPredictionInfo(Some(name))
                | DataKey::EncoderCacheMatchInfo(Some(name)) => {
                    let produces = instances
                        .get(name)
                        .and_then(|(_, i)| i.producer.as_ref())
                        .is_some_and(|p| p.produces().iter().any(|k| kind(k) == kind(&key)));
                    if !produces && !errors.iter().any(|e| e.path == path) {
                        let mut e = ConfigError::new(
                            path.clone(),
                            format!("producer {name:?} does not exist or does not produce the data this plugin reads"),
                        );
                        if let Some(s) = closest(name, instances.names()) {
                            e = e.suggest(format!("did you mean {s:?}?"));
                        }
                        errors.push(e);
                    }
                }
                _ => {
                    let has = instances.items.iter().any(|(_, i)| {
                        i.producer.as_ref().is_some_and(|p| p.produces().iter().any(|k| kind(k) == kind(&key)))
                    });
                    if !has {
                        let t = default_type(&key);
                        match instances.inject(
                            registry,
                            cx,
                            t,
                            "a plugin consumes its data and no producer was declared",
                        ) {
                            Ok(_) => injected_any = true,
                            Err(e) => errors.push(e),
                        }
                    }
                }
            }
        }
        if !injected_any {
            break;
        }
    }
    let first_of = |t: &str| {
        instances.items.iter().find(|(_, i)| i.type_name == t && i.producer.is_some()).map(|(s, _)| s.name.clone())
    };
    plan.defaults.prefix = first_of("approx-prefix-cache-producer").or_else(|| {
        instances
            .items
            .iter()
            .find(|(_, i)| {
                i.producer
                    .as_ref()
                    .is_some_and(|p| p.produces().iter().any(|k| matches!(k, DataKey::PrefixCacheMatchInfo(_))))
            })
            .map(|(s, _)| s.name.clone())
    });
    plan.defaults.inflight = first_of("inflight-load-producer");
    plan.defaults.latency = first_of("predicted-latency-producer");
    plan.defaults.encoder_cache = first_of("mm-embeddings-cache-producer");
    order(instances, &mut plan, errors);
    plan
}

/// Topological order: a producer runs after the producers of every kind it consumes.
fn order(instances: &Instances, plan: &mut ProducerPlan, errors: &mut Vec<ConfigError>) {
    let mut pending: Vec<(PluginName, Vec<DataKey>, Vec<DataKey>)> = instances
        .items
        .iter()
        .filter_map(|(s, i)| {
            i.producer.as_ref().map(|p| {
                (s.name.clone(), p.produces().iter().map(kind).collect(), p.consumes().iter().map(kind).collect())
            })
        })
        .collect();
    while !pending.is_empty() {
        let ready = pending.iter().position(|(name, _, consumes)| {
            consumes.iter().all(|k| !pending.iter().any(|(other, produces, _)| other != name && produces.contains(k)))
        });
        match ready {
            Some(i) => plan.order.push(pending.remove(i).0),
            None => {
                let names: Vec<String> = pending.iter().map(|(n, _, _)| n.to_string()).collect();
                errors.push(ConfigError::new(
                    "plugins",
                    format!("data producers depend on each other in a cycle: {}", names.join(", ")),
                ));
                return;
            }
        }
    }
}

/// What the stage before the decision awaits: the first tokenize step, every prefix prefetch
/// and every latency step in producer order, each latency step bound to its encoder-cache sizer (named, or the
/// default encoder-cache producer; none when that plugin has no sizer).
pub(crate) fn stage(instances: &Instances, plan: &ProducerPlan) -> Stage {
    let in_order = || plan.order.iter().filter_map(|name| instances.get(name));
    let tokenizer = in_order().find_map(|(_, i)| i.tokenize_step.clone());
    let sizer = |binding: &Option<PluginName>| {
        let name = binding.as_ref().or(plan.defaults.encoder_cache.as_ref())?;
        instances.get(name).and_then(|(_, i)| i.encoder_cache_sizer.clone())
    };
    let predictors = in_order()
        .filter_map(|(spec, i)| {
            let step = i.latency_step.as_ref()?;
            Some(StagePredictor {
                producer: spec.name.clone(),
                predictor: step.predictor.clone(),
                encoder_cache: step.encoder_cache.as_ref().and_then(sizer),
            })
        })
        .collect();
    let prefetches = in_order().filter_map(|(_, i)| i.prefix_prefetch.clone()).collect();
    Stage { tokenizer, predictors, prefetches }
}
