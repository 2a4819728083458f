//! The sync message format, version 1 (docs/replicas.md#message-format-version-1): one
//! [`Message`] per stream entry, in a compact little-endian binary layout. The only module
//! that knows the bytes. Decoding is total: any input gives a message or a [`DecodeError`],
//! never a panic, and no allocation exceeds the declared limits.

use std::sync::Arc;

use crate::framework::replica::SharedUpdate;

/// Format version written and understood.
pub const VERSION: u8 = 1;
/// Longest string field (endpoint, session, plugin and replica names), in bytes.
pub const MAX_STR: usize = 4096;
/// Most block keys or load entries in one message.
pub const MAX_ITEMS: usize = 65_536;
/// Longest replica id.
pub const MAX_REPLICA_ID: usize = 64;

/// What a message carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    /// A plugin's update.
    Update(SharedUpdate),
    /// A liveness beat (no plugin).
    Heartbeat,
}

/// One message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Publishing replica.
    pub replica: Arc<str>,
    /// Publish time, milliseconds since the Unix epoch.
    pub published_ms: u64,
    /// Plugin instance the update is for (empty for a heartbeat).
    pub plugin: Arc<str>,
    /// The payload.
    pub body: Body,
}

/// Why bytes are not a version-1 message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Another format version (a newer or foreign publisher).
    #[error("unsupported version {0}")]
    Version(u8),
    /// The bytes end inside a field.
    #[error("truncated")]
    Truncated,
    /// A length or count above its limit.
    #[error("field too long")]
    TooLong,
    /// A string is not UTF-8.
    #[error("invalid UTF-8")]
    Utf8,
    /// Unknown message kind.
    #[error("unknown kind {0}")]
    Kind(u8),
    /// Bytes left after the body.
    #[error("trailing bytes")]
    Trailing,
}

const PREFIX: u8 = 1;
const SPECULATIVE: u8 = 2;
const DELTA: u8 = 3;
const TOTALS: u8 = 4;
const SESSION: u8 = 5;
const HEARTBEAT: u8 = 6;

/// Encodes `message`. Fields over the limits are cut to them (the publisher's own data; a
/// cut key list still names a valid prefix).
pub fn encode(message: &Message) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.push(VERSION);
    short_str(&mut out, &message.replica, MAX_REPLICA_ID);
    out.extend_from_slice(&message.published_ms.to_le_bytes());
    let kind = match &message.body {
        Body::Heartbeat => HEARTBEAT,
        Body::Update(SharedUpdate::PrefixRecorded { .. }) => PREFIX,
        Body::Update(SharedUpdate::Speculative { .. }) => SPECULATIVE,
        Body::Update(SharedUpdate::InFlightDelta { .. }) => DELTA,
        Body::Update(SharedUpdate::InFlightTotals { .. }) => TOTALS,
        Body::Update(SharedUpdate::SessionBound { .. }) => SESSION,
    };
    out.push(kind);
    short_str(&mut out, &message.plugin, u8::MAX as usize);
    let Body::Update(update) = &message.body else { return out };
    match update {
        SharedUpdate::PrefixRecorded { endpoint, keys } | SharedUpdate::Speculative { endpoint, keys } => {
            string(&mut out, endpoint);
            let keys = &keys[..keys.len().min(MAX_ITEMS)];
            out.extend_from_slice(&(keys.len() as u32).to_le_bytes());
            out.reserve(keys.len() * 8);
            for k in keys {
                out.extend_from_slice(&k.to_le_bytes());
            }
        }
        SharedUpdate::InFlightDelta { endpoint, requests, tokens } => {
            string(&mut out, endpoint);
            out.extend_from_slice(&requests.to_le_bytes());
            out.extend_from_slice(&tokens.to_le_bytes());
        }
        SharedUpdate::InFlightTotals { loads } => {
            let loads = &loads[..loads.len().min(MAX_ITEMS)];
            out.extend_from_slice(&(loads.len() as u32).to_le_bytes());
            for (endpoint, requests, tokens) in loads {
                string(&mut out, endpoint);
                out.extend_from_slice(&requests.to_le_bytes());
                out.extend_from_slice(&tokens.to_le_bytes());
            }
        }
        SharedUpdate::SessionBound { session, endpoint } => {
            string(&mut out, session);
            string(&mut out, endpoint);
        }
    }
    out
}

fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn short_str(out: &mut Vec<u8>, s: &str, max: usize) {
    let s = cut(s, max.min(u8::MAX as usize));
    out.push(s.len() as u8);
    out.extend_from_slice(s.as_bytes());
}

fn string(out: &mut Vec<u8>, s: &str) {
    let s = cut(s, MAX_STR);
    out.extend_from_slice(&(s.len() as u16).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// A bounds-checked reader over the message bytes.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.bytes.len() < n {
            return Err(DecodeError::Truncated);
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        self.array().map(u64::from_le_bytes)
    }

    fn i64(&mut self) -> Result<i64, DecodeError> {
        self.array().map(i64::from_le_bytes)
    }

    fn count(&mut self, item_bytes: usize) -> Result<usize, DecodeError> {
        let n = u32::from_le_bytes(self.array()?) as usize;
        if n > MAX_ITEMS {
            return Err(DecodeError::TooLong);
        }
        // Refuse counts the remaining bytes cannot hold before allocating for them.
        if self.bytes.len() < n.saturating_mul(item_bytes) {
            return Err(DecodeError::Truncated);
        }
        Ok(n)
    }

    fn utf8(&mut self, len: usize, max: usize) -> Result<&'a str, DecodeError> {
        if len > max {
            return Err(DecodeError::TooLong);
        }
        std::str::from_utf8(self.take(len)?).map_err(|_| DecodeError::Utf8)
    }

    fn short_str(&mut self, max: usize) -> Result<&'a str, DecodeError> {
        let len = self.u8()? as usize;
        self.utf8(len, max)
    }

    fn string(&mut self) -> Result<&'a str, DecodeError> {
        let len = u16::from_le_bytes(self.array()?) as usize;
        self.utf8(len, MAX_STR)
    }

    fn keys(&mut self) -> Result<Arc<[u64]>, DecodeError> {
        let n = self.count(8)?;
        (0..n).map(|_| self.u64()).collect()
    }
}

