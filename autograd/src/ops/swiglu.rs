//! SwiGLU, the gate of the Llama family's MLP: `silu(gate) * up`, fused forward and backward.

use headroom_kernels::ops::elementwise as ew;

use super::{promote, rule};
use crate::error::Result;
use crate::recording::begin;
use crate::saved::saves;
use crate::tensor::Tensor;

impl Tensor {
    /// SwiGLU with `self` as the gate: `silu(self) * up` elementwise (`silu(x) = x sigmoid(x)`),
    /// `up` of the same shape (no broadcasting). Keeps only its two operands; the backward pass
    /// computes both gradients in one kernel.
    pub fn swiglu(&self, up: &Tensor) -> Result<Tensor> {
        let (gate, up) = promote(self, up)?;
        let y = Tensor::output(ew::swiglu(gate.array(), up.array())?);
        if let Some(rec) = begin(&[&gate, &up]) {
            let (gs, us) = (gate.array().clone(), up.array().clone());
            let saved = saves(&[&gs, &us]);
            let backward = rule(move |g, needs| {
                let grads = ew::swiglu_backward(&gs, &us, g)?;
                Ok(vec![
                    needs[0].then_some(grads.dgate),
                    needs[1].then_some(grads.dup),
                ])
            });
            rec.finish("swiglu", &[&y], saved, backward);
        }
        Ok(y)
    }
}
