//! Filters: keep a subset of the candidates.

pub mod by_label;
pub mod concurrency;
pub mod header_testing;
pub mod label_selector;
pub mod prefix_affinity;
pub mod role;
pub mod served_model;
pub mod slo_headroom_tier;
pub mod utilization;

#[cfg(test)]
pub(crate) mod contract {
    //! Contract every filter satisfies: the output is a subset of the input.
    use crate::framework::plugin::Filter;
    use crate::test_util::{context_for, endpoint};

    /// Checks the subset property over a mixed candidate set.
    pub fn check(filter: &dyn Filter) {
        let request = crate::test_util::chat_request("m", &["hi"]);
        let data = Default::default();
        let cx = context_for(&request, &data);
        let input: Vec<_> = (0..6)
            .map(|i| {
                endpoint(&format!("e{i}"))
                    .waiting(i * 3)
                    .kv_usage(0.2 * i as f64)
                    .fresh(i % 2 == 0)
                    .role(["prefill", "decode", "both"][i as usize % 3])
                    .build()
            })
            .collect();
        let ids: Vec<String> = input.iter().map(|c| c.id().to_string()).collect();
        let out = filter.filter(&cx, input);
        assert!(out.len() <= ids.len());
        assert!(out.iter().all(|c| ids.contains(&c.id().to_string())));
    }
}
