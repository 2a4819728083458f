//! Connection hygiene of the listeners: the limits (flags and runtime settings), the guarded
//! accept loop (connection cap, Nagle off, TCP keep-alive), the per-connection guard
//! (handshake and idle timeouts), the request-accounting layer and the counters.

pub mod codec;
pub mod conn;
pub mod incoming;
pub mod layer;
pub mod limits;
pub mod metrics;
