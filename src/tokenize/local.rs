//! The in-process backend: a Hugging Face `tokenizer.json` plus the model's chat template,
//! loaded once at startup from a local model directory (no downloads).
//!
//! Files read from the directory: `tokenizer.json` (required), `tokenizer_config.json`
//! (optional: `chat_template` as a string or a list of `{name, template}`, and the special
//! tokens `bos_token`, `eos_token`, ... as strings or `{content}` objects), and
//! `chat_template.jinja` (optional; wins over the config's template, as in transformers).
//!
//! Token ids follow vLLM: completions encode each prompt with special tokens (BOS ...) and
//! concatenate; chat renders the template (`add_generation_prompt` etc. from the request) and
//! encodes the text without special tokens (unless the request sets `add_special_tokens`).
//!
//! Follow-up turns: chat encodings go through a [`PrefixCache`]. Why continuing from a cut is
//! exact: HF tokenizers first split the text on added tokens that are not normalised
//! (leftmost-longest matching), then normalise, pre-tokenize and encode every remaining
//! segment on its own. The only context a segment sees is whether it starts at offset 0
//! (Metaspace `prepend_scheme: first`) and its neighbouring characters (`single_word`,
//! `lstrip`/`rstrip` of an adjacent added token). A cut lies right after an anchor: a
//! non-normalised added token without strip or single-word rules whose text matched at that
//! place. Encoding `anchor + suffix` reproduces both contexts for the suffix (it starts after
//! the same anchor, not at offset 0), so its ids after the anchor equal the full encoding's,
//! provided the added-token matching of the full text splits at the cut too, i.e. no added
//! token occurrence straddles it. That is checked in a small window around the cut
//! ([`LocalModel::is_safe_cut`]); the anchor's id is also checked. A failed check falls back to a
//! full encode. Tests compare cached and uncached ids on the fixtures.

use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokenizers::Tokenizer as HfTokenizer;

use super::cache::{Cut, Entry, PrefixCache};
use super::encoder::Encoder;
use super::pretok::direct::AddedAt;
use super::template::{ChatTemplates, SpecialTokens, TemplateError};

/// Token ids of a continued encoding and its safe cut points.
type Continued = (Arc<[u32]>, Vec<Cut>);
use crate::request::openai::ChatPrompt;

/// Special-token names transformers passes to chat templates.
const SPECIAL_NAMES: [&str; 7] =
    ["bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"];

/// Why a model directory could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// `tokenizer.json` does not exist.
    #[error("tokenizer not found: {} does not exist", path.display())]
    NotFound {
        /// The missing file.
        path: PathBuf,
    },
    /// A file exists but cannot be read.
    #[error("cannot read {}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// `tokenizer.json` is not a valid tokenizer.
    #[error("invalid tokenizer {}", path.display())]
    Tokenizer {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: tokenizers::Error,
    },
    /// `tokenizer_config.json` is not valid JSON of the expected shape.
    #[error("invalid tokenizer config {}", path.display())]
    Config {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: serde_json::Error,
    },
    /// A chat template does not compile.
    #[error("invalid chat template in {}", path.display())]
    Template {
        /// The file holding the template.
        path: PathBuf,
        /// Cause.
        #[source]
        source: TemplateError,
    },
}

/// Why a prompt could not be tokenized in process.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    /// The tokenizer failed.
    #[error("tokenizer failed")]
    Tokenizer(#[source] tokenizers::Error),
    /// The chat template failed.
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// Chat request for a model without a chat template.
    #[error("model has no chat template")]
    NoTemplate,
    /// A request feature the in-process backend does not reproduce.
    #[error("unsupported request feature: {0}")]
    Unsupported(&'static str),
}

/// Whether the prefix cache served part of an encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheUse {
    /// The cache was not consulted (completions, `add_special_tokens`).
    Bypass,
    /// Continued from a cached prefix.
    Hit,
    /// Encoded in full.
    Miss,
}

/// One loaded model directory.
#[derive(Debug)]
pub struct LocalModel {
    dir: PathBuf,
    /// The loaded tokenizer ([`Encoder`]: direct encoding or fast pre-tokenization where
    /// recognised).
    tokenizer: Encoder,
    /// Model templates (possibly none: then only request-level templates render).
    templates: ChatTemplates,
    special: SpecialTokens,
    /// Anchor id -> its text.
    anchors: HashMap<u32, String>,
    /// Texts of the added tokens matched before normalisation (straddle check).
    split_tokens: Vec<String>,
    cache: PrefixCache,
}

