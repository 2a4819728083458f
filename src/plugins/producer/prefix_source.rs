//! What the two prefix producers (approximate and precise) have in common: both read
//! `TokenizedPrompt`, cut it into block keys, look the keys up in their own index and write
//! `PrefixCacheMatchInfo` under their instance name. A `PrefixSource` supplies the keys and
//! the lookup; the `DataProducer` implementation is shared. A source whose index is outside
//! the process answered before the decision (`RequestData::prefetched_prefix`); its answer is
//! narrowed to the candidates here instead of looking up again.

use std::sync::Arc;

use crate::endpoints::model::Candidate;
use crate::framework::context::DataKey;
use crate::framework::data::{EndpointMatches, PrefixMatches, RequestData};
use crate::framework::plugin::{DataProducer, PluginName};
use crate::request::InferenceRequest;

/// A source of prefix matches.
pub trait PrefixSource: Send + Sync + std::fmt::Debug {
    /// Instance name (the data key's producer).
    fn source_name(&self) -> &PluginName;
    /// Block size used for this request, and the prompt's block keys.
    fn prompt_keys(&self, request: &InferenceRequest, tokens: &[u32], candidates: &[Candidate]) -> (usize, Vec<u64>);
    /// Per endpoint, how much of `keys` it holds (endpoints holding nothing may be absent).
    fn lookup(&self, keys: &[u64], candidates: &[Candidate]) -> EndpointMatches;
}

impl<T: PrefixSource> DataProducer for T {
    fn produces(&self) -> Vec<DataKey> {
        vec![DataKey::PrefixCacheMatchInfo(Some(self.source_name().clone()))]
    }

    fn consumes(&self) -> Vec<DataKey> {
        vec![DataKey::TokenizedPrompt]
    }

    fn produce(&self, request: &InferenceRequest, candidates: &[Candidate], data: &mut RequestData) {
        if let Some(pre) = data.prefetched_prefix.get(Some(self.source_name())).cloned() {
            let per_endpoint = candidates
                .iter()
                .filter_map(|c| pre.per_endpoint.get(&c.endpoint.id).map(|m| (c.endpoint.id.clone(), *m)))
                .collect();
            let matches = PrefixMatches { per_endpoint, ..(*pre).clone() };
            data.prefix.insert(self.source_name().clone(), Arc::new(matches));
            return;
        }
        let Some(tokens) = data.tokens.clone() else { return };
        let (block_size, keys) = self.prompt_keys(request, &tokens, candidates);
        let per_endpoint = self.lookup(&keys, candidates);
        let matches =
            PrefixMatches { block_size_tokens: block_size, total_blocks: keys.len(), keys: keys.into(), per_endpoint };
        data.prefix.insert(self.source_name().clone(), Arc::new(matches));
    }
}
