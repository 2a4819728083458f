use super::*;
use crate::request::openai::{ChatMessage, MessageContent};

const MESSAGES: &str = "/v1/messages";

fn parse_chat(body: &str) -> (Arc<ChatPrompt>, Parsed) {
    let parsed = parse(MESSAGES, body.as_bytes()).expect("parses");
    match &parsed.body.prompt {
        Prompt::Chat(c) => (c.clone(), parsed),
        other => panic!("chat prompt, got {other:?}"),
    }
}

fn text(m: &ChatMessage) -> &str {
    match &m.content {
        MessageContent::Text(t) => t,
        other => panic!("text content, got {other:?}"),
    }
}

fn error(path: &str, body: &str) -> String {
    parse(path, body.as_bytes()).expect_err("rejected").to_string()
}

#[test]
fn system_and_messages_become_a_chat_prompt() {
    let body = r#"{"model":"claude","max_tokens":256,"stream":true,"cache_salt":"t1",
        "system":[{"type":"text","text":"Be brief. "},{"type":"text","text":"x-anthropic-billing-header: cc=1"},
                  {"type":"text","text":"Be kind."}],
        "messages":[{"role":"user","content":"Hi"},
                    {"role":"assistant","content":[{"type":"text","text":"Hello"}]},
                    {"role":"user","content":[{"type":"text","text":"Look"},
                        {"type":"image","source":{"type":"url","url":"https://x/a.png"}}]}]}"#;
    let (chat, parsed) = parse_chat(body);
    assert_eq!(parsed.body.model, "claude");
    assert_eq!(parsed.body.api, ApiKind::ChatCompletions);
    assert!(parsed.body.stream && parsed.rewritable);
    assert_eq!(parsed.body.max_output_tokens, Some(256));
    assert_eq!(parsed.body.cache_salt.as_deref(), Some("t1"));
    let roles: Vec<&str> = chat.messages.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    assert_eq!(text(&chat.messages[0]), "Be brief. Be kind.", "billing header dropped, blocks joined");
    assert_eq!(text(&chat.messages[2]), "Hello", "a single text block collapses to a string");
    let MessageContent::Parts(parts) = &chat.messages[3].content else { panic!("parts") };
    assert_eq!(parts[0].text.as_deref(), Some("Look"));
    assert_eq!(parts[1].kind, "image_url");
    assert!(parts[1].media.is_some(), "the image is a media item for multimodal plugins");
    let render: serde_json::Value = serde_json::from_slice(parsed.tokenize_json.as_ref().unwrap()).unwrap();
    assert_eq!(render["model"], "claude");
    assert_eq!(render["messages"][0], serde_json::json!({"role":"system","content":"Be brief. Be kind."}));
    assert_eq!(
        render["messages"][3]["content"][1],
        serde_json::json!({"type":"image_url","image_url":{"url":"https://x/a.png"}})
    );
}

