//! Chat-completions bodies rendered through a real model's chat template (Llama 3 fixture):
//! messages, tools and request-level template options all come from the peer.
#![no_main]

use std::sync::OnceLock;

use epp::request::openai::{ApiKind, Prompt, parse_body};
use epp::tokenize::template::{ChatTemplates, SpecialTokens};
use libfuzzer_sys::fuzz_target;

fn templates() -> &'static ChatTemplates {
    static T: OnceLock<ChatTemplates> = OnceLock::new();
    T.get_or_init(|| {
        let config: serde_json::Value =
            serde_json::from_str(include_str!("../../tests/fixtures/tokenizers/llama3/tokenizer_config.json"))
                .expect("fixture");
        let source = config["chat_template"].as_str().expect("chat_template").to_string();
        ChatTemplates::new(vec![("default".into(), source)]).expect("template compiles")
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(body) = parse_body(ApiKind::ChatCompletions, data) else { return };
    if let Prompt::Chat(chat) = &body.prompt {
        let mut special = SpecialTokens::default();
        special.by_name.insert("bos_token".into(), "<|begin_of_text|>".into());
        let _ = templates().render(chat, &special);
    }
});
