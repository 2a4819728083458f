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

use super::openai::{ChatMessage, EmbeddingsInput, MessageContent, Prompt, ResponsesInput};

/// Returns the estimate-backend token ids for `prompt`.
///
/// Example: a chat with one message `{role: "user", content: "hello"}` is the byte string
/// `userhello`, padded to 12 bytes: `[1919251317, 1819043176, 111]`.
pub fn estimate_tokens(prompt: &Prompt) -> Vec<u32> {
    let mut packer = Packer::with_byte_capacity(byte_len_hint(prompt));
    match prompt {
        Prompt::TokenIds(seqs) | Prompt::Embeddings(EmbeddingsInput::TokenIds(seqs)) => {
            return seqs.concat();
        }
        Prompt::Texts(texts) | Prompt::Embeddings(EmbeddingsInput::Texts(texts)) => {
            texts.iter().for_each(|t| packer.push(t.as_bytes()));
        }
        Prompt::Chat(chat) => {
            if let Some(tools) = &chat.tools {
                packer.push(tools.get().as_bytes());
            }
            push_messages(&mut packer, &chat.messages);
        }
        Prompt::Responses(resp) => {
            if let Some(tools) = &resp.tools {
                packer.push(tools.get().as_bytes());
            }
            if let Some(instructions) = &resp.instructions {
                packer.push(instructions.as_bytes());
            }
            match &resp.input {
                ResponsesInput::Text(text) => packer.push(text.as_bytes()),
                ResponsesInput::Items(items) => push_messages(&mut packer, items),
            }
        }
        Prompt::Conversations(items) => push_messages(&mut packer, items),
        Prompt::None => {}
    }
    packer.finish()
}

fn push_messages(packer: &mut Packer, messages: &[ChatMessage]) {
    for message in messages {
        packer.push(message.role.as_bytes());
        match &message.content {
            MessageContent::Text(text) => packer.push(text.as_bytes()),
            MessageContent::Parts(parts) => {
                parts.iter().filter_map(|p| p.text.as_deref()).for_each(|t| packer.push(t.as_bytes()))
            }
            MessageContent::None => {}
        }
    }
}

/// A cheap upper-bound-ish guess of the byte length, to size the output once.
fn byte_len_hint(prompt: &Prompt) -> usize {
    fn messages_len(messages: &[ChatMessage]) -> usize {
        messages
            .iter()
            .map(|m| {
                m.role.len()
                    + match &m.content {
                        MessageContent::Text(t) => t.len(),
                        MessageContent::Parts(p) => p.iter().filter_map(|p| p.text.as_ref()).map(String::len).sum(),
                        MessageContent::None => 0,
                    }
            })
            .sum()
    }
    match prompt {
        Prompt::Texts(t) | Prompt::Embeddings(EmbeddingsInput::Texts(t)) => t.iter().map(String::len).sum(),
        Prompt::Chat(c) => c.tools.as_ref().map_or(0, |t| t.get().len()) + messages_len(&c.messages),
        Prompt::Conversations(items) => messages_len(items),
        Prompt::Responses(r) => match &r.input {
            ResponsesInput::Text(t) => t.len(),
            ResponsesInput::Items(items) => messages_len(items),
        },
        Prompt::TokenIds(_) | Prompt::Embeddings(EmbeddingsInput::TokenIds(_)) | Prompt::None => 0,
    }
}

/// Packs a byte stream into little-endian `u32` words without an intermediate buffer.
struct Packer {
    words: Vec<u32>,
    carry: [u8; 4],
    carry_len: usize,
}

impl Packer {
    fn with_byte_capacity(bytes: usize) -> Packer {
        Packer { words: Vec::with_capacity(bytes.div_ceil(4)), carry: [0; 4], carry_len: 0 }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        if self.carry_len > 0 {
            let take = (4 - self.carry_len).min(bytes.len());
            self.carry[self.carry_len..self.carry_len + take].copy_from_slice(&bytes[..take]);
            self.carry_len += take;
            bytes = &bytes[take..];
            if self.carry_len < 4 {
                return;
            }
            self.words.push(u32::from_le_bytes(self.carry));
            self.carry_len = 0;
        }
        let chunks = bytes.chunks_exact(4);
        let rest = chunks.remainder();
        self.words.extend(chunks.map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])));
        self.carry[..rest.len()].copy_from_slice(rest);
        self.carry_len = rest.len();
    }

    fn finish(mut self) -> Vec<u32> {
        if self.carry_len > 0 {
            self.carry[self.carry_len..].fill(0);
            self.words.push(u32::from_le_bytes(self.carry));
        }
        self.words
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
        assert_eq!(estimate_tokens(&p), vec![1919251317, 1819043176, 111]);
    }

    #[test]
    fn chat_parts_and_tools_are_concatenated_then_padded_once() {
        let body = r#"{"model":"m","tools":[1],"messages":[
            {"role":"ab","content":[{"type":"text","text":"c"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"d"}]},
            {"role":"assistant","content":null}]}"#;
        let expected_bytes = b"[1]abcdassistant";
        let words = estimate_tokens(&prompt(ApiKind::ChatCompletions, body));
        assert_eq!(words, reference_pack(expected_bytes));
    }

    #[test]
    fn token_ids_pass_through_concatenated() {
        let p = prompt(ApiKind::Completions, r#"{"model":"m","prompt":[[1,2],[3]]}"#);
        assert_eq!(estimate_tokens(&p), vec![1, 2, 3]);
        let p = prompt(ApiKind::Embeddings, r#"{"model":"m","input":[7,8]}"#);
        assert_eq!(estimate_tokens(&p), vec![7, 8]);
    }

    #[test]
    fn texts_exact_multiple_of_four_has_no_padding_word() {
        let p = prompt(ApiKind::Completions, r#"{"model":"m","prompt":["ab","cd"]}"#);
        assert_eq!(estimate_tokens(&p), vec![u32::from_le_bytes(*b"abcd")]);
    }

    #[test]
    fn responses_tools_instructions_then_items() {
        let body = r#"{"model":"m","instructions":"I","tools":{},"input":[
            {"role":"user","content":[{"type":"input_text","text":"hi"}]}]}"#;
        let words = estimate_tokens(&prompt(ApiKind::Responses, body));
        assert_eq!(words, reference_pack(b"{}Iuserhi"));
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
            let mut packer = Packer::with_byte_capacity(0);
            pieces.iter().for_each(|p| packer.push(p));
            proptest::prop_assert_eq!(packer.finish(), reference_pack(&pieces.concat()));
        }
    }
}
