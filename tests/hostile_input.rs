//! Hostile input on the ext_proc port: oversized and undecodable gRPC messages get a gRPC
//! status (and an immediate response Envoy can send to the client) instead of a silent close;
//! huge model names do not blow up `/metrics`; a huge model name is refused.

mod common;

use common::*;
use epp::proto::ext_proc::ProcessingResponse;
use tokio_stream::StreamExt;

/// Next item of a raw reply stream, bounded by [`WAIT`].
async fn next_item(rx: &mut tonic::Streaming<ProcessingResponse>) -> Option<Result<ProcessingResponse, tonic::Status>> {
    tokio::time::timeout(WAIT, rx.next()).await.expect("reply in time")
}

#[tokio::test]
async fn oversized_message_gets_resource_exhausted_and_a_413() {
    let pod = FakeVllm::start([127, 0, 10, 1], 0, 0, 0.0).await;
    let epp =
        TestEpp::start(&endpoints_yaml(&[("a", pod.addr, &[])]), None, |s| s.grpc_max_recv_bytes = 64 * 1024).await;
    let mut client = epp.client().await;
    let (tx, rx_in) = tokio::sync::mpsc::channel(4);
    let mut rx =
        client.process(tokio_stream::wrappers::ReceiverStream::new(rx_in)).await.expect("process").into_inner();
    tx.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await.unwrap();
    tx.send(request_body(&vec![b'x'; 200 * 1024], true)).await.unwrap();
    let first = next_item(&mut rx).await.expect("a reply").expect("an immediate response first");
    assert_eq!(immediate(&first).map(|(code, _)| code), Some(413), "{first:?}");
    let status = next_item(&mut rx).await.expect("a status").expect_err("the stream ends with an error status");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
}

/// A message whose field 2 (`request_headers`, a message) is sent as a varint: not a valid
/// `ProcessingRequest`.
#[derive(Clone, PartialEq, prost::Message)]
struct WrongWireType {
    #[prost(uint64, tag = "2")]
    headers_as_number: u64,
}

#[tokio::test]
async fn undecodable_message_gets_invalid_argument_and_a_400() {
    let pod = FakeVllm::start([127, 0, 10, 2], 0, 0, 0.0).await;
    let epp = TestEpp::start(&endpoints_yaml(&[("a", pod.addr, &[])]), None, |_| {}).await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", epp.app.grpc_addr))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("ready");
    let codec = tonic_prost::ProstCodec::<WrongWireType, ProcessingResponse>::default();
    let path = hyper::http::uri::PathAndQuery::from_static("/envoy.service.ext_proc.v3.ExternalProcessor/Process");
    let outbound = tokio_stream::iter([WrongWireType { headers_as_number: 7 }]).chain(tokio_stream::pending());
    let mut rx = grpc.streaming(tonic::Request::new(outbound), path, codec).await.expect("stream opens").into_inner();
    let first = next_item(&mut rx).await.expect("a reply").expect("an immediate response first");
    assert_eq!(immediate(&first).map(|(code, _)| code), Some(400), "{first:?}");
    let status = next_item(&mut rx).await.expect("a status").expect_err("the stream ends with an error status");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
}

#[tokio::test]
async fn huge_model_names_are_refused_and_long_ones_do_not_grow_metrics() {
    let pod = FakeVllm::start([127, 0, 10, 3], 0, 0, 0.0).await;
    let epp = TestEpp::start(&endpoints_yaml(&[("a", pod.addr, &[])]), None, |_| {}).await;
    let baseline = scrape(epp.app.metrics_addr).await.len();
    let mut client = epp.client().await;

    // 200 KB: refused with 400 before it reaches any label.
    let huge = "m".repeat(200 * 1024);
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(&chat(&huge, "hi", false), true)).await;
    let reply = ex.next().await;
    assert_eq!(immediate(&reply).map(|(code, _)| code), Some(400), "{reply:?}");

    // 1,000 bytes: accepted and routed; its label is cut to 256 bytes.
    let long = "n".repeat(1000);
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(&chat(&long, "hi", false), true)).await;
    assert_eq!(set_header(&ex.next().await, "x-gateway-destination-endpoint"), Some(pod.addr.to_string()));

    let text = scrape(epp.app.metrics_addr).await;
    assert!(text.contains(&"n".repeat(256)) && !text.contains(&"n".repeat(257)), "label not truncated to 256 bytes");
    assert!(!text.contains(&"m".repeat(257)));
    assert!(text.len() < baseline + 64 * 1024, "/metrics grew from {baseline} to {} bytes", text.len());
}

#[tokio::test]
async fn zero_byte_endpoints_file_keeps_the_list_and_an_empty_list_empties_it() {
    let pod = FakeVllm::start([127, 0, 10, 4], 0, 0, 0.0).await;
    let epp = TestEpp::start(&endpoints_yaml(&[("a", pod.addr, &[])]), None, |_| {}).await;
    epp.wait_endpoints(&["a"]).await;
    // A non-atomic rewrite leaves a zero-byte file for a moment: over ten watcher polls
    // (20 ms each) the previous list stays.
    std::fs::write(&epp.endpoints_file, "").expect("truncate");
    for _ in 0..10 {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert_eq!(epp.app.store.snapshot().len(), 1, "the zero-byte file emptied the list");
    }
    let b = FakeVllm::start([127, 0, 10, 5], 0, 0, 0.0).await;
    std::fs::write(&epp.endpoints_file, endpoints_yaml(&[("b", b.addr, &[])])).expect("rewrite");
    epp.wait_endpoints(&["b"]).await;
    std::fs::write(&epp.endpoints_file, "endpoints: []\n").expect("empty on purpose");
    epp.wait_endpoints(&[]).await;
}

#[tokio::test]
async fn deeply_nested_config_is_refused_quickly_with_a_clear_error() {
    let deep = "apiVersion: v1\nkind: EndpointPickerConfig\nplugins: ".to_string() + &"[".repeat(100_000);
    let start = std::time::Instant::now();
    let cx = epp::framework::build::BuildContext::default();
    let err = epp::app::load_config(Some(&deep), &cx, epp::scheduling::metrics::SchedulerMetrics::detached())
        .expect_err("refused");
    assert!(err.to_string().contains("nesting deeper than 64"), "{err}");
    assert!(start.elapsed() < std::time::Duration::from_secs(1), "took {:?}", start.elapsed());
}
