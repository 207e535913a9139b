//! Layer normalization and RMS normalization over the last axis. Under autocast they run in
//! f32.

use headroom_kernels::ops::norm;

use super::{promoted, rule};
use crate::error::Result;
use crate::recording::begin;
use crate::saved::saves;
use crate::tensor::Tensor;

impl Tensor {
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
            let saved = saves(&[&xs, &gs, &mean, &rstd]);
            let backward = rule(move |g, needs| {
                let grads = norm::layer_norm_backward(&xs, &gs, &mean, &rstd, g)?;
                Ok(vec![
                    needs[0].then_some(grads.dx),
                    needs[1].then_some(grads.dgamma),
                    needs[2].then_some(grads.dbeta),
                ])
            });
            rec.finish("layer_norm", &[&y], saved, backward);
        }
        Ok(y)
    }

    /// RMS normalization over the last axis (of length `d`) with scale `gamma` (`[d]`), as
    /// Llama's `LlamaRMSNorm`: `gamma * x / sqrt(mean(x^2) + eps)`. Keeps its input, `gamma` and
    /// the per-row reciprocal root mean square.
    pub fn rms_norm(&self, gamma: &Tensor, eps: f64) -> Result<Tensor> {
        let x = self.for_f32_op()?;
        let dtype = promoted(x.dtype(), gamma.dtype());
        let (x, gamma) = (x.cast(dtype)?, gamma.cast(dtype)?);
        let out = norm::rms_norm(x.array(), gamma.array(), eps)?;
        let y = Tensor::output(out.y);
        if let Some(rec) = begin(&[&x, &gamma]) {
            let (xs, gs, rstd) = (x.array().clone(), gamma.array().clone(), out.rstd);
            let saved = saves(&[&xs, &gs, &rstd]);
            let backward = rule(move |g, needs| {
                let grads = norm::rms_norm_backward(&xs, &gs, &rstd, g)?;
                Ok(vec![
                    needs[0].then_some(grads.dx),
                    needs[1].then_some(grads.dgamma),
                ])
            });
            rec.finish("rms_norm", &[&y], saved, backward);
        }
        Ok(y)
    }
}
