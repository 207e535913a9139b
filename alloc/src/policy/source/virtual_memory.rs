//! A source of addresses only: for planning, trace replay, fuzzing and tests.

use super::region_book::RegionBook;
use super::{MemorySource, SourceError};
use crate::bookkeeping::size::GRANULE;
use crate::policy::config::EXPANSION_STEP;

/// Hands out addresses from a large virtual range without backing them with memory.
///
/// Every region gets an address span as large as the whole capacity, so it can grow in place
/// ([`MemorySource::extend`]) up to the capacity, unless made with
/// [`fixed_regions`](Self::fixed_regions); spans are never reused, so a stale address can never
/// alias a new region.
///
/// ```
/// use headroom_alloc::{MemorySource, VirtualMemory};
/// let mut space = VirtualMemory::new(1 << 30);
/// let base = space.reserve(4096).unwrap();
/// assert_eq!(base % 256, 0);
/// assert!(space.reserve(1 << 30).is_err()); // over capacity
/// space.extend(base, 4096, 4096).unwrap(); // grows in place
/// assert_eq!(space.reserved(), 8192);
/// ```
#[derive(Debug, Clone)]
pub struct VirtualMemory {
    /// The live regions, within the capacity.
    book: RegionBook,
    /// Where the next region's span starts; spans are `span` bytes apart.
    next_base: u64,
    /// Address space set aside per region: the capacity rounded up to 2 MiB.
    span: u64,
    /// Whether regions grow and shrink in place.
    resizable: bool,
    /// The step they grow and shrink in: a positive multiple of 256.
    growth_step: u64,
}

/// Where virtual addresses start: far from zero, so that a null address is never valid.
const FIRST_BASE: u64 = 1 << 40;

impl VirtualMemory {
    /// A virtual space that can hold `capacity` bytes at once.
    pub fn new(capacity: u64) -> Self {
        Self {
            book: RegionBook::new(capacity),
            next_base: FIRST_BASE,
            span: capacity.max(1).div_ceil(2 << 20).saturating_mul(2 << 20),
            resizable: true,
            growth_step: EXPANSION_STEP,
        }
    }

    /// The same space with regions that grow and shrink in steps of `bytes` (rounded up to 256
    /// bytes) instead of [`EXPANSION_STEP`]: 256 for an address space of no pages, a host page to
    /// plan a CPU device.
    pub fn with_growth_step(mut self, bytes: u64) -> Self {
        self.growth_step = bytes.max(1).div_ceil(GRANULE).saturating_mul(GRANULE);
        self
    }

    /// The same space with regions that cannot grow or shrink in place, like plain
    /// `cuMemAlloc` or host allocations: for planning a device without virtual memory
    /// management, and for tests of region-by-region growth.
    pub fn fixed_regions(mut self) -> Self {
        self.resizable = false;
        self
    }

    /// Bytes currently reserved from this space.
    pub fn reserved(&self) -> u64 {
        self.book.reserved()
    }

    fn check_resizable(&self) -> Result<(), SourceError> {
        if !self.resizable {
            return Err(SourceError::new("this virtual space has fixed regions"));
        }
        Ok(())
    }
}

impl MemorySource for VirtualMemory {
    fn name(&self) -> &str {
        "virtual"
    }

    fn reserve(&mut self, bytes: u64) -> Result<u64, SourceError> {
        self.book.check_room(bytes)?;
        let base = self.next_base;
        self.next_base = base
            .checked_add(self.span)
            .ok_or_else(|| SourceError::new("virtual address space exhausted"))?;
        self.book.set(base, 0, bytes);
        Ok(base)
    }

    fn release(&mut self, base: u64, bytes: u64) -> Result<(), SourceError> {
        self.book.check_region(base, bytes)?;
        self.book.remove(base, bytes);
        Ok(())
    }

    fn capacity(&self) -> u64 {
        self.book.capacity()
    }

    fn can_resize(&self) -> bool {
        self.resizable
    }

    fn growth_step(&self) -> u64 {
        self.growth_step
    }

    fn extend(&mut self, base: u64, size: u64, extra: u64) -> Result<(), SourceError> {
        self.check_resizable()?;
        self.book.check_region(base, size)?;
        self.book.check_room(extra)?;
        // A region never outgrows its span, since no region can exceed the capacity.
        self.book.set(base, size, size + extra);
        Ok(())
    }

    fn shrink(&mut self, base: u64, size: u64, bytes: u64) -> Result<(), SourceError> {
        self.check_resizable()?;
        self.book.check_shrink(base, size, bytes)?;
        self.book.set(base, size, size - bytes);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_grow_and_shrink_in_place_within_capacity() {
        let mut space = VirtualMemory::new(8 << 20);
        let a = space.reserve(2 << 20).unwrap();
        let b = space.reserve(2 << 20).unwrap();
        assert!(b >= a + (8 << 20), "spans leave room to grow");
        space.extend(a, 2 << 20, 4 << 20).unwrap();
        assert!(space.extend(a, 6 << 20, 256).is_err(), "capacity is 8 MiB");
        assert!(space.extend(a, 2 << 20, 256).is_err(), "stale size");
        space.shrink(a, 6 << 20, 5 << 20).unwrap();
        assert!(
            space.shrink(a, 1 << 20, 1 << 20).is_err(),
            "cannot shrink to nothing"
        );
        assert_eq!(space.reserved(), 3 << 20);
        assert!(space.release(a, 2 << 20).is_err(), "wrong size");
        space.release(a, 1 << 20).unwrap();
        space.release(b, 2 << 20).unwrap();
        assert_eq!(space.reserved(), 0);

        let mut fixed = VirtualMemory::new(8 << 20).fixed_regions();
        let c = fixed.reserve(2 << 20).unwrap();
        assert!(!fixed.can_resize());
        assert!(fixed.extend(c, 2 << 20, 256).is_err());
        assert!(fixed.shrink(c, 2 << 20, 256).is_err());
    }
}