#[test]
fn string_system_and_system_role_messages_join() {
    let body =
        r#"{"model":"m","system":"A","messages":[{"role":"system","content":"B"},{"role":"user","content":"q"}]}"#;
    let (chat, _) = parse_chat(body);
    assert_eq!(chat.messages.len(), 2);
    assert_eq!(text(&chat.messages[0]), "AB");
    let (no_system, _) = parse_chat(r#"{"model":"m","messages":[{"role":"user","content":"q"}]}"#);
    assert_eq!(no_system.messages[0].role, "user");
}

#[test]
fn tool_use_and_tool_result_follow_vllm() {
    let body = r#"{"model":"m",
        "tools":[{"name":"get_weather","description":"Weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}],
        "messages":[{"role":"user","content":"Weather in Paris?"},
          {"role":"assistant","content":[{"type":"text","text":"Checking."},
             {"type":"tool_use","id":"tu_1","name":"get_weather","input":{"city":"Paris","days":2}}]},
          {"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_1",
             "content":[{"type":"text","text":"Sunny"},{"type":"text","text":"20C"},
                        {"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]}]}]}"#;
    let (chat, parsed) = parse_chat(body);
    let roles: Vec<&str> = chat.messages.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "user"], "the tool-result-only user message is dropped");
    let calls = chat.messages[1].extras.as_ref().and_then(|e| e.tool_calls.as_ref()).expect("tool calls");
    let calls: serde_json::Value = serde_json::from_str(calls.get()).unwrap();
    assert_eq!(
        calls,
        serde_json::json!([{"id":"tu_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\", \"days\": 2}"}}])
    );
    assert_eq!(text(&chat.messages[2]), "Sunny\n20C");
    assert_eq!(chat.messages[2].extras.as_ref().and_then(|e| e.tool_call_id.as_deref()), Some("tu_1"));
    let MessageContent::Parts(images) = &chat.messages[3].content else { panic!("image message") };
    assert_eq!(images[0].kind, "image_url");
    let tools: serde_json::Value = serde_json::from_str(chat.tools.as_ref().unwrap().get()).unwrap();
    assert_eq!(tools[0]["type"], "function");
    assert_eq!(tools[0]["function"]["name"], "get_weather");
    assert_eq!(tools[0]["function"]["parameters"]["properties"]["city"]["type"], "string");
    let render: serde_json::Value = serde_json::from_slice(parsed.tokenize_json.as_ref().unwrap()).unwrap();
    assert_eq!(render["messages"][3]["content"][0]["image_url"]["url"], "data:image/png;base64,AAAA");
    assert_eq!(render["tools"], tools);
}

#[test]
fn assistant_tool_result_is_text_and_empty_blocks_are_dropped() {
    let body = r#"{"model":"m","messages":[{"role":"user","content":"q"},
        {"role":"assistant","content":[{"type":"text","text":""},{"type":"tool_result","content":"done"},
         {"type":"thinking","thinking":"hmm"}]}]}"#;
    let (chat, _) = parse_chat(body);
    assert_eq!(text(&chat.messages[1]), "Tool result: done");
    let (empty, _) =
        parse_chat(r#"{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","content":[]}]}"#);
    assert_eq!(empty.messages[1].content, MessageContent::None, "assistant kept without content");
}

#[test]
fn validation_errors_are_400_messages() {
    for (body, want) in [
        (r#"{"messages":[{"role":"user","content":"q"}]}"#, "model not found in request body"),
        (r#"{"model":7,"messages":[{"role":"user","content":"q"}]}"#, "model must be a string"),
        (r#"{"model":"m"}"#, "invalid messages request: must have at least one message"),
        (r#"{"model":"m","messages":[]}"#, "must have at least one message"),
        (r#"{"model":"m","messages":{}}"#, "invalid messages request: messages:"),
        (r#"{"model":"m","messages":[{"role":1,"content":"q"}]}"#, "invalid messages request: messages:"),
        (
            r#"{"model":"m","messages":[{"role":"user","content":5}]}"#,
            "messages[0].content must be a string or an array",
        ),
        (r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":3}]}]}"#, "messages[0].content:"),
        (r#"{"model":"m","system":{"a":1},"messages":[{"role":"user","content":"q"}]}"#, "system must be a string"),
        (r#"{"model":"m","tools":{},"messages":[{"role":"user","content":"q"}]}"#, "tools must be an array"),
        (
            r#"{"model":"m","chat_template_kwargs":[1],"messages":[{"role":"user","content":"q"}]}"#,
            "chat_template_kwargs must be an object",
        ),
        ("[1]", "must be a JSON object"),
        ("{", "invalid request body"),
    ] {
        let got = error(MESSAGES, body);
        assert!(got.contains(want), "{body}: {got}");
    }
    assert!(error("/v1/foomessages", r#"{"model":"m"}"#).contains("unsupported API endpoint"));
}

#[test]
fn count_tokens_reads_only_the_envelope() {
    let p = parse("/v1/messages/count_tokens", br#"{"model":"m","messages":[{"role":"user","content":"q"}]}"#).unwrap();
    assert_eq!(p.body.model, "m");
    assert_eq!(p.body.prompt, Prompt::None);
    assert!(p.rewritable && p.tokenize_json.is_none());
    assert!(error("/v1/messages/count_tokens", r#"{"messages":[]}"#).contains("model not found"));
    assert!(error("/v1/messages/count_tokens", "[]").contains("must be a JSON object"));
}
