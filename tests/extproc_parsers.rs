//! Request parsers end to end: a real gRPC ext_proc stream to a real epp configured with
//! `vllmgrpc-parser`, `sglanghttp-parser`, `vertexai-parser`, `anthropic-parser` or
//! `vllmhttp-parser`. Prompts (token ids, or chat converted from Anthropic Messages) reach the
//! scheduler (requests sharing a long token prefix follow the first pick, and the prefix
//! producer records hits); malformed gRPC bodies are answered with a gRPC status.

mod common;

use common::*;
use epp::proto::ext_proc::processing_response::Response;
use epp::proto::google::api::HttpBody;
use epp::proto::google::cloud::aiplatform::v1beta1::ChatCompletionsRequest;
use epp::proto::vllm::grpc::engine::{GenerateRequest, SamplingParams, TokenizedInput, generate_request};
use epp::request::parsers::frame;
use prost::Message;

const GENERATE: &str = "/vllm.grpc.engine.VllmEngine/Generate";
const VERTEX_CHAT: &str = "/google.cloud.aiplatform.v1beta1.PredictionService/ChatCompletions";
const GRPC: (&str, &str) = ("content-type", "application/grpc");

/// Queue, KV and prefix scorers (the default weights) with `parser` as the only request
/// parser, named from `requestHandler.parsers` (llm-d) or `parser` (GIE).
fn config(parser_type: &str, gie_style: bool) -> String {
    let selection = if gie_style {
        "parser: {pluginRef: the-parser}".to_string()
    } else {
        "requestHandler: {parsers: [{pluginRef: the-parser}]}".to_string()
    };
    format!(
        "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n\
         - type: kv-cache-utilization-scorer\n- type: prefix-cache-scorer\n- name: the-parser\n  type: {parser_type}\n\
         schedulingProfiles:\n- name: default\n  plugins:\n  - {{pluginRef: queue-scorer, weight: 2}}\n\
         \x20 - {{pluginRef: kv-cache-utilization-scorer, weight: 2}}\n  - {{pluginRef: prefix-cache-scorer, weight: 3}}\n\
         {selection}\n"
    )
}

async fn three_idle_pods(first_ip: u8, parser_type: &str, gie_style: bool) -> ([FakeVllm; 3], TestEpp) {
    let pods = [
        FakeVllm::start([127, 0, 0, first_ip], 0, 0, 0.1).await,
        FakeVllm::start([127, 0, 0, first_ip + 1], 0, 0, 0.1).await,
        FakeVllm::start([127, 0, 0, first_ip + 2], 0, 0, 0.1).await,
    ];
    let eps = endpoints_yaml(&[("a", pods[0].addr, &[]), ("b", pods[1].addr, &[]), ("c", pods[2].addr, &[])]);
    let epp = TestEpp::start(&eps, Some(&config(parser_type, gie_style)), |_| {}).await;
    epp.wait_waiting(&[("a", 0), ("b", 0), ("c", 0)]).await;
    (pods, epp)
}

/// Sends each body on its own stream (full duplex) and returns the destinations and the
/// bodies echoed upstream.
async fn route_all(epp: &TestEpp, path: &str, extra: &[(&str, &str)], bodies: &[Vec<u8>]) -> Vec<(String, Vec<u8>)> {
    let mut client = epp.client().await;
    let mut out = Vec::new();
    for body in bodies {
        let mut ex = Exchange::open(&mut client).await;
        ex.send(request_headers(path, extra, false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
        ex.send(request_body(body, true)).await;
        let headers = ex.next().await;
        let destination =
            set_header(&headers, "x-gateway-destination-endpoint").unwrap_or_else(|| panic!("routed, got {headers:?}"));
        let mut echoed = Vec::new();
        for _ in 0..body.len().div_ceil(62_000).max(1) {
            echoed.extend(streamed(&ex.next().await).expect("body chunk").0);
        }
        out.push((destination, echoed));
    }
    out
}

/// The prefix producer's hit-ratio histogram (sum, count) from epp's metrics endpoint.
async fn prefix_hit_ratio(epp: &TestEpp) -> (f64, u64) {
    let text = scrape(epp.app.metrics_addr).await;
    let value = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name) && l.contains("plugin_name=\"approx-prefix-cache-producer\""))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (
        value("inference_extension_prefix_indexer_hit_ratio_sum{"),
        value("inference_extension_prefix_indexer_hit_ratio_count{") as u64,
    )
}

fn assert_prefix_followed(routed: &[(String, Vec<u8>)]) {
    let first = &routed[0].0;
    assert!(routed.iter().all(|(d, _)| d == first), "all follow the cached token prefix: {routed:?}");
}

