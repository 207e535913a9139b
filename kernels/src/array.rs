//! Arrays: a shared buffer of a device and its shape, the operand of every op.

use std::sync::Arc;

use crate::buffer::Buffer;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::Shape;

/// A contiguous, row-major array: a shared buffer and its shape. Cloning shares the buffer (use
/// [`Array::deep_copy`] for new memory); the bytes return to the allocator when the last handle
/// drops. In-place writes ([`Array::buffer_mut`]) need the only handle, so no other handle ever
/// sees its data change.
#[derive(Debug, Clone)]
pub struct Array {
    buffer: Arc<Buffer>,
    shape: Shape,
    /// The device whose memory holds `buffer` (the device's memory is the buffer's).
    device: Device,
}

impl Array {
    /// An array of `shape` made of `buffer`, a buffer of `device` (as [`Device::alloc`] makes)
    /// that holds exactly `shape.numel()` elements.
    ///
    /// ```
    /// use headroom_kernels::{Array, Device, DeviceConfig, DType, Shape};
    /// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
    /// let buffer = cpu.alloc(DType::F32, 6, "example")?;
    /// let a = Array::new(&cpu, buffer, Shape::new(&[2, 3]))?;
    /// assert_eq!(a.numel(), 6);
    /// # Ok::<(), headroom_kernels::Error>(())
    /// ```
    pub fn new(device: &Device, buffer: Buffer, shape: Shape) -> Result<Self> {
        if !buffer.memory().same(device.memory()) {
            return Err(Error::Device {
                op: "array",
                left: device.to_string(),
                right: buffer.memory().to_string(),
            });
        }
        if shape.checked_numel() != Some(buffer.len()) {
            return Err(Error::Shape {
                op: "array",
                detail: format!("shape {shape} does not hold {} elements", buffer.len()),
            });
        }
        Ok(Self {
            buffer: Arc::new(buffer),
            shape,
            device: device.clone(),
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
        Ok(Self {
            buffer,
            shape,
            device: device.clone(),
        })
    }

    /// The shape.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.buffer.dtype()
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.buffer.len()
    }

    /// The buffer.
    pub fn buffer(&self) -> &Buffer {
        &self.buffer
    }

    /// The buffer, mutably, for `op` to write in place: fails with [`Error::Shared`] while another
    /// handle (a clone, a reshaped view) shares it.
    pub fn buffer_mut(&mut self, op: &'static str) -> Result<&mut Buffer> {
        let buffer = Arc::get_mut(&mut self.buffer).ok_or(Error::Shared { op })?;
        // Whatever is queued that still reads the buffer comes before the write.
        buffer.settle()?;
        Ok(buffer)
    }

    /// Waits for queued work that touches the array (a copy into it that may still run): what
    /// the host does before it works on an array itself. Reading or writing it through the
    /// kernels waits by itself; on a meta device this is where a planned host's queue waits
    /// for a planned copy.
    pub fn settle(&self) -> Result<()> {
        self.buffer.settle()
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
            device: self.device.clone(),
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

    /// Fails with [`Error::DType`] unless the array holds indices (U32).
    pub(crate) fn check_indices(&self, op: &'static str) -> Result<()> {
        if self.dtype() == DType::U32 {
            Ok(())
        } else {
            Err(Error::DType {
                op,
                expected: DType::U32.to_string(),
                got: self.dtype(),
            })
        }
    }

    /// Fails unless this array holds the document starts of `peer`'s rows
    /// ([`crate::ops::documents`]): U32, of shape `[batch, len]`, on `peer`'s device.
    pub(crate) fn check_document_starts(
        &self,
        (batch, len): (usize, usize),
        peer: &Array,
        op: &'static str,
    ) -> Result<()> {
        peer.device().check_same(self.device(), op)?;
        if self.dtype() != DType::U32 {
            return Err(Error::DType {
                op,
                expected: format!("{} for the document starts", DType::U32),
                got: self.dtype(),
            });
        }
        if self.shape().dims() != [batch, len] {
            return Err(Error::Shape {
                op,
                detail: format!(
                    "the document starts are {}, where [{batch}, {len}] is needed (the batch and \
                     the positions)",
                    self.shape()
                ),
            });
        }
        Ok(())
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
