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

/// Parses a chat body with message contents read as `strings` says (not as the body decides).
fn parse_chat_with(text: &str, strings: strings::Strings<'_>) -> Result<ParsedBody, String> {
    use serde::de::DeserializeSeed;
    let mut de = serde_json::Deserializer::from_str(text);
    let raw = de::BodySeed(ApiKind::ChatCompletions, strings).deserialize(&mut de).map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    raw.validate(ApiKind::ChatCompletions, true).map_err(|e| e.to_string())
}

fn chat_of(body: &str) -> Vec<ChatMessage> {
    let Prompt::Chat(chat) = parse(ApiKind::ChatCompletions, body).expect("a valid chat body").prompt else {
        panic!("a chat prompt")
    };
    chat.messages.clone()
}

#[test]
fn long_compact_prose_is_read_raw_escaped_or_pretty_bodies_are_checked() {
    use strings::Strings;
    let prose = "word ".repeat(200);
    let compact = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": prose}]}).to_string();
    assert_eq!(Strings::for_body(&compact), Strings::Raw { body: &compact });
    let pretty = serde_json::to_string_pretty(&serde_json::from_str::<serde_json::Value>(&compact).unwrap()).unwrap();
    assert_eq!(Strings::for_body(&pretty), Strings::Checked, "newlines between tokens");
    let dense = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "a \"b\"\n".repeat(100)}]});
    assert_eq!(Strings::for_body(&dense.to_string()), Strings::Checked, "an escape every few bytes");
    // Both readings give the same messages.
    for body in [&compact, &pretty, &dense.to_string()] {
        assert_eq!(parse_chat_with(body, Strings::Checked), parse_chat_with(body, Strings::Raw { body }));
    }
    assert_eq!(chat_of(&compact)[0].content, MessageContent::Text(prose));
}

#[test]
fn raw_strings_decode_escapes_and_reject_what_the_checking_parser_rejects() {
    use strings::Strings;
    let pad = "x".repeat(400);
    let body = format!(
        r#"{{"model":"m","messages":[{{"role":"system","content":"{pad}"}},{{"role":"user","content":"tab\t \"q\" \u00e9 \ud83d\ude00 {pad}"}},{{"role":"assistant","content":null,"tool_calls":[]}},{{"role":"user","content":[{{"type":"text","text":"part"}}]}},{{"role":"user"}}]}}"#
    );
    assert_eq!(Strings::for_body(&body), Strings::Raw { body: &body });
    let messages = chat_of(&body);
    assert_eq!(messages[0].content, MessageContent::Text(pad.clone()));
    assert_eq!(messages[1].content, MessageContent::Text(format!("tab\t \"q\" é 😀 {pad}")));
    assert_eq!(messages[2].content, MessageContent::None);
    assert!(matches!(&messages[3].content, MessageContent::Parts(p) if p[0].text.as_deref() == Some("part")));
    assert_eq!(messages[4].content, MessageContent::None);

    // A lone surrogate escape, a content of the wrong type, a repeated key: rejected either way.
    let lone = format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{pad} \ud800 end"}}]}}"#);
    let number = format!(r#"{{"model":"m","messages":[{{"role":"user","content":7,"name":"{pad}"}}]}}"#);
    let twice = format!(r#"{{"model":"m","messages":[{{"role":"user","content":"a","content":"{pad}"}}]}}"#);
    for bad in [&lone, &number, &twice] {
        assert_eq!(Strings::for_body(bad), Strings::Raw { body: bad });
        assert!(parse(ApiKind::ChatCompletions, bad).is_err(), "{bad}");
        assert!(parse_chat_with(bad, Strings::Checked).is_err(), "{bad}");
    }
    // A raw control character inside a string sends the body to the checking parser.
    let raw_newline = format!("{{\"model\":\"m\",\"messages\":[{{\"role\":\"user\",\"content\":\"{pad}\n{pad}\"}}]}}");
    assert_eq!(Strings::for_body(&raw_newline), Strings::Checked);
    assert!(parse(ApiKind::ChatCompletions, &raw_newline).is_err());
}

proptest::proptest! {
    /// Message contents read raw and read by the checking parser agree on any text, escapes,
    /// control characters and non-ASCII included.
    #[test]
    fn raw_and_checked_content_readings_agree(texts in proptest::collection::vec("(?s).{0,60}", 1..6), pad in 0usize..300) {
        let messages: Vec<_> = texts.iter().map(|t| serde_json::json!({"role": "user", "content": format!("{t}{}", "y".repeat(pad))})).collect();
        let body = serde_json::json!({"model": "m", "messages": messages}).to_string();
        let checked = parse_chat_with(&body, strings::Strings::Checked);
        proptest::prop_assert!(checked.is_ok());
        proptest::prop_assert_eq!(&checked, &parse_chat_with(&body, strings::Strings::Raw { body: &body }));
        proptest::prop_assert_eq!(checked, parse(ApiKind::ChatCompletions, &body).map_err(|e| e.to_string()));
    }
}
