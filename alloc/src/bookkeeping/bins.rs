//! Free chunks filed in power-of-two size classes, searched in (size, address) order, one of
//! them kept apart.

use crate::bookkeeping::free_set::{FreeKey, FreeSet, Slot};
use crate::bookkeeping::size::GRANULE;

/// Number of bins: bin `i` holds free chunks of at least `256 << i` bytes, the last everything
/// from 256 MiB up.
pub const BIN_COUNT: usize = 21;

/// The bin a free chunk of `size` bytes belongs in.
///
/// ```
/// use headroom_alloc::bin_index;
/// assert_eq!(bin_index(256), 0);
/// assert_eq!(bin_index(511), 0);
/// assert_eq!(bin_index(512), 1);
/// assert_eq!(bin_index(1 << 40), 20);
/// ```
#[inline]
pub fn bin_index(size: u64) -> usize {
    let granules = (size / GRANULE).max(1);
    ((63 - granules.leading_zeros()) as usize).min(BIN_COUNT - 1)
}

/// The smallest chunk size bin `index` holds.
pub fn bin_min_size(index: usize) -> u64 {
    GRANULE << index
}

/// A free chunk found by a best-fit search, with where it sits; valid until the bins change.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Found {
    /// The hot chunk, the one kept out of the bins.
    Hot(FreeKey),
    /// A chunk in bin `bin`, at `slot`.
    InBin {
        /// The bin.
        bin: usize,
        /// Where in it.
        slot: Slot,
    },
}

impl Found {
    /// The chunk's key.
    #[inline]
    pub fn key(&self) -> FreeKey {
        match self {
            Self::Hot(key) => *key,
            Self::InBin { slot, .. } => slot.key,
        }
    }
}

/// The bins, with a bitmap of the non-empty ones so that a search skips empty bins in O(1), and
/// one free chunk kept out of them, the hot one.
///
/// A chunk filed while no chunk is hot becomes the hot one, and stays hot through its splits and
/// merges until it is taken whole or merged into a lower neighbour. A stack-like workload (a
/// forward pass that allocates layer by layer, a backward pass that frees in reverse) splits and
/// merges the same free chunk, the top of the region, again and again: hot, it is resized in
/// place even when its size crosses into another bin. Best fit compares it with the best in the
/// bins, so the rule is unchanged.
#[derive(Debug)]
pub(crate) struct Bins {
    /// Every free chunk but `hot`, each in the bin of its size.
    sets: [FreeSet; BIN_COUNT],
    /// Bit `i` is set exactly when `sets[i]` is non-empty.
    non_empty: u32,
    /// A free chunk in no bin, or [`NO_KEY`] (size 0, address 0: no chunk has either). Filed
    /// when there was none, it stays until it is taken out, whatever its remainders and mergers
    /// become.
    hot: FreeKey,
}

/// The hot slot when it holds no chunk.
const NO_KEY: FreeKey = FreeKey {
    size: 0,
    addr: 0,
    id: 0,
};

impl Default for Bins {
    fn default() -> Self {
        Self {
            sets: Default::default(),
            non_empty: 0,
            hot: NO_KEY,
        }
    }
}

impl Bins {
    /// Files a free chunk: as the hot one when there is none, else in its bin.
    #[inline]
    pub fn insert(&mut self, key: FreeKey) {
        if self.hot.size == 0 {
            self.hot = key;
        } else {
            self.file(key);
        }
    }

    /// Files a free chunk in its bin.
    #[inline]
    fn file(&mut self, key: FreeKey) {
        let bin = bin_index(key.size);
        self.sets[bin].insert(key);
        self.non_empty |= 1 << bin;
    }

    /// Takes a free chunk out; returns whether it was there.
    #[inline]
    pub fn remove(&mut self, key: FreeKey) -> bool {
        if self.hot.addr == key.addr {
            self.hot = NO_KEY;
            return true;
        }
        let bin = bin_index(key.size);
        let removed = self.sets[bin].remove(&key);
        self.mark(bin);
        removed
    }

