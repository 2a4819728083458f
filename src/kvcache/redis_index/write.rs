//! Turning one endpoint's event batch into Redis commands in llm-d's layout ([`super::layout`]),
//! with the semantics of llm-d's `RedisIndex` (reference §8):
//!
//! * `BlockStored` (request-key mode): parent request key = the highest-scored member of
//!   `engine:<parent>` (unknown parent: the event is dropped); request keys chained from it
//!   over the event's tokens; `ZADD engine:<E[⌊i·e/n⌋]> i R[⌊i·r/n⌋]` for `i < n = max(e, r)`;
//!   `HSET <R> <entry> ""` for every request key. A store without tokens is a tier move: every
//!   request key mapped from its hashes gains the entry of the new tier.
//! * `BlockRemoved`: for each hash, the entry leaves every request key mapped from it; emptied
//!   hashes are deleted, and the `engine:` ZSET once all its request keys are empty (one Lua
//!   call per hash, atomic like llm-d's prune scripts).
//! * Engine-key mode: the hashes themselves are the keys; no `engine:` ZSETs.
//!
//! A batch costs two round trips: one pipeline of `ZRANGE` for every engine hash it refers to,
//! then one pipeline of all writes; mappings stored earlier in the same batch are used
//! directly. `AllBlocksCleared` is applied by the caller between the segments it separates.

use std::collections::HashMap;

use super::layout::{PodEntry, engine_key, request_key};
use crate::kvcache::events::{BlockRemoved, BlockStored, KvEvent};
use crate::kvcache::index::{ApplyStats, EventOutcome, KeyMode, is_unsupported_kind, realign_extras, span_error};
use crate::kvcache::keys::align_blocks;

/// Removes field `ARGV[1]` from every key; deletes keys left empty. With `ARGV[2] == "1"`,
/// `KEYS[1]` is an `engine:` ZSET deleted once all the other keys are empty.
pub const REMOVE_SCRIPT: &str = r"
local engine = ARGV[2] == '1'
local first = 1
if engine then first = 2 end
local empty = true
for i = first, #KEYS do
  redis.call('HDEL', KEYS[i], ARGV[1])
  if redis.call('HLEN', KEYS[i]) == 0 then
    redis.call('DEL', KEYS[i])
  else
    empty = false
  end
end
if engine and empty then
  redis.call('DEL', KEYS[1])
end
return 0
";

