//! Layer norm, then a linear layer, keeping the norm's input and statistics.

use headroom_kernels::ops::norm;

use super::super::{promoted, rule};
use super::Linear;
use crate::error::Result;
use crate::recording::begin;
use crate::saved::saves;
use crate::tensor::Tensor;

impl Tensor {
    /// `layer_norm(self, gamma, beta, eps) @ weight^T + bias` (a pre-norm sublayer's first
    /// product), keeping the norm's input and per-row statistics but not its output, which the
    /// backward pass computes again.
    pub fn layer_norm_linear(
        &self,
        (gamma, beta, eps): (&Tensor, &Tensor, f64),
        weight: &Tensor,
        bias: Option<&Tensor>,
    ) -> Result<Tensor> {
        let x = self.for_f32_op()?;
        let dtype = promoted(promoted(x.dtype(), gamma.dtype()), beta.dtype());
        let (x, gamma, beta) = (x.cast(dtype)?, gamma.cast(dtype)?, beta.cast(dtype)?);
        let linear = Linear::new(weight.into(), bias)?;
        let normed = norm::layer_norm(x.array(), gamma.array(), beta.array(), eps)?;
        let (mean, rstd) = (normed.mean, normed.rstd);
        let y = linear.forward(normed.y)?;
        if let Some(rec) = begin(&linear.inputs(&[&x, &gamma, &beta])) {
            let (xs, gs) = (x.array().clone(), gamma.array().clone());
            let bs = beta.array().clone();
            let layer = linear.saved();
            let mut kept = vec![&xs, &gs, &bs, &mean, &rstd];
            kept.extend(layer.arrays());
            let saved = saves(&kept);
            let backward = rule(move |g, needs| {
                let normed = norm::layer_norm(&xs, &gs, &bs, eps)?.y;
                let (dnormed, layer_grads) = layer.grads(normed, g, needs)?;
                let n = norm::layer_norm_backward(&xs, &gs, &mean, &rstd, &dnormed)?;
                let mut grads = vec![
                    needs[0].then_some(n.dx),
                    needs[1].then_some(n.dgamma),
                    needs[2].then_some(n.dbeta),
                ];
                grads.extend(layer_grads);
                Ok(grads)
            });
            rec.finish("layer_norm_linear", &[&y], saved, backward);
        }
        Ok(y)
    }
}
