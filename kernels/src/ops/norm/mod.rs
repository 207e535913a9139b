//! Layer normalization over the last axis, forward and backward.
//!
//! It sees its operand as `rows` rows of `len` contiguous elements (`len` is the last
//! dimension, `rows` the product of the others). Half types compute in f32 and store in half;
//! sums over a row, and over rows for the parameter gradients, accumulate in f64.
//!
//! Layer normalization keeps per-row statistics for its backward pass: the mean and the
//! reciprocal standard deviation, of dtype [`DType::F32`](crate::DType::F32)
//! ([`DType::F64`](crate::DType::F64) for F64 inputs).

mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
pub(crate) mod kernels;
mod meta;

#[cfg(feature = "cuda")]
pub use cuda::row_kernels;
pub use kernels::{LayerNormBackwardOperands, LayerNormOperands, NormKernels, stats_dtype};

use super::rows::{check_operand, rows_of};
use crate::array::Array;
use crate::error::{Error, Result};
use crate::shape::Shape;

/// The output of [`layer_norm`]: the result and the statistics its backward pass needs.
#[derive(Debug)]
pub struct LayerNorm {
    /// The normalized, scaled and shifted input (its shape and dtype).
    pub y: Array,
    /// Each row's mean: the input's shape without the last axis, dtype [`stats_dtype`].
    pub mean: Array,
    /// Each row's `1 / sqrt(var + eps)`: shaped and typed as `mean`.
    pub rstd: Array,
}

/// The gradients computed by [`layer_norm_backward`].
#[derive(Debug)]
pub struct LayerNormGrads {
    /// The gradient of the input (its shape and dtype).
    pub dx: Array,
    /// The gradient of `gamma` (`[d]`).
    pub dgamma: Array,
    /// The gradient of `beta` (`[d]`).
    pub dbeta: Array,
}

/// Fails unless the statistic `stat` (called `what`) has `shape`, `dtype` and `x`'s device.
fn check_stat(x: &Array, stat: &Array, what: &str, shape: &Shape, op: &'static str) -> Result<()> {
    x.device().check_same(stat.device(), op)?;
    let dtype = stats_dtype(x.dtype());
    if stat.dtype() != dtype {
        return Err(Error::DType {
            op,
            expected: format!("{dtype} for {what}"),
            got: stat.dtype(),
        });
    }
    if stat.shape() != shape {
        return Err(Error::Shape {
            op,
            detail: format!(
                "{what} has shape {}, the input {} needs {shape}",
                stat.shape(),
                x.shape()
            ),
        });
    }
    Ok(())
}

/// The shape of the per-row statistics of `x`: its shape without the last axis.
fn stats_shape(x: &Array) -> Shape {
    let dims = x.shape().dims();
    Shape::new(&dims[..dims.len().saturating_sub(1)])
}

/// Layer normalization over the last axis (of length `d`): `gamma` and `beta` are `[d]` of
/// `x`'s dtype; `eps` (finite, >= 0) is added to the biased variance.
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType};
/// use headroom_kernels::ops::norm::layer_norm;
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let x = Array::from_f64(&cpu, [1, 2], DType::F64, &[1., 3.])?;
/// let gamma = Array::full(&cpu, [2], DType::F64, 1.0)?;
/// let beta = Array::full(&cpu, [2], DType::F64, 0.0)?;
/// let out = layer_norm(&x, &gamma, &beta, 0.0)?;
/// assert_eq!(out.y.to_f64()?, [-1., 1.]);
/// assert_eq!(out.mean.to_f64()?, [2.]);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn layer_norm(x: &Array, gamma: &Array, beta: &Array, eps: f64) -> Result<LayerNorm> {
    const OP: &str = "layer_norm";
    let spec = rows_of(x, OP)?;
    let param = Shape::new(&[spec.len]);
    check_operand(x, gamma, "gamma", &param, OP)?;
    check_operand(x, beta, "beta", &param, OP)?;
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(Error::Argument {
            op: OP,
            detail: format!("eps must be finite and >= 0, got {eps}"),
        });
    }
    let device = x.device();
    let stats = stats_shape(x);
    let mut y = Array::uninit(device, x.shape().clone(), x.dtype(), OP)?;
    let mut mean = Array::uninit(device, stats.clone(), stats_dtype(x.dtype()), OP)?;
    let mut rstd = Array::uninit(device, stats, stats_dtype(x.dtype()), OP)?;
    let operands = LayerNormOperands {
        x: x.buffer(),
        gamma: gamma.buffer(),
        beta: beta.buffer(),
        y: y.buffer_mut(OP)?,
        mean: mean.buffer_mut(OP)?,
        rstd: rstd.buffer_mut(OP)?,
    };
    device.backend().layer_norm(spec, eps, operands)?;
    Ok(LayerNorm { y, mean, rstd })
}

/// The gradients of [`layer_norm`] from its input `x`, `gamma`, the saved `mean` and `rstd`
/// (as [`layer_norm`] returned them) and the upstream gradient `dy` (`x`'s shape and dtype).
pub fn layer_norm_backward(
    x: &Array,
    gamma: &Array,
    mean: &Array,
    rstd: &Array,
    dy: &Array,
) -> Result<LayerNormGrads> {
    const OP: &str = "layer_norm_backward";
    let spec = rows_of(x, OP)?;
    let param = Shape::new(&[spec.len]);
    check_operand(x, gamma, "gamma", &param, OP)?;
    check_operand(x, dy, "dy", x.shape(), OP)?;
    let stats = stats_shape(x);
    check_stat(x, mean, "mean", &stats, OP)?;
    check_stat(x, rstd, "rstd", &stats, OP)?;
    let device = x.device();
    let mut dx = Array::uninit(device, x.shape().clone(), x.dtype(), OP)?;
    let mut dgamma = Array::uninit(device, param.clone(), x.dtype(), OP)?;
    let mut dbeta = Array::uninit(device, param, x.dtype(), OP)?;
    let operands = LayerNormBackwardOperands {
        x: x.buffer(),
        gamma: gamma.buffer(),
        mean: mean.buffer(),
        rstd: rstd.buffer(),
        dy: dy.buffer(),
        dx: dx.buffer_mut(OP)?,
        dgamma: dgamma.buffer_mut(OP)?,
        dbeta: dbeta.buffer_mut(OP)?,
    };
    device.backend().layer_norm_backward(spec, operands)?;
    Ok(LayerNormGrads { dx, dgamma, dbeta })
}
