//! Key-table writes of one event as a batch.
//!
//! An event's keys are grouped by shard (keeping their order within a
//! shard), each shard is write-locked once for its group, and the home bucket
//! of the key [`AHEAD`] places further in the group is prefetched while a key
//! is written. Against one lock and one cold bucket per key, this takes one
//! lock per shard touched and overlaps the cache misses of a group. A group is
//! a few keys (an event of 64 blocks over 16 shards puts ~4 in each), so a
//! lookup waits at most that long for a shard.

use super::holder::EndpointId;
use super::table::{AddMode, KeyRef, RemoveMode, Table, key_order, ref_order};
use super::{PrefixIndex, write};
use std::sync::atomic::Ordering;

/// How many keys ahead of the one being written a bucket is prefetched.
const AHEAD: usize = 4;

impl PrefixIndex {
    /// Runs `op` on each item under the write lock of its shard, grouped by
    /// shard (event order kept within a shard), prefetching the home bucket of
    /// the item [`AHEAD`] places further in the group; `order_of` names the
    /// [`key_order`] of an item's key(s).
    fn write_grouped<T: Copy>(&self, items: &[T], order_of: impl Fn(T) -> u32, mut op: impl FnMut(&mut Table, T)) {
        let Some(first) = items.first() else { return };
        // Counting sort by shard (stable): `bounds[s]..bounds[s + 1]` is shard s's group.
        let shards = self.shards.len();
        let mut scratch = vec![0u32; 2 * (shards + 1)];
        let (bounds, next) = scratch.split_at_mut(shards + 1);
        for x in items {
            bounds[self.shard_of_order(order_of(*x)) + 1] += 1;
        }
        for s in 1..=shards {
            bounds[s] += bounds[s - 1];
        }
        next.copy_from_slice(bounds);
        let mut sorted = vec![(0u32, *first); items.len()];
        for x in items {
            let r = order_of(*x);
            let at = &mut next[self.shard_of_order(r)];
            sorted[*at as usize] = (r, *x);
            *at += 1;
        }
        for s in 0..shards {
            let group = &sorted[bounds[s] as usize..bounds[s + 1] as usize];
            if group.is_empty() {
                continue;
            }
            let mut table = write(&self.shards[s].table);
            group.iter().take(AHEAD).for_each(|(r, _)| table.prefetch_order(*r));
            for (i, (_, x)) in group.iter().enumerate() {
                if let Some((ahead, _)) = group.get(i + AHEAD) {
                    table.prefetch_order(*ahead);
                }
                op(&mut table, *x);
            }
        }
    }

    /// Adds `(ep, tier)` to each of `keys`.
    pub(super) fn add_batch(&self, keys: &[u64], ep: EndpointId, tier: u8, mode: AddMode) {
        self.write_grouped(keys, key_order, |table, k| {
            table.add(k, ep, tier, mode);
        });
    }

    /// Removes `(ep, tier)` from each of `keys` (`mode` as in [`Table::remove`]).
    pub(super) fn remove_batch(&self, keys: &[u64], ep: EndpointId, tier: u8, mode: RemoveMode) {
        self.write_grouped(keys, key_order, |table, k| {
            table.remove(k, ep, tier, mode);
        });
    }

    /// Drops one reference of `(ep, tier)` from the key(s) of each reference
    /// in `krefs`, counting each reference that matched several keys as ambiguous.
    pub(super) fn release_batch(&self, krefs: &[KeyRef], ep: EndpointId, tier: u8) {
        let mut ambiguous = 0;
        self.write_grouped(krefs, ref_order, |table, r| {
            if table.release_ref(r, ep, tier) > 1 {
                ambiguous += 1;
            }
        });
        if ambiguous > 0 {
            self.ambiguous_refs.fetch_add(ambiguous, Ordering::Relaxed);
        }
    }
}
