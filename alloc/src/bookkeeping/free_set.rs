//! The free chunks of one bin: an ordered set tuned for the sizes bins really have, and its key.

use std::collections::BTreeSet;

use crate::bookkeeping::chunk::ChunkId;

/// A free chunk's place in its bin; the derived order is (size, address), the best-fit order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct FreeKey {
    /// The chunk's size in bytes.
    pub size: u64,
    /// The chunk's first byte; no two free chunks share it, so keys are unique.
    pub addr: u64,
    /// The chunk's id in the arena ([`chunk`](Self::chunk)), widened to a full word: with a
    /// 4-byte id and 4 bytes of padding, a copy of a key read 8 bytes of which only 4 had just
    /// been stored, which stalls the load (no store forwarding) on the hot path.
    pub id: u64,
}

impl FreeKey {
    /// The key of free chunk `id` of `size` bytes at `addr`.
    #[inline]
    pub fn new(size: u64, addr: u64, id: ChunkId) -> Self {
        Self {
            size,
            addr,
            id: u64::from(id),
        }
    }

    /// The chunk's id in the arena.
    #[inline]
    pub fn chunk(&self) -> ChunkId {
        // Only `new` sets `id`, from a `ChunkId`, so it fits.
        ChunkId::try_from(self.id).unwrap_or(crate::bookkeeping::chunk::NONE)
    }
}

/// A set promotes itself to a B-tree above this many chunks...
const PROMOTE_ABOVE: usize = 32;
/// ...and demotes itself to a vector below this many (hysteresis avoids flapping).
const DEMOTE_BELOW: usize = 16;

/// The free chunks of one bin, found in (size, address) order.
///
/// Most bins hold a handful of chunks. There an unordered vector wins: an insertion is a push,
/// a removal a swap with the last key, a replacement a write in place, and a search one pass over
/// a few cache lines, where a sorted vector pays a `memmove` for every insertion and removal. A
/// bin that grows past [`PROMOTE_ABOVE`] chunks switches to a B-tree, so that no operation costs
/// more than O(log n) or a pass over a bounded vector.
#[derive(Debug)]
pub(crate) enum FreeSet {
    /// In no order, no duplicates, at most `PROMOTE_ABOVE` entries.
    Small(Vec<FreeKey>),
    /// At least `DEMOTE_BELOW` entries.
    Large(BTreeSet<FreeKey>),
}

/// A key in a set and, in a small set, its index: valid until the set next changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    /// The key.
    pub key: FreeKey,
    /// Its index in a `Small` set.
    index: Option<usize>,
}

impl Default for FreeSet {
    fn default() -> Self {
        Self::Small(Vec::new())
    }
}

impl FreeSet {
    /// Adds `key`, which must not be present.
    #[inline]
    pub fn insert(&mut self, key: FreeKey) {
        match self {
            Self::Small(keys) => {
                debug_assert!(!keys.contains(&key), "{key:?} is filed twice");
                keys.push(key);
                if keys.len() > PROMOTE_ABOVE {
                    *self = Self::Large(keys.drain(..).collect());
                }
            }
            Self::Large(keys) => {
                keys.insert(key);
            }
        }
    }

    /// Removes `key`; returns whether it was present.
    #[inline]
    pub fn remove(&mut self, key: &FreeKey) -> bool {
        match self {
            Self::Small(keys) => match keys.iter().position(|other| other == key) {
                Some(index) => {
                    keys.swap_remove(index);
                    true
                }
                None => false,
            },
            Self::Large(keys) => {
                let removed = keys.remove(key);
                if keys.len() < DEMOTE_BELOW {
                    *self = Self::Small(std::mem::take(keys).into_iter().collect());
                }
                removed
            }
        }
    }

    /// Replaces `old`, which must be present, by `new`, which must belong to the same bin: in
    /// place in a small set, by a removal and an insertion in a large one.
    #[inline]
    pub fn replace(&mut self, old: &FreeKey, new: FreeKey) {
        let slot = match self {
            Self::Small(keys) => keys.iter().position(|other| other == old),
            Self::Large(_) => None,
        };
        self.replace_at(
            Slot {
                key: *old,
                index: slot,
            },
            new,
        );
    }

    /// Like [`replace`](Self::replace), for a key found by [`first_at_least`](Self::first_at_least).
    #[inline]
    pub fn replace_at(&mut self, slot: Slot, new: FreeKey) {
        if let (Self::Small(keys), Some(index)) = (&mut *self, slot.index) {
            // Word by word: a caller's key often sits in memory just written a word at a time,
            // and a whole-key copy would read it back with wider loads, which stall.
            let key = &mut keys[index];
            key.size = new.size;
            key.addr = new.addr;
            key.id = new.id;
            return;
        }
        self.remove_at(slot);
        self.insert(new);
    }

