use thiserror::Error;

/// Represents an error when encoding/decoding raw byte buffers and frames
#[non_exhaustive]
#[derive(Error, Debug)]
pub enum CodecError {
    #[error("{0}")]
    Command(&'static str),
    #[error("{0}")]
    Greeting(&'static str),
    #[error("{0}")]
    Mechanism(&'static str),
    #[error("{0}")]
    Decode(&'static str),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Other(&'static str),
    /// EPP PATCH: the peer declared more than a [`crate::FrameLimits`] bound
    /// allows; nothing was allocated for it and the connection is dropped.
    #[error("{0}")]
    LimitExceeded(LimitExceeded),
}

/// EPP PATCH: which [`crate::FrameLimits`] bound a peer crossed.
#[derive(Error, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitExceeded {
    /// A frame header declared more bytes than `max_frame_size`.
    #[error("frame of {declared} bytes exceeds the limit of {limit}")]
    FrameSize { declared: u64, limit: usize },
    /// The frames of one multipart message add up to more than `max_message_size`.
    #[error("message of at least {declared} bytes exceeds the limit of {limit}")]
    MessageSize { declared: u64, limit: usize },
    /// One multipart message has more frames than `max_message_frames`.
    #[error("message with more than {limit} frames")]
    MessageFrames { limit: usize },
}

pub(crate) type CodecResult<T> = Result<T, CodecError>;
