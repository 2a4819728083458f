//! Response bodies -> token [`Usage`], and the model-name restore applied to responses.
//!
//! Input: a buffered JSON response body ([`usage_from_json`]) or streamed SSE chunks
//! ([`SseUsageScanner`]). Output: [`Usage`] for metrics and usage reporting. Both the
//! Chat/Completions shape (`prompt_tokens`, `completion_tokens`,
//! `prompt_tokens_details.cached_tokens`) and the Responses shape (`input_tokens`,
//! `output_tokens`, `input_tokens_details.cached_tokens`) are understood.
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
}

impl UsageRepr {
    fn into_usage(self) -> Option<Usage> {
        let prompt = self.prompt_tokens.or(self.input_tokens);
        let completion = self.completion_tokens.or(self.output_tokens);
        if prompt.is_none() && completion.is_none() {
            return None;
        }
        let details = self.prompt_tokens_details.or(self.input_tokens_details);
        Some(Usage {
            prompt_tokens: prompt.unwrap_or(0),
            completion_tokens: completion.unwrap_or(0),
            cached_tokens: details.and_then(|d| d.cached_tokens),
        })
    }
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

/// Usage from one SSE `data:` payload: a non-null top-level `usage`, or `response.usage`
/// of a Responses API `response.completed` event.
fn usage_from_event(payload: &[u8]) -> Option<Usage> {
    // Most events carry no usage; skip them without parsing.
    if !contains(payload, b"\"usage\"") {
        return None;
    }
    let envelope: EnvelopeRepr = serde_json::from_slice(payload).ok()?;
    if let Some(usage) = envelope.usage {
        return usage.into_usage();
    }
    if envelope.kind.as_deref() == Some("response.completed") {
        return envelope.response?.usage?.into_usage();
    }
    None
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
        self.usage = usage_from_event(data);
    }

    /// The usage of the first event that reported one, if any so far.
    pub fn usage(&self) -> Option<Usage> {
        self.usage
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
