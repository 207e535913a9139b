//! A source of addresses only: for planning, trace replay, fuzzing and tests.

use super::{MemorySource, SourceError};

/// Hands out addresses from a large virtual range without backing them with memory.
///
/// Addresses are never reused, so a stale address can never alias a new region.
///
/// ```
/// use headroom_alloc::{MemorySource, VirtualMemory};
/// let mut space = VirtualMemory::new(1 << 30);
/// let base = space.reserve(4096).unwrap();
/// assert_eq!(base % 256, 0);
/// assert!(space.reserve(1 << 30).is_err()); // over capacity
/// ```
#[derive(Debug, Clone)]
pub struct VirtualMemory {
    capacity: u64,
    /// Bytes currently reserved; never above `capacity`.
    reserved: u64,
    /// The next address to hand out; regions are laid out one after another and never reused.
    next_base: u64,
}

/// Where virtual addresses start: far from zero, so that a null address is never valid.
const FIRST_BASE: u64 = 1 << 40;

impl VirtualMemory {
    /// A virtual space that can hold `capacity` bytes at once.
    pub fn new(capacity: u64) -> Self {
        Self {
            capacity,
            reserved: 0,
            next_base: FIRST_BASE,
        }
    }

    /// Bytes currently reserved from this space.
    pub fn reserved(&self) -> u64 {
        self.reserved
    }
}

impl MemorySource for VirtualMemory {
    fn name(&self) -> &str {
        "virtual"
    }

    fn reserve(&mut self, bytes: u64) -> Result<u64, SourceError> {
        if bytes == 0 || bytes % 256 != 0 {
            return Err(SourceError::new(format!(
                "region size {bytes} is not a positive multiple of 256"
            )));
        }
        let available = self.capacity - self.reserved;
        if bytes > available {
            return Err(SourceError::new(format!(
                "{bytes} bytes requested but only {available} of {} available",
                self.capacity
            )));
        }
        let base = self.next_base;
        self.next_base = base
            .checked_add(bytes)
            .ok_or_else(|| SourceError::new("virtual address space exhausted"))?;
        self.reserved += bytes;
        Ok(base)
    }

    fn release(&mut self, base: u64, bytes: u64) -> Result<(), SourceError> {
        if base < FIRST_BASE || bytes > self.reserved {
            return Err(SourceError::new(format!(
                "release of {bytes} bytes at {base:#x} that were never reserved"
            )));
        }
        self.reserved -= bytes;
        Ok(())
    }

    fn capacity(&self) -> u64 {
        self.capacity
    }
}
