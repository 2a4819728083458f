//! Synthetic inputs: OpenAI chat bodies of a given size and endpoint lists with load, for
//! benchmarks and tests.

use std::net::{IpAddr, Ipv4Addr};

use epp::endpoints::model::Endpoint;

const WORDS: &[&str] = &[
    "the", "model", "serves", "tokens", "from", "a", "shared", "prefix", "cache", "quickly", "and", "routes",
    "requests",
];

/// A `/v1/chat/completions` body of about `bytes` bytes: a system prompt shared by every
/// body with the same `group`, then a user turn with distinct text.
pub fn chat_body(bytes: usize, group: u32, salt: u32) -> Vec<u8> {
    let mut system = String::new();
    let mut i = group as usize;
    while system.len() < bytes * 3 / 4 {
        system.push_str(WORDS[i % WORDS.len()]);
        system.push(' ');
        i = i.wrapping_mul(7).wrapping_add(3);
    }
    let mut user = format!("question {salt}: ");
    while system.len() + user.len() < bytes.saturating_sub(120) {
        user.push_str(WORDS[(salt as usize + user.len()) % WORDS.len()]);
        user.push(' ');
    }
    let body = serde_json::json!({
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        "max_tokens": 128,
        "stream": false,
    });
    serde_json::to_vec(&body).unwrap_or_default()
}

/// `n` endpoints `pod-0..n` at 10.0.x.y:8000.
pub fn endpoints(n: usize) -> Vec<Endpoint> {
    (0..n)
        .map(|i| {
            Endpoint::new(
                format!("pod-{i}"),
                IpAddr::V4(Ipv4Addr::new(10, 0, (i / 250) as u8, (i % 250 + 1) as u8)),
                8000,
            )
        })
        .collect()
}

/// A store of `n` synthetic endpoints with varied fresh load, and the default pipeline built
/// over it (for benchmarks).
pub fn default_pipeline(n: usize) -> anyhow::Result<(epp::endpoints::store::EndpointStore, epp::config::LoadedConfig)> {
    use std::sync::Arc;
    let store = epp::endpoints::store::EndpointStore::new();
    store.replace(endpoints(n));
    for (i, e) in store.snapshot().entries.iter().enumerate() {
        let mut m =
            epp::endpoints::model::MetricsState { updated_at: Some(tokio::time::Instant::now()), ..Default::default() };
        m.metrics.waiting_queue_size = (i % 7) as u64;
        m.metrics.kv_cache_usage = (i % 10) as f64 / 10.0;
        e.metrics.store(Arc::new(m));
    }
    let cx = epp::framework::build::BuildContext { endpoints: store.clone(), ..Default::default() };
    let loaded = epp::app::load_config(None, &cx, epp::scheduling::metrics::SchedulerMetrics::detached())?;
    Ok((store, loaded))
}
