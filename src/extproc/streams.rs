//! Open ext_proc streams: how many are open (read by shutdown to count the streams it cuts),
//! the streams epp ended for a limit (`epp_extproc_streams_closed_total{reason}`), and with `--enable-grpc-stream-metrics` the go-grpc-prometheus counters of the ext_proc
//! method (`grpc_server_started_total`, `grpc_server_handled_total{grpc_code}`,
//! `grpc_server_msg_received_total`, `grpc_server_msg_sent_total`).

use std::sync::Arc;

use tokio::sync::watch;

use prometheus::{IntCounter, IntCounterVec, Opts, Registry};

const SERVICE: &str = "envoy.service.ext_proc.v3.ExternalProcessor";
const METHOD: &str = "Process";
const TYPE: &str = "bidi_stream";

/// Counts open streams; optionally exports per-stream gRPC metrics.
#[derive(Debug, Default)]
pub struct StreamTracker {
    open: watch::Sender<usize>,
    /// `epp_extproc_streams_closed_total{reason="idle_timeout"}` (registered by [`Self::new`]).
    idle_timeouts: Option<IntCounter>,
    grpc: Option<GrpcStreamMetrics>,
}

#[derive(Debug)]
struct GrpcStreamMetrics {
    started: IntCounterVec,
    handled: IntCounterVec,
    received: IntCounterVec,
    sent: IntCounterVec,
}

impl StreamTracker {
    /// A tracker; with `grpc_metrics` the gRPC stream counters are registered in `registry`.
    pub fn new(registry: &Registry, grpc_metrics: bool) -> Result<Arc<Self>, prometheus::Error> {
        let grpc = if grpc_metrics { Some(GrpcStreamMetrics::register(registry)?) } else { None };
        let closed = IntCounterVec::new(
            Opts::new(
                "epp_extproc_streams_closed_total",
                "ext_proc streams epp ended for a limit, by reason (idle_timeout: --idle-stream-timeout).",
            ),
            &["reason"],
        )?;
        registry.register(Box::new(closed.clone()))?;
        let idle_timeouts = Some(closed.with_label_values(&["idle_timeout"]));
        Ok(Arc::new(Self { open: watch::Sender::new(0), idle_timeouts, grpc }))
    }

    /// Streams ended by `--idle-stream-timeout` so far.
    pub fn idle_timeouts(&self) -> u64 {
        self.idle_timeouts.as_ref().map_or(0, IntCounter::get)
    }

    /// Streams open now.
    pub fn open_streams(&self) -> usize {
        *self.open.borrow()
    }

    /// Follows the number of open streams.
    pub fn subscribe(&self) -> watch::Receiver<usize> {
        self.open.subscribe()
    }

    /// Records a new stream; the guard records its end.
    pub fn start(self: &Arc<Self>) -> StreamGuard {
        self.open.send_modify(|n| *n += 1);
        if let Some(m) = &self.grpc {
            m.started.with_label_values(&[TYPE, SERVICE, METHOD]).inc();
        }
        StreamGuard { tracker: self.clone(), code: "Canceled" }
    }
}

impl GrpcStreamMetrics {
    fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let counter = |name: &str, help: &str, labels: &[&str]| -> Result<IntCounterVec, prometheus::Error> {
            let c = IntCounterVec::new(Opts::new(name, help), labels)?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let base = ["grpc_type", "grpc_service", "grpc_method"];
        Ok(Self {
            started: counter("grpc_server_started_total", "RPCs started on the server.", &base)?,
            handled: counter(
                "grpc_server_handled_total",
                "RPCs completed on the server, by status code.",
                &["grpc_type", "grpc_service", "grpc_method", "grpc_code"],
            )?,
            received: counter("grpc_server_msg_received_total", "Stream messages received by the server.", &base)?,
            sent: counter("grpc_server_msg_sent_total", "Stream messages sent by the server.", &base)?,
        })
    }
}

/// One open stream; dropping it records the end (code `Canceled` unless [`StreamGuard::ok`]).
#[derive(Debug)]
pub struct StreamGuard {
    tracker: Arc<StreamTracker>,
    code: &'static str,
}

impl StreamGuard {
    /// A message arrived.
    pub fn received(&self) {
        if let Some(m) = &self.tracker.grpc {
            m.received.with_label_values(&[TYPE, SERVICE, METHOD]).inc();
        }
    }

    /// A reply was sent.
    pub fn sent(&self) {
        if let Some(m) = &self.tracker.grpc {
            m.sent.with_label_values(&[TYPE, SERVICE, METHOD]).inc();
        }
    }

    /// The stream ends normally (status OK).
    pub fn ok(&mut self) {
        self.code = "OK";
    }

    /// epp ends the stream because it was idle (status `DEADLINE_EXCEEDED`); counted.
    pub fn idle_timeout(&mut self) {
        self.code = "DeadlineExceeded";
        if let Some(c) = &self.tracker.idle_timeouts {
            c.inc();
        }
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.tracker.open.send_modify(|n| *n -= 1);
        if let Some(m) = &self.tracker.grpc {
            m.handled.with_label_values(&[TYPE, SERVICE, METHOD, self.code]).inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_open_streams_and_codes() {
        let registry = Registry::new();
        let tracker = StreamTracker::new(&registry, true).unwrap();
        let mut a = tracker.start();
        let b = tracker.start();
        a.received();
        a.sent();
        assert_eq!(tracker.open_streams(), 2);
        a.ok();
        drop(a);
        drop(b);
        assert_eq!(tracker.open_streams(), 0);
        let text = prometheus::TextEncoder::new().encode_to_string(&registry.gather()).unwrap();
        assert!(text.contains(r#"grpc_server_handled_total{grpc_code="OK",grpc_method="Process""#), "{text}");
        assert!(text.contains(r#"grpc_code="Canceled""#), "{text}");
        assert!(text.contains("grpc_server_started_total{") && text.contains("} 2"), "{text}");
    }
}
