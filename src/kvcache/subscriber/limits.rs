//! Wire limits of the KV-event sockets: how large a frame, a message and a
//! multipart message's frame count a publisher may send, how long it may take for
//! the ZMTP handshake, and how many publishers the central bound socket holds.
//!
//! Enforced by the patched `zeromq` decoder (vendor/zeromq, see its
//! README-EPP.md) when a frame header is read, before anything is reserved for
//! the body: the offending connection is dropped and counted in
//! `epp_kv_rejected_frames_total{reason}`, other publishers on the same socket
//! are not affected. The read buffer grows with the bytes actually received,
//! so memory per connection stays below about twice `max_message_bytes`
//! (frames being assembled plus the buffer's growth slack), whatever a peer
//! declares.
//!
//! Default sizing (docs/kvcache.md "Wire limits"): one live message is one
//! engine step's `KVEventBatch`. Its size is dominated by `token_ids` of the
//! stored blocks (at most 5 msgpack bytes per token: uint32 `ce`), plus one
//! hash per block stored and one per block evicted (at most 34 bytes each
//! with bytes hashes; 9 with u64). With block size 16 that is at most about
//! 9.3 bytes per token scheduled in the step, per KV-cache group. A step
//! schedules at most `max_num_batched_tokens` (vLLM defaults 2048 to 16384;
//! long-context deployments without chunked prefill raise it to
//! `max_model_len`, up to about 1 Mi tokens). 1 Mi tokens x 4 KV-cache groups
//! (hybrid models) x 9.3 B is about 39 MB, so 64 MiB leaves 1.7x headroom over
//! that extreme and about 400x over the default engine settings. Live
//! messages have 3 frames and replay replies 4; 8 leaves room without letting
//! a peer pile up empty frames.
//!
//! Connection cap (central socket only, `maxConnections`): every vLLM engine
//! (pod x data-parallel rank) holds one connection, so 256 serves pools of up to
//! 256 publishers; each connection may buffer up to about 2 x `maxMessageBytes`,
//! so the cap also bounds the socket's worst-case memory. Connections over it are
//! closed on accept (vendor/zeromq `AcceptLimit`) and counted in
//! `epp_kv_connections_rejected_total{reason="limit"}`.

use std::time::Duration;

use zeromq::{CodecError, FrameLimits, LimitExceeded, SocketOptions, ZmqError};

/// Default `maxFrameBytes` and `maxMessageBytes`: 64 MiB (see the module doc).
pub const DEFAULT_MAX_BYTES: usize = 64 << 20;
/// Default `maxFramesPerMessage`.
pub const DEFAULT_MAX_FRAMES: usize = 8;
/// Default handshake bound: greeting and READY within 10 s of the TCP connection.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default `maxConnections` of the central socket.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;

/// Bounds on what one publisher connection may send and on the connections held
/// (`kvEventsConfig` `maxFrameBytes`, `maxMessageBytes`, `maxFramesPerMessage`,
/// `handshakeTimeout`, `maxConnections`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WireLimits {
    /// Largest frame (also bounds ZMTP command frames), in bytes.
    pub max_frame_bytes: usize,
    /// Largest multipart message (sum of its frames), in bytes.
    pub max_message_bytes: usize,
    /// Most frames in one multipart message.
    pub max_frames_per_message: usize,
    /// Time a peer has to complete the ZMTP handshake (accepted connections are dropped
    /// after it; a connect attempt fails and is retried).
    pub handshake_timeout: Duration,
    /// Most connections the central bound socket holds at once (handshaking or connected);
    /// more are closed on accept. Connecting sockets (pod discovery, replay) hold one each.
    pub max_connections: usize,
}

impl Default for WireLimits {
    fn default() -> Self {
        WireLimits {
            max_frame_bytes: DEFAULT_MAX_BYTES,
            max_message_bytes: DEFAULT_MAX_BYTES,
            max_frames_per_message: DEFAULT_MAX_FRAMES,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

impl WireLimits {
    /// No bound (tests and the decoder's own fallback behaviour).
    pub fn unlimited() -> Self {
        WireLimits {
            max_frame_bytes: usize::MAX,
            max_message_bytes: usize::MAX,
            max_frames_per_message: usize::MAX,
            ..WireLimits::default()
        }
    }

    /// The decoder limits (zero is read as one: a limit never disables intake).
    pub fn frame_limits(&self) -> FrameLimits {
        FrameLimits {
            max_frame_size: self.max_frame_bytes.max(1),
            max_message_size: self.max_message_bytes.max(1),
            max_message_frames: self.max_frames_per_message.max(1),
        }
    }

    /// Socket options carrying these limits, for every KV-event socket (SUB and replay DEALER).
    pub fn socket_options(&self) -> SocketOptions {
        let mut options = SocketOptions::default();
        options.frame_limits(self.frame_limits()).connect_timeout(self.handshake_timeout);
        options
    }
}

/// The `epp_kv_rejected_frames_total` reason of a receive error, when a limit caused it.
pub fn rejection_reason(e: &ZmqError) -> Option<&'static str> {
    match e {
        ZmqError::Codec(CodecError::LimitExceeded(l)) => Some(limit_reason(l)),
        _ => None,
    }
}

/// The reason label of one crossed limit.
pub fn limit_reason(l: &LimitExceeded) -> &'static str {
    match l {
        LimitExceeded::FrameSize { .. } => "frame_too_large",
        LimitExceeded::MessageSize { .. } => "message_too_large",
        LimitExceeded::MessageFrames { .. } => "too_many_frames",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_reasons() {
        let l = WireLimits::default().frame_limits();
        assert_eq!((l.max_frame_size, l.max_message_size, l.max_message_frames), (64 << 20, 64 << 20, 8));
        let zero =
            WireLimits { max_frame_bytes: 0, max_message_bytes: 0, max_frames_per_message: 0, ..Default::default() };
        assert_eq!(zero.frame_limits().max_message_frames, 1);
        let e = ZmqError::Codec(CodecError::LimitExceeded(LimitExceeded::MessageFrames { limit: 8 }));
        assert_eq!(rejection_reason(&e), Some("too_many_frames"));
        assert_eq!(rejection_reason(&ZmqError::NoMessage), None);
    }
}
