//! Embedding lookup, fused cross-entropy and causal masking.

use headroom_kernels::ops::index;

use super::rule;
use crate::error::Result;
use crate::recording::begin;
use crate::tensor::Tensor;

impl Tensor {
    /// Rows of this table (`[V, D]`) picked by `ids` (U32, any shape): `ids.shape + [D]`. Keeps
    /// the ids; the gradient scatter-adds into a `[V, D]` table.
    pub fn embedding(&self, ids: &Tensor) -> Result<Tensor> {
        let y = Tensor::output(index::embedding(self.array(), ids.array())?);
        if let Some(rec) = begin(&[self]) {
            let ids = ids.array().clone();
            let vocab = self.dims()[0];
            rec.finish(
                "embedding",
                &[&y],
                rule(move |g, _| Ok(vec![Some(index::embedding_backward(&ids, g, vocab)?)])),
            );
        }
        Ok(y)
    }

    /// The mean cross-entropy of these logits (`[N, C]`) against class `targets` (`[N]`, U32),
    /// over the rows whose target is not `ignore`: a scalar, f32 (f64 for f64 logits). Fused
    /// and stable; keeps the logits and targets, and recomputes the softmax in the backward pass.
    pub fn cross_entropy(&self, targets: &Tensor, ignore: Option<u32>) -> Result<Tensor> {
        let logits = self.for_f32_op()?;
        let y = Tensor::output(index::cross_entropy(
            logits.array(),
            targets.array(),
            ignore,
        )?);
        if let Some(rec) = begin(&[&logits]) {
            let (x, t) = (logits.array().clone(), targets.array().clone());
            rec.finish(
                "cross_entropy",
                &[&y],
                rule(move |g, _| {
                    Ok(vec![Some(index::cross_entropy_backward(
                        &x, &t, g, ignore,
                    )?)])
                }),
            );
        }
        Ok(y)
    }

    /// These scores (`[..., T, T]`) with every element above the diagonal (the future) set to
    /// `fill`; the gradient is masked the same way (with zeros). Keeps nothing.
    pub fn causal_mask(&self, fill: f64) -> Result<Tensor> {
        let y = Tensor::output(index::causal_mask(self.array(), fill)?);
        if let Some(rec) = begin(&[self]) {
            rec.finish(
                "causal_mask",
                &[&y],
                rule(|g, _| Ok(vec![Some(index::causal_mask(g, 0.0)?)])),
            );
        }
        Ok(y)
    }
}
