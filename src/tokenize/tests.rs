//! Tokenizer tests: fixture equality against the reference Python `tokenizers` + `jinja2`
//! outputs (`tests/fixtures/tokenizers/`), prefix-cache correctness, the vLLM render backend
//! against a fake HTTP server on loopback, and the deadline paths.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::net::TcpListener;

use super::local::{CacheBounds, CacheUse, LocalBackend, LocalModel};
use super::metrics::{BackendLabel, Outcome, TokenizeMetrics};
use super::pool::BlockingPool;
use super::render_client::RenderClient;
use super::{Backend, Deadlines, Tokenizer};
use crate::request::openai::{ApiKind, ChatPrompt, Prompt, parse_body};

#[derive(Deserialize)]
struct Case {
    name: String,
    api: String,
    body: Box<RawValue>,
    rendered: Option<String>,
    ids: Option<Vec<u32>>,
    error: Option<String>,
}

fn fixture_dir(family: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizers").join(family)
}

fn bounds() -> CacheBounds {
    CacheBounds { entries: NonZeroUsize::new(64).expect("non-zero"), bytes: 16 << 20 }
}

/// The chat prompt of a chat completions body, as the request parser produces it.
fn chat(body: &[u8]) -> Arc<ChatPrompt> {
    match parse_body(ApiKind::ChatCompletions, body).expect("valid chat body").prompt {
        Prompt::Chat(chat) => chat,
        other => panic!("not chat: {other:?}"),
    }
}

fn load(family: &str) -> (LocalModel, Vec<Case>) {
    let dir = fixture_dir(family);
    let model = LocalModel::load(&dir, bounds()).expect("fixture model loads");
    let cases = std::fs::read_to_string(dir.join("cases.json")).expect("cases");
    (model, serde_json::from_str(&cases).expect("cases parse"))
}

/// Every case, on a fresh model (no cache) and on one shared cached model, equals Python.
fn check_family(family: &str) {
    let (cached, cases) = load(family);
    for case in &cases {
        let body = case.body.get().as_bytes();
        let fresh = LocalModel::load(&fixture_dir(family), bounds()).expect("loads");
        match case.api.as_str() {
            "completions" => {
                let parsed = parse_body(ApiKind::Completions, body).expect("valid body");
                let Prompt::Texts(texts) = parsed.prompt else { panic!("{}: text prompt", case.name) };
                assert_eq!(fresh.encode_texts(&texts).ok(), case.ids, "{family}/{}", case.name);
            }
            _ => {
                let view = chat(body);
                if case.error.is_some() {
                    assert!(fresh.render(&view).is_err(), "{family}/{}: template must raise", case.name);
                    continue;
                }
                let rendered = fresh.render(&view).unwrap_or_else(|e| panic!("{family}/{}: {e:?}", case.name));
                assert_eq!(Some(&rendered), case.rendered.as_ref(), "{family}/{}: rendered text", case.name);
                let (ids, _) = fresh.encode_chat(&view).expect("encodes");
                assert_eq!(Some(ids.to_vec()), case.ids, "{family}/{}: uncached ids", case.name);
                let (ids, _) = cached.encode_chat(&view).expect("encodes");
                assert_eq!(Some(ids.to_vec()), case.ids, "{family}/{}: ids through the shared cache", case.name);
            }
        }
    }
}

#[test]
fn llama3_fixtures_match_reference() {
    check_family("llama3");
}

#[test]
fn mistral_fixtures_match_reference() {
    check_family("mistral");
}

#[test]
fn follow_up_turns_hit_the_cache_and_match_uncached_ids() {
    for family in ["llama3", "mistral"] {
        let (model, cases) = load(family);
        let turns: Vec<&Case> = cases.iter().filter(|c| c.name.starts_with("chat_multi_turn_")).collect();
        assert!(turns.len() >= 3);
        for (i, case) in turns.iter().enumerate() {
            let view = chat(case.body.get().as_bytes());
            let (ids, used) = model.encode_chat(&view).expect("encodes");
            assert_eq!(Some(ids.to_vec()), case.ids, "{family}/{}", case.name);
            let expected = if i == 0 { CacheUse::Miss } else { CacheUse::Hit };
            assert_eq!(used, expected, "{family}/{}", case.name);
        }
        // Llama-style prompts grow by appending, so the conversation keeps one entry; the
        // Mistral-style template moves the system text into the last user turn, so earlier
        // prompts are not prefixes of later ones (hits still come from the shared start).
        let expected_entries = if family == "llama3" { 1 } else { turns.len() };
        assert_eq!(model.cached_prompts(), expected_entries, "{family}");
    }
}

