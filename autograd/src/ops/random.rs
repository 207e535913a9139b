//! Dropout from a counter-based generator: the mask is a function of (seed, element), so the
//! backward pass regenerates it instead of keeping it.

use headroom_kernels::ops::random;

use super::rule;
use crate::error::Result;
use crate::recording::begin;
use crate::saved::saves;
use crate::tensor::Tensor;

impl Tensor {
    /// Inverted dropout: each element zeroed with probability `p`, the rest scaled by
    /// `1 / (1 - p)`, the mask drawn from `seed`. Keeps nothing.
    pub fn dropout(&self, p: f64, seed: u64) -> Result<Tensor> {
        let y = Tensor::output(random::dropout(self.array(), p, seed)?);
        if let Some(rec) = begin(&[self]) {
            rec.finish(
                "dropout",
                &[&y],
                saves(&[]),
                rule(move |g, _| Ok(vec![Some(random::dropout_backward(g, p, seed)?)])),
            );
        }
        Ok(y)
    }
}
