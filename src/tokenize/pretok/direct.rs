//! Direct encoding for the recognised configurations: added-token split, word split, byte or
//! `▁` mapping and a word -> ids cache, without Hugging Face's per-piece `NormalizedString`,
//! `Token` and `Encoding` objects (allocation was most of a 100 KB encode once the regex was
//! gone). The BPE model itself is still the loaded one: a word not in the cache is encoded by
//! `Model::tokenize`, so merges, byte fallback and unknown tokens are exactly the stock ones.
//!
//! Used when (checked once at load): no normaliser; every added token is matched before
//! normalisation without strip or single-word rules (then HF's added-token split is a plain
//! leftmost-longest search); the pre-tokenizer is `Split(llama3|gpt2)` + `ByteLevel(no
//! regex, no prefix space)`, `ByteLevel(use_regex)` or `Metaspace` with word cuts; a BPE model
//! without dropout. Anything else encodes through the [`super::Engine`]. Ids only: the
//! post-processor (BOS ...) is applied by the caller through the engine.

use std::collections::HashMap;
use std::sync::RwLock;

use aho_corasick::{AhoCorasick, MatchKind};
use tokenizers::Model;
use tokenizers::models::ModelWrapper;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::metaspace::PrependScheme;

use super::metaspace::WordCuts;
use super::split::FastSplit;
use super::{Engine, FastPreTokenizer};

/// Words kept in the cache before it is cleared (bounds memory on unbounded vocabularies of
/// inputs).
const WORD_CACHE_ENTRIES: usize = 200_000;

/// An added token found in the text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddedAt {
    /// Index of its id in the output.
    pub index: usize,
    /// Byte range in the text.
    pub start: usize,
    /// End of the byte range.
    pub end: usize,
}

/// How segments between added tokens become words.
#[derive(Debug)]
enum Words {
    /// Regex-equivalent split, each word mapped byte by byte (GPT-2 byte-to-unicode).
    ByteLevel { split: FastSplit, add_prefix_space: bool },
    /// Spaces to `replacement`, optional prefix, cuts before word-initial `replacement`.
    Metaspace { replacement: char, prepend: PrependScheme, cuts: WordCuts },
}

/// The direct encoder of one model.
#[derive(Debug)]
pub struct DirectEncoder {
    added: AhoCorasick,
    added_ids: Vec<u32>,
    words: Words,
    byte_chars: [char; 256],
    cache: RwLock<HashMap<String, Box<[u32]>>>,
}

impl DirectEncoder {
    /// The encoder for `engine`, or `None` when its configuration is not covered.
    pub fn new(engine: &Engine) -> Option<Self> {
        if engine.get_normalizer().is_some() || engine.get_added_vocabulary().get_encode_special_tokens() {
            return None;
        }
        match engine.get_model() {
            ModelWrapper::BPE(bpe) if bpe.dropout.is_none_or(|d| d == 0.0) => {}
            _ => return None,
        }
        let words = words_of(engine.get_pre_tokenizer()?)?;
        let mut patterns = Vec::new();
        let mut added_ids = Vec::new();
        for (id, token) in engine.get_added_tokens_decoder() {
            if token.normalized || token.lstrip || token.rstrip || token.single_word {
                return None;
            }
            if !token.content.is_empty() {
                added_ids.push(engine.token_to_id(&token.content).unwrap_or(id));
                patterns.push(token.content);
            }
        }
        let added = AhoCorasick::builder().match_kind(MatchKind::LeftmostLongest).build(&patterns).ok()?;
        Some(Self { added, added_ids, words, byte_chars: byte_chars(), cache: RwLock::new(HashMap::new()) })
    }

