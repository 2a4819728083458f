//! Runs the (patched) ZMTP decoder of the `zeromq` crate over raw bytes, the
//! way one publisher connection feeds it, for the `zmtp_frames` fuzz target
//! and tests. Checks the decoder's contract: every message it yields respects
//! the [`WireLimits`], and the read buffer never grows far beyond the bytes
//! actually received, whatever lengths the peer declares.

use asynchronous_codec::Decoder;
use bytes::BytesMut;
use zeromq::__bench::{Message, ZmqCodec};

use super::limits::WireLimits;

/// Most bytes the decoder may reserve ahead of received data (the patch's `RESERVE_CHUNK`).
const RESERVE_AHEAD: usize = 64 * 1024;

/// What one connection's byte stream decoded to.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DecodeSummary {
    /// The greeting parsed.
    pub greeting: bool,
    /// Command frames (READY, ...).
    pub commands: usize,
    /// Complete messages.
    pub messages: usize,
    /// The error that ended the stream (the connection would be dropped), if any.
    pub error: Option<String>,
    /// Largest read-buffer capacity seen.
    pub max_capacity: usize,
}

/// Decodes `data` delivered in reads of `chunk` bytes under `limits`.
///
/// # Panics
/// When the decoder breaks its contract: a message over a limit, or a buffer
/// larger than twice the bytes received plus the reserve step (the fuzz
/// target's oracle).
pub fn decode_stream(data: &[u8], limits: &WireLimits, chunk: usize) -> DecodeSummary {
    let mut codec = ZmqCodec::new();
    codec.set_limits(limits.frame_limits());
    let mut buf = BytesMut::new();
    let mut out = DecodeSummary::default();
    let mut fed = 0;
    for piece in data.chunks(chunk.max(1)) {
        buf.extend_from_slice(piece);
        fed += piece.len();
        loop {
            let decoded = codec.decode(&mut buf);
            out.max_capacity = out.max_capacity.max(buf.capacity());
            assert!(
                buf.capacity() <= 2 * (fed + RESERVE_AHEAD),
                "read buffer of {} bytes after {fed} bytes received",
                buf.capacity()
            );
            match decoded {
                Ok(Some(Message::Greeting(_))) => out.greeting = true,
                Ok(Some(Message::Command(_))) => out.commands += 1,
                Ok(Some(Message::Message(m))) => {
                    let frames = m.into_vec();
                    let total: usize = frames.iter().map(|f| f.len()).sum();
                    assert!(frames.len() <= limits.frame_limits().max_message_frames, "{} frames", frames.len());
                    assert!(total <= limits.frame_limits().max_message_size, "message of {total} bytes");
                    assert!(frames.iter().all(|f| f.len() <= limits.frame_limits().max_frame_size));
                    out.messages += 1;
                }
                Ok(None) => break,
                Err(e) => {
                    out.error = Some(e.to_string());
                    return out;
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ZMTP 3.0 NULL greeting.
    fn greeting() -> Vec<u8> {
        let mut g = vec![0u8; 64];
        g[0] = 0xff;
        g[9] = 0x7f;
        g[10] = 3;
        g[12..16].copy_from_slice(b"NULL");
        g
    }

    fn with_greeting(rest: &[u8]) -> Vec<u8> {
        let mut v = greeting();
        v.extend_from_slice(rest);
        v
    }

    #[test]
    fn declared_lengths_allocate_nothing_and_limits_drop_the_stream() {
        let limits = WireLimits {
            max_frame_bytes: 1000,
            max_message_bytes: 1500,
            max_frames_per_message: 3,
            ..Default::default()
        };
        for declared in [u64::MAX, i64::MAX as u64, 64 << 30, 1001] {
            let mut header = vec![0x02];
            header.extend_from_slice(&declared.to_be_bytes());
            let s = decode_stream(&with_greeting(&header), &limits, 7);
            assert!(s.error.as_deref().unwrap_or("").contains("exceeds the limit of 1000"), "{s:?}");
            // Without limits the declared length is still not reserved up front.
            let s = decode_stream(&with_greeting(&header), &WireLimits::unlimited(), 4096);
            assert_eq!(s.error, None);
            assert!(s.max_capacity <= 2 * (73 + RESERVE_AHEAD), "{s:?}");
        }
        // Two 800-byte frames: each fits, the message does not.
        let mut two = Vec::new();
        for more in [0x03, 0x02] {
            two.push(more);
            two.extend_from_slice(&800u64.to_be_bytes());
            two.extend(std::iter::repeat_n(0u8, 800));
        }
        let s = decode_stream(&with_greeting(&two), &limits, 1 << 20);
        assert!(s.error.as_deref().unwrap_or("").contains("message of at least 1600"), "{s:?}");
        // Endless empty frames with MORE: cut at the frame count.
        let s = decode_stream(&with_greeting(&[0x01, 0x00].repeat(100)), &limits, 64);
        assert_eq!(s.error.as_deref(), Some("message with more than 3 frames"));
        // A live message within the limits.
        let s = decode_stream(&with_greeting(&[0x01, 2, b'k', b'v', 0x01, 1, 0, 0x00, 1, 9]), &limits, 1);
        assert_eq!((s.greeting, s.messages, s.error), (true, 1, None));
    }

    #[test]
    fn malformed_commands_are_errors_not_panics() {
        for body in [&[][..], &[9][..], &[5, b'R'][..], &[5, b'R', b'E', b'A', b'D', b'Y', 3, b'a'][..]] {
            let mut cmd = vec![0x04, body.len() as u8];
            cmd.extend_from_slice(body);
            let s = decode_stream(&with_greeting(&cmd), &WireLimits::default(), 3);
            assert!(s.error.is_some(), "{body:?}: {s:?}");
        }
        let mut body = vec![5];
        body.extend_from_slice(b"READY");
        body.push(11);
        body.extend_from_slice(b"Socket-Type");
        body.extend_from_slice(&3u32.to_be_bytes());
        body.extend_from_slice(b"PUB");
        let mut ready = vec![0x04, body.len() as u8];
        ready.extend_from_slice(&body);
        let s = decode_stream(&with_greeting(&ready), &WireLimits::default(), 5);
        assert_eq!((s.commands, s.error), (1, None));
    }
}
