//! Layer normalization.

use headroom_autograd::Tensor;

use crate::error::{Error, Result};
use crate::init::{Init, Initializer};
use crate::module::Module;

/// Normalizes the last axis to zero mean and unit variance, then scales by `weight` and shifts by
/// `bias` (both `[dim]`, ones and zeros at first). Runs in f32 under autocast.
#[derive(Debug, Clone)]
pub struct LayerNorm {
    /// The scale, `[dim]`.
    pub weight: Tensor,
    /// The shift, `[dim]`.
    pub bias: Tensor,
    /// Added to the variance.
    pub eps: f64,
}

impl LayerNorm {
    /// A normalization over `dim` features, with PyTorch's `eps` of 1e-5.
    pub fn new(init: &mut Initializer, dim: usize) -> Result<Self> {
        if dim == 0 {
            return Err(Error::config("layer norm", "a dimension of 0"));
        }
        Ok(Self {
            weight: init.param([dim], Init::Constant(1.0))?,
            bias: init.param([dim], Init::Constant(0.0))?,
            eps: 1e-5,
        })
    }
}

impl Module for LayerNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(x.layer_norm(&self.weight, &self.bias, self.eps)?)
    }

    fn visit(&self, f: &mut dyn FnMut(&str, &Tensor)) {
        f("weight", &self.weight);
        f("bias", &self.bias);
    }

    fn visit_mut(&mut self, f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>) -> Result<()> {
        f("weight", &mut self.weight)?;
        f("bias", &mut self.bias)
    }
}