    /// Removes a key found by [`first_at_least`](Self::first_at_least).
    #[inline]
    pub fn remove_at(&mut self, slot: Slot) {
        match (&mut *self, slot.index) {
            (Self::Small(keys), Some(index)) => {
                keys.swap_remove(index);
            }
            _ => {
                self.remove(&slot.key);
            }
        }
    }

    /// The smallest key not below `probe`, with where it sits.
    #[inline]
    pub fn first_at_least(&self, probe: &FreeKey) -> Option<Slot> {
        match self {
            Self::Small(keys) => {
                let mut best: Option<(usize, &FreeKey)> = None;
                for (index, key) in keys.iter().enumerate() {
                    if key >= probe && best.is_none_or(|(_, best)| key < best) {
                        best = Some((index, key));
                    }
                }
                best.map(|(index, &key)| Slot {
                    key,
                    index: Some(index),
                })
            }
            Self::Large(keys) => keys
                .range(probe..)
                .next()
                .map(|&key| Slot { key, index: None }),
        }
    }

    /// True when `key` is present.
    #[inline]
    pub fn contains(&self, key: &FreeKey) -> bool {
        match self {
            Self::Small(keys) => keys.contains(key),
            Self::Large(keys) => keys.contains(key),
        }
    }

    /// The largest key.
    #[inline]
    pub fn last(&self) -> Option<&FreeKey> {
        match self {
            Self::Small(keys) => keys.iter().max(),
            Self::Large(keys) => keys.last(),
        }
    }

    /// Number of keys.
    #[inline]
    pub fn len(&self) -> usize {
        match self {
            Self::Small(keys) => keys.len(),
            Self::Large(keys) => keys.len(),
        }
    }

    /// True when the set holds no key.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The keys, in no particular order.
    pub fn iter(&self) -> Box<dyn Iterator<Item = &FreeKey> + '_> {
        match self {
            Self::Small(keys) => Box::new(keys.iter()),
            Self::Large(keys) => Box::new(keys.iter()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(size: u64, addr: u64) -> FreeKey {
        FreeKey { size, addr, id: 0 }
    }

    /// Drives the set through promotion and demotion against a `BTreeSet` model.
    #[test]
    fn behaves_like_an_ordered_set_across_promotion_and_demotion() {
        let mut set = FreeSet::default();
        let mut model = BTreeSet::new();
        let mut state = 12345u64;
        for step in 0..5000u64 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = key((state >> 40) % 64 * 256 + 256, (state >> 20) % 512 * 256);
            // Grow for a while, then shrink, twice, so both representations are exercised.
            let grow = (step / 1250) % 2 == 0;
            match (state >> 8) % 4 {
                0 | 1 if grow => {
                    set.insert(k);
                    model.insert(k);
                }
                0 => {
                    assert_eq!(set.remove(&k), model.remove(&k));
                }
                2 => {
                    let probe = key(k.size, 0);
                    let expected = model.range(probe..).next().copied();
                    if let Some(found) = expected {
                        model.remove(&found);
                    }
                    let found = set.first_at_least(&probe);
                    assert_eq!(found.map(|slot| slot.key), expected);
                    if let Some(found) = found {
                        set.remove_at(found);
                    }
                }
                3 if (state >> 4).is_multiple_of(2) => {
                    // Replace a present key by one of the same bin, as a split or merge does.
                    if let Some(&old) = model
                        .iter()
                        .nth((state >> 12) as usize % model.len().max(1))
                    {
                        let new = key(old.size + 256, old.addr.saturating_sub(256));
                        if !model.contains(&new) {
                            model.remove(&old);
                            model.insert(new);
                            set.replace(&old, new);
                        }
                    }
                    let probe = key(k.size, 0);
                    let first = set.first_at_least(&probe).map(|slot| slot.key);
                    assert_eq!(first, model.range(probe..).next().copied());
                    if let Some(slot) = set.first_at_least(&probe) {
                        // Rekeying the found slot in place keeps the order.
                        let new = key(slot.key.size, slot.key.addr + 1);
                        if !model.contains(&new) {
                            model.remove(&slot.key);
                            model.insert(new);
                            set.replace_at(slot, new);
                        }
                    }
                }
                _ => assert_eq!(set.contains(&k), model.contains(&k)),
            }
            assert_eq!(set.len(), model.len());
            assert_eq!(set.last(), model.last());
            if step % 97 == 0 {
                let mut keys: Vec<FreeKey> = set.iter().copied().collect();
                keys.sort_unstable();
                assert!(keys.iter().eq(model.iter()));
            }
        }
    }
}
