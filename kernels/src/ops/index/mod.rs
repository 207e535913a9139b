//! Embedding gather and scatter-add, causal masking, positions within packed documents.
//!
//! Ids are [`DType::U32`](crate::DType::U32) arrays. An id out of its range is an
//! [`Error::Argument`] found by the kernel (the meta device holds no data, so it cannot check
//! ids); the output allocated for the call is then dropped.

mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
mod grouping;
pub(crate) mod kernels;
mod meta;

pub use kernels::{CausalMaskSpec, EmbeddingSpec, IndexKernels};

use std::ops::Range;

use crate::array::Array;
use crate::error::{Error, Result};
use crate::shape::Shape;

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
    ids.check_indices(OP)?;
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
    embedding_backward_rows(ids, dy, vocab, 0..vocab)
}

/// The rows `rows` of [`embedding_backward`]'s table, `[rows.len(), D]`, without the rest:
/// the ids outside `rows` add nothing, and every id is still checked against `vocab`. A rank
/// whose shard of a table holds those rows forms their gradient from every rank's ids alone.
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType};
/// use headroom_kernels::ops::index::embedding_backward_rows;
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let ids = Array::from_host(&cpu, [3], &[3u32, 1, 3])?;
/// let dy = Array::from_f64(&cpu, [3, 1], DType::F32, &[1., 2., 4.])?;
/// assert_eq!(embedding_backward_rows(&ids, &dy, 4, 2..4)?.to_f64()?, [0., 5.]);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn embedding_backward_rows(
    ids: &Array,
    dy: &Array,
    vocab: usize,
    rows: Range<usize>,
) -> Result<Array> {
    const OP: &str = "embedding_backward";
    ids.check_indices(OP)?;
    dy.check_float(OP)?;
    ids.device().check_same(dy.device(), OP)?;
    if rows.start > rows.end || rows.end > vocab {
        return Err(Error::Argument {
            op: OP,
            detail: format!(
                "rows {}..{} of a table of {vocab} rows",
                rows.start, rows.end
            ),
        });
    }
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
    let shape = Shape::new(&[rows.len(), dim]);
    let mut out = Array::uninit(dy.device(), shape, dy.dtype(), OP)?;
    let spec = EmbeddingSpec { vocab, dim };
    dy.device().backend().embedding_backward(
        spec,
        rows,
        ids.buffer(),
        dy.buffer(),
        out.buffer_mut(OP)?,
    )?;
    Ok(out)
}

/// The position of each token within its document, `[batch, len]` U32, from the rows'
/// document starts (`[batch, len]` U32, [`crate::ops::documents`]): `i - starts[b][i]`, the
/// learned position a packed token reads. Starts that are no layout of documents are an
/// [`Error::Argument`] on every backend but meta (CUDA reads them back to check them).
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig};
/// use headroom_kernels::ops::index::document_positions;
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let starts = Array::from_host(&cpu, [1, 5], &[0u32, 0, 2, 2, 2])?;
/// assert_eq!(document_positions(&starts)?.to_host::<u32>()?, [0, 1, 0, 1, 2]);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn document_positions(starts: &Array) -> Result<Array> {
    const OP: &str = "document_positions";
    starts.check_indices(OP)?;
    let &[batch, len] = starts.shape().dims() else {
        return Err(Error::Shape {
            op: OP,
            detail: format!(
                "the document starts {} must be [batch, len]",
                starts.shape()
            ),
        });
    };
    let device = starts.device();
    let mut out = Array::uninit(device, starts.shape().clone(), starts.dtype(), OP)?;
    let out_buffer = out.buffer_mut(OP)?;
    device
        .backend()
        .document_positions((batch, len), starts.buffer(), out_buffer)?;
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
