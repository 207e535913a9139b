//! The fused cross-entropy loss. Under autocast it runs in f32.

use headroom_kernels::ops::loss;

use super::rule;
use crate::error::Result;
use crate::recording::begin;
use crate::saved::saves;
use crate::tensor::Tensor;

impl Tensor {
    /// The mean cross-entropy of these logits (`[N, C]`) against class `targets` (`[N]`, U32),
    /// over the rows whose target is not `ignore`: a scalar, f32 (f64 for f64 logits). Fused
    /// and stable; keeps the logits and targets, and recomputes the softmax in the backward pass.
    pub fn cross_entropy(&self, targets: &Tensor, ignore: Option<u32>) -> Result<Tensor> {
        let logits = self.for_f32_op()?;
        let y = Tensor::output(loss::cross_entropy(
            logits.array(),
            targets.array(),
            ignore,
        )?);
        if let Some(rec) = begin(&[&logits]) {
            let (x, t) = (logits.array().clone(), targets.array().clone());
            rec.finish(
                "cross_entropy",
                &[&y],
                saves(&[&x, &t]),
                rule(move |g, _| Ok(vec![Some(loss::cross_entropy_backward(&x, &t, g, ignore)?)])),
            );
        }
        Ok(y)
    }
}
