//! Memory sources: where the allocator's large regions come from (TensorFlow's sub-allocators).
//!
//! The allocator asks a source for a few large regions and carves them up itself. This crate
//! provides host memory (from the global allocator, or on Linux as pages committed into
//! reserved address space, which grows in place), a virtual address space, a fault-injecting
//! wrapper for tests and, with the `cuda` feature, the memory of a CUDA device and page-locked
//! host memory of its context.

#[cfg(feature = "cuda")]
mod cuda;
mod fault;
mod host;
#[cfg(target_os = "linux")]
mod host_pages;
mod region_book;
mod virtual_memory;

#[cfg(feature = "cuda")]
pub use cuda::{CudaError, CudaMemory, CudaPageLocked, CudaStreamClock};
pub use fault::FaultInjecting;
pub use host::HostMemory;
#[cfg(target_os = "linux")]
pub use host_pages::HostPages;
pub use virtual_memory::VirtualMemory;

/// Why a source refused or failed an operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SourceError {
    /// The source's explanation, shown in OOM reports.
    pub message: String,
    /// True when the source failed for a reason other than a lack of memory (a device in an
    /// error state, say): the allocator then fails with [`Error::Source`](crate::Error::Source)
    /// at once, instead of backing off and reporting an out-of-memory.
    pub fault: bool,
}

impl SourceError {
    /// The refusal of a release of `bytes` at `base` that is not a region the source handed
    /// out.
    pub(crate) fn not_a_region(base: u64, bytes: u64) -> Self {
        Self::new(format!(
            "release of {bytes} bytes at {base:#x}, which is not a region of this source"
        ))
    }

    /// A refusal for lack of memory, with this explanation: the allocator backs off, collects
    /// free regions and, failing that, reports an out-of-memory.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            fault: false,
        }
    }

    /// A failure that more memory would not cure, with this explanation.
    pub fn fault(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            fault: true,
        }
    }
}

/// A provider of large, 256-byte-aligned regions of some address space.
pub trait MemorySource: Send {
    /// A short name for reports, such as `host`, `virtual` or `cuda:0`.
    fn name(&self) -> &str;

    /// Reserves a region of exactly `bytes` bytes (a positive multiple of 256) and returns its
    /// base address, which must be a non-zero multiple of 256.
    fn reserve(&mut self, bytes: u64) -> Result<u64, SourceError>;

    /// Gives back a region previously returned by [`reserve`](Self::reserve).
    fn release(&mut self, base: u64, bytes: u64) -> Result<(), SourceError>;

    /// The most bytes this source can hand out in total (a device's memory, say).
    fn capacity(&self) -> u64;

    /// Whether regions can grow and shrink in place ([`extend`](Self::extend),
    /// [`shrink`](Self::shrink)), as with CUDA's virtual memory management or PyTorch's
    /// expandable segments. Sources that cannot keep the default.
    fn can_resize(&self) -> bool {
        false
    }

    /// The step in which regions grow and shrink in place, a positive multiple of 256: the
    /// page a source maps (2 MiB for CUDA, [`EXPANSION_STEP`](crate::EXPANSION_STEP), the
    /// default; a host page for [`HostPages`](crate::HostPages)).
    fn growth_step(&self) -> u64 {
        crate::policy::config::EXPANSION_STEP
    }

    /// Grows the region at `base`, now `size` bytes, by `extra` bytes (a positive multiple of
    /// 256) at its end, keeping its addresses.
    fn extend(&mut self, base: u64, size: u64, extra: u64) -> Result<(), SourceError> {
        let _ = (base, size, extra);
        Err(SourceError::new(format!(
            "`{}` cannot grow a region in place",
            self.name()
        )))
    }

    /// Gives back the last `bytes` (a multiple of 256 below `size`) of the region at `base`,
    /// now `size` bytes.
    fn shrink(&mut self, base: u64, size: u64, bytes: u64) -> Result<(), SourceError> {
        let _ = (base, size, bytes);
        Err(SourceError::new(format!(
            "`{}` cannot shrink a region in place",
            self.name()
        )))
    }
}

impl<S: MemorySource + ?Sized> MemorySource for Box<S> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn reserve(&mut self, bytes: u64) -> Result<u64, SourceError> {
        (**self).reserve(bytes)
    }
    fn release(&mut self, base: u64, bytes: u64) -> Result<(), SourceError> {
        (**self).release(base, bytes)
    }
    fn capacity(&self) -> u64 {
        (**self).capacity()
    }
    fn can_resize(&self) -> bool {
        (**self).can_resize()
    }
    fn growth_step(&self) -> u64 {
        (**self).growth_step()
    }
    fn extend(&mut self, base: u64, size: u64, extra: u64) -> Result<(), SourceError> {
        (**self).extend(base, size, extra)
    }
    fn shrink(&mut self, base: u64, size: u64, bytes: u64) -> Result<(), SourceError> {
        (**self).shrink(base, size, bytes)
    }
}
