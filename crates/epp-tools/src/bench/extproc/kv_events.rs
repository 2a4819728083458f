//! KV-event load while serving: publishes vLLM-format msgpack batches (`BlockStored` chains
//! of 16-token blocks, later `BlockRemoved` of the same blocks, so the index stays bounded)
//! from each simulated pod's PUB socket at a fixed total rate of block events per second,
//! and reads how many blocks the epp applied from its registry.

use std::time::Duration;

use bytes::Bytes;
use rmpv::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use zeromq::{PubSocket, SocketSend, ZmqMessage};

/// Tokens per block (the precise producer in the bench config uses the same).
pub const BLOCK_TOKENS: usize = 16;
/// Blocks per message (one event per message).
pub const BLOCKS_PER_MESSAGE: usize = 16;
/// Chains each pod stores before removing them again.
const CHAINS: u64 = 64;
/// Served model name in topics.
const MODEL: &str = "meta-llama/Llama-3.1-8B-Instruct";

/// Publishes until `cancel`, spreading messages round robin over `publishers` (one per pod,
/// `topics[i]` naming pod i), at `blocks_per_s` block events per second in total.
pub async fn publish(
    mut publishers: Vec<PubSocket>,
    topics: Vec<String>,
    blocks_per_s: f64,
    cancel: CancellationToken,
) {
    if publishers.is_empty() || blocks_per_s <= 0.0 {
        return;
    }
    let payloads: Vec<Vec<Bytes>> = (0..publishers.len() as u64).map(pod_payloads).collect();
    let period = Duration::from_secs_f64(BLOCKS_PER_MESSAGE as f64 / blocks_per_s);
    let mut next = Instant::now();
    let mut seq = 0u64;
    while !cancel.is_cancelled() {
        while next <= Instant::now() {
            let pod = (seq % publishers.len() as u64) as usize;
            let round = seq / publishers.len() as u64;
            let payload = payloads[pod][(round % payloads[pod].len() as u64) as usize].clone();
            let frames = vec![Bytes::from(topics[pod].clone()), Bytes::copy_from_slice(&round.to_be_bytes()), payload];
            if let Ok(m) = ZmqMessage::try_from(frames) {
                // A PUB socket drops what a slow subscriber cannot take; so does vLLM.
                let _ = publishers[pod].send(m).await;
            }
            seq += 1;
            next += period;
        }
        tokio::select! { _ = cancel.cancelled() => return, _ = tokio::time::sleep_until(next) => {} }
    }
}

/// The topic vLLM uses for a pod: `kv@<ip:port>@<model>`.
pub fn topic(pod: std::net::SocketAddr) -> String {
    format!("kv@{pod}@{MODEL}")
}

/// `CHAINS` stored batches, then the matching removals, for pod `pod`.
fn pod_payloads(pod: u64) -> Vec<Bytes> {
    let hashes =
        |chain: u64| (0..BLOCKS_PER_MESSAGE as u64).map(|b| (pod << 40) | (chain << 16) | b).collect::<Vec<_>>();
    let stored = (0..CHAINS).map(|c| {
        let tokens = (0..(BLOCKS_PER_MESSAGE * BLOCK_TOKENS) as u64).map(|t| Value::from((c * 7919 + t) % 120_000));
        event(vec![
            ("type", Value::from("BlockStored")),
            ("block_hashes", Value::Array(hashes(c).into_iter().map(Value::from).collect())),
            ("parent_block_hash", Value::Nil),
            ("token_ids", Value::Array(tokens.collect())),
            ("block_size", Value::from(BLOCK_TOKENS as u64)),
            ("medium", Value::from("GPU")),
        ])
    });
    let removed = (0..CHAINS).map(|c| {
        event(vec![
            ("type", Value::from("BlockRemoved")),
            ("block_hashes", Value::Array(hashes(c).into_iter().map(Value::from).collect())),
            ("medium", Value::from("GPU")),
        ])
    });
    stored.chain(removed).collect()
}

/// A one-event vLLM batch: `[timestamp, [event], dp_rank]`.
fn event(fields: Vec<(&str, Value)>) -> Bytes {
    let map = Value::Map(fields.into_iter().map(|(k, v)| (Value::from(k), v)).collect());
    let batch = Value::Array(vec![Value::F64(1_767_225_600.0), Value::Array(vec![map]), Value::Nil]);
    let mut out = Vec::new();
    // Writing to a Vec cannot fail.
    let _ = rmpv::encode::write_value(&mut out, &batch);
    Bytes::from(out)
}

/// Engine blocks the epp applied so far (`epp_kv_blocks_total`, all ops).
pub fn blocks_applied(registry: &prometheus::Registry) -> f64 {
    registry
        .gather()
        .iter()
        .filter(|f| f.name() == "epp_kv_blocks_total")
        .flat_map(|f| f.get_metric().iter().map(|m| m.get_counter().get_value()))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use epp::kvcache::decode::decode_batch;
    use epp::kvcache::events::KvEvent;

    #[test]
    fn payloads_decode_as_vllm_batches_and_remove_what_they_stored() {
        let p = pod_payloads(3);
        assert_eq!(p.len(), 2 * CHAINS as usize);
        let first = decode_batch(&p[0]).expect("stored decodes");
        let last = decode_batch(&p[CHAINS as usize]).expect("removed decodes");
        match (&first.events[..], &last.events[..]) {
            ([KvEvent::BlockStored(s)], [KvEvent::BlockRemoved(r)]) => {
                assert_eq!(s.block_hashes.len(), BLOCKS_PER_MESSAGE);
                assert_eq!(s.token_ids.len(), BLOCKS_PER_MESSAGE * BLOCK_TOKENS);
                assert_eq!(s.block_hashes, r.block_hashes, "chain 0 is removed again");
            }
            other => panic!("unexpected events {other:?}"),
        }
    }
}
