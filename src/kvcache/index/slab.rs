//! Overflow holder lists of one shard, addressed by index.
//!
//! A key held by more than two (endpoint, tier) pairs stores a slab index in
//! its slot; the list lives here. Lists of up to [`INLINE`] holders sit in the
//! slab array itself, so a lookup of such a key costs one memory hop after its
//! bucket (a shared system prompt cached on a handful of pods is the common
//! case); longer lists spill to the heap. Freed indexes are reused.

/// Holders kept inside the slab array before a list spills to the heap.
pub const INLINE: usize = 5;

/// One overflow list. Aligned to 32 bytes so an inline list never straddles
/// two cache lines (one prefetch brings it in).
#[derive(Debug, Clone)]
#[repr(align(32))]
pub enum SmallList {
    /// Up to [`INLINE`] holders, in place.
    Inline { len: u8, items: [u32; INLINE] },
    /// More holders.
    Heap(Vec<u32>),
}

impl Default for SmallList {
    fn default() -> Self {
        SmallList::Inline { len: 0, items: [0; INLINE] }
    }
}

impl SmallList {
    fn from_slice(list: &[u32]) -> Self {
        if list.len() <= INLINE {
            let mut items = [0; INLINE];
            items[..list.len()].copy_from_slice(list);
            SmallList::Inline { len: list.len() as u8, items }
        } else {
            SmallList::Heap(list.to_vec())
        }
    }

    /// The holders.
    pub fn as_slice(&self) -> &[u32] {
        match self {
            SmallList::Inline { len, items } => &items[..usize::from(*len)],
            SmallList::Heap(v) => v,
        }
    }

    /// The holders, mutable in place.
    pub fn as_mut_slice(&mut self) -> &mut [u32] {
        match self {
            SmallList::Inline { len, items } => &mut items[..usize::from(*len)],
            SmallList::Heap(v) => v,
        }
    }

    /// Appends a holder, spilling to the heap past [`INLINE`].
    pub fn push(&mut self, h: u32) {
        match self {
            SmallList::Inline { len, items } if usize::from(*len) < INLINE => {
                items[usize::from(*len)] = h;
                *len += 1;
            }
            SmallList::Inline { items, .. } => {
                let mut v = items.to_vec();
                v.push(h);
                *self = SmallList::Heap(v);
            }
            SmallList::Heap(v) => v.push(h),
        }
    }

    fn heap_bytes(&self) -> usize {
        match self {
            SmallList::Inline { .. } => 0,
            SmallList::Heap(v) => v.capacity() * 4,
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

    /// Starts loading list `i` into the cache (a hint; any index is harmless).
    pub fn prefetch(&self, i: u32) {
        super::table::prefetch(self.lists.as_ptr().wrapping_add(i as usize));
    }

    /// Starts loading the first cache lines of list `i` when it lives on the heap.
    pub fn prefetch_heap(&self, i: u32) {
        if let Some(SmallList::Heap(v)) = self.lists.get(i as usize) {
            // 16 holders per cache line; at most 8 lines.
            for at in (0..v.len()).step_by(16).take(8) {
                super::table::prefetch(v.as_ptr().wrapping_add(at));
            }
        }
    }

    pub fn get_mut(&mut self, i: u32) -> &mut SmallList {
        if i as usize >= self.lists.len() {
            // Unreachable with consistent slots; recover instead of panicking.
            self.lists.resize_with(i as usize + 1, SmallList::default);
        }
        &mut self.lists[i as usize]
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

    #[test]
    fn short_lists_stay_inline_and_long_ones_spill() {
        assert_eq!(std::mem::size_of::<SmallList>(), 32);
        let mut slab = Slab::default();
        let i = slab.alloc(&[1, 2, 3]);
        assert!(matches!(slab.get_mut(i), SmallList::Inline { len: 3, .. }));
        for h in 4..=7 {
            slab.get_mut(i).push(h);
        }
        assert!(matches!(slab.get_mut(i), SmallList::Heap(_)));
        assert_eq!(slab.get(i), &[1, 2, 3, 4, 5, 6, 7]);
        slab.get_mut(i).as_mut_slice()[0] = 9;
        assert_eq!(slab.free(i).as_slice(), &[9, 2, 3, 4, 5, 6, 7]);
        assert_eq!(slab.get(i), &[] as &[u32]);
        assert_eq!(slab.alloc(&[1, 2, 3, 4, 5]), i, "freed indexes are reused");
    }
}
