use proptest::prelude::*;
use prost::Message;

use super::*;
use crate::proto::google::api::HttpBody;
use crate::proto::google::cloud::aiplatform::v1beta1::{ChatCompletionsRequest, RawPredictRequest};
use crate::proto::vllm::grpc::engine::{
    EmbedRequest, GenerateRequest, SamplingParams, TokenizedInput, generate_request::Input,
};
use crate::request::openai::{EmbeddingsInput, Prompt, ResponsesInput};

const GENERATE: &str = "/vllm.grpc.engine.VllmEngine/Generate";
const EMBED: &str = "/vllm.grpc.engine.VllmEngine/Embed";
const VERTEX_CHAT: &str = "/google.cloud.aiplatform.v1beta1.PredictionService/ChatCompletions";

fn only(kind: ParserKind) -> ParserSet {
    ParserSet::new([kind])
}

fn tokenized(ids: &[u32]) -> Option<Input> {
    Some(Input::Tokenized(TokenizedInput { original_text: "ignored".into(), input_ids: ids.to_vec() }))
}

fn generate_body(input: Option<Input>, stream: bool, max_tokens: Option<u32>) -> Vec<u8> {
    let request = GenerateRequest {
        request_id: "r1".into(),
        input,
        sampling_params: Some(SamplingParams { max_tokens }),
        stream,
    };
    frame(&request.encode_to_vec())
}

fn parsed(set: &ParserSet, path: &str, body: &[u8]) -> Parsed {
    set.parse(path, body).expect("parses").expect("not skipped")
}

fn error(set: &ParserSet, path: &str, body: &[u8]) -> String {
    set.parse(path, body).expect_err("rejected").to_string()
}

#[test]
fn resolution_prefers_the_longest_claim_then_the_fallback() {
    let set = ParserSet::new([ParserKind::OpenAi, ParserKind::SglangHttp, ParserKind::VllmGrpc]);
    assert_eq!(set.resolve("/v1/chat/completions?x=1"), Some(ParserKind::OpenAi));
    assert_eq!(set.resolve("/generate/"), Some(ParserKind::SglangHttp));
    assert_eq!(set.resolve(GENERATE), Some(ParserKind::VllmGrpc));
    assert_eq!(set.resolve("/v1/models"), None, "no claim and no fallback: not parsed");
    let with_fallback = ParserSet::new([ParserKind::SglangHttp, ParserKind::Passthrough, ParserKind::OpenAi]);
    assert_eq!(with_fallback.resolve("/v1/completions"), Some(ParserKind::Passthrough), "parsers after it unused");
    assert_eq!(with_fallback.kinds().collect::<Vec<_>>(), vec![ParserKind::SglangHttp, ParserKind::Passthrough]);
    // vllmhttp and sglanghttp both claim `generate`: equal length, the earlier one wins.
    let tie = ParserSet::new([ParserKind::VllmHttp, ParserKind::SglangHttp]);
    assert_eq!(tie.resolve("/generate"), Some(ParserKind::VllmHttp));
    assert_eq!(ParserSet::new([ParserKind::OpenAi, ParserKind::OpenAi]).kinds().count(), 1, "duplicates dropped");
    assert_eq!(ParserSet::default(), only(ParserKind::OpenAi));
}