fn reference_ids(family: &str, text: &str) -> Vec<u32> {
    let tok = tokenizers::Tokenizer::from_file(fixture_dir(family).join("tokenizer.json")).expect("tokenizer");
    tok.encode(text, false).expect("encodes").get_ids().to_vec()
}

const PIECES: [&str; 16] = [
    "<|eot_id|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "user",
    " ",
    "\n\n",
    "hello",
    "日本",
    "🙂",
    "[INST]",
    "[/INST]",
    "<s>",
    "  ",
    "'s",
    "12345",
    "</s>",
];

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
    #[test]
    fn cached_continuation_equals_full_encoding(
        first in proptest::collection::vec(0..PIECES.len(), 1..12),
        second in proptest::collection::vec(0..PIECES.len(), 0..12),
        keep in 0usize..12,
    ) {
        for family in ["llama3", "mistral"] {
            let model = LocalModel::load(&fixture_dir(family), bounds()).expect("loads");
            let a: String = first.iter().map(|&i| PIECES[i]).collect();
            // The follow-up shares the first `keep` pieces, then continues differently.
            let b: String = first.iter().take(keep).chain(second.iter()).map(|&i| PIECES[i]).collect();
            let c = format!("{a}{b}");
            for text in [&a, &b, &c] {
                let (ids, _) = model.encode_cached(text.clone()).expect("encodes");
                proptest::prop_assert_eq!(ids.to_vec(), reference_ids(family, text), "{} {:?}", family, text);
            }
        }
    }
}

#[test]
fn straddling_added_token_makes_a_cut_unsafe() {
    let model = LocalModel::load(&fixture_dir("mistral"), bounds()).expect("loads");
    assert!(model.is_safe_cut("x[INST]y", 7));
    assert!(!model.is_safe_cut("x[/INST]y", 3), "inside [/INST]");
    assert!(model.is_safe_cut("", 0));
}

fn local_tokenizer(workers: usize, timeout: Duration) -> Tokenizer {
    let models = [("m".to_string(), fixture_dir("llama3"))].into_iter().collect();
    let backend = LocalBackend::load(&models, None, bounds()).expect("loads");
    let pool = BlockingPool::new(NonZeroUsize::new(workers).expect("non-zero"));
    Tokenizer::new(
        Backend::Local { models: Arc::new(backend), pool },
        Deadlines { text: timeout, multimodal: timeout },
        TokenizeMetrics::default(),
    )
}

fn parsed(api: ApiKind, body: &str) -> (crate::request::openai::ParsedBody, Bytes) {
    (parse_body(api, body.as_bytes()).expect("valid"), Bytes::copy_from_slice(body.as_bytes()))
}

