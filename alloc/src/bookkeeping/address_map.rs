//! The address index: chunk start address to chunk id, in O(1).

use crate::bookkeeping::chunk::ChunkId;

/// Marks an empty slot; no chunk starts at address 0 (regions with base 0 are refused).
const EMPTY: u64 = 0;

/// The smallest table, in slots.
const MIN_SLOTS: usize = 64;

/// An open-addressing hash table from chunk start addresses to chunk ids, built for this one job:
/// keys are non-zero multiples of 256, so the table hashes with a single multiply (Fibonacci
/// hashing of `addr >> 8`), probes linearly, keeps its load at most one half, and deletes by
/// shifting the probe run back (no tombstones), so lookups stay short however long it runs. Like
/// `std`'s maps it never shrinks: its size follows the most chunks ever held at once.
#[derive(Debug, Clone)]
pub(crate) struct AddressMap {
    /// `slots.len()` is a power of two, at least `MIN_SLOTS`; a slot's key is `EMPTY` or unique.
    slots: Vec<(u64, ChunkId)>,
    /// Non-empty slots; at most half of `slots.len()`.
    len: usize,
    /// `64 - log2(slots.len())`: the shift that turns a product into a slot index.
    shift: u32,
}

impl Default for AddressMap {
    fn default() -> Self {
        Self::with_slots(MIN_SLOTS)
    }
}

impl AddressMap {
    fn with_slots(slots: usize) -> Self {
        Self {
            slots: vec![(EMPTY, 0); slots],
            len: 0,
            shift: 64 - slots.trailing_zeros(),
        }
    }

    /// The home slot of `addr`.
    #[inline]
    fn home(&self, addr: u64) -> usize {
        ((addr >> 8).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    /// The slot holding `addr`, or the empty slot that ends its probe run.
    #[inline]
    fn find(&self, addr: u64) -> usize {
        let mask = self.slots.len() - 1;
        let mut index = self.home(addr);
        loop {
            let key = self.slots[index].0;
            if key == addr || key == EMPTY {
                return index;
            }
            index = (index + 1) & mask;
        }
    }

    /// The id of the chunk starting at `addr`.
    #[inline]
    pub fn get(&self, addr: u64) -> Option<ChunkId> {
        let (key, id) = self.slots[self.find(addr)];
        (key == addr && addr != EMPTY).then_some(id)
    }

    /// Maps `addr` (non-zero) to `id`, replacing any earlier id.
    #[inline]
    pub fn insert(&mut self, addr: u64, id: ChunkId) {
        debug_assert_ne!(addr, EMPTY, "no chunk starts at address 0");
        if (self.len + 1) * 2 > self.slots.len() {
            self.resize(self.slots.len() * 2);
        }
        let index = self.find(addr);
        if self.slots[index].0 == EMPTY {
            self.len += 1;
        }
        self.slots[index] = (addr, id);
    }

    /// Unmaps `addr`; returns the id it had.
    #[inline]
    pub fn remove(&mut self, addr: u64) -> Option<ChunkId> {
        let mut hole = self.find(addr);
        let (key, id) = self.slots[hole];
        if key != addr || addr == EMPTY {
            return None;
        }
        self.len -= 1;
        // Backward-shift deletion: pull later members of the probe run into the hole whenever
        // the hole lies on their path from their home slot.
        let mask = self.slots.len() - 1;
        let mut index = hole;
        loop {
            index = (index + 1) & mask;
            let key = self.slots[index].0;
            if key == EMPTY {
                break;
            }
            let home = self.home(key);
            let distance_to_hole = hole.wrapping_sub(home) & mask;
            let distance_to_index = index.wrapping_sub(home) & mask;
            if distance_to_hole < distance_to_index {
                self.slots[hole] = self.slots[index];
                hole = index;
            }
        }
        self.slots[hole] = (EMPTY, 0);
        Some(id)
    }

    /// Mapped addresses.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Rehashes into `slots` slots; rare, so kept out of line.
    #[cold]
    #[inline(never)]
    fn resize(&mut self, slots: usize) {
        let old = std::mem::replace(self, Self::with_slots(slots));
        for (addr, id) in old.slots.into_iter().filter(|&(addr, _)| addr != EMPTY) {
            let index = self.find(addr);
            self.slots[index] = (addr, id);
            self.len += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn agrees_with_a_hash_map_through_growth_and_removal() {
        let mut map = AddressMap::default();
        let mut model = HashMap::new();
        let mut state = 7u64;
        for step in 0..50_000u32 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Few distinct addresses, clustered, so probe runs collide and wrap around.
            let addr = ((state >> 33) % 3000 + 1) * 256;
            let growing = (step / 10_000) % 2 == 0;
            match (state >> 20) % 3 {
                0 if growing || (state >> 10).is_multiple_of(4) => {
                    map.insert(addr, step);
                    model.insert(addr, step);
                }
                0 | 1 => assert_eq!(map.remove(addr), model.remove(&addr)),
                _ => assert_eq!(map.get(addr), model.get(&addr).copied()),
            }
            assert_eq!(map.len(), model.len());
        }
        for (&addr, &id) in &model {
            assert_eq!(map.get(addr), Some(id));
        }
        assert_eq!(map.get(EMPTY), None);
        assert_eq!(map.remove(EMPTY), None);
    }
}
