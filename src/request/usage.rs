//! Response bodies -> token [`Usage`], and the model-name restore applied to responses.
//!
//! Input: a buffered JSON response body ([`usage_from_json`]) or streamed SSE chunks
//! ([`SseUsageScanner`]). Output: [`Usage`] for metrics and usage reporting. Both the
//! Chat/Completions shape (`prompt_tokens`, `completion_tokens`,
//! `prompt_tokens_details.cached_tokens`) and the Responses shape (`input_tokens`,
//! `output_tokens`, `input_tokens_details.cached_tokens`) are understood, and so is the
//! Anthropic Messages shape: `input_tokens` + `cache_read_input_tokens` +
//! `cache_creation_input_tokens` are the prompt tokens (the three are additive there, as
//! llm-d counts them), `cache_read_input_tokens` the cached ones; a stream reports the input
//! in `message_start` (`message.usage`) and the output in the final `message_delta`.
//!
//! Does not: buffer whole streams (the scanner keeps at most one partial line), or modify
//! bodies other than the `"model"` value in [`restore_model_name`].

use serde::Deserialize;

/// Token counts reported by the model server for one request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt (input) tokens.
    pub prompt_tokens: u64,
    /// Completion (output) tokens; 0 when not reported (embeddings).
    pub completion_tokens: u64,
    /// Prompt tokens served from the prefix cache, when reported.
    pub cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct UsageRepr {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<DetailsRepr>,
    #[serde(default)]
    input_tokens_details: Option<DetailsRepr>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct DetailsRepr {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct ResponseRepr {
    #[serde(default)]
    usage: Option<UsageRepr>,
}

/// A response object or SSE event: `usage` at the top, or inside `response` (Responses API).
#[derive(Deserialize)]
struct EnvelopeRepr {
    #[serde(default)]
    usage: Option<UsageRepr>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    response: Option<ResponseRepr>,
    /// Anthropic `message_start`: the message object, whose `usage` has the input counts.
    #[serde(default)]
    message: Option<ResponseRepr>,
}

impl UsageRepr {
    /// Prompt tokens: OpenAI `prompt_tokens`, else the sum of the reported input fields.
    fn prompt(&self) -> Option<u64> {
        if self.prompt_tokens.is_some() {
            return self.prompt_tokens;
        }
        let parts = [self.input_tokens, self.cache_read_input_tokens, self.cache_creation_input_tokens];
        parts.iter().any(Option::is_some).then(|| parts.iter().flatten().fold(0u64, |a, b| a.saturating_add(*b)))
    }

    fn cached(&self) -> Option<u64> {
        let details = self.prompt_tokens_details.as_ref().or(self.input_tokens_details.as_ref());
        details.and_then(|d| d.cached_tokens).or(self.cache_read_input_tokens)
    }

    fn into_usage(self) -> Option<Usage> {
        let prompt = self.prompt();
        let completion = self.completion_tokens.or(self.output_tokens);
        if prompt.is_none() && completion.is_none() {
            return None;
        }
        Some(Usage {
            prompt_tokens: prompt.unwrap_or(0),
            completion_tokens: completion.unwrap_or(0),
            cached_tokens: self.cached(),
        })
    }
}

/// What one SSE event says about usage.
enum EventUsage {
    /// Nothing.
    None,
    /// Anthropic `message_start`: the input counts; the output follows in `message_delta`.
    Start(Usage),
    /// The request's usage (an Anthropic `message_delta` is merged with the start first).
    Final(Usage),
    /// Anthropic `message_delta`: output tokens, and input counts when the server repeats them.
    Delta(UsageRepr),
}

/// Usage from a complete JSON response: top-level `usage`, else `response.usage`.
/// `None` when the body is not JSON or reports no usage.
pub fn usage_from_json(body: &[u8]) -> Option<Usage> {
    let envelope: EnvelopeRepr = serde_json::from_slice(body).ok()?;
    match envelope.usage {
        Some(usage) => usage.into_usage(),
        None => envelope.response?.usage?.into_usage(),
    }
}

/// Usage from one SSE `data:` payload: a non-null top-level `usage`, `response.usage` of a
/// Responses API `response.completed` event, or the Anthropic `message_start` /
/// `message_delta` pair.
fn usage_from_event(payload: &[u8]) -> EventUsage {
    // Most events carry no usage; skip them without parsing.
    if !contains(payload, b"\"usage\"") {
        return EventUsage::None;
    }
    let Ok(envelope) = serde_json::from_slice::<EnvelopeRepr>(payload) else { return EventUsage::None };
    let usage = match envelope.kind.as_deref() {
        Some("message_start") => {
            return envelope.message.and_then(|m| m.usage?.into_usage()).map_or(EventUsage::None, EventUsage::Start);
        }
        Some("message_delta") => return envelope.usage.map_or(EventUsage::None, EventUsage::Delta),
        Some("response.completed") if envelope.usage.is_none() => envelope.response.and_then(|r| r.usage),
        _ => envelope.usage,
    };
    usage.and_then(UsageRepr::into_usage).map_or(EventUsage::None, EventUsage::Final)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    find(haystack, needle, 0).is_some()
}

fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    let first = *needle.first()?;
    let mut pos = from;
    while pos + needle.len() <= haystack.len() {
        let offset = haystack[pos..=haystack.len() - needle.len()].iter().position(|&b| b == first)?;
        pos += offset;
        if haystack[pos..].starts_with(needle) {
            return Some(pos);
        }
        pos += 1;
    }
    None
}

/// Longest partial SSE line kept across chunks; a longer line is dropped.
pub const MAX_PARTIAL_LINE: usize = 4 << 20;

/// Incremental scanner of an SSE response stream for the first event reporting usage.
///
/// Each `data:` line is treated as one JSON payload (OpenAI-compatible servers send one-line
/// events); `[DONE]` and non-JSON payloads are ignored. Lines may be split across chunks.
/// Memory is bounded by [`MAX_PARTIAL_LINE`]. Not thread-safe; one per response stream.
#[derive(Debug, Default)]
pub struct SseUsageScanner {
    partial: Vec<u8>,
    /// Set while skipping the remainder of an over-long line.
    discarding: bool,
    usage: Option<Usage>,
    /// Input counts of an Anthropic `message_start`, until its `message_delta` arrives.
    started: Option<Usage>,
}

impl SseUsageScanner {
    /// A scanner that has seen nothing yet.
    pub fn new() -> SseUsageScanner {
        SseUsageScanner::default()
    }

    /// Feeds the next chunk of the response body.
    pub fn feed(&mut self, chunk: &[u8]) {
        if self.usage.is_some() {
            return;
        }
        let mut rest = chunk;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            let (line, tail) = (&rest[..nl], &rest[nl + 1..]);
            rest = tail;
            if self.discarding {
                self.discarding = false;
                continue;
            }
            if self.partial.is_empty() {
                self.line(line);
            } else {
                let mut joined = std::mem::take(&mut self.partial);
                joined.extend_from_slice(line);
                self.line(&joined);
                joined.clear();
                self.partial = joined; // keep the allocation for the next split line
            }
            if self.usage.is_some() {
                self.partial = Vec::new();
                return;
            }
        }
        if self.discarding {
            return;
        }
        if self.partial.len() + rest.len() > MAX_PARTIAL_LINE {
            self.partial = Vec::new();
            self.discarding = true;
        } else {
            self.partial.extend_from_slice(rest);
        }
    }

    fn line(&mut self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(data) = line.strip_prefix(b"data:") else {
            return;
        };
        let data = data.strip_prefix(b" ").unwrap_or(data);
        if data == b"[DONE]" {
            return;
        }
        match usage_from_event(data) {
            EventUsage::None => {}
            EventUsage::Start(start) => self.started = Some(start),
            EventUsage::Final(usage) => self.usage = Some(usage),
            EventUsage::Delta(delta) => {
                let start = self.started.unwrap_or_default();
                self.usage = Some(Usage {
                    prompt_tokens: delta.prompt().unwrap_or(start.prompt_tokens),
                    completion_tokens: delta.completion_tokens.or(delta.output_tokens).unwrap_or(0),
                    cached_tokens: delta.cached().or(start.cached_tokens),
                });
            }
        }
    }

    /// The usage of the first event that reported one, if any so far; for an Anthropic
    /// stream cut before its `message_delta`, the input counts of `message_start`.
    pub fn usage(&self) -> Option<Usage> {
        self.usage.or(self.started)
    }
}

