//! Creating arrays, moving data between host and device, copying and casting.

mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
pub(crate) mod kernels;
mod meta;
mod square_sum;
mod transfer;

pub use kernels::DataKernels;
pub use transfer::Arriving;

use std::borrow::Cow;

use crate::array::Array;
use crate::device::Device;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::shape::Shape;

impl Array {
    /// An array of `shape` and `dtype` with every element `value`.
    ///
    /// ```
    /// use headroom_kernels::{Array, Device, DeviceConfig, DType};
    /// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
    /// let a = Array::full(&cpu, [2, 2], DType::BF16, 1.5)?;
    /// assert_eq!(a.to_f64()?, [1.5; 4]);
    /// # Ok::<(), headroom_kernels::Error>(())
    /// ```
    pub fn full(
        device: &Device,
        shape: impl Into<Shape>,
        dtype: DType,
        value: f64,
    ) -> Result<Array> {
        let mut out = Array::uninit(device, shape.into(), dtype, "full")?;
        device.backend().fill(out.buffer_mut("full")?, value)?;
        Ok(out)
    }

    /// An array of zeros.
    pub fn zeros(device: &Device, shape: impl Into<Shape>, dtype: DType) -> Result<Array> {
        Self::full(device, shape, dtype, 0.0)
    }

    /// Uploads host data of `T`'s dtype.
    pub fn from_host<T: Element>(
        device: &Device,
        shape: impl Into<Shape>,
        data: &[T],
    ) -> Result<Array> {
        let shape = shape.into();
        if shape.checked_numel() != Some(data.len()) {
            return Err(Error::HostLength {
                op: "from_host",
                expected: shape.numel(),
                got: data.len(),
                shape,
            });
        }
        let mut out = Array::uninit(device, shape, T::DTYPE, "from_host")?;
        device
            .backend()
            .write(out.buffer_mut("from_host")?, bytemuck::cast_slice(data))?;
        Ok(out)
    }

    /// Overwrites the elements with host data of `T`'s dtype (as many as it holds), in place:
    /// nothing is allocated.
    pub fn write_host<T: Element>(&mut self, data: &[T]) -> Result<()> {
        if T::DTYPE != self.dtype() {
            return Err(Error::DType {
                op: "write_host",
                expected: self.dtype().to_string(),
                got: T::DTYPE,
            });
        }
        if data.len() != self.numel() {
            return Err(Error::HostLength {
                op: "write_host",
                expected: self.numel(),
                got: data.len(),
                shape: self.shape().clone(),
            });
        }
        let device = self.device().clone();
        device
            .backend()
            .write(self.buffer_mut("write_host")?, bytemuck::cast_slice(data))
    }

    /// Overwrites the elements with f64 host data converted to the array's dtype (rounded to
    /// nearest), in place: nothing on the device is allocated.
    pub fn write_f64(&mut self, data: &[f64]) -> Result<()> {
        crate::cpu::with_element!(self.dtype(), |T| {
            let converted: Vec<T> = data.iter().map(|&v| <T as Element>::from_f64(v)).collect();
            self.write_host(&converted)
        })
    }

    /// Overwrites the elements, in place, with the raw little-endian bytes of as many elements
    /// of `dtype` (a file's contents), converted on the host to the array's dtype where it
    /// differs (rounded to nearest): nothing on the device is allocated.
    pub fn write_bytes(&mut self, dtype: DType, bytes: &[u8]) -> Result<()> {
        let expected = self.numel().checked_mul(dtype.size());
        let convertible = dtype == self.dtype() || dtype.is_float() && self.dtype().is_float();
        if expected != Some(bytes.len()) || !convertible {
            return Err(Error::Argument {
                op: "write_bytes",
                detail: format!(
                    "{} bytes of {dtype} for {} of {}, which needs {} bytes of a float dtype \
                     or of {1}",
                    bytes.len(),
                    self.shape(),
                    self.dtype(),
                    expected.map_or_else(|| "more than a usize".into(), |n| n.to_string())
                ),
            });
        }
        if dtype == self.dtype() {
            let device = self.device().clone();
            return device
                .backend()
                .write(self.buffer_mut("write_bytes")?, bytes);
        }
        crate::cpu::with_element!(self.dtype(), |Out| {
            let values: Vec<Out> = crate::cpu::with_element!(dtype, |In| {
                bytes
                    .chunks_exact(dtype.size())
                    .map(|b| Out::from_f64(bytemuck::pod_read_unaligned::<In>(b).to_f64()))
                    .collect()
            });
            self.write_host(&values)
        })
    }

