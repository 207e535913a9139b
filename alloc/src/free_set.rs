//! An ordered set of free chunks tuned for the sizes bins really have.

use std::collections::BTreeSet;

use crate::bins::FreeKey;

/// A set promotes itself to a B-tree above this many chunks...
const PROMOTE_ABOVE: usize = 96;
/// ...and demotes itself to a sorted vector below this many (hysteresis avoids flapping).
const DEMOTE_BELOW: usize = 32;

/// The free chunks of one bin, ordered by (size, address).
///
/// Most bins hold a handful of chunks, where a sorted vector (binary search, a short `memmove`)
/// beats a B-tree several times over; a bin that grows past [`PROMOTE_ABOVE`] chunks switches to
/// a B-tree so that no operation ever costs more than O(log n) plus a bounded copy.
#[derive(Debug)]
pub(crate) enum FreeSet {
    /// Sorted ascending, no duplicates, at most `PROMOTE_ABOVE` entries.
    Small(Vec<FreeKey>),
    /// At least `DEMOTE_BELOW` entries.
    Large(BTreeSet<FreeKey>),
}

impl Default for FreeSet {
    fn default() -> Self {
        Self::Small(Vec::new())
    }
}

impl FreeSet {
    pub fn insert(&mut self, key: FreeKey) {
        match self {
            Self::Small(keys) => {
                if let Err(index) = keys.binary_search(&key) {
                    keys.insert(index, key);
                }
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
    pub fn remove(&mut self, key: &FreeKey) -> bool {
        match self {
            Self::Small(keys) => match keys.binary_search(key) {
                Ok(index) => {
                    keys.remove(index);
                    true
                }
                Err(_) => false,
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

    /// Removes and returns the smallest key not below `probe`.
    pub fn take_at_least(&mut self, probe: &FreeKey) -> Option<FreeKey> {
        match self {
            Self::Small(keys) => {
                let index = keys.partition_point(|key| key < probe);
                (index < keys.len()).then(|| keys.remove(index))
            }
            Self::Large(keys) => {
                let found = *keys.range(probe..).next()?;
                self.remove(&found);
                Some(found)
            }
        }
    }

    pub fn contains(&self, key: &FreeKey) -> bool {
        match self {
            Self::Small(keys) => keys.binary_search(key).is_ok(),
            Self::Large(keys) => keys.contains(key),
        }
    }

    pub fn last(&self) -> Option<&FreeKey> {
        match self {
            Self::Small(keys) => keys.last(),
            Self::Large(keys) => keys.last(),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Self::Small(keys) => keys.len(),
            Self::Large(keys) => keys.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The keys in ascending order.
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
                    assert_eq!(set.take_at_least(&probe), expected);
                }
                _ => assert_eq!(set.contains(&k), model.contains(&k)),
            }
            assert_eq!(set.len(), model.len());
            assert_eq!(set.last(), model.last());
            if step % 97 == 0 {
                assert!(set.iter().eq(model.iter()));
            }
        }
    }
}
