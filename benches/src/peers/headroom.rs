//! headroom-alloc over a virtual address space.

use headroom_alloc::{Allocator, AllocatorConfig, GRANULE, Tag, VirtualMemory};

use super::TraceAllocator;

/// headroom-alloc up to a fixed capacity.
pub struct Headroom {
    inner: Allocator,
    name: &'static str,
}

impl Headroom {
    /// An allocator with the default configuration (on-demand growth) over `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        Self::with_config(capacity, AllocatorConfig::default(), "headroom-alloc")
    }

    /// An allocator with [`AllocatorConfig::expandable_segments`] over `capacity` bytes.
    pub fn expandable(capacity: u64) -> Self {
        Self::with_config(
            capacity,
            AllocatorConfig::expandable_segments(),
            "headroom-expand",
        )
    }

    /// An allocator with `config` (its limit set to `capacity`) under a name for tables, over
    /// an address space that backs no pages: its region grows in place by the 256-byte granule,
    /// so that what it reserves is, as for the peers' pools, the end of what it has used.
    pub fn with_config(capacity: u64, config: AllocatorConfig, name: &'static str) -> Self {
        let config = config.with_limit_bytes(capacity);
        let space = VirtualMemory::new(capacity).with_growth_step(GRANULE);
        let inner = Allocator::new(space, config)
            .unwrap_or_else(|err| panic!("a bench configuration is invalid: {err}"));
        Self { inner, name }
    }
}

impl TraceAllocator for Headroom {
    type Handle = u64;

    fn name(&self) -> &'static str {
        self.name
    }

    fn allocate(&mut self, size: u64) -> Option<u64> {
        self.inner
            .allocate(size, Tag::OTHER)
            .ok()
            .map(|allocation| allocation.addr)
    }

    fn free(&mut self, addr: u64) {
        if let Err(err) = self.inner.free(addr) {
            panic!("the harness freed a bad address: {err}");
        }
    }

    fn peak_reserved(&self) -> u64 {
        self.inner.stats().peak_reserved
    }
}
