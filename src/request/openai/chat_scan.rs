//! A hand-written reader for chat completions bodies, tried before the serde path of
//! [`super::de`]: one pass over the bytes straight into [`RawBody`].
//!
//! Why by hand: serde_json restarts its string scan at every escape and walks a chat body
//! through several layers of visitors; on a 10 KB multi-turn chat (an escaped quote or newline
//! every few dozen bytes) that was ~150,000 instructions of the ~350,000 a request cost
//! (callgrind). This reader finds the end of a string run 16 bytes at a time and copies the
//! runs between escapes once. No maintained crate does this through serde's data model
//! (serde_json's reader is sealed; SIMD JSON crates want `-C target-cpu=native` and have their
//! own raw-value types).
//!
//! Contract: [`read_chat`] returns `Some` only for a body the serde path accepts, with the same
//! result. Whatever it does not handle returns `None` and the serde path runs, which also
//! produces every error: a syntax error, a key with an escape, a repeated message or part
//! field, a value of a type the serde path rejects (a number as `role`), an exponent in a
//! number, nesting deeper than [`MAX_DEPTH`], a `\u` escape of a lone surrogate in a decoded
//! string, a media field whose value is an object or list. The property is checked by
//! proptest (`tests.rs`) and, under `cfg(fuzzing)`, by every fuzz target that parses a chat
//! body ([`super::parse_body_with`] then runs both paths and compares them).

use std::borrow::Cow;

use serde_json::value::RawValue;

use super::content::{MediaValue, PartRepr};
use super::de::{ModelField, RawBody};
use super::{ChatMessage, ContentPart, MessageContent, MessageExtras, RawJson};

/// Deepest nesting of skipped values read here (serde_json's own skip has no limit; deeper
/// values are left to it).
const MAX_DEPTH: u32 = 64;

/// The fields of a chat completions body, or `None` to leave the body to the serde path.
pub(super) fn read_chat(text: &str) -> Option<RawBody> {
    let mut c = Cursor { text, bytes: text.as_bytes(), at: 0, scratch: String::new() };
    let mut body = RawBody::default();
    c.ws();
    c.object(|c, key| {
        match key {
            "model" => body.model = c.model()?,
            "messages" => body.messages = c.messages()?,
            "tools" => body.tools = c.raw_json()?,
            "add_generation_prompt" => body.template.add_generation_prompt = c.lenient_bool()?.unwrap_or(true),
            "continue_final_message" => body.template.continue_final_message = c.lenient_bool()?.unwrap_or(false),
            "add_special_tokens" => body.template.add_special_tokens = c.lenient_bool()?.unwrap_or(false),
            "chat_template_kwargs" => body.template.kwargs = c.raw_json()?,
            "chat_template" => body.template.chat_template = c.lenient_string()?,
            "cache_salt" => body.cache_salt = c.lenient_string()?,
            "stream" => body.stream = c.raw()? == "true",
            "max_tokens" => body.max_tokens = c.raw()?.parse().ok(),
            "max_completion_tokens" => body.max_completion_tokens = c.raw()?.parse().ok(),
            "max_output_tokens" => body.max_output_tokens = c.raw()?.parse().ok(),
            _ => c.skip(0)?,
        }
        Some(())
    })?;
    c.ws();
    (c.at == c.bytes.len()).then_some(body)
}