    /// Ids of `text` without special tokens (what `encode(text, false)` gives), and where
    /// added tokens were matched.
    pub fn encode(&self, model: &ModelWrapper, text: &str) -> tokenizers::Result<(Vec<u32>, Vec<AddedAt>)> {
        let mut ids = Vec::with_capacity(text.len() / 3 + 1);
        let mut added = Vec::new();
        let mut misses: HashMap<String, Box<[u32]>> = HashMap::new();
        {
            let cache = self.cache.read().unwrap_or_else(|p| p.into_inner());
            let mut word = String::new();
            let mut lookup = |w: &str, ids: &mut Vec<u32>| -> tokenizers::Result<()> {
                if let Some(hit) = cache.get(w).or_else(|| misses.get(w)) {
                    ids.extend_from_slice(hit);
                    return Ok(());
                }
                let new: Box<[u32]> = model.tokenize(w)?.into_iter().map(|t| t.id).collect();
                ids.extend_from_slice(&new);
                misses.insert(w.to_string(), new);
                Ok(())
            };
            let mut segment = |start: usize, end: usize, ids: &mut Vec<u32>| {
                self.segment(&text[start..end], start == 0, &mut word, &mut |w| lookup(w, ids))
            };
            let mut at = 0;
            for m in self.added.find_iter(text) {
                if at < m.start() {
                    segment(at, m.start(), &mut ids)?;
                }
                added.push(AddedAt { index: ids.len(), start: m.start(), end: m.end() });
                ids.push(self.added_ids[m.pattern().as_usize()]);
                at = m.end();
            }
            if at < text.len() {
                segment(at, text.len(), &mut ids)?;
            }
        }
        if !misses.is_empty() {
            let mut cache = self.cache.write().unwrap_or_else(|p| p.into_inner());
            if cache.len() + misses.len() > WORD_CACHE_ENTRIES {
                cache.clear();
            }
            cache.extend(misses);
        }
        Ok((ids, added))
    }

    /// Calls `each` with every word of one segment, mapped as the model sees it.
    fn segment(
        &self,
        seg: &str,
        at_start: bool,
        word: &mut String,
        each: &mut dyn FnMut(&str) -> tokenizers::Result<()>,
    ) -> tokenizers::Result<()> {
        match &self.words {
            Words::ByteLevel { split, add_prefix_space } => {
                let owned;
                let seg = if *add_prefix_space && !seg.starts_with(' ') {
                    owned = format!(" {seg}");
                    owned.as_str()
                } else {
                    seg
                };
                let mut i = 0;
                while i < seg.len() {
                    let end = split.match_end(seg, i);
                    word.clear();
                    word.extend(seg.as_bytes()[i..end].iter().map(|&b| self.byte_chars[usize::from(b)]));
                    each(word)?;
                    i = end;
                }
                Ok(())
            }
            Words::Metaspace { replacement, prepend, cuts } => {
                word.clear();
                // Stock Metaspace replaces spaces first, then checks for a leading replacement.
                let starts_replaced = seg.starts_with(' ') || seg.starts_with(*replacement);
                let prefix = match prepend {
                    PrependScheme::Always => !starts_replaced,
                    PrependScheme::First => at_start && !starts_replaced,
                    PrependScheme::Never => false,
                };
                if prefix && !seg.is_empty() {
                    word.push(*replacement);
                }
                word.extend(seg.chars().map(|c| if c == ' ' { *replacement } else { c }));
                let mapped = std::mem::take(word);
                let mut start = 0;
                for cut in cuts.cut_points(&mapped).chain(std::iter::once(mapped.len())) {
                    each(&mapped[start..cut])?;
                    start = cut;
                }
                *word = mapped;
                Ok(())
            }
        }
    }
}

/// The word rule of a recognised pre-tokenizer.
fn words_of(pre: &FastPreTokenizer) -> Option<Words> {
    match pre {
        FastPreTokenizer::ByteLevel { add_prefix_space, split, .. } => {
            Some(Words::ByteLevel { split: *split, add_prefix_space: *add_prefix_space })
        }
        FastPreTokenizer::Metaspace { stock, cuts } => Some(Words::Metaspace {
            replacement: stock.get_replacement(),
            prepend: stock.get_prepend_scheme(),
            cuts: cuts.clone(),
        }),
        FastPreTokenizer::Sequence(members) => match members.as_slice() {
            [FastPreTokenizer::Split(split), FastPreTokenizer::Stock(PreTokenizerWrapper::ByteLevel(b))]
                if !b.add_prefix_space && !b.use_regex =>
            {
                Some(Words::ByteLevel { split: *split, add_prefix_space: false })
            }
            [single] => words_of(single),
            _ => None,
        },
        _ => None,
    }
}

/// GPT-2's byte-to-unicode table: printable Latin-1 bytes map to themselves, the others to
/// U+0100 onwards in byte order.
fn byte_chars() -> [char; 256] {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut table = ['\0'; 256];
    let mut next = 0x100u32;
    for b in 0..=255u8 {
        table[usize::from(b)] = if printable(b) {
            char::from(b)
        } else {
            let c = char::from_u32(next).unwrap_or('\0');
            next += 1;
            c
        };
    }
    table
}
