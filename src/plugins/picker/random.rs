//! `random-picker`: uniformly random endpoints, ignoring scores. Parameters:
//! `maxNumOfEndpoints` (1).

use std::sync::Arc;

use rand::seq::SliceRandom;

use super::PickerParams;
use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::SchedulingContext;
use crate::framework::handles::RandomSource;
use crate::framework::plugin::{Picker, PluginInstance, ScoredCandidate};

/// Type name.
pub const TYPE: &str = "random-picker";

/// Picks at random.
#[derive(Debug)]
pub struct RandomPicker {
    count: usize,
    random: RandomSource,
}

/// Factory.
pub fn build(spec: &PluginSpec, cx: &BuildContext) -> Result<PluginInstance, BuildError> {
    let params: PickerParams = decode_params(spec)?;
    Ok(PluginInstance::new(spec.name.clone(), TYPE)
        .with_picker(Arc::new(RandomPicker { count: params.count(), random: cx.random.clone() })))
}

impl Picker for RandomPicker {
    fn pick(&self, _: &SchedulingContext<'_>, mut scored: Vec<ScoredCandidate>) -> Vec<Candidate> {
        self.random.with(|rng| scored.shuffle(rng));
        scored.into_iter().take(self.count).map(|s| s.candidate).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contract() {
        super::super::contract::check(&RandomPicker { count: 3, random: RandomSource::thread() }, 3);
    }
}
