//! Counters, per-tag accounting and the public statistics snapshot.

use serde::{Deserialize, Serialize};

use crate::bookkeeping::reservation::Reservation;
use crate::bookkeeping::tag::Tag;

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

/// Running totals, kept on every operation. The allocator's `validate()` checks each total
/// against the heap's chunks and regions.
#[derive(Debug, Default, Clone)]
pub(crate) struct Counters {
    /// Successful allocations since creation.
    pub allocations: u64,
    /// Successful frees since creation.
    pub frees: u64,
    /// Failed allocations since creation.
    pub ooms: u64,
    /// Sum of the sizes of chunks in use.
    pub in_use: u64,
    /// The highest `in_use` since creation or the last reset; never below `in_use`.
    pub peak_in_use: u64,
    /// Sum of the sizes the user asked for, over chunks in use.
    pub requested_in_use: u64,
    /// Sum of those sizes each rounded up to the granule: `in_use` if every live allocation
    /// were packed without padding.
    pub packed_in_use: u64,
    /// Sum of the sizes of all regions; never above the allocator's limit.
    pub reserved: u64,
    /// The highest `reserved` since creation or the last reset; never below `reserved`.
    pub peak_reserved: u64,
    /// Regions reserved since creation (extensions in place not counted).
    pub regions_reserved: u64,
    /// Regions given back whole since creation.
    pub regions_released: u64,
}

impl Counters {
    /// Counts an allocation of a chunk of `size` bytes for a request of `requested` bytes,
    /// `packed` once rounded to the granule.
    #[inline]
    pub fn count_allocation(&mut self, size: u64, requested: u64, packed: u64) {
        self.allocations += 1;
        self.in_use += size;
        self.peak_in_use = self.peak_in_use.max(self.in_use);
        self.requested_in_use += requested;
        self.packed_in_use += packed;
    }

    /// Counts the free of an allocation counted by [`count_allocation`](Self::count_allocation)
    /// with the same sizes.
    #[inline]
    pub fn count_free(&mut self, size: u64, requested: u64, packed: u64) {
        self.frees += 1;
        self.in_use -= size;
        self.requested_in_use -= requested;
        self.packed_in_use -= packed;
    }

    /// Counts a failed allocation.
    pub fn count_oom(&mut self) {
        self.ooms += 1;
    }

    /// Counts `bytes` newly reserved, in a new region or at a region's new end.
    pub fn count_reserve(&mut self, bytes: u64, new_region: bool) {
        if new_region {
            self.regions_reserved += 1;
        }
        self.reserved += bytes;
        self.peak_reserved = self.peak_reserved.max(self.reserved);
    }

    /// Counts `bytes` given back, a whole region or a region's end.
    pub fn count_release(&mut self, bytes: u64, whole_region: bool) {
        if whole_region {
            self.regions_released += 1;
        }
        self.reserved -= bytes;
    }

    /// Starts new peaks from the current values.
    pub fn reset_peaks(&mut self) {
        self.peak_in_use = self.in_use;
        self.peak_reserved = self.reserved;
    }
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
    /// Bytes freed on one stream and waiting for the work queued there before other streams may
    /// have them ([`Allocator::allocate_on`](crate::Allocator::allocate_on)); counted in
    /// `in_use` until then.
    pub held_for_streams: u64,
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
    /// How memory is reserved: what the growth policy comes to over the source.
    pub reservation: Reservation,
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
