//! The sync entry format, version 2 (docs/replicas.md#entry-format-version-2): one stream
//! entry carries a batch of one replica's [`Message`]s in a compact little-endian binary
//! layout (the replica id and a base time once, then per update a time offset, its kind, its
//! plugin and its body). The only module that knows the bytes. Decoding is total: any input
//! gives messages or a [`DecodeError`], never a panic, and no allocation exceeds the
//! declared limits. [`header`] reads only the fixed part, so a reader skips its own entries
//! without decoding them.

use std::sync::Arc;

use crate::framework::replica::SharedUpdate;

/// Format version written and understood.
pub const VERSION: u8 = 2;
/// Longest string field (endpoint, session, plugin and replica names), in bytes.
pub const MAX_STR: usize = 4096;
/// Most block keys or load entries in one update.
pub const MAX_ITEMS: usize = 65_536;
/// Longest replica id.
pub const MAX_REPLICA_ID: usize = 64;
/// Most updates in one entry.
pub const MAX_BATCH: usize = 4096;

/// What a message carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    /// A plugin's update.
    Update(SharedUpdate),
    /// A liveness beat (no plugin).
    Heartbeat,
}

/// One update of one replica.
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

/// Why bytes are not a version-2 entry.
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
    /// Bytes left after the last update.
    #[error("trailing bytes")]
    Trailing,
}

const PREFIX: u8 = 1;
const SPECULATIVE: u8 = 2;
const DELTA: u8 = 3;
const TOTALS: u8 = 4;
const SESSION: u8 = 5;
const HEARTBEAT: u8 = 6;

/// Builds one entry from messages of one replica, in order. The first message's time is the
/// entry's base; each message stores its offset from it (a clock that stepped back gives 0).
#[derive(Debug)]
pub struct EntryWriter {
    out: Vec<u8>,
    base_ms: u64,
    count: u32,
    count_at: usize,
}

impl EntryWriter {
    /// An empty entry of replica `replica` whose base time is `base_ms`.
    pub fn new(replica: &str, base_ms: u64) -> Self {
        let mut out = Vec::with_capacity(1024);
        out.push(VERSION);
        short_str(&mut out, replica, MAX_REPLICA_ID);
        out.extend_from_slice(&base_ms.to_le_bytes());
        let count_at = out.len();
        out.extend_from_slice(&0u32.to_le_bytes());
        Self { out, base_ms, count: 0, count_at }
    }

    /// Messages written so far.
    pub fn count(&self) -> usize {
        self.count as usize
    }

    /// Bytes written so far.
    pub fn bytes(&self) -> usize {
        self.out.len()
    }

    /// True once the entry holds [`MAX_BATCH`] messages.
    pub fn is_full(&self) -> bool {
        self.count() >= MAX_BATCH
    }

    /// Appends `message` (its replica is the entry's; fields over the limits are cut to
    /// them: the publisher's own data, and a cut key list still names a valid prefix).
    pub fn push(&mut self, message: &Message) {
        let out = &mut self.out;
        let offset = message.published_ms.saturating_sub(self.base_ms).min(u64::from(u32::MAX));
        out.extend_from_slice(&(offset as u32).to_le_bytes());
        let kind = match &message.body {
            Body::Heartbeat => HEARTBEAT,
            Body::Update(SharedUpdate::PrefixRecorded { .. }) => PREFIX,
            Body::Update(SharedUpdate::Speculative { .. }) => SPECULATIVE,
            Body::Update(SharedUpdate::InFlightDelta { .. }) => DELTA,
            Body::Update(SharedUpdate::InFlightTotals { .. }) => TOTALS,
            Body::Update(SharedUpdate::SessionBound { .. }) => SESSION,
        };
        out.push(kind);
        short_str(out, &message.plugin, u8::MAX as usize);
        self.count += 1;
        let Body::Update(update) = &message.body else { return };
        match update {
            SharedUpdate::PrefixRecorded { endpoint, keys } | SharedUpdate::Speculative { endpoint, keys } => {
                string(out, endpoint);
                let keys = &keys[..keys.len().min(MAX_ITEMS)];
                out.extend_from_slice(&(keys.len() as u32).to_le_bytes());
                out.reserve(keys.len() * 8);
                for k in keys {
                    out.extend_from_slice(&k.to_le_bytes());
                }
            }
            SharedUpdate::InFlightDelta { endpoint, requests, tokens } => {
                string(out, endpoint);
                out.extend_from_slice(&requests.to_le_bytes());
                out.extend_from_slice(&tokens.to_le_bytes());
            }
            SharedUpdate::InFlightTotals { loads } => {
                let loads = &loads[..loads.len().min(MAX_ITEMS)];
                out.extend_from_slice(&(loads.len() as u32).to_le_bytes());
                for (endpoint, requests, tokens) in loads {
                    string(out, endpoint);
                    out.extend_from_slice(&requests.to_le_bytes());
                    out.extend_from_slice(&tokens.to_le_bytes());
                }
            }
            SharedUpdate::SessionBound { session, endpoint } => {
                string(out, session);
                string(out, endpoint);
            }
        }
    }