    /// Uploads f64 host data, converted to `dtype` (rounded to nearest).
    pub fn from_f64(
        device: &Device,
        shape: impl Into<Shape>,
        dtype: DType,
        data: &[f64],
    ) -> Result<Array> {
        crate::cpu::with_element!(dtype, |T| {
            let converted: Vec<T> = data.iter().map(|&v| <T as Element>::from_f64(v)).collect();
            Self::from_host(device, shape, &converted)
        })
    }

    /// Downloads the elements; `T` must be the array's dtype.
    pub fn to_host<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype() {
            return Err(Error::DType {
                op: "to_host",
                expected: T::DTYPE.to_string(),
                got: self.dtype(),
            });
        }
        let mut out = vec![T::zeroed(); self.numel()];
        self.device()
            .backend()
            .read(self.buffer(), bytemuck::cast_slice_mut(&mut out))?;
        Ok(out)
    }

    /// Uploads the raw little-endian bytes of `shape` elements of `dtype` (a file's contents,
    /// say); the length must match exactly.
    pub fn from_bytes(
        device: &Device,
        shape: impl Into<Shape>,
        dtype: DType,
        bytes: &[u8],
    ) -> Result<Array> {
        let shape = shape.into();
        let expected = shape
            .checked_numel()
            .and_then(|n| n.checked_mul(dtype.size()));
        if expected != Some(bytes.len()) {
            return Err(Error::Argument {
                op: "from_bytes",
                detail: format!(
                    "{} bytes for {shape} of {dtype}, which needs {}",
                    bytes.len(),
                    expected.map_or_else(|| "more than a usize".into(), |n| n.to_string())
                ),
            });
        }
        let mut out = Array::uninit(device, shape, dtype, "from_bytes")?;
        device
            .backend()
            .write(out.buffer_mut("from_bytes")?, bytes)?;
        Ok(out)
    }

    /// Downloads the raw little-endian bytes of the elements.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut out = vec![0u8; self.buffer().bytes()];
        self.device().backend().read(self.buffer(), &mut out)?;
        Ok(out)
    }

    /// Downloads the elements converted to f64, whatever the dtype.
    pub fn to_f64(&self) -> Result<Vec<f64>> {
        crate::cpu::with_element!(self.dtype(), |T| {
            Ok(self.to_host::<T>()?.into_iter().map(T::to_f64).collect())
        })
    }

    /// A copy in new memory (`clone` shares the buffer instead).
    pub fn deep_copy(&self) -> Result<Array> {
        let mut out = Array::uninit(self.device(), self.shape().clone(), self.dtype(), "copy")?;
        self.device()
            .backend()
            .copy(self.buffer(), out.buffer_mut("copy")?)?;
        Ok(out)
    }

    /// The elements converted to `dtype` (rounded to nearest; saturating into integers).
    pub fn cast(&self, dtype: DType) -> Result<Array> {
        let mut out = Array::uninit(self.device(), self.shape().clone(), dtype, "cast")?;
        self.device()
            .backend()
            .cast(self.buffer(), out.buffer_mut("cast")?)?;
        Ok(out)
    }
}

