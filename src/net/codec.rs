//! The protobuf codec of the ext_proc service: prost encoding (tonic-prost's), with larger
//! per-stream buffers than tonic's default.
//!
//! tonic gives every stream an 8 KiB receive buffer and an 8 KiB send buffer and grows
//! them by reallocation. A 10 KB chat body therefore paid, per request, a grow of the
//! receive buffer while the frame was copied in, often a second one when the decoder
//! reserved the message length on top of bytes already buffered (tonic reserves `len`
//! more, not `len` in all), and a grow of the send buffer for the echoed body: three
//! reallocations that each copy the body (callgrind, issue #17). With [`BUFFER_BYTES`] a
//! body up to that size fits without growing either buffer. The buffers are allocated per
//! stream but only the bytes a message really uses are touched.
//!
//! `build.rs` points the generated ext_proc service at [`ExtProcCodec`] (tonic-build's
//! `codec_path`); the other gRPC services keep tonic-prost's default codec.

use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{BufferSettings, Codec};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// Initial size of each stream's receive and send buffer.
pub const BUFFER_BYTES: usize = 32 * 1024;

/// tonic's default: a streaming encoder yields to the transport past this many bytes.
const YIELD_THRESHOLD: usize = 32 * 1024;

/// Prost codec with [`BUFFER_BYTES`] buffers.
#[derive(Debug, Clone, Copy)]
pub struct ExtProcCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for ExtProcCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

fn settings() -> BufferSettings {
    BufferSettings::new(BUFFER_BYTES, YIELD_THRESHOLD)
}

impl<T, U> Codec for ExtProcCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstCodec::<T, U>::raw_decoder(settings())
    }
}

#[cfg(test)]
mod tests {
    use tonic::codec::{Decoder, Encoder};

    use super::*;
    use crate::proto::ext_proc::{ProcessingRequest, ProcessingResponse};

    #[test]
    fn both_directions_start_with_the_larger_buffers() {
        // `BufferSettings` keeps its fields private; its `Debug` form shows them.
        let expected = format!("buffer_size: {BUFFER_BYTES}");
        let mut codec = ExtProcCodec::<ProcessingResponse, ProcessingRequest>::default();
        assert!(format!("{:?}", codec.encoder().buffer_settings()).contains(&expected));
        assert!(format!("{:?}", codec.decoder().buffer_settings()).contains(&expected));
    }
}
