//! Layer normalization and RMS normalization over the last axis, forward and backward.
//!
//! They see their operand as `rows` rows of `len` contiguous elements (`len` is the last
//! dimension, `rows` the product of the others). Half types compute in f32 and store in half;
//! sums over a row, and over rows for the parameter gradients, accumulate in f64.
//!
//! Both keep per-row statistics for their backward pass (layer normalization the mean and the
//! reciprocal standard deviation, RMS normalization the reciprocal root mean square), of dtype
//! [`DType::F32`](crate::DType::F32) ([`DType::F64`](crate::DType::F64) for F64 inputs).

mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
pub(crate) mod kernels;
mod meta;
mod rms_cpu;

#[cfg(feature = "cuda")]
pub use cuda::row_kernels;
pub use kernels::{
    LayerNormBackwardOperands, LayerNormOperands, NormKernels, RmsNormBackwardOperands,
    RmsNormOperands, stats_dtype,
};

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

/// The output of [`rms_norm`]: the result and the statistic its backward pass needs.
#[derive(Debug)]
pub struct RmsNorm {
    /// The normalized and scaled input (its shape and dtype).
    pub y: Array,
    /// Each row's `1 / sqrt(mean(x^2) + eps)`: the input's shape without the last axis, dtype
    /// [`stats_dtype`].
    pub rstd: Array,
}

/// The gradients computed by [`rms_norm_backward`].
#[derive(Debug)]
pub struct RmsNormGrads {
    /// The gradient of the input (its shape and dtype).
    pub dx: Array,
    /// The gradient of `gamma` (`[d]`).
    pub dgamma: Array,
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

/// Fails unless `eps` is finite and >= 0.
fn check_eps(eps: f64, op: &'static str) -> Result<()> {
    if eps.is_finite() && eps >= 0.0 {
        return Ok(());
    }
    Err(Error::Argument {
        op,
        detail: format!("eps must be finite and >= 0, got {eps}"),
    })
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
    check_eps(eps, OP)?;
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

/// RMS normalization over the last axis (of length `d`), as Llama's `LlamaRMSNorm` computes it:
/// `y = gamma * (x * rstd)` with `rstd = 1 / sqrt(mean(x^2) + eps)`; `gamma` is `[d]` of `x`'s
/// dtype, `eps` finite and >= 0. Half types compute in f32 and round `x * rstd` to their dtype
/// before the product with `gamma` (Hugging Face's `weight * x_normed.to(input_dtype)`), so
/// that a bf16 or f16 result rounds as transformers' does.
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType};
/// use headroom_kernels::ops::norm::rms_norm;
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let x = Array::from_f64(&cpu, [1, 2], DType::F64, &[3., 4.])?;
/// let gamma = Array::from_f64(&cpu, [2], DType::F64, &[1., 2.])?;
/// let out = rms_norm(&x, &gamma, 0.0)?;
/// // mean(x^2) = 12.5
/// let r = 1.0 / 12.5f64.sqrt();
/// assert_eq!(out.y.to_f64()?, [3. * r, 8. * r]);
/// assert_eq!(out.rstd.to_f64()?, [r]);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn rms_norm(x: &Array, gamma: &Array, eps: f64) -> Result<RmsNorm> {
    const OP: &str = "rms_norm";
    let spec = rows_of(x, OP)?;
    check_operand(x, gamma, "gamma", &Shape::new(&[spec.len]), OP)?;
    check_eps(eps, OP)?;
    let device = x.device();
    let mut y = Array::uninit(device, x.shape().clone(), x.dtype(), OP)?;
    let mut rstd = Array::uninit(device, stats_shape(x), stats_dtype(x.dtype()), OP)?;
    let operands = RmsNormOperands {
        x: x.buffer(),
        gamma: gamma.buffer(),
        y: y.buffer_mut(OP)?,
        rstd: rstd.buffer_mut(OP)?,
    };
    device.backend().rms_norm(spec, eps, operands)?;
    Ok(RmsNorm { y, rstd })
}

/// The gradients of [`rms_norm`] from its input `x`, `gamma`, the saved `rstd` (as
/// [`rms_norm`] returned it) and the upstream gradient `dy` (`x`'s shape and dtype). `dgamma`
/// sums over the rows in a fixed order: it is the same from run to run.
pub fn rms_norm_backward(
    x: &Array,
    gamma: &Array,
    rstd: &Array,
    dy: &Array,
) -> Result<RmsNormGrads> {
    const OP: &str = "rms_norm_backward";
    let spec = rows_of(x, OP)?;
    let param = Shape::new(&[spec.len]);
    check_operand(x, gamma, "gamma", &param, OP)?;
    check_operand(x, dy, "dy", x.shape(), OP)?;
    check_stat(x, rstd, "rstd", &stats_shape(x), OP)?;
    let device = x.device();
    let mut dx = Array::uninit(device, x.shape().clone(), x.dtype(), OP)?;
    let mut dgamma = Array::uninit(device, param, x.dtype(), OP)?;
    let operands = RmsNormBackwardOperands {
        x: x.buffer(),
        gamma: gamma.buffer(),
        rstd: rstd.buffer(),
        dy: dy.buffer(),
        dx: dx.buffer_mut(OP)?,
        dgamma: dgamma.buffer_mut(OP)?,
    };
    device.backend().rms_norm_backward(spec, operands)?;
    Ok(RmsNormGrads { dx, dgamma })
}
