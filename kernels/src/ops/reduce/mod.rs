//! Reductions over one axis: sum, mean and max.

mod cpu;
mod meta;

use crate::buffer::Array;
use crate::error::Result;
use crate::shape::Shape;

/// How an axis is reduced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    /// The sum (accumulated in f64).
    Sum,
    /// The mean (accumulated in f64).
    Mean,
    /// The largest element (NaN wins).
    Max,
}

impl ReduceOp {
    /// The op's name, for errors.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Max => "max",
        }
    }
}

/// An array seen as `[outer, axis, inner]` around the reduced axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReduceSpec {
    /// Product of the dimensions before the axis.
    pub outer: usize,
    /// The axis' length.
    pub axis: usize,
    /// Product of the dimensions after the axis.
    pub inner: usize,
}

/// Reduces `x` over `axis`; the axis is kept with length 1 when `keep_dim`, dropped otherwise.
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType};
/// use headroom_kernels::ops::reduce::{ReduceOp, reduce};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let x = Array::from_f64(&cpu, [2, 3], DType::F32, &[1., 2., 3., 4., 5., 6.])?;
/// assert_eq!(reduce(ReduceOp::Sum, &x, 1, false)?.to_f64()?, [6., 15.]);
/// assert_eq!(reduce(ReduceOp::Max, &x, 0, true)?.shape().dims(), [1, 3]);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn reduce(op: ReduceOp, x: &Array, axis: usize, keep_dim: bool) -> Result<Array> {
    x.check_float(op.name())?;
    let dims = x.shape().dims();
    let length = x.shape().dim(axis, op.name())?;
    let spec = ReduceSpec {
        outer: dims[..axis].iter().product(),
        axis: length,
        inner: dims[axis + 1..].iter().product(),
    };
    let mut out_dims = dims.to_vec();
    if keep_dim {
        out_dims[axis] = 1;
    } else {
        out_dims.remove(axis);
    }
    let mut out = Array::uninit(x.device(), Shape::new(&out_dims), x.dtype(), op.name())?;
    x.device()
        .backend()
        .reduce(op, spec, x.buffer(), out.buffer_mut())?;
    Ok(out)
}

/// The sum over `axis`, dropping it.
pub fn sum(x: &Array, axis: usize) -> Result<Array> {
    reduce(ReduceOp::Sum, x, axis, false)
}

/// The mean over `axis`, dropping it.
pub fn mean(x: &Array, axis: usize) -> Result<Array> {
    reduce(ReduceOp::Mean, x, axis, false)
}

/// The maximum over `axis`, dropping it.
pub fn max(x: &Array, axis: usize) -> Result<Array> {
    reduce(ReduceOp::Max, x, axis, false)
}
