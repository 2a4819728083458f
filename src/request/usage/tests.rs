use super::*;

const CHAT_USAGE: &str = r#"{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,
  "message":{"role":"assistant","content":"hi"}}],
  "usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15,
  "prompt_tokens_details":{"cached_tokens":8}}}"#;

#[test]
fn usage_from_chat_completion_body() {
    let u = usage_from_json(CHAT_USAGE.as_bytes()).unwrap();
    assert_eq!(u, Usage { prompt_tokens: 12, completion_tokens: 3, cached_tokens: Some(8) });
}

#[test]
fn usage_from_responses_object_and_embeddings() {
    let body = br#"{"object":"response","usage":{"input_tokens":5,"output_tokens":7,
        "input_tokens_details":{"cached_tokens":0}}}"#;
    let u = usage_from_json(body).unwrap();
    assert_eq!(u, Usage { prompt_tokens: 5, completion_tokens: 7, cached_tokens: Some(0) });
    let nested = br#"{"type":"response.completed","response":{"usage":{"input_tokens":1,"output_tokens":2}}}"#;
    assert_eq!(usage_from_json(nested).unwrap().completion_tokens, 2);
    let embed = br#"{"data":[],"usage":{"prompt_tokens":4,"total_tokens":4}}"#;
    assert_eq!(usage_from_json(embed).unwrap(), Usage { prompt_tokens: 4, ..Usage::default() });
    assert_eq!(usage_from_json(br#"{"usage":null}"#), None);
    assert_eq!(usage_from_json(b"not json"), None);
}

fn scan(chunks: &[&[u8]]) -> Option<Usage> {
    let mut s = SseUsageScanner::new();
    chunks.iter().for_each(|c| s.feed(c));
    s.usage()
}

#[test]
fn sse_usage_split_across_chunks() {
    let stream = concat!(
        "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\r\n\r\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2}}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\n",
        "data: [DONE]\n\n"
    )
    .as_bytes();
    let expected = Some(Usage { prompt_tokens: 9, completion_tokens: 2, cached_tokens: None });
    for split in 0..stream.len() {
        let (a, b) = stream.split_at(split);
        assert_eq!(scan(&[a, b]), expected, "split at {split}");
    }
    let bytes: Vec<&[u8]> = stream.chunks(1).collect();
    assert_eq!(scan(&bytes), expected);
}

#[test]
fn sse_responses_completed_event() {
    let stream = b"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"usage\":null}}\n\n\
event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":4,\"input_tokens_details\":{\"cached_tokens\":2}}}}\n\n";
    let u = scan(&[stream]).unwrap();
    assert_eq!(u, Usage { prompt_tokens: 3, completion_tokens: 4, cached_tokens: Some(2) });
}

#[test]
fn usage_from_anthropic_message() {
    let body = br#"{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],
        "usage":{"input_tokens":10,"output_tokens":4,"cache_read_input_tokens":30,"cache_creation_input_tokens":2}}"#;
    let u = usage_from_json(body).unwrap();
    assert_eq!(u, Usage { prompt_tokens: 42, completion_tokens: 4, cached_tokens: Some(30) });
    // vLLM's Anthropic answers carry no cache fields: input_tokens is the whole prompt.
    let vllm = br#"{"type":"message","usage":{"input_tokens":12,"output_tokens":3}}"#;
    assert_eq!(usage_from_json(vllm).unwrap(), Usage { prompt_tokens: 12, completion_tokens: 3, cached_tokens: None });
    // count_tokens answers are not usage.
    assert_eq!(usage_from_json(br#"{"input_tokens":99}"#), None);
}

#[test]
fn sse_anthropic_message_start_then_delta() {
    let stream = concat!(
        "event: message_start\n",
        "data: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":25,\"output_tokens\":1,\"cache_read_input_tokens\":5}}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"usage\"}}\n\n",
        "event: message_delta\n",
        "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n",
        "event: message_stop\n",
        "data: {\"type\":\"message_stop\"}\n\n",
    )
    .as_bytes();
    let expected = Some(Usage { prompt_tokens: 30, completion_tokens: 15, cached_tokens: Some(5) });
    for split in 0..stream.len() {
        let (a, b) = stream.split_at(split);
        assert_eq!(scan(&[a, b]), expected, "split at {split}");
    }
    // vLLM repeats input_tokens in message_delta; those win.
    let vllm =
        b"data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":0,\"output_tokens\":0}}}\n\n\
data: {\"type\":\"message_delta\",\"delta\":{},\"usage\":{\"input_tokens\":8,\"output_tokens\":2}}\n\n";
    assert_eq!(scan(&[vllm]), Some(Usage { prompt_tokens: 8, completion_tokens: 2, cached_tokens: None }));
    // A stream cut before message_delta still reports the input.
    let delta_at = stream.windows(20).position(|w| w == b"event: message_delta").unwrap();
    let cut = &stream[..delta_at];
    assert_eq!(scan(&[cut]).map(|u| (u.prompt_tokens, u.completion_tokens)), Some((30, 1)));
}

#[test]
fn sse_without_usage_or_with_overlong_line() {
    assert_eq!(scan(&[b"data: {\"choices\":[]}\n\ndata: [DONE]\n\n"]), None);
    let mut s = SseUsageScanner::new();
    let junk = vec![b'x'; MAX_PARTIAL_LINE / 2 + 1];
    s.feed(b"data: ");
    s.feed(&junk);
    s.feed(&junk); // over the limit: the line is dropped
    assert!(s.partial.is_empty());
    s.feed(b"still the same line\ndata: {\"usage\":{\"prompt_tokens\":1}}\n");
    assert_eq!(s.usage().map(|u| u.prompt_tokens), Some(1));
}

#[test]
fn restore_model_name_variants() {
    let chunk = br#"data: {"id":"1","model":"base-7b","x":{"model":"base-7b"}}"#;
    let out = restore_model_name(chunk, "base-7b", "my-lora").unwrap();
    assert_eq!(out, br#"data: {"id":"1","model":"my-lora","x":{"model":"my-lora"}}"#);
    let spaced = br#"{"model": "base-7b"}"#;
    assert_eq!(restore_model_name(spaced, "base-7b", "a\"b").unwrap(), br#"{"model": "a\"b"}"#);
    assert_eq!(restore_model_name(chunk, "same", "same"), None);
    assert_eq!(restore_model_name(chunk, "other", "x"), None);
    // A target that is a prefix of the real name must not match.
    assert_eq!(restore_model_name(chunk, "base", "x"), None);
}

proptest::proptest! {
    #[test]
    fn scanner_never_panics(chunks in proptest::collection::vec(
        proptest::collection::vec(proptest::num::u8::ANY, 0..64), 0..8)) {
        let mut s = SseUsageScanner::new();
        chunks.iter().for_each(|c| s.feed(c));
        let _ = s.usage();
    }
}
