//! Page-locked host memory of a CUDA context (`cuMemHostAlloc`): host memory the GPU's copy
//! engines reach directly, at the link's full rate, where pageable memory is first staged by
//! the driver.

use std::collections::BTreeMap;
use std::sync::Arc;

use cudarc::driver::{CudaContext, result};

use super::error::{CudaError, describe};
use crate::policy::source::{MemorySource, SourceError};

/// Regions of page-locked host memory, one `cuMemHostAlloc` each, at most `capacity` bytes at
/// once. Addresses are host pointers, valid until the region is released or the source is
/// dropped (which frees every region still reserved). Its regions do not grow in place.
pub struct CudaPageLocked {
    context: Arc<CudaContext>,
    capacity: u64,
    /// Live regions: base address -> bytes.
    regions: BTreeMap<u64, u64>,
    /// Sum of `regions`' sizes; never above `capacity`.
    reserved: u64,
}

impl CudaPageLocked {
    /// Page-locked host memory of `context`'s device, at most `capacity` bytes.
    pub fn new(context: Arc<CudaContext>, capacity: u64) -> Result<Self, CudaError> {
        context
            .bind_to_thread()
            .map_err(|err| CudaError::driver("cuCtxSetCurrent", err))?;
        Ok(Self {
            context,
            capacity,
            regions: BTreeMap::new(),
            reserved: 0,
        })
    }

    /// The driver's refusal of `call` for `bytes`, as the allocator reads it.
    fn refusal(call: &str, bytes: u64, err: cudarc::driver::DriverError) -> SourceError {
        let (name, _) = describe(err);
        SourceError::new(format!(
            "{call} of {bytes} bytes of page-locked memory: {name}"
        ))
    }
}

impl MemorySource for CudaPageLocked {
    fn name(&self) -> &str {
        "page-locked host"
    }

    fn reserve(&mut self, bytes: u64) -> Result<u64, SourceError> {
        if bytes == 0 || bytes > self.capacity - self.reserved {
            return Err(SourceError::new(format!(
                "{bytes} bytes requested but only {} of {} available",
                self.capacity - self.reserved,
                self.capacity
            )));
        }
        let size = usize::try_from(bytes)
            .map_err(|_| SourceError::new(format!("{bytes} bytes exceed the address space")))?;
        self.context
            .bind_to_thread()
            .map_err(|err| Self::refusal("cuCtxSetCurrent", bytes, err))?;
        // SAFETY: cuMemHostAlloc with the context current; the region is owned by this source
        // until `release` or drop frees it. The driver aligns it to a page, so to 256 bytes as
        // `MemorySource` requires.
        let pointer = unsafe { result::malloc_host(size, 0) }
            .map_err(|err| Self::refusal("cuMemHostAlloc", bytes, err))?;
        let base = pointer as u64;
        self.regions.insert(base, bytes);
        self.reserved += bytes;
        Ok(base)
    }

    fn release(&mut self, base: u64, bytes: u64) -> Result<(), SourceError> {
        if self.regions.get(&base) != Some(&bytes) {
            return Err(SourceError::not_a_region(base, bytes));
        }
        self.context
            .bind_to_thread()
            .map_err(|err| Self::refusal("cuCtxSetCurrent", bytes, err))?;
        // SAFETY: `base` came from cuMemHostAlloc in `reserve` (looked up above) and is removed
        // from `regions` below, so it is freed once; the allocator releases only regions no
        // buffer uses, and a buffer that a queued copy touches waits for that copy before its
        // block goes back to the allocator (headroom-kernels' buffers do).
        unsafe { result::free_host(base as *mut std::ffi::c_void) }
            .map_err(|err| Self::refusal("cuMemFreeHost", bytes, err))?;
        self.regions.remove(&base);
        self.reserved -= bytes;
        Ok(())
    }

    fn capacity(&self) -> u64 {
        self.capacity
    }
}

impl Drop for CudaPageLocked {
    fn drop(&mut self) {
        if self.context.bind_to_thread().is_err() {
            return;
        }
        for base in std::mem::take(&mut self.regions).into_keys() {
            // SAFETY: every entry of `regions` is a live cuMemHostAlloc region; taking the map
            // frees each once.
            let _ = unsafe { result::free_host(base as *mut std::ffi::c_void) };
        }
    }
}
