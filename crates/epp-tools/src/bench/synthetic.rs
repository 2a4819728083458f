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

/// Sentences of [`chat_turns_body`]: quotes, newlines, a tab and non-ASCII letters, as chat
/// text has them.
const SENTENCES: &[&str] = &[
    "Could you check the \"deploy\" step again?\n",
    "Sure \u{2014} the rollout paused at 40 % because the canary's p99 rose.\n",
    "R\u{e9}sum\u{e9} of the incident: a na\u{ef}ve retry loop and timeouts of a caf\u{e9} queue.\n",
    "Run `kubectl get pods -n serving` and paste what it prints:\n\tpod-a Running\n",
];

/// A multi-turn `/v1/chat/completions` body of about `bytes` bytes: a system prompt and a
/// `tools` array, then short user and assistant turns (every fifth a user turn with a text
/// part and an image URL part) whose text has escapes and non-ASCII letters. The first half
/// of the turns is the same for every body of `group` (a shared conversation history), the
/// rest follows `salt`.
pub fn chat_turns_body(bytes: usize, group: u32, salt: u32) -> Vec<u8> {
    let system = format!("You are the on-call assistant of team {group}. Answer briefly; quote commands.");
    let mut messages = vec![serde_json::json!({"role": "system", "content": system})];
    // The envelope, the tools and the system turn take about 400 bytes.
    let mut size = 400;
    let mut turn = 0usize;
    while size < bytes {
        // Group seeds are small; salts are moved past them so no body's own turns repeat a group's.
        let seed = if size < bytes / 2 { group } else { salt.wrapping_add(1 << 16) } as usize;
        let at = seed.wrapping_mul(7).wrapping_add(turn);
        let text: String = (0..1 + at % 3).map(|k| SENTENCES[(at + k) % SENTENCES.len()]).collect();
        let message = if turn % 5 == 4 {
            serde_json::json!({"role": "user", "content": [
                {"type": "text", "text": text},
                {"type": "image_url", "image_url": {"url": format!("https://example.com/{seed}/{turn}.png")}}]})
        } else {
            serde_json::json!({"role": if turn.is_multiple_of(2) { "user" } else { "assistant" }, "content": text})
        };
        size += serde_json::to_vec(&message).map_or(0, |m| m.len() + 1);
        messages.push(message);
        turn += 1;
    }
    let body = serde_json::json!({
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "messages": messages,
        "tools": [{"type": "function", "function": {"name": "get_pods", "description": "List the pods of a namespace.",
            "parameters": {"type": "object", "properties": {"namespace": {"type": "string"}}}}}],
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
