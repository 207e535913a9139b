//! Reshapes (free views), and permutations, broadcasts, slices and concatenation (copies into
//! contiguous memory). None keeps any data for its backward pass.

use headroom_kernels::ops::layout;
use headroom_kernels::{Array, Shape};

use super::{reduce_to, rule, rule_many};
use crate::error::Result;
use crate::recording::begin;
use crate::saved::saves;
use crate::tensor::Tensor;

impl Tensor {
    /// The same data under another shape with as many elements (a view: no copy).
    pub fn reshape(&self, shape: impl Into<Shape>) -> Result<Tensor> {
        let y = Tensor::output(self.array().reshape(shape)?);
        if let Some(rec) = begin(&[self]) {
            let from = self.shape().clone();
            rec.finish(
                "reshape",
                &[&y],
                saves(&[]),
                rule(move |g, _| Ok(vec![Some(g.reshape(from)?)])),
            );
        }
        Ok(y)
    }

    /// Axes reordered: axis `d` of the result is axis `axes[d]` of this tensor (a copy).
    pub fn permute(&self, axes: &[usize]) -> Result<Tensor> {
        let y = Tensor::output(layout::permute(self.array(), axes)?);
        if let Some(rec) = begin(&[self]) {
            let mut inverse = vec![0; axes.len()];
            for (d, &a) in axes.iter().enumerate() {
                inverse[a] = d;
            }
            rec.finish(
                "permute",
                &[&y],
                saves(&[]),
                rule(move |g, _| Ok(vec![Some(layout::permute(g, &inverse)?)])),
            );
        }
        Ok(y)
    }

    /// Axes `a` and `b` swapped (a copy).
    pub fn transpose(&self, a: usize, b: usize) -> Result<Tensor> {
        let y = Tensor::output(layout::transpose(self.array(), a, b)?);
        if let Some(rec) = begin(&[self]) {
            rec.finish(
                "transpose",
                &[&y],
                saves(&[]),
                rule(move |g, _| Ok(vec![Some(layout::transpose(g, a, b)?)])),
            );
        }
        Ok(y)
    }

    /// Repeated along 1-sized or missing leading axes to `shape` (a copy); the gradient sums
    /// over the repeats.
    pub fn broadcast_to(&self, shape: impl Into<Shape>) -> Result<Tensor> {
        let y = Tensor::output(layout::broadcast_to(self.array(), shape)?);
        if let Some(rec) = begin(&[self]) {
            let from = self.shape().clone();
            rec.finish(
                "broadcast_to",
                &[&y],
                saves(&[]),
                rule(move |g, _| Ok(vec![Some(reduce_to(g, &from)?)])),
            );
        }
        Ok(y)
    }

    /// Cut along `axis` into consecutive pieces of `sizes` (copies); the gradient joins the
    /// pieces' gradients, with zeros for pieces that got none.
    pub fn split(&self, axis: usize, sizes: &[usize]) -> Result<Vec<Tensor>> {
        let pieces: Vec<Tensor> = layout::split(self.array(), axis, sizes)?
            .into_iter()
            .map(Tensor::output)
            .collect();
        if let Some(rec) = begin(&[self]) {
            let shapes: Vec<Shape> = pieces.iter().map(|p| p.shape().clone()).collect();
            let dtype = self.dtype();
            let device = self.device().clone();
            let backward = rule_many(move |grads, _| {
                let filled = grads
                    .iter()
                    .zip(&shapes)
                    .map(|(g, shape)| match g {
                        Some(g) => Ok(g.clone()),
                        None => Array::zeros(&device, shape.clone(), dtype),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let refs: Vec<&Array> = filled.iter().collect();
                Ok(vec![Some(layout::concat(&refs, axis)?)])
            });
            let outputs: Vec<&Tensor> = pieces.iter().collect();
            rec.finish("split", &outputs, saves(&[]), backward);
        }
        Ok(pieces)
    }

    /// `pieces` joined along `axis` (`torch.cat`); each piece's gradient is its slice.
    pub fn concat(pieces: &[&Tensor], axis: usize) -> Result<Tensor> {
        let arrays: Vec<&Array> = pieces.iter().map(|p| p.array()).collect();
        let y = Tensor::output(layout::concat(&arrays, axis)?);
        if let Some(rec) = begin(pieces) {
            let sizes: Vec<usize> = pieces.iter().map(|p| p.dims()[axis]).collect();
            let backward = rule(move |g, needs| {
                let parts = layout::split(g, axis, &sizes)?;
                Ok(parts
                    .into_iter()
                    .zip(needs)
                    .map(|(part, &need)| need.then_some(part))
                    .collect())
            });
            rec.finish("concat", &[&y], saves(&[]), backward);
        }
        Ok(y)
    }

    /// Elements `start..start + len` along `axis` (a copy; the tensor itself when that is all
    /// of it). The gradient is zero outside the slice.
    pub fn narrow(&self, axis: usize, start: usize, len: usize) -> Result<Tensor> {
        let length = self.dims().get(axis).copied();
        if start == 0 && Some(len) == length {
            return Ok(self.clone());
        }
        let y = Tensor::output(layout::narrow(self.array(), axis, start, len)?);
        if let Some(rec) = begin(&[self]) {
            let (shape, dtype, device) =
                (self.shape().clone(), self.dtype(), self.device().clone());
            let backward = rule(move |g, _| {
                let mut before = shape.dims().to_vec();
                let mut after = before.clone();
                before[axis] = start;
                after[axis] = shape.dims()[axis] - start - len;
                let before = Array::zeros(&device, before, dtype)?;
                let after = Array::zeros(&device, after, dtype)?;
                Ok(vec![Some(layout::concat(&[&before, g, &after], axis)?)])
            });
            rec.finish("narrow", &[&y], saves(&[]), backward);
        }
        Ok(y)
    }
}
