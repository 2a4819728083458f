//! ext_proc request path end to end: a real gRPC stream to a real epp on loopback, with real
//! HTTP `/metrics` servers for the endpoints, replaying Envoy's message sequences.

mod common;

use common::*;

async fn two_pods() -> (FakeVllm, FakeVllm, TestEpp) {
    let busy = FakeVllm::start([127, 0, 0, 2], 10, 4, 0.9).await;
    let idle = FakeVllm::start([127, 0, 0, 3], 0, 1, 0.1).await;
    let eps = endpoints_yaml(&[("busy", busy.addr, &[]), ("idle", idle.addr, &[])]);
    let epp = TestEpp::start(&eps, None, |_| {}).await;
    epp.wait_waiting(&[("busy", 10), ("idle", 0)]).await;
    (busy, idle, epp)
}

#[tokio::test]
async fn full_duplex_defers_headers_then_echoes_the_body_in_chunks() {
    let (_busy, idle, epp) = two_pods().await;
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    let body = chat("m", &"long prompt ".repeat(13_000), true);
    assert!(body.len() > 124_000);
    ex.send(request_headers(
        "/v1/chat/completions",
        &[("content-length", &body.len().to_string())],
        false,
        Some((FULL_DUPLEX, FULL_DUPLEX)),
    ))
    .await;
    let (a, rest) = body.split_at(65_536);
    let (b, c) = rest.split_at(40_000);
    ex.send(request_body(a, false)).await;
    ex.send(request_body(b, false)).await;
    ex.send(request_body(c, true)).await;
    let first = ex.next().await;
    assert!(is_request_headers(&first), "headers reply comes first");
    let dest = set_header(&first, "x-gateway-destination-endpoint").expect("destination header");
    assert_eq!(dest, idle.addr.to_string(), "least loaded endpoint chosen");
    assert_eq!(metadata_destination(&first).as_deref(), Some(dest.as_str()), "header and metadata agree");
    assert!(common(&first).unwrap().clear_route_cache);
    assert_eq!(set_header(&first, "content-length"), Some(body.len().to_string()));
    assert!(set_header(&first, "x-request-id").is_some_and(|v| v.len() == 36), "request id generated");
    let mut echoed = Vec::new();
    let n = body.len().div_ceil(62_000);
    for (i, r) in ex.take(n).await.iter().enumerate() {
        let (chunk, eos) = streamed(r).expect("streamed chunk");
        assert!(chunk.len() <= 62_000);
        assert_eq!(eos, i + 1 == n);
        echoed.extend(chunk);
    }
    assert_eq!(echoed, body, "body echoed byte for byte");
}

#[tokio::test]
async fn buffered_mode_answers_headers_at_once_and_routes_in_the_body_reply() {
    let (_busy, idle, epp) = two_pods().await;
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v1/completions", &[], false, Some((BUFFERED, NONE)))).await;
    let first = ex.next().await;
    assert!(is_request_headers(&first));
    assert!(set_header(&first, "x-gateway-destination-endpoint").is_none());
    let body = serde_json::to_vec(&serde_json::json!({"model": "m", "prompt": "hello"})).unwrap();
    ex.send(request_body(&body, true)).await;
    let reply = ex.next().await;
    assert!(matches!(reply.response, Some(epp::proto::ext_proc::processing_response::Response::RequestBody(_))));
    assert_eq!(set_header(&reply, "x-gateway-destination-endpoint"), Some(idle.addr.to_string()));
    assert_eq!(metadata_destination(&reply), Some(idle.addr.to_string()));
    assert!(common(&reply).unwrap().clear_route_cache);
    assert!(streamed(&reply).is_none() && replaced_body(&reply).is_none(), "body not echoed in buffered mode");
}

#[tokio::test]
async fn default_mode_flag_applies_without_protocol_config() {
    let idle = FakeVllm::start([127, 0, 0, 4], 0, 0, 0.0).await;
    let eps = endpoints_yaml(&[("idle", idle.addr, &[])]);
    let epp = TestEpp::start(&eps, None, |s| s.extproc.default_buffered = true).await;
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v1/completions", &[], false, None)).await;
    assert!(is_request_headers(&ex.next().await), "buffered default answers headers at once");
}

#[tokio::test]
async fn body_less_request_gets_a_destination_at_once() {
    let (_busy, _idle, epp) = two_pods().await;
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v1/models", &[], true, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    let r = ex.next().await;
    assert!(is_request_headers(&r));
    let dest = set_header(&r, "x-gateway-destination-endpoint").expect("destination");
    assert_eq!(metadata_destination(&r), Some(dest));
    assert!(set_header(&r, "content-length").is_none());
}

