//! llm-d's `estimate` token backend: a tokenizer-free stand-in for token ids.
//!
//! Input: a parsed [`Prompt`]. Output: pseudo "token ids" that are stable for identical
//! prompts and prefix-stable for prompts that share leading bytes, which is all the
//! prefix-cache plugins need when no real tokenizer is configured.
//!
//! Rules: pre-tokenized prompts pass through (sequences concatenated). Everything else is
//! turned into one byte string, zero-padded once to a multiple of 4, and read as
//! little-endian `u32` words:
//! * completions / embeddings text: the texts concatenated;
//! * chat: the raw `tools` JSON (if any), then per message its role then its content
//!   (a multi-part content contributes the concatenated `text` of its parts);
//! * responses: `tools` JSON, then `instructions`, then the input text or, per item, role
//!   then content;
//! * conversations: per item, role then content;
//! * no prompt (Anthropic `count_tokens`): no ids.
//!
//! Does not: count real tokens or apply chat templates.

use std::mem::MaybeUninit;
use std::sync::Arc;

use super::openai::{ChatMessage, EmbeddingsInput, MessageContent, Prompt, ResponsesInput};

/// Returns the estimate-backend token ids for `prompt`.
///
/// Example: a chat with one message `{role: "user", content: "hello"}` is the byte string
/// `userhello`, padded to 12 bytes: `[1919251317, 1819043176, 111]`.
///
/// The ids are written once, straight into the shared slice the scheduler keeps (a first
/// pass counts the bytes), so a 10 KB prompt costs no intermediate `Vec` and no copy.
pub fn estimate_tokens(prompt: &Prompt) -> Arc<[u32]> {
    if let Prompt::TokenIds(seqs) | Prompt::Embeddings(EmbeddingsInput::TokenIds(seqs)) = prompt {
        return filled(seqs.iter().map(Vec::len).sum(), |slots| {
            slots.iter_mut().zip(seqs.iter().flatten()).map(|(slot, id)| slot.write(*id)).count()
        });
    }
    let mut bytes = 0;
    for_each_piece(prompt, &mut |piece| bytes += piece.len());
    filled(bytes.div_ceil(4), |words| {
        let mut packer = Packer::new(words);
        for_each_piece(prompt, &mut |piece| packer.push(piece));
        packer.finish()
    })
}

/// A shared slice of `len` words allocated once at its final size (the scheduler keeps the
/// ids as `Arc<[u32]>`; building a `Vec` first would copy them). `fill` writes a prefix of
/// the slots in order and returns its length; slots past it are zeroed (none when the
/// counting pass sized the slice right).
fn filled(len: usize, fill: impl FnOnce(&mut [MaybeUninit<u32>]) -> usize) -> Arc<[u32]> {
    let mut slots = Arc::<[u32]>::new_uninit_slice(len);
    let uninit = Arc::get_mut(&mut slots).expect("a fresh Arc is unique");
    let written = fill(uninit).min(len);
    uninit[written..].iter_mut().for_each(|slot| {
        slot.write(0);
    });
    // SAFETY: `fill` initialised the first `written` slots and the rest were zeroed above.
    unsafe { slots.assume_init() }
}

/// Calls `visit` with each byte piece of a text prompt, in the order of the module rules
/// (token-id prompts have none).
fn for_each_piece(prompt: &Prompt, visit: &mut dyn FnMut(&[u8])) {
    match prompt {
        Prompt::Texts(texts) | Prompt::Embeddings(EmbeddingsInput::Texts(texts)) => {
            texts.iter().for_each(|t| visit(t.as_bytes()));
        }
        Prompt::Chat(chat) => {
            if let Some(tools) = &chat.tools {
                visit(tools.get().as_bytes());
            }
            messages(&chat.messages, visit);
        }
        Prompt::Responses(resp) => {
            if let Some(tools) = &resp.tools {
                visit(tools.get().as_bytes());
            }
            if let Some(instructions) = &resp.instructions {
                visit(instructions.as_bytes());
            }
            match &resp.input {
                ResponsesInput::Text(text) => visit(text.as_bytes()),
                ResponsesInput::Items(items) => messages(items, visit),
            }
        }
        Prompt::Conversations(items) => messages(items, visit),
        Prompt::TokenIds(_) | Prompt::Embeddings(EmbeddingsInput::TokenIds(_)) | Prompt::None => {}
    }
}

fn messages(messages: &[ChatMessage], visit: &mut dyn FnMut(&[u8])) {
    for message in messages {
        visit(message.role.as_bytes());
        match &message.content {
            MessageContent::Text(text) => visit(text.as_bytes()),
            MessageContent::Parts(parts) => {
                parts.iter().filter_map(|p| p.text.as_deref()).for_each(|t| visit(t.as_bytes()))
            }
            MessageContent::None => {}
        }
    }
}

/// Packs a byte stream into little-endian `u32` words of a slice sized for it (bytes / 4,
/// rounded up), without an intermediate buffer.
struct Packer<'a> {
    words: &'a mut [MaybeUninit<u32>],
    filled: usize,
    carry: [u8; 4],
    carry_len: usize,
}

