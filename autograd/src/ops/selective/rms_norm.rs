//! RMS norm, then one or more linear layers, keeping the norm's input and statistic.

use headroom_kernels::ops::elementwise::{self as ew, BinaryOp};
use headroom_kernels::ops::norm;
use headroom_kernels::{Array, DType};

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
        let (x, gamma) = rms_inputs(self, gamma)?;
        let linears = layers
            .iter()
            .map(|&(w, b)| Linear::new(w, b))
            .collect::<Result<Vec<_>>>()?;
        let Some(first) = linears.first() else {
            return Ok(Vec::new());
        };
        // Cast once for all the products (under autocast), as the ops apart cast the norm's
        // output once.
        let (norm, operand) = RecomputedRms::forward(&x, &gamma, eps, first.w.dtype())?;
        let operands = vec![operand; linears.len()];
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
            let layers: Vec<_> = linears.iter().map(Linear::saved).collect();
            let mut kept = norm.kept().to_vec();
            kept.extend(layers.iter().map(|layer| &layer.w));
            let saved = saves(&kept);
            let backward = rule_many(move |outputs, needs| {
                let operands = vec![norm.output(layers[0].w.dtype())?; layers.len()];
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
                    [grads[0], grads[1]] = norm.grads(&dnormed, needs)?;
                }
                Ok(grads)
            });
            let outputs: Vec<&Tensor> = ys.iter().collect();
            rec.finish("rms_norm_linear", &outputs, saved, backward);
        }
        Ok(ys)
    }
}

/// An RMS norm's input and scale in the one dtype the norm computes in (f32 under autocast),
/// as the ops that recompute the norm track them.
pub(super) fn rms_inputs(x: &Tensor, gamma: &Tensor) -> Result<(Tensor, Tensor)> {
    let x = x.for_f32_op()?;
    let dtype = promoted(x.dtype(), gamma.dtype());
    Ok((x.cast(dtype)?, gamma.cast(dtype)?))
}

/// An RMS norm whose output only feeds products and is computed again in the backward pass
/// ([`Tensor::rms_norm_linears`], [`Tensor::rms_norm_swiglu`]): what its backward rule keeps.
pub(super) struct RecomputedRms {
    x: Array,
    gamma: Array,
    /// Each row's reciprocal root mean square.
    rstd: Array,
    eps: f64,
}

impl RecomputedRms {
    /// The norm of `x` by `gamma` (as [`rms_inputs`] gives them), and its output cast to
    /// `dtype`, the products'.
    pub(super) fn forward(
        x: &Tensor,
        gamma: &Tensor,
        eps: f64,
        dtype: DType,
    ) -> Result<(Self, Array)> {
        let normed = norm::rms_norm(x.array(), gamma.array(), eps)?;
        let kept = Self {
            x: x.array().clone(),
            gamma: gamma.array().clone(),
            rstd: normed.rstd,
            eps,
        };
        Ok((kept, in_dtype(&normed.y, dtype)?))
    }

    /// The arrays it holds, for the tape's account.
    pub(super) fn kept(&self) -> [&Array; 3] {
        [&self.x, &self.gamma, &self.rstd]
    }

    /// The norm's output again, cast to `dtype`.
    pub(super) fn output(&self, dtype: DType) -> Result<Array> {
        in_dtype(&norm::rms_norm(&self.x, &self.gamma, self.eps)?.y, dtype)
    }

    /// The gradients of the input and of gamma, where `needs[0]` and `needs[1]` ask for them,
    /// from the output's gradient `doutput` (in the products' dtype: cast back here).
    pub(super) fn grads(&self, doutput: &Array, needs: &[bool]) -> Result<[Option<Array>; 2]> {
        let doutput = in_dtype(doutput, self.x.dtype())?;
        let n = norm::rms_norm_backward(&self.x, &self.gamma, &self.rstd, &doutput)?;
        Ok([needs[0].then_some(n.dx), needs[1].then_some(n.dgamma)])
    }
}
