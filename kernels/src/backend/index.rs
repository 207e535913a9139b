//! What a backend runs for ops that index by integer ids (embeddings, cross-entropy against class
//! targets) and for the causal mask, and the checks its kernels make of the ids.

use crate::buffer::Buffer;
use crate::dtype::DType;
use crate::error::{Error, Result};

/// The geometry of an embedding lookup or its gradient.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmbeddingSpec {
    /// Rows of the table (valid ids are `0..vocab`).
    pub vocab: usize,
    /// Length of one table row.
    pub dim: usize,
}

/// The geometry of a cross-entropy: `rows` rows of `classes` logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CrossEntropySpec {
    /// Number of rows (examples); at least 1.
    pub rows: usize,
    /// Number of classes per row (valid targets are `0..classes`).
    pub classes: usize,
    /// Rows whose target is this value count for nothing: no loss, no gradient, and not in the
    /// mean's denominator (PyTorch's `ignore_index`).
    pub ignore: Option<u32>,
}

/// The geometry of a causal mask: `matrices` square matrices of side `size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CausalMaskSpec {
    /// Product of the leading (batch) dimensions.
    pub matrices: usize,
    /// The side `T` of each `[T, T]` matrix.
    pub size: usize,
}

/// The kernels of this family that a backend runs.
pub trait IndexKernels {
    /// `out[p, :] = table[ids[p], :]` for every position `p` of `ids` (U32); `table` is
    /// `[vocab, dim]` and `out` `[ids.len(), dim]`, both of the same float dtype. Fails with
    /// [`Error::Argument`] when an id is `>= vocab`.
    fn embedding(
        &self,
        spec: EmbeddingSpec,
        table: &Buffer,
        ids: &Buffer,
        out: &mut Buffer,
    ) -> Result<()>;

    /// Zeroes `out` (`[vocab, dim]`) and adds row `p` of `dy` (`[ids.len(), dim]`) into row
    /// `ids[p]` for every `p`, deterministically: repeated ids accumulate in position order, a
    /// run too long for one task piece by piece (see `grouping`), in an order the ids alone
    /// fix. Fails with [`Error::Argument`] when an id is `>= vocab`, or when there are more ids
    /// than 32 bits count.
    fn embedding_backward(
        &self,
        spec: EmbeddingSpec,
        ids: &Buffer,
        dy: &Buffer,
        out: &mut Buffer,
    ) -> Result<()>;

    /// Writes into the one element of `out` (f32, or f64 for f64 logits) the mean over rows of
    /// `logsumexp(logits[i]) - logits[i, targets[i]]`. Fails with [`Error::Argument`] when a
    /// target is `>= classes`.
    fn cross_entropy(
        &self,
        spec: CrossEntropySpec,
        logits: &Buffer,
        targets: &Buffer,
        out: &mut Buffer,
    ) -> Result<()>;

    /// `out[i, j] = (softmax(logits[i])[j] - (j == targets[i])) * dloss / counted`, in the
    /// logits' dtype, where `dloss` is a one-element buffer of the loss' dtype and `counted` the
    /// rows not ignored; ignored rows get zeros. Fails with [`Error::Argument`] when a target is
    /// `>= classes` and not the ignored one.
    fn cross_entropy_backward(
        &self,
        spec: CrossEntropySpec,
        dloss: &Buffer,
        logits: &Buffer,
        targets: &Buffer,
        out: &mut Buffer,
    ) -> Result<()>;

    /// Copies `x` into `out` (same float dtype, `[matrices, size, size]`), with every element
    /// `(i, j)` where `j > i` set to `fill`.
    fn causal_mask(
        &self,
        spec: CausalMaskSpec,
        fill: f64,
        x: &Buffer,
        out: &mut Buffer,
    ) -> Result<()>;
}

/// The dtype of a cross-entropy of logits of `dtype`: f64 for f64, f32 otherwise.
pub fn loss_dtype(dtype: DType) -> DType {
    if dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

/// Fails with [`Error::Argument`] naming the first index `>= limit` (other than `ignore`), its
/// position and the limit.
pub(crate) fn check_range(
    op: &'static str,
    what: &str,
    indices: &[u32],
    limit: usize,
    ignore: Option<u32>,
) -> Result<()> {
    match indices
        .iter()
        .position(|&i| i as usize >= limit && Some(i) != ignore)
    {
        None => Ok(()),
        Some(p) => Err(Error::Argument {
            op,
            detail: format!(
                "{what} {} at position {p} is out of range for {limit} {}",
                indices[p],
                if what == "id" { "rows" } else { "classes" }
            ),
        }),
    }
}

/// Rows whose target is not the ignored one.
pub(crate) fn counted_rows(targets: &[u32], ignore: Option<u32>) -> usize {
    targets.iter().filter(|&&t| Some(t) != ignore).count()
}
