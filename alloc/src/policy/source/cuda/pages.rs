//! Regions that grow and shrink in place, through the driver's virtual memory management: what
//! PyTorch calls expandable segments. A region is a range of addresses reserved once
//! (`cuMemAddressReserve`, which takes no memory), backed from its start by physical pages,
//! each created, mapped and opened for the device as the region grows (`cuMemCreate`,
//! `cuMemMap`, `cuMemSetAccess`) and unmapped as it shrinks (`cuMemUnmap`), so the region's
//! addresses stay contiguous however often it grows.
//!
//! A page is the driver's minimum granularity (2 MiB on every current GPU), the allocator's
//! [`EXPANSION_STEP`](crate::EXPANSION_STEP). Each page is a handle of its own, as in
//! PyTorch: the driver unmaps a mapping only whole, so one handle per page lets a region give
//! back any number of pages from its end. A handle is released as soon as it is mapped; its
//! memory stays until the page is unmapped.

use cudarc::driver::sys::{
    self, CUdevice, CUdeviceptr, CUmemAccess_flags, CUmemAccessDesc,
    CUmemAllocationGranularity_flags, CUmemAllocationHandleType, CUmemAllocationProp,
    CUmemAllocationProp_st__bindgen_ty_1, CUmemAllocationType, CUmemGenericAllocationHandle,
    CUmemLocation, CUmemLocationType, cudaError_enum,
};
use cudarc::driver::{CudaContext, DriverError};

/// A driver call that failed, and how.
pub(crate) type CallError = (&'static str, DriverError);

/// The physical pages of one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pages {
    device: CUdevice,
    /// Bytes a page holds: the driver's minimum granularity for the device's memory.
    size: u64,
}

impl Pages {
    /// Bytes a page holds.
    pub(crate) fn size(self) -> u64 {
        self.size
    }

    /// The pages of `context`'s device, or `None` where the device or driver cannot map memory
    /// (`CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED` is 0).
    pub(crate) fn of(context: &CudaContext) -> Result<Option<Self>, CallError> {
        let supported = context
            .attribute(
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
            )
            .map_err(|err| ("cuDeviceGetAttribute", err))?;
        if supported == 0 {
            return Ok(None);
        }
        let device = context.cu_device();
        let mut size = 0usize;
        let prop = allocation(device);
        // SAFETY: `prop` describes pinned memory on a device the driver reported, and `size` is
        // a valid place for the answer.
        unsafe {
            sys::cuMemGetAllocationGranularity(
                &mut size,
                &prop,
                CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
            )
        }
        .result()
        .map_err(|err| ("cuMemGetAllocationGranularity", err))?;
        // No driver answers 0; one that did could not page a region.
        Ok((size > 0).then_some(Self {
            device,
            size: size as u64,
        }))
    }

    /// `bytes` rounded up to whole pages.
    fn round_up(self, bytes: u64) -> u64 {
        bytes.div_ceil(self.size).saturating_mul(self.size)
    }
}

/// What a page is: pinned memory on the device, not shareable with other processes.
fn allocation(device: CUdevice) -> CUmemAllocationProp {
    CUmemAllocationProp {
        type_: CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
        location: CUmemLocation {
            type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: device,
        },
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: CUmemAllocationProp_st__bindgen_ty_1 {
            compressionType: 0,
            gpuDirectRDMACapable: 0,
            usage: 0,
            reserved: [0; 4],
        },
    }
}

/// A reserved range of addresses whose first `mapped` bytes are backed by pages. The device's
/// context must be current on the calling thread for every method.
#[derive(Debug)]
pub(crate) struct VirtualRegion {
    pages: Pages,
    base: CUdeviceptr,
    /// Bytes of addresses reserved: a whole number of pages.
    reserved: u64,
    /// Bytes backed by pages from `base` on: a whole number of pages, at most `reserved`.
    mapped: u64,
}

impl VirtualRegion {
    /// Reserves `bytes` of addresses (rounded up to whole pages), none of them backed yet.
    pub(crate) fn reserve(pages: Pages, bytes: u64) -> Result<Self, CallError> {
        let reserved = pages.round_up(bytes);
        let mut base = 0;
        // SAFETY: `base` is a valid place for the answer; the size and alignment are whole pages,
        // multiples of the host page size as the driver requires.
        unsafe {
            sys::cuMemAddressReserve(&mut base, reserved as usize, pages.size as usize, 0, 0)
        }
        .result()
        .map_err(|err| ("cuMemAddressReserve", err))?;
        Ok(Self {
            pages,
            base,
            reserved,
            mapped: 0,
        })
    }

