//! Softmax, log-softmax and layer normalization over the last axis. Under autocast they run in
//! f32.

use headroom_kernels::ops::norm;

use super::{promoted, rule};
use crate::error::Result;
use crate::recording::begin;
use crate::tensor::Tensor;

impl Tensor {
    /// Softmax over the last axis, numerically stable; keeps its output.
    pub fn softmax(&self) -> Result<Tensor> {
        let x = self.for_f32_op()?;
        let y = Tensor::output(norm::softmax(x.array())?);
        if let Some(rec) = begin(&[&x]) {
            let out = y.array().clone();
            rec.finish(
                "softmax",
                &[&y],
                rule(move |g, _| Ok(vec![Some(norm::softmax_backward(&out, g)?)])),
            );
        }
        Ok(y)
    }

    /// Log-softmax over the last axis, numerically stable; keeps its output.
    pub fn log_softmax(&self) -> Result<Tensor> {
        let x = self.for_f32_op()?;
        let y = Tensor::output(norm::log_softmax(x.array())?);
        if let Some(rec) = begin(&[&x]) {
            let out = y.array().clone();
            rec.finish(
                "log_softmax",
                &[&y],
                rule(move |g, _| Ok(vec![Some(norm::log_softmax_backward(&out, g)?)])),
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
        let y = Tensor::output(norm::attention_softmax(x.array(), scale, causal)?);
        if let Some(rec) = begin(&[&x]) {
            let out = y.array().clone();
            rec.finish(
                "attention_softmax",
                &[&y],
                rule(move |g, _| {
                    Ok(vec![Some(norm::attention_softmax_backward(
                        &out, g, scale, causal,
                    )?)])
                }),
            );
        }
        Ok(y)
    }

    /// Layer normalization over the last axis (of length `d`) with scale `gamma` and shift
    /// `beta` (`[d]`); `eps` is added to the variance. Keeps its input, `gamma` and the per-row
    /// mean and reciprocal deviation.
    pub fn layer_norm(&self, gamma: &Tensor, beta: &Tensor, eps: f64) -> Result<Tensor> {
        let x = self.for_f32_op()?;
        let dtype = promoted(promoted(x.dtype(), gamma.dtype()), beta.dtype());
        let (x, gamma, beta) = (x.cast(dtype)?, gamma.cast(dtype)?, beta.cast(dtype)?);
        let out = norm::layer_norm(x.array(), gamma.array(), beta.array(), eps)?;
        let y = Tensor::output(out.y);
        if let Some(rec) = begin(&[&x, &gamma, &beta]) {
            let (xs, gs) = (x.array().clone(), gamma.array().clone());
            let (mean, rstd) = (out.mean, out.rstd);
            let backward = rule(move |g, needs| {
                let grads = norm::layer_norm_backward(&xs, &gs, &mean, &rstd, g)?;
                Ok(vec![
                    needs[0].then_some(grads.dx),
                    needs[1].then_some(grads.dgamma),
                    needs[2].then_some(grads.dbeta),
                ])
            });
            rec.finish("layer_norm", &[&y], backward);
        }
        Ok(y)
    }
}
