//! RMS normalization, as the Llama family normalizes.

use headroom_autograd::Tensor;

use crate::error::{Error, Result};
use crate::init::{Init, Initializer};
use crate::module::Module;

/// Divides the last axis by its root mean square, then scales by `weight` (`[dim]`, ones at
/// first): Hugging Face's `LlamaRMSNorm`, `weight * x / sqrt(mean(x^2) + eps)`, its parameter
/// named as there. Gemma's scales by `1 + weight` instead (zeros at first). Runs in f32 under
/// autocast.
#[derive(Debug, Clone)]
pub struct RmsNorm {
    /// The scale, `[dim]`, or the scale less one where `unit_offset` is set.
    pub weight: Tensor,
    /// Added to the mean square (a model's `rms_norm_eps`).
    pub eps: f64,
    /// The scale is `1 + weight` (Gemma's `Gemma3RMSNorm`).
    pub unit_offset: bool,
}

impl RmsNorm {
    /// A normalization over `dim` features with `eps` (finite, >= 0; the published Llama,
    /// Qwen and SmolLM configurations use 1e-5 or 1e-6).
    pub fn new(init: &mut Initializer, dim: usize, eps: f64) -> Result<Self> {
        Self::with_offset(init, dim, eps, false)
    }

    /// Gemma's normalization over `dim` features: it scales by `1 + weight`, the weight zeros
    /// at first.
    pub fn new_unit_offset(init: &mut Initializer, dim: usize, eps: f64) -> Result<Self> {
        Self::with_offset(init, dim, eps, true)
    }

    fn with_offset(
        init: &mut Initializer,
        dim: usize,
        eps: f64,
        unit_offset: bool,
    ) -> Result<Self> {
        if dim == 0 {
            return Err(Error::config("rms norm", "a dimension of 0"));
        }
        if !(eps.is_finite() && eps >= 0.0) {
            return Err(Error::config(
                "rms norm",
                format!("eps {eps}: it must be finite and >= 0"),
            ));
        }
        let first = if unit_offset { 0.0 } else { 1.0 };
        Ok(Self {
            weight: init.param([dim], Init::Constant(first))?,
            eps,
            unit_offset,
        })
    }

    /// The factor the normalized features are multiplied by: `weight`, or `1 + weight`.
    pub fn scale(&self) -> Result<Tensor> {
        if !self.unit_offset {
            return Ok(self.weight.clone());
        }
        let w = &self.weight;
        let ones = Tensor::full(w.device(), w.shape().clone(), w.dtype(), 1.0)?;
        Ok(w.add(&ones)?)
    }
}

impl Module for RmsNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(x.rms_norm(&self.scale()?, self.eps)?)
    }

    fn visit(&self, f: &mut dyn FnMut(&str, &Tensor)) {
        f("weight", &self.weight);
    }

    fn visit_mut(&mut self, f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>) -> Result<()> {
        f("weight", &mut self.weight)
    }
}