/// `tokenizer_config.json` fields used here.
#[derive(serde::Deserialize, Default)]
struct TokenizerConfig {
    #[serde(default)]
    chat_template: Option<ConfigTemplate>,
    #[serde(flatten)]
    rest: BTreeMap<String, serde_json::Value>,
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum ConfigTemplate {
    One(String),
    Named(Vec<NamedTemplate>),
}

#[derive(serde::Deserialize)]
struct NamedTemplate {
    name: String,
    template: String,
}

/// Prefix-cache bounds of one model.
#[derive(Clone, Copy, Debug)]
pub struct CacheBounds {
    /// Entries.
    pub entries: NonZeroUsize,
    /// Bytes of text + ids.
    pub bytes: usize,
}

impl LocalModel {
    /// Loads `dir`. Blocking file I/O; call at startup.
    ///
    /// Errors: [`LoadError`] naming the offending path.
    pub fn load(dir: &Path, bounds: CacheBounds) -> Result<Self, LoadError> {
        let tok_path = dir.join("tokenizer.json");
        if !tok_path.is_file() {
            return Err(LoadError::NotFound { path: tok_path });
        }
        let stock = HfTokenizer::from_file(&tok_path)
            .map_err(|source| LoadError::Tokenizer { path: tok_path.clone(), source })?;
        // Without truncation or padding: vLLM never truncates or pads a prompt it renders.
        let tokenizer = Encoder::new(&stock);
        let cfg_path = dir.join("tokenizer_config.json");
        let config: TokenizerConfig = match std::fs::read(&cfg_path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes).map_err(|source| LoadError::Config { path: cfg_path.clone(), source })?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => TokenizerConfig::default(),
            Err(source) => return Err(LoadError::Io { path: cfg_path, source }),
        };
        let mut special = SpecialTokens::default();
        for name in SPECIAL_NAMES {
            let content = match config.rest.get(name) {
                Some(serde_json::Value::String(s)) => Some(s.clone()),
                Some(serde_json::Value::Object(o)) => o.get("content").and_then(|c| c.as_str()).map(str::to_owned),
                _ => None,
            };
            if let Some(c) = content {
                special.by_name.insert(name.to_string(), c);
            }
        }
        let jinja_path = dir.join("chat_template.jinja");
        let (template_path, sources) = match std::fs::read_to_string(&jinja_path) {
            Ok(src) => (jinja_path, Some(vec![("default".to_string(), src)])),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (
                cfg_path,
                config.chat_template.map(|t| match t {
                    ConfigTemplate::One(src) => vec![("default".to_string(), src)],
                    ConfigTemplate::Named(list) => list.into_iter().map(|n| (n.name, n.template)).collect(),
                }),
            ),
            Err(source) => return Err(LoadError::Io { path: jinja_path, source }),
        };
        let templates = ChatTemplates::new(sources.unwrap_or_default())
            .map_err(|source| LoadError::Template { path: template_path, source })?;
        let mut anchors = HashMap::new();
        let mut split_tokens = Vec::new();
        for (id, token) in tokenizer.engine().get_added_tokens_decoder() {
            if token.normalized || token.content.is_empty() {
                continue;
            }
            split_tokens.push(token.content.clone());
            if !token.lstrip && !token.rstrip && !token.single_word {
                anchors.insert(id, token.content);
            }
        }
        let cache = PrefixCache::new(bounds.entries, bounds.bytes);
        Ok(Self { dir: dir.to_path_buf(), tokenizer, templates, special, anchors, split_tokens, cache })
    }

    /// The directory it was loaded from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Completions: every text encoded with special tokens, ids concatenated.
    pub fn encode_texts(&self, texts: &[String]) -> Result<Vec<u32>, EncodeError> {
        let mut ids = Vec::new();
        for text in texts {
            ids.extend(self.tokenizer.ids(text, true).map_err(EncodeError::Tokenizer)?);
        }
        Ok(ids)
    }

    /// Chat: `chat` rendered with its template options and encoded.
    pub fn encode_chat(&self, chat: &ChatPrompt) -> Result<(Arc<[u32]>, CacheUse), EncodeError> {
        let text = self.render(chat)?;
        if chat.template.add_special_tokens {
            let ids = self.tokenizer.ids(&text, true).map_err(EncodeError::Tokenizer)?;
            return Ok((ids.into(), CacheUse::Bypass));
        }
        self.encode_cached(text)
    }

    /// The rendered chat prompt.
    ///
    /// Errors: [`EncodeError::NoTemplate`] (neither the model nor the request has one),
    /// [`EncodeError::Unsupported`] when both `continue_final_message` and
    /// `add_generation_prompt` are set (vLLM rejects that request), template errors.
    pub fn render(&self, chat: &ChatPrompt) -> Result<String, EncodeError> {
        if chat.template.continue_final_message && chat.template.add_generation_prompt {
            return Err(EncodeError::Unsupported("continue_final_message with add_generation_prompt"));
        }
        match self.templates.render(chat, &self.special) {
            Err(TemplateError::Missing) => Err(EncodeError::NoTemplate),
            other => Ok(other?),
        }
    }

    /// `text` encoded without special tokens, continuing from a cached prefix when safe.
    pub fn encode_cached(&self, text: String) -> Result<(Arc<[u32]>, CacheUse), EncodeError> {
        if let Some(hit) = self.cache.lookup(&text) {
            let cut = hit.cut();
            if let Some((ids, cuts)) = self.continue_from(&text, &hit.entry.ids, &hit.entry.cuts[..=hit.cut], cut)? {
                self.cache.insert(Entry { text, ids: ids.clone(), cuts });
                return Ok((ids, CacheUse::Hit));
            }
        }
        let ids = self.encode_uncached(&text)?;
        Ok((ids, CacheUse::Miss))
    }

