//! Request bodies through each request parser (openai, anthropic, vllmgrpc, sglang,
//! vertexai, vllmhttp) on each path it claims.
//!
//! Input: `[parser selector][path selector][body...]`.
#![no_main]

use epp::request::parsers::{ParserKind, ParserSet};
use libfuzzer_sys::fuzz_target;

const KINDS: [ParserKind; 6] = [
    ParserKind::OpenAi,
    ParserKind::Anthropic,
    ParserKind::VllmGrpc,
    ParserKind::SglangHttp,
    ParserKind::VertexAi,
    ParserKind::VllmHttp,
];

fuzz_target!(|data: &[u8]| {
    let [kind, path, body @ ..] = data else { return };
    let kind = KINDS[usize::from(*kind) % KINDS.len()];
    let claims = kind.claims();
    let path = match claims.get(usize::from(*path) % claims.len().max(1)) {
        Some(suffix) => format!("/v1/{suffix}"),
        None => "/v1/chat/completions".to_string(),
    };
    let set = ParserSet::new([kind]);
    let _ = set.parse(&path, body);
});