impl<'a> Packer<'a> {
    fn new(words: &'a mut [MaybeUninit<u32>]) -> Packer<'a> {
        Packer { words, filled: 0, carry: [0; 4], carry_len: 0 }
    }

    fn put(&mut self, word: [u8; 4]) {
        self.words[self.filled].write(u32::from_le_bytes(word));
        self.filled += 1;
    }

    fn push(&mut self, mut bytes: &[u8]) {
        // The carry is at most three bytes: moved a byte at a time (`copy_from_slice` of a
        // length unknown at compile time is a `memcpy` call, twice per piece: ~12 % of the
        // estimate on a chat of short turns, callgrind).
        while self.carry_len > 0 {
            let Some((&b, rest)) = bytes.split_first() else { return };
            self.carry[self.carry_len] = b;
            self.carry_len += 1;
            bytes = rest;
            if self.carry_len == 4 {
                self.put(self.carry);
                self.carry_len = 0;
            }
        }
        let chunks = bytes.chunks_exact(4);
        let rest = chunks.remainder();
        let end = self.filled + chunks.len();
        let out = &mut self.words[self.filled..end];
        out.iter_mut().zip(chunks).for_each(|(word, c)| {
            word.write(u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
        });
        self.filled = end;
        for (slot, &b) in self.carry.iter_mut().zip(rest) {
            *slot = b;
        }
        self.carry_len = rest.len();
    }

    /// Writes the zero-padded last word, if any; returns the number of words written.
    fn finish(mut self) -> usize {
        if self.carry_len > 0 {
            self.carry[self.carry_len..].fill(0);
            self.put(self.carry);
        }
        debug_assert_eq!(self.filled, self.words.len(), "the counting pass sized the slice");
        self.filled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::openai::{ApiKind, parse_body};

    fn prompt(api: ApiKind, body: &str) -> Prompt {
        parse_body(api, body.as_bytes()).expect("valid body").prompt
    }

    #[test]
    fn chat_worked_example_from_reference() {
        let p = prompt(ApiKind::ChatCompletions, r#"{"model":"m","messages":[{"role":"user","content":"hello"}]}"#);
        assert_eq!(estimate_tokens(&p).to_vec(), vec![1919251317, 1819043176, 111]);
    }

    #[test]
    fn chat_parts_and_tools_are_concatenated_then_padded_once() {
        let body = r#"{"model":"m","tools":[1],"messages":[
            {"role":"ab","content":[{"type":"text","text":"c"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"d"}]},
            {"role":"assistant","content":null}]}"#;
        let expected_bytes = b"[1]abcdassistant";
        let words = estimate_tokens(&prompt(ApiKind::ChatCompletions, body));
        assert_eq!(words.to_vec(), reference_pack(expected_bytes));
    }

    #[test]
    fn a_short_fill_leaves_zeroes_not_garbage() {
        let words = filled(3, |slots| {
            slots[0].write(7);
            1
        });
        assert_eq!(words.to_vec(), vec![7, 0, 0]);
    }

    #[test]
    fn token_ids_pass_through_concatenated() {
        let p = prompt(ApiKind::Completions, r#"{"model":"m","prompt":[[1,2],[3]]}"#);
        assert_eq!(estimate_tokens(&p).to_vec(), vec![1, 2, 3]);
        let p = prompt(ApiKind::Embeddings, r#"{"model":"m","input":[7,8]}"#);
        assert_eq!(estimate_tokens(&p).to_vec(), vec![7, 8]);
    }

    #[test]
    fn texts_exact_multiple_of_four_has_no_padding_word() {
        let p = prompt(ApiKind::Completions, r#"{"model":"m","prompt":["ab","cd"]}"#);
        assert_eq!(estimate_tokens(&p).to_vec(), vec![u32::from_le_bytes(*b"abcd")]);
    }

    #[test]
    fn responses_tools_instructions_then_items() {
        let body = r#"{"model":"m","instructions":"I","tools":{},"input":[
            {"role":"user","content":[{"type":"input_text","text":"hi"}]}]}"#;
        let words = estimate_tokens(&prompt(ApiKind::Responses, body));
        assert_eq!(words.to_vec(), reference_pack(b"{}Iuserhi"));
    }

    fn reference_pack(bytes: &[u8]) -> Vec<u32> {
        let mut padded = bytes.to_vec();
        padded.resize(bytes.len().div_ceil(4) * 4, 0);
        padded.chunks(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
    }

    proptest::proptest! {
        #[test]
        fn packer_matches_reference(pieces in proptest::collection::vec(
            proptest::collection::vec(proptest::num::u8::ANY, 0..9), 0..8)) {
            let words = filled(pieces.iter().map(Vec::len).sum::<usize>().div_ceil(4), |slots| {
                let mut packer = Packer::new(slots);
                pieces.iter().for_each(|p| packer.push(p));
                packer.finish()
            });
            proptest::prop_assert_eq!(words.to_vec(), reference_pack(&pieces.concat()));
        }
    }
}