#[test]
fn openai_rules_apply_on_openai_paths_only() {
    let set = ParserSet::default();
    let p = parsed(&set, "/v1/completions", br#"{"model":"m","prompt":[1,2,3]}"#);
    assert_eq!(p.body.prompt, Prompt::TokenIds(vec![vec![1, 2, 3]]));
    assert!(p.rewritable && p.tokenize_json.is_none());
    assert!(error(&set, "/v1/chat/completions", br#"{"model":"m"}"#).contains("at least one message"));
    assert!(set.parse("/v1/models", b"not json").unwrap().is_none());
    assert!(only(ParserKind::Passthrough).parse("/v1/completions", b"not json").unwrap().is_none());
    let vllm_http = only(ParserKind::VllmHttp);
    assert_eq!(parsed(&vllm_http, "/v1/completions", br#"{"model":"m","prompt":"hi"}"#).body.model, "m");
    assert!(vllm_http.parse("/generate", b"{}").unwrap().is_none(), "SGLang's path is claimed, not parsed");
}

#[test]
fn vllm_http_generate_reads_token_ids_and_sampling() {
    let set = only(ParserKind::VllmHttp);
    let body = br#"{"token_ids":[5,6.0,7],"sampling_params":{"max_tokens":12,"temperature":0},"stream":true,"cache_salt":"s","model":"m","request_id":"r"}"#;
    let p = parsed(&set, "/inference/v1/generate?x=1", body);
    assert_eq!(p.body.prompt, Prompt::TokenIds(vec![vec![5, 6, 7]]));
    assert_eq!(p.body.api, ApiKind::Completions);
    assert_eq!(p.body.max_output_tokens, Some(12));
    assert!(p.body.stream);
    assert_eq!(p.body.cache_salt.as_deref(), Some("s"));
    assert_eq!(p.body.model, "m");
    assert!(p.rewritable && p.tokenize_json.is_none());
    let bare = parsed(&set, "/inference/v1/generate/", br#"{"token_ids":[1],"sampling_params":{"max_tokens":-1}}"#);
    assert_eq!((bare.body.model.as_str(), bare.body.max_output_tokens, bare.rewritable), ("", None, false));
    for (body, want) in [
        (&br#"{}"#[..], "must have non-empty token_ids"),
        (br#"{"token_ids":[]}"#, "must have non-empty token_ids"),
        (br#"{"token_ids":[1,-2]}"#, "token_ids[1]: invalid value -2"),
        (br#"{"token_ids":[1.5]}"#, "token_ids[0]: invalid value 1.5"),
        (br#"{"token_ids":[4294967296]}"#, "token_ids[0]"),
        (br#"{"token_ids":"abc"}"#, "token_ids must be an array"),
        (br#"{"token_ids":[1],"cache_salt":3}"#, "cache_salt must be a string"),
        (b"[1]", "must be a JSON object"),
        (b"{", "invalid request body"),
    ] {
        let got = error(&set, "/inference/v1/generate", body);
        assert!(got.contains(want), "{}: {got}", String::from_utf8_lossy(body));
    }
}

#[test]
fn vllm_grpc_generate_with_token_ids() {
    let set = only(ParserKind::VllmGrpc);
    let p = parsed(&set, GENERATE, &generate_body(tokenized(&[7, 8, 9]), true, Some(64)));
    assert_eq!(p.body.prompt, Prompt::TokenIds(vec![vec![7, 8, 9]]));
    assert_eq!(p.body.api, ApiKind::Completions);
    assert!(p.body.stream);
    assert_eq!(p.body.max_output_tokens, Some(64));
    assert_eq!(p.body.model, "", "the gRPC API carries no model");
    assert!(!p.rewritable && p.tokenize_json.is_none());
}

#[test]
fn vllm_grpc_generate_with_text_offers_json_to_a_rendering_tokenizer() {
    let set = only(ParserKind::VllmGrpc);
    let p = parsed(&set, GENERATE, &generate_body(Some(Input::Text("hello".into())), false, None));
    assert_eq!(p.body.prompt, Prompt::Texts(vec!["hello".into()]));
    assert!(!p.body.stream);
    assert_eq!(p.body.max_output_tokens, None);
    let json: serde_json::Value = serde_json::from_slice(&p.tokenize_json.unwrap()).unwrap();
    assert_eq!(json["prompt"], "hello");
}

#[test]
fn vllm_grpc_embed_needs_tokenized_input() {
    let set = only(ParserKind::VllmGrpc);
    let body = frame(
        &EmbedRequest {
            request_id: "e".into(),
            tokenized: Some(TokenizedInput { original_text: String::new(), input_ids: vec![4, 5] }),
        }
        .encode_to_vec(),
    );
    let p = parsed(&set, EMBED, &body);
    assert_eq!(p.body.prompt, Prompt::Embeddings(EmbeddingsInput::TokenIds(vec![vec![4, 5]])));
    assert_eq!(p.body.api, ApiKind::Embeddings);
    let missing = frame(&EmbedRequest { request_id: "e".into(), tokenized: None }.encode_to_vec());
    assert!(error(&set, EMBED, &missing).contains("missing tokenized input"));
}

#[test]
fn vllm_grpc_rejects_bad_frames_and_messages_and_skips_other_methods() {
    let set = only(ParserKind::VllmGrpc);
    let mut compressed = generate_body(tokenized(&[1]), false, None);
    compressed[0] = 1;
    assert_eq!(error(&set, GENERATE, &compressed), "compressed gRPC payload is not supported");
    assert!(error(&set, GENERATE, &[0, 0]).contains("invalid gRPC frame"));
    assert!(error(&set, GENERATE, &frame(&[0xff, 0xff])).starts_with("invalid GenerateRequest"));
    assert!(error(&set, GENERATE, &generate_body(None, false, None)).contains("neither tokenized nor text"));
    assert!(set.parse("/vllm.grpc.engine.VllmEngine/HealthCheck", b"").unwrap().is_none());
}

#[test]
fn sglang_generate_reads_ids_batches_text_and_sampling() {
    let set = only(ParserKind::SglangHttp);
    let body = br#"{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":32,"temperature":0},"stream":true,"extra_key":"tenant-a","rid":"x"}"#;
    let p = parsed(&set, "/generate", body);
    assert_eq!(p.body.prompt, Prompt::TokenIds(vec![vec![1, 2, 3]]));
    assert_eq!(p.body.max_output_tokens, Some(32));
    assert!(p.body.stream);
    assert_eq!(p.body.cache_salt.as_deref(), Some("tenant-a"));
    assert!(!p.rewritable);
    let batch = parsed(&set, "/generate?x=1", br#"{"input_ids":[[1,2],[3]]}"#);
    assert_eq!(batch.body.prompt, Prompt::TokenIds(vec![vec![1, 2], vec![3]]));
    let text = parsed(&set, "/generate", br#"{"text":["a","b"],"sampling_params":{"max_new_tokens":-1}}"#);
    assert_eq!(text.body.prompt, Prompt::Texts(vec!["a".into(), "b".into()]));
    assert_eq!(text.body.max_output_tokens, None, "negative cap ignored");
    assert!(text.tokenize_json.is_some());
    let both = parsed(&set, "/generate", br#"{"text":"t","input_ids":[5]}"#);
    assert_eq!(both.body.prompt, Prompt::TokenIds(vec![vec![5]]), "input_ids win");
}

#[test]
fn sglang_generate_rejections() {
    let set = only(ParserKind::SglangHttp);
    for (body, want) in [
        (&br#"{}"#[..], "input_ids or text must be provided"),
        (br#"{"input_ids":[]}"#, "input_ids cannot be empty"),
        (br#"{"input_ids":[[1],[]]}"#, "input_ids cannot be empty"),
        (br#"{"input_ids":[-1]}"#, "arrays of uint32"),
        (br#"{"input_ids":"abc"}"#, "arrays of uint32"),
        (br#"{"text":""}"#, "text cannot be empty"),
        (br#"{"text":7}"#, "text must be a string"),
        (br#"{"input_ids":[1],"image_data":"http://x/a.png"}"#, "multimodal"),
        (br#"{"input_ids":[1],"extra_key":5}"#, "extra_key must be a string"),
        (b"[1]", "must be a JSON object"),
        (b"{", "invalid request body"),
    ] {
        let got = error(&set, "/generate", body);
        assert!(got.contains(want), "{}: {got}", String::from_utf8_lossy(body));
    }
    let empty_media = br#"{"input_ids":[1],"image_data":[],"video_data":null,"audio_data":""}"#;
    assert!(set.parse("/generate", empty_media).is_ok());
    assert!(error(&set, "/v1/generate", br#"{"input_ids":[1]}"#).contains("unsupported path"));
}

fn vertex_chat(json: &[u8]) -> Vec<u8> {
    let request = ChatCompletionsRequest {
        endpoint: "projects/p/locations/l/endpoints/e".into(),
        http_body: Some(HttpBody { content_type: "application/json".into(), data: json.to_vec() }),
    };
    frame(&request.encode_to_vec())
}

#[test]
fn vertex_chat_completions_unwraps_openai_json_with_optional_model() {
    let set = only(ParserKind::VertexAi);
    let p =
        parsed(&set, VERTEX_CHAT, &vertex_chat(br#"{"messages":[{"role":"user","content":"Hello"}],"stream":true}"#));
    assert_eq!(p.body.api, ApiKind::ChatCompletions);
    assert!(matches!(&p.body.prompt, Prompt::Chat(c) if c.messages.len() == 1));
    assert!(p.body.stream);
    assert_eq!(p.body.model, "");
    assert!(!p.rewritable);
    let json: serde_json::Value = serde_json::from_slice(&p.tokenize_json.unwrap()).unwrap();
    assert_eq!(json["model"], "", "a model key for the rendering tokenizer to replace");
    assert_eq!(json["messages"][0]["content"], "Hello");
    let named =
        parsed(&set, VERTEX_CHAT, &vertex_chat(br#"{"model":"gemma","messages":[{"role":"user","content":"x"}]}"#));
    assert_eq!(named.body.model, "gemma");
    assert!(error(&set, VERTEX_CHAT, &vertex_chat(br#"{"messages":[]}"#)).contains("at least one message"));
}

#[test]
fn vertex_raw_predict_is_a_responses_body_and_errors_are_clear() {
    let set = only(ParserKind::VertexAi);
    let raw = RawPredictRequest {
        endpoint: String::new(),
        http_body: Some(HttpBody {
            content_type: String::new(),
            data: br#"{"input":"Hello from raw predict"}"#.to_vec(),
        }),
    };
    let p = parsed(&set, "/google.cloud.aiplatform.v1beta1.PredictionService/RawPredict", &frame(&raw.encode_to_vec()));
    assert!(
        matches!(&p.body.prompt, Prompt::Responses(r) if r.input == ResponsesInput::Text("Hello from raw predict".into()))
    );
    let stream_path = "/google.cloud.aiplatform.v1.PredictionService/StreamRawPredict";
    assert_eq!(parsed(&set, stream_path, &frame(&raw.encode_to_vec())).body.api, ApiKind::Responses);
    assert!(error(&set, VERTEX_CHAT, &[0, 0, 0, 0]).contains("invalid gRPC frame"));
    assert!(error(&set, VERTEX_CHAT, &[0, 0, 0, 0, 1, 0xff]).contains("invalid ChatCompletionsRequest"));
    let no_body = frame(&ChatCompletionsRequest { endpoint: "e".into(), http_body: None }.encode_to_vec());
    assert_eq!(error(&set, VERTEX_CHAT, &no_body), "ChatCompletionsRequest has no HttpBody");
    assert!(set.parse("/google.cloud.aiplatform.v1beta1.PredictionService/Predict", b"").unwrap().is_none());
}

proptest! {
    #[test]
    fn grpc_parsers_never_panic_on_random_bodies(body in proptest::collection::vec(any::<u8>(), 0..128)) {
        let set = ParserSet::new([ParserKind::VllmGrpc, ParserKind::VertexAi, ParserKind::SglangHttp]);
        for path in [GENERATE, EMBED, VERTEX_CHAT, "/google.cloud.aiplatform.v1beta1.PredictionService/RawPredict", "/generate"] {
            let _ = set.parse(path, &body);
        }
    }

    #[test]
    fn json_parsers_never_panic_on_random_bodies(body in proptest::collection::vec(any::<u8>(), 0..128)) {
        let set = ParserSet::new([ParserKind::Anthropic, ParserKind::VllmHttp]);
        for path in ["/v1/messages", "/v1/messages/count_tokens", "/inference/v1/generate"] {
            let _ = set.parse(path, &body);
        }
    }

    #[test]
    fn json_parsers_never_panic_on_random_json(value in arb_json()) {
        let set = ParserSet::new([ParserKind::Anthropic, ParserKind::VllmHttp]);
        let body = serde_json::to_vec(&value).unwrap();
        for path in ["/v1/messages", "/v1/messages/count_tokens", "/inference/v1/generate"] {
            let _ = set.parse(path, &body);
        }
    }

    #[test]
    fn framed_random_messages_never_panic(message in proptest::collection::vec(any::<u8>(), 0..128)) {
        let set = ParserSet::new([ParserKind::VllmGrpc, ParserKind::VertexAi]);
        for path in [GENERATE, EMBED, VERTEX_CHAT] {
            let _ = set.parse(path, &frame(&message));
        }
    }
}

/// Random JSON objects built from the keys the JSON parsers read, so the shape checks are
/// reached rather than only the syntax check.
fn arb_json() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let key = prop::sample::select(vec![
        "model",
        "system",
        "messages",
        "role",
        "content",
        "type",
        "text",
        "source",
        "url",
        "data",
        "input",
        "tool_use_id",
        "tools",
        "input_schema",
        "token_ids",
        "sampling_params",
        "max_tokens",
        "stream",
        "cache_salt",
        "chat_template_kwargs",
    ]);
    let word = prop::sample::select(vec![
        "user",
        "assistant",
        "system",
        "text",
        "image",
        "tool_use",
        "tool_result",
        "url",
        "m",
    ]);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        word.prop_map(Value::from),
        ".{0,8}".prop_map(Value::String),
    ];
    let value = leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..5)
                .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
        ]
    });
    prop::collection::vec(
        (prop::sample::select(vec!["model", "system", "messages", "tools", "token_ids", "stream"]), value),
        0..6,
    )
    .prop_map(|kv| serde_json::Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect()))
}
