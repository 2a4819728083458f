//! Hand-written matchers for the two split regexes almost every byte-level BPE tokenizer
//! uses, producing exactly the matches fancy-regex's backtracking search produces (leftmost
//! first alternative, greedy quantifiers) in one forward pass without backtracking.
//!
//! Llama 3 ([`Rule::Llama3`]):
//! `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
//!
//! GPT-2 ([`Rule::Gpt2`], also what `ByteLevel` with `use_regex: true` splits with):
//! `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
//!
//! How the whitespace alternatives resolve, for a maximal whitespace run `W` of `n`
//! characters starting at the match position (every other alternative failed there):
//! * `\s*[\r\n]+` backtracks `\s*` from the end of `W` to its last CR/LF, so it matches up to
//!   and including the last CR/LF of `W` (when `W` has one);
//! * `\s+(?!\S)` matches all of `W` at the end of the text, else `n - 1` characters when
//!   `n >= 2` (the next character is then whitespace);
//! * `\s+` matches `W` (`n == 1`, followed by a non-space).
//!
//! Every character starts a match (letters, numbers, whitespace and "other" each have an
//! alternative), so the matches tile the text with no gaps. The property test in
//! `pretok/tests.rs` compares the splits with the stock regex pre-tokenizer.

use tokenizers::Offsets;
use tokenizers::tokenizer::pattern::Pattern;

use super::classes::{Class, Classes};

/// The Llama 3 split regex, as written in `tokenizer.json`.
pub const LLAMA3_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The GPT-2 split regex (`ByteLevel`'s built-in one).
pub const GPT2_PATTERN: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// Which split regex.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// [`LLAMA3_PATTERN`].
    Llama3,
    /// [`GPT2_PATTERN`].
    Gpt2,
}

impl Rule {
    /// The rule whose regex is exactly `pattern`.
    pub fn from_regex(pattern: &str) -> Option<Rule> {
        match pattern {
            LLAMA3_PATTERN => Some(Rule::Llama3),
            GPT2_PATTERN => Some(Rule::Gpt2),
            _ => None,
        }
    }
}

/// A [`Pattern`] matching one rule; used with `SplitDelimiterBehavior::Isolated`.
#[derive(Clone, Copy, Debug)]
pub struct FastSplit {
    rule: Rule,
    classes: &'static Classes,
}

impl FastSplit {
    /// The matcher for `rule`, or `None` when the character tables are unavailable.
    pub fn new(rule: Rule) -> Option<Self> {
        Classes::get().map(|classes| Self { rule, classes })
    }

    /// The rule.
    pub fn rule(&self) -> Rule {
        self.rule
    }

    /// End (byte offset) of the match starting at `i < s.len()`; always `> i`.
    pub fn match_end(&self, s: &str, i: usize) -> usize {
        let scan = Scan { s, classes: self.classes };
        match self.rule {
            Rule::Llama3 => scan.llama3(i),
            Rule::Gpt2 => scan.gpt2(i),
        }
    }
}

impl Pattern for &FastSplit {
    fn find_matches(&self, inside: &str) -> tokenizers::Result<Vec<(Offsets, bool)>> {
        let mut i = 0;
        Ok(super::tiles(
            inside,
            std::iter::from_fn(|| {
                (i < inside.len()).then(|| {
                    i = self.match_end(inside, i);
                    i
                })
            }),
        ))
    }
}

/// `c` under Unicode simple case folding, as far as the contraction letters go: ASCII
/// letters to lower case and `ſ` (U+017F) to `s`; other characters fold to nothing that
/// matters here.
fn fold_case(c: char) -> char {
    if c == 'ſ' { 's' } else { c.to_ascii_lowercase() }
}

/// One text being matched.
struct Scan<'a> {
    s: &'a str,
    classes: &'a Classes,
}

