//! Buffers (device memory that returns to the allocator on drop) and arrays (a buffer and a shape).

use std::sync::Arc;

use headroom_alloc::{Block, Tag};

use crate::device::{Device, DeviceKind};
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::shape::Shape;

/// `len` elements of one dtype in a device's memory. Dropping it frees the bytes; no error path
/// can leak them, since the block frees itself.
#[derive(Debug)]
pub struct Buffer {
    device: Device,
    /// The allocation; at least `len * dtype.size()` bytes, 256-byte aligned.
    block: Block,
    dtype: DType,
    len: usize,
}

impl Buffer {
    pub(crate) fn new(device: Device, block: Block, dtype: DType, len: usize) -> Self {
        Self {
            device,
            block,
            dtype,
            len,
        }
    }

    /// The device holding it.
    pub fn device(&self) -> &Device {
        &self.device
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
        if self.device.kind() != DeviceKind::Cpu {
            return Err(Error::NoData {
                op,
                device: self.device.to_string(),
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

    /// The elements, on a CPU device.
    pub(crate) fn host<T: Element>(&self, op: &'static str) -> Result<&[T]> {
        self.check_host::<T>(op)?;
        // SAFETY: on a CPU device the block's address comes from a `HostSource` (real host
        // memory, sealed), it spans at least `len * size_of::<T>()` bytes, is 256-byte aligned
        // (enough for every element type), and lives as long as `self`. Every bit pattern is a
        // valid `T` (`T: Pod`), so stale contents are sound to read.
        Ok(unsafe { std::slice::from_raw_parts(self.addr() as *const T, self.len) })
    }

    /// The elements, mutably, on a CPU device.
    pub(crate) fn host_mut<T: Element>(&mut self, op: &'static str) -> Result<&mut [T]> {
        self.check_host::<T>(op)?;
        // SAFETY: as in `host`; in addition `&mut self` guarantees exclusive access, and no two
        // live blocks of one allocator overlap, so no other slice aliases this memory.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.addr() as *mut T, self.len) })
    }
}

/// A contiguous, row-major array: a shared buffer and its shape. Cloning shares the buffer (use
/// [`Array::deep_copy`] for new memory); the bytes return to the allocator when the last handle
/// drops. In-place writes ([`Array::buffer_mut`]) need the only handle, so no other handle ever
/// sees its data change.
#[derive(Debug, Clone)]
pub struct Array {
    buffer: Arc<Buffer>,
    shape: Shape,
}

impl Array {
    /// An array of `shape` made of `buffer`, which must hold exactly `shape.numel()` elements.
    pub fn new(buffer: Buffer, shape: Shape) -> Result<Self> {
        if shape.checked_numel() != Some(buffer.len()) {
            return Err(Error::Shape {
                op: "array",
                detail: format!("shape {shape} does not hold {} elements", buffer.len()),
            });
        }
        Ok(Self {
            buffer: Arc::new(buffer),
            shape,
        })
    }

    /// Allocates an array of `shape` and `dtype` on `device`, contents unspecified.
    pub(crate) fn uninit(
        device: &Device,
        shape: Shape,
        dtype: DType,
        op: &'static str,
    ) -> Result<Self> {
        let len = shape.checked_numel().ok_or_else(|| Error::Shape {
            op,
            detail: format!("{shape} has more elements than a usize holds"),
        })?;
        let buffer = Arc::new(device.alloc(dtype, len, op)?);
        Ok(Self { buffer, shape })
    }

    /// The shape.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.buffer.dtype
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.buffer.device
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.buffer.len
    }

    /// The buffer.
    pub fn buffer(&self) -> &Buffer {
        &self.buffer
    }

    /// The buffer, mutably, for `op` to write in place: fails with [`Error::Shared`] while another
    /// handle (a clone, a reshaped view) shares it.
    pub fn buffer_mut(&mut self, op: &'static str) -> Result<&mut Buffer> {
        Arc::get_mut(&mut self.buffer).ok_or(Error::Shared { op })
    }

    /// True when another handle shares this array's buffer.
    pub fn is_shared(&self) -> bool {
        Arc::strong_count(&self.buffer) > 1
    }

    /// The same data under another shape with as many elements: a view sharing the buffer.
    pub fn reshape(&self, shape: impl Into<Shape>) -> Result<Self> {
        let shape = shape.into();
        if shape.checked_numel() != Some(self.numel()) {
            return Err(Error::Shape {
                op: "reshape",
                detail: format!("{} into {shape}: element counts differ", self.shape),
            });
        }
        Ok(Self {
            buffer: Arc::clone(&self.buffer),
            shape,
        })
    }

    /// Fails with [`Error::DType`] unless the dtype is a float one.
    pub(crate) fn check_float(&self, op: &'static str) -> Result<()> {
        if self.dtype().is_float() {
            Ok(())
        } else {
            Err(Error::DType {
                op,
                expected: "a float dtype".into(),
                got: self.dtype(),
            })
        }
    }

    /// Fails unless `other` has this array's dtype and device.
    pub(crate) fn check_peer(&self, other: &Array, op: &'static str) -> Result<()> {
        self.device().check_same(other.device(), op)?;
        if self.dtype() != other.dtype() {
            return Err(Error::DType {
                op,
                expected: self.dtype().to_string(),
                got: other.dtype(),
            });
        }
        Ok(())
    }
}
