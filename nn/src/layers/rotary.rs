//! Rotary position embeddings: the frequencies of a head, kept on the model's device.

use headroom_alloc::Tag;
use headroom_autograd::Tensor;
use headroom_kernels::ops::rotary::{Llama3Scaling, freq_dtype, inv_freq};
use headroom_kernels::{Array, DeviceKind};

use crate::error::{Error, Result};
use crate::init::Initializer;

/// Turns each head's feature pairs by angles that grow with the position
/// ([`Tensor::rotary`]), with the frequencies of a base (`rope_theta`) and Llama 3's scaling,
/// held as a `[head_dim / 2]` array (tagged as weights; not a parameter).
#[derive(Debug, Clone)]
pub struct RotaryEmbedding {
    inv_freq: Array,
}

impl RotaryEmbedding {
    /// The frequencies of heads of `head_dim` features turned from base `theta`, scaled as
    /// Llama 3 when given, on the initializer's device, in the dtype rotations of its
    /// parameters' dtype take them.
    pub fn new(
        init: &Initializer,
        head_dim: usize,
        theta: f64,
        scaling: Option<Llama3Scaling>,
    ) -> Result<Self> {
        let values = inv_freq(head_dim, theta, scaling)
            .map_err(|err| Error::config("rotary embedding", err.to_string()))?;
        let device = init.device();
        let dtype = freq_dtype(init.dtype());
        let _weights = device.scoped_tag(Tag::WEIGHTS);
        let shape = [values.len()];
        let inv_freq = match device.kind() {
            DeviceKind::Meta => Array::zeros(device, shape, dtype)?,
            _ => Array::from_f64(device, shape, dtype, &values)?,
        };
        Ok(Self { inv_freq })
    }

    /// `x` (`[..., len, head_dim]`) rotated, row `t` of each head at position `offset + t`.
    pub fn apply(&self, x: &Tensor, offset: usize) -> Result<Tensor> {
        Ok(x.rotary(&self.inv_freq, offset)?)
    }

    /// `x` (`[batch, ..., len, head_dim]`) rotated at positions within the packed documents of
    /// `starts` (`[batch, len]`, U32): row `t` of batch row `b` at `t - starts[b][t]`.
    pub fn apply_in_documents(&self, x: &Tensor, starts: &Array) -> Result<Tensor> {
        Ok(x.rotary_in_documents(&self.inv_freq, starts)?)
    }
}
