//! `always-disagg-multimodal-decider`: runs the encode stage when any chat (or
//! conversations/responses) message has a content part of type `image_url`, `video_url` or
//! `input_audio`. No parameters.

use std::sync::Arc;

use crate::endpoints::model::Candidate;
use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::context::SchedulingContext;
use crate::framework::plugin::{Decider, PluginInstance};
use crate::plugins::producer::passive::NoParams;
use crate::request::openai::{ChatMessage, MessageContent, Prompt, ResponsesInput};

/// Type name.
pub const TYPE: &str = "always-disagg-multimodal-decider";

/// Content part types that need an encoder.
const MEDIA_PARTS: &[&str] = &["image_url", "video_url", "input_audio"];

/// Decides on the presence of media parts.
#[derive(Debug, Default)]
pub struct MultimodalDecider;

/// Factory.
pub fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let _: NoParams = decode_params(spec)?;
    Ok(PluginInstance::new(spec.name.clone(), TYPE).with_decider(Arc::new(MultimodalDecider)))
}

fn has_media(messages: &[ChatMessage]) -> bool {
    messages.iter().any(|m| match &m.content {
        MessageContent::Parts(parts) => parts.iter().any(|p| MEDIA_PARTS.contains(&p.kind.as_str())),
        _ => false,
    })
}

impl Decider for MultimodalDecider {
    fn disaggregate(&self, cx: &SchedulingContext<'_>, _: Option<&Candidate>) -> bool {
        match cx.request.body.as_ref().map(|b| &b.prompt) {
            Some(Prompt::Chat(chat)) => has_media(&chat.messages),
            Some(Prompt::Conversations(items)) => has_media(items),
            Some(Prompt::Responses(r)) => matches!(&r.input, ResponsesInput::Items(items) if has_media(items)),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::InferenceRequest;
    use crate::request::openai::{ApiKind, parse_body};
    use crate::test_util::{chat_request, context_for};

    fn chat(body: serde_json::Value) -> InferenceRequest {
        let bytes = serde_json::to_vec(&body).unwrap();
        InferenceRequest { body: Some(parse_body(ApiKind::ChatCompletions, &bytes).unwrap()), ..Default::default() }
    }

    #[test]
    fn media_parts_trigger_encode() {
        let data = Default::default();
        let image = chat(serde_json::json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is this"}, {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]}));
        assert!(MultimodalDecider.disaggregate(&context_for(&image, &data), None));
        let text = chat_request("m", &["plain"]);
        assert!(!MultimodalDecider.disaggregate(&context_for(&text, &data), None));
        let parts = chat(
            serde_json::json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "t"}]}]}),
        );
        assert!(!MultimodalDecider.disaggregate(&context_for(&parts, &data), None));
    }
}