/// Engine hashes whose mappings a segment needs (request-key mode), without duplicates.
pub fn hashes_to_resolve(events: &[KvEvent], mode: &KeyMode) -> Vec<u64> {
    if let KeyMode::Engine { .. } = mode {
        return Vec::new();
    }
    let mut out = Vec::new();
    for ev in events {
        match ev {
            KvEvent::BlockStored(s) if s.token_ids.is_empty() => out.extend(&s.block_hashes),
            KvEvent::BlockStored(s) => out.extend(s.parent_block_hash),
            KvEvent::BlockRemoved(r) => out.extend(&r.block_hashes),
            KvEvent::AllBlocksCleared => {}
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// `ZRANGE engine:<h> 0 -1` for each hash (members in ascending score order).
pub fn resolve_pipeline(hashes: &[u64]) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    for h in hashes {
        pipe.cmd("ZRANGE").arg(engine_key(*h)).arg(0).arg(-1);
    }
    pipe
}

/// Builds the write pipeline of one segment of a batch.
pub struct Planner<'a> {
    /// Endpoint (`PodIdentifier`).
    pub endpoint: &'a str,
    /// Topic model (root of chains unless an event names a LoRA).
    pub model: &'a str,
    /// Key derivation.
    pub mode: &'a KeyMode,
    /// Engine hash -> request keys, lowest score first (read, then extended by stores).
    pub known: HashMap<u64, Vec<u64>>,
    /// Writes so far.
    pub pipe: redis::Pipeline,
    /// Number of commands in `pipe`.
    pub commands: usize,
}

impl Planner<'_> {
    /// Plans every event of `events` (none of them `AllBlocksCleared`).
    pub fn plan(&mut self, events: &[KvEvent], stats: &mut ApplyStats) {
        for ev in events {
            let outcome = match ev {
                KvEvent::BlockStored(s) => self.stored(s, stats),
                KvEvent::BlockRemoved(r) => self.removed(r, stats),
                KvEvent::AllBlocksCleared => continue,
            };
            stats.record(ev.kind(), outcome);
        }
    }

    fn hset(&mut self, key: u64, field: &str) {
        self.pipe.cmd("HSET").arg(request_key(key)).arg(field).arg("").ignore();
        self.commands += 1;
    }

    fn stored(&mut self, s: &BlockStored, stats: &mut ApplyStats) -> EventOutcome {
        if is_unsupported_kind(s) {
            return EventOutcome::UnsupportedKind;
        }
        let field = PodEntry::confirmed(self.endpoint, s.tier(), s.group_idx).field();
        let (keyer, block_size) = match self.mode {
            KeyMode::Engine { .. } => {
                s.block_hashes.iter().for_each(|h| self.hset(*h, &field));
                stats.stored_blocks += s.block_hashes.len() as u64;
                return EventOutcome::Applied;
            }
            KeyMode::Request { keyer, block_size } => (*keyer, *block_size),
        };
        if s.token_ids.is_empty() && !s.block_hashes.is_empty() {
            let keys: Vec<u64> = s.block_hashes.iter().filter_map(|h| self.known.get(h)).flatten().copied().collect();
            keys.iter().for_each(|k| self.hset(*k, &field));
            stats.stored_blocks += s.block_hashes.len() as u64;
            return if keys.is_empty() { EventOutcome::UnknownBlock } else { EventOutcome::Applied };
        }
        if let Some(outcome) = span_error(s) {
            return outcome;
        }
        let parent = match s.parent_block_hash {
            None => keyer.root(s.lora_name.as_deref().filter(|l| !l.is_empty()).unwrap_or(self.model)),
            Some(p) => match self.known.get(&p).and_then(|keys| keys.last()) {
                Some(k) => *k,
                None => return EventOutcome::UnknownParent,
            },
        };
        let n_req = s.token_ids.len() / block_size.max(1);
        let req = keyer.chain(parent, &s.token_ids, block_size, &realign_extras(s, n_req));
        for (i, (e, r)) in align_blocks(s.block_hashes.len(), req.len()).enumerate() {
            let (hash, key) = (s.block_hashes[e], req[r]);
            self.pipe.cmd("ZADD").arg(engine_key(hash)).arg(i).arg(request_key(key)).ignore();
            self.commands += 1;
            let mapped = self.known.entry(hash).or_default();
            mapped.retain(|k| *k != key);
            mapped.push(key);
        }
        req.iter().for_each(|k| self.hset(*k, &field));
        stats.stored_blocks += s.block_hashes.len() as u64;
        EventOutcome::Applied
    }

    fn removed(&mut self, r: &BlockRemoved, stats: &mut ApplyStats) -> EventOutcome {
        let field = PodEntry::confirmed(self.endpoint, r.tier(), r.group_idx).field();
        stats.removed_blocks += r.block_hashes.len() as u64;
        let mut any = false;
        for h in &r.block_hashes {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(REMOVE_SCRIPT);
            let engine = match self.mode {
                KeyMode::Engine { .. } => {
                    cmd.arg(1).arg(request_key(*h));
                    false
                }
                KeyMode::Request { .. } => {
                    let Some(keys) = self.known.get(h).filter(|k| !k.is_empty()) else { continue };
                    cmd.arg(1 + keys.len()).arg(engine_key(*h));
                    keys.iter().for_each(|k| {
                        cmd.arg(request_key(*k));
                    });
                    true
                }
            };
            cmd.arg(&field).arg(if engine { "1" } else { "0" });
            self.pipe.add_command(cmd).ignore();
            self.commands += 1;
            any = true;
        }
        if any { EventOutcome::Applied } else { EventOutcome::UnknownBlock }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kvcache::events::Tier;
    use crate::kvcache::keys::RequestKeyer;

    fn planner(mode: &KeyMode) -> Planner<'_> {
        Planner {
            endpoint: "10.0.0.5:8000",
            model: "Qwen/Qwen3-0.6B",
            mode,
            known: HashMap::new(),
            pipe: redis::pipe(),
            commands: 0,
        }
    }

    fn stored(hashes: &[u64], parent: Option<u64>, tokens: Vec<u32>) -> KvEvent {
        KvEvent::BlockStored(BlockStored {
            block_hashes: hashes.to_vec(),
            parent_block_hash: parent,
            token_ids: tokens,
            block_size: 4,
            ..BlockStored::default()
        })
    }

    #[test]
    fn stores_chain_through_the_batch_and_unknown_parents_drop() {
        let mode = KeyMode::Request { keyer: RequestKeyer::default(), block_size: 4 };
        let events = [
            stored(&[17, 18], None, (1..=8).collect()),
            stored(&[19], Some(18), (9..=12).collect()),
            stored(&[30], Some(99), (1..=4).collect()),
            KvEvent::BlockRemoved(BlockRemoved {
                block_hashes: vec![17, 55],
                medium: Some(Tier::Gpu),
                group_idx: None,
            }),
        ];
        assert_eq!(hashes_to_resolve(&events, &mode), [17, 18, 55, 99]);
        let mut p = planner(&mode);
        let mut stats = ApplyStats::default();
        p.plan(&events, &mut stats);
        // The worked example of the reference: tokens 1..8, block 4 -> these request keys.
        assert_eq!(p.known[&17], [12477849404512668933]);
        assert_eq!(p.known[&18], [14303407131179071413]);
        assert_eq!(p.known[&19].len(), 1);
        assert_eq!(stats.count(crate::kvcache::events::EventKind::Stored, EventOutcome::Applied), 2);
        assert_eq!(stats.count(crate::kvcache::events::EventKind::Stored, EventOutcome::UnknownParent), 1);
        // 3 ZADD + 3 HSET + 1 EVAL (55 is unknown).
        assert_eq!(p.commands, 7);
    }

    #[test]
    fn engine_mode_keys_are_the_hashes() {
        let mode = KeyMode::Engine { hasher: None, block_size: 4 };
        let mut p = planner(&mode);
        let mut stats = ApplyStats::default();
        p.plan(&[stored(&[5, 6], None, (1..=8).collect())], &mut stats);
        assert!(p.known.is_empty());
        assert_eq!(p.commands, 2);
    }
}
