//! llm-d's Redis key layout (llm-d-kv-cache `kvblock/redis.go`), so that an llm-d EPP and epp
//! can read and write one index:
//!
//! * request key `k` -> HASH named by `k` in decimal (`"12477849404512668933"`); one field per
//!   holder, the holder's `PodEntry` as Go's `encoding/json` writes it, value `""`:
//!   `{"PodIdentifier":"10.0.0.5:8000","DeviceTier":"gpu","Speculative":false,"HasGroup":false,"GroupIdx":0}`
//! * engine hash `h` -> ZSET `engine:<h decimal>` of request keys (decimal), score = position
//!   in the `Add` call; the member with the highest score is the parent key of a continuation.
//!
//! Fields are matched byte for byte by `HDEL`, so [`PodEntry::field`] reproduces Go's encoder
//! exactly (field order, `<`, `>`, `&`, U+2028/9 and control characters escaped as `\u00XX`).
//! Reading is lenient like Go's decoder: field names match case-insensitively, unknown fields
//! and undecodable entries are skipped.

use std::fmt::Write as _;

use serde::Deserialize;

use crate::kvcache::events::Tier;

/// The HASH of request key `key`.
pub fn request_key(key: u64) -> String {
    key.to_string()
}

/// The ZSET of engine hash `hash`.
pub fn engine_key(hash: u64) -> String {
    format!("engine:{hash}")
}

/// One holder of a key (llm-d's `PodEntry`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodEntry {
    /// `ip:port` of the endpoint.
    pub pod: String,
    /// Lower-cased medium (`gpu`, `cpu`, ...).
    pub tier: String,
    /// Added before a KV event confirmed it.
    pub speculative: bool,
    /// vLLM KV-cache group, when the event named one.
    pub group: Option<i64>,
}

/// Go's field names; decoded case-insensitively (serde aliases cover the usual spellings).
#[derive(Deserialize)]
struct Wire {
    #[serde(alias = "podIdentifier", alias = "podidentifier", default)]
    #[serde(rename = "PodIdentifier")]
    pod: String,
    #[serde(rename = "DeviceTier", alias = "deviceTier", alias = "devicetier", default)]
    tier: String,
    #[serde(rename = "Speculative", alias = "speculative", default)]
    speculative: bool,
    #[serde(rename = "HasGroup", alias = "hasGroup", alias = "hasgroup", default)]
    has_group: bool,
    #[serde(rename = "GroupIdx", alias = "groupIdx", alias = "groupidx", default)]
    group: i64,
}

impl PodEntry {
    /// The entry KV events of `pod` write for `tier` and `group`.
    pub fn confirmed(pod: &str, tier: Tier, group: Option<u32>) -> Self {
        PodEntry {
            pod: pod.to_string(),
            tier: tier.as_str().to_string(),
            speculative: false,
            group: group.map(i64::from),
        }
    }

    /// The HASH field: Go's `json.Marshal` of the entry.
    pub fn field(&self) -> String {
        let mut out = String::with_capacity(96 + self.pod.len());
        out.push_str("{\"PodIdentifier\":");
        go_json_string(&mut out, &self.pod);
        out.push_str(",\"DeviceTier\":");
        go_json_string(&mut out, &self.tier);
        let _ = write!(
            out,
            ",\"Speculative\":{},\"HasGroup\":{},\"GroupIdx\":{}}}",
            self.speculative,
            self.group.is_some(),
            self.group.unwrap_or(0)
        );
        out
    }

    /// Decodes a field; `None` for anything that is not a JSON object of this shape.
    pub fn parse(field: &[u8]) -> Option<Self> {
        let w: Wire = serde_json::from_slice(field).ok()?;
        Some(PodEntry { pod: w.pod, tier: w.tier, speculative: w.speculative, group: w.has_group.then_some(w.group) })
    }

    /// The tier used for scoring: speculative entries weigh as [`Tier::Speculative`].
    pub fn scoring_tier(&self) -> Tier {
        if self.speculative { Tier::Speculative } else { Tier::from_medium(Some(&self.tier)) }
    }
}

/// Appends `s` as Go's `encoding/json` (HTML-safe mode, the `json.Marshal` default) quotes it.
fn go_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || matches!(c, '<' | '>' | '&' | '\u{2028}' | '\u{2029}') => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_decimal_like_llm_d() {
        assert_eq!(request_key(12477849404512668933), "12477849404512668933");
        assert_eq!(engine_key(17), "engine:17");
    }

    #[test]
    fn fields_match_go_json_marshal() {
        let e = PodEntry::confirmed("10.0.0.5:8000", Tier::Gpu, None);
        assert_eq!(
            e.field(),
            r#"{"PodIdentifier":"10.0.0.5:8000","DeviceTier":"gpu","Speculative":false,"HasGroup":false,"GroupIdx":0}"#
        );
        let g = PodEntry::confirmed("10.0.0.5:8000", Tier::Cpu, Some(2));
        assert_eq!(
            g.field(),
            r#"{"PodIdentifier":"10.0.0.5:8000","DeviceTier":"cpu","Speculative":false,"HasGroup":true,"GroupIdx":2}"#
        );
        let odd = PodEntry { pod: "a<b>&\"\\\n\u{1}\u{2028}é".into(), ..PodEntry::default() };
        assert!(
            odd.field().starts_with(r#"{"PodIdentifier":"a\u003cb\u003e\u0026\"\\\n\u0001\u2028é","DeviceTier":"""#)
        );
    }

    #[test]
    fn parse_round_trips_and_is_lenient() {
        for e in [
            PodEntry::confirmed("10.0.0.5:8000", Tier::Gpu, None),
            PodEntry::confirmed("x<y>", Tier::Storage, Some(1)),
            PodEntry { pod: "p".into(), tier: String::new(), speculative: true, group: None },
        ] {
            assert_eq!(PodEntry::parse(e.field().as_bytes()), Some(e));
        }
        let lower = PodEntry::parse(br#"{"podIdentifier":"p","deviceTier":"cpu","Extra":1}"#).expect("lenient");
        assert_eq!((lower.pod.as_str(), lower.scoring_tier()), ("p", Tier::Cpu));
        assert_eq!(PodEntry::parse(b"not json"), None);
        assert_eq!(PodEntry::parse(b"[1]"), None);
        let spec = PodEntry { speculative: true, ..PodEntry::default() };
        assert_eq!(spec.scoring_tier(), Tier::Speculative);
    }
}