#[tokio::test]
async fn request_trailers_end_the_body_and_get_their_reply() {
    let (_busy, _idle, epp) = two_pods().await;
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    let body = chat("m", "hi", false);
    ex.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(&body, false)).await;
    ex.send(request_trailers()).await;
    let replies = ex.take(3).await;
    assert!(is_request_headers(&replies[0]));
    assert_eq!(streamed(&replies[1]), Some((body, false)), "no end of stream on the body before trailers");
    assert!(is_request_trailers(&replies[2]));
}

#[tokio::test]
async fn duplicate_end_of_stream_is_ignored() {
    let (_busy, _idle, epp) = two_pods().await;
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    let body = chat("m", "hi", false);
    ex.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(&body, true)).await;
    ex.send(request_body(b"garbage", true)).await;
    ex.send(response_headers("200", "application/json")).await;
    let replies = ex.take(3).await;
    assert!(is_request_headers(&replies[0]));
    assert!(streamed(&replies[1]).is_some());
    assert!(
        matches!(replies[2].response, Some(epp::proto::ext_proc::processing_response::Response::ResponseHeaders(_))),
        "the duplicate got no reply and was not scheduled again"
    );
}

#[tokio::test]
async fn subset_hint_restricts_candidates_and_an_empty_hint_is_503() {
    let (busy, _idle, epp) = two_pods().await;
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    let hint = format!("{}:1", busy.addr.ip());
    ex.send(with_subset_hint(
        request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX))),
        &[&hint],
    ))
    .await;
    ex.send(request_body(&chat("m", "hi", false), true)).await;
    let r = ex.next().await;
    assert_eq!(
        set_header(&r, "x-gateway-destination-endpoint"),
        Some(busy.addr.to_string()),
        "only the hinted pod (port ignored)"
    );

    let mut ex = Exchange::open(&mut client).await;
    ex.send(with_subset_hint(
        request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX))),
        &[],
    ))
    .await;
    ex.send(request_body(&chat("m", "hi", false), true)).await;
    let (status, body) = immediate(&ex.next().await).expect("immediate");
    assert_eq!(status, 503);
    assert!(body.starts_with("inference error: ServiceUnavailable - "), "{body}");
}

async fn expect_error(epp: &TestEpp, path: &str, body: &[u8], status: i32, prefix: &str) {
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers(path, &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(body, true)).await;
    let (got, text) = immediate(&ex.next().await).expect("immediate response");
    assert_eq!(got, status, "{text}");
    assert!(text.starts_with(prefix), "{text}");
    assert!(ex.close_and_expect_end().await, "stream closed cleanly after the immediate response");
}

#[tokio::test]
async fn error_mapping() {
    let (_busy, _idle, epp) = two_pods().await;
    expect_error(&epp, "/v1/chat/completions", b"{not json", 400, "inference error: BadRequest - ").await;
    expect_error(
        &epp,
        "/v1/chat/completions",
        br#"{"messages": []}"#,
        400,
        "inference error: BadRequest - model not found in request body",
    )
    .await;
    expect_error(&epp, "/v1/completions", br#"{"model": 7, "prompt": "x"}"#, 400, "inference error: BadRequest - ")
        .await;
    expect_error(&epp, "/v1/completions", br#"[1, 2]"#, 400, "inference error: BadRequest - ").await;
    let metrics = scrape(epp.app.metrics_addr).await;
    assert!(
        metrics.lines().any(
            |l| l.starts_with("inference_objective_request_error_total") && l.contains("error_code=\"BadRequest\"")
        ),
        "errors counted"
    );
}

#[tokio::test]
async fn no_endpoints_is_503_and_all_filtered_is_429() {
    let epp = TestEpp::start("endpoints: []\n", None, |_| {}).await;
    expect_error(&epp, "/v1/chat/completions", &chat("m", "hi", false), 503, "inference error: ServiceUnavailable - ")
        .await;
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v1/models", &[], true, None)).await;
    let (status, body) = immediate(&ex.next().await).expect("immediate");
    assert_eq!((status, body.as_str()), (500, "inference error: Internal - no pods available in datastore"));

    let pod = FakeVllm::start([127, 0, 0, 5], 0, 0, 0.0).await;
    let eps = endpoints_yaml(&[("unlabeled", pod.addr, &[])]);
    let config = "plugins: [{type: prefill-filter}, {type: queue-scorer}]\nschedulingProfiles: [{name: prefill, plugins: [{pluginRef: prefill-filter}, {pluginRef: queue-scorer}]}]";
    let epp = TestEpp::start(&eps, Some(config), |_| {}).await;
    expect_error(
        &epp,
        "/v1/chat/completions",
        &chat("m", "hi", false),
        429,
        "inference error: ResourceExhausted - failed to find target endpoint",
    )
    .await;
}

#[tokio::test]
async fn unknown_paths_pass_through_to_the_default_pick() {
    let (_busy, idle, epp) = two_pods().await;
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v1/audio/transcriptions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(b"\x00binary payload", true)).await;
    let r = ex.take(2).await;
    assert_eq!(set_header(&r[0], "x-gateway-destination-endpoint"), Some(idle.addr.to_string()));
    assert_eq!(streamed(&r[1]), Some((b"\x00binary payload".to_vec(), true)));
}

#[tokio::test]
async fn model_rewrite_changes_the_body_and_strips_control_headers() {
    let (_busy, _idle, epp) = two_pods().await;
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    let body = chat("alias", "hi", false);
    ex.send(request_headers(
        "/v1/chat/completions",
        &[("x-gateway-model-name-rewrite", "real-model"), ("x-request-id", "rid-1")],
        false,
        Some((FULL_DUPLEX, FULL_DUPLEX)),
    ))
    .await;
    ex.send(request_body(&body, true)).await;
    let r = ex.take(2).await;
    let (sent, _) = streamed(&r[1]).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&sent).unwrap();
    assert_eq!(v["model"], "real-model");
    assert_eq!(set_header(&r[0], "content-length"), Some(sent.len().to_string()));
    assert_eq!(set_header(&r[0], "x-request-id").as_deref(), Some("rid-1"), "incoming request id kept");
    assert!(removed_headers(&r[0]).contains(&"x-gateway-model-name-rewrite".to_string()));
}

