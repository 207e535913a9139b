//! Embedding lookup and causal masking.

use headroom_kernels::ops::index;

use super::rule;
use crate::error::Result;
use crate::recording::begin;
use crate::saved::saves;
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
                saves(&[&ids]),
                rule(move |g, _| Ok(vec![Some(index::embedding_backward(&ids, g, vocab)?)])),
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
                saves(&[]),
                rule(|g, _| Ok(vec![Some(index::causal_mask(g, 0.0)?)])),
            );
        }
        Ok(y)
    }
}
