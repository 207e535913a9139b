//! What a backend runs for reductions over one axis.

use crate::buffer::Buffer;
use crate::error::Result;

/// How an axis is reduced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    /// The sum (accumulated in f64).
    Sum,
    /// The mean (accumulated in f64).
    Mean,
    /// The largest element (NaN wins).
    Max,
    /// The sum of squares (accumulated in f64): a squared norm, as for clipping gradients.
    SumSquares,
}

impl ReduceOp {
    /// The op's name, for errors.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Max => "max",
            ReduceOp::SumSquares => "sum_squares",
        }
    }
}

/// An array seen as `[outer, axis, inner]` around the reduced axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReduceSpec {
    /// Product of the dimensions before the axis.
    pub outer: usize,
    /// The axis' length.
    pub axis: usize,
    /// Product of the dimensions after the axis.
    pub inner: usize,
}

/// Elements of a contiguous axis (one row) that each part reduces at least.
pub const ROW_PART: usize = 16_384;
/// Positions of a strided axis (a column) that each part reduces at least.
pub const COLUMN_PART: usize = 256;
/// The most parts an axis is cut into.
pub const MOST_PARTS: usize = 1024;
/// Blocks of threads that fill a GPU by themselves: a reduction that has fewer is cut.
pub const FEW_BLOCKS: usize = 256;
/// The most partial results the parts leave (16 MiB of f64 pairs).
pub const MOST_PARTIALS: usize = 1 << 20;

impl ReduceSpec {
    /// How many parts the reduced axis is cut into on a GPU, so that a reduction with few
    /// outputs over a long axis still spreads over the whole device: a gradient's squared norm
    /// (one row of millions), a bias's gradient (a few hundred columns of thousands of rows).
    /// A block takes one row, or 32 neighbouring columns; when there are 256 such blocks or
    /// more, or the axis is shorter than two parts (16384 positions of a row, 256 of a
    /// column), the axis stays whole. Otherwise it is cut into parts of at least that many
    /// positions, at most 1024 of them, and at most as many as keep `outer * parts * inner`
    /// within 2^20: each part's partial result goes to a workspace of
    /// `2 * outer * parts * inner` f64 values, and a second pass combines each output's in
    /// order. A rule of the shape alone, so that planning allocates what the device does.
    pub fn parts(&self) -> usize {
        let (blocks, part) = if self.inner == 1 {
            (self.outer, ROW_PART)
        } else {
            (self.outer * self.inner.div_ceil(32), COLUMN_PART)
        };
        if blocks >= FEW_BLOCKS || self.axis < 2 * part {
            return 1;
        }
        let room = MOST_PARTIALS / (self.outer * self.inner).max(1);
        self.axis.div_ceil(part).min(MOST_PARTS).min(room).max(1)
    }
}

/// Reductions over one axis.
pub trait ReduceKernels {
    /// Reduces `x`, seen as `[outer, axis, inner]`, over the middle axis into `out`
    /// (`[outer, inner]`).
    fn reduce(&self, op: ReduceOp, spec: ReduceSpec, x: &Buffer, out: &mut Buffer) -> Result<()>;
}
