//! A Llama block's whole MLP (RMS norm, gate and up, SwiGLU, down), keeping the norm's input
//! and the gate alone.

use headroom_kernels::ops::elementwise::{self as ew, BinaryOp};
use headroom_kernels::ops::gemm;

use super::super::rule;
use super::Linear;
use super::rms_norm::{RecomputedRms, rms_inputs};
use crate::error::Result;
use crate::recording::begin;
use crate::saved::saves;
use crate::tensor::Tensor;

impl Tensor {
    /// `down(silu(n gate^T) * (n up^T)) ` with `n = rms_norm(self, gamma, eps)`, the three
    /// weights without biases: a Llama block's MLP. It keeps the norm's input, its statistic and the
    /// gate's product; the backward pass computes the norm's output again, and from it the up
    /// projection (one product more) and the SwiGLU. Beside [`Tensor::rms_norm_linears`] and
    /// [`Tensor::swiglu_linear`] it keeps one array of the MLP's width less, and gives the same
    /// values and gradients, bit for bit.
    pub fn rms_norm_swiglu(
        &self,
        (gamma, eps): (&Tensor, f64),
        [gate, up, down]: [&Tensor; 3],
    ) -> Result<Tensor> {
        let (x, gamma) = rms_inputs(self, gamma)?;
        let (gate, up, down) = (
            Linear::new(gate.into(), None)?,
            Linear::new(up.into(), None)?,
            Linear::new(down.into(), None)?,
        );
        let (norm, operand) = RecomputedRms::forward(&x, &gamma, eps, gate.dtype())?;
        let g = gate.forward(operand.clone())?;
        let u = up.forward(operand)?;
        let y = down.forward(ew::swiglu(g.array(), u.array())?)?;
        drop(u);
        let inputs = down.inputs(&up.inputs(&gate.inputs(&[&x, &gamma])));
        if let Some(rec) = begin(&inputs) {
            let gated = g.array().clone();
            let (gate, up, down) = (gate.saved(), up.saved(), down.saved());
            let [xs, gs, rstd] = norm.kept();
            let mut kept = vec![xs, gs, rstd, &gated];
            kept.extend([&gate, &up, &down].into_iter().flat_map(|l| l.arrays()));
            let saved = saves(&kept);
            let backward = rule(move |dy, needs| {
                let operand = norm.output(gate.dtype())?;
                // The inputs: x, gamma, then the gate's, the up's and the down's weights.
                let upped = gemm::matmul(&operand, &up.weight()?, false, true)?;
                let (dgated, down_grads) = down.grads(ew::swiglu(&gated, &upped)?, dy, needs)?;
                let d = ew::swiglu_backward(&gated, &upped, &dgated)?;
                drop((gated, upped, dgated));
                let (dn_gate, gate_grads) = gate.grads(operand.clone(), &d.dgate, &needs[..3])?;
                let (dn_up, up_grads) = up.grads(operand, &d.dup, &needs[..4])?;
                let dnormed = ew::binary(BinaryOp::Add, &dn_gate, &dn_up)?;
                drop((dn_gate, dn_up));
                let mut grads = norm.grads(&dnormed, needs)?.to_vec();
                grads.extend(gate_grads);
                grads.extend(up_grads);
                grads.extend(down_grads);
                Ok(grads)
            });
            rec.finish("rms_norm_swiglu", &[&y], saved, backward);
        }
        Ok(y)
    }
}
