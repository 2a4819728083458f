//! SUB sockets: the central bound socket, one connecting socket per
//! endpoint in pod-discovery mode, and the endpoint-list manager.
//!
//! Readers turn frames into [`Envelope`]s and hand them to the worker queues
//! with `try_send` (a full queue drops and counts; the worker later sees the
//! sequence gap). Per-peer receive errors drop only that peer and are counted
//! (`epp_kv_rejected_frames_total` when a [`WireLimits`] bound was crossed).
//! Every reader runs under [`supervise`], so a panic or an unexpected stop
//! restarts it (the central socket is bound again at the same address). A
//! connecting socket retries its first connect with exponential backoff;
//! afterwards the `zeromq` crate reconnects by itself, and a publisher that
//! restarted shows up as a sequence restart. Each socket's monitor feeds
//! `epp_kv_peer_events_total` (connected, reconnected, disconnected).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinHandle;
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;
use zeromq::{AcceptLimit, Socket, SocketEvent, SocketRecv, SubSocket};

use super::frames::{self, pod_address, topic};
use super::limits::{WireLimits, rejection_reason};
use super::supervise::{Active, Backoff, Stopped, supervise};
use super::worker::{Envelope, Job, shard_of};
use super::{KvEventSource, SubscriberConfig, SubscriberError};
use crate::kvcache::board::Subscription;
use crate::kvcache::metrics::KvCacheMetrics;

/// Queues into the workers plus the received-message counter behind `flush`.
#[derive(Debug)]
pub struct Intake {
    pub jobs: Vec<mpsc::Sender<Job>>,
    pub metrics: Arc<KvCacheMetrics>,
    pub received: AtomicU64,
    pub notify: Notify,
    pub topic_filter: String,
    /// Wire limits of every SUB socket.
    pub limits: WireLimits,
    /// Restart and reconnect delays.
    pub backoff: Backoff,
}

impl Intake {
    fn worker(&self, endpoint: &str) -> &mpsc::Sender<Job> {
        &self.jobs[shard_of(endpoint, self.jobs.len())]
    }

    fn mark_received(&self) {
        self.received.fetch_add(1, Ordering::AcqRel);
        self.notify.notify_waiters();
    }

    /// Handles one raw message from a socket, attributing it with `attribute`.
    /// The received counters move last, once the message is queued or dropped.
    fn accept(&self, raw: zeromq::ZmqMessage, attribute: impl FnOnce(&frames::Frames) -> Option<Source>) {
        if let Err(reason) = self.route(raw, attribute) {
            self.metrics.dropped.with_label_values(&[reason]).inc();
        }
        self.metrics.messages_received.inc();
        self.mark_received();
    }

    fn route(
        &self,
        raw: zeromq::ZmqMessage,
        attribute: impl FnOnce(&frames::Frames) -> Option<Source>,
    ) -> Result<(), &'static str> {
        let f = match frames::parse(raw.into_vec()) {
            Ok(f) => f,
            Err(e) => {
                self.metrics.malformed_messages.inc();
                tracing::debug!(error = %e, "Malformed KV event message");
                return Ok(());
            }
        };
        if !f.topic.starts_with(self.topic_filter.as_bytes()) {
            return Err("topic_filter");
        }
        let src = attribute(&f).ok_or("unknown_endpoint")?;
        let env = Envelope {
            endpoint: src.name,
            topic: f.topic,
            seq: f.seq,
            payload: f.payload,
            rank: src.rank,
            replay: src.replay,
        };
        self.worker(&env.endpoint).try_send(Job::Message(env)).map_err(|_| "queue_full")
    }

    /// Queues a control job (waits for room: control is never dropped).
    pub async fn control(&self, endpoint: &str, job: Job) {
        let _ = self.worker(endpoint).send(job).await;
    }
}

/// Where a source's messages go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub name: Arc<str>,
    pub rank: u32,
    pub replay: Option<Arc<str>>,
}

/// Topic pod id -> source, for the central socket.
pub type Attribution = HashMap<(IpAddr, Option<u16>), Source>;

fn replay_url(cfg: &SubscriberConfig, s: &KvEventSource) -> Option<Arc<str>> {
    let port = cfg.replay_socket_port?.checked_add(s.rank)?;
    Some(format!("tcp://{}", SocketAddr::new(s.address, port)).into())
}

