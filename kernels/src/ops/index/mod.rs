//! Embedding gather and scatter-add, fused cross-entropy, causal masking.
//!
//! Index operands (token ids, class targets) are [`DType::U32`] arrays. An index out of its
//! range is an [`Error::Argument`] found by the kernel (the meta device holds no data, so it
//! cannot check index values); the output allocated for the call is then dropped.

mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
mod grouping;
mod meta;

pub use crate::backend::index::{
    CausalMaskSpec, CrossEntropySpec, EmbeddingSpec, IndexKernels, loss_dtype,
};

use crate::array::Array;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::Shape;

/// Fails with [`Error::DType`] unless `a` holds indices (U32).
fn check_indices(a: &Array, op: &'static str) -> Result<()> {
    if a.dtype() == DType::U32 {
        Ok(())
    } else {
        Err(Error::DType {
            op,
            expected: DType::U32.to_string(),
            got: a.dtype(),
        })
    }
}

/// Looks up rows of `table` (`[V, D]`, float) by `ids` (any shape, U32); the result has shape
/// `ids.shape + [D]`. An id `>= V` is an [`Error::Argument`].
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType};
/// use headroom_kernels::ops::index::embedding;
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let table = Array::from_f64(&cpu, [3, 2], DType::F32, &[0., 1., 2., 3., 4., 5.])?;
/// let ids = Array::from_host(&cpu, [2], &[2u32, 0])?;
/// assert_eq!(embedding(&table, &ids)?.to_f64()?, [4., 5., 0., 1.]);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn embedding(table: &Array, ids: &Array) -> Result<Array> {
    const OP: &str = "embedding";
    table.check_float(OP)?;
    check_indices(ids, OP)?;
    table.device().check_same(ids.device(), OP)?;
    let &[vocab, dim] = table.shape().dims() else {
        return Err(Error::Shape {
            op: OP,
            detail: format!("the table {} must be [vocab, dim]", table.shape()),
        });
    };
    let mut dims = ids.shape().dims().to_vec();
    dims.push(dim);
    let mut out = Array::uninit(table.device(), Shape::new(&dims), table.dtype(), OP)?;
    let spec = EmbeddingSpec { vocab, dim };
    table
        .device()
        .backend()
        .embedding(spec, table.buffer(), ids.buffer(), out.buffer_mut(OP)?)?;
    Ok(out)
}

/// The gradient of [`embedding`] with respect to its table: the rows of `dy`
/// (`ids.shape + [D]`, float) summed into a zeroed `[vocab, D]` table of `dy`'s dtype at the
/// rows their ids name (repeated ids accumulate). An id `>= vocab` is an [`Error::Argument`].
pub fn embedding_backward(ids: &Array, dy: &Array, vocab: usize) -> Result<Array> {
    const OP: &str = "embedding_backward";
    check_indices(ids, OP)?;
    dy.check_float(OP)?;
    ids.device().check_same(dy.device(), OP)?;
    let (ids_dims, dy_dims) = (ids.shape().dims(), dy.shape().dims());
    let dim = match dy_dims.split_last() {
        Some((&dim, lead)) if lead == ids_dims => dim,
        _ => {
            return Err(Error::Shape {
                op: OP,
                detail: format!(
                    "dy {} must be the ids' shape {} and one more dimension",
                    dy.shape(),
                    ids.shape()
                ),
            });
        }
    };
    let mut out = Array::uninit(dy.device(), Shape::new(&[vocab, dim]), dy.dtype(), OP)?;
    let spec = EmbeddingSpec { vocab, dim };
    dy.device().backend().embedding_backward(
        spec,
        ids.buffer(),
        dy.buffer(),
        out.buffer_mut(OP)?,
    )?;
    Ok(out)
}

/// Checks the operands of a cross-entropy and returns their geometry.
fn cross_entropy_spec(
    logits: &Array,
    targets: &Array,
    ignore: Option<u32>,
    op: &'static str,
) -> Result<CrossEntropySpec> {
    logits.check_float(op)?;
    check_indices(targets, op)?;
    logits.device().check_same(targets.device(), op)?;
    match (logits.shape().dims(), targets.shape().dims()) {
        (&[rows, classes], &[n]) if n == rows && rows > 0 => Ok(CrossEntropySpec {
            rows,
            classes,
            ignore,
        }),
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
/// use headroom_kernels::{Array, Device, DeviceConfig, DType, ops::index::cross_entropy};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let logits = Array::from_f64(&cpu, [2, 2], DType::F32, &[0., 0., 5., -5.])?;
/// let targets = Array::from_host(&cpu, [2], &[1u32, 99])?;
/// let loss = cross_entropy(&logits, &targets, Some(99))?; // the second row is ignored
/// assert!((loss.to_f64()?[0] - 2f64.ln()).abs() < 1e-6);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn cross_entropy(logits: &Array, targets: &Array, ignore: Option<u32>) -> Result<Array> {
    const OP: &str = "cross_entropy";
    let spec = cross_entropy_spec(logits, targets, ignore, OP)?;
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
    const OP: &str = "cross_entropy_backward";
    let spec = cross_entropy_spec(logits, targets, ignore, OP)?;
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

/// A copy of `scores` (`[..., T, T]`, float) with every element `(i, j)` where `j > i` (the
/// future, in attention) set to `fill`: `f64::NEG_INFINITY` before a softmax, 0 on gradients.
pub fn causal_mask(scores: &Array, fill: f64) -> Result<Array> {
    const OP: &str = "causal_mask";
    scores.check_float(OP)?;
    let dims = scores.shape().dims();
    let size = match dims {
        &[.., rows, cols] if rows == cols => rows,
        _ => {
            return Err(Error::Shape {
                op: OP,
                detail: format!("scores {} must end in two equal dimensions", scores.shape()),
            });
        }
    };
    let spec = CausalMaskSpec {
        matrices: dims[..dims.len() - 2].iter().product(),
        size,
    };
    let mut out = Array::uninit(scores.device(), scores.shape().clone(), scores.dtype(), OP)?;
    scores
        .device()
        .backend()
        .causal_mask(spec, fill, scores.buffer(), out.buffer_mut(OP)?)?;
    Ok(out)
}
