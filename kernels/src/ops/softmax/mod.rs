//! Softmax and log-softmax over the last axis, forward and backward, and attention's fused
//! scale, causal mask and softmax.
//!
//! Every op sees its operand as `rows` rows of `len` contiguous elements (`len` is the last
//! dimension, `rows` the product of the others), and subtracts each row's maximum first, so
//! that large inputs do not overflow. Half types compute in f32 and store in half; the sums of
//! the backward pass accumulate in f64.

mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
pub(crate) mod kernels;
mod meta;

#[cfg(feature = "cuda")]
pub use cuda::row_kernels;
pub use kernels::{SoftmaxKernels, SoftmaxKind, SoftmaxSpec};

use super::rows::{check_operand, rows_of};
use crate::array::Array;
use crate::error::{Error, Result};

/// Fails unless a causal softmax's rows are as long as its matrices are tall.
fn check_causal(x: &Array, softmax: SoftmaxSpec, op: &'static str) -> Result<()> {
    let dims = x.shape().dims();
    let square = matches!(dims, [.., rows, cols] if rows == cols);
    if softmax.causal && !square {
        return Err(Error::Shape {
            op,
            detail: format!("a causal softmax needs square matrices, got {}", x.shape()),
        });
    }
    if !softmax.scale.is_finite() {
        return Err(Error::Argument {
            op,
            detail: format!("scale {} is not finite", softmax.scale),
        });
    }
    Ok(())
}

fn softmax_forward(softmax: SoftmaxSpec, x: &Array) -> Result<Array> {
    let op = softmax.kind.name();
    let spec = rows_of(x, op)?;
    check_causal(x, softmax, op)?;
    let mut y = Array::uninit(x.device(), x.shape().clone(), x.dtype(), op)?;
    x.device()
        .backend()
        .softmax(softmax, spec, x.buffer(), y.buffer_mut(op)?)?;
    Ok(y)
}

fn softmax_grad(softmax: SoftmaxSpec, y: &Array, dy: &Array) -> Result<Array> {
    let op = softmax.kind.backward_name();
    let spec = rows_of(y, op)?;
    check_operand(y, dy, "dy", y.shape(), op)?;
    check_causal(y, softmax, op)?;
    let mut dx = Array::uninit(y.device(), y.shape().clone(), y.dtype(), op)?;
    y.device().backend().softmax_backward(
        softmax,
        spec,
        y.buffer(),
        dy.buffer(),
        dx.buffer_mut(op)?,
    )?;
    Ok(dx)
}

/// Softmax over the last axis, numerically stable.
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType};
/// use headroom_kernels::ops::softmax::softmax;
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let x = Array::from_f64(&cpu, [1, 2], DType::F64, &[1000., 1000.])?;
/// assert_eq!(softmax(&x)?.to_f64()?, [0.5, 0.5]);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn softmax(x: &Array) -> Result<Array> {
    softmax_forward(SoftmaxSpec::plain(SoftmaxKind::Softmax), x)
}

/// Log-softmax over the last axis: `x - max - ln(sum(exp(x - max)))`.
pub fn log_softmax(x: &Array) -> Result<Array> {
    softmax_forward(SoftmaxSpec::plain(SoftmaxKind::LogSoftmax), x)
}

/// The gradient of [`softmax`] from its output `y` and the upstream gradient `dy` (same shape,
/// dtype and device): `y * (dy - sum(dy * y))`, the sum over the last axis.
pub fn softmax_backward(y: &Array, dy: &Array) -> Result<Array> {
    softmax_grad(SoftmaxSpec::plain(SoftmaxKind::Softmax), y, dy)
}

/// The gradient of [`log_softmax`] from its output `y` and the upstream gradient `dy` (same
/// shape, dtype and device): `dy - exp(y) * sum(dy)`, the sum over the last axis.
pub fn log_softmax_backward(y: &Array, dy: &Array) -> Result<Array> {
    softmax_grad(SoftmaxSpec::plain(SoftmaxKind::LogSoftmax), y, dy)
}

/// Attention weights in one pass: `softmax(mask(scale * scores))` over the last axis, the mask
/// (when `causal`) hiding every column after the row's own, as a decoder's attention does. The
/// same as scaling, [`crate::ops::index::causal_mask`]ing with -infinity and [`softmax`], without
/// the two intermediate arrays.
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType};
/// use headroom_kernels::ops::softmax::attention_softmax;
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let scores = Array::from_f64(&cpu, [2, 2], DType::F64, &[1., 5., 2., 2.])?;
/// assert_eq!(attention_softmax(&scores, 0.5, true)?.to_f64()?, [1., 0., 0.5, 0.5]);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn attention_softmax(scores: &Array, scale: f64, causal: bool) -> Result<Array> {
    let spec = SoftmaxSpec {
        kind: SoftmaxKind::Softmax,
        scale,
        causal,
    };
    softmax_forward(spec, scores)
}

/// The gradient of [`attention_softmax`] with respect to its scores, from its output `y` and
/// the upstream gradient `dy`: `scale * y * (dy - sum(dy * y))`, 0 where masked.
pub fn attention_softmax_backward(
    y: &Array,
    dy: &Array,
    scale: f64,
    causal: bool,
) -> Result<Array> {
    let spec = SoftmaxSpec {
        kind: SoftmaxKind::Softmax,
        scale,
        causal,
    };
    softmax_grad(spec, y, dy)
}
