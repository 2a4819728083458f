//! Envoy ext_proc: the gRPC service (`service`), the per-stream state machine (`stream`),
//! the synchronous decision (`decide`), reply builders (`response`) and the one error ->
//! wire mapping (`error`). The only module that touches generated Envoy types.

pub mod decide;
pub mod error;
pub mod response;
pub mod service;
pub mod stream;
pub mod streams;