/// Rewrites `"model":"<target>"` to `"model":"<incoming>"` in a response chunk (or, if that
/// form is absent, `"model": "<target>"` with one space), so clients see the model name they
/// asked for. Both names are JSON-escaped before matching. `None` when the names are equal
/// or nothing matched.
pub fn restore_model_name(chunk: &[u8], target: &str, incoming: &str) -> Option<Vec<u8>> {
    if target == incoming {
        return None;
    }
    let target_json = serde_json::to_string(target).ok()?;
    let incoming_json = serde_json::to_string(incoming).ok()?;
    for separator in [":", ": "] {
        let needle = format!("\"model\"{separator}{target_json}");
        if let Some(first) = find(chunk, needle.as_bytes(), 0) {
            let replacement = format!("\"model\"{separator}{incoming_json}");
            return Some(replace_all(chunk, needle.as_bytes(), replacement.as_bytes(), first));
        }
    }
    None
}

fn replace_all(haystack: &[u8], needle: &[u8], replacement: &[u8], first: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(haystack.len() + replacement.len());
    let mut cursor = 0;
    let mut next = Some(first);
    while let Some(pos) = next {
        out.extend_from_slice(&haystack[cursor..pos]);
        out.extend_from_slice(replacement);
        cursor = pos + needle.len();
        next = find(haystack, needle, cursor);
    }
    out.extend_from_slice(&haystack[cursor..]);
    out
}

#[cfg(test)]
mod tests;