/// Copies the `len` elements of `src` from flat index `src_at` into `dst` from flat index
/// `dst_at`, in place (one dtype and device; the shapes may differ): nothing is allocated. A
/// range past either array's end is an argument error.
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType, ops::data::copy_range};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let flat = Array::from_f64(&cpu, [5], DType::F32, &[1., 2., 3., 4., 5.])?;
/// let mut square = Array::zeros(&cpu, [2, 2], DType::F32)?;
/// copy_range(&flat, 1, &mut square, 0, 4)?;
/// assert_eq!(square.to_f64()?, [2., 3., 4., 5.]);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn copy_range(
    src: &Array,
    src_at: usize,
    dst: &mut Array,
    dst_at: usize,
    len: usize,
) -> Result<()> {
    src.check_peer(dst, "copy_range")?;
    converted_range((src, src_at), (dst, dst_at), len, "copy_range")
}

/// `len` of `x`'s elements, flat, from `start`, zeros past the end of `x` (a chunk of an array
/// cut over ranks): `x` itself, reshaped, where that is all of it.
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType, ops::data::window};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let x = Array::from_f64(&cpu, [3], DType::F32, &[1., 2., 3.])?;
/// assert_eq!(window(&x, 2, 2)?.to_f64()?, [3., 0.]);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn window(x: &Array, start: usize, len: usize) -> Result<Array> {
    let numel = x.numel();
    if start == 0 && len == numel {
        return x.reshape([len]);
    }
    let mut out = Array::zeros(x.device(), [len], x.dtype())?;
    let start = start.min(numel);
    copy_range(
        &x.reshape([numel])?,
        start,
        &mut out,
        0,
        len.min(numel - start),
    )?;
    Ok(out)
}

/// [`window`] of host values: `len` of `whole` from `start`, zeros past its end, borrowed
/// where they lie within it.
///
/// ```
/// use headroom_kernels::ops::data::host_window;
/// assert_eq!(*host_window(&[1u8, 2, 3], 2, 2), [3, 0]);
/// assert_eq!(*host_window(&[1u8, 2, 3], 0, 2), [1, 2]);
/// ```
pub fn host_window<T: Copy + Default>(whole: &[T], start: usize, len: usize) -> Cow<'_, [T]> {
    let start = start.min(whole.len());
    let end = whole.len().min(start + len);
    if end - start == len {
        return Cow::Borrowed(&whole[start..end]);
    }
    let mut part = whole[start..end].to_vec();
    part.resize(len, T::default());
    Cow::Owned(part)
}

/// [`copy_range`] between arrays of any two dtypes: the elements are converted to `dst`'s
/// (as [`Array::cast`] converts them), in place.
pub fn cast_range(
    src: &Array,
    src_at: usize,
    dst: &mut Array,
    dst_at: usize,
    len: usize,
) -> Result<()> {
    src.device().check_same(dst.device(), "cast_range")?;
    converted_range((src, src_at), (dst, dst_at), len, "cast_range")
}

/// `len` elements of `src` from `src_at` into `dst` from `dst_at`, converted to `dst`'s dtype,
/// for `op` (the arrays already checked to share a device).
fn converted_range(
    (src, src_at): (&Array, usize),
    (dst, dst_at): (&mut Array, usize),
    len: usize,
    op: &'static str,
) -> Result<()> {
    src.device()
        .backend()
        .cast_range(src.buffer(), src_at, dst.buffer_mut(op)?, dst_at, len)
}

/// Copies `src` into `dst` in place (same shape, dtype and device).
pub fn copy_into(src: &Array, dst: &mut Array) -> Result<()> {
    src.check_peer(dst, "copy_into")?;
    if src.shape() != dst.shape() {
        return Err(Error::Shape {
            op: "copy_into",
            detail: format!("source {} and destination {}", src.shape(), dst.shape()),
        });
    }
    src.device()
        .backend()
        .copy(src.buffer(), dst.buffer_mut("copy_into")?)
}