fn dial_url(cfg: &SubscriberConfig, s: &KvEventSource) -> Option<String> {
    match &s.kv_events_endpoint {
        Some(e) => Some(e.clone()),
        None => Some(format!("tcp://{}", SocketAddr::new(s.address, cfg.socket_port.checked_add(s.rank)?))),
    }
}

fn build_attribution(cfg: &SubscriberConfig, list: &[KvEventSource]) -> Attribution {
    let mut map = Attribution::new();
    for s in list {
        let src = Source { name: s.name.clone(), rank: u32::from(s.rank), replay: replay_url(cfg, s) };
        map.entry((s.address, None)).or_insert_with(|| src.clone());
        map.insert((s.address, Some(s.port)), src);
    }
    map
}

/// The central socket, its monitor (created before the bind, so no accepted peer is missed)
/// and its resolved endpoint (port 0 resolved).
pub struct Central {
    sock: SubSocket,
    monitor: Monitor,
    /// Resolved endpoint, e.g. `tcp://127.0.0.1:40123`.
    pub bound: String,
}

/// A socket's monitor stream.
type Monitor = std::pin::Pin<Box<dyn tokio_stream::Stream<Item = SocketEvent> + Send>>;

/// Creates the central SUB socket (with the wire limits and the connection cap, whose
/// rejections are counted in `metrics`), subscribes and binds it at `endpoint`.
pub async fn bind_central(
    endpoint: &str,
    topic_filter: &str,
    limits: &WireLimits,
    metrics: &KvCacheMetrics,
) -> Result<Central, SubscriberError> {
    let mut options = limits.socket_options();
    options.accept_limit(connection_cap(limits.max_connections, metrics));
    let mut sock = SubSocket::with_options(options);
    let monitor: Monitor = Box::pin(sock.monitor());
    sock.subscribe(topic_filter)
        .await
        .map_err(|source| SubscriberError::Subscribe { filter: topic_filter.to_owned(), source })?;
    // The zeromq crate does not accept libzmq's `*` wildcard host.
    let bind_at = endpoint.replacen("tcp://*:", "tcp://0.0.0.0:", 1);
    let bound =
        sock.bind(&bind_at).await.map_err(|source| SubscriberError::Bind { endpoint: endpoint.to_owned(), source })?;
    Ok(Central { sock, monitor, bound: bound.to_string() })
}

/// The central socket's cap of `max` connections: each one closed over it is counted in
/// `epp_kv_connections_rejected_total{reason="limit"}`, logged at warn the first time and at
/// debug afterwards (a flood of connections must not flood the log).
fn connection_cap(max: usize, metrics: &KvCacheMetrics) -> Arc<AcceptLimit> {
    let rejected = metrics.connections_rejected.with_label_values(&["limit"]);
    AcceptLimit::new(max, move |peer| {
        if rejected.get() == 0 {
            tracing::warn!(%peer, max, "KV event connection closed: maxConnections reached");
        } else {
            tracing::debug!(%peer, max, "KV event connection closed: maxConnections reached");
        }
        rejected.inc();
    })
}

/// Reads the central bound socket until cancelled, under supervision: a failed incarnation
/// is replaced by a new socket bound at the resolved address of `first`.
pub async fn run_central(
    first: Central,
    intake: Arc<Intake>,
    attribution: Arc<ArcSwap<Attribution>>,
    cancel: CancellationToken,
) {
    let bound = first.bound.clone();
    let mut first = Some(first);
    let (metrics, backoff) = (intake.metrics.clone(), intake.backoff);
    supervise("central", metrics, cancel.clone(), backoff, move |_| {
        let sock = first.take();
        let (bound, intake, attribution, cancel) = (bound.clone(), intake.clone(), attribution.clone(), cancel.clone());
        async move {
            let Central { mut sock, monitor, .. } = match sock {
                Some(s) => s,
                None => {
                    let rebound = bind_central(&bound, &intake.topic_filter, &intake.limits, &intake.metrics).await;
                    rebound.map_err(|e| {
                        intake.metrics.zmq_errors.with_label_values(&["bind"]).inc();
                        format!("{e}: {}", std::error::Error::source(&e).map(|s| s.to_string()).unwrap_or_default())
                    })?
                }
            };
            let _active = Active::new(&intake.metrics.active_subscribers);
            let board = intake.metrics.subscriptions.register(None, bound.clone());
            let attribute = |f: &frames::Frames| {
                let pod = pod_address(topic(&f.topic).pod)?;
                attribution.load().get(&pod).cloned()
            };
            let on_message = |m| intake.accept(m, attribute);
            let reader =
                ReceiveLoop { intake: &intake, endpoint: None, connected_as: "connected", board: &board.state };
            reader.read_until_cancelled(&mut sock, monitor, &cancel, on_message).await;
            Ok(())
        }
    })
    .await;
}