    /// Full encode without special tokens; records the result in the cache.
    pub fn encode_uncached(&self, text: &str) -> Result<Arc<[u32]>, EncodeError> {
        let (ids, added) = self.tokenizer.ids_with_added(text).map_err(EncodeError::Tokenizer)?;
        let cuts = self.cuts_of(text, &ids, &added, 0, 0);
        let ids: Arc<[u32]> = ids.into();
        self.cache.insert(Entry { text: text.to_string(), ids: ids.clone(), cuts });
        Ok(ids)
    }

    /// Ids of `text` continued from `cut` of a cached prompt, or `None` when the cut is not
    /// safe for this text.
    fn continue_from(
        &self,
        text: &str,
        cached: &[u32],
        cached_cuts: &[Cut],
        cut: Cut,
    ) -> Result<Option<Continued>, EncodeError> {
        let (Some(anchor), Some(suffix)) = (self.anchors.get(&cut.anchor), text.get(cut.byte_end..)) else {
            return Ok(None);
        };
        if !self.is_safe_cut(text, cut.byte_end) {
            return Ok(None);
        }
        let mut piece = String::with_capacity(anchor.len() + suffix.len());
        piece.push_str(anchor);
        piece.push_str(suffix);
        let (new_ids, added) = self.tokenizer.ids_with_added(&piece).map_err(EncodeError::Tokenizer)?;
        if new_ids.first() != Some(&cut.anchor) || added.first().map(|a| (a.index, a.end)) != Some((0, anchor.len())) {
            return Ok(None);
        }
        // Collected straight into the shared slice (one allocation, one copy).
        let ids: Arc<[u32]> = cached[..cut.n_ids].iter().chain(&new_ids[1..]).copied().collect();
        let base = cut.byte_end - anchor.len();
        let mut cuts = cached_cuts.to_vec();
        // The piece's own first cut is the anchor already in `cached_cuts`.
        cuts.extend(self.cuts_of(&piece, &new_ids, &added, base, cut.n_ids - 1).into_iter().skip(1));
        Ok(Some((ids, cuts)))
    }

    /// Cuts after anchor tokens among the `added` tokens of an encoding of `text`; offsets
    /// shifted by `byte_shift`, id counts by `id_shift`.
    fn cuts_of(&self, text: &str, ids: &[u32], added: &[AddedAt], byte_shift: usize, id_shift: usize) -> Vec<Cut> {
        added
            .iter()
            .filter_map(|&AddedAt { index: i, start, end }| {
                let id = *ids.get(i)?;
                let anchor = self.anchors.get(&id)?;
                // The id must come from the added-token split, not from the model (e.g. unk).
                (text.get(start..end) == Some(anchor.as_str())).then_some(Cut {
                    byte_end: end + byte_shift,
                    n_ids: i + 1 + id_shift,
                    anchor: id,
                })
            })
            .collect()
    }

    /// No pre-normalisation added token occurrence straddles byte `at` of `text`.
    pub fn is_safe_cut(&self, text: &str, at: usize) -> bool {
        let bytes = text.as_bytes();
        self.split_tokens.iter().all(|t| {
            let t = t.as_bytes();
            let first = at.saturating_sub(t.len() - 1);
            (first..at).all(|p| p + t.len() <= at || !bytes[p..].starts_with(t))
        })
    }

    /// True when the direct encoder serves this model ([`super::pretok::direct`]).
    pub fn direct_encoding(&self) -> bool {
        self.tokenizer.is_direct()
    }

    /// Entries in the prefix cache.
    pub fn cached_prompts(&self) -> usize {
        self.cache.len()
    }
}

/// Model name -> loaded model, with an optional fallback for names not listed (LoRA
/// adapters and aliases of a base model share its tokenizer).
#[derive(Debug, Default)]
pub struct LocalBackend {
    models: HashMap<String, Arc<LocalModel>>,
    fallback: Option<Arc<LocalModel>>,
}

impl LocalBackend {
    /// Loads every `(model name, directory)`. `fallback` names one of them.
    ///
    /// Errors: the first model that fails, with its name.
    pub fn load(
        models: &BTreeMap<String, PathBuf>,
        fallback: Option<&str>,
        bounds: CacheBounds,
    ) -> Result<Self, (String, LoadError)> {
        let mut loaded = HashMap::new();
        for (name, dir) in models {
            let model = LocalModel::load(dir, bounds).map_err(|e| (name.clone(), e))?;
            loaded.insert(name.clone(), Arc::new(model));
        }
        let fallback = fallback.and_then(|f| loaded.get(f).cloned());
        Ok(Self { models: loaded, fallback })
    }

    /// The model serving `name` (the fallback for unlisted names).
    pub fn model(&self, name: &str) -> Option<&Arc<LocalModel>> {
        self.models.get(name).or(self.fallback.as_ref())
    }
}
