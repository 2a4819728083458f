//! Overflow holder lists of one shard, addressed by index.
//!
//! A key held by more than two (endpoint, tier) pairs stores a slab index in
//! its slot; the list lives here. Indexing costs one pointer hop on lookups
//! instead of a hash-map probe. Freed indexes are reused.

/// Holder lists of keys with more than two holders, addressed by index from
/// the slot (one pointer hop instead of a hash-map probe on lookups).
#[derive(Debug, Default)]
pub struct Slab {
    lists: Vec<Vec<u32>>,
    free: Vec<u32>,
}

impl Slab {
    pub fn alloc(&mut self, list: Vec<u32>) -> u32 {
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
        self.lists.get(i as usize).map_or(&[], Vec::as_slice)
    }

    pub fn get_mut(&mut self, i: u32) -> &mut Vec<u32> {
        if i as usize >= self.lists.len() {
            // Unreachable with consistent slots; recover instead of panicking.
            self.lists.resize_with(i as usize + 1, Vec::new);
        }
        &mut self.lists[i as usize]
    }

    pub fn free(&mut self, i: u32) -> Vec<u32> {
        match self.lists.get_mut(i as usize) {
            Some(l) => {
                self.free.push(i);
                std::mem::take(l)
            }
            None => Vec::new(),
        }
    }

    pub fn bytes(&self) -> usize {
        self.lists.capacity() * 24
            + self.free.capacity() * 4
            + self.lists.iter().map(|l| l.capacity() * 4).sum::<usize>()
    }

    #[cfg(test)]
    pub fn live(&self) -> usize {
        self.lists.len() - self.free.len()
    }
}
