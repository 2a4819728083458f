//! What each benchmark request sends: Envoy's ext_proc message sequence for an OpenAI
//! `/v1/chat/completions` request (headers with `protocol_config`, then the body in chunks
//! with `end_of_stream` on the last one), over a rotating set of chat bodies that share
//! their beginning in groups (the system prompt of a plain body, the first half of the turns
//! of a multi-turn one), so prefix-aware scoring sees realistic reuse.

use crate::bench::synthetic::{chat_body, chat_turns_body};
use epp::proto::envoy::config::core::v3::{HeaderMap, HeaderValue};
use epp::proto::ext_proc::processing_request::Request;
use epp::proto::ext_proc::{HttpBody, HttpHeaders, ProcessingRequest, ProtocolConfiguration};

use super::args::{BodyMode, BodyShape};

/// Prefix groups (distinct system prompts) in the body set.
pub const GROUPS: u32 = 8;

/// Pre-built message sequences with their body lengths, handed out round robin.
#[derive(Debug)]
pub struct Workload {
    sequences: Vec<(Vec<ProcessingRequest>, usize)>,
}

impl Workload {
    /// Bodies of `shape` and about `body_size` bytes (fewer distinct bodies for large sizes,
    /// to bound memory), cut into `chunk_size` messages.
    pub fn new(mode: BodyMode, shape: BodyShape, body_size: usize, chunk_size: usize) -> Self {
        let distinct: u32 = if body_size >= 500_000 { 16 } else { 64 };
        let make = match shape {
            BodyShape::Plain => chat_body,
            BodyShape::Turns => chat_turns_body,
        };
        let sequences = (0..distinct)
            .map(|i| {
                let body = make(body_size, i % GROUPS, i);
                (sequence(mode, &body, chunk_size), body.len())
            })
            .collect();
        Self { sequences }
    }

    /// The messages of request number `n` and its body length.
    pub fn messages(&self, n: u64) -> (Vec<ProcessingRequest>, usize) {
        self.sequences[(n % self.sequences.len() as u64) as usize].clone()
    }

    /// Mean body bytes per request.
    pub fn body_bytes(&self) -> usize {
        self.sequences.iter().map(|s| s.1).sum::<usize>() / self.sequences.len().max(1)
    }
}

/// Headers then body chunks, as Envoy sends them in `mode` (buffered: one body message).
pub fn sequence(mode: BodyMode, body: &[u8], chunk_size: usize) -> Vec<ProcessingRequest> {
    let length = body.len().to_string();
    let mut out = vec![headers(mode, &length)];
    let chunk = if mode == BodyMode::Buffered { body.len().max(1) } else { chunk_size.max(1) };
    let pieces: Vec<&[u8]> = body.chunks(chunk).collect();
    for (i, piece) in pieces.iter().enumerate() {
        out.push(ProcessingRequest {
            request: Some(Request::RequestBody(HttpBody {
                body: piece.to_vec(),
                end_of_stream: i + 1 == pieces.len(),
            })),
            ..Default::default()
        });
    }
    out
}

fn headers(mode: BodyMode, content_length: &str) -> ProcessingRequest {
    let pairs = [
        (":method", "POST"),
        (":path", "/v1/chat/completions"),
        (":authority", "bench.local"),
        ("content-type", "application/json"),
        ("content-length", content_length),
    ];
    let map = HeaderMap {
        headers: pairs
            .iter()
            .map(|(k, v)| HeaderValue { key: k.to_string(), value: String::new(), raw_value: v.as_bytes().to_vec() })
            .collect(),
    };
    ProcessingRequest {
        request: Some(Request::RequestHeaders(HttpHeaders {
            headers: Some(map),
            end_of_stream: false,
            ..Default::default()
        })),
        protocol_config: Some(ProtocolConfiguration {
            request_body_mode: mode.wire(),
            // Response bodies are not streamed through the EPP in this benchmark (G4).
            response_body_mode: 0,
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_duplex_chunks_end_once_and_rebuild_the_body() {
        let body = chat_body(10_000, 1, 1);
        let msgs = sequence(BodyMode::FullDuplex, &body, 4_000);
        assert_eq!(msgs.len(), 1 + body.len().div_ceil(4_000));
        let mut rebuilt = Vec::new();
        for (i, m) in msgs.iter().skip(1).enumerate() {
            let Some(Request::RequestBody(b)) = &m.request else { panic!("body message expected") };
            assert_eq!(b.end_of_stream, i + 2 == msgs.len());
            rebuilt.extend_from_slice(&b.body);
        }
        assert_eq!(rebuilt, body);
        assert_eq!(msgs[0].protocol_config.as_ref().map(|p| p.request_body_mode), Some(4));
    }

    #[test]
    fn buffered_sends_one_body_message() {
        let w = Workload::new(BodyMode::Buffered, BodyShape::Plain, 1_000, 100);
        let (msgs, len) = w.messages(3);
        assert_eq!(msgs.len(), 2);
        let Some(Request::RequestBody(b)) = &msgs[1].request else { panic!("body message expected") };
        assert_eq!(b.body.len(), len);
        assert!((900..=1_100).contains(&w.body_bytes()), "{}", w.body_bytes());
        assert_eq!(msgs[0].protocol_config.as_ref().map(|p| p.request_body_mode), Some(2));
    }

    #[test]
    fn turns_bodies_are_many_escaped_turns_that_epp_parses() {
        use epp::request::openai::{ApiKind, Prompt, parse_body};
        let w = Workload::new(BodyMode::Buffered, BodyShape::Turns, 10_000, 64_000);
        assert!((10_000..=10_600).contains(&w.body_bytes()), "{}", w.body_bytes());
        let body = |n: u64| {
            let (msgs, _) = w.messages(n);
            let Some(Request::RequestBody(b)) = &msgs[1].request else { panic!("body message expected") };
            b.body.clone()
        };
        let text = String::from_utf8(body(0)).expect("utf-8");
        assert!(text.contains("\\\"") && text.contains("\\n") && !text.is_ascii(), "escapes and non-ASCII text");
        let parsed = parse_body(ApiKind::ChatCompletions, &body(0)).expect("epp parses it");
        let Prompt::Chat(chat) = parsed.prompt else { panic!("a chat prompt") };
        assert!(chat.messages.len() > 40 && chat.tools.is_some(), "{} messages", chat.messages.len());
        // Bodies of one group share their first turns; other groups' do not.
        let head = |n: u64| body(n)[..4_000].to_vec();
        assert_eq!(head(0), head(u64::from(GROUPS)));
        assert_ne!(head(0), head(1));
    }
}
