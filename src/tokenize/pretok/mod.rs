//! Fast pre-tokenization: the common split configurations of `tokenizer.json` recognised at
//! load time and replaced by hand-written equivalents that produce exactly the same pieces.
//!
//! Substituted (anything else keeps the stock Hugging Face pre-tokenizer):
//! * `Split` with the Llama 3 or GPT-2 regex (see [`split`]), behaviour `Isolated`, not
//!   inverted; typically inside a `Sequence` followed by `ByteLevel(use_regex: false)`, which
//!   stays stock (it only maps bytes to characters);
//! * `ByteLevel(use_regex: true)`: the same prefix-space rule, then the GPT-2 split, then the
//!   stock byte mapping;
//! * `Metaspace(split: false)` over a BPE model that allows it: stock Metaspace, then cuts
//!   before word-initial `▁` (see [`metaspace`]) so the model merges words, not the whole
//!   segment.
//!
//! Fancy-regex runs the Llama 3 pattern (it has a look-ahead) on a backtracking VM, which
//! made pre-tokenization most of a 100 KB encode. [`engine`] rebuilds a loaded
//! [`tokenizers::Tokenizer`] around [`FastPreTokenizer`]; everything else (model,
//! normaliser, added tokens, post-processor) is the loaded one.

pub mod classes;
pub mod direct;
pub mod metaspace;
pub mod split;

use serde_json::Value as Json;
use tokenizers::decoders::DecoderWrapper;
use tokenizers::models::ModelWrapper;
use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::metaspace::Metaspace;
use tokenizers::processors::PostProcessorWrapper;
use tokenizers::{PreTokenizedString, PreTokenizer, SplitDelimiterBehavior, TokenizerImpl};

use self::metaspace::WordCuts;
use self::split::{FastSplit, Rule};

/// The tokenizer type the local backend runs.
pub type Engine =
    TokenizerImpl<ModelWrapper, NormalizerWrapper, FastPreTokenizer, PostProcessorWrapper, DecoderWrapper>;

/// A pre-tokenizer with the recognised configurations replaced by fast equivalents.
#[derive(Clone, Debug)]
pub enum FastPreTokenizer {
    /// Not recognised: the stock one.
    Stock(PreTokenizerWrapper),
    /// `Split(regex, Isolated)` with a known regex.
    Split(FastSplit),
    /// `ByteLevel(use_regex: true)`: optional prefix space, GPT-2 split, byte mapping.
    ByteLevel {
        /// `add_prefix_space`.
        add_prefix_space: bool,
        /// The GPT-2 matcher.
        split: FastSplit,
        /// The same `ByteLevel` with `use_regex` and `add_prefix_space` off.
        bytes: ByteLevel,
    },
    /// `Metaspace(split: false)` followed by safe word cuts.
    Metaspace {
        /// The configured Metaspace.
        stock: Metaspace,
        /// The cuts.
        cuts: WordCuts,
    },
    /// `Sequence`, member by member.
    Sequence(Vec<FastPreTokenizer>),
}

impl FastPreTokenizer {
    /// `stock` with recognised members substituted; `model` decides whether Metaspace word
    /// cuts are exact.
    pub fn from_stock(stock: &PreTokenizerWrapper, model: &ModelWrapper) -> Self {
        serde_json::to_value(stock)
            .ok()
            .and_then(|json| Self::from_json(&json, model))
            .unwrap_or_else(|| Self::Stock(stock.clone()))
    }

    /// True when some member is a fast replacement.
    pub fn is_fast(&self) -> bool {
        match self {
            Self::Stock(_) => false,
            Self::Sequence(members) => members.iter().any(Self::is_fast),
            _ => true,
        }
    }

