//! The cross-entropy over a vocabulary sliced across ranks (Megatron's vocabulary-parallel
//! cross-entropy): each rank holds the logits of its slice, and the softmax's sums over the
//! whole vocabulary come from every slice's parts, combined by the caller.

use super::cross_entropy_spec;
use super::kernels::loss_dtype;
use crate::array::Array;
use crate::error::{Error, Result};
use crate::shape::Shape;

/// Each row's parts of a cross-entropy over a sliced vocabulary, from `logits` (`[N, C]`, one
/// slice's columns) and `targets` (`[N]`, U32, numbered within the slice; a target `>= C`
/// lies in another slice): `[2, N]` of [`loss_dtype`], the rows' log-sum-exp over the slice,
/// then their targets' logits (0 for a target elsewhere).
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType};
/// use headroom_kernels::ops::loss::sliced_cross_entropy_parts;
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let logits = Array::from_f64(&cpu, [2, 2], DType::F32, &[0., 0., 1., 3.])?;
/// let targets = Array::from_host(&cpu, [2], &[1u32, 7])?;
/// let parts = sliced_cross_entropy_parts(&logits, &targets)?.to_f64()?;
/// assert!((parts[0] - 2f64.ln()).abs() < 1e-6 && parts[2] == 0.0 && parts[3] == 0.0);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn sliced_cross_entropy_parts(logits: &Array, targets: &Array) -> Result<Array> {
    const OP: &str = "sliced_cross_entropy_parts";
    let spec = cross_entropy_spec(logits, None, targets, None, None, OP)?;
    let dtype = loss_dtype(logits.dtype());
    let mut out = Array::uninit(logits.device(), Shape::new(&[2, spec.rows]), dtype, OP)?;
    logits.device().backend().sliced_cross_entropy_parts(
        spec,
        logits.buffer(),
        targets.buffer(),
        out.buffer_mut(OP)?,
    )?;
    Ok(out)
}

/// The gradient of a slice's logits (`[N, C]`) of a cross-entropy whose softmax spans the
/// whole vocabulary: `(exp(logits[i, j] - lse[i]) - (j == targets[i])) * scale[i]`, where
/// `lse` (`[N]`) holds each row's log-sum-exp over the whole vocabulary and `scale` (`[N]`)
/// its weight, both of [`loss_dtype`]; a target `>= C` lies in another slice.
pub fn sliced_cross_entropy_backward(
    logits: &Array,
    targets: &Array,
    lse: &Array,
    scale: &Array,
) -> Result<Array> {
    const OP: &str = "sliced_cross_entropy_backward";
    let spec = cross_entropy_spec(logits, None, targets, None, None, OP)?;
    let dtype = loss_dtype(logits.dtype());
    for (name, per_row) in [("lse", lse), ("scale", scale)] {
        logits.device().check_same(per_row.device(), OP)?;
        if per_row.shape().dims() != [spec.rows] || per_row.dtype() != dtype {
            return Err(Error::Argument {
                op: OP,
                detail: format!(
                    "{name} must be [{}] of {dtype}, got {} of {}",
                    spec.rows,
                    per_row.shape(),
                    per_row.dtype()
                ),
            });
        }
    }
    let mut out = Array::uninit(logits.device(), logits.shape().clone(), logits.dtype(), OP)?;
    logits.device().backend().sliced_cross_entropy_backward(
        spec,
        (lse.buffer(), scale.buffer()),
        logits.buffer(),
        targets.buffer(),
        out.buffer_mut(OP)?,
    )?;
    Ok(out)
}
