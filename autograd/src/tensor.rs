//! Tensors: an array plus an identity the tape records by.

use std::sync::atomic::{AtomicU64, Ordering};

use headroom_kernels::{Array, DType, Device, Element, Shape};

use crate::again::Again;
use crate::error::Result;

/// Identifies a tensor's value on a tape. Clones of a tensor share it; every op output and every
/// [`Tensor::detach`] gets a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(u64);

impl TensorId {
    fn next() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Self(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// A value on a device: an [`Array`] (shared, cheap to clone) and an identity. A *variable*
/// (a parameter) is watched by every tape that records an op on it; any other tensor is tracked
/// only if computed, while a tape records, from tracked ones (or [`Tape::watch`]ed).
///
/// [`Tape::watch`]: crate::Tape::watch
///
/// ```
/// use headroom_autograd::{Tape, Tensor};
/// use headroom_kernels::{Array, DType, Device, DeviceConfig};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let w = Tensor::variable(Array::from_f64(&cpu, [2], DType::F32, &[3., -1.])?);
/// let tape = Tape::new();
/// let loss = tape.record(|| w.mul(&w)?.sum_all())?; // w . w
/// let grads = tape.gradient(&loss, &[&w])?;
/// assert_eq!(grads.get(&w).unwrap().to_f64()?, [6., -2.]); // 2 w
/// # Ok::<(), headroom_autograd::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Tensor {
    id: TensorId,
    array: Array,
    variable: bool,
    /// How a backward rule forms its values again instead of holding them; none: held.
    again: Option<Again>,
}

impl Tensor {
    /// A constant: no tape tracks it unless told to ([`crate::Tape::watch`]).
    pub fn new(array: Array) -> Self {
        Self {
            id: TensorId::next(),
            array,
            variable: false,
            again: None,
        }
    }

    /// A variable (a parameter): every recording tape watches it.
    pub fn variable(array: Array) -> Self {
        Self {
            id: TensorId::next(),
            array,
            variable: true,
            again: None,
        }
    }

    /// A constant from f64 values, converted to `dtype`.
    pub fn from_f64(
        device: &Device,
        shape: impl Into<Shape>,
        dtype: DType,
        data: &[f64],
    ) -> Result<Self> {
        Ok(Self::new(Array::from_f64(device, shape, dtype, data)?))
    }

    /// A constant from host elements of the matching type (token ids as `u32`, say).
    pub fn from_host<T: Element>(
        device: &Device,
        shape: impl Into<Shape>,
        data: &[T],
    ) -> Result<Self> {
        Ok(Self::new(Array::from_host(device, shape, data)?))
    }

    /// A constant filled with `value`.
    pub fn full(
        device: &Device,
        shape: impl Into<Shape>,
        dtype: DType,
        value: f64,
    ) -> Result<Self> {
        Ok(Self::new(Array::full(device, shape, dtype, value)?))
    }

    /// Its identity on a tape.
    pub fn id(&self) -> TensorId {
        self.id
    }

    /// Its data.
    pub fn array(&self) -> &Array {
        &self.array
    }

    /// Its data, mutably, for in-place updates (an optimizer step); the array refuses in-place
    /// writes while a tape or another handle still shares it.
    pub fn array_mut(&mut self) -> &mut Array {
        &mut self.array
    }

    /// Its data, giving up the tensor.
    pub fn into_array(self) -> Array {
        self.array
    }

    /// True for a variable (a parameter).
    pub fn is_variable(&self) -> bool {
        self.variable
    }

    /// The same data as a new constant that no tape tracks: gradients stop here.
    pub fn detach(&self) -> Tensor {
        Self::new(self.array.clone())
    }

    /// The shape.
    pub fn shape(&self) -> &Shape {
        self.array.shape()
    }

    /// The dimensions.
    pub fn dims(&self) -> &[usize] {
        self.array.shape().dims()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.array.dtype()
    }

    /// The device.
    pub fn device(&self) -> &Device {
        self.array.device()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.array.numel()
    }

    /// The values, converted to f64, on the host.
    pub fn to_f64(&self) -> Result<Vec<f64>> {
        Ok(self.array.to_f64()?)
    }

    /// A new tensor (new identity, untracked) over the same data: what an op returns.
    pub(crate) fn output(array: Array) -> Self {
        Self::new(array)
    }

    /// [`Tensor::output`], a variable when `variable`: a parameter's copy on another device is
    /// a parameter of the module it is copied into.
    pub(crate) fn output_variable(array: Array, variable: bool) -> Self {
        Self {
            variable,
            ..Self::new(array)
        }
    }

    /// The same tensor, whose values the backward rules that keep it form again by `again`
    /// instead of holding them.
    pub(crate) fn formed_again_by(mut self, again: Again) -> Self {
        self.again = Some(again);
        self
    }

    /// How the backward rules that keep it form its values again, if they do.
    pub(crate) fn again(&self) -> Option<&Again> {
        self.again.as_ref()
    }
}
