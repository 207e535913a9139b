//! A Llama block's whole MLP (RMS norm, gate and up, SwiGLU, down), keeping the norm's input
//! and the gate alone.

use headroom_kernels::ops::elementwise::{self as ew, BinaryOp};
use headroom_kernels::ops::{gemm, norm};

use super::super::{promoted, rule};
use super::{Linear, in_dtype};
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
        let x = self.for_f32_op()?;
        let dtype = promoted(x.dtype(), gamma.dtype());
        let (x, gamma) = (x.cast(dtype)?, gamma.cast(dtype)?);
        let (gate, up, down) = (
            Linear::new(gate, None)?,
            Linear::new(up, None)?,
            Linear::new(down, None)?,
        );
        let normed = norm::rms_norm(x.array(), gamma.array(), eps)?;
        let rstd = normed.rstd;
        let operand = in_dtype(&normed.y, gate.w.dtype())?;
        drop(normed.y);
        let g = gate.forward(operand.clone())?;
        let u = up.forward(operand)?;
        let y = down.forward(ew::swiglu(g.array(), u.array())?)?;
        drop(u);
        let inputs = down.inputs(&up.inputs(&gate.inputs(&[&x, &gamma])));
        if let Some(rec) = begin(&inputs) {
            let (xs, gs, gated) = (x.array().clone(), gamma.array().clone(), g.array().clone());
            let (gate, up, down) = (gate.saved(), up.saved(), down.saved());
            let saved = saves(&[&xs, &gs, &rstd, &gated, &gate.w, &up.w, &down.w]);
            let backward = rule(move |dy, needs| {
                let normed = norm::rms_norm(&xs, &gs, eps)?.y;
                let normed_dtype = normed.dtype();
                let operand = in_dtype(&normed, gate.w.dtype())?;
                drop(normed);
                // The inputs: x, gamma, then the gate's, the up's and the down's weights.
                let upped = gemm::matmul(&operand, &up.w, false, true)?;
                let (dgated, down_grads) = down.grads(ew::swiglu(&gated, &upped)?, dy, needs)?;
                let d = ew::swiglu_backward(&gated, &upped, &dgated)?;
                drop((gated, upped, dgated));
                let (dn_gate, gate_grads) = gate.grads(operand.clone(), &d.dgate, &needs[..3])?;
                let (dn_up, up_grads) = up.grads(operand, &d.dup, &needs[..4])?;
                let dnormed = ew::binary(BinaryOp::Add, &dn_gate, &dn_up)?;
                drop((dn_gate, dn_up));
                let dnormed = in_dtype(&dnormed, normed_dtype)?;
                let n = norm::rms_norm_backward(&xs, &gs, &rstd, &dnormed)?;
                let mut grads = vec![needs[0].then_some(n.dx), needs[1].then_some(n.dgamma)];
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
