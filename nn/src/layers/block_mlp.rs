//! A block's MLP: GPT-2's GELU MLP, or a gated MLP (the Llama family's SwiGLU, Gemma's GeGLU).

use headroom_autograd::Tensor;

use crate::error::{Error, Result};
use crate::init::{Init, Initializer};
use crate::layers::activation::{Dropout, DropoutCounter};
use crate::layers::linear::Linear;
use crate::module::{Module, visit_child, visit_child_mut};

/// A block's MLP, then dropout on its output. Parameters: `fc` and `proj` (GELU), or `gate`,
/// `up` and `down` (gated), each with `weight` and, for GELU, `bias`.
#[derive(Debug, Clone)]
pub struct BlockMlp {
    /// The layers and how they combine.
    pub kind: MlpKind,
    pub(crate) dropout: Dropout,
}

/// The layers of a [`BlockMlp`].
#[derive(Debug, Clone)]
pub enum MlpKind {
    /// `proj(gelu(fc(x)))`, `C -> 4C -> C` with biases (GPT-2).
    Gelu {
        /// `C -> 4C`.
        fc: Linear,
        /// `4C -> C`.
        proj: Linear,
    },
    /// `down(silu(gate(x)) * up(x))`, `C -> I -> C` without biases (Llama).
    SwiGlu {
        /// `C -> I`, through SiLU.
        gate: Linear,
        /// `C -> I`, the factor.
        up: Linear,
        /// `I -> C`.
        down: Linear,
    },
    /// `down(gelu(gate(x)) * up(x))` with GELU's tanh form, `C -> I -> C` without biases
    /// (Gemma).
    GeGlu {
        /// `C -> I`, through GELU.
        gate: Linear,
        /// `C -> I`, the factor.
        up: Linear,
        /// `I -> C`.
        down: Linear,
    },
}

/// The activation of a gated MLP's gate: which [`MlpKind`] [`BlockMlp::gated`] makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateActivation {
    /// SiLU (SwiGLU: Llama, Qwen, Mistral).
    Silu,
    /// GELU in its tanh form (GeGLU: Gemma's `gelu_pytorch_tanh`).
    GeluTanh,
}

impl BlockMlp {
    /// GPT-2's MLP over `width` features; the output layer's weight drawn with std `proj_std`;
    /// dropout `p` on its output. Its weights are drawn before its dropout's seed, so that a
    /// seed gives the weights it always gave.
    pub fn gelu(
        init: &mut Initializer,
        width: usize,
        proj_std: f64,
        (p, counter): (f64, &DropoutCounter),
    ) -> Result<Self> {
        let zero = Init::Constant(0.0);
        let fc = Linear::with_init(init, width, 4 * width, true, Init::Normal(0.02), zero)?;
        let proj = Linear::with_init(init, 4 * width, width, true, Init::Normal(proj_std), zero)?;
        Ok(Self {
            kind: MlpKind::Gelu { fc, proj },
            dropout: Dropout::new(p, init.next_seed(), counter.clone())?,
        })
    }

    /// A gated MLP over `width` features, `inner` wide, its gate through `activation`; the
    /// output layer's weight drawn with std `proj_std`; dropout `p` on its output.
    pub fn gated(
        init: &mut Initializer,
        (width, inner): (usize, usize),
        activation: GateActivation,
        proj_std: f64,
        (p, counter): (f64, &DropoutCounter),
    ) -> Result<Self> {
        let zero = Init::Constant(0.0);
        let mut layer = |inputs, outputs, std| {
            Linear::with_init(init, inputs, outputs, false, Init::Normal(std), zero)
        };
        let gate = layer(width, inner, 0.02)?;
        let up = layer(width, inner, 0.02)?;
        let down = layer(inner, width, proj_std)?;
        Ok(Self {
            kind: match activation {
                GateActivation::Silu => MlpKind::SwiGlu { gate, up, down },
                GateActivation::GeluTanh => MlpKind::GeGlu { gate, up, down },
            },
            dropout: Dropout::new(p, init.next_seed(), counter.clone())?,
        })
    }

    /// The gate's, up's and down's weights of a SwiGLU MLP without biases or adapters; `None`
    /// for any other.
    pub(crate) fn unbiased_swiglu(&self) -> Option<[&Tensor; 3]> {
        match &self.kind {
            MlpKind::SwiGlu { gate, up, down }
                if [gate, up, down]
                    .iter()
                    .all(|layer| layer.bias.is_none() && !layer.is_adapted()) =>
            {
                Some([
                    gate.weight.dense()?,
                    up.weight.dense()?,
                    down.weight.dense()?,
                ])
            }
            _ => None,
        }
    }