/// Four requests sharing a prefix all went to one endpoint, the prefix producer saw the prompt
/// of every one, and the last three hit the cached prefix.
async fn assert_followed_the_cached_prefix(epp: &TestEpp, routed: &[(String, Vec<u8>)]) {
    assert_prefix_followed(routed);
    let (sum, count) = prefix_hit_ratio(epp).await;
    assert_eq!(count, 4, "every request reached the prefix producer with prompt data");
    assert!(sum > 2.5, "the last three requests hit the cached prefix: sum {sum}");
}

/// Each body reached the pod byte for byte.
fn assert_forwarded_unchanged(routed: &[(String, Vec<u8>)], bodies: &[Vec<u8>]) {
    for ((_, echoed), body) in routed.iter().zip(bodies) {
        assert_eq!(echoed, body, "body forwarded as sent");
    }
}

fn generate(ids: Vec<u32>) -> Vec<u8> {
    let request = GenerateRequest {
        request_id: "r".into(),
        input: Some(generate_request::Input::Tokenized(TokenizedInput {
            original_text: String::new(),
            input_ids: ids,
        })),
        sampling_params: Some(SamplingParams { max_tokens: Some(16) }),
        stream: true,
    };
    frame(&request.encode_to_vec())
}

/// Four prompts sharing 2048 tokens, each with its own tail.
fn shared_prefix_prompts() -> Vec<Vec<u32>> {
    let prefix: Vec<u32> = (0..2048).map(|i| 1000 + i % 5000).collect();
    (0..4u32).map(|q| prefix.iter().copied().chain([90_000 + q, 90_100 + q]).collect()).collect()
}

#[tokio::test]
async fn vllmgrpc_token_ids_drive_prefix_routing_and_the_body_is_forwarded_unchanged() {
    let (_pods, epp) = three_idle_pods(40, "vllmgrpc-parser", false).await;
    let bodies: Vec<_> = shared_prefix_prompts().into_iter().map(generate).collect();
    // The rewrite header names a target model; the protobuf body is still forwarded as is.
    let routed = route_all(&epp, GENERATE, &[GRPC, ("x-gateway-model-name-rewrite", "served")], &bodies).await;
    assert_followed_the_cached_prefix(&epp, &routed).await;
    assert_forwarded_unchanged(&routed, &bodies);
}

#[tokio::test]
async fn vllmgrpc_compressed_frame_is_answered_with_a_grpc_status() {
    let (_pods, epp) = three_idle_pods(43, "vllmgrpc-parser", true).await;
    let mut body = generate(vec![1, 2, 3]);
    body[0] = 1;
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers(GENERATE, &[GRPC], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(&body, true)).await;
    let reply = ex.next().await;
    let Some(Response::ImmediateResponse(r)) = &reply.response else { panic!("immediate response, got {reply:?}") };
    assert_eq!(r.grpc_status.as_ref().map(|s| s.status), Some(3), "INVALID_ARGUMENT");
    assert_eq!(r.status.as_ref().map(|s| s.code), Some(400));
    let header = |k: &str| {
        let set = &r.headers.as_ref().expect("headers").set_headers;
        set.iter()
            .filter_map(|h| h.header.as_ref())
            .find(|h| h.key == k)
            .map(|h| String::from_utf8_lossy(&h.raw_value).into_owned())
    };
    assert_eq!(header("grpc-status").as_deref(), Some("3"));
    assert_eq!(header("content-type").as_deref(), Some("application/grpc"));
    assert!(header("grpc-message").is_some_and(|m| m.contains("compressed gRPC payload is not supported")));
    assert!(ex.close_and_expect_end().await);
}

#[tokio::test]
async fn sglang_generate_input_ids_drive_prefix_routing() {
    let (_pods, epp) = three_idle_pods(46, "sglanghttp-parser", false).await;
    let bodies: Vec<_> = shared_prefix_prompts()
        .into_iter()
        .map(|ids| {
            serde_json::to_vec(&serde_json::json!({
                "input_ids": ids, "sampling_params": {"max_new_tokens": 8}, "stream": false,
            }))
            .unwrap()
        })
        .collect();
    let routed = route_all(&epp, "/generate", &[], &bodies).await;
    assert_followed_the_cached_prefix(&epp, &routed).await;
    // A path the parser claims but SGLang does not serve is a 400 with the parser's message.
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v2/generate", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(b"{\"input_ids\":[1]}", true)).await;
    let (status, text) = immediate(&ex.next().await).expect("immediate");
    assert_eq!(status, 400);
    assert!(text.contains("unsupported path"), "{text}");
}

