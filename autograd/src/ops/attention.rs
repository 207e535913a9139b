//! Memory-efficient attention: `softmax(scale * q k^T) v`, causal, within a sliding window and
//! with dropout on the weights when asked, without the weights ever existing whole. It keeps its operands, its
//! output and one log-sum-exp per row, from which the backward pass computes each block of
//! weights again. Under autocast it runs in the products' half type.

use headroom_kernels::ops::attention::{self, Attention};

use super::rule;
use crate::error::Result;
use crate::recording::begin;
use crate::saved::saves;
use crate::tensor::Tensor;

impl Tensor {
    /// Attention of queries `self` over keys `k` and values `v` (each `[..., len, head]`, the
    /// leading axes independent heads): `softmax(mask(how.scale * q k^T)) v`, the mask causal
    /// (`how.causal`) and, with `how.window`, keeping only the last `window` positions up to
    /// each query; with dropout on the weights (`how.dropout`), as PyTorch's
    /// `scaled_dot_product_attention`. The `len x len` weights are never stored: a training
    /// step keeps `O(len)` per head where the materialized path keeps `O(len^2)`. Grouped-query
    /// attention: `k` and `v` may hold fewer heads on the axis before `len` (`[batch, kv_heads,
    /// len, head]` beside the queries' `[batch, heads, len, head]`, `kv_heads` dividing
    /// `heads`); they are read in place, never repeated, and their gradients (of their own
    /// shapes) sum over each group.
    pub fn scaled_dot_product_attention(
        &self,
        k: &Tensor,
        v: &Tensor,
        how: Attention,
    ) -> Result<Tensor> {
        let (q, k, v) = (self.for_matmul()?, k.for_matmul()?, v.for_matmul()?);
        let (out, lse) = attention::attention(q.array(), k.array(), v.array(), how)?;
        let y = Tensor::output(out);
        if let Some(rec) = begin(&[&q, &k, &v]) {
            let operands = (q.array().clone(), k.array().clone(), v.array().clone());
            let out = y.array().clone();
            rec.finish(
                "scaled_dot_product_attention",
                &[&y],
                saves(&[&operands.0, &operands.1, &operands.2, &out, &lse]),
                rule(move |g, _| {
                    // The output's gradient in the output's dtype (products under autocast may
                    // hand it back in another).
                    let g = match g.dtype() == out.dtype() {
                        true => g.clone(),
                        false => g.cast(out.dtype())?,
                    };
                    let (q, k, v) = (&operands.0, &operands.1, &operands.2);
                    let (dq, dk, dv) =
                        attention::attention_backward((q, k, v), (&out, &lse), &g, how)?;
                    Ok(vec![Some(dq), Some(dk), Some(dv)])
                }),
            );
        }
        Ok(y)
    }
}
