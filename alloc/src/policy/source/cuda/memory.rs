//! Device memory as a [`MemorySource`]: the regions the allocator carves up come from
//! `cuMemAlloc` (TensorFlow's GPU sub-allocator does the same) or, for an allocator that grows
//! in place ([`Growth::OnDemand`], the default, and [`Growth::Expandable`]), are ranges of
//! addresses backed page by page ([`pages`](super::pages): PyTorch's expandable segments). A driver out-of-memory becomes a
//! refusal that the allocator's growth back-off and garbage collection handle; any other driver
//! error is a fault, which fails the allocation at once.
//!
//! [`Growth::OnDemand`]: crate::Growth::OnDemand
//! [`Growth::Expandable`]: crate::Growth::Expandable

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream, DriverError, result};

use super::driver::Driver;
use super::error::{CudaError, require_driver};
use super::pages::{Pages, VirtualRegion};
use crate::policy::source::{MemorySource, SourceError};

/// The memory of one CUDA device. Its capacity is the device's total memory (`cuMemGetInfo`),
/// so an allocator limit given as a fraction works as PyTorch's
/// `set_per_process_memory_fraction` does; memory that other processes hold shows up as
/// refusals when a region is reserved or grown, which the allocator backs off from and
/// reports.
///
/// Memory goes back to the driver only once the stream is drained (`cuMemFree` and
/// `cuMemUnmap` do not wait for queued kernels), and every region still held goes back when
/// the source drops.
///
/// ```no_run
/// use headroom_alloc::{Allocator, AllocatorConfig, CudaMemory, Tag};
///
/// CudaMemory::require_driver()?;
/// let context = cudarc::driver::CudaContext::new(0)?;
/// let stream = context.default_stream();
/// let memory = CudaMemory::new(context, stream, false)?;
/// let mut allocator = Allocator::new(memory, AllocatorConfig::default())?;
/// let block = allocator.allocate(1 << 20, Tag::ACTIVATIONS)?;
/// allocator.free(block.addr)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct CudaMemory {
    driver: Driver,
    /// The regions reserved and not yet released, given back when the source drops.
    regions: Regions,
}

/// How a source makes its regions, and those it holds.
enum Regions {
    /// Each region one `cuMemAlloc`: their bases.
    Allocated(HashSet<u64>),
    /// Each region a range of addresses that grows and shrinks in place a page at a time, by
    /// base. A range reserves the addresses of the whole device, so that one region can grow to
    /// any limit.
    Expandable {
        pages: Pages,
        ranges: HashMap<u64, VirtualRegion>,
    },
}

impl CudaMemory {
    /// The memory of the device `context` belongs to, whose work is queued on `stream`. With
    /// `expandable`, its regions grow and shrink in place where the device can map memory (every
    /// GPU CUDA 13 supports can, outside some virtualised setups); elsewhere they are plain
    /// allocations, and an expandable allocator grows by a region per step instead.
    ///
    /// Fails with [`CudaError::Driver`] when the driver cannot say how much memory the device
    /// has, or whether and how finely it maps memory.
    pub fn new(
        context: Arc<CudaContext>,
        stream: Arc<CudaStream>,
        expandable: bool,
    ) -> Result<Self, CudaError> {
        let (_, total) = context
            .mem_get_info()
            .map_err(|err| CudaError::driver("cuMemGetInfo", err))?;
        let pages = if expandable {
            Pages::of(&context).map_err(|(call, err)| CudaError::driver(call, err))?
        } else {
            None
        };
        let regions = match pages {
            Some(pages) => Regions::Expandable {
                pages,
                ranges: HashMap::new(),
            },
            None => Regions::Allocated(HashSet::new()),
        };
        let driver = Driver {
            name: format!("cuda:{}", context.ordinal()),
            context,
            stream,
            total: total as u64,
        };
        Ok(Self { driver, regions })
    }

    /// Bytes free on the device now, and its total, as the driver sees them (other processes
    /// included).
    pub fn free_and_total(&self) -> Result<(u64, u64), CudaError> {
        self.driver
            .free_and_total()
            .map_err(|err: DriverError| CudaError::driver("cuMemGetInfo", err))
    }

    /// Whether regions grow and shrink in place: asked for, and the device maps memory.
    pub fn is_expandable(&self) -> bool {
        matches!(self.regions, Regions::Expandable { .. })
    }

    /// Fails with [`CudaError::NoDriver`] unless the driver library (`libcuda.so`) loads.
    /// cudarc panics at its first driver call when it cannot find the library, so a program
    /// that may run without one checks this before making a context.
    pub fn require_driver() -> Result<(), CudaError> {
        require_driver()
    }
}

impl Regions {
    /// The range at `base`, which the allocator resizes: it only resizes what it reserved from
    /// a source that [can resize](MemorySource::can_resize).
    fn range(&mut self, base: u64) -> Result<&mut VirtualRegion, SourceError> {
        match self {
            Regions::Expandable { ranges, .. } => ranges.get_mut(&base),
            Regions::Allocated(_) => None,
        }
        .ok_or_else(|| SourceError::fault(format!("no region at {base:#x} grows in place")))
    }
}

