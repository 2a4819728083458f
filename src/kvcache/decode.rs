//! vLLM msgpack batch -> [`EventBatch`].
//!
//! The only module that knows vLLM's KV-event wire format (reference §3):
//! the batch is an array `[ts, events, data_parallel_rank]` (a 2-element
//! array or a map are accepted too); each event is either an array
//! `[tag, field…]` (vLLM ≤ 0.23, positional, any length ≥ the required
//! fields, extra trailing elements ignored) or a map `{"type": tag, …}`
//! (0.24+, unknown keys ignored). Block hashes are ints (u64, or negative i64
//! reinterpreted) or bytes (last eight bytes big-endian). Pure and
//! allocation-bounded: any input yields `Ok` or a [`DecodeError`], never a panic.

use rmpv::Value;

use super::events::{BlockRemoved, BlockStored, EngineHash, EventBatch, ExtraKey, KvEvent, Tier};

/// Nesting bound for the schema-less reader (the deepest real shape is 5).
const MAX_DEPTH: usize = 16;

/// Why a payload could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Not valid msgpack.
    #[error("invalid msgpack")]
    Msgpack(#[source] rmpv::decode::Error),
    /// Bytes left after the batch value.
    #[error("{0} trailing bytes after the batch")]
    TrailingBytes(usize),
    /// The top-level value is not a batch.
    #[error("payload is not a KVEventBatch")]
    NotABatch,
    /// An event is neither an array with a tag nor a map with `type`.
    #[error("event {index} has no tag")]
    NoTag { index: usize },
    /// A required field is missing.
    #[error("{event} field {field} is missing")]
    MissingField { event: &'static str, field: &'static str },
    /// A field has the wrong type or an out-of-range value.
    #[error("{event} field {field} is malformed")]
    BadField { event: &'static str, field: &'static str },
}

/// Decodes one payload (the third ZMQ frame).
pub fn decode_batch(payload: &[u8]) -> Result<EventBatch, DecodeError> {
    let mut rd = payload;
    let value = rmpv::decode::read_value_with_max_depth(&mut rd, MAX_DEPTH).map_err(DecodeError::Msgpack)?;
    if !rd.is_empty() {
        return Err(DecodeError::TrailingBytes(rd.len()));
    }
    let (ts, events, rank) = match &value {
        Value::Array(items) if items.len() >= 2 => (&items[0], &items[1], items.get(2)),
        Value::Map(entries) => (
            map_get(entries, "ts").unwrap_or(&Value::Nil),
            map_get(entries, "events").ok_or(DecodeError::NotABatch)?,
            map_get(entries, "data_parallel_rank"),
        ),
        _ => return Err(DecodeError::NotABatch),
    };
    let ts = match ts {
        Value::F64(f) => *f,
        Value::F32(f) => f64::from(*f),
        Value::Integer(i) => i.as_f64().unwrap_or(0.0),
        _ => 0.0,
    };
    let data_parallel_rank = match rank {
        None | Some(Value::Nil) => None,
        Some(v) => Some(as_u32(v).ok_or(DecodeError::BadField { event: "batch", field: "data_parallel_rank" })?),
    };
    let Value::Array(raw_events) = events else {
        return Err(DecodeError::NotABatch);
    };
    let mut batch =
        EventBatch { ts, events: Vec::with_capacity(raw_events.len()), data_parallel_rank, unknown_events: 0 };
    for (index, raw) in raw_events.iter().enumerate() {
        let fields = Fields::of(raw).ok_or(DecodeError::NoTag { index })?;
        match fields.tag {
            "BlockStored" => batch.events.push(KvEvent::BlockStored(stored(&fields)?)),
            "BlockRemoved" => batch.events.push(KvEvent::BlockRemoved(removed(&fields)?)),
            "AllBlocksCleared" => batch.events.push(KvEvent::AllBlocksCleared),
            _ => batch.unknown_events += 1,
        }
    }
    Ok(batch)
}

/// Field access over either event form.
struct Fields<'a> {
    tag: &'a str,
    form: Form<'a>,
}

enum Form<'a> {
    /// Positional values after the tag.
    Array(&'a [Value]),
    /// Named entries (the `type` entry included).
    Map(&'a [(Value, Value)]),
}

impl<'a> Fields<'a> {
    fn of(raw: &'a Value) -> Option<Self> {
        match raw {
            Value::Array(items) => {
                let (tag, rest) = items.split_first()?;
                Some(Fields { tag: tag.as_str()?, form: Form::Array(rest) })
            }
            Value::Map(entries) => {
                let tag = map_get(entries, "type")?.as_str()?;
                Some(Fields { tag, form: Form::Map(entries) })
            }
            _ => None,
        }
    }

    /// The field at array position `pos` (0 = first after the tag) or map key `name`.
    fn get(&self, pos: usize, name: &str) -> Option<&'a Value> {
        match self.form {
            Form::Array(items) => items.get(pos),
            Form::Map(entries) => map_get(entries, name),
        }
    }
}

fn map_get<'a>(entries: &'a [(Value, Value)], name: &str) -> Option<&'a Value> {
    entries.iter().find(|(k, _)| k.as_str() == Some(name)).map(|(_, v)| v)
}

fn as_u32(v: &Value) -> Option<u32> {
    v.as_u64().and_then(|n| u32::try_from(n).ok())
}

