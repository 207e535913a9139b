//! The fused cross-entropy loss of logits against class targets, forward and backward.
//!
//! Targets are [`DType::U32`](crate::DType::U32) arrays. A target out of its range is an
//! [`Error::Argument`] found by the kernel (the meta device holds no data, so it cannot check
//! targets); the output allocated for the call is then dropped.

mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
pub(crate) mod kernels;
mod meta;
mod rows;
mod sliced;

pub use kernels::{CrossEntropySpec, LossKernels, loss_dtype};
pub use sliced::{sliced_cross_entropy_backward, sliced_cross_entropy_parts};

use crate::array::Array;
use crate::error::{Error, Result};
use crate::ops::index::kernels::check_range;
use crate::shape::Shape;
use kernels::counted_rows;

/// Checks the operands of a cross-entropy over the first `classes` columns of the logits (all
/// of them when `None`), and the targets' `host` copy where the caller gives one, and returns
/// their geometry.
fn cross_entropy_spec(
    logits: &Array,
    classes: Option<usize>,
    targets: &Array,
    ignore: Option<u32>,
    host: Option<&[u32]>,
    op: &'static str,
) -> Result<CrossEntropySpec> {
    logits.check_float(op)?;
    targets.check_indices(op)?;
    logits.device().check_same(targets.device(), op)?;
    match (logits.shape().dims(), targets.shape().dims()) {
        (&[rows, width], &[n]) if n == rows && rows > 0 => {
            let classes = classes.unwrap_or(width);
            if classes == 0 || classes > width {
                return Err(Error::Argument {
                    op,
                    detail: format!(
                        "{classes} classes in rows of {width} logits: there must be at least one, \
                         and no more than the row holds"
                    ),
                });
            }
            let counted = match host {
                Some(host) if host.len() != rows => {
                    return Err(Error::Argument {
                        op,
                        detail: format!("{} host targets for {rows} rows", host.len()),
                    });
                }
                Some(host) => {
                    check_range(op, "target", host, classes, ignore)?;
                    Some(counted_rows(host, ignore))
                }
                None => None,
            };
            Ok(CrossEntropySpec {
                rows,
                classes,
                width,
                ignore,
                counted,
            })
        }
        _ => Err(Error::Shape {
            op,
            detail: format!(
                "logits {} must be [N, C] with N >= 1 and targets {} must be [N]",
                logits.shape(),
                targets.shape()
            ),
        }),
    }
}

/// The mean cross-entropy of `logits` (`[N, C]`, float) against class `targets` (`[N]`, U32):
/// `mean_i(logsumexp(logits[i]) - logits[i, targets[i]])` over the rows whose target is not
/// `ignore` (0 when every row is ignored), computed stably. The result is a scalar (shape `[]`)
/// of [`loss_dtype`]. A target `>= C` other than `ignore` is an [`Error::Argument`].
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType, ops::loss::cross_entropy};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let logits = Array::from_f64(&cpu, [2, 2], DType::F32, &[0., 0., 5., -5.])?;
/// let targets = Array::from_host(&cpu, [2], &[1u32, 99])?;
/// let loss = cross_entropy(&logits, &targets, Some(99))?; // the second row is ignored
/// assert!((loss.to_f64()?[0] - 2f64.ln()).abs() < 1e-6);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn cross_entropy(logits: &Array, targets: &Array, ignore: Option<u32>) -> Result<Array> {
    padded_cross_entropy(logits, None, targets, ignore, None)
}

/// [`cross_entropy`] over the first `classes` columns of each row of `logits` (`[N, W]`, all
/// `W` of them when `None`); the other columns are padding and are not read. A head whose
/// products were padded to a multiple of eight columns (so that every row starts on 16 bytes)
/// gives its logits as they came.
///
/// `host` is the targets as the caller already read them: they are checked and counted here,
/// and a GPU reads nothing back (each read waits for the device to finish its queue). Without
/// it the backend reads them itself.
pub fn padded_cross_entropy(
    logits: &Array,
    classes: Option<usize>,
    targets: &Array,
    ignore: Option<u32>,
    host: Option<&[u32]>,
) -> Result<Array> {
    const OP: &str = "cross_entropy";
    let spec = cross_entropy_spec(logits, classes, targets, ignore, host, OP)?;
    let dtype = loss_dtype(logits.dtype());
    let mut out = Array::uninit(logits.device(), Shape::new(&[]), dtype, OP)?;
    logits.device().backend().cross_entropy(
        spec,
        logits.buffer(),
        targets.buffer(),
        out.buffer_mut(OP)?,
    )?;
    Ok(out)
}

/// The gradient of [`cross_entropy`] with respect to `logits`, scaled by the loss' gradient
/// `dloss` (a one-element array of the loss' dtype, on the logits' device, so that no value
/// crosses to the host): `(softmax(logits[i]) - onehot(targets[i])) * dloss / counted`, in the
/// logits' dtype; rows whose target is `ignore` get zeros.
pub fn cross_entropy_backward(
    logits: &Array,
    targets: &Array,
    dloss: &Array,
    ignore: Option<u32>,
) -> Result<Array> {
    padded_cross_entropy_backward(logits, None, targets, dloss, ignore, None)
}

/// The gradient of [`padded_cross_entropy`] with respect to `logits`, scaled by `dloss` as
/// [`cross_entropy_backward`]'s is: `[N, W]` like the logits, zeros in the padding. `host` as
/// for [`padded_cross_entropy`].
pub fn padded_cross_entropy_backward(
    logits: &Array,
    classes: Option<usize>,
    targets: &Array,
    dloss: &Array,
    ignore: Option<u32>,
    host: Option<&[u32]>,
) -> Result<Array> {
    const OP: &str = "cross_entropy_backward";
    let spec = cross_entropy_spec(logits, classes, targets, ignore, host, OP)?;
    logits.device().check_same(dloss.device(), OP)?;
    if dloss.numel() != 1 || dloss.dtype() != loss_dtype(logits.dtype()) {
        return Err(Error::Argument {
            op: OP,
            detail: format!(
                "dloss must be one element of {}, got {} of {}",
                loss_dtype(logits.dtype()),
                dloss.shape(),
                dloss.dtype()
            ),
        });
    }
    let mut out = Array::uninit(logits.device(), logits.shape().clone(), logits.dtype(), OP)?;
    logits.device().backend().cross_entropy_backward(
        spec,
        dloss.buffer(),
        logits.buffer(),
        targets.buffer(),
        out.buffer_mut(OP)?,
    )?;
    Ok(out)
}
