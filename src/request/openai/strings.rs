//! How the body parser reads the string value of a message's `content`: by serde_json's
//! checking string parser, or as raw bytes when the whole body allows it ([`Strings`]), and
//! the one vectorisable pass over the body that decides.

/// How the string value of a message's `content` is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Strings<'b> {
    /// Through serde_json's string parser, which checks for control characters as it scans
    /// (a word-at-a-time loop: ~2 instructions a byte).
    Checked,
    /// As raw bytes (a vectorised `memchr2` scan for the closing quote or a backslash, ~0.2
    /// instructions a byte). Only for bodies that have no byte below 0x20 at all (see
    /// [`Strings::for_body`]), so no string can hold a raw control character. A string
    /// without escapes is a slice of `body`, which is UTF-8 already; a decoded one is checked
    /// (a `\u` escape of a lone surrogate decodes to bytes that are not UTF-8 and is rejected,
    /// as the string parser rejects it).
    Raw {
        /// The whole body.
        body: &'b str,
    },
}

impl<'b> Strings<'b> {
    /// [`Strings::Raw`] when `body` has no byte below 0x20 (no raw control character, no
    /// newline or tab between tokens: compact JSON, as client libraries send it) and at most
    /// one backslash per [`MIN_RUN`] bytes: `memchr2` is called again after every escape and
    /// its set-up costs about what the checking loop spends on 30-40 bytes, so on chat turns
    /// with an escaped quote or newline every few dozen bytes the checking parser is cheaper
    /// (callgrind, 10 KB bodies read raw: plain prose 0.92x the instructions per request,
    /// escaped multi-turn chat 1.03x).
    pub(super) fn for_body(body: &'b str) -> Strings<'b> {
        let (lowest, escapes) = lowest_byte_and_backslashes(body.as_bytes());
        if lowest >= 0x20 && body.len() >= escapes.saturating_mul(MIN_RUN) {
            Strings::Raw { body }
        } else {
            Strings::Checked
        }
    }
}

/// The lowest byte of `body` (`u8::MAX` when empty) and its number of backslashes, in one pass
/// over 32-byte words with byte-wide lanes that the compiler turns into vector instructions
/// (~0.36 instructions a byte with SSE2 against ~0.8 for a plain fold over the bytes). A
/// lane counts at most one backslash per word, so it is emptied every 255 words.
fn lowest_byte_and_backslashes(body: &[u8]) -> (u8, usize) {
    const LANES: usize = 32;
    let mut lowest = [u8::MAX; LANES];
    let mut escapes = 0usize;
    for block in body.chunks(LANES * 255) {
        let mut counts = [0u8; LANES];
        let mut words = block.chunks_exact(LANES);
        for word in &mut words {
            for lane in 0..LANES {
                lowest[lane] = lowest[lane].min(word[lane]);
                counts[lane] += u8::from(word[lane] == b'\\');
            }
        }
        escapes += counts.iter().map(|&n| usize::from(n)).sum::<usize>();
        for &b in words.remainder() {
            lowest[0] = lowest[0].min(b);
            escapes += usize::from(b == b'\\');
        }
    }
    (lowest.into_iter().min().unwrap_or(u8::MAX), escapes)
}

/// `part` as text when it is a sub-slice of `body` starting and ending on character boundaries
/// (a string's bytes between its quotes, read from `body`); `None` otherwise.
pub(super) fn slice_of<'a>(body: &'a str, part: &[u8]) -> Option<&'a str> {
    let start = (part.as_ptr() as usize).checked_sub(body.as_ptr() as usize)?;
    body.get(start..start.checked_add(part.len())?)
}

/// The shortest mean run of bytes between escapes for which [`Strings::Raw`] is
/// cheaper than [`Strings::Checked`].
const MIN_RUN: usize = 128;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The lane-wise scan finds the same lowest byte and backslash count as a plain fold.
        #[test]
        fn lowest_byte_and_backslashes_agrees_with_a_fold(bytes in proptest::collection::vec(any::<u8>(), 0..20_000), fill in any::<u8>(), len in 0usize..20_000) {
            let plain = |b: &[u8]| (b.iter().copied().min().unwrap_or(u8::MAX), b.iter().filter(|&&c| c == b'\\').count());
            prop_assert_eq!(lowest_byte_and_backslashes(&bytes), plain(&bytes));
            // Long runs of one byte: a lane counting every word of a block must not overflow.
            let run = vec![fill; len];
            prop_assert_eq!(lowest_byte_and_backslashes(&run), plain(&run));
        }
    }
}
