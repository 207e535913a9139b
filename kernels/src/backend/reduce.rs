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

/// Reductions over one axis.
pub trait ReduceKernels {
    /// Reduces `x`, seen as `[outer, axis, inner]`, over the middle axis into `out`
    /// (`[outer, inner]`).
    fn reduce(&self, op: ReduceOp, spec: ReduceSpec, x: &Buffer, out: &mut Buffer) -> Result<()>;
}
