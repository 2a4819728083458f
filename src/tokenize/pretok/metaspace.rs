//! Word splitting for SentencePiece-style tokenizers whose `Metaspace` pre-tokenizer does not
//! split (`split: false`): stock tokenizers then hand the BPE model each added-token segment
//! as one "word", so a 100 KB prompt is one 100 KB merge problem.
//!
//! Cutting that word before a `▁` (the replacement character) whose left neighbour `x` is not
//! `▁` gives the same ids, provided no merge can join the two sides: a merge across the cut
//! produces a vocabulary token containing `x▁`. So the cut is made only where no token of the
//! vocabulary contains `x` followed by `▁` (checked once at load time; in SentencePiece
//! vocabularies `▁` only starts pieces, or follows other `▁`). The model must also treat
//! words independently of their position and length: BPE without dropout, without
//! `continuing_subword_prefix` / `end_of_word_suffix`, and without `ignore_merges` (which
//! looks a whole word up before merging). `▁` itself must be in the vocabulary, so that an
//! unknown-character run (`fuse_unk`) never touches a cut.

use std::collections::HashSet;

use tokenizers::Offsets;
use tokenizers::models::ModelWrapper;
use tokenizers::tokenizer::pattern::Pattern;

/// A [`Pattern`] cutting before safe `▁` positions; used with `Isolated`.
#[derive(Clone, Debug)]
pub struct WordCuts {
    replacement: char,
    /// Characters that some vocabulary token has right before `replacement`.
    glued: HashSet<char>,
}

impl WordCuts {
    /// The cuts for `model`, or `None` when the model does not allow them.
    pub fn for_model(model: &ModelWrapper, replacement: char) -> Option<Self> {
        let ModelWrapper::BPE(bpe) = model else { return None };
        if bpe.dropout.is_some_and(|d| d > 0.0)
            || bpe.continuing_subword_prefix.is_some()
            || bpe.end_of_word_suffix.is_some()
            || bpe.ignore_merges
        {
            return None;
        }
        let vocab = bpe.get_vocab();
        if !vocab.contains_key(replacement.encode_utf8(&mut [0; 4])) {
            return None;
        }
        let mut glued = HashSet::new();
        for token in vocab.keys() {
            let mut prev = None;
            for c in token.chars() {
                if c == replacement
                    && let Some(p) = prev.filter(|&p| p != replacement)
                {
                    glued.insert(p);
                }
                prev = Some(c);
            }
        }
        Some(Self { replacement, glued })
    }
}

impl WordCuts {
    /// Byte offsets in `s` (the text after Metaspace's replacement) where a word starts,
    /// except 0.
    pub fn cut_points<'a>(&'a self, s: &'a str) -> impl Iterator<Item = usize> + 'a {
        let mut prev: Option<char> = None;
        s.char_indices().filter_map(move |(i, c)| {
            let cut = c == self.replacement && prev.is_some_and(|p| p != self.replacement && !self.glued.contains(&p));
            prev = Some(c);
            cut.then_some(i)
        })
    }
}

impl Pattern for &WordCuts {
    fn find_matches(&self, inside: &str) -> tokenizers::Result<Vec<(Offsets, bool)>> {
        Ok(super::tiles(inside, self.cut_points(inside).chain(std::iter::once(inside.len()))))
    }
}
