//! A source of addresses only: for planning, trace replay, fuzzing and tests.

use std::collections::BTreeMap;

use super::{MemorySource, SourceError};

/// Hands out addresses from a large virtual range without backing them with memory.
///
/// Every region gets an address span as large as the whole capacity, so it can grow in place
/// ([`MemorySource::extend`]) up to the capacity; spans are never reused, so a stale address can
/// never alias a new region.
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
    capacity: u64,
    /// Live regions: base to current size.
    regions: BTreeMap<u64, u64>,
    /// Sum of the sizes in `regions`; never above `capacity`.
    reserved: u64,
    /// Where the next region's span starts; spans are `span` bytes apart.
    next_base: u64,
    /// Address space set aside per region: the capacity rounded up to 2 MiB.
    span: u64,
}

/// Where virtual addresses start: far from zero, so that a null address is never valid.
const FIRST_BASE: u64 = 1 << 40;

impl VirtualMemory {
    /// A virtual space that can hold `capacity` bytes at once.
    pub fn new(capacity: u64) -> Self {
        Self {
            capacity,
            regions: BTreeMap::new(),
            reserved: 0,
            next_base: FIRST_BASE,
            span: capacity.max(1).div_ceil(2 << 20).saturating_mul(2 << 20),
        }
    }

    /// Bytes currently reserved from this space.
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    fn check_granular(bytes: u64) -> Result<(), SourceError> {
        if bytes == 0 || !bytes.is_multiple_of(256) {
            return Err(SourceError::new(format!(
                "size {bytes} is not a positive multiple of 256"
            )));
        }
        Ok(())
    }

    fn check_room(&self, bytes: u64) -> Result<(), SourceError> {
        let available = self.capacity - self.reserved;
        if bytes > available {
            return Err(SourceError::new(format!(
                "{bytes} bytes requested but only {available} of {} available",
                self.capacity
            )));
        }
        Ok(())
    }

    /// Checks that a region of `size` bytes lives at `base`.
    fn check_region(&self, base: u64, size: u64) -> Result<(), SourceError> {
        match self.regions.get(&base) {
            Some(&held) if held == size => Ok(()),
            _ => Err(SourceError::new(format!(
                "no region of {size} bytes at {base:#x} was reserved here"
            ))),
        }
    }
}

impl MemorySource for VirtualMemory {
    fn name(&self) -> &str {
        "virtual"
    }

    fn reserve(&mut self, bytes: u64) -> Result<u64, SourceError> {
        Self::check_granular(bytes)?;
        self.check_room(bytes)?;
        let base = self.next_base;
        self.next_base = base
            .checked_add(self.span)
            .ok_or_else(|| SourceError::new("virtual address space exhausted"))?;
        self.regions.insert(base, bytes);
        self.reserved += bytes;
        Ok(base)
    }

    fn release(&mut self, base: u64, bytes: u64) -> Result<(), SourceError> {
        self.check_region(base, bytes)?;
        self.regions.remove(&base);
        self.reserved -= bytes;
        Ok(())
    }

    fn capacity(&self) -> u64 {
        self.capacity
    }

    fn can_resize(&self) -> bool {
        true
    }

    fn extend(&mut self, base: u64, size: u64, extra: u64) -> Result<(), SourceError> {
        self.check_region(base, size)?;
        Self::check_granular(extra)?;
        self.check_room(extra)?;
        // A region never outgrows its span, since no region can exceed the capacity.
        self.regions.insert(base, size + extra);
        self.reserved += extra;
        Ok(())
    }

    fn shrink(&mut self, base: u64, size: u64, bytes: u64) -> Result<(), SourceError> {
        self.check_region(base, size)?;
        Self::check_granular(bytes)?;
        if bytes >= size {
            return Err(SourceError::new(format!(
                "cannot shrink a {size}-byte region by {bytes} bytes"
            )));
        }
        self.regions.insert(base, size - bytes);
        self.reserved -= bytes;
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
    }
}
