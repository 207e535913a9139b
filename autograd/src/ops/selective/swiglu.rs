//! SwiGLU, then a linear layer, keeping the gate and the up projection.

use headroom_kernels::ops::elementwise as ew;

use super::super::{promote, rule};
use super::Linear;
use crate::error::Result;
use crate::recording::begin;
use crate::saved::saves;
use crate::tensor::Tensor;

impl Tensor {
    /// `swiglu(self, up) @ weight^T (+ bias)` with `self` as the gate (a Llama MLP's down
    /// projection), keeping the gate and `up` but not their product `silu(gate) * up`, which the
    /// backward pass computes again.
    pub fn swiglu_linear(
        &self,
        up: &Tensor,
        weight: &Tensor,
        bias: Option<&Tensor>,
    ) -> Result<Tensor> {
        let (gate, up) = promote(self, up)?;
        let linear = Linear::new(weight, bias)?;
        let y = linear.forward(ew::swiglu(gate.array(), up.array())?)?;
        if let Some(rec) = begin(&linear.inputs(&[&gate, &up])) {
            let (gs, us, layer) = (gate.array().clone(), up.array().clone(), linear.saved());
            let saved = saves(&[&gs, &us, &layer.w]);
            let backward = rule(move |g, needs| {
                let (dgated, layer_grads) = layer.grads(ew::swiglu(&gs, &us)?, g, needs)?;
                let mut grads = if needs[0] || needs[1] {
                    let d = ew::swiglu_backward(&gs, &us, &dgated)?;
                    vec![needs[0].then_some(d.dgate), needs[1].then_some(d.dup)]
                } else {
                    vec![None, None]
                };
                grads.extend(layer_grads);
                Ok(grads)
            });
            rec.finish("swiglu_linear", &[&y], saved, backward);
        }
        Ok(y)
    }
}
