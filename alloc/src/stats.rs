//! Counters, per-tag accounting and the public statistics snapshot.

use serde::{Deserialize, Serialize};

use crate::tag::Tag;

/// Live and peak bytes held under one tag.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagUsage {
    /// The tag.
    pub tag: Tag,
    /// Bytes of chunks currently handed out under this tag.
    pub live: u64,
    /// Highest `live` since creation or the last [`reset_peak`](crate::Allocator::reset_peak).
    pub peak: u64,
    /// Allocations currently live under this tag.
    pub live_allocations: u64,
}

/// Per-tag usage, indexed by [`Tag::index`].
#[derive(Debug, Default, Clone)]
pub(crate) struct TagTable {
    rows: Vec<TagUsage>,
}

impl TagTable {
    /// Counts `bytes` more under `tag`.
    #[inline]
    pub fn add(&mut self, tag: Tag, bytes: u64) {
        let index = tag.index();
        if index >= self.rows.len() {
            self.rows.resize(index + 1, TagUsage::default());
        }
        let row = &mut self.rows[index];
        row.tag = tag;
        row.live += bytes;
        row.peak = row.peak.max(row.live);
        row.live_allocations += 1;
    }

    /// Counts `bytes` fewer under `tag`, which must hold at least that much.
    #[inline]
    pub fn sub(&mut self, tag: Tag, bytes: u64) {
        if let Some(row) = self.rows.get_mut(tag.index()) {
            row.live -= bytes;
            row.live_allocations -= 1;
        }
    }

    /// Live bytes under `tag`.
    pub fn live(&self, tag: Tag) -> u64 {
        self.rows.get(tag.index()).map_or(0, |row| row.live)
    }

    /// Sets every peak to the current live value.
    pub fn reset_peaks(&mut self) {
        for row in &mut self.rows {
            row.peak = row.live;
        }
    }

    /// Tags ever used, with their usage.
    pub fn used(&self) -> Vec<TagUsage> {
        self.rows
            .iter()
            .filter(|row| row.peak > 0)
            .copied()
            .collect()
    }
}

/// Monotonic counters kept on every operation.
#[derive(Debug, Default, Clone)]
pub(crate) struct Counters {
    pub allocations: u64,
    pub frees: u64,
    pub ooms: u64,
    /// Sum of the sizes of chunks in use.
    pub in_use: u64,
    pub peak_in_use: u64,
    /// Sum of the sizes the user asked for, over chunks in use.
    pub requested_in_use: u64,
    /// Sum of those sizes each rounded up to the granule: `in_use` if every live allocation
    /// were packed without padding.
    pub packed_in_use: u64,
    /// Sum of the sizes of all regions.
    pub reserved: u64,
    pub peak_reserved: u64,
    pub regions_reserved: u64,
    pub regions_released: u64,
}

/// A point-in-time view of an allocator, like `torch.cuda.memory_stats()`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Successful allocations since creation.
    pub allocations: u64,
    /// Successful frees since creation.
    pub frees: u64,
    /// Failed allocations since creation.
    pub ooms: u64,
    /// Bytes handed out (whole chunks, so including rounding and unsplit remainders).
    pub in_use: u64,
    /// Highest `in_use` since creation or the last reset of peaks.
    pub peak_in_use: u64,
    /// Bytes the callers asked for, over live allocations.
    pub requested_in_use: u64,
    /// Padding inside chunks handed out whole: `in_use` less every live request rounded to 256.
    pub internal_fragmentation: u64,
    /// Bytes reserved from the memory source.
    pub reserved: u64,
    /// Highest `reserved` since creation or the last reset of peaks.
    pub peak_reserved: u64,
    /// The most bytes that may be reserved.
    pub limit: u64,
    /// Regions currently reserved.
    pub regions: usize,
    /// Regions reserved since creation.
    pub regions_reserved: u64,
    /// Regions released since creation.
    pub regions_released: u64,
    /// Bytes reserved but not handed out.
    pub free: u64,
    /// The largest free chunk: the biggest request that fits without growing.
    pub largest_free: u64,
    /// `(free - largest_free) / free`, or 0 when nothing is free.
    pub fragmentation: f64,
    /// Live and peak bytes per tag, for every tag ever used.
    pub tags: Vec<TagUsage>,
}

/// `(free - largest_free) / free`, or 0 when nothing is free.
pub fn fragmentation(free: u64, largest_free: u64) -> f64 {
    if free == 0 {
        0.0
    } else {
        (free - largest_free) as f64 / free as f64
    }
}
