//! The allocators compared, behind one small trait.

mod first_fit;
mod headroom;
mod offset;

pub use first_fit::FirstFit;
pub use headroom::Headroom;
pub use offset::OffsetAllocator;

/// The granule every compared allocator rounds to, so that sizes mean the same thing.
pub const GRANULE: u64 = 256;

/// An allocator that can replay a trace: allocate, free by handle, and say how much it reserved.
pub trait TraceAllocator {
    /// What the allocator hands back and takes to free.
    type Handle: Copy;

    /// A short name for tables.
    fn name(&self) -> &'static str;

    /// Allocates `size` bytes, or `None` when out of memory.
    fn allocate(&mut self, size: u64) -> Option<Self::Handle>;

    /// Frees an allocation.
    fn free(&mut self, handle: Self::Handle);

    /// Highest bytes reserved: from the source for headroom-alloc, the highest end address
    /// handed out for a peer that manages one fixed pool.
    fn peak_reserved(&self) -> u64;
}
