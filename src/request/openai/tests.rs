use super::*;

macro_rules! fixture {
    ($name:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/requests/", $name))
    };
}

fn parse(api: ApiKind, body: &str) -> Result<ParsedBody, BodyError> {
    parse_body(api, body.as_bytes())
}

#[test]
fn api_kind_from_path_suffixes_and_query() {
    let cases = [
        ("/v1/chat/completions", ApiKind::ChatCompletions),
        ("/v1/chat/completions?x=/embeddings", ApiKind::ChatCompletions),
        ("/v1/completions", ApiKind::Completions),
        ("/v1/responses", ApiKind::Responses),
        ("/v1/conversations", ApiKind::Conversations),
        ("/v1/embeddings", ApiKind::Embeddings),
        ("/v1/models", ApiKind::Completions),
        ("", ApiKind::Completions),
        ("/v1/embeddings/", ApiKind::Completions),
    ];
    for (path, kind) in cases {
        assert_eq!(ApiKind::from_path(path), kind, "{path}");
    }
}

#[test]
fn completions_string_fixture() {
    let p = parse(ApiKind::Completions, fixture!("completions_string.json")).unwrap();
    assert_eq!(p.model, "meta-llama/Llama-3.1-8B-Instruct");
    assert_eq!(p.prompt, Prompt::Texts(vec!["San Francisco is a".into()]));
    assert_eq!(p.cache_salt.as_deref(), Some("tenant-a"));
    assert_eq!(p.max_output_tokens, Some(64));
    assert!(!p.stream);
}

#[test]
fn completions_token_id_fixtures() {
    let p = parse(ApiKind::Completions, fixture!("completions_token_ids.json")).unwrap();
    assert_eq!(p.prompt, Prompt::TokenIds(vec![vec![128000, 791, 6864, 315, 9822, 374]]));
    assert!(p.stream);
    let p = parse(ApiKind::Completions, fixture!("completions_token_lists.json")).unwrap();
    assert_eq!(p.prompt, Prompt::TokenIds(vec![vec![128000, 9906], vec![128000, 13347, 1070]]));
    assert!(!p.stream, "a string \"true\" is not streaming");
}

#[test]
fn chat_fixture_with_parts_tools_and_null_content() {
    let p = parse(ApiKind::ChatCompletions, fixture!("chat_parts_tools.json")).unwrap();
    assert_eq!(p.max_output_tokens, Some(128));
    assert!(p.stream);
    let Prompt::Chat(chat) = p.prompt else { panic!("not chat: {:?}", p.prompt) };
    assert_eq!(chat.messages.len(), 4);
    assert_eq!(chat.messages[0].content, MessageContent::Text("You are a helpful assistant.".into()));
    let MessageContent::Parts(parts) = &chat.messages[1].content else { panic!("no parts") };
    let kinds: Vec<_> = parts.iter().map(|p| p.kind.as_str()).collect();
    assert_eq!(kinds, ["text", "image_url", "text"]);
    assert_eq!(parts[1].text, None);
    assert_eq!(chat.messages[2].content, MessageContent::None);
    assert_eq!(chat.messages[3].content, MessageContent::Text("a cat \"Tom\" é".into()));
    let tools = chat.tools.as_ref().expect("tools");
    assert!(tools.get().starts_with("[\n    {\"type\": \"function\""));
    assert!(
        chat.template.kwargs.is_some() && chat.template.add_generation_prompt && chat.template.chat_template.is_none()
    );
}