/// Decodes one message.
pub fn decode(bytes: &[u8]) -> Result<Message, DecodeError> {
    let mut r = Reader { bytes };
    let version = r.u8()?;
    if version != VERSION {
        return Err(DecodeError::Version(version));
    }
    let replica = Arc::from(r.short_str(MAX_REPLICA_ID)?);
    let published_ms = r.u64()?;
    let kind = r.u8()?;
    let plugin = Arc::from(r.short_str(u8::MAX as usize)?);
    let body = match kind {
        HEARTBEAT => Body::Heartbeat,
        PREFIX | SPECULATIVE => {
            let endpoint = Arc::from(r.string()?);
            let keys = r.keys()?;
            Body::Update(if kind == PREFIX {
                SharedUpdate::PrefixRecorded { endpoint, keys }
            } else {
                SharedUpdate::Speculative { endpoint, keys }
            })
        }
        DELTA => {
            let endpoint = Arc::from(r.string()?);
            Body::Update(SharedUpdate::InFlightDelta { endpoint, requests: r.i64()?, tokens: r.i64()? })
        }
        TOTALS => {
            // Smallest entry: empty name (2) + two u64 (16).
            let n = r.count(18)?;
            let loads =
                (0..n).map(|_| Ok((Arc::from(r.string()?), r.u64()?, r.u64()?))).collect::<Result<_, DecodeError>>()?;
            Body::Update(SharedUpdate::InFlightTotals { loads })
        }
        SESSION => {
            let session = r.string()?.to_string();
            Body::Update(SharedUpdate::SessionBound { session, endpoint: Arc::from(r.string()?) })
        }
        other => return Err(DecodeError::Kind(other)),
    };
    if !r.bytes.is_empty() {
        return Err(DecodeError::Trailing);
    }
    Ok(Message { replica, published_ms, plugin, body })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn message(body: Body) -> Message {
        Message { replica: "r-1".into(), published_ms: 1_700_000_000_123, plugin: "approx".into(), body }
    }

    fn every_kind() -> Vec<Message> {
        let keys: Arc<[u64]> = vec![1, u64::MAX, 42].into();
        vec![
            message(Body::Heartbeat),
            message(Body::Update(SharedUpdate::PrefixRecorded { endpoint: "pod-a".into(), keys: keys.clone() })),
            message(Body::Update(SharedUpdate::Speculative { endpoint: "pod-b".into(), keys })),
            message(Body::Update(SharedUpdate::InFlightDelta { endpoint: "pod-a".into(), requests: -1, tokens: -900 })),
            message(Body::Update(SharedUpdate::InFlightTotals {
                loads: vec![("pod-a".into(), 3, 300), ("pod-b".into(), 0, 0)],
            })),
            message(Body::Update(SharedUpdate::SessionBound { session: "chat-7".into(), endpoint: "pod-c".into() })),
        ]
    }

    #[test]
    fn every_kind_round_trips() {
        for m in every_kind() {
            assert_eq!(decode(&encode(&m)), Ok(m));
        }
    }

    #[test]
    fn bad_bytes_are_errors() {
        let good = encode(&every_kind()[1]);
        assert_eq!(decode(&[]), Err(DecodeError::Truncated));
        assert_eq!(decode(&[2, 0]), Err(DecodeError::Version(2)));
        assert_eq!(decode(&good[..good.len() - 1]), Err(DecodeError::Truncated));
        let mut trailing = good.clone();
        trailing.push(0);
        assert_eq!(decode(&trailing), Err(DecodeError::Trailing));
        let mut kind = encode(&every_kind()[0]);
        kind[1 + 1 + 3 + 8] = 99;
        assert_eq!(decode(&kind), Err(DecodeError::Kind(99)));
        // A key count far beyond the bytes present is refused before allocating.
        let mut huge = encode(&message(Body::Update(SharedUpdate::PrefixRecorded {
            endpoint: "e".into(),
            keys: Arc::from(Vec::new()),
        })));
        let at = huge.len() - 4;
        huge[at..].copy_from_slice(&60_000u32.to_le_bytes());
        assert_eq!(decode(&huge), Err(DecodeError::Truncated));
        huge[at..].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode(&huge), Err(DecodeError::TooLong));
    }

    #[test]
    fn long_fields_are_cut_on_encode() {
        let long = "é".repeat(MAX_STR);
        let m = message(Body::Update(SharedUpdate::SessionBound { session: long, endpoint: "e".into() }));
        let Ok(Message { body: Body::Update(SharedUpdate::SessionBound { session, .. }), .. }) = decode(&encode(&m))
        else {
            panic!("decodes")
        };
        assert!(session.len() <= MAX_STR && session.chars().all(|c| c == 'é'));
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode(&bytes);
        }

        #[test]
        fn mutated_messages_never_panic(index in 0usize..6, at in 0usize..64, value in any::<u8>()) {
            let mut bytes = encode(&every_kind()[index]);
            let at = at % bytes.len();
            bytes[at] = value;
            let _ = decode(&bytes);
        }
    }
}
