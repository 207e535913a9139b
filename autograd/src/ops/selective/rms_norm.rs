//! RMS norm, then one or more linear layers, keeping the norm's input and statistic.

use headroom_kernels::ops::elementwise::{self as ew, BinaryOp};
use headroom_kernels::ops::norm;

use super::super::{promoted, rule_many};
use super::{Linear, in_dtype};
use crate::error::Result;
use crate::recording::begin;
use crate::saved::saves;
use crate::tensor::Tensor;

impl Tensor {
    /// `rms_norm(self, gamma, eps) @ weight^T (+ bias)` (a Llama block's attention's query,
    /// key and value projection), keeping the norm's input and per-row reciprocal root mean
    /// square but not its output, which the backward pass computes again.
    pub fn rms_norm_linear(
        &self,
        norm: (&Tensor, f64),
        weight: &Tensor,
        bias: Option<&Tensor>,
    ) -> Result<Tensor> {
        let mut ys = self.rms_norm_linears(norm, &[(weight, bias)])?;
        Ok(ys.remove(0))
    }

    /// [`rms_norm_linear`](Self::rms_norm_linear) for each `(weight, bias)` of `layers`, one
    /// normalized input feeding them all (a SwiGLU MLP's gate and up): the norm's output is
    /// kept for none of them. Its gradient is the sum of the products' gradients, formed in
    /// the products' dtype as the ops apart form it.
    pub fn rms_norm_linears(
        &self,
        (gamma, eps): (&Tensor, f64),
        layers: &[(&Tensor, Option<&Tensor>)],
    ) -> Result<Vec<Tensor>> {
        let x = self.for_f32_op()?;
        let dtype = promoted(x.dtype(), gamma.dtype());
        let (x, gamma) = (x.cast(dtype)?, gamma.cast(dtype)?);
        let linears = layers
            .iter()
            .map(|&(w, b)| Linear::new(w, b))
            .collect::<Result<Vec<_>>>()?;
        let Some(first) = linears.first() else {
            return Ok(Vec::new());
        };
        let normed = norm::rms_norm(x.array(), gamma.array(), eps)?;
        let rstd = normed.rstd;
        // Cast once for all the products (under autocast), as the ops apart cast the norm's
        // output once.
        let operands = vec![in_dtype(&normed.y, first.w.dtype())?; linears.len()];
        drop(normed.y);
        let ys = linears
            .iter()
            .zip(operands)
            .map(|(linear, operand)| linear.forward(operand))
            .collect::<Result<Vec<_>>>()?;
        let mut inputs = vec![&x, &gamma];
        for linear in &linears {
            inputs = linear.inputs(&inputs);
        }
        if let Some(rec) = begin(&inputs) {
            let (xs, gs) = (x.array().clone(), gamma.array().clone());
            let layers: Vec<_> = linears.iter().map(Linear::saved).collect();
            let mut kept = vec![&xs, &gs, &rstd];
            kept.extend(layers.iter().map(|layer| &layer.w));
            let saved = saves(&kept);
            let backward = rule_many(move |outputs, needs| {
                let normed = norm::rms_norm(&xs, &gs, eps)?.y;
                let normed_dtype = normed.dtype();
                let operands = vec![in_dtype(&normed, layers[0].w.dtype())?; layers.len()];
                drop(normed);
                let mut grads = vec![None, None];
                let mut dnormed = None;
                for ((layer, g), operand) in layers.iter().zip(outputs).zip(operands) {
                    let end = grads.len() + 1 + usize::from(layer.bias.is_some());
                    let Some(g) = g else {
                        grads.resize(end, None);
                        continue;
                    };
                    let (d, layer_grads) = layer.grads(operand, g, &needs[..end])?;
                    dnormed = Some(match dnormed {
                        None => d,
                        Some(sum) => ew::binary(BinaryOp::Add, &sum, &d)?,
                    });
                    grads.extend(layer_grads);
                }
                if let Some(dnormed) = dnormed {
                    let dnormed = in_dtype(&dnormed, normed_dtype)?;
                    let n = norm::rms_norm_backward(&xs, &gs, &rstd, &dnormed)?;
                    grads[0] = needs[0].then_some(n.dx);
                    grads[1] = needs[1].then_some(n.dgamma);
                }
                Ok(grads)
            });
            let outputs: Vec<&Tensor> = ys.iter().collect();
            rec.finish("rms_norm_linear", &outputs, saved, backward);
        }
        Ok(ys)
    }
}
