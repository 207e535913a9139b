//! Rotary position embeddings on queries and keys (Hugging Face's `rotate_half` layout). A
//! rotation is linear and orthogonal: its backward pass rotates the gradient back, so it keeps
//! nothing but the frequencies. It runs in its input's dtype, autocast or not.

use headroom_kernels::Array;
use headroom_kernels::ops::rotary::{self, freq_dtype};

use super::rule;
use crate::error::Result;
use crate::recording::begin;
use crate::saved::saves;
use crate::tensor::Tensor;

impl Tensor {
    /// Rotary position embedding of `self` (`[..., len, head]`, `head` even, the leading axes
    /// independent heads): row `t` of each head at position `offset + t` (the rows a key/value
    /// cache already holds), pair `(i, i + head / 2)` turned by `position * inv_freq[i]`.
    /// `inv_freq` (`[head / 2]`, from [`rotary::inv_freq`]) is cast to f32 (f64 for an f64
    /// input) when it is of another dtype.
    pub fn rotary(&self, inv_freq: &Array, offset: usize) -> Result<Tensor> {
        let wanted = freq_dtype(self.dtype());
        let freq = match inv_freq.dtype() == wanted {
            true => inv_freq.clone(),
            false => inv_freq.cast(wanted)?,
        };
        let y = Tensor::output(rotary::rotary(self.array(), &freq, offset)?);
        if let Some(rec) = begin(&[self]) {
            let dtype = self.dtype();
            let saved = saves(&[&freq]);
            let backward = rule(move |g, _| {
                // The gradient in the output's dtype (a cast after it may hand it back in
                // another).
                let g = match g.dtype() == dtype {
                    true => g.clone(),
                    false => g.cast(dtype)?,
                };
                Ok(vec![Some(rotary::rotary_backward(&g, &freq, offset)?)])
            });
            rec.finish("rotary", &[&y], saved, backward);
        }
        Ok(y)
    }
}
