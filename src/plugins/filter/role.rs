//! Role filters on the `llm-d.ai/role` pod label:
//! - `decode-filter`: role in {decode, prefill-decode, both, encode-prefill-decode}, or no role label;
//! - `prefill-filter`: role in {prefill, encode-prefill, prefill-decode, both, encode-prefill-decode};
//! - `encode-filter`: role in {encode, encode-prefill, encode-prefill-decode}.
//!
//! No parameters.

use std::sync::Arc;

use crate::endpoints::model::{Candidate, ROLE_LABEL};
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::SchedulingContext;
use crate::framework::plugin::{Filter, PluginInstance};
use crate::plugins::producer::passive::NoParams;

/// `decode-filter`.
pub const DECODE: &str = "decode-filter";
/// `prefill-filter`.
pub const PREFILL: &str = "prefill-filter";
/// `encode-filter`.
pub const ENCODE: &str = "encode-filter";

/// Keeps endpoints whose role is in a set.
#[derive(Debug)]
pub struct RoleFilter {
    roles: &'static [&'static str],
    keep_unlabeled: bool,
}

/// The decode role filter.
pub const DECODE_FILTER: RoleFilter =
    RoleFilter { roles: &["decode", "prefill-decode", "both", "encode-prefill-decode"], keep_unlabeled: true };
/// The prefill role filter.
pub const PREFILL_FILTER: RoleFilter = RoleFilter {
    roles: &["prefill", "encode-prefill", "prefill-decode", "both", "encode-prefill-decode"],
    keep_unlabeled: false,
};
/// The encode role filter.
pub const ENCODE_FILTER: RoleFilter =
    RoleFilter { roles: &["encode", "encode-prefill", "encode-prefill-decode"], keep_unlabeled: false };

fn build_with(spec: &PluginSpec, type_name: &'static str, filter: RoleFilter) -> Result<PluginInstance, BuildError> {
    let _: NoParams = decode_params(spec)?;
    Ok(PluginInstance::new(spec.name.clone(), type_name).with_filter(Arc::new(filter)))
}

/// Factory of `decode-filter`.
pub fn build_decode(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    build_with(spec, DECODE, DECODE_FILTER)
}

/// Factory of `prefill-filter`.
pub fn build_prefill(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    build_with(spec, PREFILL, PREFILL_FILTER)
}

/// Factory of `encode-filter`.
pub fn build_encode(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    build_with(spec, ENCODE, ENCODE_FILTER)
}

impl RoleFilter {
    /// True when an endpoint with this role label value (None = unlabelled) is kept.
    pub fn accepts(&self, role: Option<&str>) -> bool {
        match role {
            Some(role) => self.roles.contains(&role),
            None => self.keep_unlabeled,
        }
    }
}

impl Filter for RoleFilter {
    fn filter(&self, _: &SchedulingContext<'_>, candidates: Vec<Candidate>) -> Vec<Candidate> {
        candidates.into_iter().filter(|c| self.accepts(c.endpoint.label(ROLE_LABEL))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{context_for, endpoint};

    fn kept(f: &RoleFilter) -> Vec<String> {
        let request = Default::default();
        let data = Default::default();
        let cx = context_for(&request, &data);
        let c = vec![
            endpoint("p").role("prefill").build(),
            endpoint("d").role("decode").build(),
            endpoint("b").role("both").build(),
            endpoint("e").role("encode").build(),
            endpoint("u").build(),
        ];
        f.filter(&cx, c).iter().map(|c| c.id().to_string()).collect()
    }

    #[test]
    fn roles_match_the_reference_table() {
        assert_eq!(kept(&DECODE_FILTER), ["d", "b", "u"]);
        assert_eq!(kept(&PREFILL_FILTER), ["p", "b"]);
        assert_eq!(kept(&ENCODE_FILTER), ["e"]);
    }

    #[test]
    fn contract() {
        for f in [&DECODE_FILTER, &PREFILL_FILTER, &ENCODE_FILTER] {
            super::super::contract::check(f);
        }
    }
}
