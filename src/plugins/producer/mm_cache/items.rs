//! Which multimodal items a request carries, once each: the items the tokenize step's
//! backend reported (vLLM render `features`, sized by placeholder length) when there are
//! any, else the media content parts of the chat messages (chat completions, and the item
//! lists of conversations and responses), each of weight 1.

use crate::request::InferenceRequest;
use crate::request::multimodal::MediaItem;
use crate::request::openai::{ChatMessage, MessageContent, Prompt, ResponsesInput};

/// The request's unique items in first-occurrence order (a repeated item counts once);
/// `reported`: the tokenize step's items (`RequestData::mm_items`).
pub fn request_items(request: &InferenceRequest, reported: Option<&[MediaItem]>) -> Vec<MediaItem> {
    if let Some(reported) = reported.filter(|m| !m.is_empty()) {
        return dedup(reported.iter().copied());
    }
    let messages: &[ChatMessage] = match request.body.as_ref().map(|b| &b.prompt) {
        Some(Prompt::Chat(chat)) => &chat.messages,
        Some(Prompt::Conversations(items)) => items,
        Some(Prompt::Responses(r)) => match &r.input {
            ResponsesInput::Items(items) => items,
            _ => &[],
        },
        _ => &[],
    };
    let parts = messages.iter().flat_map(|m| match &m.content {
        MessageContent::Parts(parts) => parts.as_slice(),
        _ => &[],
    });
    dedup(parts.filter_map(|p| p.media))
}

fn dedup(items: impl Iterator<Item = MediaItem>) -> Vec<MediaItem> {
    let mut out: Vec<MediaItem> = Vec::new();
    for item in items {
        // Requests carry a handful of items; a linear scan beats hashing here.
        if !out.iter().any(|o| o.key == item.key) {
            out.push(item);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::multimodal::{Modality, part_key};
    use crate::request::openai::{ApiKind, parse_body};

    fn parsed(api: ApiKind, body: serde_json::Value) -> InferenceRequest {
        let bytes = serde_json::to_vec(&body).unwrap();
        InferenceRequest { body: Some(parse_body(api, &bytes).unwrap()), ..Default::default() }
    }

    #[test]
    fn chat_media_parts_once_each() {
        let r = parsed(
            ApiKind::ChatCompletions,
            serde_json::json!({"model": "m", "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "compare"},
                    {"type": "image_url", "image_url": {"url": "http://i/a.png", "detail": "high"}},
                    {"type": "image_url", "image_url": {"url": "http://i/b.png"}},
                    {"type": "input_audio", "input_audio": {"data": "UklGR", "format": "wav"}}]},
                {"role": "user", "content": [
                    {"type": "image_url", "image_url": {"url": "http://i/a.png"}},
                    {"type": "video_url", "video_url": {"url": "http://v/c.mp4"}},
                    {"type": "image_url", "image_url": 7},
                    {"type": "image_url"}]}]}),
        );
        let items = request_items(&r, None);
        let keys: Vec<_> = items.iter().map(|i| (i.key, i.modality, i.size)).collect();
        assert_eq!(
            keys,
            vec![
                (part_key("image_url", "http://i/a.png"), Modality::Image, 1),
                (part_key("image_url", "http://i/b.png"), Modality::Image, 1),
                (part_key("input_audio", "wav:UklGR"), Modality::Audio, 1),
                (part_key("video_url", "http://v/c.mp4"), Modality::Video, 1),
            ],
            "repeated image once; malformed and URL-less parts skipped"
        );
    }

    #[test]
    fn responses_input_image_matches_chat_image_url() {
        let r = parsed(
            ApiKind::Responses,
            serde_json::json!({"model": "m", "input": [{"role": "user", "content": [
                {"type": "input_image", "image_url": "http://i/a.png"}]}]}),
        );
        assert_eq!(request_items(&r, None).first().map(|i| i.key), Some(part_key("image_url", "http://i/a.png")));
    }

    #[test]
    fn reported_items_win_and_text_has_none() {
        let r = parsed(
            ApiKind::ChatCompletions,
            serde_json::json!({"model": "m", "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "http://i/a.png"}}]}]}),
        );
        let reported = MediaItem { key: 42, modality: Modality::Image, size: 64 };
        assert_eq!(request_items(&r, Some(&[reported, reported])), vec![reported]);
        assert!(request_items(&crate::test_util::chat_request("m", &["hi"]), None).is_empty());
        assert!(request_items(&InferenceRequest::default(), None).is_empty());
    }
}
