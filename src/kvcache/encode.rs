//! [`EventBatch`] -> vLLM msgpack payload: the inverse of [`super::decode`], for publishers
//! that stand in for vLLM (the fleet simulator's wire mode, tests). Writes the vLLM 0.24+
//! shape: the batch as an array `[ts, events, data_parallel_rank]`, each event as a map
//! `{"type": tag, field: value, ...}`; optional fields are written only when present.

use rmpv::Value;

use super::events::{BlockRemoved, BlockStored, EventBatch, ExtraKey, KvEvent, Tier};

/// The msgpack payload of `batch` (the third frame of a vLLM KV-event message).
pub fn encode_batch(batch: &EventBatch) -> Vec<u8> {
    let events = batch.events.iter().map(event).collect();
    let rank = batch.data_parallel_rank.map_or(Value::Nil, Value::from);
    let mut out = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = rmpv::encode::write_value(&mut out, &Value::Array(vec![Value::F64(batch.ts), Value::Array(events), rank]));
    out
}

fn map(pairs: Vec<(&str, Value)>) -> Value {
    Value::Map(pairs.into_iter().map(|(k, v)| (Value::from(k), v)).collect())
}

fn hashes(h: &[u64]) -> Value {
    Value::Array(h.iter().map(|h| Value::from(*h)).collect())
}

fn medium(tier: Option<Tier>) -> Value {
    match tier {
        None => Value::Nil,
        Some(Tier::Gpu) => Value::from("GPU"),
        Some(Tier::Cpu) => Value::from("CPU"),
        Some(Tier::Storage) => Value::from("STORAGE"),
        // Speculative entries are epp's own; engines never publish them.
        Some(Tier::Other | Tier::Speculative) => Value::from("OTHER"),
    }
}

fn event(ev: &KvEvent) -> Value {
    match ev {
        KvEvent::BlockStored(s) => stored(s),
        KvEvent::BlockRemoved(r) => removed(r),
        KvEvent::AllBlocksCleared => map(vec![("type", Value::from("AllBlocksCleared"))]),
    }
}

fn stored(s: &BlockStored) -> Value {
    let mut fields = vec![
        ("type", Value::from("BlockStored")),
        ("block_hashes", hashes(&s.block_hashes)),
        ("parent_block_hash", s.parent_block_hash.map_or(Value::Nil, Value::from)),
        ("token_ids", Value::Array(s.token_ids.iter().map(|t| Value::from(*t)).collect())),
        ("block_size", Value::from(s.block_size)),
        ("lora_id", s.lora_id.map_or(Value::Nil, Value::from)),
        ("medium", medium(s.medium)),
    ];
    if let Some(name) = &s.lora_name {
        fields.push(("lora_name", Value::from(name.as_str())));
    }
    if !s.extra_keys.is_empty() {
        let keys = s.extra_keys.iter().map(|k| k.as_ref().map_or(Value::Nil, |k| extra_keys(k))).collect();
        fields.push(("extra_keys", Value::Array(keys)));
    }
    if let Some(g) = s.group_idx {
        fields.push(("group_idx", Value::from(g)));
    }
    if let Some(kind) = &s.kv_cache_spec_kind {
        fields.push(("kv_cache_spec_kind", Value::from(kind.as_str())));
    }
    map(fields)
}

fn extra_keys(keys: &[ExtraKey]) -> Value {
    Value::Array(
        keys.iter()
            .map(|k| match k {
                ExtraKey::Str(s) => Value::from(s.as_str()),
                ExtraKey::Mm { identifier, offset } => {
                    Value::Array(vec![Value::from(identifier.as_str()), Value::from(*offset)])
                }
                ExtraKey::Bytes(b) => Value::Binary(b.clone()),
                ExtraKey::Other => Value::Nil,
            })
            .collect(),
    )
}

fn removed(r: &BlockRemoved) -> Value {
    let mut fields = vec![
        ("type", Value::from("BlockRemoved")),
        ("block_hashes", hashes(&r.block_hashes)),
        ("medium", medium(r.medium)),
    ];
    if let Some(g) = r.group_idx {
        fields.push(("group_idx", Value::from(g)));
    }
    map(fields)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kvcache::decode_batch;

    #[test]
    fn decode_inverts_encode() {
        let batch = EventBatch {
            ts: 1.5,
            events: vec![
                KvEvent::BlockStored(BlockStored {
                    block_hashes: vec![1, u64::MAX],
                    parent_block_hash: Some(0),
                    token_ids: (0..8).collect(),
                    block_size: 4,
                    medium: Some(Tier::Gpu),
                    lora_name: Some("a".into()),
                    extra_keys: vec![Some(vec![ExtraKey::Str("salt".into())]), None],
                    group_idx: Some(1),
                    kv_cache_spec_kind: Some("full_attention".into()),
                    ..Default::default()
                }),
                KvEvent::BlockRemoved(BlockRemoved { block_hashes: vec![7], medium: Some(Tier::Cpu), group_idx: None }),
                KvEvent::AllBlocksCleared,
            ],
            data_parallel_rank: Some(2),
            unknown_events: 0,
        };
        assert_eq!(decode_batch(&encode_batch(&batch)).expect("decodes"), batch);
    }
}