    /// The MLP of the normalized input, then dropout: `first(layers)` computes the first-layer
    /// products of the input (`fc`, or `gate` and `up`), and the last product keeps its
    /// operand's inputs rather than the operand when `recompute` is set
    /// ([`Tensor::gelu_linear`], [`Tensor::swiglu_linear`]).
    pub(crate) fn run(&self, first: &FirstProducts, recompute: bool) -> Result<Tensor> {
        self.dropout
            .forward(&self.without_dropout(first, recompute)?)
    }

    /// [`run`](Self::run) without the dropout (for inference).
    pub(crate) fn without_dropout(&self, first: &FirstProducts, recompute: bool) -> Result<Tensor> {
        // The operands' own weights where the last product can keep its operand's inputs: a
        // GELU MLP's projection as a tensor without adapters, a SwiGLU MLP's down products.
        let (plain_proj, down_products) = match &self.kind {
            MlpKind::Gelu { proj, .. } => (proj.plain_weight(), None),
            MlpKind::SwiGlu { down, .. } => (None, down.products()),
            MlpKind::GeGlu { .. } => (None, None),
        };
        Ok(match (&self.kind, recompute, plain_proj, down_products) {
            (MlpKind::Gelu { fc, proj }, true, Some(weight), _) => {
                let [h] = products(first, [fc])?;
                h.gelu_linear(weight, proj.bias.as_ref())?
            }
            (MlpKind::Gelu { fc, proj }, ..) => {
                let [h] = products(first, [fc])?;
                proj.forward(&h.gelu()?)?
            }
            (MlpKind::SwiGlu { gate, up, down }, true, _, Some(own)) => {
                let [gate, up] = products(first, [gate, up])?;
                down.from_products(gate.swiglu_linears(&up, &own)?)?
            }
            (MlpKind::SwiGlu { gate, up, down }, ..) => {
                let [gate, up] = products(first, [gate, up])?;
                down.forward(&gate.swiglu(&up)?)?
            }
            (MlpKind::GeGlu { gate, up, down }, ..) => {
                let [gate, up] = products(first, [gate, up])?;
                down.forward(&gate.gelu()?.mul(&up)?)?
            }
        })
    }
}

/// Computes an MLP's first-layer products of its input, one output per layer given.
pub(crate) type FirstProducts<'a> = dyn Fn(&[&Linear]) -> Result<Vec<Tensor>> + 'a;

/// The products of an input by each layer of `layers`, as `first` computes them.
pub(crate) fn products<const N: usize>(
    first: &FirstProducts,
    layers: [&Linear; N],
) -> Result<[Tensor; N]> {
    let outputs = first(&layers)?;
    let count = outputs.len();
    outputs
        .try_into()
        .map_err(|_| Error::config("mlp", format!("{count} first-layer outputs for {N} layers")))
}

/// Each layer of `layers` applied to `x`: the first products of an MLP whose norm's output is
/// kept.
pub(crate) fn each_of(x: &Tensor, layers: &[&Linear]) -> Result<Vec<Tensor>> {
    layers.iter().map(|layer| layer.forward(x)).collect()
}

impl Module for BlockMlp {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.run(&|layers| each_of(x, layers), false)
    }

    fn visit(&self, f: &mut dyn FnMut(&str, &Tensor)) {
        match &self.kind {
            MlpKind::Gelu { fc, proj } => {
                visit_child(fc, "fc", f);
                visit_child(proj, "proj", f);
            }
            MlpKind::SwiGlu { gate, up, down } | MlpKind::GeGlu { gate, up, down } => {
                visit_child(gate, "gate", f);
                visit_child(up, "up", f);
                visit_child(down, "down", f);
            }
        }
    }

    fn visit_mut(&mut self, f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>) -> Result<()> {
        match &mut self.kind {
            MlpKind::Gelu { fc, proj } => {
                visit_child_mut(fc, "fc", f)?;
                visit_child_mut(proj, "proj", f)
            }
            MlpKind::SwiGlu { gate, up, down } | MlpKind::GeGlu { gate, up, down } => {
                visit_child_mut(gate, "gate", f)?;
                visit_child_mut(up, "up", f)?;
                visit_child_mut(down, "down", f)
            }
        }
    }

    fn set_training(&mut self, training: bool) {
        match &mut self.kind {
            MlpKind::Gelu { fc, proj } => {
                fc.set_training(training);
                proj.set_training(training);
            }
            MlpKind::SwiGlu { gate, up, down } | MlpKind::GeGlu { gate, up, down } => {
                for layer in [gate, up, down] {
                    layer.set_training(training);
                }
            }
        }
        self.dropout.set_training(training);
    }
}
