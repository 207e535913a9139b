//! RMS norm, then a linear layer, keeping the norm's input and statistic.

use headroom_kernels::ops::norm;

use super::super::{promoted, rule};
use super::Linear;
use crate::error::Result;
use crate::recording::begin;
use crate::saved::saves;
use crate::tensor::Tensor;

impl Tensor {
    /// `rms_norm(self, gamma, eps) @ weight^T (+ bias)` (a Llama block's sublayer's first
    /// product: attention's query, key and value projections, the MLP's gate and up), keeping
    /// the norm's input and per-row reciprocal root mean square but not its output, which the
    /// backward pass computes again.
    pub fn rms_norm_linear(
        &self,
        (gamma, eps): (&Tensor, f64),
        weight: &Tensor,
        bias: Option<&Tensor>,
    ) -> Result<Tensor> {
        let x = self.for_f32_op()?;
        let dtype = promoted(x.dtype(), gamma.dtype());
        let (x, gamma) = (x.cast(dtype)?, gamma.cast(dtype)?);
        let linear = Linear::new(weight, bias)?;
        let normed = norm::rms_norm(x.array(), gamma.array(), eps)?;
        let rstd = normed.rstd;
        let y = linear.forward(normed.y)?;
        if let Some(rec) = begin(&linear.inputs(&[&x, &gamma])) {
            let (xs, gs, layer) = (x.array().clone(), gamma.array().clone(), linear.saved());
            let saved = saves(&[&xs, &gs, &layer.w, &rstd]);
            let backward = rule(move |g, needs| {
                let normed = norm::rms_norm(&xs, &gs, eps)?.y;
                let (dnormed, layer_grads) = layer.grads(normed, g, needs)?;
                let n = norm::rms_norm_backward(&xs, &gs, &rstd, &dnormed)?;
                let mut grads = vec![needs[0].then_some(n.dx), needs[1].then_some(n.dgamma)];
                grads.extend(layer_grads);
                Ok(grads)
            });
            rec.finish("rms_norm_linear", &[&y], saved, backward);
        }
        Ok(y)
    }
}
