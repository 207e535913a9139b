//! Host memory that grows in place: address space reserved up front, pages committed as a
//! region grows and given back to the system as it shrinks (Linux).

// Like `host`, this source maps and unmaps memory; `lib.rs` denies unsafe code everywhere else.
#![allow(unsafe_code)]

use super::region_book::RegionBook;
use super::{MemorySource, SourceError};

/// Regions of real, zero-initialised host memory that [grow and shrink in
/// place](MemorySource::can_resize), so that an allocator on the CPU reserves what it uses and
/// no more, as one on a GPU does through CUDA's virtual memory management.
///
/// Each region reserves address space for the whole capacity (`mmap` with no access and no
/// swap reserved: no memory is taken yet) and commits the pages its size covers
/// (`mprotect`); growing commits more pages, and shrinking gives the tail's pages back to the
/// system (`madvise(MADV_DONTNEED)`), so that they read as zeros when committed again.
/// Addresses handed out are real pointers, valid until the region is released or the source is
/// dropped; dropping the source unmaps every region still reserved.
///
/// ```
/// use headroom_alloc::{HostPages, MemorySource};
/// let mut host = HostPages::new(1 << 30);
/// let base = host.reserve(1 << 20).unwrap();
/// host.extend(base, 1 << 20, 1 << 20).unwrap(); // the same addresses, twice the memory
/// assert_eq!(host.reserved(), 2 << 20);
/// host.shrink(base, 2 << 20, 1 << 20).unwrap();
/// host.release(base, 1 << 20).unwrap();
/// ```
#[derive(Debug)]
pub struct HostPages {
    /// The live regions, within the capacity, at the size the allocator holds. Each maps `span`
    /// bytes of address space, of which the pages covering its size are readable and writable.
    book: RegionBook,
    /// Address space mapped per region: the capacity rounded up to a page.
    span: u64,
    /// The system's page size.
    page: u64,
}

// SAFETY: `HostPages` owns its mappings exclusively (nothing else unmaps them) and holds only
// addresses as integers, so moving it to another thread cannot create shared mutable access.
unsafe impl Send for HostPages {}

impl HostPages {
    /// A host source that hands out at most `capacity` bytes at once.
    pub fn new(capacity: u64) -> Self {
        // SAFETY: sysconf has no preconditions; it returns -1 for a name it does not know.
        let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
            size if size > 0 => size as u64,
            _ => 4096,
        };
        Self {
            book: RegionBook::new(capacity),
            span: capacity.max(1).div_ceil(page).saturating_mul(page),
            page,
        }
    }

    /// Bytes currently reserved from this source.
    pub fn reserved(&self) -> u64 {
        self.book.reserved()
    }

    /// `bytes` rounded up to whole pages.
    fn page_ceil(&self, bytes: u64) -> u64 {
        bytes.div_ceil(self.page) * self.page
    }

    /// Makes the pages of `base + from .. base + to` (page-aligned offsets inside a region's
    /// span) readable and writable, or inaccessible and given back to the system.
    fn set_pages(&self, base: u64, from: u64, to: u64, committed: bool) -> Result<(), SourceError> {
        if from >= to {
            return Ok(());
        }
        let (addr, len) = ((base + from) as *mut libc::c_void, (to - from) as usize);
        if !committed {
            // SAFETY: the range lies inside a mapping this source made (offsets within `span`,
            // checked by the callers), and no allocation lives there any more: the allocator
            // gives back only a free tail.
            if unsafe { libc::madvise(addr, len, libc::MADV_DONTNEED) } != 0 {
                return Err(last_os_error("madvise", len));
            }
        }
        let protection = if committed {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_NONE
        };
        // SAFETY: as above, the range lies inside a mapping of this source's own.
        if unsafe { libc::mprotect(addr, len, protection) } != 0 {
            return Err(last_os_error("mprotect", len));
        }
        Ok(())
    }
}

/// The system's last error for `call` on `bytes` bytes, as a refusal: the kernel refuses for
/// lack of memory or address space.
fn last_os_error(call: &str, bytes: usize) -> SourceError {
    SourceError::new(format!(
        "{call} of {bytes} bytes failed: {}",
        std::io::Error::last_os_error()
    ))
}

impl MemorySource for HostPages {
    fn name(&self) -> &str {
        "host"
    }