/// Connects to one endpoint's publisher and reads it until cancelled (one incarnation).
async fn run_source(dial: String, src: Source, intake: Arc<Intake>, cancel: CancellationToken) -> Stopped {
    let (initial, max) = (intake.backoff.initial, intake.backoff.max);
    let mut delay = initial;
    let mut failures = 0u32;
    let board = intake.metrics.subscriptions.register(Some(src.name.clone()), dial.clone());
    let mut sock = loop {
        let mut s = SubSocket::with_options(intake.limits.socket_options());
        let connected = tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            r = async { s.subscribe(&intake.topic_filter).await?; s.connect(&dial).await } => r,
        };
        match connected {
            Ok(()) => break s,
            Err(e) => {
                intake.metrics.zmq_errors.with_label_values(&["connect"]).inc();
                count_rejection(&intake, Some(&src.name), &e);
                if failures == 0 {
                    tracing::warn!(endpoint = %src.name, dial, error = %e, "KV event publisher not reachable; retrying");
                }
                failures += 1;
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(max);
    };
    tracing::info!(endpoint = %src.name, dial, "KV event subscriber connected");
    let _active = Active::new(&intake.metrics.active_subscribers);
    intake.metrics.peer_events.with_label_values(&["connected"]).inc();
    board.state.peer_connected();
    // The monitor starts after the first connect: any later `Connected` is a reconnection.
    let name = src.name.clone();
    let on_message = |m| intake.accept(m, |_| Some(src.clone()));
    let monitor: Monitor = Box::pin(sock.monitor());
    let reader =
        ReceiveLoop { intake: &intake, endpoint: Some(&name), connected_as: "reconnected", board: &board.state };
    reader.read_until_cancelled(&mut sock, monitor, &cancel, on_message).await;
    Ok(())
}

/// Counts a receive or handshake error that crossed a wire limit (the peer was dropped).
/// Warns on the first drop of each reason, then logs at debug level: a hostile peer that
/// reconnects in a loop must not flood the log.
fn count_rejection(intake: &Intake, endpoint: Option<&str>, e: &zeromq::ZmqError) -> bool {
    let Some(reason) = rejection_reason(e) else { return false };
    let counter = intake.metrics.rejected_frames.with_label_values(&[reason]);
    if counter.get() == 0 {
        tracing::warn!(endpoint, reason, error = %e, "KV event publisher dropped: wire limit crossed");
    } else {
        tracing::debug!(endpoint, reason, error = %e, "KV event publisher dropped: wire limit crossed");
    }
    counter.inc();
    true
}

/// What one receive loop reports to.
struct ReceiveLoop<'a> {
    intake: &'a Intake,
    /// The endpoint of a connecting socket (`None`: the central socket).
    endpoint: Option<&'a str>,
    /// How a new connection is counted in `epp_kv_peer_events_total`.
    connected_as: &'static str,
    /// The socket's entry on the subscription board (`/debug/state`).
    board: &'a Subscription,
}

impl ReceiveLoop<'_> {
    /// Reads `sock` until `cancel`: messages go to `on_message`, the socket monitor's events to
    /// `epp_kv_peer_events_total` (a new connection counted as `connected_as`) and the board, and
    /// receive errors (a peer dropped) are counted and survived.
    async fn read_until_cancelled(
        &self,
        sock: &mut SubSocket,
        mut monitor: Monitor,
        cancel: &CancellationToken,
        mut on_message: impl FnMut(zeromq::ZmqMessage),
    ) {
        let ReceiveLoop { intake, endpoint, connected_as, board } = *self;
        loop {
            let msg = tokio::select! {
                biased;
                _ = cancel.cancelled() => return,
                Some(e) = monitor.next() => {
                    if let SocketEvent::AcceptFailed(error) = &e
                        && !count_rejection(intake, endpoint, error)
                    {
                        // Handshake timeout, bad greeting, incompatible socket type, ...
                        intake.metrics.zmq_errors.with_label_values(&["handshake"]).inc();
                        tracing::debug!(error = %error, "KV event publisher handshake failed");
                    }
                    match e {
                        SocketEvent::Accepted(..) | SocketEvent::Connected(..) => board.peer_connected(),
                        SocketEvent::Disconnected(_) => board.peer_disconnected(),
                        _ => {}
                    }
                    peer_event(&intake.metrics, endpoint, &e, connected_as);
                    continue;
                }
                m = sock.recv() => m,
            };
            match msg {
                Ok(m) => {
                    board.touch();
                    on_message(m);
                }
                Err(e) => {
                    if !count_rejection(intake, endpoint, &e) {
                        intake.metrics.zmq_errors.with_label_values(&["recv"]).inc();
                        tracing::debug!(endpoint, error = %e, "KV event receive error (peer dropped)");
                    }
                }
            }
        }
    }
}

