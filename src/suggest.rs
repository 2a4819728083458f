//! "Did you mean" suggestions: the closest of a few names to a misspelt one, by edit
//! distance. A leaf module (no imports from the crate), used by config errors and plugin
//! factories alike.

/// The candidate closest to `word` by edit distance, when it is plausibly a typo or a
/// near-miss (distance at most a third of the length, or one contains the other).
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (edit_distance(word, c), c))
        .filter(|(d, c)| *d <= word.len().max(c.len()) / 3 || c.contains(word) || word.contains(*c))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}
