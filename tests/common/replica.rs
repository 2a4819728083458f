//! Helpers shared by the replica-sync tests (in-process replicas and `epp` processes): a
//! conversation's first turn or follow-up, routing one request on an ext_proc client, and
//! reading one series from `/metrics` text.

use epp::proto::ext_proc::external_processor_client::ExternalProcessorClient;
use tonic::transport::Channel;

use super::{Exchange, FULL_DUPLEX, request_body, request_headers, set_header};

/// A chat body of conversation `conversation`: its first turn (a long system prompt and one
/// question) or its follow-up (the same, plus an answer and a second question).
pub fn turn(conversation: usize, follow_up: bool) -> Vec<u8> {
    let system = format!("Conversation {conversation}. {}", "You are a careful assistant. ".repeat(100));
    let mut messages = vec![
        serde_json::json!({"role": "system", "content": system}),
        serde_json::json!({"role": "user", "content": "What changed in the report?"}),
    ];
    if follow_up {
        messages.push(serde_json::json!({"role": "assistant", "content": "Three figures were revised."}));
        messages.push(serde_json::json!({"role": "user", "content": "Which one matters most?"}));
    }
    serde_json::to_vec(&serde_json::json!({"model": "m", "messages": messages})).expect("json")
}

/// Routes one chat request on `client` (full duplex) and returns the destination.
pub async fn route_on(client: &mut ExternalProcessorClient<Channel>, body: &[u8], headers: &[(&str, &str)]) -> String {
    let mut ex = Exchange::open(client).await;
    ex.send(request_headers("/v1/chat/completions", headers, false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(body, true)).await;
    let reply = ex.next().await;
    set_header(&reply, "x-gateway-destination-endpoint").unwrap_or_else(|| panic!("no destination: {reply:?}"))
}

/// The value of an unlabelled series, or of `name{labels}`, in `/metrics` text.
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{series} not in /metrics"))
}

/// `epp_replica_sync_messages_received_total{outcome="<outcome>"}`.
pub fn received(text: &str, outcome: &str) -> f64 {
    metric(text, &format!("epp_replica_sync_messages_received_total{{outcome=\"{outcome}\"}}"))
}
