//! Text -> token ids for one loaded `tokenizer.json`: the direct encoder when the
//! configuration is covered ([`DirectEncoder`]), else the Hugging Face pipeline with fast
//! pre-tokenization ([`Engine`]). Both give the ids `tokenizers` gives for the same file;
//! tests compare them on the fixtures and random text.

use std::collections::HashSet;

use tokenizers::{Encoding, Token, Tokenizer as HfTokenizer};

use super::pretok::direct::{AddedAt, DirectEncoder};
use super::pretok::{Engine, engine};

/// The encoder of one model.
#[derive(Debug)]
pub struct Encoder {
    engine: Engine,
    direct: Option<DirectEncoder>,
    /// Ids of added tokens (reported as [`AddedAt`] on the engine path).
    added_ids: HashSet<u32>,
}

impl Encoder {
    /// The encoder of a loaded tokenizer.
    pub fn new(stock: &HfTokenizer) -> Self {
        let engine = engine(stock);
        let direct = DirectEncoder::new(&engine);
        let added_ids = engine.get_added_tokens_decoder().into_keys().collect();
        Self { engine, direct, added_ids }
    }

    /// The underlying pipeline (added tokens, model, post-processor).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// True when the direct encoder is used.
    pub fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// Ids of `text`, with the post-processor's special tokens when `add_special_tokens`.
    pub fn ids(&self, text: &str, add_special_tokens: bool) -> tokenizers::Result<Vec<u32>> {
        let Some(direct) = &self.direct else {
            return Ok(self.engine.encode_fast(text, add_special_tokens)?.get_ids().to_vec());
        };
        let (ids, _) = direct.encode(self.engine.get_model(), text)?;
        if !add_special_tokens || self.engine.get_post_processor().is_none() {
            return Ok(ids);
        }
        // Tokens without text or offsets: the post-processor only adds its tokens around them.
        let tokens = ids.into_iter().map(|id| Token::new(id, String::new(), (0, 0))).collect();
        let encoding = self.engine.post_process(Encoding::from_tokens(tokens, 0), None, true)?;
        Ok(encoding.get_ids().to_vec())
    }

    /// Ids of `text` without special tokens, and where added tokens were matched.
    pub fn ids_with_added(&self, text: &str) -> tokenizers::Result<(Vec<u32>, Vec<AddedAt>)> {
        if let Some(direct) = &self.direct {
            return direct.encode(self.engine.get_model(), text);
        }
        let enc = self.engine.encode(text, false)?;
        let added = enc
            .get_ids()
            .iter()
            .zip(enc.get_offsets())
            .enumerate()
            .filter(|(_, (id, _))| self.added_ids.contains(id))
            .map(|(index, (_, &(start, end)))| AddedAt { index, start, end })
            .collect();
        Ok((enc.get_ids().to_vec(), added))
    }
}
