//! RMS norm, then one or more linear layers, keeping the norm's input and statistic.

use headroom_kernels::ops::norm;
use headroom_kernels::{Array, DType};

use super::super::{promoted, rule_many};
use super::{
    Linear, LinearSaved, LinearWeight, in_dtype, inputs_of, layers_of, shared_operand_grads,
};
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

    /// [`rms_norm_linear`](Self::rms_norm_linear) for each `(weight, bias)` of `layers` (a
    /// weight a tensor or stored quantized, [`LinearWeight`]), one
    /// normalized input feeding them all (a SwiGLU MLP's gate and up): the norm's output is
    /// kept for none of them. Its gradient is the sum of the products' gradients, formed in
    /// the products' dtype as the ops apart form it.
    pub fn rms_norm_linears<'a, W: Copy + Into<LinearWeight<'a>>>(
        &self,
        (gamma, eps): (&Tensor, f64),
        layers: &[(W, Option<&'a Tensor>)],
    ) -> Result<Vec<Tensor>> {
        let (x, gamma) = rms_inputs(self, gamma)?;
        let linears = layers_of(layers)?;
        let Some(first) = linears.first() else {
            return Ok(Vec::new());
        };
        // Cast once for all the products (under autocast), as the ops apart cast the norm's
        // output once.
        let (norm, operand) = RecomputedRms::forward(&x, &gamma, eps, first.dtype())?;
        let operands = vec![operand; linears.len()];
        let ys = linears
            .iter()
            .zip(operands)
            .map(|(linear, operand)| linear.forward(operand))
            .collect::<Result<Vec<_>>>()?;
        if let Some(rec) = begin(&inputs_of(&[&x, &gamma], &linears)) {
            let layers: Vec<_> = linears.iter().map(Linear::saved).collect();
            let mut kept = norm.kept().to_vec();
            kept.extend(layers.iter().flat_map(LinearSaved::arrays));
            let saved = saves(&kept);
            let backward = rule_many(move |outputs, needs| {
                let operand = norm.output(layers[0].dtype())?;
                let (dnormed, layer_grads) =
                    shared_operand_grads(&layers, operand, outputs, needs, 2)?;
                let mut grads = match dnormed {
                    Some(dnormed) => norm.grads(&dnormed, needs)?.to_vec(),
                    None => vec![None, None],
                };
                grads.extend(layer_grads);
                Ok(grads)
            });
            let outputs: Vec<&Tensor> = ys.iter().collect();
            rec.finish("rms_norm_linear", &outputs, saved, backward);
        }
        Ok(ys)
    }
}

/// An RMS norm's input as it is, and its scale in the one dtype the norm computes in (f32
/// under autocast), as the ops that recompute the norm track them.
pub(super) fn rms_inputs(x: &Tensor, gamma: &Tensor) -> Result<(Tensor, Tensor)> {
    let dtype = promoted(x.for_f32_op()?.dtype(), gamma.dtype());
    Ok((x.clone(), gamma.cast(dtype)?))
}

/// An RMS norm whose output only feeds products and is computed again in the backward pass
/// ([`Tensor::rms_norm_linears`], [`Tensor::rms_norm_swiglu`]): what its backward rule keeps.
/// It keeps the input in its own dtype (a bf16 residual stream stays bf16) and computes in
/// `gamma`'s, as a cast and then the norm would, to the bit.
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
        let wide = in_dtype(x.array(), gamma.dtype())?;
        let normed = norm::rms_norm(&wide, gamma.array(), eps)?;
        drop(wide);
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
        let wide = in_dtype(&self.x, self.gamma.dtype())?;
        in_dtype(&norm::rms_norm(&wide, &self.gamma, self.eps)?.y, dtype)
    }

    /// The gradients of the input (in its dtype) and of gamma, where `needs[0]` and
    /// `needs[1]` ask for them, from the output's gradient `doutput` (in the products' dtype:
    /// cast back here).
    pub(super) fn grads(&self, doutput: &Array, needs: &[bool]) -> Result<[Option<Array>; 2]> {
        let dtype = self.gamma.dtype();
        let doutput = in_dtype(doutput, dtype)?;
        let wide = in_dtype(&self.x, dtype)?;
        let n = norm::rms_norm_backward(&wide, &self.gamma, &self.rstd, &doutput)?;
        drop(wide);
        let dx = match needs[0] {
            true => Some(in_dtype(&n.dx, self.x.dtype())?),
            false => None,
        };
        Ok([dx, needs[1].then_some(n.dgamma)])
    }
}
