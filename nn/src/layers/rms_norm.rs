//! RMS normalization, as the Llama family normalizes.

use headroom_autograd::Tensor;

use crate::error::{Error, Result};
use crate::init::{Init, Initializer};
use crate::module::Module;

/// Divides the last axis by its root mean square, then scales by `weight` (`[dim]`, ones at
/// first): Hugging Face's `LlamaRMSNorm`, `weight * x / sqrt(mean(x^2) + eps)`, its parameter
/// named as there. Runs in f32 under autocast.
#[derive(Debug, Clone)]
pub struct RmsNorm {
    /// The scale, `[dim]`.
    pub weight: Tensor,
    /// Added to the mean square (a model's `rms_norm_eps`).
    pub eps: f64,
}

impl RmsNorm {
    /// A normalization over `dim` features with `eps` (finite, >= 0; the published Llama,
    /// Qwen and SmolLM configurations use 1e-5 or 1e-6).
    pub fn new(init: &mut Initializer, dim: usize, eps: f64) -> Result<Self> {
        if dim == 0 {
            return Err(Error::config("rms norm", "a dimension of 0"));
        }
        if !(eps.is_finite() && eps >= 0.0) {
            return Err(Error::config(
                "rms norm",
                format!("eps {eps}: it must be finite and >= 0"),
            ));
        }
        Ok(Self {
            weight: init.param([dim], Init::Constant(1.0))?,
            eps,
        })
    }
}

impl Module for RmsNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(x.rms_norm(&self.weight, self.eps)?)
    }

    fn visit(&self, f: &mut dyn FnMut(&str, &Tensor)) {
        f("weight", &self.weight);
    }

    fn visit_mut(&mut self, f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>) -> Result<()> {
        f("weight", &mut self.weight)
    }
}
