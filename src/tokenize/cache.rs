//! Token ids of recent prompts, so a follow-up chat turn re-tokenizes only its new suffix.
//!
//! An entry is one rendered prompt text, its token ids and its *cuts*: the positions right
//! after an anchor token (a special token that the tokenizer splits out before
//! normalisation, with no strip or single-word rules) together with the number of ids up to
//! and including it. [`PrefixCache::lookup`] finds, over all entries, the longest cut that
//! lies inside the common prefix of the entry text and the new text. The caller then encodes
//! `anchor + suffix` and drops the anchor's id (see `local.rs` for why this equals encoding
//! the whole text).
//!
//! Bounded: at most `capacity` entries and `max_bytes` of text + ids (least recently used
//! evicted first). An entry whose text is a prefix of a newly inserted text is replaced by
//! it (one entry per conversation). Thread safety: a short `Mutex` section per call; the
//! text comparisons run outside the lock on `Arc` snapshots.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

/// A position in a rendered text right after an anchor token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cut {
    /// Byte offset just past the anchor token.
    pub byte_end: usize,
    /// Number of ids up to and including the anchor.
    pub n_ids: usize,
    /// The anchor token id.
    pub anchor: u32,
}

/// One cached prompt.
#[derive(Debug)]
pub struct Entry {
    /// The rendered text.
    pub text: String,
    /// Its token ids.
    pub ids: Arc<[u32]>,
    /// Cuts in increasing order.
    pub cuts: Vec<Cut>,
}

impl Entry {
    fn cost(&self) -> usize {
        self.text.len() + self.ids.len() * 4 + self.cuts.len() * std::mem::size_of::<Cut>()
    }
}

/// A usable cached prefix.
#[derive(Clone, Debug)]
pub struct Hit {
    /// The entry.
    pub entry: Arc<Entry>,
    /// Index into `entry.cuts` of the cut to continue from.
    pub cut: usize,
}

impl Hit {
    /// The cut.
    pub fn cut(&self) -> Cut {
        self.entry.cuts[self.cut]
    }
}

/// The bounded LRU of recent prompts of one tokenizer.
#[derive(Debug)]
pub struct PrefixCache {
    entries: Mutex<Vec<Arc<Entry>>>,
    capacity: NonZeroUsize,
    max_bytes: usize,
}

impl PrefixCache {
    /// A cache of at most `capacity` entries and `max_bytes` bytes.
    pub fn new(capacity: NonZeroUsize, max_bytes: usize) -> Self {
        Self { entries: Mutex::new(Vec::new()), capacity, max_bytes }
    }

    fn snapshot(&self) -> Vec<Arc<Entry>> {
        // A poisoned lock only means a panic elsewhere mid-update of a Vec of Arcs; the Vec
        // itself is still valid.
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The longest usable cached prefix of `text`, if any; marks the entry recently used.
    pub fn lookup(&self, text: &str) -> Option<Hit> {
        let mut best: Option<Hit> = None;
        for entry in self.snapshot() {
            let common = common_prefix_len(entry.text.as_bytes(), text.as_bytes());
            // Last cut that ends inside the common prefix.
            let n = entry.cuts.partition_point(|c| c.byte_end <= common);
            if n == 0 {
                continue;
            }
            let cut = n - 1;
            let better = best.as_ref().is_none_or(|b| entry.cuts[cut].byte_end > b.cut().byte_end);
            if better {
                best = Some(Hit { entry, cut });
            }
        }
        if let Some(hit) = &best {
            let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(pos) = entries.iter().position(|e| Arc::ptr_eq(e, &hit.entry)) {
                let e = entries.remove(pos);
                entries.insert(0, e);
            }
        }
        best
    }

    /// Inserts a prompt as most recently used, replacing entries whose text it extends, then
    /// evicts down to the bounds. Prompts without cuts are not stored.
    pub fn insert(&self, entry: Entry) {
        if entry.cuts.is_empty() || entry.cost() > self.max_bytes {
            return;
        }
        let entry = Arc::new(entry);
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.retain(|e| !entry.text.starts_with(e.text.as_str()));
        entries.insert(0, entry);
        let mut total: usize = entries.iter().map(|e| e.cost()).sum();
        while entries.len() > self.capacity.get() || total > self.max_bytes {
            match entries.pop() {
                Some(e) => total -= e.cost(),
                None => break,
            }
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Length of the common prefix of `a` and `b`: whole 256-byte blocks first (one vectorised
/// comparison each), then bytes.
fn common_prefix_len(a: &[u8], b: &[u8]) -> usize {
    const BLOCK: usize = 256;
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + BLOCK <= n && a[i..i + BLOCK] == b[i..i + BLOCK] {
        i += BLOCK;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(text: &str, cuts: &[usize]) -> Entry {
        Entry {
            text: text.into(),
            ids: (0..text.len() as u32).collect::<Vec<_>>().into(),
            cuts: cuts.iter().map(|&b| Cut { byte_end: b, n_ids: b, anchor: 0 }).collect(),
        }
    }

    #[test]
    fn longest_cut_inside_common_prefix_wins() {
        let cache = PrefixCache::new(NonZeroUsize::MIN.saturating_add(3), 1 << 20);
        cache.insert(entry("<a>hello<b>world", &[3, 11]));
        cache.insert(entry("<a>other text<b>", &[3, 16]));
        let hit = cache.lookup("<a>hello<b>world and more").expect("hit");
        assert_eq!(hit.cut().byte_end, 11);
        let hit = cache.lookup("<a>hello<c>").expect("hit");
        assert_eq!(hit.cut().byte_end, 3);
        assert!(cache.lookup("<x>").is_none());
    }

    #[test]
    fn extending_entry_replaces_and_bounds_hold() {
        let cache = PrefixCache::new(NonZeroUsize::MIN.saturating_add(1), 1 << 20);
        cache.insert(entry("<a>one", &[3]));
        cache.insert(entry("<a>one<b>two", &[3, 9]));
        assert_eq!(cache.len(), 1);
        cache.insert(entry("<z>x", &[3]));
        cache.insert(entry("<y>x", &[3]));
        assert_eq!(cache.len(), 2);
        assert!(cache.lookup("<a>one<b>").is_none(), "oldest evicted");
        let tiny = PrefixCache::new(NonZeroUsize::MIN, 8);
        tiny.insert(entry("<a>long text", &[3]));
        assert!(tiny.is_empty(), "larger than the byte budget");
    }

    #[test]
    fn common_prefix() {
        assert_eq!(common_prefix_len(b"abcdefghijklmnopqrstuvwxyz", b"abcdefghijklmnopqrstuvwXyz"), 23);
        assert_eq!(common_prefix_len(b"ab", b"abc"), 2);
        let a = vec![7u8; 1000];
        let mut b = a.clone();
        b[700] = 0;
        assert_eq!(common_prefix_len(&a, &b), 700);
        assert_eq!(common_prefix_len(&a, &a[..999]), 999);
    }
}