/// A position in the body. Every method returns `None` for input it leaves to the serde path.
struct Cursor<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
    /// An escaped string is decoded here first, then copied out at its final size (growing
    /// each string from its first run cost more: a reallocation every doubling).
    scratch: String,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    /// Skips JSON whitespace.
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    /// Consumes `byte` (no whitespace before it).
    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// An object at the cursor: `each` is called with every key (escape-free), the cursor on
    /// the key's value; it must consume the value.
    fn object(&mut self, mut each: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.sequence(b'{', b'}', |c| {
            let key = c.key()?;
            c.ws();
            c.eat(b':')?;
            c.ws();
            each(c, key)
        })
    }

    /// A list at the cursor: `each` is called with the cursor on every element and must
    /// consume it.
    fn list(&mut self, each: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.sequence(b'[', b']', each)
    }

    /// A list whose elements `item` reads.
    fn list_of<T>(&mut self, capacity: usize, mut item: impl FnMut(&mut Self) -> Option<T>) -> Option<Vec<T>> {
        let mut items = Vec::with_capacity(capacity);
        self.list(|c| {
            items.push(item(c)?);
            Some(())
        })?;
        Some(items)
    }

    /// `open`, then members separated by commas (each read by `member`), then `close`.
    fn sequence(&mut self, open: u8, close: u8, mut member: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(open)?;
        self.ws();
        if self.eat(close).is_some() {
            return Some(());
        }
        loop {
            member(self)?;
            self.ws();
            match self.peek()? {
                b',' => self.at += 1,
                b if b == close => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
            self.ws();
        }
    }

    /// An object key without escapes.
    fn key(&mut self) -> Option<&'a str> {
        match self.string()? {
            Cow::Borrowed(key) => Some(key),
            Cow::Owned(_) => None,
        }
    }

    /// A string at the cursor, its escapes decoded: borrowed from the body when it has none.
    fn string(&mut self) -> Option<Cow<'a, str>> {
        self.eat(b'"')?;
        let start = self.at;
        let end = find_special(self.bytes, start);
        if self.bytes.get(end) == Some(&b'"') {
            self.at = end + 1;
            return Some(Cow::Borrowed(self.text.get(start..end)?));
        }
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        let decoded = self.decode_into(&mut out, start, end);
        let owned = decoded.map(|()| Cow::Owned(out.as_str().to_owned()));
        self.scratch = out;
        owned
    }

    /// Decodes the rest of a string whose first escape is at `end` (its text from `run`) into
    /// `out`, and moves past its closing quote.
    fn decode_into(&mut self, out: &mut String, mut run: usize, mut end: usize) -> Option<()> {
        loop {
            // Runs end before an ASCII byte, so they are whole characters of the body.
            out.push_str(self.text.get(run..end)?);
            match self.bytes.get(end)? {
                b'"' => {
                    self.at = end + 1;
                    return Some(());
                }
                b'\\' => {
                    self.at = end + 1;
                    out.push(self.escape()?);
                    run = self.at;
                    end = find_special(self.bytes, run);
                }
                _ => return None,
            }
        }
    }

    /// The character of the escape after a backslash.
    fn escape(&mut self) -> Option<char> {
        let byte = self.peek()?;
        self.at += 1;
        Some(match byte {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let unit = self.hex4()?;
                match unit {
                    0xD800..=0xDBFF => {
                        self.eat(b'\\')?;
                        self.eat(b'u')?;
                        let low = self.hex4()?;
                        if !(0xDC00..=0xDFFF).contains(&low) {
                            return None;
                        }
                        char::from_u32(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00))?
                    }
                    // A lone low surrogate is not a character: None.
                    _ => char::from_u32(unit)?,
                }
            }
            _ => return None,
        })
    }

    /// Four hex digits.
    fn hex4(&mut self) -> Option<u32> {
        let digits = self.bytes.get(self.at..self.at + 4)?;
        let mut unit = 0;
        for &d in digits {
            unit = unit << 4 | char::from(d).to_digit(16)?;
        }
        self.at += 4;
        Some(unit)
    }

    /// Skips a string, checking its escapes as serde_json's skip does (a `\u` escape needs four
    /// hex digits, any value).
    fn skip_string(&mut self) -> Option<()> {
        self.eat(b'"')?;
        loop {
            let end = find_special(self.bytes, self.at);
            match self.bytes.get(end)? {
                b'"' => {
                    self.at = end + 1;
                    return Some(());
                }
                b'\\' => {
                    self.at = end + 1;
                    match self.peek()? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.at += 1,
                        b'u' => {
                            self.at += 1;
                            self.hex4()?;
                        }
                        _ => return None,
                    }
                }
                _ => return None,
            }
        }
    }

    /// Skips any value, checked as serde_json checks a value it ignores.
    fn skip(&mut self, depth: u32) -> Option<()> {
        match self.peek()? {
            b'"' => self.skip_string(),
            b'{' if depth < MAX_DEPTH => self.object(|c, _| c.skip(depth + 1)),
            b'[' if depth < MAX_DEPTH => self.list(|c| c.skip(depth + 1)),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let found = self.bytes.get(self.at..self.at + word.len())?;
        (found == word).then(|| self.at += word.len())
    }

    /// A number without an exponent: `-?(0|[1-9][0-9]*)(\.[0-9]+)?`.
    fn number(&mut self) -> Option<()> {
        let _ = self.eat(b'-');
        match self.peek()? {
            b'0' => self.at += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.eat(b'.').is_some() {
            let from = self.at;
            self.digits();
            if self.at == from {
                return None;
            }
        }
        // An exponent, or a digit after a leading zero: the serde path decides.
        match self.peek() {
            Some(b'e' | b'E' | b'0'..=b'9') => None,
            _ => Some(()),
        }
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.at += 1;
        }
    }

    /// The text of the value at the cursor, as serde_json's `RawValue` holds it.
    fn raw(&mut self) -> Option<&'a str> {
        let start = self.at;
        self.skip(0)?;
        self.text.get(start..self.at)
    }

    /// A value kept verbatim; `null` is `None`.
    fn raw_json(&mut self) -> Option<Option<RawJson>> {
        let raw = self.raw()?;
        if raw == "null" {
            return Some(None);
        }
        // `from_string` checks the text again (it is short: tools, template arguments).
        RawValue::from_string(raw.to_owned()).ok().map(|v| Some(RawJson(v)))
    }

    /// A string value, `None` for any other value.
    fn lenient_string(&mut self) -> Option<Option<String>> {
        if self.peek()? == b'"' {
            return Some(Some(self.string()?.into_owned()));
        }
        self.skip(0).map(|()| None)
    }

    /// `true` or `false`, `None` for any other value.
    fn lenient_bool(&mut self) -> Option<Option<bool>> {
        Some(match self.raw()? {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        })
    }

    /// `null` or a string; any other value is left to the serde path.
    fn nullable_string(&mut self) -> Option<Option<String>> {
        match self.peek()? {
            b'"' => Some(Some(self.string()?.into_owned())),
            b'n' => self.literal(b"null").map(|()| None),
            _ => None,
        }
    }

    fn model(&mut self) -> Option<ModelField> {
        Some(match self.peek()? {
            b'"' => ModelField::Str(self.string()?.into_owned()),
            b'n' => self.literal(b"null").map(|()| ModelField::Missing)?,
            _ => self.skip(0).map(|()| ModelField::NotString)?,
        })
    }

    /// `messages`: `null` or a list of message objects.
    fn messages(&mut self) -> Option<Option<Vec<ChatMessage>>> {
        if self.peek()? == b'n' {
            return self.literal(b"null").map(|()| None);
        }
        self.list_of(16, Self::message).map(Some)
    }

    /// One message object (see `super::message` for the fields and their rules).
    fn message(&mut self) -> Option<ChatMessage> {
        let (mut role, mut content) = (None, None);
        let (mut name, mut tool_calls, mut tool_call_id) = (None, None, None);
        self.object(|c, key| match key {
            "role" => once(&mut role, c.nullable_string()?),
            "content" => once(&mut content, c.content()?),
            "name" => once(&mut name, c.lenient_string()?),
            "tool_calls" => once(&mut tool_calls, c.raw_json()?),
            "tool_call_id" => once(&mut tool_call_id, c.lenient_string()?),
            _ => c.skip(0),
        })?;
        let extras = MessageExtras {
            name: name.flatten(),
            tool_calls: tool_calls.flatten(),
            tool_call_id: tool_call_id.flatten(),
        };
        Some(ChatMessage {
            role: role.flatten().unwrap_or_default(),
            content: content.unwrap_or(MessageContent::None),
            extras: (extras != MessageExtras::default()).then(|| Box::new(extras)),
        })
    }

    /// A message's `content`: a string, a list of parts, or `null`.
    fn content(&mut self) -> Option<MessageContent> {
        match self.peek()? {
            b'"' => Some(MessageContent::Text(self.string()?.into_owned())),
            b'n' => self.literal(b"null").map(|()| MessageContent::None),
            b'[' => self.list_of(2, Self::part).map(MessageContent::Parts),
            _ => None,
        }
    }

    /// One content part object.
    fn part(&mut self) -> Option<ContentPart> {
        let mut p = PartRepr::default();
        let (mut kind, mut text) = (None, None);
        let (mut image, mut video, mut audio, mut input_audio) = (None, None, None, None);
        self.object(|c, key| match key {
            "type" => once(&mut kind, c.nullable_string()?),
            "text" => once(&mut text, c.nullable_string()?),
            "image_url" => once(&mut image, c.media()?),
            "video_url" => once(&mut video, c.media()?),
            "audio_url" => once(&mut audio, c.media()?),
            "input_audio" => once(&mut input_audio, c.media()?),
            _ => c.skip(0),
        })?;
        (p.kind, p.text) = (kind.flatten(), text.flatten());
        (p.image_url, p.video_url, p.audio_url) =
            (image.unwrap_or_default(), video.unwrap_or_default(), audio.unwrap_or_default());
        p.input_audio = input_audio.unwrap_or_default();
        let media = p.media();
        Some(ContentPart { kind: p.kind.unwrap_or_default(), text: p.text, media })
    }

    /// A media field: a URL string, an object of strings (`url`, `data`, `format`; other
    /// fields and non-string scalars ignored), or a scalar or list (nothing).
    fn media(&mut self) -> Option<MediaValue<'a>> {
        let mut media = MediaValue::default();
        match self.peek()? {
            b'"' => media.url = Some(self.string()?),
            b'{' => self.object(|c, key| {
                let slot = match key {
                    "url" => &mut media.url,
                    "data" => &mut media.data,
                    "format" => &mut media.format,
                    _ => return c.skip(0),
                };
                *slot = match c.peek()? {
                    b'"' => Some(c.string()?),
                    // An object's own `url` would count here: left to the serde path.
                    b'{' | b'[' => return None,
                    _ => c.skip(0).map(|()| None)?,
                };
                Some(())
            })?,
            _ => self.skip(0)?,
        }
        Some(media)
    }
}

