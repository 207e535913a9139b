//! Reductions: sum, mean and max over an axis or over everything. Under autocast they run in f32.

use headroom_kernels::ops::elementwise as ew;
use headroom_kernels::ops::layout::broadcast_to;
use headroom_kernels::ops::reduce::{ReduceOp, reduce};
use headroom_kernels::{Array, Shape};

use super::rule;
use crate::error::Result;
use crate::recording::begin;
use crate::saved::saves;
use crate::tensor::Tensor;

impl Tensor {
    /// The sum over `axis`, dropping it.
    pub fn sum(&self, axis: usize) -> Result<Tensor> {
        self.reduce(ReduceOp::Sum, axis, false)
    }

    /// The mean over `axis`, dropping it.
    pub fn mean(&self, axis: usize) -> Result<Tensor> {
        self.reduce(ReduceOp::Mean, axis, false)
    }

    /// The maximum over `axis`, dropping it; the gradient is shared equally by the elements
    /// that reach the maximum (as `torch.amax`).
    pub fn max(&self, axis: usize) -> Result<Tensor> {
        self.reduce(ReduceOp::Max, axis, false)
    }

    /// The sum of every element, a scalar (shape `[]`).
    pub fn sum_all(&self) -> Result<Tensor> {
        self.reshape([self.numel()])?.sum(0)
    }

    /// The mean of every element, a scalar (shape `[]`).
    pub fn mean_all(&self) -> Result<Tensor> {
        self.reshape([self.numel()])?.mean(0)
    }

    /// Reduces over `axis` with `op`, keeping the axis with length 1 when `keep_dim`.
    pub fn reduce(&self, op: ReduceOp, axis: usize, keep_dim: bool) -> Result<Tensor> {
        let x = self.for_f32_op()?;
        let y = Tensor::output(reduce(op, x.array(), axis, keep_dim)?);
        if let Some(rec) = begin(&[&x]) {
            let in_shape = x.shape().clone();
            let mut kept = in_shape.dims().to_vec();
            kept[axis] = 1;
            let kept = Shape::new(&kept);
            // A maximum keeps its input and output, to find where it was; a sum of squares its input.
            let saved = match op {
                ReduceOp::Sum => Kept::Sum,
                ReduceOp::Mean => Kept::Mean,
                ReduceOp::SumSquares => Kept::SumSquares(x.array().clone()),
                ReduceOp::Max => Kept::Max(x.array().clone(), y.array().reshape(kept.clone())?),
            };
            let account = match &saved {
                Kept::Sum | Kept::Mean => saves(&[]),
                Kept::SumSquares(x) => saves(&[x]),
                Kept::Max(x, y) => saves(&[x, y]),
            };
            let backward = rule(move |g, _| {
                let g = g.reshape(kept)?;
                let dx = match saved {
                    Kept::Sum => broadcast_to(&g, in_shape)?,
                    Kept::Mean => {
                        let n = in_shape.dims()[axis].max(1) as f64;
                        broadcast_to(&ew::scale(&g, 1.0 / n)?, in_shape)?
                    }
                    Kept::Max(x, y) => max_grad(&x, &y, &g, axis)?,
                    Kept::SumSquares(x) => ew::mul(&ew::scale(&x, 2.0)?, &g)?,
                };
                Ok(vec![Some(dx)])
            });
            rec.finish(op.name(), &[&y], account, backward);
        }
        Ok(y)
    }
}

/// What a reduction's backward rule keeps.
enum Kept {
    Sum,
    Mean,
    /// The input.
    SumSquares(Array),
    /// The input, and the output with the reduced axis kept.
    Max(Array, Array),
}

/// The gradient of a maximum over `axis`: `g` (axis kept) spread equally over the elements of
/// `x` equal to the maximum `y` (axis kept).
fn max_grad(x: &Array, y: &Array, g: &Array, axis: usize) -> Result<Array> {
    let mask = ew::equal(x, y)?;
    let ties = reduce(ReduceOp::Sum, &mask, axis, true)?;
    Ok(ew::mul(&mask, &ew::div(g, &ties)?)?)
}
