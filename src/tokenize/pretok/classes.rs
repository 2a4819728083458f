//! Character classes of the split patterns: `\p{L}`, `\p{N}` and `\s`, built from the
//! `regex-syntax` tables, which are the ones the regex engines behind Hugging Face's `Split`
//! pre-tokenizer use (fancy-regex delegates character classes to the `regex` crate). Using
//! the same tables makes the fast matcher agree on every code point, including ones a
//! hand-copied table of another Unicode version would classify differently.

use std::sync::LazyLock;

use regex_syntax::hir::{Class as HirClass, HirKind};

/// What a character is to the split patterns. The three named classes are disjoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// `\p{L}`.
    Letter,
    /// `\p{N}`.
    Number,
    /// `\s` (Unicode `White_Space`).
    Space,
    /// Anything else (`[^\s\p{L}\p{N}]`: punctuation, symbols, marks, controls ...).
    Other,
}

/// Lookup table: ASCII directly, everything else by binary search over sorted ranges.
#[derive(Debug)]
pub struct Classes {
    ascii: [Class; 128],
    /// Disjoint `(first, last, class)` code point ranges, sorted.
    ranges: Vec<(u32, u32, Class)>,
}

static CLASSES: LazyLock<Option<Classes>> = LazyLock::new(Classes::build);

impl Classes {
    /// The shared table, or `None` if `regex-syntax` could not describe a class (then the
    /// fast matchers are not used and the stock pre-tokenizer runs).
    pub fn get() -> Option<&'static Classes> {
        CLASSES.as_ref()
    }

    fn build() -> Option<Classes> {
        let mut ranges = Vec::new();
        for (pattern, class) in [(r"\p{L}", Class::Letter), (r"\p{N}", Class::Number), (r"\s", Class::Space)] {
            let hir = regex_syntax::Parser::new().parse(pattern).ok()?;
            let HirKind::Class(HirClass::Unicode(set)) = hir.kind() else { return None };
            ranges.extend(set.ranges().iter().map(|r| (u32::from(r.start()), u32::from(r.end()), class)));
        }
        ranges.sort_unstable_by_key(|r| r.0);
        if ranges.windows(2).any(|w| w[0].1 >= w[1].0) {
            return None;
        }
        let mut ascii = [Class::Other; 128];
        for (b, slot) in ascii.iter_mut().enumerate() {
            *slot = lookup(&ranges, b as u32);
        }
        Some(Classes { ascii, ranges })
    }

    /// The class of `c`.
    #[inline]
    pub fn of(&self, c: char) -> Class {
        match self.ascii.get(c as usize) {
            Some(&class) => class,
            None => lookup(&self.ranges, u32::from(c)),
        }
    }
}

fn lookup(ranges: &[(u32, u32, Class)], cp: u32) -> Class {
    let i = ranges.partition_point(|r| r.1 < cp);
    match ranges.get(i) {
        Some(&(first, _, class)) if first <= cp => class,
        _ => Class::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_of_sample_characters() {
        let c = Classes::get().expect("tables build");
        for (ch, want) in [
            ('a', Class::Letter),
            ('Z', Class::Letter),
            ('é', Class::Letter),
            ('日', Class::Letter),
            ('ſ', Class::Letter),
            ('7', Class::Number),
            ('½', Class::Number),
            ('٣', Class::Number),
            (' ', Class::Space),
            ('\n', Class::Space),
            ('\u{85}', Class::Space),
            ('\u{3000}', Class::Space),
            ('\'', Class::Other),
            ('\u{301}', Class::Other),
            ('🙂', Class::Other),
            ('\u{200b}', Class::Other),
        ] {
            assert_eq!(c.of(ch), want, "{ch:?}");
        }
    }
}
