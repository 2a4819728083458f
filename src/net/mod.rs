//! Connection hygiene of the listeners: the limits (flags and runtime settings), the guarded
//! accept loop (connection cap, handshake and idle timeouts) and its counters.

pub mod limits;