    /// The best fit for `size` bytes, left in place: the smallest free chunk of at least `size`,
    /// the lowest address among equals.
    #[inline]
    pub fn best_fit(&self, size: u64) -> Option<Found> {
        let hot = self.hot;
        let hot_fits = hot.size >= size;
        let first_bin = bin_index(size);
        let probe = FreeKey {
            size,
            addr: 0,
            id: 0,
        };
        if let Some(slot) = self.sets[first_bin].first_at_least(&probe) {
            if hot_fits && hot < slot.key {
                return Some(Found::Hot(hot));
            }
            return Some(Found::InBin {
                bin: first_bin,
                slot,
            });
        }
        // Nothing in the first bin fits, so every chunk of a higher bin does: the best fit is
        // the hot chunk or the smallest chunk of the next non-empty bin. That bin is not
        // searched when the hot chunk fits and sits in a lower one.
        let higher = self.non_empty & !((2u32 << first_bin) - 1);
        let bin = higher.trailing_zeros() as usize;
        if higher == 0 || (hot_fits && bin_index(hot.size) < bin) {
            return hot_fits.then_some(Found::Hot(hot));
        }
        let smallest = FreeKey {
            size: 0,
            addr: 0,
            id: 0,
        };
        let slot = self.sets[bin].first_at_least(&smallest)?;
        if hot_fits && hot < slot.key {
            return Some(Found::Hot(hot));
        }
        Some(Found::InBin { bin, slot })
    }

    /// Takes a chunk found by [`best_fit`](Self::best_fit) out.
    #[inline]
    pub fn take(&mut self, found: Found) {
        match found {
            Found::Hot(_) => self.hot = NO_KEY,
            Found::InBin { bin, slot } => {
                self.sets[bin].remove_at(slot);
                self.mark(bin);
            }
        }
    }

    /// Replaces a chunk found by [`best_fit`](Self::best_fit) by `new` (its split remainder).
    #[inline]
    pub fn replace_found(&mut self, found: Found, new: FreeKey) {
        match found {
            Found::Hot(_) => self.hot = new,
            Found::InBin { bin, slot } if bin_index(new.size) == bin => {
                self.sets[bin].replace_at(slot, new);
            }
            Found::InBin { .. } => {
                self.take(found);
                self.file(new);
            }
        }
    }

    /// Replaces filed chunk `old` by `new` (a split remainder or a merged chunk), in place when
    /// `old` is the hot chunk or both belong to the same bin.
    #[inline(always)]
    pub fn replace(&mut self, old: FreeKey, new: FreeKey) {
        if self.hot.addr == old.addr {
            self.hot = new;
            return;
        }
        let bin = bin_index(old.size);
        if bin == bin_index(new.size) {
            self.sets[bin].replace(&old, new);
        } else {
            self.remove(old);
            self.file(new);
        }
    }

    /// Brings bin `bin`'s bit in the bitmap up to date.
    #[inline]
    fn mark(&mut self, bin: usize) {
        if self.sets[bin].is_empty() {
            self.non_empty &= !(1 << bin);
        } else {
            self.non_empty |= 1 << bin;
        }
    }

    /// True when `key` is the hot chunk or filed in its bin.
    pub fn contains(&self, key: FreeKey) -> bool {
        self.hot == key || self.sets[bin_index(key.size)].contains(&key)
    }

    /// The largest free chunk, if any.
    pub fn largest(&self) -> Option<FreeKey> {
        let in_bins = (self.non_empty != 0).then(|| {
            let top = 31 - self.non_empty.leading_zeros() as usize;
            self.sets[top].last().copied()
        });
        in_bins
            .flatten()
            .max((self.hot.size > 0).then_some(self.hot))
    }

    /// The free chunks of bin `index`, in no particular order; the hot chunk is in none.
    pub fn bin(&self, index: usize) -> impl Iterator<Item = &FreeKey> {
        self.sets[index].iter()
    }

    /// True when bin `index` is marked non-empty in the bitmap.
    pub fn marked_non_empty(&self, index: usize) -> bool {
        self.non_empty & (1 << index) != 0
    }

