//! Hot-path parsers: request body parse, its UTF-8 check, estimate tokens, model rewrite, metrics
//! extraction.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use epp::endpoints::vllm_metrics::{builtin_engine, extract};
use epp::request::estimate::estimate_tokens;
use epp::request::openai::{ApiKind, parse_body, rewrite_model};

/// The binaries' allocator, so figures match what `epp` does (see `epp::memory`).
#[global_allocator]
static ALLOCATOR: epp::memory::Allocator = epp::memory::Allocator;

const VLLM_EXPOSITION: &str =
    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/metrics/vllm-0.33.0.txt"));

/// A realistic chat body of about `target` bytes: a system prompt, tools, then alternating
/// user/assistant turns (some multi-part) with escapes and non-ASCII text.
fn chat_body(target: usize) -> Vec<u8> {
    let sentence = "The quick brown fox \"jumps\" over the lazy dog; naïve café — 1234.\n";
    let mut messages = vec![serde_json::json!({"role": "system", "content": "You are a helpful assistant."})];
    let mut i = 0;
    loop {
        let body = serde_json::json!({
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "messages": messages,
            "tools": [{"type": "function", "function": {"name": "lookup",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}],
            "max_tokens": 256, "temperature": 0.7, "stream": true,
            "stream_options": {"include_usage": true},
        });
        let bytes = serde_json::to_vec(&body).expect("json");
        if bytes.len() >= target {
            return bytes;
        }
        let text = sentence.repeat(1 + i % 4);
        messages.push(if i % 3 == 2 {
            serde_json::json!({"role": "user", "content": [
                {"type": "text", "text": text},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]})
        } else {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            serde_json::json!({"role": role, "content": text})
        });
        i += 1;
    }
}

fn bench_parse(c: &mut Criterion) {
    let mut group = c.benchmark_group("parse_body_chat");
    for (label, size) in [("1KB", 1_000), ("10KB", 10_000), ("100KB", 100_000)] {
        let body = chat_body(size);
        group.bench_function(label, |b| {
            b.iter(|| parse_body(ApiKind::ChatCompletions, black_box(&body)).expect("valid"))
        });
    }
    group.finish();

    let body = chat_body(100_000);
    // Floor: serde_json validating and skipping the same body without building anything.
    c.bench_function("baseline_serde_ignored_any_100KB", |b| {
        b.iter(|| serde_json::from_slice::<serde::de::IgnoredAny>(black_box(&body)).expect("json"))
    });
    let parsed = parse_body(ApiKind::ChatCompletions, &body).expect("valid");
    c.bench_function("estimate_tokens_chat_100KB", |b| b.iter(|| estimate_tokens(black_box(&parsed.prompt))));
    c.bench_function("rewrite_model_chat_100KB", |b| {
        b.iter(|| rewrite_model(black_box(&body), "my-lora").expect("valid"))
    });
}

fn bench_metrics(c: &mut Criterion) {
    let mapping = builtin_engine("vllm").expect("builtin");
    c.bench_function("extract_vllm_0.33_exposition", |b| b.iter(|| extract(black_box(VLLM_EXPOSITION), &mapping)));
}

/// The body's UTF-8 check (`request::openai::body_text` uses `simdutf8`) against std's, on
/// ~10 KB of text in three scripts: std's `from_utf8` has a word-at-a-time path for ASCII only.
fn bench_utf8(c: &mut Criterion) {
    let texts = [
        ("ascii", "The quick brown fox jumps over the lazy dog and routes requests.\n".repeat(160)),
        ("latin_accents", "Résumé of the incident: a naïve retry loop and timeouts of a café queue.\n".repeat(140)),
        ("japanese", "東京の天気は晴れです。明日は雨が降るかもしれません。".repeat(140)),
    ];
    let mut group = c.benchmark_group("utf8_check_10KB");
    for (label, text) in &texts {
        let bytes = text.as_bytes();
        group.bench_function(format!("std/{label}"), |b| b.iter(|| std::str::from_utf8(black_box(bytes)).is_ok()));
        group.bench_function(format!("simdutf8/{label}"), |b| {
            b.iter(|| simdutf8::basic::from_utf8(black_box(bytes)).is_ok())
        });
    }
    group.finish();
}

criterion_group!(benches, bench_parse, bench_metrics, bench_utf8);
criterion_main!(benches);
