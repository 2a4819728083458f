//! ZMQ frame layout and topic parsing (pure).
//!
//! Live messages are `[topic, seq (8 bytes big-endian), payload]`; anything
//! else is malformed. Topics follow llm-d: `kv@<pod>@<model>` (exactly three
//! `@`-separated parts) names the pod and model, otherwise the whole topic is
//! the pod id and the model is empty. Pod ids are `ip:port` (current) or a
//! bare `ip` (llm-d ≤ v0.6).

use std::net::IpAddr;

use bytes::Bytes;

/// A well-formed live message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frames {
    /// Frame 0.
    pub topic: Bytes,
    /// Frame 1.
    pub seq: u64,
    /// Frame 2 (the msgpack batch).
    pub payload: Bytes,
}

/// Why a message was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Not exactly three frames.
    #[error("expected 3 frames, got {0}")]
    FrameCount(usize),
    /// The seq frame is not 8 bytes.
    #[error("sequence frame has {0} bytes, want 8")]
    SeqLength(usize),
}

/// Reads a big-endian u64 from an 8-byte frame.
pub fn seq_of(frame: &[u8]) -> Result<u64, FrameError> {
    let bytes: [u8; 8] = frame.try_into().map_err(|_| FrameError::SeqLength(frame.len()))?;
    Ok(u64::from_be_bytes(bytes))
}

/// Splits a live message.
pub fn parse(mut frames: Vec<Bytes>) -> Result<Frames, FrameError> {
    if frames.len() != 3 {
        return Err(FrameError::FrameCount(frames.len()));
    }
    let payload = frames.pop().unwrap_or_default();
    let seq = seq_of(&frames[1])?;
    Ok(Frames { topic: frames.swap_remove(0), seq, payload })
}

/// Pod id and model of a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Topic<'a> {
    /// `ip:port`, `ip`, or the whole topic.
    pub pod: &'a str,
    /// Served model name, empty when the topic has none.
    pub model: &'a str,
}

/// Parses a topic (lossy on invalid UTF-8: such topics attribute to nothing).
pub fn topic(raw: &[u8]) -> Topic<'_> {
    let s = std::str::from_utf8(raw).unwrap_or("");
    let mut parts = s.split('@');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(_), Some(pod), Some(model), None) => Topic { pod, model },
        _ => Topic { pod: s, model: "" },
    }
}

/// A pod id as address and optional port.
pub fn pod_address(pod: &str) -> Option<(IpAddr, Option<u16>)> {
    if let Ok(ip) = pod.parse::<IpAddr>() {
        return Some((ip, None));
    }
    let (host, port) = pod.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host.parse().ok()?, Some(port.parse().ok()?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_and_topics() {
        let ok = parse(vec![
            Bytes::from_static(b"kv@10.0.0.5:8000@Qwen/Qwen3-0.6B"),
            Bytes::from(7u64.to_be_bytes().to_vec()),
            Bytes::from_static(b"x"),
        ])
        .expect("ok");
        assert_eq!(ok.seq, 7);
        let t = topic(&ok.topic);
        assert_eq!((t.pod, t.model), ("10.0.0.5:8000", "Qwen/Qwen3-0.6B"));
        assert_eq!(pod_address(t.pod), Some(("10.0.0.5".parse().expect("ip"), Some(8000))));
        assert_eq!(pod_address("10.0.0.5"), Some(("10.0.0.5".parse().expect("ip"), None)));
        assert_eq!(pod_address("[::1]:9"), Some(("::1".parse().expect("ip"), Some(9))));
        assert_eq!(topic(b"kv-events"), Topic { pod: "kv-events", model: "" });
        assert_eq!(parse(vec![Bytes::new(); 2]), Err(FrameError::FrameCount(2)));
        assert_eq!(parse(vec![Bytes::new(), Bytes::from_static(b"123"), Bytes::new()]), Err(FrameError::SeqLength(3)));
    }
}
