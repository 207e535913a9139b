//! Attention heads merged, then a linear layer, keeping the heads as attention gave them.

use headroom_kernels::Array;
use headroom_kernels::ops::layout;

use super::super::{rule, when};
use super::Linear;
use crate::error::{Error, Result};
use crate::recording::begin;
use crate::saved::saves;
use crate::tensor::Tensor;

impl Tensor {
    /// `merge(self) @ weight^T (+ bias)`, where `self` is attention's output, `[B, heads, T,
    /// D]`, and `merge` lays it out as `[B, T, heads * D]` (an attention's output projection).
    /// It keeps the heads, which attention keeps for its own backward pass anyway, and merges
    /// them again in the backward pass, instead of keeping a merged copy.
    pub fn merged_heads_linear(&self, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        let &[b, h, t, d] = self.dims() else {
            return Err(Error::Argument {
                op: "merged_heads_linear",
                detail: format!(
                    "heads of shape {}: expected [batch, heads, time, head]",
                    self.shape()
                ),
            });
        };
        let merge = move |heads: &Array| -> Result<Array> {
            Ok(layout::permute(heads, &[0, 2, 1, 3])?.reshape([b, t, h * d])?)
        };
        let linear = Linear::new(weight, bias)?;
        let y = linear.forward(merge(self.array())?)?;
        if let Some(rec) = begin(&linear.inputs(&[self])) {
            let (heads, layer) = (self.array().clone(), linear.saved());
            let saved = saves(&[&heads, &layer.w]);
            let backward = rule(move |g, needs| {
                let (dmerged, layer_grads) = layer.grads(merge(&heads)?, g, needs)?;
                drop(heads);
                let dheads = when(needs[0], || {
                    let dmerged = dmerged.reshape([b, t, h, d])?;
                    Ok(layout::permute(&dmerged, &[0, 2, 1, 3])?)
                })?;
                let mut grads = vec![dheads];
                grads.extend(layer_grads);
                Ok(grads)
            });
            rec.finish("merged_heads_linear", &[&y], saved, backward);
        }
        Ok(y)
    }
}
