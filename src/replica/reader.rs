//! The reading side: catch-up and follow. The first catch-up waits for the endpoint source's
//! first sync (a restarted replica in Kubernetes would otherwise replay prefix entries for
//! pods it has not discovered yet, and skip them). After every (re)connect the reader counts a
//! resync, checks whether the stream was trimmed past its position (a gap), reads the
//! retained entries after its position in pages without blocking (catch-up: no lag
//! recorded), then follows with `XREAD BLOCK`. Its position is the id of the last entry it
//! handled, so a reconnect resumes where it stopped. Replies are parsed defensively: an entry
//! without a well-formed `m` field is counted as malformed. Each entry goes to the applier
//! whole (one entry = one batch of one replica's updates), and the task yields between the
//! entries of a page, so the ext_proc streams sharing its worker wait for one entry at most.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use redis::aio::MultiplexedConnection;
use tokio_util::sync::CancellationToken;

use super::applier::Applier;
use super::conn::{Backoff, Health, Role, connect};
use super::metrics::SyncMetrics;
use super::settings::SyncSettings;

/// Entries per read (an entry holds up to `publisher::ENTRY_BYTES` of updates, so a page is
/// at most a few MB).
const PAGE: usize = 128;
/// How long one `XREAD BLOCK` waits for new entries.
const BLOCK: Duration = Duration::from_secs(1);

/// A stream entry id `ms-seq`, ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct EntryId(u64, u64);

impl EntryId {
    /// Before every entry.
    pub const START: EntryId = EntryId(0, 0);

    /// Parses `ms-seq`.
    pub fn parse(s: &[u8]) -> Option<Self> {
        let s = std::str::from_utf8(s).ok()?;
        let (ms, seq) = s.split_once('-')?;
        Some(EntryId(ms.parse().ok()?, seq.parse().ok()?))
    }
}

impl std::fmt::Display for EntryId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.0, self.1)
    }
}

/// Reads the stream into `applier` until `cancel`.
pub async fn run(
    client: redis::Client,
    settings: Arc<SyncSettings>,
    applier: Arc<Applier>,
    health: Arc<Health>,
    metrics: SyncMetrics,
    mut endpoints_synced: tokio::sync::watch::Receiver<bool>,
    cancel: CancellationToken,
) {
    tokio::select! {
        _ = cancel.cancelled() => return,
        // A source that stops before syncing (its sender dropped): catch up anyway.
        _ = endpoints_synced.wait_for(|synced| *synced) => {}
    }
    let mut position = EntryId::START;
    let mut backoff = Backoff::default();
    loop {
        let outcome = tokio::select! {
            _ = cancel.cancelled() => return,
            r = session(&client, &settings, &applier, &health, &metrics, &mut position, &mut backoff) => r,
        };
        if let Err(error) = outcome {
            health.set(Role::Reader, false, &error);
        }
        if backoff.wait(&cancel).await.is_err() {
            return;
        }
    }
}

/// One connection's life: connect, catch up, follow; returns on the first error.
async fn session(
    client: &redis::Client,
    settings: &SyncSettings,
    applier: &Applier,
    health: &Health,
    metrics: &SyncMetrics,
    position: &mut EntryId,
    backoff: &mut Backoff,
) -> redis::RedisResult<()> {
    let mut conn = connect(client, BLOCK + Duration::from_secs(2)).await?;
    *backoff = Backoff::default();
    metrics.resyncs.inc();
    if *position != EntryId::START {
        let first: Value = redis::cmd("XRANGE")
            .arg(&settings.key)
            .arg("-")
            .arg("+")
            .arg("COUNT")
            .arg(1)
            .query_async(&mut conn)
            .await?;
        let first = entries(first).into_iter().next().and_then(|(id, _)| EntryId::parse(&id));
        if first.is_some_and(|f| f > *position) {
            metrics.gaps.inc();
            tracing::warn!(%position, "Replica sync: the stream was trimmed past this replica's position; some updates were lost");
        }
    }
    health.set_up(Role::Reader);
    // Catch-up: pages without blocking until a short page.
    loop {
        let n = read(&mut conn, settings, applier, position, None).await?;
        if n < PAGE {
            break;
        }
    }
    loop {
        read(&mut conn, settings, applier, position, Some(BLOCK)).await?;
    }
}