/// Stores a field's value; a repeated field is left to the serde path (it is an error there).
fn once<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    slot.is_none().then(|| *slot = Some(value))
}

/// The index of the first byte at or after `from` that ends a run of string text: `"`, `\`
/// or a control character (below 0x20); `bytes.len()` when there is none.
fn find_special(bytes: &[u8], from: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        find_special_sse2(bytes, from)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        find_special_bytes(bytes, from)
    }
}

fn is_special(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < 0x20
}

/// [`find_special`] a byte at a time.
fn find_special_bytes(bytes: &[u8], from: usize) -> usize {
    bytes.get(from..).and_then(|rest| rest.iter().position(|&b| is_special(b))).map_or(bytes.len(), |i| from + i)
}

/// [`find_special`] 16 bytes at a time (SSE2, part of every x86-64 CPU), the tail a byte at a
/// time. `"` (0x22) and the control characters are one test: flipping bit 1 maps exactly them
/// onto `0x00..=0x20`. (A 64-byte stride after the first 64 bytes took 2,300 instructions off a
/// 10 KB body of long strings and added 7,500 to one of short chat turns: not kept.)
#[cfg(target_arch = "x86_64")]
fn find_special_sse2(bytes: &[u8], from: usize) -> usize {
    use std::arch::x86_64::{
        _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8, _mm_xor_si128,
    };
    let mut at = from;
    // SAFETY: SSE2 is in the x86-64 baseline; each load reads bytes[at..at + 16], in bounds by
    // the loop condition, and `loadu` allows any alignment.
    unsafe {
        let (flip, limit, backslash) = (_mm_set1_epi8(0x02), _mm_set1_epi8(0x20), _mm_set1_epi8(b'\\' as i8));
        while at + 16 <= bytes.len() {
            let v = _mm_loadu_si128(bytes.as_ptr().add(at).cast());
            // `min(x, 0x20) == x` is `x <= 0x20`, unsigned.
            let x = _mm_xor_si128(v, flip);
            let hits = _mm_or_si128(_mm_cmpeq_epi8(_mm_min_epu8(x, limit), x), _mm_cmpeq_epi8(v, backslash));
            let mask = _mm_movemask_epi8(hits) as u32;
            if mask != 0 {
                return at + mask.trailing_zeros() as usize;
            }
            at += 16;
        }
    }
    find_special_bytes(bytes, at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Both scans find the same byte.
        #[test]
        fn vector_and_byte_scans_agree(bytes in proptest::collection::vec(prop_oneof![Just(b'"'), Just(b'\\'), Just(0x1Fu8), Just(0x20u8), Just(0x80u8), Just(0xFFu8), any::<u8>(), Just(b'a'), Just(b'a'), Just(b'a'), Just(b'a')], 0..300), from in 0usize..310) {
            prop_assert_eq!(find_special(&bytes, from.min(bytes.len())), find_special_bytes(&bytes, from.min(bytes.len())));
        }
    }

    /// Every byte value is classified as the byte loop classifies it.
    #[test]
    fn vector_scan_classifies_every_byte() {
        for b in 0..=u8::MAX {
            let mut bytes = [b'a'; 32];
            bytes[5] = b;
            let want = if is_special(b) { 5 } else { 32 };
            assert_eq!((find_special(&bytes, 0), find_special_bytes(&bytes, 0)), (want, want), "byte {b:#04x}");
        }
    }

    /// Long runs: one special byte (or none) anywhere in up to 300 plain bytes, from any start.
    #[test]
    fn vector_scan_finds_the_byte_after_long_runs() {
        for len in [0, 15, 16, 17, 63, 64, 65, 100, 128, 200, 300] {
            for special in [None, Some(b'"'), Some(b'\\'), Some(0x1F), Some(0)] {
                for pos in 0..len.max(1) {
                    let mut bytes = vec![0xC3u8; len];
                    if let (Some(b), true) = (special, pos < len) {
                        bytes[pos] = b;
                    }
                    for from in [0, 1, 7, 16, 33, 70].into_iter().filter(|f| *f <= len) {
                        assert_eq!(find_special(&bytes, from), find_special_bytes(&bytes, from), "{len} {pos} {from}");
                    }
                }
            }
        }
    }
}