    /// The fast form of the pre-tokenizer described by `json`, or `None` when nothing in it
    /// is recognised.
    fn from_json(json: &Json, model: &ModelWrapper) -> Option<Self> {
        let flag = |name: &str| json.get(name).and_then(Json::as_bool);
        match json.get("type")?.as_str()? {
            "Split" => {
                let rule = Rule::from_regex(json.get("pattern")?.get("Regex")?.as_str()?)?;
                let isolated = json.get("behavior")?.as_str()? == "Isolated";
                (isolated && flag("invert") == Some(false)).then_some(())?;
                FastSplit::new(rule).map(Self::Split)
            }
            "ByteLevel" if flag("use_regex") != Some(false) => {
                let add_prefix_space = flag("add_prefix_space")?;
                let bytes = ByteLevel::new(false, flag("trim_offsets")?, false);
                Some(Self::ByteLevel { add_prefix_space, split: FastSplit::new(Rule::Gpt2)?, bytes })
            }
            "Metaspace" if flag("split") == Some(false) => {
                let stock: Metaspace = serde_json::from_value(json.clone()).ok()?;
                let cuts = WordCuts::for_model(model, stock.get_replacement())?;
                Some(Self::Metaspace { stock, cuts })
            }
            "Sequence" => {
                let members = json.get("pretokenizers")?.as_array()?;
                let mut fast = Vec::with_capacity(members.len());
                for member in members {
                    match Self::from_json(member, model) {
                        Some(f) => fast.push(f),
                        None => fast.push(Self::Stock(serde_json::from_value(member.clone()).ok()?)),
                    }
                }
                fast.iter().any(Self::is_fast).then_some(Self::Sequence(fast))
            }
            _ => None,
        }
    }
}

impl PreTokenizer for FastPreTokenizer {
    fn pre_tokenize(&self, pretokenized: &mut PreTokenizedString) -> tokenizers::Result<()> {
        match self {
            Self::Stock(stock) => stock.pre_tokenize(pretokenized),
            Self::Split(split) => {
                pretokenized.split(|_, normalized| normalized.split(split, SplitDelimiterBehavior::Isolated))
            }
            Self::ByteLevel { add_prefix_space, split, bytes } => {
                pretokenized.split(|_, mut normalized| {
                    if *add_prefix_space && !normalized.get().starts_with(' ') {
                        normalized.prepend(" ");
                    }
                    normalized.split(split, SplitDelimiterBehavior::Isolated)
                })?;
                bytes.pre_tokenize(pretokenized)
            }
            Self::Metaspace { stock, cuts } => {
                stock.pre_tokenize(pretokenized)?;
                pretokenized.split(|_, normalized| normalized.split(cuts, SplitDelimiterBehavior::Isolated))
            }
            Self::Sequence(members) => members.iter().try_for_each(|m| m.pre_tokenize(pretokenized)),
        }
    }
}

/// A [`tokenizers::tokenizer::pattern::Pattern`] result tiling `inside` with pieces that end
/// at `ends` (increasing, the last one `inside.len()`), all marked as matches (kept as they
/// are by `Isolated`); an empty input is one empty non-match, as the stock patterns give.
fn tiles(inside: &str, ends: impl Iterator<Item = usize>) -> Vec<(tokenizers::Offsets, bool)> {
    if inside.is_empty() {
        return vec![((0, 0), false)];
    }
    let mut start = 0;
    ends.map(|end| {
        let piece = ((start, end), true);
        start = end;
        piece
    })
    .collect()
}

/// `stock` rebuilt around [`FastPreTokenizer`]: same model, normaliser, added vocabulary,
/// post-processor and decoder; no truncation or padding (vLLM never truncates a prompt it
/// renders).
pub fn engine(stock: &tokenizers::Tokenizer) -> Engine {
    let model = stock.get_model().clone();
    let pre = stock.get_pre_tokenizer().map(|p| FastPreTokenizer::from_stock(p, &model));
    let mut engine = Engine::new(model);
    engine
        .with_normalizer(stock.get_normalizer().cloned())
        .with_pre_tokenizer(pre)
        .with_post_processor(stock.get_post_processor().cloned())
        .with_decoder(stock.get_decoder().cloned())
        .with_added_vocabulary(stock.get_added_vocabulary().clone());
    engine
}

#[cfg(test)]
mod tests;
