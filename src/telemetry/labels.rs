//! Bounded label values: client-controlled strings (model names, fairness ids) become label
//! values only up to a cap; later newcomers are folded into `other`, so a client cannot grow
//! the number of series without limit.

use std::collections::HashSet;
use std::sync::Mutex;

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

    /// The label value for `value`: itself while under the cap (or already seen), else
    /// `other`; empty becomes `unknown`.
    pub fn get(&self, value: &str) -> String {
        let value = if value.is_empty() { "unknown" } else { value };
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
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).remove(value)
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
}
