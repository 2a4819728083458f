//! gRPC length-prefixed message framing of a request body (gRPC over HTTP/2): a 1-byte
//! compressed flag, a 4-byte big-endian length, then the protobuf message.
//!
//! A unary request carries one message; bytes after the first message are ignored, as the
//! Go parsers do. Compressed messages are rejected (no `grpc-encoding` support), and so is a
//! flag other than 0 or 1. Never panics on any input.

/// Why a body is not one usable gRPC message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Fewer than 5 bytes.
    #[error("invalid gRPC frame: expected at least 5 bytes for the header, got {0}")]
    ShortHeader(usize),
    /// The length prefix says more than the body holds.
    #[error("incomplete gRPC payload: header indicates {declared} bytes, but only {available} are available")]
    Truncated {
        /// Length from the prefix.
        declared: u32,
        /// Bytes after the header.
        available: usize,
    },
    /// Compressed flag set.
    #[error("compressed gRPC payload is not supported")]
    Compressed,
    /// A flag byte other than 0 or 1.
    #[error("invalid gRPC frame: compressed flag {0} is neither 0 nor 1")]
    BadFlag(u8),
}

/// Header length: flag + length.
const HEADER: usize = 5;

/// The first message of a length-prefixed gRPC body.
///
/// Errors: [`FrameError`].
pub fn single_message(body: &[u8]) -> Result<&[u8], FrameError> {
    let Some((header, rest)) = body.split_first_chunk::<HEADER>() else {
        return Err(FrameError::ShortHeader(body.len()));
    };
    match header[0] {
        0 => {}
        1 => return Err(FrameError::Compressed),
        flag => return Err(FrameError::BadFlag(flag)),
    }
    let declared = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
    let len = usize::try_from(declared).unwrap_or(usize::MAX);
    rest.get(..len).ok_or(FrameError::Truncated { declared, available: rest.len() })
}

/// `message` framed as one uncompressed gRPC message (tests and benches build bodies with
/// it).
pub fn frame(message: &[u8]) -> Vec<u8> {
    let len = u32::try_from(message.len()).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(HEADER + message.len());
    out.push(0);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(message);
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn reads_the_first_message_and_ignores_trailing_bytes() {
        assert_eq!(single_message(&frame(b"abc")), Ok(&b"abc"[..]));
        assert_eq!(single_message(&frame(b"")), Ok(&b""[..]));
        let mut two = frame(b"ab");
        two.extend(frame(b"cd"));
        assert_eq!(single_message(&two), Ok(&b"ab"[..]));
    }

    #[test]
    fn rejects_short_truncated_compressed_and_bad_flags() {
        assert_eq!(single_message(&[0, 0, 0, 0]), Err(FrameError::ShortHeader(4)));
        assert_eq!(single_message(&[0, 0, 0, 0, 9, 1]), Err(FrameError::Truncated { declared: 9, available: 1 }));
        assert_eq!(single_message(&[1, 0, 0, 0, 1, 7]), Err(FrameError::Compressed));
        assert_eq!(single_message(&[2, 0, 0, 0, 0]), Err(FrameError::BadFlag(2)));
        let huge = [0, 0xff, 0xff, 0xff, 0xff, 1];
        assert_eq!(single_message(&huge), Err(FrameError::Truncated { declared: u32::MAX, available: 1 }));
        assert!(FrameError::Compressed.to_string().contains("compressed"));
    }

    proptest! {
        #[test]
        fn never_panics_and_never_reads_past_the_body(body in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(message) = single_message(&body) {
                prop_assert!(message.len() + HEADER <= body.len());
                prop_assert_eq!(message, &body[HEADER..HEADER + message.len()]);
            }
        }

        #[test]
        fn frame_round_trips(message in proptest::collection::vec(any::<u8>(), 0..256)) {
            let framed = frame(&message);
            prop_assert_eq!(single_message(&framed), Ok(&message[..]));
        }
    }
}
