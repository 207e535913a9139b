//! The `offset-allocator` crate (Sebastian Aaltonen's O(1) TLSF-style allocator, in Rust).

use offset_allocator::{Allocation, Allocator};

use super::{GRANULE, TraceAllocator};

/// offset-allocator over one fixed pool, in units of 256 bytes (its sizes are `u32`).
pub struct OffsetAllocator {
    inner: Allocator,
    /// Highest end (in units) of any allocation handed out.
    high_water: u64,
}

impl OffsetAllocator {
    /// A pool of `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        let units = u32::try_from(capacity / GRANULE).unwrap_or(u32::MAX);
        Self {
            inner: Allocator::new(units),
            high_water: 0,
        }
    }
}

impl TraceAllocator for OffsetAllocator {
    type Handle = Allocation;

    fn name(&self) -> &'static str {
        "offset-allocator"
    }

    fn allocate(&mut self, size: u64) -> Option<Allocation> {
        let units = u32::try_from(size.max(1).div_ceil(GRANULE)).ok()?;
        let allocation = self.inner.allocate(units)?;
        let end = u64::from(allocation.offset) + u64::from(self.inner.allocation_size(allocation));
        self.high_water = self.high_water.max(end);
        Some(allocation)
    }

    fn free(&mut self, allocation: Allocation) {
        self.inner.free(allocation);
    }

    fn peak_reserved(&self) -> u64 {
        self.high_water * GRANULE
    }
}
