//! What a backend runs for ops that index by integer ids (embedding lookups and their gradient)
//! and for the causal mask, and the check of ids against their range (which the loss kernels
//! make of their class targets too).

use std::ops::Range;

use crate::buffer::Buffer;
use crate::error::{Error, Result};

/// The geometry of an embedding lookup or its gradient.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmbeddingSpec {
    /// Rows of the table (valid ids are `0..vocab`).
    pub vocab: usize,
    /// Length of one table row.
    pub dim: usize,
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

    /// Zeroes `out` (`[rows.len(), dim]`, the table's rows `rows`) and adds row `p` of `dy`
    /// (`[ids.len(), dim]`) into the row of `ids[p]` for every `p` whose id lies in `rows`,
    /// deterministically: repeated ids accumulate in position order, a run too long for one
    /// task piece by piece (see `grouping`), in an order the ids alone fix. Fails with
    /// [`Error::Argument`] when any id is `>= vocab`, or when there are more ids than 32 bits
    /// count.
    fn embedding_backward(
        &self,
        spec: EmbeddingSpec,
        rows: Range<usize>,
        ids: &Buffer,
        dy: &Buffer,
        out: &mut Buffer,
    ) -> Result<()>;

    /// `out[b][i] = i - starts[b][i]` over document starts of `shape` (`[rows, len]`, U32
    /// both): each position within its document. Fails with [`Error::Argument`] where the
    /// starts are no layout of documents
    /// ([`check_starts`](crate::ops::documents::check_starts)).
    fn document_positions(
        &self,
        shape: (usize, usize),
        starts: &Buffer,
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

/// The positions within their documents of `starts` (`rows * len` values, checked).
pub(crate) fn positions_of(
    starts: &[u32],
    (rows, len): (usize, usize),
    op: &'static str,
) -> Result<Vec<u32>> {
    crate::ops::documents::check_starts(starts, (rows, len), op)?;
    let at = |(p, &start): (usize, &u32)| (p % len.max(1)) as u32 - start;
    Ok(starts.iter().enumerate().map(at).collect())
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