impl Scan<'_> {
    /// The character at byte `i` and the offset after it.
    #[inline]
    fn at(&self, i: usize) -> Option<(char, usize)> {
        let c = self.s.get(i..)?.chars().next()?;
        Some((c, i + c.len_utf8()))
    }

    #[inline]
    fn class_at(&self, i: usize) -> Option<Class> {
        self.at(i).map(|(c, _)| self.classes.of(c))
    }

    /// End of the run of `class` characters starting at `i` (at most `max` of them).
    fn run_end(&self, mut i: usize, class: Class, max: usize) -> usize {
        let mut n = 0;
        while n < max {
            match self.at(i) {
                Some((c, next)) if self.classes.of(c) == class => {
                    i = next;
                    n += 1;
                }
                _ => break,
            }
        }
        i
    }

    /// Length in bytes of a contraction suffix after an apostrophe at `i`: `s t m d` (one
    /// letter) or `re ve ll` (two). Case-insensitive matching follows Unicode simple case
    /// folding, under which `ſ` (U+017F) is an `s`.
    fn contraction(&self, i: usize, ignore_case: bool) -> Option<usize> {
        let fold = |c: char| if ignore_case { fold_case(c) } else { c };
        let (a, after_a) = self.at(i)?;
        match fold(a) {
            's' | 't' | 'm' | 'd' => Some(after_a - i),
            first @ ('r' | 'v' | 'l') => {
                let (b, after_b) = self.at(after_a)?;
                let want = if first == 'l' { 'l' } else { 'e' };
                (fold(b) == want).then_some(after_b - i)
            }
            _ => None,
        }
    }

    /// Whitespace alternatives at `i` (a whitespace character); `crlf` enables
    /// `\s*[\r\n]+`.
    fn whitespace(&self, i: usize, crlf: bool) -> usize {
        let mut end = i;
        let mut last_start = i;
        let mut n = 0usize;
        let mut after_crlf = None;
        while let Some((c, next)) = self.at(end) {
            if self.classes.of(c) != Class::Space {
                break;
            }
            if c == '\r' || c == '\n' {
                after_crlf = Some(next);
            }
            last_start = end;
            end = next;
            n += 1;
        }
        if crlf && let Some(e) = after_crlf {
            return e;
        }
        if end == self.s.len() || n < 2 { end } else { last_start }
    }

    fn llama3(&self, i: usize) -> usize {
        let Some((c, after)) = self.at(i) else { return self.s.len() };
        let class = self.classes.of(c);
        if c == '\''
            && let Some(n) = self.contraction(after, true)
        {
            return after + n;
        }
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if class == Class::Letter {
            return self.run_end(after, Class::Letter, usize::MAX);
        }
        if class != Class::Number && c != '\r' && c != '\n' && self.class_at(after) == Some(Class::Letter) {
            return self.run_end(after, Class::Letter, usize::MAX);
        }
        // \p{N}{1,3}
        if class == Class::Number {
            return self.run_end(after, Class::Number, 2);
        }
        // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
        let start = if c == ' ' { after } else { i };
        if self.class_at(start) == Some(Class::Other) {
            let mut end = self.run_end(start, Class::Other, usize::MAX);
            while let Some(('\r' | '\n', next)) = self.at(end) {
                end = next;
            }
            return end;
        }
        self.whitespace(i, true)
    }

    fn gpt2(&self, i: usize) -> usize {
        let Some((c, after)) = self.at(i) else { return self.s.len() };
        if c == '\''
            && let Some(n) = self.contraction(after, false)
        {
            return after + n;
        }
        // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+'
        let (start, class) = match self.classes.of(c) {
            Class::Space if c == ' ' => (after, self.class_at(after)),
            class => (i, Some(class)),
        };
        match class {
            Some(class @ (Class::Letter | Class::Number | Class::Other)) => self.run_end(start, class, usize::MAX),
            _ => self.whitespace(i, false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn splits(rule: Rule, s: &str) -> Vec<&str> {
        let m = FastSplit::new(rule).expect("tables");
        let mut out = Vec::new();
        let mut i = 0;
        while i < s.len() {
            let e = m.match_end(s, i);
            out.push(&s[i..e]);
            i = e;
        }
        out
    }

    #[test]
    fn llama3_examples() {
        assert_eq!(
            splits(Rule::Llama3, "I'm  fine,\r\n\n  thanks 12345 (ok)'LL ſ'ſ  "),
            [
                "I", "'m", " ", " fine", ",\r\n\n", " ", " thanks", " ", "123", "45", " (", "ok", ")'", "LL", " ſ",
                "'ſ", "  "
            ]
        );
    }

    #[test]
    fn gpt2_examples() {
        assert_eq!(
            splits(Rule::Gpt2, "I'm  fine,\r\n\n  thanks 12345 (ok)'LL's  "),
            ["I", "'m", " ", " fine", ",", "\r\n\n ", " thanks", " 12345", " (", "ok", ")'", "LL", "'s", "  "]
        );
    }

    #[test]
    fn case_folding_matches_regex_syntax() {
        // The characters `(?i)` matching maps onto a contraction letter are exactly those
        // `fold_case` maps onto one.
        let hir = regex_syntax::Parser::new().parse("(?i)[strevmld]").expect("parses");
        let regex_syntax::hir::HirKind::Class(regex_syntax::hir::Class::Unicode(set)) = hir.kind() else {
            panic!("class expected")
        };
        let theirs: Vec<char> = set.iter().flat_map(|r| r.start()..=r.end()).collect();
        let ours: Vec<char> =
            (0..=0x10FFFFu32).filter_map(char::from_u32).filter(|&c| "strevmld".contains(fold_case(c))).collect();
        assert_eq!(ours, theirs);
    }
}
