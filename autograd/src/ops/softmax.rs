//! Softmax and log-softmax over the last axis, and attention's fused scale, mask and softmax.
//! Under autocast softmax and log-softmax run in f32.

use headroom_kernels::ops::softmax;

use super::rule;
use crate::error::Result;
use crate::recording::begin;
use crate::saved::saves;
use crate::tensor::Tensor;

impl Tensor {
    /// Softmax over the last axis, numerically stable; keeps its output.
    pub fn softmax(&self) -> Result<Tensor> {
        let x = self.for_f32_op()?;
        let y = Tensor::output(softmax::softmax(x.array())?);
        if let Some(rec) = begin(&[&x]) {
            let out = y.array().clone();
            rec.finish(
                "softmax",
                &[&y],
                saves(&[&out]),
                rule(move |g, _| Ok(vec![Some(softmax::softmax_backward(&out, g)?)])),
            );
        }
        Ok(y)
    }

    /// Log-softmax over the last axis, numerically stable; keeps its output.
    pub fn log_softmax(&self) -> Result<Tensor> {
        let x = self.for_f32_op()?;
        let y = Tensor::output(softmax::log_softmax(x.array())?);
        if let Some(rec) = begin(&[&x]) {
            let out = y.array().clone();
            rec.finish(
                "log_softmax",
                &[&y],
                saves(&[&out]),
                rule(move |g, _| Ok(vec![Some(softmax::log_softmax_backward(&out, g)?)])),
            );
        }
        Ok(y)
    }

    /// Attention weights in one pass: `softmax(mask(scale * self))` over the last axis, the mask
    /// (when `causal`) hiding the columns after each row's own. Keeps only its output.
    ///
    /// It computes in f32 whatever it stores. Under autocast it stores in its input's half type:
    /// its output is the operand of the next product (the weights applied to the values), which
    /// would be cast to that type anyway, so the weights are kept once, in half, as fused
    /// attention kernels keep them, not once in f32 and again in half.
    pub fn attention_softmax(&self, scale: f64, causal: bool) -> Result<Tensor> {
        let x = self.for_matmul()?;
        let y = Tensor::output(softmax::attention_softmax(x.array(), scale, causal)?);
        if let Some(rec) = begin(&[&x]) {
            let out = y.array().clone();
            rec.finish(
                "attention_softmax",
                &[&y],
                saves(&[&out]),
                rule(move |g, _| {
                    Ok(vec![Some(softmax::attention_softmax_backward(
                        &out, g, scale, causal,
                    )?)])
                }),
            );
        }
        Ok(y)
    }
}