    /// Number of free chunks, the hot one included.
    pub fn len(&self) -> usize {
        self.sets.iter().map(FreeSet::len).sum::<usize>() + usize::from(self.hot.size > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(size: u64, addr: u64) -> FreeKey {
        FreeKey { size, addr, id: 0 }
    }

    fn take_best_fit(bins: &mut Bins, size: u64) -> Option<FreeKey> {
        let found = bins.best_fit(size)?;
        bins.take(found);
        Some(found.key())
    }

    #[test]
    fn bins_are_powers_of_two_from_256_bytes() {
        for i in 0..BIN_COUNT {
            assert_eq!(bin_index(bin_min_size(i)), i);
            if i > 0 {
                assert_eq!(bin_index(bin_min_size(i) - GRANULE), i - 1);
            }
        }
        assert_eq!(bin_index(!255), BIN_COUNT - 1);
    }

    #[test]
    fn the_first_chunk_filed_stays_hot_and_out_of_the_bins_until_taken() {
        let mut bins = Bins::default();
        bins.insert(key(1 << 20, 0x100_0000)); // hot: the top of a region, say
        bins.insert(key(4096, 0x3000));
        assert!(bins.marked_non_empty(bin_index(4096)));
        assert!(!bins.marked_non_empty(bin_index(1 << 20)));
        // Split and merged across bins, it never enters one.
        bins.replace(key(1 << 20, 0x100_0000), key(8192, 0x10f_e000));
        bins.replace(key(8192, 0x10f_e000), key(3 << 20, 0x0f0_0000));
        assert!((0..BIN_COUNT).all(|bin| bins.bin(bin).all(|key| key.size == 4096)));
        assert_eq!(bins.len(), 2);
        assert!(bins.contains(key(3 << 20, 0x0f0_0000)));
        // Best fit weighs it against the bins: smaller wins, then the lower address.
        bins.insert(key(3 << 20, 0x800_0000));
        assert_eq!(
            take_best_fit(&mut bins, 2 << 20),
            Some(key(3 << 20, 0x0f0_0000))
        );
        assert_eq!(
            take_best_fit(&mut bins, 2 << 20),
            Some(key(3 << 20, 0x800_0000))
        );
        bins.insert(key(2048, 0x9000)); // hot again, the slot being free
        assert_eq!(take_best_fit(&mut bins, 1024), Some(key(2048, 0x9000)));
        assert_eq!(take_best_fit(&mut bins, 1024), Some(key(4096, 0x3000)));
        assert_eq!(bins.len(), 0);
        assert_eq!(bins.largest(), None);
    }

    #[test]
    fn best_fit_past_the_first_bin_weighs_the_hot_chunk_against_the_next_bin() {
        let mut bins = Bins::default();
        bins.insert(key(3 << 20, 0x100_0000)); // hot, in the 2 MiB bin
        bins.insert(key(8192, 0x3000));
        bins.insert(key(1 << 30, 0x4000_0000));
        // The next non-empty bin lies below the hot chunk's: its smallest chunk wins.
        assert_eq!(take_best_fit(&mut bins, 4352), Some(key(8192, 0x3000)));
        // Now it lies above: the hot chunk wins.
        assert_eq!(
            bins.best_fit(4352).map(|found| found.key()),
            Some(key(3 << 20, 0x100_0000))
        );
        // The hot chunk is too small: the next bin's smallest.
        assert_eq!(
            take_best_fit(&mut bins, 4 << 20),
            Some(key(1 << 30, 0x4000_0000))
        );
        assert_eq!(take_best_fit(&mut bins, 4 << 20), None);
        assert_eq!(
            take_best_fit(&mut bins, 3 << 20),
            Some(key(3 << 20, 0x100_0000))
        );
    }

    #[test]
    fn best_fit_takes_the_smallest_then_the_lowest_address() {
        let mut bins = Bins::default();
        bins.insert(key(4096, 0x3000));
        bins.insert(key(2048, 0x9000));
        bins.insert(key(2048, 0x1000));
        bins.insert(key(1 << 20, 0x10_0000));
        assert_eq!(take_best_fit(&mut bins, 1024), Some(key(2048, 0x1000)));
        assert_eq!(take_best_fit(&mut bins, 1024), Some(key(2048, 0x9000)));
        assert_eq!(take_best_fit(&mut bins, 3000), Some(key(4096, 0x3000)));
        assert_eq!(bins.largest(), Some(key(1 << 20, 0x10_0000)));
        assert_eq!(take_best_fit(&mut bins, 2 << 20), None);
        assert_eq!(take_best_fit(&mut bins, 256), Some(key(1 << 20, 0x10_0000)));
        assert_eq!(bins.len(), 0);
        bins.insert(key(4096, 0x3000));
        bins.replace(key(4096, 0x3000), key(3840, 0x3100));
        bins.replace(key(3840, 0x3100), key(1024, 0x3100)); // moves to a lower bin
        assert_eq!(bins.largest(), Some(key(1024, 0x3100)));
        assert!(!bins.marked_non_empty(bin_index(3840)));
        assert!(bins.remove(key(1024, 0x3100)));
        assert_eq!(bins.largest(), None);
    }
}
