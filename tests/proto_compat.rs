//! Cross-check of the project's minimal ext_proc protos against a complete generated set of
//! Envoy types (`envoy-types`): the same messages encode to the same bytes both ways, so the
//! subset is wire-compatible.

use envoy_types::pb::envoy::config::core::v3 as full_core;
use envoy_types::pb::envoy::service::ext_proc::v3 as full;
use epp::proto::envoy::config::core::v3 as ours_core;
use epp::proto::ext_proc as ours;

fn to_full_request(msg: &ours::ProcessingRequest) -> full::ProcessingRequest {
    use prost::Message;
    full::ProcessingRequest::decode(msg.encode_to_vec().as_slice()).expect("envoy-types decodes our bytes")
}

#[test]
fn processing_request_round_trips() {
    use prost::Message as _;
    let ours_msg = ours::ProcessingRequest {
        request: Some(ours::processing_request::Request::RequestHeaders(ours::HttpHeaders {
            headers: Some(ours_core::HeaderMap {
                headers: vec![ours_core::HeaderValue {
                    key: ":path".into(),
                    value: String::new(),
                    raw_value: b"/v1/completions".to_vec(),
                }],
            }),
            end_of_stream: true,
            ..Default::default()
        })),
        protocol_config: Some(ours::ProtocolConfiguration {
            request_body_mode: 4,
            response_body_mode: 2,
            send_body_without_waiting_for_header_response: true,
        }),
        observability_mode: true,
        ..Default::default()
    };
    let theirs = to_full_request(&ours_msg);
    let Some(full::processing_request::Request::RequestHeaders(h)) = &theirs.request else { panic!("wrong oneof") };
    assert!(h.end_of_stream);
    let header = &h.headers.as_ref().unwrap().headers[0];
    assert_eq!((header.key.as_str(), header.raw_value.as_slice()), (":path", b"/v1/completions".as_slice()));
    let pc = theirs.protocol_config.as_ref().unwrap();
    assert_eq!(
        (pc.request_body_mode, pc.response_body_mode, pc.send_body_without_waiting_for_header_response),
        (4, 2, true)
    );
    assert!(theirs.observability_mode);
    let back = ours::ProcessingRequest::decode(prost::Message::encode_to_vec(&theirs).as_slice()).unwrap();
    assert_eq!(back, ours_msg);
}

#[test]
fn processing_response_bytes_are_identical() {
    use prost::Message as _;
    let ours_msg = ours::ProcessingResponse {
        response: Some(ours::processing_response::Response::RequestBody(ours::BodyResponse {
            response: Some(ours::CommonResponse {
                header_mutation: Some(ours::HeaderMutation {
                    set_headers: vec![ours_core::HeaderValueOption {
                        header: Some(ours_core::HeaderValue {
                            key: "x-gateway-destination-endpoint".into(),
                            value: String::new(),
                            raw_value: b"10.0.0.1:8000".to_vec(),
                        }),
                        ..Default::default()
                    }],
                    remove_headers: vec!["x-gateway-model-name-rewrite".into()],
                }),
                body_mutation: Some(ours::BodyMutation {
                    mutation: Some(ours::body_mutation::Mutation::StreamedResponse(ours::StreamedBodyResponse {
                        body: b"abc".to_vec(),
                        end_of_stream: true,
                    })),
                }),
                clear_route_cache: true,
                ..Default::default()
            }),
        })),
        dynamic_metadata: Some(epp::extproc::response::destination_metadata("10.0.0.1:8000")),
        ..Default::default()
    };
    let theirs = full::ProcessingResponse {
        response: Some(full::processing_response::Response::RequestBody(full::BodyResponse {
            response: Some(full::CommonResponse {
                header_mutation: Some(full::HeaderMutation {
                    set_headers: vec![full_core::HeaderValueOption {
                        header: Some(full_core::HeaderValue {
                            key: "x-gateway-destination-endpoint".into(),
                            value: String::new(),
                            raw_value: b"10.0.0.1:8000".to_vec(),
                        }),
                        ..Default::default()
                    }],
                    remove_headers: vec!["x-gateway-model-name-rewrite".into()],
                }),
                body_mutation: Some(full::BodyMutation {
                    mutation: Some(full::body_mutation::Mutation::StreamedResponse(full::StreamedBodyResponse {
                        body: b"abc".to_vec(),
                        end_of_stream: true,
                        ..Default::default()
                    })),
                }),
                clear_route_cache: true,
                ..Default::default()
            }),
        })),
        dynamic_metadata: Some(
            prost::Message::decode(
                prost::Message::encode_to_vec(ours_msg.dynamic_metadata.as_ref().unwrap()).as_slice(),
            )
            .unwrap(),
        ),
        ..Default::default()
    };
    assert_eq!(ours_msg.encode_to_vec(), prost::Message::encode_to_vec(&theirs));
}

#[test]
fn immediate_response_bytes_are_identical() {
    use prost::Message as _;
    let err = epp::extproc::error::ExtProcError::ResourceExhausted("x".into());
    let ours_msg = epp::extproc::response::immediate(&err);
    let theirs: full::ProcessingResponse = prost::Message::decode(ours_msg.encode_to_vec().as_slice()).unwrap();
    let Some(full::processing_response::Response::ImmediateResponse(i)) = &theirs.response else { panic!("oneof") };
    assert_eq!(i.status.as_ref().unwrap().code, 429);
    assert_eq!(i.body, b"inference error: ResourceExhausted - x".to_vec());
    assert_eq!(prost::Message::encode_to_vec(&theirs), ours_msg.encode_to_vec());
}