    /// The first address of the range.
    pub(crate) fn base(&self) -> u64 {
        self.base
    }

    /// Bytes of addresses reserved.
    pub(crate) fn reserved(&self) -> u64 {
        self.reserved
    }

    /// Backs the range with pages until its first `len` bytes (at most [`reserved`]) are, and
    /// opens them for the device. On failure nothing this call mapped stays mapped.
    ///
    /// [`reserved`]: Self::reserved
    pub(crate) fn back(&mut self, len: u64) -> Result<(), CallError> {
        let target = self.pages.round_up(len);
        if target > self.reserved {
            // What the driver answers a mapping outside the reservation.
            return Err((
                "cuMemMap",
                DriverError(cudaError_enum::CUDA_ERROR_INVALID_VALUE),
            ));
        }
        let start = self.mapped;
        while self.mapped < target {
            if let Err(err) = self.map_page(self.base + self.mapped) {
                // Best effort: the pages just mapped go back, so the region is as it was.
                let _ = self.unback(start);
                return Err(err);
            }
            self.mapped += self.pages.size;
        }
        if target == start {
            return Ok(());
        }
        let access = CUmemAccessDesc {
            location: allocation(self.pages.device).location,
            flags: CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: [base + start, base + target) is wholly mapped by this call, page after page.
        let opened = unsafe {
            sys::cuMemSetAccess(self.base + start, (target - start) as usize, &access, 1)
        }
        .result();
        if let Err(err) = opened {
            let _ = self.unback(start);
            return Err(("cuMemSetAccess", err));
        }
        Ok(())
    }

    /// Creates one page and maps it at `at`, the first address past the mapped pages.
    fn map_page(&self, at: CUdeviceptr) -> Result<(), CallError> {
        let size = self.pages.size as usize;
        let prop = allocation(self.pages.device);
        let mut handle: CUmemGenericAllocationHandle = 0;
        // SAFETY: `prop` describes pinned memory on this region's device, `size` is its
        // granularity, and `handle` is a valid place for the answer.
        unsafe { sys::cuMemCreate(&mut handle, size, &prop, 0) }
            .result()
            .map_err(|err| ("cuMemCreate", err))?;
        // SAFETY: [at, at + size) lies in this range's reservation (`back` stops at `reserved`)
        // and is not mapped (pages are mapped in order, past `mapped`); `handle` holds `size`
        // bytes.
        let mapped = unsafe { sys::cuMemMap(at, size, 0, handle, 0) }.result();
        // SAFETY: `handle` is live and released once. A mapped page keeps its memory until it is
        // unmapped; an unmapped one frees it now.
        let released = unsafe { sys::cuMemRelease(handle) }.result();
        match (mapped, released) {
            (Err(err), _) => Err(("cuMemMap", err)),
            (Ok(()), Ok(())) => Ok(()),
            (Ok(()), Err(err)) => {
                // The page is not counted as mapped, so it must not stay mapped.
                // SAFETY: [at, at + size) was mapped just above and nothing uses it yet.
                let _ = unsafe { sys::cuMemUnmap(at, size) };
                Err(("cuMemRelease", err))
            }
        }
    }

    /// Unmaps every page past the first `len` bytes (rounded up to whole pages), last first.
    /// Queued work must no longer touch them: the caller synchronises first.
    pub(crate) fn unback(&mut self, len: u64) -> Result<(), CallError> {
        let keep = self.pages.round_up(len);
        while self.mapped > keep {
            let at = self.base + self.mapped - self.pages.size;
            // SAFETY: [at, at + page) is exactly one mapping made by `map_page`; no work still
            // uses it (the caller's promise).
            unsafe { sys::cuMemUnmap(at, self.pages.size as usize) }
                .result()
                .map_err(|err| ("cuMemUnmap", err))?;
            self.mapped -= self.pages.size;
        }
        Ok(())
    }

    /// Unmaps every page and frees the addresses; on failure, the region as it is then, to keep.
    /// Queued work must no longer touch them.
    pub(crate) fn free(mut self) -> Result<(), (Self, CallError)> {
        if let Err(err) = self.unback(0) {
            return Err((self, err));
        }
        // SAFETY: the reservation is this range's own, whole and now unmapped; `self` is gone
        // after this, so it is freed once.
        match unsafe { sys::cuMemAddressFree(self.base, self.reserved as usize) }.result() {
            Ok(()) => Ok(()),
            Err(err) => Err((self, ("cuMemAddressFree", err))),
        }
    }
}
