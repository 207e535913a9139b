//! Reductions over one axis: sum, mean and max.

mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
pub(crate) mod kernels;
mod meta;

pub use kernels::{ReduceKernels, ReduceOp, ReduceSpec};

use crate::array::Array;
use crate::error::Result;
use crate::shape::Shape;

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
        .reduce(op, spec, x.buffer(), out.buffer_mut(op.name())?)?;
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

/// `x` summed down to `shape`, which must broadcast to `x`'s shape: the gradient of a broadcast
/// (`sum_to(dy, x.shape())` for an operand `x` broadcast to `dy`'s shape). Adjacent summed axes
/// are merged into one (a free view), so the common cases take a single pass; with nothing to
/// sum, the result is a view of `x`.
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType, ops::reduce::sum_to};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let dy = Array::from_f64(&cpu, [2, 2, 3], DType::F32, &[1.; 12])?;
/// assert_eq!(sum_to(&dy, [3])?.to_f64()?, [4., 4., 4.]);
/// assert_eq!(sum_to(&dy, [2, 1, 1])?.to_f64()?, [6., 6.]);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn sum_to(x: &Array, shape: impl Into<Shape>) -> Result<Array> {
    const OP: &str = "sum_to";
    let shape = shape.into();
    x.check_float(OP)?;
    let dims = x.shape().dims();
    if shape.rank() > dims.len() || shape.broadcast(x.shape(), OP)? != *x.shape() {
        return Err(crate::error::Error::Shape {
            op: OP,
            detail: format!("{} cannot be summed to {shape}", x.shape()),
        });
    }
    // Runs of adjacent axes, each either summed or kept, as (length, summed).
    let offset = dims.len() - shape.rank();
    let mut runs: Vec<(usize, bool)> = Vec::new();
    for (axis, &dim) in dims.iter().enumerate() {
        let summed = axis < offset || (shape.dims()[axis - offset] == 1 && dim != 1);
        match runs.last_mut() {
            Some((length, last)) if *last == summed => *length *= dim,
            _ => runs.push((dim, summed)),
        }
    }
    let mut out = x.reshape(Shape::new(&runs.iter().map(|r| r.0).collect::<Vec<_>>()))?;
    // From the last run back, so that earlier axes keep their index.
    for (axis, _) in runs.iter().enumerate().rev().filter(|(_, r)| r.1) {
        out = reduce(ReduceOp::Sum, &out, axis, false).map_err(|err| err.in_op(OP))?;
    }
    out.reshape(shape)
}
