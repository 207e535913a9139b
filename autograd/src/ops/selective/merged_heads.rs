//! Attention heads merged, then one or more linear layers, keeping the heads as attention gave
//! them.

use headroom_kernels::Array;
use headroom_kernels::ops::layout;

use super::super::{rule_many, when};
use super::{LinearSaved, LinearWeight, inputs_of, layers_of, shared_operand_grads};
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
        let mut ys = self.merged_heads_linears(&[(weight, bias)])?;
        Ok(ys.remove(0))
    }

    /// [`merged_heads_linear`](Self::merged_heads_linear) for each `(weight, bias)` of
    /// `layers` (an output projection and its adapter's first product; a weight a tensor or
    /// stored quantized, [`LinearWeight`]).
    pub fn merged_heads_linears<'a, W: Copy + Into<LinearWeight<'a>>>(
        &self,
        layers: &[(W, Option<&'a Tensor>)],
    ) -> Result<Vec<Tensor>> {
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
        let linears = layers_of(layers)?;
        let merged = merge(self.array())?;
        let ys = linears
            .iter()
            .map(|linear| linear.forward(merged.clone()))
            .collect::<Result<Vec<_>>>()?;
        drop(merged);
        if let Some(rec) = begin(&inputs_of(&[self], &linears)) {
            let heads = self.array().clone();
            let layers: Vec<_> = linears.iter().map(|l| l.saved()).collect();
            let mut kept = vec![&heads];
            kept.extend(layers.iter().flat_map(LinearSaved::arrays));
            let saved = saves(&kept);
            let backward = rule_many(move |outputs, needs| {
                let merged = merge(&heads)?;
                drop(heads);
                let (dmerged, layer_grads) =
                    shared_operand_grads(&layers, merged, outputs, needs, 1)?;
                let dheads = match dmerged {
                    Some(dmerged) => when(needs[0], || {
                        let dmerged = dmerged.reshape([b, t, h, d])?;
                        Ok(layout::permute(&dmerged, &[0, 2, 1, 3])?)
                    })?,
                    None => None,
                };
                let mut grads = vec![dheads];
                grads.extend(layer_grads);
                Ok(grads)
            });
            let outputs: Vec<&Tensor> = ys.iter().collect();
            rec.finish("merged_heads_linear", &outputs, saved, backward);
        }
        Ok(ys)
    }
}