/// One `XREAD` after `position`: applies the entries, advances `position`, returns how many.
/// The task yields between entries, so a decision on the same worker waits for at most one
/// entry's updates, not for a whole page.
async fn read(
    conn: &mut MultiplexedConnection,
    settings: &SyncSettings,
    applier: &Applier,
    position: &mut EntryId,
    block: Option<Duration>,
) -> redis::RedisResult<usize> {
    let mut cmd = redis::cmd("XREAD");
    cmd.arg("COUNT").arg(PAGE);
    if let Some(block) = block {
        cmd.arg("BLOCK").arg(block.as_millis() as u64);
    }
    cmd.arg("STREAMS").arg(&settings.key).arg(position.to_string());
    let reply: Value = cmd.query_async(conn).await?;
    let live = block.is_some();
    let mut n = 0;
    for stream in items(reply) {
        let mut parts = items(stream).into_iter();
        let (Some(_key), Some(list)) = (parts.next(), parts.next()) else { continue };
        for (id, fields) in entries(list) {
            if n > 0 {
                // Between entries, let the decisions queued on this worker run: a page of
                // 128 entries of peers' updates is milliseconds of work (catch-up, bursts).
                tokio::task::yield_now().await;
            }
            n += 1;
            if let Some(id) = EntryId::parse(&id) {
                *position = (*position).max(id);
            }
            applier.receive(field(fields, b"m").as_deref(), live);
        }
    }
    Ok(n)
}

/// The elements of an array (or the key/value pairs of a RESP3 map, flattened); anything
/// else is empty.
fn items(value: Value) -> Vec<Value> {
    match value {
        Value::Array(v) | Value::Set(v) => v,
        Value::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
        _ => Vec::new(),
    }
}

/// `[[id, [field, value, ...]], ...]` -> (id, fields).
fn entries(value: Value) -> Vec<(Vec<u8>, Vec<Value>)> {
    items(value)
        .into_iter()
        .filter_map(|entry| {
            let mut parts = items(entry).into_iter();
            match (parts.next(), parts.next()) {
                (Some(Value::BulkString(id)), Some(fields)) => Some((id, items(fields))),
                (Some(Value::SimpleString(id)), Some(fields)) => Some((id.into_bytes(), items(fields))),
                _ => None,
            }
        })
        .collect()
}

/// The value of field `name` in a flat `[field, value, ...]` list.
fn field(fields: Vec<Value>, name: &[u8]) -> Option<Vec<u8>> {
    let mut it = fields.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        if matches!(&k, Value::BulkString(b) if b == name) {
            return match v {
                Value::BulkString(b) => Some(b),
                _ => None,
            };
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_ids_parse_and_order() {
        assert_eq!(EntryId::parse(b"1700000000000-3"), Some(EntryId(1_700_000_000_000, 3)));
        assert!(EntryId::parse(b"17").is_none() && EntryId::parse(b"a-1").is_none());
        assert!(EntryId(5, 0) > EntryId(4, 99) && EntryId(5, 1) > EntryId(5, 0));
        assert_eq!(EntryId(5, 1).to_string(), "5-1");
    }

    #[test]
    fn replies_of_the_wrong_shape_yield_nothing() {
        assert!(entries(Value::Nil).is_empty());
        assert!(entries(Value::Array(vec![Value::Int(1)])).is_empty());
        let fields = vec![Value::BulkString(b"x".to_vec()), Value::Int(3), Value::BulkString(b"m".to_vec())];
        assert_eq!(field(fields, b"m"), None, "odd field list: no value for m");
        let fields = vec![Value::BulkString(b"m".to_vec()), Value::Int(3)];
        assert_eq!(field(fields, b"m"), None, "m is not bytes");
    }
}
