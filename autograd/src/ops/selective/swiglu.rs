//! SwiGLU, then one or more linear layers, keeping the gate and the up projection.

use headroom_kernels::ops::elementwise as ew;

use super::super::{promote, rule_many};
use super::{LinearSaved, LinearWeight, inputs_of, layers_of, shared_operand_grads};
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
        let mut ys = self.swiglu_linears(up, &[(weight, bias)])?;
        Ok(ys.remove(0))
    }

    /// [`swiglu_linear`](Self::swiglu_linear) for each `(weight, bias)` of `layers` (a weight a
    /// tensor or stored quantized, [`LinearWeight`]), one
    /// product `silu(gate) * up` feeding them all (a down projection and its adapter's first
    /// product), kept for none of them.
    pub fn swiglu_linears<'a, W: Copy + Into<LinearWeight<'a>>>(
        &self,
        up: &Tensor,
        layers: &[(W, Option<&'a Tensor>)],
    ) -> Result<Vec<Tensor>> {
        let (gate, up) = promote(self, up)?;
        let linears = layers_of(layers)?;
        let operand = ew::swiglu(gate.array(), up.array())?;
        let ys = linears
            .iter()
            .map(|linear| linear.forward(operand.clone()))
            .collect::<Result<Vec<_>>>()?;
        drop(operand);
        if let Some(rec) = begin(&inputs_of(&[&gate, &up], &linears)) {
            let (gs, us) = (gate.array().clone(), up.array().clone());
            let layers: Vec<_> = linears.iter().map(|l| l.saved()).collect();
            let mut kept = vec![&gs, &us];
            kept.extend(layers.iter().flat_map(LinearSaved::arrays));
            let saved = saves(&kept);
            let backward = rule_many(move |outputs, needs| {
                let gated = ew::swiglu(&gs, &us)?;
                let (dgated, layer_grads) =
                    shared_operand_grads(&layers, gated, outputs, needs, 2)?;
                let mut grads = match dgated {
                    Some(dgated) if needs[0] || needs[1] => {
                        let d = ew::swiglu_backward(&gs, &us, &dgated)?;
                        vec![needs[0].then_some(d.dgate), needs[1].then_some(d.dup)]
                    }
                    _ => vec![None, None],
                };
                grads.extend(layer_grads);
                Ok(grads)
            });
            let outputs: Vec<&Tensor> = ys.iter().collect();
            rec.finish("swiglu_linear", &outputs, saved, backward);
        }
        Ok(ys)
    }
}
