//! Packed `(endpoint, tier, refcount)` holders of one index key.
//!
//! A holder is a `u32`: bits 0..16 endpoint id, 16..20 tier id, 20..32
//! reference count (saturating at 4095). A real holder always has refs ≥ 1,
//! so `0` means "empty" and a value with refs 0 and endpoint `0xFFFF` marks a
//! slot whose holders moved to the overflow list. A table slot (`u64`)
//! stores up to two holders inline: most keys are held by one or two
//! endpoints, which keeps an entry at 16 bytes of table space per key.

/// Endpoint id inside the index (interned name).
pub type EndpointId = u16;

/// Largest usable endpoint id (`0xFFFF` is reserved for the overflow marker).
pub const MAX_ENDPOINT_ID: EndpointId = 0xFFFE;

const REF_SHIFT: u32 = 20;
const REF_MAX: u32 = 0xFFF;

/// Marker in the low half of a slot whose holders live in the overflow map.
pub const OVERFLOW: u32 = 0x0000_FFFF;

/// A slot value no table stores (its low holder would have endpoint
/// `0xFFFF`, which only the [`OVERFLOW`] marker uses, with refcount bits
/// set): a lookup's mark for a slot not read yet.
pub const UNREAD: u64 = u64::MAX;

/// A holder with refcount 1.
pub fn pack(ep: EndpointId, tier: u8) -> u32 {
    u32::from(ep) | (u32::from(tier & 0xF) << 16) | (1 << REF_SHIFT)
}

/// The `(endpoint, tier)` identity bits, refcount masked out.
pub fn identity(h: u32) -> u32 {
    h & 0x000F_FFFF
}

/// Endpoint id of a holder.
pub fn endpoint(h: u32) -> EndpointId {
    (h & 0xFFFF) as EndpointId
}

/// Tier id of a holder.
pub fn tier(h: u32) -> u8 {
    ((h >> 16) & 0xF) as u8
}

/// Reference count of a holder.
pub fn refs(h: u32) -> u32 {
    h >> REF_SHIFT
}

/// `h` with one more reference (saturating).
pub fn incremented(h: u32) -> u32 {
    if refs(h) >= REF_MAX { h } else { h + (1 << REF_SHIFT) }
}

/// `h` with one reference less, or `None` when it reaches zero.
pub fn decremented(h: u32) -> Option<u32> {
    (refs(h) > 1).then(|| h - (1 << REF_SHIFT))
}

/// Low and high holder of an inline slot.
pub fn split(slot: u64) -> (u32, u32) {
    (slot as u32, (slot >> 32) as u32)
}

/// Inline slot from two holders.
pub fn join(lo: u32, hi: u32) -> u64 {
    u64::from(lo) | (u64::from(hi) << 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_round_trips() {
        let h = pack(513, 3);
        assert_eq!((endpoint(h), tier(h), refs(h)), (513, 3, 1));
        let h2 = incremented(h);
        assert_eq!(refs(h2), 2);
        assert_eq!(identity(h2), identity(h));
        assert_eq!(decremented(h2), Some(h));
        assert_eq!(decremented(h), None);
        assert_ne!(pack(MAX_ENDPOINT_ID, 0), OVERFLOW);
        let mut s = pack(1, 0);
        for _ in 0..5000 {
            s = incremented(s);
        }
        assert_eq!(refs(s), REF_MAX);
    }
}
