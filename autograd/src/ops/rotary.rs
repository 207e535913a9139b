//! Rotary position embeddings on queries and keys (Hugging Face's `rotate_half` layout). A
//! rotation is linear and orthogonal: its backward pass rotates the gradient back, so it keeps
//! nothing but the frequencies (and a packed batch's document starts). It runs in its input's
//! dtype, autocast or not.

use headroom_kernels::Array;
use headroom_kernels::ops::rotary::{self, freq_dtype};

use super::{in_dtype, rule};
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
        self.turned(inv_freq, Positions::From(offset))
    }

    /// [`rotary`](Self::rotary) over packed documents: `self` is `[batch, ..., len, head]` and
    /// `starts` (`[batch, len]`, U32) its rows' document starts; row `t` of batch row `b` is
    /// at position `t - starts[b][t]` ([`headroom_kernels::ops::documents`]).
    pub fn rotary_in_documents(&self, inv_freq: &Array, starts: &Array) -> Result<Tensor> {
        self.turned(inv_freq, Positions::InDocuments(starts.clone()))
    }

    /// The rotation of `self` at `positions`.
    fn turned(&self, inv_freq: &Array, positions: Positions) -> Result<Tensor> {
        let wanted = freq_dtype(self.dtype());
        let freq = in_dtype(inv_freq, wanted)?;
        let y = Tensor::output(positions.turn(self.array(), &freq, false)?);
        if let Some(rec) = begin(&[self]) {
            let dtype = self.dtype();
            let mut kept = vec![&freq];
            if let Positions::InDocuments(starts) = &positions {
                kept.push(starts);
            }
            let saved = saves(&kept);
            let backward = rule(move |g, _| {
                // The gradient in the output's dtype (a cast after it may hand it back in
                // another).
                let g = in_dtype(g, dtype)?;
                Ok(vec![Some(positions.turn(&g, &freq, true)?)])
            });
            rec.finish("rotary", &[&y], saved, backward);
        }
        Ok(y)
    }
}

/// Where a rotation puts each row: from an offset, or within packed documents.
enum Positions {
    /// Row `t` at `offset + t`.
    From(usize),
    /// Row `t` of batch row `b` at `t - starts[b][t]`.
    InDocuments(Array),
}

impl Positions {
    /// `x` rotated by the frequencies `freq` at these positions, backward (by the negative
    /// angles) where `back`.
    fn turn(&self, x: &Array, freq: &Array, back: bool) -> Result<Array> {
        Ok(match (self, back) {
            (Self::From(offset), false) => rotary::rotary(x, freq, *offset)?,
            (Self::From(offset), true) => rotary::rotary_backward(x, freq, *offset)?,
            (Self::InDocuments(starts), false) => rotary::rotary_in_documents(x, freq, starts)?,
            (Self::InDocuments(starts), true) => {
                rotary::rotary_in_documents_backward(x, freq, starts)?
            }
        })
    }
}
