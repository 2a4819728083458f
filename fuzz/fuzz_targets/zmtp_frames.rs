//! ZMTP framing as a KV-event publisher connection feeds it: the patched `zeromq` decoder under
//! small wire limits, in reads of varying size. The oracle (`decode_zmtp_stream`) panics when a
//! decoded message crosses a limit or the read buffer outgrows the bytes received.
#![no_main]

use epp::kvcache::subscriber::{WireLimits, decode_zmtp_stream};
use libfuzzer_sys::fuzz_target;

/// ZMTP 3.0 NULL greeting, prepended to most inputs so the fuzzer spends its time on frames.
const GREETING: [u8; 64] = {
    let mut g = [0u8; 64];
    g[0] = 0xff;
    g[9] = 0x7f;
    g[10] = 3;
    g[12] = b'N';
    g[13] = b'U';
    g[14] = b'L';
    g[15] = b'L';
    g
};

fuzz_target!(|data: &[u8]| {
    let Some((ctl, rest)) = data.split_first_chunk::<4>() else { return };
    let limits = if ctl[2] & 0x80 != 0 {
        // Declared lengths must allocate nothing even without limits.
        WireLimits::unlimited()
    } else {
        WireLimits {
            max_frame_bytes: 1 + usize::from(ctl[0]) * 64,
            max_message_bytes: 1 + usize::from(ctl[1]) * 128,
            max_frames_per_message: 1 + usize::from(ctl[2] & 0x0f),
            ..WireLimits::default()
        }
    };
    let chunk = 1 + usize::from(ctl[3] >> 1) * 8;
    if ctl[3] & 1 == 0 {
        let mut stream = GREETING.to_vec();
        stream.extend_from_slice(rest);
        decode_zmtp_stream(&stream, &limits, chunk);
    } else {
        decode_zmtp_stream(rest, &limits, chunk);
    }
});