    /// The entry's bytes.
    pub fn finish(mut self) -> Vec<u8> {
        self.out[self.count_at..self.count_at + 4].copy_from_slice(&self.count.to_le_bytes());
        self.out
    }
}

/// One entry holding `messages` (at most [`MAX_BATCH`] of them; the replica and base time
/// are the first message's): for tests and tools that write entries themselves.
pub fn encode(messages: &[Message]) -> Vec<u8> {
    let first = messages.first();
    let mut entry = EntryWriter::new(first.map_or("", |m| &m.replica), first.map_or(0, |m| m.published_ms));
    for message in messages.iter().take(MAX_BATCH) {
        entry.push(message);
    }
    entry.finish()
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

/// A bounds-checked reader over the entry bytes.
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

    fn u32(&mut self) -> Result<u32, DecodeError> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        self.array().map(u64::from_le_bytes)
    }

    fn i64(&mut self) -> Result<i64, DecodeError> {
        self.array().map(i64::from_le_bytes)
    }

    /// A count of at most `max` items of at least `item_bytes` bytes each.
    fn count(&mut self, max: usize, item_bytes: usize) -> Result<usize, DecodeError> {
        let n = self.u32()? as usize;
        if n > max {
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
        let n = self.count(MAX_ITEMS, 8)?;
        let bytes = self.take(n * 8)?;
        Ok(bytes.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default())).collect())
    }
}

/// The fixed part of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header<'a> {
    /// Publishing replica.
    pub replica: &'a str,
    /// The first message's publish time, milliseconds since the Unix epoch.
    pub base_ms: u64,
    /// Messages in the entry (as declared; [`decode`] checks them).
    pub count: usize,
}

fn read_header<'a>(r: &mut Reader<'a>) -> Result<Header<'a>, DecodeError> {
    let version = r.u8()?;
    if version != VERSION {
        return Err(DecodeError::Version(version));
    }
    let replica = r.short_str(MAX_REPLICA_ID)?;
    let base_ms = r.u64()?;
    // Smallest message: offset (4), kind (1), empty plugin (1).
    let count = r.count(MAX_BATCH, 6)?;
    Ok(Header { replica, base_ms, count })
}

/// Reads only the fixed part of an entry.
pub fn header(bytes: &[u8]) -> Result<Header<'_>, DecodeError> {
    read_header(&mut Reader { bytes })
}

/// Decodes a whole entry (all its messages, or an error for the entry).
pub fn decode(bytes: &[u8]) -> Result<Vec<Message>, DecodeError> {
    let mut r = Reader { bytes };
    let head = read_header(&mut r)?;
    let replica: Arc<str> = Arc::from(head.replica);
    let mut plugin: Arc<str> = Arc::from("");
    let mut messages = Vec::with_capacity(head.count);
    for _ in 0..head.count {
        let published_ms = head.base_ms.saturating_add(u64::from(r.u32()?));
        let kind = r.u8()?;
        let name = r.short_str(u8::MAX as usize)?;
        // Entries mostly hold runs of one plugin's updates: share its name.
        if *plugin != *name {
            plugin = Arc::from(name);
        }
        let body = body(&mut r, kind)?;
        messages.push(Message { replica: replica.clone(), published_ms, plugin: plugin.clone(), body });
    }
    if !r.bytes.is_empty() {
        return Err(DecodeError::Trailing);
    }
    Ok(messages)
}

