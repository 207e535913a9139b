//! Memory-efficient attention: `softmax(scale * q k^T) v`, causal, within a sliding window and
//! with dropout on the weights when asked, without the weights ever existing whole. It keeps its operands, its
//! output and one log-sum-exp per row, from which the backward pass computes each block of
//! weights again. Under autocast it runs in the products' half type. Over packed documents each
//! query sees only the keys of its own document, and the document starts are kept too.

use headroom_kernels::Array;
use headroom_kernels::ops::attention::{self, Attention};

use super::{in_dtype, rule};
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
        self.scaled_dot_product_attention_in_documents(k, v, how, None)
    }

    /// [`scaled_dot_product_attention`](Self::scaled_dot_product_attention) over packed
    /// documents where `starts` is given (`[batch, len]` U32, the queries `[batch, heads, len,
    /// head]`; see [`headroom_kernels::ops::documents`]): query `i` of row `b` sees only keys
    /// `j` with `starts[b][i] <= j <= i`. `how.causal` must be set. None is plain attention.
    pub fn scaled_dot_product_attention_in_documents(
        &self,
        k: &Tensor,
        v: &Tensor,
        how: Attention,
        starts: Option<&Array>,
    ) -> Result<Tensor> {
        let (q, k, v) = (self.for_matmul()?, k.for_matmul()?, v.for_matmul()?);
        let (out, lse) = match starts {
            Some(starts) => {
                attention::attention_in_documents(q.array(), k.array(), v.array(), how, starts)?
            }
            None => attention::attention(q.array(), k.array(), v.array(), how)?,
        };
        let y = Tensor::output(out);
        if let Some(rec) = begin(&[&q, &k, &v]) {
            let operands = (q.array().clone(), k.array().clone(), v.array().clone());
            let out = y.array().clone();
            let starts = starts.cloned();
            let mut kept = vec![&operands.0, &operands.1, &operands.2, &out, &lse];
            kept.extend(starts.as_ref());
            rec.finish(
                "scaled_dot_product_attention",
                &[&y],
                saves(&kept),
                rule(move |g, _| {
                    // The output's gradient in the output's dtype (products under autocast may
                    // hand it back in another).
                    let g = in_dtype(g, out.dtype())?;
                    let (q, k, v) = (&operands.0, &operands.1, &operands.2);
                    let saved = (&out, &lse);
                    let (dq, dk, dv) = match &starts {
                        Some(starts) => attention::attention_in_documents_backward(
                            (q, k, v),
                            saved,
                            &g,
                            how,
                            starts,
                        )?,
                        None => attention::attention_backward((q, k, v), saved, &g, how)?,
                    };
                    Ok(vec![Some(dq), Some(dk), Some(dv)])
                }),
            );
        }
        Ok(y)
    }
}
