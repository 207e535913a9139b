//! Multi-head causal self-attention: memory-efficient (FlashAttention-2) by default, the
//! materialized weights as a reference.

use headroom_autograd::Tensor;
use headroom_kernels::ops::attention::{Attention, AttentionDropout};

use crate::error::{Error, Result};
use crate::init::{Init, Initializer};
use crate::kv_cache::BlockKv;
use crate::layers::activation::{Dropout, DropoutCounter};
use crate::layers::linear::Linear;
use crate::module::{Module, visit_child, visit_child_mut};

/// Causal self-attention over `[B, T, C]`: one fused projection to queries, keys and values
/// (`qkv`, `[3C, C]`), `heads` heads of `C / heads` features, scores masked to the past and
/// scaled by `1 / sqrt(C / heads)`, and an output projection (`proj`).
///
/// The attention itself runs memory-efficiently
/// ([`Tensor::scaled_dot_product_attention`]): a training step keeps no `T x T` weights. With
/// [`set_materialized`](Self::set_materialized) it forms the weights instead (the reference
/// the tests compare with); both draw the same dropout masks and give the same results.
#[derive(Debug, Clone)]
pub struct CausalSelfAttention {
    /// Queries, keys and values, `C -> 3C`.
    pub qkv: Linear,
    /// Output, `C -> C`.
    pub proj: Linear,
    heads: usize,
    attention_dropout: Dropout,
    residual_dropout: Dropout,
    materialized: bool,
}

impl CausalSelfAttention {
    /// Attention over `width` features in `heads` heads (which must divide it), GPT-2's
    /// initialization (weights normal with std 0.02, the output projection's scaled by
    /// `proj_std`), dropout `p` on the attention weights and the output.
    pub fn new(
        init: &mut Initializer,
        width: usize,
        heads: usize,
        proj_std: f64,
        dropout: (f64, &DropoutCounter),
    ) -> Result<Self> {
        if heads == 0 || !width.is_multiple_of(heads) {
            return Err(Error::config(
                "attention",
                format!("{heads} heads do not divide a width of {width}"),
            ));
        }
        let normal = |std| (Init::Normal(std), Init::Constant(0.0));
        let (w, b) = normal(0.02);
        let qkv = Linear::with_init(init, width, 3 * width, true, w, b)?;
        let (w, b) = normal(proj_std);
        let proj = Linear::with_init(init, width, width, true, w, b)?;
        let (p, counter) = dropout;
        Ok(Self {
            qkv,
            proj,
            heads,
            attention_dropout: Dropout::new(p, init.next_seed(), counter.clone())?,
            residual_dropout: Dropout::new(p, init.next_seed(), counter.clone())?,
            materialized: false,
        })
    }

    /// Forms the `[B, H, T, T]` weights (scores, their masked softmax, dropout, the product
    /// with the values) when `on`, instead of the memory-efficient kernels.
    pub fn set_materialized(&mut self, on: bool) {
        self.materialized = on;
    }

    /// Number of heads.
    pub fn heads(&self) -> usize {
        self.heads
    }
}

impl Module for CausalSelfAttention {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if x.dims().len() != 3 {
            return Err(Error::config(
                "attention input",
                format!("shape {}: expected [batch, time, width]", x.shape()),
            ));
        }
        self.attend(&self.qkv.forward(x)?)
    }

    fn visit(&self, f: &mut dyn FnMut(&str, &Tensor)) {
        visit_child(&self.qkv, "qkv", f);
        visit_child(&self.proj, "proj", f);
    }

    fn visit_mut(&mut self, f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>) -> Result<()> {
        visit_child_mut(&mut self.qkv, "qkv", f)?;
        visit_child_mut(&mut self.proj, "proj", f)
    }

    fn set_training(&mut self, training: bool) {
        self.attention_dropout.set_training(training);
        self.residual_dropout.set_training(training);
    }
}