#[test]
fn chat_template_fields_and_message_extras() {
    let body = r#"{"model":"m","messages":[
        {"role":"assistant","content":null,"tool_calls":[{"id":"c1"}],"name":7},
        {"role":"tool","tool_call_id":"c1","name":"f","content":"ok"},
        {"role":"user","content":"hi","tool_calls":null}],
        "add_generation_prompt":false,"continue_final_message":true,"add_special_tokens":"yes",
        "chat_template_kwargs":{"b":1,"a":2},"chat_template":"{{ messages }}"}"#;
    let p = parse(ApiKind::ChatCompletions, body).unwrap();
    let Prompt::Chat(chat) = p.prompt else { panic!("not chat") };
    let t = &chat.template;
    assert!(!t.add_generation_prompt && t.continue_final_message && !t.add_special_tokens, "non-bool -> default");
    assert_eq!(t.kwargs.as_ref().map(RawJson::get), Some(r#"{"b":1,"a":2}"#));
    assert_eq!(t.chat_template.as_deref(), Some("{{ messages }}"));
    let extras = |i: usize| chat.messages[i].extras.as_deref().cloned();
    let first = extras(0).expect("tool_calls");
    assert_eq!(first.tool_calls.as_ref().map(RawJson::get), Some(r#"[{"id":"c1"}]"#));
    assert_eq!(first.name, None, "a non-string name is dropped");
    let second = extras(1).expect("tool result");
    assert_eq!((second.name.as_deref(), second.tool_call_id.as_deref()), (Some("f"), Some("c1")));
    assert_eq!(extras(2), None, "null tool_calls and no other extras");
    // Other APIs ignore the template fields.
    let p = parse(ApiKind::Completions, r#"{"model":"m","prompt":"x","chat_template":5}"#).unwrap();
    assert_eq!(p.prompt, Prompt::Texts(vec!["x".into()]));
}

#[test]
fn responses_fixture() {
    let p = parse(ApiKind::Responses, fixture!("responses.json")).unwrap();
    assert_eq!(p.max_output_tokens, Some(200));
    let Prompt::Responses(r) = p.prompt else { panic!("not responses") };
    assert_eq!(r.instructions.as_deref(), Some("Answer briefly."));
    assert!(r.tools.is_some());
    let ResponsesInput::Items(items) = r.input else { panic!("not items") };
    assert_eq!(items[0].role, "user");
    assert_eq!(items[1].role, "");
    assert_eq!(items[1].content, MessageContent::None);
    let p = parse(ApiKind::Responses, r#"{"model":"m","input":"hi"}"#).unwrap();
    let Prompt::Responses(r) = p.prompt else { panic!("not responses") };
    assert_eq!(r.input, ResponsesInput::Text("hi".into()));
}

#[test]
fn conversations_and_embeddings_fixtures() {
    let p = parse(ApiKind::Conversations, fixture!("conversations.json")).unwrap();
    assert!(matches!(&p.prompt, Prompt::Conversations(items) if items.len() == 1));
    let p = parse(ApiKind::Embeddings, fixture!("embeddings.json")).unwrap();
    let Prompt::Embeddings(EmbeddingsInput::Texts(texts)) = p.prompt else { panic!() };
    assert_eq!(texts.len(), 2);
}

#[test]
fn malformed_fixtures_are_rejected() {
    let err = parse(ApiKind::ChatCompletions, fixture!("malformed_truncated.json")).unwrap_err();
    assert!(matches!(err, BodyError::Json(_)));
    let err = parse(ApiKind::Completions, fixture!("malformed_not_object.json")).unwrap_err();
    assert!(matches!(err, BodyError::NotObject));
    let err = parse_body(ApiKind::Completions, b"{\"model\":\"\xff\"}").unwrap_err();
    assert!(matches!(err, BodyError::NotUtf8(_)));
    let err = parse(ApiKind::Completions, fixture!("missing_model.json")).unwrap_err();
    assert!(matches!(err, BodyError::ModelMissing));
    assert_eq!(err.to_string(), "model not found in request body");
}

#[test]
fn model_must_be_a_string() {
    let err = parse(ApiKind::Completions, r#"{"model":7,"prompt":"x"}"#).unwrap_err();
    assert!(matches!(err, BodyError::ModelNotString));
    let err = parse(ApiKind::Completions, r#"{"model":null,"prompt":"x"}"#).unwrap_err();
    assert!(matches!(err, BodyError::ModelMissing));
    let p = parse(ApiKind::Completions, r#"{"model":"a\"b\u00e9","prompt":"x"}"#).unwrap();
    assert_eq!(p.model, "a\"bé");
}

#[test]
fn per_api_validation_rules() {
    use BodyError::*;
    type Case = (ApiKind, &'static str, fn(&BodyError) -> bool);
    let cases: [Case; 10] = [
        (ApiKind::ChatCompletions, r#"{"model":"m"}"#, |e| matches!(e, NoMessages)),
        (ApiKind::ChatCompletions, r#"{"model":"m","messages":[]}"#, |e| matches!(e, NoMessages)),
        (ApiKind::Completions, r#"{"model":"m"}"#, |e| matches!(e, EmptyPrompt)),
        (ApiKind::Completions, r#"{"model":"m","prompt":""}"#, |e| matches!(e, EmptyPrompt)),
        (ApiKind::Completions, r#"{"model":"m","prompt":[]}"#, |e| matches!(e, EmptyPrompt)),
        (ApiKind::Embeddings, r#"{"model":"m","input":[]}"#, |e| matches!(e, EmptyEmbeddingsInput)),
        (ApiKind::Responses, r#"{"model":"m"}"#, |e| matches!(e, MissingResponsesInput)),
        (ApiKind::Conversations, r#"{"model":"m","items":[]}"#, |e| matches!(e, NoItems)),
        (ApiKind::Completions, r#"{"model":"m","prompt":[1,"a"]}"#, |e| matches!(e, Json(_))),
        (ApiKind::Completions, r#"{"model":"m","prompt":[-1]}"#, |e| matches!(e, Json(_))),
    ];
    for (api, body, check) in cases {
        let err = parse(api, body).unwrap_err();
        assert!(check(&err), "{api:?} {body}: {err:?}");
    }
}

#[test]
fn fields_of_other_apis_and_unknown_fields_are_ignored() {
    // `messages` has a shape chat would reject, but this is a completions request.
    let body = r#"{"model":"m","prompt":"p","messages":7,"input":{},"foo":[1,{"a":null}]}"#;
    let p = parse(ApiKind::Completions, body).unwrap();
    assert_eq!(p.prompt, Prompt::Texts(vec!["p".into()]));
}

#[test]
fn lenient_scalars_and_max_token_precedence() {
    let body = r#"{"model":"m","prompt":"p","max_tokens":-1,"max_completion_tokens":5,
                  "max_output_tokens":9,"cache_salt":3,"stream":1}"#;
    let p = parse(ApiKind::Completions, body).unwrap();
    assert_eq!(p.max_output_tokens, Some(5));
    assert_eq!(p.cache_salt, None);
    assert!(!p.stream);
}

#[test]
fn rewrite_model_splices_only_the_model_value() {
    let body = br#"{ "a": {"model": "inner"}, "model" :  "old" , "n": 1.50 }"#;
    let out = rewrite_model(body, "new\"x").unwrap();
    assert_eq!(std::str::from_utf8(&out).unwrap(), r#"{ "a": {"model": "inner"}, "model" :  "new\"x" , "n": 1.50 }"#);
    let fixture = fixture!("chat_parts_tools.json").as_bytes();
    let out = rewrite_model(fixture, "target").unwrap();
    let reparsed = parse_body(ApiKind::ChatCompletions, &out).unwrap();
    let original = parse_body(ApiKind::ChatCompletions, fixture).unwrap();
    assert_eq!(reparsed.model, "target");
    assert_eq!(reparsed.prompt, original.prompt);
    assert_eq!(out.len(), fixture.len() - "Qwen/Qwen2.5-VL-7B-Instruct".len() + "target".len());
}

#[test]
fn rewrite_model_errors() {
    assert!(matches!(rewrite_model(b"{\"prompt\":1}", "x"), Err(BodyError::ModelMissing)));
    assert!(matches!(rewrite_model(b"[1]", "x"), Err(BodyError::NotObject)));
    assert!(matches!(rewrite_model(b"{\"model\":", "x"), Err(BodyError::Json(_))));
}

proptest::proptest! {
    #[test]
    fn parse_body_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
        for api in [ApiKind::Completions, ApiKind::ChatCompletions, ApiKind::Responses] {
            let _ = parse_body(api, &bytes);
        }
        let _ = rewrite_model(&bytes, "m");
    }

    #[test]
    fn rewrite_model_roundtrips(model in ".{0,20}", new in ".{0,20}", prompt in ".{0,40}") {
        let body = serde_json::json!({"prompt": prompt, "model": model}).to_string();
        let out = rewrite_model(body.as_bytes(), &new).unwrap();
        let p = parse_body(ApiKind::Completions, &out);
        if !prompt.is_empty() {
            let p = p.unwrap();
            proptest::prop_assert_eq!(p.model, new);
            proptest::prop_assert_eq!(p.prompt, Prompt::Texts(vec![prompt]));
        }
    }
}

proptest::proptest! {
    /// The vectorised UTF-8 check accepts and rejects exactly what std's does.
    #[test]
    fn body_text_agrees_with_std(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300), text in ".{0,100}") {
        for input in [bytes.as_slice(), text.as_bytes()] {
            let ours = super::body_text(input).map_err(|e| e.to_string());
            let std = std::str::from_utf8(input).map_err(|e| BodyError::NotUtf8(e).to_string());
            proptest::prop_assert_eq!(ours, std);
        }
    }
}

#[test]
fn bodies_in_non_latin_scripts_parse() {
    let body = r#"{"model":"m","messages":[{"role":"user","content":"東京の天気は？ Погода в Москве? ☀️"}]}"#;
    let parsed = parse_body(ApiKind::ChatCompletions, body.as_bytes()).expect("valid UTF-8 JSON");
    let Prompt::Chat(chat) = parsed.prompt else { panic!("a chat prompt") };
    assert_eq!(chat.messages[0].content, MessageContent::Text("東京の天気は？ Погода в Москве? ☀️".into()));
}

/// A chat body through the serde path alone.
fn serde_chat(text: &str) -> Result<ParsedBody, String> {
    serde_path(ApiKind::ChatCompletions, text, true).map_err(|e| e.to_string())
}

/// A chat body through `chat_scan` alone: `None` when it leaves the body to the serde path.
fn scanned_chat(text: &str) -> Option<Result<ParsedBody, String>> {
    chat_scan::read_chat(text).map(|raw| raw.validate(ApiKind::ChatCompletions, true).map_err(|e| e.to_string()))
}

fn chat_of(body: &str) -> Vec<ChatMessage> {
    let Prompt::Chat(chat) = parse(ApiKind::ChatCompletions, body).expect("a valid chat body").prompt else {
        panic!("a chat prompt")
    };
    chat.messages.clone()
}

#[test]
fn chat_scan_reads_the_common_shapes_as_the_serde_path_does() {
    let prose = "word ".repeat(200);
    let full = serde_json::json!({
        "model": "m", "temperature": 0.7, "top_p": -1.25, "n": 0, "seed": 12345678901234567890u64,
        "stream": true, "max_tokens": 128, "max_completion_tokens": "9", "cache_salt": "s\u{e9}l",
        "add_generation_prompt": false, "continue_final_message": true, "add_special_tokens": 1,
        "chat_template": null, "chat_template_kwargs": {"enable_thinking": false, "list": [1, {"a": null}]},
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "prompt": "ignored for chat", "metadata": {"deep": [[[["x"]]]], "empty": {}, "none": []},
        "messages": [
            {"role": "system", "content": prose},
            {"role": "user", "content": "tab\t \"q\" \\ / \u{8}\u{c}\r\n \u{e9} \u{1F600} \u{1} end", "extra": [true, false]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{\"a\":1}"}}], "name": "bot"},
            {"role": "tool", "content": "42", "tool_call_id": "c1", "name": 5},
            {"role": "user", "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "https://x/1.png", "detail": "low"}},
                {"type": "image_url", "image_url": "https://x/2.png"},
                {"type": "input_audio", "input_audio": {"data": "QUJD", "format": "wav", "url": 3}},
                {"type": "video_url", "video_url": [1, 2]},
                {"type": null, "text": null, "cache_control": {"type": "ephemeral"}}
            ]},
            {"role": null},
            {}
        ]
    });
    let compact = full.to_string();
    let pretty = serde_json::to_string_pretty(&full).unwrap();
    let escaped_keys_elsewhere = compact.replacen("\"metadata\"", "\"meta\\u0064ata\"", 1);
    let dense = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "a \"b\"\n".repeat(100)}]});
    let ascii_escapes = r#"{"model":"m","messages":[{"role":"user","content":"\u00e9\uD83D\uDE00\u0041"}]}"#;
    for body in [&compact, &pretty, &dense.to_string(), &ascii_escapes.to_string()] {
        let scanned = scanned_chat(body).unwrap_or_else(|| panic!("read by chat_scan: {body}"));
        assert!(scanned.is_ok(), "{scanned:?}");
        assert_eq!(scanned, serde_chat(body), "{body}");
    }
    // A top-level key with an escape is left to the serde path (which ignores it, as here).
    assert!(scanned_chat(&escaped_keys_elsewhere).is_none());
    assert_eq!(
        parse(ApiKind::ChatCompletions, &escaped_keys_elsewhere).map_err(|e| e.to_string()),
        serde_chat(&compact)
    );
    let messages = chat_of(&compact);
    assert_eq!(messages[0].content, MessageContent::Text(prose));
    assert_eq!(messages[1].content, MessageContent::Text("tab\t \"q\" \\ / \u{8}\u{c}\r\n é 😀 \u{1} end".into()));
    assert_eq!(chat_of(ascii_escapes)[0].content, MessageContent::Text("é😀A".into()));
}

#[test]
fn chat_scan_leaves_what_it_does_not_handle_to_the_serde_path() {
    let ok = |m: &str| format!(r#"{{"model":"m","messages":[{m}]}}"#);
    let deep = format!(
        r#"{{"model":"m","x":{}1{},"messages":[{{"role":"user","content":"a"}}]}}"#,
        "[".repeat(100),
        "]".repeat(100)
    );
    let cases = [
        ok(r#"{"role":"user","content":"\ud800 lone"}"#),
        ok(r#"{"role":"user","content":"\udc00 lone"}"#),
        ok(r#"{"role":"user","content":7}"#),
        ok(r#"{"role":"user","content":"a","content":"b"}"#),
        ok(r#"{"role":7,"content":"a"}"#),
        ok(r#"{"ro\u006ce":"user","content":"a"}"#),
        ok(r#"{"role":"user","content":[{"type":"text","type":"text"}]}"#),
        ok(r#"{"role":"user","content":[["text","hi"]]}"#),
        ok(r#"{"role":"user","content":[{"type":"image_url","image_url":{"url":{"url":"x"}}}]}"#),
        ok(r#"{"role":"user","content":"a","n":1e5}"#),
        ok(r#"{"role":"user","content":"a","n":01}"#),
        ok(r#"{"role":"user","content":"a","n":1.}"#),
        ok(r#"{"role":"user","content":"a\x"}"#),
        ok("{\"role\":\"user\",\"content\":\"a\nb\"}"),
        ok(r#"{"role":"user","content":"a"},"#),
        format!("{} x", ok(r#"{"role":"user","content":"a"}"#)),
        r#"{"model":"m","messages":[{"role":"user","content":"a"}],}"#.to_string(),
        r#"{"model":"m","messages":{"role":"user"}}"#.to_string(),
        r#"{"model":"m","messages":[{"role":"user","content":"a"}]"#.to_string(),
        r#"{"model":"m","messages":[{"role":"user","content":"a"}],"t":tru}"#.to_string(),
        deep,
    ];
    for body in &cases {
        assert!(scanned_chat(body).is_none(), "chat_scan read {body}");
        assert_eq!(parse(ApiKind::ChatCompletions, body).map_err(|e| e.to_string()), serde_chat(body), "{body}");
    }
}

/// A JSON value of any shape, for bodies built at random.
fn any_json() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
    use proptest::prelude::*;
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        "(?s).{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(
                prop_oneof![
                    Just("role".to_string()),
                    Just("content".to_string()),
                    Just("type".to_string()),
                    Just("text".to_string()),
                    Just("url".to_string()),
                    Just("image_url".to_string()),
                    "[a-z_]{0,6}"
                ],
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A message object: the fields chat_scan reads, of the usual types mostly, any JSON sometimes.
fn any_message() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
    use proptest::prelude::*;
    use serde_json::{Value, json};
    let text = || "(?s).{0,16}".prop_map(Value::from);
    let media = prop_oneof![text(), text().prop_map(|u| json!({"url": u, "detail": "low"})), any_json()];
    let part = (prop_oneof![Just("text"), Just("image_url"), Just("input_audio"), Just("video_url")], text(), media)
        .prop_map(|(kind, text, media)| json!({"type": kind, "text": text, kind: media}));
    let content = prop_oneof![4 => text(), 2 => proptest::collection::vec(part, 0..3).prop_map(Value::Array), 1 => Just(Value::Null), 1 => any_json()];
    let role = prop_oneof![4 => text(), 1 => any_json()];
    let fields = prop_oneof![Just("name"), Just("tool_calls"), Just("tool_call_id"), Just("x")];
    (role, content, proptest::option::of((fields, any_json()))).prop_map(|(role, content, extra)| {
        let mut m = json!({"role": role, "content": content});
        if let Some((k, v)) = extra {
            m[k] = v;
        }
        m
    })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
    /// Whatever chat_scan reads, the serde path reads the same way: bodies with messages and
    /// fields of any shape, pretty or compact, then one byte dropped or replaced (about a third
    /// of the cases are read by chat_scan, the rest handed over).
    #[test]
    fn chat_scan_agrees_with_the_serde_path(messages in proptest::collection::vec(proptest::prop_oneof![8 => any_message(), 1 => any_json()], 0..5), extra in any_json(), pretty: bool, edit in proptest::option::of((proptest::prelude::any::<proptest::sample::Index>(), proptest::option::of(proptest::prelude::any::<u8>())))) {
        let body = serde_json::json!({"model": "m", "messages": messages, "extra": extra, "max_tokens": 5});
        let mut text = if pretty { serde_json::to_string_pretty(&body).unwrap() } else { body.to_string() }.into_bytes();
        if let Some((at, byte)) = edit {
            let at = at.index(text.len());
            match byte {
                Some(b) => text[at] = b,
                None => { text.remove(at); }
            }
        }
        let Ok(text) = String::from_utf8(text) else { return Ok(()) };
        if let Some(scanned) = scanned_chat(&text) {
            proptest::prop_assert_eq!(scanned, serde_chat(&text), "{}", text);
        }
    }
}
