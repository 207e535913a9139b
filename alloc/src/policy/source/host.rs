//! Real host memory from the global allocator.

// One of the places in this crate that touch memory (with `host_pages` and, with the `cuda`
// feature, `cuda`); `lib.rs` denies unsafe code everywhere else.
#![allow(unsafe_code)]

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::collections::BTreeMap;

use super::{MemorySource, SourceError};

/// Alignment of every host region, matching the allocator's granule.
const ALIGN: usize = 256;

/// Regions of real, zero-initialised host memory from the global allocator, 256-byte aligned.
///
/// Addresses handed out are real pointers (`addr as *mut u8`), valid until the region is released
/// or this source is dropped. Dropping the source frees every region still reserved.
///
/// ```
/// use headroom_alloc::{HostMemory, MemorySource};
/// let mut host = HostMemory::new(1 << 20);
/// let base = host.reserve(4096).unwrap();
/// assert_eq!(base % 256, 0);
/// host.release(base, 4096).unwrap();
/// ```
#[derive(Debug)]
pub struct HostMemory {
    capacity: u64,
    /// Live regions by base address, with the layout each was allocated with.
    regions: BTreeMap<u64, Layout>,
    /// Sum of the sizes in `regions`; never above `capacity`.
    reserved: u64,
}

// SAFETY: `HostMemory` owns its regions exclusively (nothing else frees them) and holds only
// addresses as integers, so moving it to another thread cannot create shared mutable access.
unsafe impl Send for HostMemory {}

impl HostMemory {
    /// A host source that hands out at most `capacity` bytes at once.
    pub fn new(capacity: u64) -> Self {
        Self {
            capacity,
            regions: BTreeMap::new(),
            reserved: 0,
        }
    }
}

impl MemorySource for HostMemory {
    fn name(&self) -> &str {
        "host"
    }

    fn reserve(&mut self, bytes: u64) -> Result<u64, SourceError> {
        if bytes == 0 || !bytes.is_multiple_of(ALIGN as u64) {
            return Err(SourceError::new(format!(
                "region size {bytes} is not a positive multiple of {ALIGN}"
            )));
        }
        if bytes > self.capacity - self.reserved {
            return Err(SourceError::new(format!(
                "{bytes} bytes requested but only {} of {} available",
                self.capacity - self.reserved,
                self.capacity
            )));
        }
        let size = usize::try_from(bytes)
            .map_err(|_| SourceError::new(format!("{bytes} bytes exceed the address space")))?;
        let layout = Layout::from_size_align(size, ALIGN)
            .map_err(|err| SourceError::new(format!("bad layout for {bytes} bytes: {err}")))?;
        // SAFETY: `layout` has a non-zero size (checked above) and a valid power-of-two alignment.
        // Zeroed, so that fresh memory never exposes stale data.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(SourceError::new(format!(
                "the system allocator refused {bytes} bytes"
            )));
        }
        let base = ptr as u64;
        self.regions.insert(base, layout);
        self.reserved += bytes;
        Ok(base)
    }

    fn release(&mut self, base: u64, bytes: u64) -> Result<(), SourceError> {
        let layout = match self.regions.get(&base) {
            Some(layout) if layout.size() as u64 == bytes => *layout,
            _ => return Err(SourceError::not_a_region(base, bytes)),
        };
        self.regions.remove(&base);
        // SAFETY: `base` was returned by `alloc_zeroed` with exactly `layout` (looked up above)
        // and is removed from `regions`, so it is freed once.
        unsafe { dealloc(base as *mut u8, layout) };
        self.reserved -= bytes;
        Ok(())
    }

    fn capacity(&self) -> u64 {
        self.capacity
    }
}

impl Drop for HostMemory {
    fn drop(&mut self) {
        for (base, layout) in std::mem::take(&mut self.regions) {
            // SAFETY: every entry of `regions` is a live allocation made with its layout; taking
            // the map ensures each is freed once.
            unsafe { dealloc(base as *mut u8, layout) };
        }
    }
}
