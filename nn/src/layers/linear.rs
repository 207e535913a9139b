//! Fully connected layers.

use headroom_autograd::{LinearWeight, Tensor};
use headroom_kernels::ops::quant::Quantized;

use crate::error::{Error, Result};
use crate::init::{Init, Initializer};
use crate::layers::linear_weight::Weight;
use crate::layers::lora_adapter::LoraAdapter;
use crate::module::Module;

/// `y = x W^T + b`, with PyTorch's layout: `weight` is `[out, in]`, `bias` `[out]`, plus its
/// low-rank adapters' output when it has any. Runs in the autocast dtype when a policy
/// applies. The weight may be stored quantized (frozen, under adapters: QLoRA).
#[derive(Debug, Clone)]
pub struct Linear {
    /// `[out, in]`.
    pub weight: Weight,
    /// `[out]`, if any.
    pub bias: Option<Tensor>,
    /// LoRA adapters over the (then frozen) weight ([`crate::lora`]); their tensors are
    /// named `lora_A.weight` and `lora_B.weight`, under a part's name for a slice.
    pub adapter: Option<Box<LoraAdapter>>,
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
            weight: init.weight([outputs, inputs], weight_init)?,
            bias: if bias {
                Some(init.param([outputs], bias_init)?)
            } else {
                None
            },
            adapter: None,
        })
    }

    /// The products this layer takes of its input, for an op that computes several products
    /// of one operand it computes again in the backward pass (a norm's output, SwiGLU's,
    /// merged heads): the base `(weight, bias)`, then each adapter part's `(A, None)`. `None`
    /// when the adapters read a dropped-out input of their own.
    pub fn products(&self) -> Option<Vec<(LinearWeight<'_>, Option<&Tensor>)>> {
        let mut products = vec![(self.weight.product(), self.bias.as_ref())];
        match &self.adapter {
            None => {}
            Some(adapter) if adapter.reads_input() => {
                let down = adapter.down_weights().into_iter();
                products.extend(down.map(|a| (LinearWeight::Dense(a), None)));
            }
            Some(_) => return None,
        }
        Some(products)
    }

    /// The layer's output from the outputs of [`products`](Self::products), in its order.
    pub fn from_products(&self, outputs: Vec<Tensor>) -> Result<Tensor> {
        let mut outputs = outputs.into_iter();
        let base = outputs.next().ok_or_else(|| {
            Error::config("linear layer", "no output for its base product".to_owned())
        })?;
        match &self.adapter {
            Some(adapter) => adapter.add_to(&base, outputs.collect()),
            None => Ok(base),
        }
    }

    /// The weight, when it is a tensor and no adapters add to the output: all the layer is.
    pub fn plain_weight(&self) -> Option<&Tensor> {
        match self.adapter {
            None => self.weight.dense(),
            Some(_) => None,
        }
    }

    /// True when adapters add to its output.
    pub fn is_adapted(&self) -> bool {
        self.adapter.is_some()
    }
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let base = self.weight.linear(x, self.bias.as_ref())?;
        match &self.adapter {
            Some(adapter) => adapter.add_to(&base, adapter.down(x)?),
            None => Ok(base),
        }
    }

    fn visit(&self, f: &mut dyn FnMut(&str, &Tensor)) {
        if let Weight::Dense(weight) = &self.weight {
            f("weight", weight);
        }
        if let Some(bias) = &self.bias {
            f("bias", bias);
        }
        if let Some(adapter) = &self.adapter {
            adapter.visit(f);
        }
    }

    fn visit_mut(&mut self, f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>) -> Result<()> {
        if let Weight::Dense(weight) = &mut self.weight {
            f("weight", weight)?;
        }
        if let Some(bias) = &mut self.bias {
            f("bias", bias)?;
        }
        if let Some(adapter) = &mut self.adapter {
            adapter.visit_mut(f)?;
        }
        Ok(())
    }

    fn visit_quantized_mut(
        &mut self,
        f: &mut dyn FnMut(&mut Quantized) -> Result<()>,
    ) -> Result<()> {
        self.weight.visit_quantized_mut(f)
    }

    fn set_training(&mut self, training: bool) {
        if let Some(adapter) = &mut self.adapter {
            adapter.set_training(training);
        }
    }
}
