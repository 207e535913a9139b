//! The meta backend: allocations only, so that a run's memory can be planned exactly.

use headroom_alloc::{MemorySource, SourceError, VirtualMemory};

/// A virtual address space that resizes regions in place only if the device it plans for can,
/// so that the allocator makes the same decisions, and reaches the same peak, as it would there.
#[derive(Debug, Clone)]
pub struct PlanningMemory {
    inner: VirtualMemory,
    resizable: bool,
}

impl PlanningMemory {
    /// Plans over `inner`, resizing in place only if `resizable`.
    pub fn new(inner: VirtualMemory, resizable: bool) -> Self {
        Self { inner, resizable }
    }
}

impl MemorySource for PlanningMemory {
    fn name(&self) -> &str {
        "meta"
    }
    fn reserve(&mut self, bytes: u64) -> Result<u64, SourceError> {
        self.inner.reserve(bytes)
    }
    fn release(&mut self, base: u64, bytes: u64) -> Result<(), SourceError> {
        self.inner.release(base, bytes)
    }
    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }
    fn can_resize(&self) -> bool {
        self.resizable
    }
    fn extend(&mut self, base: u64, size: u64, extra: u64) -> Result<(), SourceError> {
        if !self.resizable {
            return Err(SourceError::new("the planned device cannot resize regions"));
        }
        self.inner.extend(base, size, extra)
    }
    fn shrink(&mut self, base: u64, size: u64, bytes: u64) -> Result<(), SourceError> {
        if !self.resizable {
            return Err(SourceError::new("the planned device cannot resize regions"));
        }
        self.inner.shrink(base, size, bytes)
    }
}

/// Runs no kernel: every op's allocations happen in the op layer, identically for every backend,
/// so a meta run allocates exactly what a real run would. Each op's (empty) meta kernels live
/// beside it (`ops/<op>/meta.rs`).
#[derive(Debug, Clone, Copy, Default)]
pub struct MetaBackend;