impl MemorySource for CudaMemory {
    fn name(&self) -> &str {
        &self.driver.name
    }

    fn reserve(&mut self, bytes: u64) -> Result<u64, SourceError> {
        let size = usize::try_from(bytes)
            .map_err(|_| SourceError::new(format!("{bytes} bytes do not fit a usize")))?;
        let driver = &self.driver;
        driver.bind(bytes)?;
        match &mut self.regions {
            Regions::Allocated(bases) => {
                // SAFETY: cuMemAlloc with the device's context current; the region it returns is
                // owned by this source until `release` gives it back. Its base is aligned to at
                // least 256 bytes, as `MemorySource` requires.
                let base = unsafe { result::malloc_sync(size) }
                    .map_err(|err| driver.refusal("cuMemAlloc", bytes, err))?;
                bases.insert(base);
                Ok(base)
            }
            Regions::Expandable { pages, ranges } => {
                let mut range = VirtualRegion::reserve(*pages, bytes.max(driver.total))
                    .map_err(|(call, err)| driver.refusal(call, bytes, err))?;
                if let Err((call, err)) = range.back(bytes) {
                    // Nothing is mapped any more; the addresses go back too.
                    let _ = range.free();
                    return Err(driver.refusal(call, bytes, err));
                }
                // Page-aligned, so 256-byte aligned as `MemorySource` requires.
                let base = range.base();
                ranges.insert(base, range);
                Ok(base)
            }
        }
    }

    fn release(&mut self, base: u64, bytes: u64) -> Result<(), SourceError> {
        let driver = &self.driver;
        driver.drain(bytes)?;
        match &mut self.regions {
            Regions::Allocated(bases) => {
                // SAFETY: `base` came from `reserve` (the allocator gives back only its own
                // regions, each once), and the stream is drained, so no queued kernel still
                // touches the region.
                unsafe { result::free_sync(base) }
                    .map_err(|err| driver.refusal("cuMemFree", bytes, err))?;
                bases.remove(&base);
                Ok(())
            }
            Regions::Expandable { ranges, .. } => {
                let range = ranges.remove(&base).ok_or_else(|| {
                    SourceError::fault(format!("no region at {base:#x} to release"))
                })?;
                range.free().map_err(|(range, (call, err))| {
                    ranges.insert(base, range);
                    driver.refusal(call, bytes, err)
                })
            }
        }
    }

    fn capacity(&self) -> u64 {
        self.driver.total
    }

    fn can_resize(&self) -> bool {
        self.is_expandable()
    }

    /// A page of the device's memory (2 MiB on every current GPU).
    fn growth_step(&self) -> u64 {
        match &self.regions {
            Regions::Expandable { pages, .. } => pages.size(),
            Regions::Allocated(_) => crate::EXPANSION_STEP,
        }
    }

    fn extend(&mut self, base: u64, size: u64, extra: u64) -> Result<(), SourceError> {
        let driver = &self.driver;
        driver.bind(extra)?;
        let range = self.regions.range(base)?;
        let len = size.saturating_add(extra);
        if len > range.reserved() {
            return Err(SourceError::new(format!(
                "the region at {base:#x} on {} cannot grow to {len} bytes: it reserved {} bytes \
                 of addresses",
                driver.name,
                range.reserved()
            )));
        }
        range
            .back(len)
            .map_err(|(call, err)| driver.refusal(call, extra, err))
    }

    fn shrink(&mut self, base: u64, size: u64, bytes: u64) -> Result<(), SourceError> {
        let driver = &self.driver;
        driver.drain(bytes)?;
        self.regions
            .range(base)?
            .unback(size.saturating_sub(bytes))
            .map_err(|(call, err)| driver.refusal(call, bytes, err))
    }
}

impl Drop for CudaMemory {
    /// Gives every region still held back to the driver: the allocator that owned them is
    /// going, and every buffer holds its device, so none of them is in use.
    fn drop(&mut self) {
        let held = match &self.regions {
            Regions::Allocated(bases) => bases.len(),
            Regions::Expandable { ranges, .. } => ranges.len(),
        };
        if held == 0 || self.driver.context.bind_to_thread().is_err() {
            return;
        }
        // Errors here have no one to go to; the process keeps running either way.
        let _ = self.driver.stream.synchronize();
        match &mut self.regions {
            Regions::Allocated(bases) => {
                for base in bases.drain() {
                    // SAFETY: each base came from `reserve` and was not released; the stream is
                    // drained and no buffer outlives the device, so nothing touches the region
                    // any more.
                    let _ = unsafe { result::free_sync(base) };
                }
            }
            Regions::Expandable { ranges, .. } => {
                for (_, range) in ranges.drain() {
                    let _ = range.free();
                }
            }
        }
    }
}