#[tokio::test]
async fn endpoints_file_reload_keeps_in_flight_streams() {
    let a = FakeVllm::start([127, 0, 0, 6], 0, 0, 0.0).await;
    let b = FakeVllm::start([127, 0, 0, 7], 0, 0, 0.0).await;
    let epp = TestEpp::start(&endpoints_yaml(&[("a", a.addr, &[])]), None, |_| {}).await;
    let mut client = epp.client().await;
    let mut in_flight = Exchange::open(&mut client).await;
    in_flight.send(request_headers("/v1/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    in_flight.send(request_body(br#"{"model":"m","#, false)).await;

    std::fs::write(&epp.endpoints_file, endpoints_yaml(&[("b", b.addr, &[])])).unwrap();
    epp.wait_endpoints(&["b"]).await;

    in_flight.send(request_body(br#""prompt":"x"}"#, true)).await;
    let r = in_flight.take(2).await;
    assert_eq!(set_header(&r[0], "x-gateway-destination-endpoint"), Some(b.addr.to_string()));
    assert_eq!(
        streamed(&r[1]).unwrap().0,
        br#"{"model":"m","prompt":"x"}"#.to_vec(),
        "stream survived the reload intact"
    );

    std::fs::write(&epp.endpoints_file, "endpoints: [{name: broken").unwrap();
    let mut fresh = Exchange::open(&mut client).await;
    fresh.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    fresh.send(request_body(&chat("m", "hi", false), true)).await;
    assert_eq!(
        set_header(&fresh.next().await, "x-gateway-destination-endpoint"),
        Some(b.addr.to_string()),
        "a broken file keeps the previous list"
    );
}

#[tokio::test]
async fn sheddable_objectives_get_429_only_while_saturated() {
    let pod = FakeVllm::start([127, 0, 0, 16], 9, 4, 0.95).await;
    let epp = TestEpp::start(&endpoints_yaml(&[("pod", pod.addr, &[])]), None, |s| {
        s.objectives = [("batch".to_string(), -1), ("chat".to_string(), 10)].into();
    })
    .await;
    epp.wait_waiting(&[("pod", 9)]).await;
    let send = |objective: &'static str| {
        let epp = &epp;
        async move {
            let mut client = epp.client().await;
            let mut ex = Exchange::open(&mut client).await;
            ex.send(request_headers(
                "/v1/chat/completions",
                &[("x-gateway-inference-objective", objective)],
                false,
                Some((FULL_DUPLEX, FULL_DUPLEX)),
            ))
            .await;
            ex.send(request_body(&chat("m", "hi", false), true)).await;
            ex.next().await
        }
    };
    let (status, body) = immediate(&send("batch").await).expect("shed");
    assert_eq!(status, 429);
    assert_eq!(body, "inference error: ResourceExhausted - system saturated, sheddable request dropped");
    assert!(
        set_header(&send("chat").await, "x-gateway-destination-endpoint").is_some(),
        "non-negative priority is never shed"
    );
    pod.set(0, 0, 0.1);
    epp.wait_waiting(&[("pod", 0)]).await;
    assert!(
        set_header(&send("batch").await, "x-gateway-destination-endpoint").is_some(),
        "not saturated: sheddable requests route"
    );
}