    fn reserve(&mut self, bytes: u64) -> Result<u64, SourceError> {
        self.book.check_room(bytes)?;
        let span = usize::try_from(self.span)
            .map_err(|_| SourceError::new("the capacity exceeds the address space"))?;
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing touches no
        // existing memory; no access is allowed until pages are committed below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                span,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(last_os_error("mmap", span));
        }
        let base = ptr as u64;
        if let Err(err) = self.set_pages(base, 0, self.page_ceil(bytes), true) {
            // SAFETY: the mapping was just made, with this length, and nothing uses it.
            unsafe { libc::munmap(ptr, span) };
            return Err(err);
        }
        self.book.set(base, 0, bytes);
        Ok(base)
    }

    fn release(&mut self, base: u64, bytes: u64) -> Result<(), SourceError> {
        self.book.check_region(base, bytes)?;
        // SAFETY: `base` is a mapping of `span` bytes this source made (checked above), removed
        // from the book below, so it is unmapped once.
        if unsafe { libc::munmap(base as *mut libc::c_void, self.span as usize) } != 0 {
            return Err(SourceError::fault(format!(
                "munmap of the region at {base:#x} failed: {}",
                std::io::Error::last_os_error()
            )));
        }
        self.book.remove(base, bytes);
        Ok(())
    }

    fn capacity(&self) -> u64 {
        self.book.capacity()
    }

    fn can_resize(&self) -> bool {
        true
    }

    fn growth_step(&self) -> u64 {
        self.page
    }

    fn extend(&mut self, base: u64, size: u64, extra: u64) -> Result<(), SourceError> {
        self.book.check_region(base, size)?;
        self.book.check_room(extra)?;
        // Within the span: no region can exceed the capacity.
        self.set_pages(
            base,
            self.page_ceil(size),
            self.page_ceil(size + extra),
            true,
        )?;
        self.book.set(base, size, size + extra);
        Ok(())
    }

    fn shrink(&mut self, base: u64, size: u64, bytes: u64) -> Result<(), SourceError> {
        self.book.check_shrink(base, size, bytes)?;
        self.set_pages(
            base,
            self.page_ceil(size - bytes),
            self.page_ceil(size),
            false,
        )?;
        self.book.set(base, size, size - bytes);
        Ok(())
    }
}

impl Drop for HostPages {
    fn drop(&mut self) {
        for base in self.book.take_bases() {
            // SAFETY: every base in the book is a live mapping of `span` bytes; taking them out
            // ensures each is unmapped once.
            unsafe { libc::munmap(base as *mut libc::c_void, self.span as usize) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `value` over `len` bytes at `addr` and checks they read back.
    fn fill(addr: u64, len: u64, value: u8) {
        // SAFETY: the callers pass committed pages of a live region.
        let bytes = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len as usize) };
        bytes.fill(value);
        assert!(bytes.iter().all(|&byte| byte == value));
    }

    /// Whether `len` bytes at `addr` are all zero.
    fn zeros(addr: u64, len: u64) -> bool {
        // SAFETY: the callers pass committed pages of a live region.
        let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, len as usize) };
        bytes.iter().all(|&byte| byte == 0)
    }

    #[test]
    fn regions_grow_in_place_and_come_back_zeroed_after_a_shrink() {
        const MIB: u64 = 1 << 20;
        let mut host = HostPages::new(8 * MIB);
        let base = host.reserve(MIB + 256).unwrap();
        assert_eq!(base % 256, 0);
        assert!(zeros(base, MIB + 256), "fresh memory is zeroed");
        fill(base, MIB + 256, 7);

        host.extend(base, MIB + 256, 3 * MIB - 256).unwrap();
        assert!(zeros(base + MIB + 256, 3 * MIB - 256));
        fill(base, 4 * MIB, 9);
        assert!(host.extend(base, 4 * MIB, 5 * MIB).is_err(), "capacity");
        assert!(host.extend(base, MIB, 256).is_err(), "stale size");
        assert_eq!(host.reserved(), 4 * MIB);

        host.shrink(base, 4 * MIB, 3 * MIB).unwrap();
        fill(base, MIB, 5);
        host.extend(base, MIB, MIB).unwrap();
        assert!(
            zeros(base + MIB, MIB),
            "pages given back read as zeros again"
        );
        assert!(
            host.shrink(base, 2 * MIB, 2 * MIB).is_err(),
            "not to nothing"
        );

        let other = host.reserve(6 * MIB).unwrap();
        assert!(host.reserve(256).is_err(), "the capacity is held");
        assert!(host.release(other, MIB).is_err(), "wrong size");
        host.release(other, 6 * MIB).unwrap();
        host.release(base, 2 * MIB).unwrap();
        assert_eq!(host.reserved(), 0);
        // A region still held when the source drops is unmapped with it.
        host.reserve(MIB).unwrap();
    }
}