#[tokio::test]
async fn vertexai_chat_completions_are_unwrapped_and_routed_by_prefix() {
    let (_pods, epp) = three_idle_pods(49, "vertexai-parser", true).await;
    let system = "You are a careful assistant. ".repeat(200);
    let bodies: Vec<_> = ["first", "second", "third", "fourth"]
        .iter()
        .map(|q| {
            let json = serde_json::to_vec(&serde_json::json!({
                "model": "gemma",
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": q}],
            }))
            .unwrap();
            let request = ChatCompletionsRequest {
                endpoint: "projects/p/locations/l/endpoints/e".into(),
                http_body: Some(HttpBody { content_type: "application/json".into(), data: json }),
            };
            frame(&request.encode_to_vec())
        })
        .collect();
    let routed = route_all(&epp, VERTEX_CHAT, &[GRPC], &bodies).await;
    assert_followed_the_cached_prefix(&epp, &routed).await;
    assert_forwarded_unchanged(&routed, &bodies);
}

/// epp with the vLLM render tokenizer at `render`, prefix scoring, and `parser` as the only
/// request parser, routing to the one pod at `pod`.
async fn start_with_render_tokenizer(pod: std::net::SocketAddr, render: std::net::SocketAddr, parser: &str) -> TestEpp {
    let cfg = format!(
        "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n\
         - type: token-producer\n  parameters: {{modelName: m, vllm: {{url: \"http://{render}\", timeout: 5s}}}}\n\
         - type: queue-scorer\n- type: prefix-cache-scorer\n- {{name: parser, type: {parser}}}\n\
         schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n  - pluginRef: prefix-cache-scorer\n\
         requestHandler: {{parsers: [{{pluginRef: parser}}]}}\n"
    );
    TestEpp::start(&endpoints_yaml(&[("a", pod, &[])]), Some(&cfg), |_| {}).await
}

/// A vLLM render server: answers `{"token_ids": ids}` and forwards each (path, body) seen.
async fn render_server(
    ids: Vec<u32>,
) -> (std::net::SocketAddr, tokio::sync::mpsc::UnboundedReceiver<(String, Vec<u8>)>) {
    use http_body_util::BodyExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let answer = bytes::Bytes::from(serde_json::to_vec(&serde_json::json!({ "token_ids": ids })).unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let (tx, answer) = (tx.clone(), answer.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let (tx, answer) = (tx.clone(), answer.clone());
                    async move {
                        let path = req.uri().path().to_string();
                        let body = req.into_body().collect().await.map(|b| b.to_bytes().to_vec()).unwrap_or_default();
                        let _ = tx.send((path, body));
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(http_body_util::Full::new(answer)))
                    }
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, svc).await;
            });
        }
    });
    (addr, rx)
}

#[tokio::test]
async fn vllmgrpc_text_prompt_is_rendered_from_synthesized_json() {
    let pod = FakeVllm::start([127, 0, 0, 52], 0, 0, 0.1).await;
    let (render, mut seen) = render_server((0..300).collect()).await;
    let epp = start_with_render_tokenizer(pod.addr, render, "vllmgrpc-parser").await;
    epp.wait_waiting(&[("a", 0)]).await;
    let request = GenerateRequest {
        request_id: "t".into(),
        input: Some(generate_request::Input::Text("hello from grpc".into())),
        sampling_params: None,
        stream: false,
    };
    let body = frame(&request.encode_to_vec());
    let routed = route_all(&epp, GENERATE, &[GRPC], &[body]).await;
    assert_eq!(routed[0].0, pod.addr.to_string());
    let (path, json) = tokio::time::timeout(WAIT, seen.recv()).await.expect("render called").expect("one call");
    assert_eq!(path, "/v1/completions/render");
    let json: serde_json::Value = serde_json::from_slice(&json).expect("the tokenizer got JSON, not protobuf");
    assert_eq!(json["prompt"], "hello from grpc");
    assert_eq!(json["model"], "m");
    let (_, count) = prefix_hit_ratio(&epp).await;
    assert_eq!(count, 1, "the rendered tokens reached the prefix producer");
}

/// An Anthropic Messages body with a shared system prompt and its own question.
fn anthropic_body(system: &str, question: &str, stream: bool) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "model": "claude-local",
        "max_tokens": 64,
        "stream": stream,
        "system": [{"type": "text", "text": system}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": question}]}],
    }))
    .unwrap()
}

