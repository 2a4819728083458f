//! `precise-prefix-cache-scorer`: the deprecated all-in-one form the KServe samples use. It
//! takes the `precise-prefix-cache-producer` parameters (plus the ignored
//! `indexerConfig.tokenizersPoolConfig`), builds its own precise producer under its own name
//! and scores like `prefix-cache-scorer` bound to it: `matchBlocks / totalBlocks`, tier
//! weighted (llm-d v0.9+ absolute scoring).

use std::sync::Arc;

use super::prefix_cache::PrefixCacheScorer;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::plugin::PluginInstance;
use crate::plugins::producer::precise_prefix::{build_producer, params::Params, producer_instance};

/// Type name.
pub const TYPE: &str = "precise-prefix-cache-scorer";

/// Factory.
pub fn build(spec: &PluginSpec, cx: &BuildContext) -> Result<PluginInstance, BuildError> {
    let params: Params = decode_params(spec)?;
    if params.indexer_config.tokenizers_pool_config.is_some() {
        tracing::warn!(plugin = %spec.name, "indexerConfig.tokenizersPoolConfig is ignored: token ids come from the token-producer");
    }
    let producer = build_producer(spec, &params, cx)?;
    let scorer = Arc::new(PrefixCacheScorer::new(Some(spec.name.clone())));
    Ok(producer_instance(spec, TYPE, producer).with_scorer(scorer.clone()).with_consumer(scorer))
}