impl CausalSelfAttention {
    /// The attention of queries, keys and values already projected (`qkv`, `[B, T, 3C]`: the
    /// `qkv` layer's output), through the output projection: [`Module::forward`] after its
    /// first product.
    pub fn attend(&self, qkv: &Tensor) -> Result<Tensor> {
        let &[b, t, c3] = qkv.dims() else {
            return Err(Error::config(
                "attention input",
                format!(
                    "qkv of shape {}: expected [batch, time, 3 width]",
                    qkv.shape()
                ),
            ));
        };
        let c = c3 / 3;
        if c3 != 3 * c || !c.is_multiple_of(self.heads) {
            return Err(Error::config(
                "attention input",
                format!(
                    "qkv of shape {}: 3 times a width of {} heads",
                    qkv.shape(),
                    self.heads
                ),
            ));
        }
        let (h, d) = (self.heads, c / self.heads);
        let qkv = qkv.split(2, &[c, c, c])?;
        // [B, T, C] -> [B, H, T, D]
        let heads =
            |m: &Tensor| -> Result<Tensor> { Ok(m.reshape([b, t, h, d])?.permute(&[0, 2, 1, 3])?) };
        let (q, k, v) = (heads(&qkv[0])?, heads(&qkv[1])?, heads(&qkv[2])?);
        drop(qkv);
        let scale = 1.0 / (d as f64).sqrt();
        let y = if self.materialized {
            // Scale, causal mask and softmax in one pass that keeps only the weights.
            let weights = q
                .matmul_t(&k, false, true)?
                .attention_softmax(scale, true)?;
            self.attention_dropout.forward(&weights)?.matmul(&v)?
        } else {
            let dropout = self
                .attention_dropout
                .next_mask_seed()
                .map(|seed| AttentionDropout {
                    p: self.attention_dropout.p(),
                    seed,
                });
            let how = Attention {
                scale,
                causal: true,
                dropout,
            };
            q.scaled_dot_product_attention(&k, &v, how)?
        };
        let y = y.permute(&[0, 2, 1, 3])?.reshape([b, t, c])?;
        self.residual_dropout.forward(&self.proj.forward(&y)?)
    }
}

impl CausalSelfAttention {
    /// The attention of `x` (`[B, t, C]`, normalized) at the `t` positions that follow those of
    /// `past`, over the past keys and values and its own (causally among its own), with the
    /// keys and values of every position seen, `past`'s followed by its own. Inference only: no
    /// dropout. Without a past (a prompt) it runs memory-efficiently.
    pub(crate) fn forward_cached(
        &self,
        x: &Tensor,
        past: Option<&BlockKv>,
    ) -> Result<(Tensor, BlockKv)> {
        let &[b, t, c] = x.dims() else {
            return Err(Error::config(
                "attention input",
                format!("shape {}: expected [batch, time, width]", x.shape()),
            ));
        };
        let (h, d) = (self.heads, c / self.heads);
        let qkv = self.qkv.forward(x)?.split(2, &[c, c, c])?;
        // [B, t, C] -> [B, H, t, D]
        let heads =
            |m: &Tensor| -> Result<Tensor> { Ok(m.reshape([b, t, h, d])?.permute(&[0, 2, 1, 3])?) };
        let (q, k, v) = (heads(&qkv[0])?, heads(&qkv[1])?, heads(&qkv[2])?);
        drop(qkv);
        let offset = past.map_or(0, BlockKv::len);
        let kv = match past {
            None => BlockKv { keys: k, values: v },
            Some(past) => BlockKv {
                keys: Tensor::concat(&[&past.keys, &k], 2)?,
                values: Tensor::concat(&[&past.values, &v], 2)?,
            },
        };
        let scale = 1.0 / (d as f64).sqrt();
        let y = if offset == 0 && !self.materialized {
            let how = Attention {
                scale,
                causal: true,
                dropout: None,
            };
            q.scaled_dot_product_attention(&kv.keys, &kv.values, how)?
        } else {
            // [B, H, t, offset + t] scores; the new positions do not see each other's future.
            let mut scores = q.matmul_t(&kv.keys, false, true)?;
            if t > 1 {
                scores = scores.add(&future_mask(&scores, offset, t)?)?;
            }
            scores.attention_softmax(scale, false)?.matmul(&kv.values)?
        };
        let y = y.permute(&[0, 2, 1, 3])?.reshape([b, t, c])?;
        Ok((self.proj.forward(&y)?, kv))
    }
}

/// `[t, offset + t]` in the dtype of `scores`: minus infinity where the column (a key's
/// position) is after the row's query position (`offset + row`), 0 elsewhere.
fn future_mask(scores: &Tensor, offset: usize, t: usize) -> Result<Tensor> {
    let cols = offset + t;
    let mask: Vec<f64> = (0..t * cols)
        .map(|i| match i % cols > offset + i / cols {
            true => f64::NEG_INFINITY,
            false => 0.0,
        })
        .collect();
    Ok(Tensor::from_f64(
        scores.device(),
        [t, cols],
        scores.dtype(),
        &mask,
    )?)
}
