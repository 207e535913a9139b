//! GELU, then a linear layer, keeping the GELU's input.

use headroom_kernels::ops::elementwise::{self as ew, BinaryOp};

use super::super::{rule, when};
use super::Linear;
use crate::error::Result;
use crate::recording::begin;
use crate::saved::saves;
use crate::tensor::Tensor;

impl Tensor {
    /// `gelu(self) @ weight^T + bias` (an MLP's second product), keeping the GELU's input but
    /// not its output, which the backward pass computes again.
    pub fn gelu_linear(&self, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        let linear = Linear::new(weight.into(), bias)?;
        let y = linear.forward(ew::gelu(self.array())?)?;
        if let Some(rec) = begin(&linear.inputs(&[self])) {
            let (hs, layer) = (self.array().clone(), linear.saved());
            let mut kept = vec![&hs];
            kept.extend(layer.arrays());
            let saved = saves(&kept);
            let backward = rule(move |g, needs| {
                let (dactivated, layer_grads) = layer.grads(ew::gelu(&hs)?, g, needs)?;
                let dh = when(needs[0], || {
                    ew::binary(BinaryOp::GeluBackward, &hs, &dactivated).map_err(Into::into)
                })?;
                let mut grads = vec![dh];
                grads.extend(layer_grads);
                Ok(grads)
            });
            rec.finish("gelu_linear", &[&y], saved, backward);
        }
        Ok(y)
    }
}