#[tokio::test]
async fn local_backend_tokenizes_passes_ids_through_and_counts_misses() {
    let t = local_tokenizer(2, Duration::from_secs(5));
    let (body, raw) =
        parsed(ApiKind::ChatCompletions, r#"{"model":"m","messages":[{"role":"user","content":"Hello there!"}]}"#);
    let ids = t.tokenize("m", &body, raw).await.expect("tokens");
    let (_, cases) = load("llama3");
    let expected = cases.iter().find(|c| c.name == "chat_single_user").and_then(|c| c.ids.clone());
    assert_eq!(Some(ids.to_vec()), expected);
    let (body, raw) = parsed(ApiKind::Completions, r#"{"model":"m","prompt":[[1,2],[3]]}"#);
    assert_eq!(t.tokenize("m", &body, raw).await.as_deref(), Some(&[1, 2, 3][..]));
    let (body, raw) = parsed(ApiKind::Completions, r#"{"model":"other","prompt":"x"}"#);
    assert!(t.tokenize("other", &body, raw).await.is_none());
    let (body, raw) = parsed(ApiKind::Responses, r#"{"model":"m","input":"x"}"#);
    assert!(t.tokenize("m", &body, raw).await.is_none());
    // vLLM rejects continue_final_message together with add_generation_prompt (default true).
    let (body, raw) = parsed(
        ApiKind::ChatCompletions,
        r#"{"model":"m","continue_final_message":true,"messages":[{"role":"user","content":"Hi"}]}"#,
    );
    assert!(t.tokenize("m", &body, raw).await.is_none());
    let m = t.metrics();
    assert_eq!(m.count(BackendLabel::Local, Outcome::Ok), 1);
    assert_eq!(m.count(BackendLabel::Local, Outcome::Passthrough), 1);
    assert_eq!(m.count(BackendLabel::Local, Outcome::UnknownModel), 1);
    assert_eq!(m.count(BackendLabel::Local, Outcome::Unsupported), 2);
}

#[tokio::test(start_paused = true)]
async fn saturated_pool_times_out_and_counts_the_miss() {
    let t = local_tokenizer(1, Duration::from_millis(50));
    let Backend::Local { pool, .. } = &t.backend else { panic!("local") };
    let held = pool.saturate().await;
    let (body, raw) = parsed(ApiKind::Completions, r#"{"model":"m","prompt":"hello"}"#);
    assert!(t.tokenize("m", &body, raw).await.is_none());
    assert_eq!(t.metrics().count(BackendLabel::Local, Outcome::Timeout), 1);
    drop(held);
    let (body, raw) = parsed(ApiKind::Completions, r#"{"model":"m","prompt":"hello"}"#);
    assert!(t.tokenize("m", &body, raw).await.is_some(), "pool usable again");
}

/// A fake vLLM render server: answers the two render paths, checking the model name.
async fn fake_render_server(hang: bool) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| async move {
                    if hang {
                        std::future::pending::<()>().await;
                    }
                    let path = req.uri().path().to_string();
                    let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                    let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                    let answer = match (path.as_str(), json["model"].as_str()) {
                        (_, m) if m != Some("served-model") => (400, "{}".to_string()),
                        ("/v1/completions/render", _) => {
                            (200, r#"[{"token_ids":[1,2]},{"token_ids":[3]}]"#.to_string())
                        }
                        ("/v1/chat/completions/render", _) => {
                            let n = json["messages"].as_array().map_or(0, Vec::len);
                            let text = String::from_utf8_lossy(&body);
                            let features = if text.contains("image_url") {
                                r#"{"mm_hashes":{"image":["abc"]},"mm_placeholders":{"image":[{"offset":1,"length":16}]}}"#
                            } else if text.contains("odd-features") {
                                r#"{"mm_hashes":7}"#
                            } else {
                                "null"
                            };
                            (200, format!(r#"{{"token_ids":[7,8,{n}],"features":{features}}}"#))
                        }
                        _ => (404, String::new()),
                    };
                    let mut resp = hyper::Response::new(Full::new(Bytes::from(answer.1)));
                    *resp.status_mut() = hyper::StatusCode::from_u16(answer.0).unwrap_or_default();
                    Ok::<_, Infallible>(resp)
                });
                let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    });
    addr
}

fn vllm_tokenizer(addr: SocketAddr, model: &str, timeout: Duration) -> Tokenizer {
    let client = RenderClient::new(&format!("http://{addr}"), model, timeout);
    Tokenizer::new(
        Backend::Vllm(Box::new(client)),
        Deadlines { text: timeout, multimodal: timeout * 2 },
        TokenizeMetrics::default(),
    )
}

#[tokio::test]
async fn vllm_backend_uses_the_render_endpoints() {
    let addr = fake_render_server(false).await;
    let t = vllm_tokenizer(addr, "served-model", Duration::from_secs(10));
    let (body, raw) = parsed(ApiKind::Completions, r#"{"model":"client-name","prompt":["a","b"]}"#);
    assert_eq!(t.tokenize("client-name", &body, raw).await.as_deref(), Some(&[1, 2, 3][..]));
    let (body, raw) = parsed(
        ApiKind::ChatCompletions,
        r#"{"model":"x","messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}"#,
    );
    assert_eq!(t.tokenize("x", &body, raw).await.as_deref(), Some(&[7, 8, 2][..]));
    let (body, raw) = parsed(ApiKind::Embeddings, r#"{"model":"x","input":"a"}"#);
    assert!(t.tokenize("x", &body, raw).await.is_none());
    let wrong = vllm_tokenizer(addr, "not-served", Duration::from_secs(10));
    let (body, raw) = parsed(ApiKind::Completions, r#"{"model":"x","prompt":"a"}"#);
    assert!(wrong.tokenize("x", &body, raw).await.is_none(), "HTTP 400 is a miss");
    assert_eq!(t.metrics().count(BackendLabel::Vllm, Outcome::Ok), 2);
    assert_eq!(t.metrics().count(BackendLabel::Vllm, Outcome::Unsupported), 1);
    assert_eq!(wrong.metrics().count(BackendLabel::Vllm, Outcome::Error), 1);
}

#[tokio::test]
async fn vllm_backend_reports_multimodal_items() {
    use crate::request::multimodal::{Modality, part_key};
    let addr = fake_render_server(false).await;
    let t = vllm_tokenizer(addr, "served-model", Duration::from_secs(10));
    let (body, raw) = parsed(
        ApiKind::ChatCompletions,
        r#"{"model":"x","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://i/a.png"}}]}]}"#,
    );
    let out = t.tokenize_full("x", &body, raw).await.expect("rendered");
    assert_eq!(&*out.ids, &[7, 8, 1]);
    let media = out.media.expect("features reported");
    assert_eq!(media.len(), 1);
    assert_eq!((media[0].key, media[0].modality, media[0].size), (part_key("vllm", "abc"), Modality::Image, 16));
    let (body, raw) =
        parsed(ApiKind::ChatCompletions, r#"{"model":"x","messages":[{"role":"user","content":"odd-features"}]}"#);
    let out = t.tokenize_full("x", &body, raw).await.expect("ids survive malformed features");
    assert_eq!((&*out.ids, out.media), (&[7, 8, 1][..], None));
}

#[tokio::test(start_paused = true)]
async fn vllm_backend_deadline_is_a_counted_miss() {
    let addr = fake_render_server(true).await;
    let t = vllm_tokenizer(addr, "served-model", Duration::from_millis(100));
    let (body, raw) = parsed(ApiKind::Completions, r#"{"model":"x","prompt":"a"}"#);
    assert!(t.tokenize("x", &body, raw).await.is_none());
    assert_eq!(t.metrics().count(BackendLabel::Vllm, Outcome::Timeout), 1);
}

/// An Anthropic Messages body renders through the chat template exactly like the OpenAI
/// chat body vLLM converts it to (system first, tool call, tool result, tools).
#[test]
fn anthropic_messages_render_like_their_chat_conversion() {
    use crate::request::parsers::{ParserKind, ParserSet};
    let anthropic = br#"{"model":"fixture-model","max_tokens":32,
        "system":[{"type":"text","text":"You help travellers."}],
        "tools":[{"name":"get_weather","description":"Current weather.","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}],
        "messages":[{"role":"user","content":"Weather in Paris?"},
          {"role":"assistant","content":[{"type":"tool_use","id":"c1","name":"get_weather","input":{"city":"Paris"}}]},
          {"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":"Sunny"}]},
          {"role":"user","content":[{"type":"text","text":"Thanks!"}]}]}"#;
    let openai = br#"{"model":"fixture-model",
        "tools":[{"type":"function","function":{"name":"get_weather","description":"Current weather.","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],
        "messages":[{"role":"system","content":"You help travellers."},{"role":"user","content":"Weather in Paris?"},
          {"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},
          {"role":"tool","tool_call_id":"c1","content":"Sunny"},{"role":"user","content":"Thanks!"}]}"#;
    let parsed =
        ParserSet::new([ParserKind::Anthropic]).parse("/v1/messages", anthropic).expect("valid").expect("parsed");
    let Prompt::Chat(converted) = parsed.body.prompt else { panic!("chat prompt") };
    let (model, _) = load("llama3");
    let want = model.render(&chat(openai)).expect("renders");
    assert_eq!(model.render(&converted).expect("renders"), want);
    assert!(want.contains("Sunny") && want.contains("You help travellers."));
}
