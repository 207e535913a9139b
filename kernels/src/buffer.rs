//! Buffers: device memory that returns to the allocator on drop, what every kernel computes on;
//! and how a device's memory makes them.

use headroom_alloc::{Block, Tag};
use parking_lot::Mutex;

use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::memory::{DeviceKind, DeviceMemory};

/// `len` elements of one dtype in a device's memory. Dropping it frees the bytes; no error path
/// can leak them, since the block frees itself.
#[derive(Debug)]
pub struct Buffer {
    /// The memory of the device holding it.
    memory: DeviceMemory,
    /// The allocation; at least `len * dtype.size()` bytes, 256-byte aligned.
    block: Block,
    dtype: DType,
    len: usize,
    /// Work queued on a device that still reads or writes this buffer: a copy between
    /// page-locked host memory and a GPU touches the host's buffer when it runs, and a copy on
    /// a GPU's copy stream reads the device's. Waited for before the buffer is read on the
    /// host, written or freed.
    pending: Mutex<Option<Box<dyn PendingWork>>>,
}

/// Queued device work that touches a buffer: what comes first before the buffer is read on
/// the host, written or freed.
pub trait PendingWork: Send + Sync + std::fmt::Debug {
    /// Orders what comes next after the work: the host waits until it has run (a host
    /// buffer's), or the device's kernels will (a device buffer's).
    fn wait(&self) -> Result<()>;
}

impl Buffer {
    /// The memory of the device holding it: what a kernel takes its scratch buffers from.
    pub(crate) fn memory(&self) -> &DeviceMemory {
        &self.memory
    }

    /// Its element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when it holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of data (`len * dtype.size()`).
    pub fn bytes(&self) -> usize {
        self.len * self.dtype.size()
    }

    /// Bytes the allocator reserved for it: its data rounded up to the allocator's granule,
    /// what it costs the device.
    pub fn reserved_bytes(&self) -> usize {
        self.block.size() as usize
    }

    /// What the memory holds, for the allocator's accounting.
    pub fn tag(&self) -> Tag {
        self.block.tag()
    }

    /// The device address of the first element.
    pub fn addr(&self) -> u64 {
        self.block.addr()
    }

    /// Fails unless this buffer holds `T` on a CPU device.
    fn check_host<T: Element>(&self, op: &'static str) -> Result<()> {
        if self.memory.kind() != DeviceKind::Cpu {
            return Err(Error::NoData {
                op,
                device: self.memory.to_string(),
            });
        }
        if T::DTYPE != self.dtype {
            return Err(Error::DType {
                op,
                expected: T::DTYPE.to_string(),
                got: self.dtype,
            });
        }
        Ok(())
    }

    /// The elements, on a CPU device, once queued work that touches them has run.
    pub(crate) fn host<T: Element>(&self, op: &'static str) -> Result<&[T]> {
        self.check_host::<T>(op)?;
        self.settle()?;
        // SAFETY: on a CPU device the block's address comes from a `HostSource` (real host
        // memory, sealed), it spans at least `len * size_of::<T>()` bytes, is 256-byte aligned
        // (enough for every element type), and lives as long as `self`. Every bit pattern is a
        // valid `T` (`T: Pod`), so stale contents are sound to read.
        Ok(unsafe { std::slice::from_raw_parts(self.addr() as *const T, self.len) })
    }

    /// Notes that work a device has queued, up to `mark`, touches this buffer until it runs (an
    /// earlier device's work is waited for first); a synchronous backend's none changes nothing.
    pub fn touched_later_by(&self, mark: Option<Box<dyn PendingWork>>) -> Result<()> {
        let Some(mark) = mark else {
            return Ok(());
        };
        let mut pending = self.pending.lock();
        if let Some(earlier) = pending.take() {
            earlier.wait()?;
        }
        *pending = Some(mark);
        Ok(())
    }

    /// Waits for queued device work that touches this buffer.
    pub(crate) fn settle(&self) -> Result<()> {
        match self.pending.lock().take() {
            Some(device) => device.wait(),
            None => Ok(()),
        }
    }

    /// The elements, mutably, on a CPU device, once queued work that touches them has run.
    pub(crate) fn host_mut<T: Element>(&mut self, op: &'static str) -> Result<&mut [T]> {
        self.check_host::<T>(op)?;
        self.settle()?;
        // SAFETY: as in `host`; in addition `&mut self` guarantees exclusive access, and no two
        // live blocks of one allocator overlap, so no other slice aliases this memory.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.addr() as *mut T, self.len) })
    }
}

impl DeviceMemory {
    /// Allocates room for `len` elements of `dtype` under `tag`, for `op`, without counting a
    /// kernel call (the caller times what it counts). The contents are unspecified (but always
    /// valid bits for the dtype).
    pub(crate) fn alloc(
        &self,
        dtype: DType,
        len: usize,
        tag: Tag,
        op: &'static str,
    ) -> Result<Buffer> {
        let bytes = (len as u64)
            .checked_mul(dtype.size() as u64)
            .ok_or_else(|| Error::Argument {
                op,
                detail: format!("{len} elements of {dtype} overflow a byte count"),
            })?;
        let block = self
            .allocator()
            .allocate(bytes, tag)
            .map_err(|err| Error::from_alloc(op, err))?;
        Ok(self.buffer(block, dtype, len))
    }

    /// [`alloc`](Self::alloc) under the workspace tag, for a kernel's scratch memory (not
    /// counted as a call of its own: the kernel's call is).
    pub(crate) fn alloc_workspace(
        &self,
        dtype: DType,
        len: usize,
        op: &'static str,
    ) -> Result<Buffer> {
        self.alloc(dtype, len, Tag::WORKSPACE, op)
    }

    /// [`alloc_workspace`](Self::alloc_workspace) for optional scratch memory: `None` when it
    /// does not fit without releasing cached regions, and then no out-of-memory is counted or
    /// reported.
    pub(crate) fn try_alloc_workspace(&self, dtype: DType, len: usize) -> Option<Buffer> {
        let bytes = (len as u64).checked_mul(dtype.size() as u64)?;
        let block = self.allocator().try_allocate(bytes, Tag::WORKSPACE)?;
        Some(self.buffer(block, dtype, len))
    }

    /// A buffer of `len` elements of `dtype` over `block`, which this memory's allocator made.
    fn buffer(&self, block: Block, dtype: DType, len: usize) -> Buffer {
        Buffer {
            memory: self.clone(),
            block,
            dtype,
            len,
            pending: Mutex::new(None),
        }
    }
}

impl Drop for Buffer {
    /// Waits for queued work that touches the buffer before its block goes back to the
    /// allocator, which may hand the memory out at once. An error of that work has no one left
    /// to report to.
    fn drop(&mut self) {
        let _ = self.settle();
    }
}
