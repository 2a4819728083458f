//! In-process tokenizer benchmarks on the fixture tokenizers (`tests/fixtures/tokenizers`):
//! a ~100 KB completions prompt encoded on one core, and a follow-up chat turn that continues
//! from a cached prefix (template render + suffix encode). See `docs/benchmarks.md`.

use std::hint::black_box;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use epp::request::openai::{ApiKind, ChatPrompt, Prompt, parse_body};
use epp::tokenize::local::{CacheBounds, LocalModel};

/// The binaries' allocator, so figures match what `epp` does (see `epp::memory`).
#[global_allocator]
static ALLOCATOR: epp::memory::Allocator = epp::memory::Allocator;

fn model(family: &str) -> LocalModel {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizers").join(family);
    let bounds = CacheBounds { entries: NonZeroUsize::new(128).expect("non-zero"), bytes: 64 << 20 };
    LocalModel::load(&dir, bounds).expect("fixture loads")
}

/// ~100 KB of varied English-like text with code, numbers and some non-ASCII.
fn prompt_100k() -> String {
    let paragraphs = [
        "The endpoint picker routes each request to the pod that already holds most of its prefix in the KV cache. ",
        "def score(pod, blocks):\n    return sum(1 for b in blocks if b in pod.cache) / max(len(blocks), 1)\n\n",
        "Latency p50 was 12.5 ms, p99 was 48 ms at 1,024 requests per second across 16 replicas. ",
        "Grüße aus München — ça marche très bien; 日本語のテキスト and emoji 🙂 appear occasionally. ",
        "{\"model\": \"meta-llama/Llama-3.1-8B-Instruct\", \"max_tokens\": 256, \"temperature\": 0.7}\n",
    ];
    let mut text = String::with_capacity(110_000);
    let mut i = 0usize;
    while text.len() < 100_000 {
        text.push_str(paragraphs[i % paragraphs.len()]);
        // Vary the text so the word cache does not see one repeated string only.
        text.push_str(&format!("Section {} note {}. ", i, i * 7919 % 1000));
        i += 1;
    }
    text
}

/// A conversation whose history is ~100 KB; returns (previous turn, follow-up) bodies. No
/// system message: the Mistral-style template moves it into the last user turn, which would
/// make every turn diverge right after `[INST]` (the Llama-style one is unaffected).
fn conversation_bodies() -> (Vec<u8>, Vec<u8>) {
    let history = prompt_100k();
    let mut messages = vec![serde_json::json!({"role": "user", "content": history})];
    let previous = serde_json::to_vec(&serde_json::json!({"model": "m", "messages": messages})).expect("json");
    messages
        .push(serde_json::json!({"role": "assistant", "content": "Here is a short summary of the document you sent."}));
    messages.push(serde_json::json!({"role": "user", "content": "Thanks. Now list three open questions about it."}));
    let follow_up = serde_json::to_vec(&serde_json::json!({"model": "m", "messages": messages})).expect("json");
    (previous, follow_up)
}

/// The chat prompt of a body, as the request parser produces it (the stream parses once).
fn chat(body: &[u8]) -> Arc<ChatPrompt> {
    match parse_body(ApiKind::ChatCompletions, body).expect("valid chat body").prompt {
        Prompt::Chat(chat) => chat,
        _ => unreachable!("chat body"),
    }
}

fn bench(c: &mut Criterion) {
    let text = prompt_100k();
    let texts = vec![text.clone()];
    for family in ["llama3", "mistral"] {
        let m = model(family);
        c.bench_function(&format!("tokenize/{family}/completion_100kb"), |b| {
            b.iter(|| black_box(m.encode_texts(black_box(&texts)).expect("encodes")))
        });
        c.bench_function(&format!("tokenize/{family}/completion_100kb_cold"), |b| {
            // A freshly loaded model: empty word caches (HF's BPE cache and the direct
            // encoder's), as for the first prompt after startup.
            b.iter_batched_ref(
                || model(family),
                |fresh| black_box(fresh.encode_texts(black_box(&texts)).expect("encodes")),
                criterion::BatchSize::LargeInput,
            )
        });
        let (previous, follow_up) = conversation_bodies();
        let prev_view = chat(&previous);
        let view = chat(&follow_up);
        c.bench_function(&format!("tokenize/{family}/chat_100kb_uncached"), |b| {
            b.iter(|| {
                let text = m.render(black_box(&view)).expect("renders");
                black_box(m.encode_uncached(&text).expect("encodes"))
            })
        });
        c.bench_function(&format!("tokenize/{family}/chat_follow_up_cached"), |b| {
            // `_ref`: dropping the model (vocabulary maps) stays outside the timing.
            b.iter_batched_ref(
                || {
                    // Only the previous turn is cached (as after serving it).
                    let fresh = model(family);
                    fresh.encode_chat(&prev_view).expect("encodes");
                    fresh
                },
                |fresh| black_box(fresh.encode_chat(black_box(&view)).expect("encodes")),
                criterion::BatchSize::LargeInput,
            )
        });
        c.bench_function(&format!("tokenize/{family}/chat_render_only"), |b| {
            b.iter(|| black_box(m.render(black_box(&view)).expect("renders")))
        });
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30);
    targets = bench
}
criterion_main!(benches);
