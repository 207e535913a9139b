//! What a backend runs for layout changes: strided gathers into contiguous memory, and
//! concatenation.

use crate::buffer::Buffer;
use crate::error::Result;

/// The kernels of this family that a backend runs.
pub trait LayoutKernels {
    /// Fills `out`, contiguous of shape `view.dims`, from `x` (same dtype, any): the element at
    /// index `(i_0, ..., i_n)` of `out` is `x[view.offset + sum(i_d * view.strides[d])]`. A
    /// permutation reorders `x`'s strides, a broadcast gives stride 0 to the axes it repeats, a
    /// slice starts at an offset.
    fn gather_strided(&self, x: &Buffer, view: Strided<'_>, out: &mut Buffer) -> Result<()>;

    /// Concatenates `pieces` (one dtype) into `out` along an axis: every piece and `out` are
    /// seen as `outer` rows, piece `p`'s rows `widths[p]` elements long and `out`'s rows their
    /// sum, and row `r` of `out` is row `r` of every piece, in order.
    fn concat(
        &self,
        pieces: &[&Buffer],
        widths: &[usize],
        outer: usize,
        out: &mut Buffer,
    ) -> Result<()>;
}

/// Where the elements of a contiguous array of shape `dims` sit in another buffer: element
/// `(i_0, ..., i_n)` at `offset + sum(i_d * strides[d])`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Strided<'a> {
    /// Position of element `(0, ..., 0)`.
    pub offset: usize,
    /// The dimensions walked.
    pub dims: &'a [usize],
    /// The step in the buffer for each dimension.
    pub strides: &'a [usize],
}