#[tokio::test]
async fn anthropic_messages_with_a_shared_system_prompt_follow_the_prefix() {
    let (_pods, epp) = three_idle_pods(55, "anthropic-parser", false).await;
    let system = "You are a meticulous assistant for a shipping company. ".repeat(120);
    let bodies: Vec<_> =
        ["first", "second", "third", "fourth"].iter().map(|q| anthropic_body(&system, q, false)).collect();
    let routed = route_all(&epp, "/v1/messages", &[], &bodies).await;
    assert_followed_the_cached_prefix(&epp, &routed).await;
    assert_forwarded_unchanged(&routed, &bodies);

    // count_tokens is routed but records no prefix (it does no inference).
    let count_body = br#"{"model":"claude-local","messages":[{"role":"user","content":"how long?"}]}"#.to_vec();
    let routed = route_all(&epp, "/v1/messages/count_tokens", &[], &[count_body]).await;
    assert_eq!(routed.len(), 1);
    assert_eq!(prefix_hit_ratio(&epp).await.1, 4, "count_tokens did not feed the prefix index");

    // Validation failures are 400s with the parser's message.
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v1/messages", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(br#"{"model":"claude-local","messages":[]}"#, true)).await;
    let (status, text) = immediate(&ex.next().await).expect("immediate");
    assert_eq!(status, 400);
    assert!(text.contains("must have at least one message"), "{text}");
}

#[tokio::test]
async fn anthropic_streaming_usage_is_counted() {
    let pod = FakeVllm::start([127, 0, 0, 61], 0, 0, 0.1).await;
    let epp =
        TestEpp::start(&endpoints_yaml(&[("a", pod.addr, &[])]), Some(&config("anthropic-parser", true)), |_| {}).await;
    epp.wait_waiting(&[("a", 0)]).await;
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v1/messages", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(&anthropic_body("Be brief.", "hi", true), true)).await;
    ex.take(2).await;
    ex.send(response_headers("200", "text/event-stream")).await;
    ex.next().await;
    let start = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m1\",\"usage\":{\"input_tokens\":25,\"output_tokens\":1,\"cache_read_input_tokens\":5}}}\n\n";
    let delta = b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n\
event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    ex.send(response_body(start, false)).await;
    assert_eq!(streamed(&ex.next().await), Some((start.to_vec(), false)));
    ex.send(response_body(delta, true)).await;
    assert_eq!(streamed(&ex.next().await), Some((delta.to_vec(), true)));
    drop(ex);
    let text = scrape(epp.app.metrics_addr).await;
    let labels = "{model_name=\"claude-local\",target_model_name=\"claude-local\"}";
    for (metric, value) in [
        ("inference_objective_input_tokens_sum", 30),
        ("inference_objective_output_tokens_sum", 15),
        ("inference_objective_prompt_cached_tokens_sum", 5),
    ] {
        let line = format!("{metric}{labels} {value}");
        assert!(text.contains(&line), "missing {line} in\n{text}");
    }
}

#[tokio::test]
async fn anthropic_messages_are_rendered_as_chat_for_the_vllm_tokenizer() {
    let pod = FakeVllm::start([127, 0, 0, 62], 0, 0, 0.1).await;
    let (render, mut seen) = render_server((0..300).collect()).await;
    let epp = start_with_render_tokenizer(pod.addr, render, "anthropic-parser").await;
    epp.wait_waiting(&[("a", 0)]).await;
    let body = anthropic_body("Answer in French.", "Bonjour?", false);
    let routed = route_all(&epp, "/v1/messages", &[], std::slice::from_ref(&body)).await;
    assert_eq!(routed[0], (pod.addr.to_string(), body), "routed, Anthropic body forwarded as sent");
    let (path, json) = tokio::time::timeout(WAIT, seen.recv()).await.expect("render called").expect("one call");
    assert_eq!(path, "/v1/chat/completions/render");
    let json: serde_json::Value = serde_json::from_slice(&json).expect("chat JSON");
    assert_eq!(
        json["messages"],
        serde_json::json!([{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "Bonjour?"}])
    );
    assert_eq!(json["model"], "m");
    assert_eq!(prefix_hit_ratio(&epp).await.1, 1, "the rendered tokens reached the prefix producer");
}

#[tokio::test]
async fn vllmhttp_generate_token_ids_drive_prefix_routing() {
    let (_pods, epp) = three_idle_pods(58, "vllmhttp-parser", false).await;
    let bodies: Vec<_> = shared_prefix_prompts()
        .into_iter()
        .map(|ids| {
            serde_json::to_vec(&serde_json::json!({
                "token_ids": ids, "sampling_params": {"max_tokens": 8}, "stream": false, "model": "m",
            }))
            .unwrap()
        })
        .collect();
    let routed = route_all(&epp, "/inference/v1/generate", &[], &bodies).await;
    assert_followed_the_cached_prefix(&epp, &routed).await;
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/inference/v1/generate", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(br#"{"token_ids":[]}"#, true)).await;
    let (status, text) = immediate(&ex.next().await).expect("immediate");
    assert_eq!(status, 400);
    assert!(text.contains("non-empty token_ids"), "{text}");
}