/// A hash as an int (u64, or i64 reinterpreted) or bytes (last 8, big-endian).
fn hash_of(v: &Value) -> Option<EngineHash> {
    match v {
        Value::Integer(i) => i.as_u64().or_else(|| i.as_i64().map(|n| n as u64)),
        Value::Binary(b) if !b.is_empty() => {
            let tail = &b[b.len().saturating_sub(8)..];
            Some(tail.iter().fold(0u64, |acc, byte| (acc << 8) | u64::from(*byte)))
        }
        _ => None,
    }
}

fn opt_str(v: Option<&Value>) -> Option<Option<&str>> {
    match v {
        None | Some(Value::Nil) => Some(None),
        Some(v) => v.as_str().map(Some),
    }
}

fn hashes(f: &Fields<'_>, event: &'static str) -> Result<Vec<EngineHash>, DecodeError> {
    let field = "block_hashes";
    let Some(Value::Array(items)) = f.get(0, field) else {
        return Err(match f.get(0, field) {
            None => DecodeError::MissingField { event, field },
            Some(_) => DecodeError::BadField { event, field },
        });
    };
    items.iter().map(|v| hash_of(v).ok_or(DecodeError::BadField { event, field })).collect()
}

fn optional_u32(
    f: &Fields<'_>,
    pos: usize,
    event: &'static str,
    field: &'static str,
) -> Result<Option<u32>, DecodeError> {
    match f.get(pos, field) {
        None | Some(Value::Nil) => Ok(None),
        Some(v) => as_u32(v).map(Some).ok_or(DecodeError::BadField { event, field }),
    }
}

fn medium(f: &Fields<'_>, pos: usize, event: &'static str) -> Result<Option<Tier>, DecodeError> {
    let m = opt_str(f.get(pos, "medium")).ok_or(DecodeError::BadField { event, field: "medium" })?;
    Ok(m.map(|s| Tier::from_medium(Some(s))))
}

fn stored(f: &Fields<'_>) -> Result<BlockStored, DecodeError> {
    const EV: &str = "BlockStored";
    let bad = |field| DecodeError::BadField { event: EV, field };
    let block_hashes = hashes(f, EV)?;
    let parent_block_hash = match f.get(1, "parent_block_hash") {
        None | Some(Value::Nil) => None,
        Some(v) => Some(hash_of(v).ok_or(bad("parent_block_hash"))?),
    };
    let token_ids = match f.get(2, "token_ids") {
        None | Some(Value::Nil) => Vec::new(),
        Some(Value::Array(items)) => {
            items.iter().map(|v| as_u32(v).ok_or(bad("token_ids"))).collect::<Result<_, _>>()?
        }
        Some(_) => return Err(bad("token_ids")),
    };
    let block_size = optional_u32(f, 3, EV, "block_size")?.unwrap_or(0);
    let lora_id = match f.get(4, "lora_id") {
        None | Some(Value::Nil) => None,
        Some(v) => Some(v.as_u64().ok_or(bad("lora_id"))?),
    };
    let medium = medium(f, 5, EV)?;
    let lora_name = opt_str(f.get(6, "lora_name")).ok_or(bad("lora_name"))?.map(str::to_owned);
    let extra_keys = match f.get(7, "extra_keys") {
        None | Some(Value::Nil) => Vec::new(),
        Some(Value::Array(blocks)) => blocks.iter().map(block_extras).collect(),
        Some(_) => return Err(bad("extra_keys")),
    };
    let group_idx = optional_u32(f, 8, EV, "group_idx")?;
    let kv_cache_spec_kind =
        opt_str(f.get(9, "kv_cache_spec_kind")).ok_or(bad("kv_cache_spec_kind"))?.map(str::to_owned);
    Ok(BlockStored {
        block_hashes,
        parent_block_hash,
        token_ids,
        block_size,
        lora_id,
        medium,
        lora_name,
        extra_keys,
        group_idx,
        kv_cache_spec_kind,
    })
}

/// One block's extra keys: nil, or an array of untagged entries.
fn block_extras(v: &Value) -> Option<Vec<ExtraKey>> {
    let Value::Array(entries) = v else { return None };
    Some(
        entries
            .iter()
            .map(|e| match e {
                Value::String(s) => s.as_str().map_or(ExtraKey::Other, |s| ExtraKey::Str(s.to_owned())),
                Value::Binary(b) => ExtraKey::Bytes(b.clone()),
                Value::Array(pair) => match (pair.first().and_then(Value::as_str), pair.get(1).and_then(Value::as_i64))
                {
                    (Some(id), Some(offset)) => ExtraKey::Mm { identifier: id.to_owned(), offset },
                    (Some(id), None) => ExtraKey::Mm { identifier: id.to_owned(), offset: 0 },
                    _ => ExtraKey::Other,
                },
                _ => ExtraKey::Other,
            })
            .collect(),
    )
}

fn removed(f: &Fields<'_>) -> Result<BlockRemoved, DecodeError> {
    const EV: &str = "BlockRemoved";
    Ok(BlockRemoved {
        block_hashes: hashes(f, EV)?,
        medium: medium(f, 1, EV)?,
        group_idx: optional_u32(f, 2, EV, "group_idx")?,
    })
}

#[cfg(test)]
#[path = "decode_tests.rs"]
mod tests;
