//! Device memory as a [`MemorySource`]: the regions the allocator carves up come from
//! `cuMemAlloc` (TensorFlow's GPU sub-allocator does the same), and a driver out-of-memory
//! becomes a refusal that the allocator's growth back-off and garbage collection handle; any
//! other driver error is a fault, which fails the allocation at once.

use std::collections::HashSet;
use std::sync::Arc;

use cudarc::driver::sys::cudaError_enum;
use cudarc::driver::{CudaContext, CudaStream, DriverError, result};
use headroom_alloc::{MemorySource, SourceError};

use super::driver::{describe, driver_error};
use crate::error::Result;

/// The memory of one CUDA device. Its capacity is the device's total memory (`cuMemGetInfo`),
/// so an allocator limit given as a fraction works as PyTorch's
/// `set_per_process_memory_fraction` does; memory that other processes hold shows up as
/// refusals when a region is reserved, which the allocator backs off from and reports.
pub struct CudaMemory {
    context: Arc<CudaContext>,
    /// The device's stream, synchronised before a region goes back to the driver.
    stream: Arc<CudaStream>,
    name: String,
    total: u64,
    /// Bases of the regions reserved and not yet released, freed when the source drops.
    regions: HashSet<u64>,
}

impl CudaMemory {
    /// The memory of the device `context` belongs to, whose work is queued on `stream`.
    pub(crate) fn new(context: Arc<CudaContext>, stream: Arc<CudaStream>) -> Result<Self> {
        let (_, total) = context
            .mem_get_info()
            .map_err(|err| driver_error("cuda", "cuMemGetInfo", err))?;
        Ok(Self {
            name: format!("cuda:{}", context.ordinal()),
            context,
            stream,
            total: total as u64,
            regions: HashSet::new(),
        })
    }

    /// Bytes free on the device now, and its total, as the driver sees them (other processes
    /// included).
    pub fn free_and_total(&self) -> std::result::Result<(u64, u64), DriverError> {
        let (free, total) = self.context.mem_get_info()?;
        Ok((free as u64, total as u64))
    }

    /// A driver error of `call` for `bytes` bytes: a refusal for an out-of-memory, else a fault.
    fn refusal(&self, call: &str, bytes: u64, err: DriverError) -> SourceError {
        let (name, _) = describe(err);
        let free = match self.free_and_total() {
            Ok((free, total)) => format!("; the driver reports {free} of {total} bytes free"),
            Err(_) => String::new(),
        };
        if err.0 == cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY {
            SourceError::new(format!(
                "{call} of {bytes} bytes on {} refused: {name}{free}",
                self.name
            ))
        } else {
            // A device in an error state (a faulted kernel), a lost context: more memory would
            // not help, so the allocation fails at once and not as an out-of-memory.
            SourceError::fault(format!(
                "{call} of {bytes} bytes on {} failed: {name}",
                self.name
            ))
        }
    }
}

impl MemorySource for CudaMemory {
    fn name(&self) -> &str {
        &self.name
    }

    fn reserve(&mut self, bytes: u64) -> std::result::Result<u64, SourceError> {
        let size = usize::try_from(bytes)
            .map_err(|_| SourceError::new(format!("{bytes} bytes do not fit a usize")))?;
        self.context
            .bind_to_thread()
            .map_err(|err| self.refusal("cuCtxSetCurrent", bytes, err))?;
        // SAFETY: cuMemAlloc with the device's context current; the region it returns is owned
        // by this source until `release` gives it back. Its base is aligned to at least 256
        // bytes, as `MemorySource` requires.
        let base = unsafe { result::malloc_sync(size) }
            .map_err(|err| self.refusal("cuMemAlloc", bytes, err))?;
        self.regions.insert(base);
        Ok(base)
    }

    fn release(&mut self, base: u64, bytes: u64) -> std::result::Result<(), SourceError> {
        self.stream
            .synchronize()
            .map_err(|err| self.refusal("cuStreamSynchronize", bytes, err))?;
        // SAFETY: `base` came from `reserve` (the allocator gives back only its own regions,
        // each once), and the stream is drained, so no queued kernel still touches the region.
        unsafe { result::free_sync(base) }.map_err(|err| self.refusal("cuMemFree", bytes, err))?;
        self.regions.remove(&base);
        Ok(())
    }

    fn capacity(&self) -> u64 {
        self.total
    }
}

impl Drop for CudaMemory {
    /// Gives every region still held back to the driver: the allocator that owned them is
    /// going, and every buffer holds its device, so none of them is in use.
    fn drop(&mut self) {
        if self.regions.is_empty() || self.context.bind_to_thread().is_err() {
            return;
        }
        // Errors here have no one to go to; the process keeps running either way.
        let _ = self.stream.synchronize();
        for base in self.regions.drain() {
            // SAFETY: each base came from `reserve` and was not released; the stream is drained
            // and no buffer outlives the device, so nothing touches the region any more.
            let _ = unsafe { result::free_sync(base) };
        }
    }
}
