//! Per-stream sequence tracking: detects gaps, duplicates and restarts.
//!
//! A stream is one publisher (endpoint, data-parallel rank). vLLM numbers
//! batches from 0 per publisher instance, +1 per batch; a restart starts at
//! 0 again. Pure state machine; the subscriber decides what to do (replay,
//! purge the endpoint) with the verdict.

/// What a received sequence number means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqVerdict {
    /// First message of the stream; `missed` batches (0..seq) came before it.
    First { missed: u64 },
    /// The next expected batch.
    InOrder,
    /// Same seq as the last one (or older inside a replay window): ignore.
    Duplicate,
    /// Batches `from..seq` are missing.
    Gap { from: u64 },
    /// seq went backwards: the publisher restarted.
    Restart,
}

/// Tracker of one stream.
#[derive(Debug, Clone, Default)]
pub struct SeqTracker {
    last: Option<u64>,
}

impl SeqTracker {
    /// A tracker that has seen nothing.
    pub fn new() -> Self {
        SeqTracker { last: None }
    }

    /// The last accepted seq.
    pub fn last(&self) -> Option<u64> {
        self.last
    }

    /// Classifies `seq` and advances the state (every verdict but `Duplicate`
    /// makes `seq` the last seen).
    pub fn observe(&mut self, seq: u64) -> SeqVerdict {
        let verdict = match self.last {
            None => SeqVerdict::First { missed: seq },
            Some(last) if seq == last.wrapping_add(1) => SeqVerdict::InOrder,
            Some(last) if seq == last => SeqVerdict::Duplicate,
            Some(last) if seq < last => SeqVerdict::Restart,
            Some(last) => SeqVerdict::Gap { from: last + 1 },
        };
        if verdict != SeqVerdict::Duplicate {
            self.last = Some(seq);
        }
        verdict
    }

    /// Forgets the stream (after a purge).
    pub fn reset(&mut self) {
        self.last = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn classifies() {
        let mut t = SeqTracker::new();
        assert_eq!(t.observe(0), SeqVerdict::First { missed: 0 });
        assert_eq!(t.observe(1), SeqVerdict::InOrder);
        assert_eq!(t.observe(1), SeqVerdict::Duplicate);
        assert_eq!(t.observe(4), SeqVerdict::Gap { from: 2 });
        assert_eq!(t.observe(5), SeqVerdict::InOrder);
        assert_eq!(t.observe(0), SeqVerdict::Restart);
        assert_eq!(t.observe(1), SeqVerdict::InOrder);
        t.reset();
        assert_eq!(t.observe(7), SeqVerdict::First { missed: 7 });
    }

    proptest! {
        #[test]
        fn consecutive_streams_never_report_loss(start in 0u64..1000, n in 1usize..200) {
            let mut t = SeqTracker::new();
            prop_assert_eq!(t.observe(start), SeqVerdict::First { missed: start });
            for s in start + 1..start + n as u64 {
                prop_assert_eq!(t.observe(s), SeqVerdict::InOrder);
            }
        }
    }
}
