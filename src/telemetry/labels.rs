//! Bounded label values: client-controlled strings (model names, fairness ids) become label
//! values only up to a cap; later newcomers are folded into `other`, so a client cannot grow
//! the number of series without limit. Each value is also cut to [`MAX_LABEL_VALUE_BYTES`]
//! (at a character boundary), so one request cannot make a series (and every scrape of
//! `/metrics`) large.

use std::collections::HashSet;
use std::sync::Mutex;

/// Longest label value kept (bytes); longer values are truncated to this length.
pub const MAX_LABEL_VALUE_BYTES: usize = 256;

/// `value` cut to at most [`MAX_LABEL_VALUE_BYTES`] bytes at a character boundary.
pub fn truncate_label(value: &str) -> &str {
    if value.len() <= MAX_LABEL_VALUE_BYTES {
        return value;
    }
    let mut end = MAX_LABEL_VALUE_BYTES;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    &value[..end]
}

/// A set of label values seen so far, capped.
#[derive(Debug)]
pub struct BoundedLabels {
    cap: usize,
    seen: Mutex<HashSet<String>>,
}

impl BoundedLabels {
    /// Keeps at most `cap` distinct values.
    pub fn new(cap: usize) -> Self {
        Self { cap, seen: Mutex::new(HashSet::new()) }
    }

    /// The label value for `value`: itself (truncated to [`MAX_LABEL_VALUE_BYTES`]) while
    /// under the cap (or already seen), else `other`; empty becomes `unknown`.
    pub fn get(&self, value: &str) -> String {
        let value = if value.is_empty() { "unknown" } else { truncate_label(value) };
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.contains(value) {
            return value.to_string();
        }
        if seen.len() < self.cap {
            seen.insert(value.to_string());
            return value.to_string();
        }
        "other".to_string()
    }

    /// Frees `value`'s slot (its series were removed); true when it had one.
    pub fn forget(&self, value: &str) -> bool {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).remove(truncate_label(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_newcomers_beyond_the_cap() {
        let l = BoundedLabels::new(2);
        assert_eq!(l.get("a"), "a");
        assert_eq!(l.get(""), "unknown");
        assert_eq!(l.get("b"), "other");
        assert_eq!(l.get("a"), "a");
        assert!(l.forget("a"));
        assert!(!l.forget("b"), "b was folded into other");
        assert_eq!(l.get("b"), "b", "a's slot is free again");
    }

    #[test]
    fn long_values_are_truncated_at_a_char_boundary() {
        let l = BoundedLabels::new(4);
        let long = "m".repeat(200_000);
        assert_eq!(l.get(&long).len(), MAX_LABEL_VALUE_BYTES);
        let multibyte = "é".repeat(200);
        let cut = l.get(&multibyte);
        assert!(cut.len() <= MAX_LABEL_VALUE_BYTES && cut.chars().all(|c| c == 'é'));
        assert!(l.forget(&long), "forget finds the truncated value");
    }
}
