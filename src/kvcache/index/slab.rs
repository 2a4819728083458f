//! Overflow holder lists of one shard, addressed by index.
//!
//! A key held by more than two (endpoint, tier) pairs stores a slab index in
//! its slot; the list lives here. Lists of up to [`INLINE`] holders sit in the
//! slab array itself, so a lookup of such a key costs one memory hop after its
//! bucket (a shared system prompt cached on a handful of pods is the common
//! case); longer lists spill to the heap. Freed indexes are reused.
//!
//! Each list carries a fingerprint of its holder set: the XOR of a bijective
//! 64-bit mix of each holder's identity (refcounts excluded), kept up to date
//! on every change. Two lists with equal fingerprints hold the same set: sets
//! differing in one or two holders always differ in fingerprint (the mix is a
//! bijection), larger differences collide with probability 2^-64, the same
//! odds as the 64-bit block keys themselves colliding. A lookup compares
//! fingerprints to find that a key has the holders of the key before it
//! without reading either list.

/// Holders kept inside the slab array before a list spills to the heap.
pub const INLINE: usize = 5;

/// A holder's contribution to its list's fingerprint: a bijective mix
/// (splitmix64's finaliser) of its identity.
fn mix(h: u32) -> u64 {
    let mut x = u64::from(super::holder::identity(h)) ^ 0x9E37_79B9_7F4A_7C15;
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The holders of one list.
#[derive(Debug, Clone)]
enum Items {
    /// Up to [`INLINE`] holders, in place.
    Inline { len: u8, items: [u32; INLINE] },
    /// More holders (boxed, so the entry stays 32 bytes with its
    /// fingerprint; read only when the holders change).
    #[allow(clippy::box_collection)] // a bare `Vec` would make every entry 40 bytes
    Heap(Box<Vec<u32>>),
}

/// One overflow list and its fingerprint. Aligned to 32 bytes so an entry
/// never straddles two cache lines (one prefetch brings it in).
#[derive(Debug, Clone)]
#[repr(align(32))]
pub struct SmallList {
    fingerprint: u64,
    items: Items,
}

impl Default for SmallList {
    fn default() -> Self {
        SmallList { fingerprint: 0, items: Items::Inline { len: 0, items: [0; INLINE] } }
    }
}

impl SmallList {
    fn from_slice(list: &[u32]) -> Self {
        let fingerprint = list.iter().fold(0, |f, h| f ^ mix(*h));
        let items = if list.len() <= INLINE {
            let mut items = [0; INLINE];
            items[..list.len()].copy_from_slice(list);
            Items::Inline { len: list.len() as u8, items }
        } else {
            Items::Heap(Box::new(list.to_vec()))
        };
        SmallList { fingerprint, items }
    }

    /// The holders.
    pub fn as_slice(&self) -> &[u32] {
        match &self.items {
            Items::Inline { len, items } => &items[..usize::from(*len)],
            Items::Heap(v) => v,
        }
    }

    fn as_mut_slice(&mut self) -> &mut [u32] {
        match &mut self.items {
            Items::Inline { len, items } => &mut items[..usize::from(*len)],
            Items::Heap(v) => v,
        }
    }

    /// Appends a holder, spilling to the heap past [`INLINE`].
    fn push(&mut self, h: u32) {
        self.fingerprint ^= mix(h);
        match &mut self.items {
            Items::Inline { len, items } if usize::from(*len) < INLINE => {
                items[usize::from(*len)] = h;
                *len += 1;
            }
            Items::Inline { items, .. } => {
                let mut v = items.to_vec();
                v.push(h);
                self.items = Items::Heap(Box::new(v));
            }
            Items::Heap(v) => v.push(h),
        }
    }

    fn heap_bytes(&self) -> usize {
        match &self.items {
            Items::Inline { .. } => 0,
            Items::Heap(v) => std::mem::size_of::<Vec<u32>>() + v.capacity() * 4,
        }
    }
}

/// Holder lists of keys with more than two holders, addressed by index from
/// the slot.
#[derive(Debug, Default)]
pub struct Slab {
    lists: Vec<SmallList>,
    free: Vec<u32>,
}

impl Slab {
    pub fn alloc(&mut self, list: &[u32]) -> u32 {
        let list = SmallList::from_slice(list);
        match self.free.pop() {
            Some(i) => {
                self.lists[i as usize] = list;
                i
            }
            None => {
                self.lists.push(list);
                (self.lists.len() - 1) as u32
            }
        }
    }

    pub fn get(&self, i: u32) -> &[u32] {
        self.lists.get(i as usize).map_or(&[], SmallList::as_slice)
    }

    /// The fingerprint of list `i`'s holder set (see the module doc).
    pub fn fingerprint(&self, i: u32) -> u64 {
        self.lists.get(i as usize).map_or(0, |l| l.fingerprint)
    }

    /// Starts loading list `i` into the cache (a hint; any index is harmless).
    pub fn prefetch(&self, i: u32) {
        super::table::prefetch(self.lists.as_ptr().wrapping_add(i as usize));
    }

    /// Adds holder `h` to list `i`, or when a holder with its identity is
    /// there, replaces that one with `bump(it)` (same identity). True when
    /// `h` was added.
    pub fn add(&mut self, i: u32, h: u32, bump: impl FnOnce(u32) -> u32) -> bool {
        if i as usize >= self.lists.len() {
            // Unreachable with consistent slots; recover instead of panicking.
            self.lists.resize_with(i as usize + 1, SmallList::default);
        }
        let list = &mut self.lists[i as usize];
        let id = super::holder::identity(h);
        if let Some(x) = list.as_mut_slice().iter_mut().find(|x| super::holder::identity(**x) == id) {
            let bumped = bump(*x);
            debug_assert_eq!(super::holder::identity(bumped), id);
            *x = bumped;
            return false;
        }
        list.push(h);
        true
    }

    pub fn free(&mut self, i: u32) -> SmallList {
        match self.lists.get_mut(i as usize) {
            Some(l) => {
                self.free.push(i);
                std::mem::take(l)
            }
            None => SmallList::default(),
        }
    }

    pub fn bytes(&self) -> usize {
        self.lists.capacity() * std::mem::size_of::<SmallList>()
            + self.free.capacity() * 4
            + self.lists.iter().map(SmallList::heap_bytes).sum::<usize>()
    }

    #[cfg(test)]
    pub fn live(&self) -> usize {
        self.lists.len() - self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::kvcache::index::holder::{identity, incremented, pack};

    fn is_heap(slab: &Slab, i: u32) -> bool {
        matches!(slab.lists[i as usize].items, Items::Heap(_))
    }

    #[test]
    fn short_lists_stay_inline_and_long_ones_spill() {
        assert_eq!(std::mem::size_of::<SmallList>(), 32);
        let mut slab = Slab::default();
        let i = slab.alloc(&[pack(1, 0), pack(2, 0), pack(3, 0)]);
        assert!(!is_heap(&slab, i));
        for ep in 4..=7 {
            assert!(slab.add(i, pack(ep, 0), incremented));
        }
        assert!(is_heap(&slab, i));
        assert!(!slab.add(i, pack(1, 0), incremented), "an existing identity is bumped, not added");
        let want: Vec<u32> = [incremented(pack(1, 0))].into_iter().chain((2..=7).map(|ep| pack(ep, 0))).collect();
        assert_eq!(slab.get(i), &want[..]);
        assert_eq!(slab.free(i).as_slice(), &want[..]);
        assert_eq!(slab.get(i), &[] as &[u32]);
        assert_eq!(slab.alloc(&[1, 2, 3, 4, 5]), i, "freed indexes are reused");
    }

    #[test]
    fn fingerprints_follow_the_holder_set_not_its_order_or_refcounts() {
        let mut slab = Slab::default();
        let hs: Vec<u32> = (0..9).map(|ep| pack(ep, ep as u8 % 3)).collect();
        let a = slab.alloc(&hs[..3]);
        let b = slab.alloc(&[hs[2], hs[0], hs[1]]);
        assert_eq!(slab.fingerprint(a), slab.fingerprint(b), "order does not matter");
        slab.add(b, hs[0], incremented);
        assert_eq!(slab.fingerprint(a), slab.fingerprint(b), "refcounts do not matter");
        for (n, h) in hs.iter().enumerate().skip(3) {
            slab.add(a, *h, incremented);
            assert_ne!(slab.fingerprint(a), slab.fingerprint(b), "{} holders against 3", n + 1);
            let rebuilt = slab.alloc(slab.get(a).to_vec().as_slice());
            assert_eq!(slab.fingerprint(rebuilt), slab.fingerprint(a), "kept up to date across the spill");
        }
        let other_tier = slab.alloc(&[hs[0], hs[1], pack(2, 1)]);
        assert_ne!(identity(hs[2]), identity(pack(2, 1)));
        assert_ne!(slab.fingerprint(other_tier), slab.fingerprint(b), "the tier is part of a holder's identity");
        assert_eq!(slab.fingerprint(999), 0, "a missing list reads as the empty set");
    }
}
