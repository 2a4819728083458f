//! The KV-event path from the simulated pods to the precise producer's index, with the
//! faults the real path has: a publish-to-apply delay, per-batch jitter, and batch loss.
//!
//! Each pod numbers its batches from 0 as vLLM's publisher does (the number advances even
//! for a lost batch). Jitter never reorders one pod's batches: a ZeroMQ PUB/SUB connection is
//! one ordered TCP stream, so a batch is delivered no earlier than the pod's previous one.
//! On delivery the subscriber side runs the real `SeqTracker`; on a gap it does what epp's
//! subscriber does without a replay endpoint: purge the endpoint's entries from the index,
//! then apply the batch that revealed the gap (whose stores chaining onto purged blocks are
//! then dropped as unknown parents, as in epp).
//!
//! Does not model ZeroMQ high-water-mark overflow separately (it is loss) or replay.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use epp::kvcache::events::{EventBatch, EventKind};
use epp::kvcache::index::{EventOutcome, PrefixIndex};
use epp::kvcache::sequence::{SeqTracker, SeqVerdict};

/// Fault settings of the KV-event path.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct ChannelConfig {
    /// Fixed delay between a step's end and its batch reaching the index, seconds.
    pub delay: f64,
    /// Extra delay drawn uniformly from `[0, jitter)` per batch, seconds.
    pub jitter: f64,
    /// Probability that a batch is lost, in `[0, 1]`.
    pub loss: f64,
}

/// Counters of the path over one run.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct ChannelStats {
    /// Batches published.
    pub published: u64,
    /// Batches lost.
    pub lost: u64,
    /// Sequence gaps seen by the subscriber (each purged its endpoint).
    pub gaps: u64,
    /// Index entries removed by those purges.
    pub purged_entries: u64,
    /// Events the index did not apply (unknown parent after a purge, unknown block, ...).
    pub events_rejected: u64,
}

/// A batch in flight: when it arrives and its sequence number.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Delivery {
    /// Simulated arrival time at the index, seconds.
    pub at: f64,
    /// The pod's batch sequence number.
    pub seq: u64,
}

/// The per-run KV-event path of every pod.
#[derive(Debug)]
pub struct Channel {
    config: ChannelConfig,
    rng: StdRng,
    next_seq: Vec<u64>,
    last_at: Vec<f64>,
    trackers: Vec<SeqTracker>,
    stats: ChannelStats,
}

impl Channel {
    /// A path for `pods` pods; `seed` fixes the jitter and loss draws.
    pub fn new(config: ChannelConfig, pods: usize, seed: u64) -> Self {
        Self {
            config,
            rng: StdRng::seed_from_u64(seed ^ 0x6b76_6576),
            next_seq: vec![0; pods],
            last_at: vec![f64::NEG_INFINITY; pods],
            trackers: vec![SeqTracker::new(); pods],
            stats: ChannelStats::default(),
        }
    }

    /// Publishes pod `pod`'s batch of a step that ended at `end`: its delivery, or `None`
    /// when the batch is lost.
    pub fn publish(&mut self, pod: usize, end: f64) -> Option<Delivery> {
        let seq = self.next_seq[pod];
        self.next_seq[pod] += 1;
        self.stats.published += 1;
        let jitter = if self.config.jitter > 0.0 { self.rng.random::<f64>() * self.config.jitter } else { 0.0 };
        if self.config.loss > 0.0 && self.rng.random::<f64>() < self.config.loss {
            self.stats.lost += 1;
            return None;
        }
        let at = (end + self.config.delay + jitter).max(self.last_at[pod]);
        self.last_at[pod] = at;
        Some(Delivery { at, seq })
    }

    /// Applies a delivered batch of `pod` (endpoint `endpoint`) to `index`, purging the
    /// endpoint first when its sequence number reveals a gap.
    pub fn deliver(&mut self, index: &PrefixIndex, pod: usize, endpoint: &str, model: &str, seq: u64, b: &EventBatch) {
        match self.trackers[pod].observe(seq) {
            SeqVerdict::Duplicate => return,
            SeqVerdict::Gap { .. } | SeqVerdict::Restart => {
                self.stats.gaps += 1;
                self.stats.purged_entries += index.clear_endpoint(endpoint) as u64;
            }
            // A first batch after earlier losses: the index holds nothing of this pod yet.
            SeqVerdict::First { .. } | SeqVerdict::InOrder => {}
        }
        let stats = index.apply(endpoint, model, b);
        let applied: u64 = [EventKind::Stored, EventKind::Removed, EventKind::Cleared]
            .into_iter()
            .map(|k| stats.count(k, EventOutcome::Applied) as u64)
            .sum();
        self.stats.events_rejected += (b.events.len() as u64).saturating_sub(applied);
    }

    /// The counters so far.
    pub fn stats(&self) -> ChannelStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use epp::kvcache::events::{BlockStored, KvEvent};
    use epp::kvcache::index::{IndexConfig, KeyMode};
    use epp::kvcache::keys::RequestKeyer;

    fn stored(hash: u64, parent: Option<u64>, tokens: Vec<u32>) -> EventBatch {
        EventBatch {
            events: vec![KvEvent::BlockStored(BlockStored {
                block_hashes: vec![hash],
                parent_block_hash: parent,
                token_ids: tokens,
                block_size: 4,
                ..Default::default()
            })],
            ..Default::default()
        }
    }

    #[test]
    fn jitter_delays_but_never_reorders_a_pods_batches() {
        let mut ch = Channel::new(ChannelConfig { delay: 0.01, jitter: 1.0, loss: 0.0 }, 1, 3);
        let mut last = f64::NEG_INFINITY;
        for i in 0..50 {
            let end = i as f64 * 0.001;
            let d = ch.publish(0, end).expect("no loss");
            assert!(d.at >= end + 0.01 && d.at >= last);
            assert_eq!(d.seq, i);
            last = d.at;
        }
    }

    #[test]
    fn a_lost_batch_purges_the_endpoint_at_the_next_delivery() {
        let index = PrefixIndex::new(IndexConfig {
            key_mode: KeyMode::Request { keyer: RequestKeyer::default(), block_size: 4 },
            ..Default::default()
        });
        let mut ch = Channel::new(ChannelConfig { loss: 0.0, ..Default::default() }, 1, 1);
        ch.deliver(&index, 0, "pod-0", "m", 0, &stored(1, None, vec![1, 2, 3, 4]));
        assert_eq!(index.entries(), 1);
        // Batch 1 was lost; batch 2 reveals the gap and stores a new root.
        ch.deliver(&index, 0, "pod-0", "m", 2, &stored(9, None, vec![9, 9, 9, 9]));
        assert_eq!(index.entries(), 1, "the old entry is purged, the new root applied");
        let s = ch.stats();
        assert_eq!((s.gaps, s.purged_entries, s.events_rejected), (1, 1, 0));
        // A store chaining onto a purged block cannot be applied.
        ch.deliver(&index, 0, "pod-0", "m", 3, &stored(2, Some(1), vec![5, 6, 7, 8]));
        assert_eq!(ch.stats().events_rejected, 1);
    }

    #[test]
    fn loss_probability_drops_about_that_share() {
        let mut ch = Channel::new(ChannelConfig { loss: 0.25, ..Default::default() }, 2, 9);
        let delivered = (0..4000).filter(|i| ch.publish(i % 2, 0.0).is_some()).count();
        assert!((2800..3200).contains(&delivered), "{delivered}");
        assert_eq!(ch.stats().lost as usize, 4000 - delivered);
    }
}