/// Counts one socket monitor event; `connected_as` names a new connection
/// (`connected` on the bound socket, `reconnected` on a connecting one).
fn peer_event(metrics: &KvCacheMetrics, endpoint: Option<&str>, e: &SocketEvent, connected_as: &'static str) {
    let event = match e {
        SocketEvent::Accepted(..) | SocketEvent::Connected(..) => connected_as,
        SocketEvent::Disconnected(_) => "disconnected",
        _ => return,
    };
    metrics.peer_events.with_label_values(&[event]).inc();
    match endpoint {
        Some(endpoint) => tracing::info!(endpoint, event, "KV event publisher connection"),
        None => tracing::debug!(event, "KV event publisher connection (central socket)"),
    }
}

struct Reader {
    dial: String,
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

/// Follows the endpoint list: attribution for the central socket, readers in
/// pod-discovery mode, purges for endpoints that left.
pub async fn run_manager(
    cfg: SubscriberConfig,
    mut sources: watch::Receiver<Vec<KvEventSource>>,
    intake: Arc<Intake>,
    attribution: Arc<ArcSwap<Attribution>>,
    cancel: CancellationToken,
) {
    let mut readers: HashMap<(Arc<str>, u16), Reader> = HashMap::new();
    let mut known: Vec<Arc<str>> = Vec::new();
    loop {
        let list = sources.borrow_and_update().clone();
        // New attribution first: the central socket stops routing to pods that left.
        attribution.store(Arc::new(build_attribution(&cfg, &list)));
        if cfg.discover_pods {
            let wanted: HashMap<(Arc<str>, u16), &KvEventSource> =
                list.iter().map(|s| ((s.name.clone(), s.rank), s)).collect();
            // A reader is stale when its endpoint left or now dials elsewhere.
            let stale: Vec<_> = readers
                .iter()
                .filter(|(k, r)| wanted.get(*k).and_then(|s| dial_url(&cfg, s)).as_ref() != Some(&r.dial))
                .map(|(k, _)| k.clone())
                .collect();
            // Stop stale readers before any purge is queued, so none of their
            // messages can land after it.
            for k in stale {
                if let Some(r) = readers.remove(&k) {
                    r.cancel.cancel();
                    let _ = r.task.await;
                }
            }
            for (k, s) in wanted {
                let Some(dial) = dial_url(&cfg, s) else { continue };
                if readers.contains_key(&k) {
                    continue;
                }
                let src = Source { name: s.name.clone(), rank: u32::from(s.rank), replay: replay_url(&cfg, s) };
                let child = cancel.child_token();
                let (metrics, backoff) = (intake.metrics.clone(), intake.backoff);
                let (d, i, c) = (dial.clone(), intake.clone(), child.clone());
                let task = tokio::spawn(supervise("pod", metrics, child.clone(), backoff, move |_| {
                    run_source(d.clone(), src.clone(), i.clone(), c.clone())
                }));
                readers.insert(k, Reader { dial, cancel: child, task });
            }
        }
        for gone in known.iter().filter(|n| !list.iter().any(|s| &s.name == *n)) {
            tracing::info!(endpoint = %gone, "Endpoint left; purging its KV entries");
            intake.control(gone, Job::RemoveEndpoint(gone.clone())).await;
        }
        known = list.iter().map(|s| s.name.clone()).collect();
        known.sort();
        known.dedup();
        tokio::select! {
            _ = cancel.cancelled() => break,
            r = sources.changed() => if r.is_err() {
                // The list's owner is gone: keep the last list until shutdown.
                cancel.cancelled().await;
                break;
            },
        }
    }
    for (_, r) in readers {
        r.cancel.cancel();
        let _ = r.task.await;
    }
}