fn body(r: &mut Reader<'_>, kind: u8) -> Result<Body, DecodeError> {
    Ok(match kind {
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
            let n = r.count(MAX_ITEMS, 18)?;
            let loads =
                (0..n).map(|_| Ok((Arc::from(r.string()?), r.u64()?, r.u64()?))).collect::<Result<_, DecodeError>>()?;
            Body::Update(SharedUpdate::InFlightTotals { loads })
        }
        SESSION => {
            let session = r.string()?.to_string();
            Body::Update(SharedUpdate::SessionBound { session, endpoint: Arc::from(r.string()?) })
        }
        other => return Err(DecodeError::Kind(other)),
    })
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
    fn every_kind_round_trips_alone_and_in_one_entry() {
        for m in every_kind() {
            assert_eq!(decode(&encode(std::slice::from_ref(&m))), Ok(vec![m]));
        }
        let mut all = every_kind();
        for (i, m) in all.iter_mut().enumerate() {
            m.published_ms += i as u64 * 7;
            if i % 2 == 0 {
                m.plugin = "other".into();
            }
        }
        let bytes = encode(&all);
        assert_eq!(decode(&bytes), Ok(all.clone()));
        assert_eq!(header(&bytes), Ok(Header { replica: "r-1", base_ms: all[0].published_ms, count: all.len() }));
    }

    #[test]
    fn a_time_before_the_base_is_written_as_the_base() {
        let mut later = every_kind()[0].clone();
        later.published_ms += 50;
        let earlier = every_kind()[1].clone();
        let decoded = decode(&encode(&[later.clone(), earlier])).unwrap();
        assert_eq!(decoded[1].published_ms, later.published_ms);
    }

    #[test]
    fn bad_bytes_are_errors() {
        let good = encode(&every_kind()[1..2]);
        assert_eq!(decode(&[]), Err(DecodeError::Truncated));
        assert_eq!(decode(&[1, 0]), Err(DecodeError::Version(1)));
        assert_eq!(header(&[9, 0]), Err(DecodeError::Version(9)));
        assert_eq!(decode(&good[..good.len() - 1]), Err(DecodeError::Truncated));
        let mut trailing = good.clone();
        trailing.push(0);
        assert_eq!(decode(&trailing), Err(DecodeError::Trailing));
        // version, replica "r-1", base, count, then the first message's offset and its kind.
        let kind_at = 1 + 1 + 3 + 8 + 4 + 4;
        let mut kind = encode(&every_kind()[..1]);
        kind[kind_at] = 99;
        assert_eq!(decode(&kind), Err(DecodeError::Kind(99)));
        let count_at = 1 + 1 + 3 + 8;
        let mut many = encode(&every_kind()[..1]);
        many[count_at..count_at + 4].copy_from_slice(&(MAX_BATCH as u32 + 1).to_le_bytes());
        assert_eq!(decode(&many), Err(DecodeError::TooLong));
        many[count_at..count_at + 4].copy_from_slice(&(MAX_BATCH as u32).to_le_bytes());
        assert_eq!(decode(&many), Err(DecodeError::Truncated), "more messages declared than bytes can hold");
        // A key count far beyond the bytes present is refused before allocating.
        let mut huge = encode(&[message(Body::Update(SharedUpdate::PrefixRecorded {
            endpoint: "e".into(),
            keys: Arc::from(Vec::new()),
        }))]);
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
        let Ok(decoded) = decode(&encode(&[m])) else { panic!("decodes") };
        let Body::Update(SharedUpdate::SessionBound { session, .. }) = &decoded[0].body else { panic!("a binding") };
        assert!(session.len() <= MAX_STR && session.chars().all(|c| c == 'é'));
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode(&bytes);
            let _ = header(&bytes);
        }

        #[test]
        fn mutated_entries_never_panic(at in 0usize..256, value in any::<u8>()) {
            let mut bytes = encode(&every_kind());
            let at = at % bytes.len();
            bytes[at] = value;
            let _ = decode(&bytes);
        }
    }
}
