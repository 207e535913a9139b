//! Fully connected layers.

use headroom_autograd::Tensor;

use crate::error::{Error, Result};
use crate::init::{Init, Initializer};
use crate::module::Module;

/// `y = x W^T + b`, with PyTorch's layout: `weight` is `[out, in]`, `bias` `[out]`. Runs in
/// the autocast dtype when a policy applies.
#[derive(Debug, Clone)]
pub struct Linear {
    /// `[out, in]`.
    pub weight: Tensor,
    /// `[out]`, if any.
    pub bias: Option<Tensor>,
}

impl Linear {
    /// A layer from `inputs` to `outputs` features, initialized as PyTorch does: weight and bias
    /// uniform in `±1/sqrt(inputs)`.
    pub fn new(init: &mut Initializer, inputs: usize, outputs: usize, bias: bool) -> Result<Self> {
        let bound = 1.0 / (inputs.max(1) as f64).sqrt();
        Self::with_init(
            init,
            inputs,
            outputs,
            bias,
            Init::Uniform(bound),
            Init::Uniform(bound),
        )
    }

    /// A layer whose weight and bias are drawn by the given schemes.
    pub fn with_init(
        init: &mut Initializer,
        inputs: usize,
        outputs: usize,
        bias: bool,
        weight_init: Init,
        bias_init: Init,
    ) -> Result<Self> {
        if inputs == 0 || outputs == 0 {
            return Err(Error::config(
                "linear layer",
                format!("{inputs} inputs and {outputs} outputs: both must be at least 1"),
            ));
        }
        Ok(Self {
            weight: init.param([outputs, inputs], weight_init)?,
            bias: if bias {
                Some(init.param([outputs], bias_init)?)
            } else {
                None
            },
        })
    }
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(x.linear(&self.weight, self.bias.as_ref())?)
    }

    fn visit(&self, f: &mut dyn FnMut(&str, &Tensor)) {
        f("weight", &self.weight);
        if let Some(bias) = &self.bias {
            f("bias", bias);
        }
    }

    fn visit_mut(&mut self, f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>) -> Result<()> {
        f("weight", &mut self.weight)?;
        if let Some(bias) = &mut self.bias {
            f("bias", bias)?;
        }
        Ok(())
    }
}
