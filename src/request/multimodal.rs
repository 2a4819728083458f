//! Multimodal item identity: which images, audio clips and videos a request carries, as the
//! encoder-cache plugins see them. Two sources, both turned into [`MediaItem`]s here:
//!
//! * the chat body's media content parts (`image_url`, `input_image`, `video_url`,
//!   `audio_url`, `input_audio`): the identity is a 128-bit XXH3 hash of the part type and
//!   its URL (or `format:data` for `input_audio`), computed while the body is parsed so the
//!   payload itself is never kept;
//! * vLLM's chat render answer (`features.mm_hashes` / `features.mm_placeholders`): the
//!   engine's own content hashes, with each item's placeholder length in tokens (its encoder
//!   output size).
//!
//! It does not decide anything about routing; see `plugins::producer::mm_cache`.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The kind of a multimodal item (label value `modality`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Modality {
    /// An image.
    Image,
    /// A video.
    Video,
    /// An audio clip.
    Audio,
    /// A modality vLLM reported that epp has no name for.
    Other,
}

impl Modality {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Modality::Image => "image",
            Modality::Video => "video",
            Modality::Audio => "audio",
            Modality::Other => "other",
        }
    }

    /// The modality of a vLLM `mm_hashes` key (`image`, `video`, `audio`).
    pub fn from_vllm(key: &str) -> Self {
        match key {
            "image" => Modality::Image,
            "video" => Modality::Video,
            "audio" => Modality::Audio,
            _ => Modality::Other,
        }
    }
}

/// One multimodal item of a request: who it is and how much encoder output it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MediaItem {
    /// Content identity (equal content = equal key).
    pub key: u128,
    /// Its kind.
    pub modality: Modality,
    /// Encoder output size in embeddings (placeholder tokens) when vLLM reported it; 1 when
    /// not known.
    pub size: u32,
}

/// Identity of a media item from its kind (`image_url`, `video_url`, `audio_url`,
/// `input_audio`; the Responses API's `input_image` counts as `image_url`) and identifier
/// (URL or `format:data`).
pub fn part_key(kind: &str, identifier: &str) -> u128 {
    part_key_of(kind, &[identifier])
}

/// [`part_key`] of an identifier given in pieces (`format`, `:`, `data`), without joining
/// them first.
pub fn part_key_of(kind: &str, identifier: &[&str]) -> u128 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(kind.as_bytes());
    h.update(&[0]);
    for piece in identifier {
        h.update(piece.as_bytes());
    }
    h.digest128()
}

/// The modality of a content part type, when it is a media part.
pub fn part_modality(kind: &str) -> Option<Modality> {
    match kind {
        "image_url" | "input_image" => Some(Modality::Image),
        "video_url" => Some(Modality::Video),
        "audio_url" | "input_audio" => Some(Modality::Audio),
        _ => None,
    }
}

/// `features` of vLLM's chat render answer (only the fields epp reads).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct RenderFeatures {
    /// Modality -> content hashes, in prompt order.
    #[serde(default)]
    pub mm_hashes: Option<BTreeMap<String, Vec<String>>>,
    /// Modality -> placeholder ranges, aligned with `mm_hashes`.
    #[serde(default)]
    pub mm_placeholders: Option<BTreeMap<String, Vec<Placeholder>>>,
}

/// One placeholder range of the rendered prompt.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
pub struct Placeholder {
    /// First token of the range.
    #[serde(default)]
    pub offset: u64,
    /// Tokens in the range (the item's encoder output size).
    #[serde(default)]
    pub length: u64,
}

impl RenderFeatures {
    /// The items, modalities in name order and each in prompt order. An item's size is its
    /// placeholder length (1 when missing or 0); empty hashes are skipped.
    pub fn items(&self) -> Vec<MediaItem> {
        let Some(hashes) = &self.mm_hashes else { return Vec::new() };
        let mut out = Vec::new();
        for (modality, list) in hashes {
            let places = self.mm_placeholders.as_ref().and_then(|p| p.get(modality));
            for (i, hash) in list.iter().enumerate().filter(|(_, h)| !h.is_empty()) {
                let length = places.and_then(|p| p.get(i)).map_or(0, |p| p.length);
                out.push(MediaItem {
                    key: part_key("vllm", hash),
                    modality: Modality::from_vllm(modality),
                    size: u32::try_from(length).unwrap_or(u32::MAX).max(1),
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_features_pair_hashes_with_placeholder_lengths() {
        let f: RenderFeatures = serde_json::from_str(
            r#"{"mm_hashes": {"image": ["a", "b", ""], "audio": ["c"]},
                "mm_placeholders": {"image": [{"offset": 3, "length": 64}], "audio": [{"offset": 90, "length": 0}]}}"#,
        )
        .unwrap();
        let items = f.items();
        assert_eq!(items.len(), 3, "the empty hash is skipped");
        assert_eq!((items[0].modality, items[0].size), (Modality::Audio, 1), "length 0 counts as 1");
        assert_eq!((items[1].modality, items[1].size), (Modality::Image, 64));
        assert_eq!((items[2].modality, items[2].size), (Modality::Image, 1), "no placeholder: size 1");
        assert_eq!(items[1].key, part_key("vllm", "a"));
        assert_ne!(items[1].key, items[2].key);
        let none: RenderFeatures = serde_json::from_str("{}").unwrap();
        assert!(none.items().is_empty());
    }

    #[test]
    fn part_keys_separate_kinds_and_content() {
        assert_ne!(part_key("image_url", "http://x/a.png"), part_key("video_url", "http://x/a.png"));
        assert_ne!(part_key("image_url", "http://x/a.png"), part_key("image_url", "http://x/b.png"));
        assert_eq!(part_key("image_url", "u"), part_key("image_url", "u"));
        assert_eq!(part_key_of("input_audio", &["wav", ":", "AAA"]), part_key("input_audio", "wav:AAA"));
        assert_eq!(part_modality("input_audio"), Some(Modality::Audio));
        assert_eq!(part_modality("text"), None);
    }
}
