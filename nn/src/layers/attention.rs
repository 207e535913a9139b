//! Causal self-attention with grouped key/value heads and rotary positions when the family has
//! them: memory-efficient (FlashAttention-2) by default, the materialized weights as a
//! reference; over packed documents, each position attends within its own document and its
//! rotary position restarts with it.

use headroom_autograd::Tensor;
use headroom_kernels::ops::attention::{Attention, AttentionDropout};
use headroom_kernels::{Array, DeviceKind};

use crate::error::{Error, Result};
use crate::init::{Init, Initializer};
use crate::kv_cache::BlockKv;
use crate::layers::activation::{Dropout, DropoutCounter};
use crate::layers::linear::Linear;
use crate::layers::rms_norm::RmsNorm;
use crate::layers::rotary::RotaryEmbedding;
use crate::module::{Module, visit_child, visit_child_mut};

/// Causal self-attention over `[B, T, C]`: one fused projection to queries, keys and values
/// (`qkv`, `C -> (heads + 2 kv_heads) head_dim`), `heads` query heads and `kv_heads`
/// key/value heads of `head_dim` features (each key/value head shared by `heads / kv_heads`
/// query heads, read in place, never repeated), an optional RMSNorm over each query and key
/// head (`q_norm`, `k_norm`), rotary positions on queries and keys when the family has them,
/// scores masked to the past (or a window of it) and scaled by `1 / sqrt(head_dim)` unless the
/// family says otherwise, and an output projection (`proj`, `heads head_dim -> C`).
///
/// The attention itself runs memory-efficiently
/// ([`Tensor::scaled_dot_product_attention`]): a training step keeps no `T x T` weights. With
/// [`set_materialized`](Self::set_materialized) it forms the weights instead (the reference
/// the tests compare with); both draw the same dropout masks and give the same results.
#[derive(Debug, Clone)]
pub struct CausalSelfAttention {
    /// Queries, keys and values, `C -> (heads + 2 kv_heads) head_dim`, in that order.
    pub qkv: Linear,
    /// Over each query head's features, before the rotation (Qwen3); none in most families.
    pub q_norm: Option<RmsNorm>,
    /// Over each key head's features, before the rotation (Qwen3); none in most families.
    pub k_norm: Option<RmsNorm>,
    /// Output, `heads head_dim -> C`.
    pub proj: Linear,
    /// Query heads; a multiple of `kv_heads`.
    heads: usize,
    /// Key/value heads.
    kv_heads: usize,
    /// Features per head.
    head_dim: usize,
    /// The scores' factor.
    scale: f64,
    /// Keys a query sees, itself included; none: the whole past.
    window: Option<usize>,
    /// Turns queries and keys by their positions; none where positions are learned (GPT-2).
    rotary: Option<RotaryEmbedding>,
    attention_dropout: Dropout,
    residual_dropout: Dropout,
    materialized: bool,
}

impl CausalSelfAttention {
    /// GPT-2's attention over `width` features in `heads` heads (which must divide it), with
    /// biases, GPT-2's initialization (weights normal with std 0.02, the output projection's
    /// scaled by `proj_std`), dropout `p` on the attention weights and the output.
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
            q_norm: None,
            k_norm: None,
            proj,
            heads,
            kv_heads: heads,
            head_dim: width / heads,
            scale: 1.0 / ((width / heads) as f64).sqrt(),
            window: None,
            rotary: None,
            attention_dropout: Dropout::new(p, init.next_seed(), counter.clone())?,
            residual_dropout: Dropout::new(p, init.next_seed(), counter.clone())?,
            materialized: false,
        })
    }

    /// A grouped attention over `width` features in `heads` query heads, shaped by `shape`,
    /// turned by `rotary`; weights normal with std 0.02, the output projection's `proj_std`, no
    /// output bias.
    pub fn grouped(
        init: &mut Initializer,
        (width, heads): (usize, usize),
        shape: &GroupedAttention,
        rotary: &RotaryEmbedding,
        proj_std: f64,
        dropout: (f64, &DropoutCounter),
    ) -> Result<Self> {
        if let Some((field, detail)) = shape.problems(heads).into_iter().next() {
            return Err(Error::config("attention", format!("{field}: {detail}")));
        }
        let (kv_heads, head_dim) = (shape.kv_heads, shape.head_dim);
        let zero = Init::Constant(0.0);
        let outputs = (heads + 2 * kv_heads) * head_dim;
        let qkv = Linear::with_init(
            init,
            width,
            outputs,
            shape.qkv_bias,
            Init::Normal(0.02),
            zero,
        )?;
        let mut head_norm = || match shape.head_norm {
            Some(HeadNorm { eps, unit_offset }) => match unit_offset {
                true => RmsNorm::new_unit_offset(init, head_dim, eps).map(Some),
                false => RmsNorm::new(init, head_dim, eps).map(Some),
            },
            None => Ok(None),
        };
        let (q_norm, k_norm) = (head_norm()?, head_norm()?);
        let proj = Linear::with_init(
            init,
            heads * head_dim,
            width,
            false,
            Init::Normal(proj_std),
            zero,
        )?;
        let (p, counter) = dropout;
        Ok(Self {
            qkv,
            q_norm,
            k_norm,
            proj,
            heads,
            kv_heads,
            head_dim,
            scale: shape.scale,
            window: shape.window,
            rotary: Some(rotary.clone()),
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

    /// Number of query heads.
    pub fn heads(&self) -> usize {
        self.heads
    }

    /// Number of key/value heads.
    pub fn kv_heads(&self) -> usize {
        self.kv_heads
    }

    /// Features per head.
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// Keys each query sees, itself included; none when it sees the whole past.
    pub fn window(&self) -> Option<usize> {
        self.window
    }
}

/// The shape of a grouped attention, as a family's options give it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupedAttention {
    /// Key/value heads; they divide the query heads.
    pub kv_heads: usize,
    /// Features per head.
    pub head_dim: usize,
    /// Biases on the query, key and value projections.
    pub qkv_bias: bool,
    /// An RMSNorm over each query and key head, before the rotation.
    pub head_norm: Option<HeadNorm>,
    /// The scores' factor, usually `1 / sqrt(head_dim)`.
    pub scale: f64,
    /// Keys a query sees, itself included; none: the whole past.
    pub window: Option<usize>,
}

impl GroupedAttention {
    /// Every way the shape fails `heads` query heads, each with the field it is about: the
    /// key/value heads divide them, and rotary heads turn their features in pairs.
    pub(crate) fn problems(&self, heads: usize) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        if self.kv_heads == 0 || !heads.is_multiple_of(self.kv_heads) {
            let detail = format!(
                "{} key/value heads do not divide {heads} query heads",
                self.kv_heads
            );
            problems.push(("kv_heads", detail));
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) {
            let detail = format!(
                "{}: heads rotate their features in pairs, so at least 2 and even",
                self.head_dim
            );
            problems.push(("head_dim", detail));
        }
        problems
    }
}

/// The RMSNorm of [`GroupedAttention::head_norm`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HeadNorm {
    /// Added to the mean square.
    pub eps: f64,
    /// Scales by `1 + weight` (Gemma).
    pub unit_offset: bool,
}

impl Module for CausalSelfAttention {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.attend(&self.projected(x)?)
    }

    fn visit(&self, f: &mut dyn FnMut(&str, &Tensor)) {
        visit_child(&self.qkv, "qkv", f);
        if let Some(norm) = &self.q_norm {
            visit_child(norm, "q_norm", f);
        }
        if let Some(norm) = &self.k_norm {
            visit_child(norm, "k_norm", f);
        }
        visit_child(&self.proj, "proj", f);
    }

    fn visit_mut(&mut self, f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>) -> Result<()> {
        visit_child_mut(&mut self.qkv, "qkv", f)?;
        if let Some(norm) = &mut self.q_norm {
            visit_child_mut(norm, "q_norm", f)?;
        }
        if let Some(norm) = &mut self.k_norm {
            visit_child_mut(norm, "k_norm", f)?;
        }
        visit_child_mut(&mut self.proj, "proj", f)
    }

    fn set_training(&mut self, training: bool) {
        self.qkv.set_training(training);
        self.proj.set_training(training);
        self.attention_dropout.set_training(training);
        self.residual_dropout.set_training(training);
    }
}

/// Where the rows of a forward pass are: from an offset (a key/value cache's length), or in
/// the packed documents of `[B, T]` starts.
#[derive(Clone, Copy)]
enum At<'a> {
    Offset(usize),
    Documents(&'a Array),
}

/// Queries (`[B, heads, T, head_dim]`), keys and values (`[B, kv_heads, T, head_dim]`).
struct Heads {
    q: Tensor,
    k: Tensor,
    v: Tensor,
}

impl CausalSelfAttention {
    /// The heads of the `qkv` layer's output (`[B, T, (heads + 2 kv_heads) head_dim]`), the
    /// queries and keys normed and turned as the family does, at the positions `at` says; also
    /// the batch and the length.
    fn heads_of(&self, qkv: &Tensor, at: At<'_>) -> Result<(Heads, usize, usize)> {
        let (h, kv, d) = (self.heads, self.kv_heads, self.head_dim);
        let &[b, t, n] = qkv.dims() else {
            let detail = format!("qkv of shape {}: expected [batch, time, qkv]", qkv.shape());
            return Err(Error::config("attention input", detail));
        };
        if n != (h + 2 * kv) * d {
            let detail = format!(
                "qkv of shape {}: {h} query and 2 x {kv} key/value heads of {d} need {}",
                qkv.shape(),
                (h + 2 * kv) * d
            );
            return Err(Error::config("attention input", detail));
        }
        let parts = qkv.split(2, &[h * d, kv * d, kv * d])?;
        // [B, T, heads * D] -> [B, heads, T, D], normed and turned.
        let split = |m: &Tensor, heads: usize, norm: Option<&RmsNorm>, turn: bool| {
            let mut m = m.reshape([b, t, heads, d])?;
            if let Some(norm) = norm {
                m = norm.forward(&m)?;
            }
            let m = m.permute(&[0, 2, 1, 3])?;
            match (&self.rotary, turn, at) {
                (Some(rotary), true, At::Offset(offset)) => rotary.apply(&m, offset),
                (Some(rotary), true, At::Documents(starts)) => {
                    rotary.apply_in_documents(&m, starts)
                }
                _ => Ok(m),
            }
        };
        let q = split(&parts[0], h, self.q_norm.as_ref(), true)?;
        let k = split(&parts[1], kv, self.k_norm.as_ref(), true)?;
        let v = split(&parts[2], kv, None, false)?;
        Ok((Heads { q, k, v }, b, t))
    }

    /// The `qkv` layer's output for `x`, which must be `[batch, time, width]`.
    fn projected(&self, x: &Tensor) -> Result<Tensor> {
        if x.dims().len() != 3 {
            return Err(Error::config(
                "attention input",
                format!("shape {}: expected [batch, time, width]", x.shape()),
            ));
        }
        self.qkv.forward(x)
    }

    /// The heads' outputs (`[B, heads, t, D]`) merged to `[B, t, heads * D]` and projected,
    /// keeping the heads (which attention keeps anyway) rather than a merged copy.
    /// With adapters that read a dropped-out input, the heads are merged first and the
    /// adapters keep the merged copy.
    fn merged(&self, y: &Tensor) -> Result<Tensor> {
        if let Some(products) = self.proj.products() {
            return self.proj.from_products(y.merged_heads_linears(&products)?);
        }
        let &[b, h, t, d] = y.dims() else {
            let detail = format!("heads of shape {}: expected [B, heads, T, D]", y.shape());
            return Err(Error::config("attention output", detail));
        };
        let merged = y.permute(&[0, 2, 1, 3])?.reshape([b, t, h * d])?;
        self.proj.forward(&merged)
    }

    fn scale(&self) -> f64 {
        self.scale
    }

    /// The attention of queries, keys and values already projected (`qkv`, the `qkv` layer's
    /// output), through the output projection: [`Module::forward`] after its first product.
    pub fn attend(&self, qkv: &Tensor) -> Result<Tensor> {
        self.attend_in(qkv, None)
    }

    /// [`attend`](Self::attend) over packed documents where `starts` is given (`[B, T]`, U32;
    /// see [`headroom_kernels::ops::documents`]): each position attends only within its
    /// document, and its rotary position is its place in it.
    pub fn attend_in(&self, qkv: &Tensor, starts: Option<&Array>) -> Result<Tensor> {
        let at = starts.map_or(At::Offset(0), At::Documents);
        let (Heads { q, k, v }, _, _) = self.heads_of(qkv, at)?;
        let y = if self.materialized {
            self.materialized_attention(&q, &k, &v, starts)?
        } else {
            let dropout = self
                .attention_dropout
                .next_mask_seed()
                .map(|seed| AttentionDropout {
                    p: self.attention_dropout.p(),
                    seed,
                });
            let how = Attention {
                scale: self.scale(),
                causal: true,
                window: self.window,
                dropout,
            };
            q.scaled_dot_product_attention_in_documents(&k, &v, how, starts)?
        };
        self.residual_dropout.forward(&self.merged(&y)?)
    }

    /// [`Module::forward`] over packed documents where `starts` is given ([`Self::attend_in`]).
    pub fn forward_in(&self, x: &Tensor, starts: Option<&Array>) -> Result<Tensor> {
        self.attend_in(&self.projected(x)?, starts)
    }

    /// The attention with its `[B, heads, T, T]` weights formed: each group of query heads
    /// that shares a key/value head is one batch of rows of the product with that head.
    fn materialized_attention(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        starts: Option<&Array>,
    ) -> Result<Tensor> {
        let &[b, h, t, d] = q.dims() else {
            unreachable!("queries are [B, heads, T, D]")
        };
        let (kv, group) = (self.kv_heads, h / self.kv_heads);
        // Scale, causal mask and softmax in one pass that keeps only the weights; a window
        // masks the scores first.
        let scores = q.reshape([b, kv, group * t, d])?.matmul_t(k, false, true)?;
        let weights = match (self.window, starts) {
            (_, Some(starts)) => scores
                .add(&document_mask(&scores, group, self.window, starts)?)?
                .reshape([b, h, t, t])?
                .attention_softmax(self.scale(), false)?,
            (None, None) => scores
                .reshape([b, h, t, t])?
                .attention_softmax(self.scale(), true)?,
            (Some(window), None) => scores
                .add(&mask(&scores, (0, t), group, Some(window))?)?
                .reshape([b, h, t, t])?
                .attention_softmax(self.scale(), false)?,
        };
        let weights = self.attention_dropout.forward(&weights)?;
        Ok(weights
            .reshape([b, kv, group * t, t])?
            .matmul(v)?
            .reshape([b, h, t, d])?)
    }
}

impl CausalSelfAttention {
    /// The attention of `x` (`[B, t, C]`, normalized) at the `t` positions that follow those of
    /// `past`, over the past keys and values and its own (causally among its own), with the
    /// keys and values of every position seen, `past`'s followed by its own (only the
    /// key/value heads). Inference only: no dropout. Without a past (a prompt) it runs
    /// memory-efficiently.
    pub(crate) fn forward_cached(
        &self,
        x: &Tensor,
        past: Option<&BlockKv>,
    ) -> Result<(Tensor, BlockKv)> {
        let offset = past.map_or(0, BlockKv::len);
        let (Heads { q, k, v }, b, t) = self.heads_of(&self.projected(x)?, At::Offset(offset))?;
        let kv = match past {
            None => BlockKv { keys: k, values: v },
            Some(past) => BlockKv {
                keys: Tensor::concat(&[&past.keys, &k], 2)?,
                values: Tensor::concat(&[&past.values, &v], 2)?,
            },
        };
        let y = if offset == 0 && !self.materialized {
            let how = Attention {
                scale: self.scale(),
                causal: true,
                window: self.window,
                dropout: None,
            };
            q.scaled_dot_product_attention(&kv.keys, &kv.values, how)?
        } else {
            // [B, kv_heads, group * t, offset + t] scores, each group of query heads as rows
            // over its key/value head; the new positions do not see each other's future, nor
            // keys that have left their window.
            let (h, d) = (self.heads, self.head_dim);
            let group = h / self.kv_heads;
            let mut scores = q
                .reshape([b, self.kv_heads, group * t, d])?
                .matmul_t(&kv.keys, false, true)?;
            if t > 1 || self.window.is_some_and(|w| offset + t > w) {
                scores = scores.add(&mask(&scores, (offset, t), group, self.window)?)?;
            }
            scores
                .attention_softmax(self.scale(), false)?
                .matmul(&kv.values)?
                .reshape([b, h, t, d])?
        };
        Ok((self.merged(&y)?, kv))
    }
}

/// `[group * t, offset + t]` in the dtype of `scores`: minus infinity where the column (a key's
/// position) is after the row's query position (`offset + row % t`) or, with a window, at or
/// before that position less the window; 0 elsewhere.
fn mask(
    scores: &Tensor,
    (offset, t): (usize, usize),
    group: usize,
    window: Option<usize>,
) -> Result<Tensor> {
    let cols = offset + t;
    let mask: Vec<f64> = (0..group * t * cols)
        .map(|i| {
            let (key, query) = (i % cols, offset + (i / cols) % t);
            let gone = window.is_some_and(|w| key + w <= query);
            match key > query || gone {
                true => f64::NEG_INFINITY,
                false => 0.0,
            }
        })
        .collect();
    Ok(Tensor::from_f64(
        scores.device(),
        [group * t, cols],
        scores.dtype(),
        &mask,
    )?)
}

/// `[B, 1, group * t, t]` in the dtype of `scores` (`[B, kv_heads, group * t, t]`): minus
/// infinity where the key is after the row's query (`row % t`), before its document's start
/// (`starts`, `[B, t]`) or, with a window, at or before the query less the window; 0
/// elsewhere. The starts are read back to the host; the meta device, which holds no values,
/// gets zeros of the same shape.
fn document_mask(
    scores: &Tensor,
    group: usize,
    window: Option<usize>,
    starts: &Array,
) -> Result<Tensor> {
    let &[b, _, rows, t] = scores.dims() else {
        unreachable!("scores are [B, kv_heads, group * T, T]")
    };
    let shape = [b, 1, rows, t];
    if starts.device().kind() == DeviceKind::Meta {
        return Ok(Tensor::new(Array::zeros(
            scores.device(),
            shape,
            scores.dtype(),
        )?));
    }
    let starts = starts.to_host::<u32>()?;
    let mask: Vec<f64> = (0..b * group * t * t)
        .map(|i| {
            let (key, query, row) = (i % t, (i / t) % t, i / (group * t * t));
            let start = starts[row * t + query] as usize;
            let gone = window.is_some_and(|w| key + w <= query);
            match key > query || key < start || gone {
                true => f64::NEG_INFINITY,
                false => 0.0,
            }
        })
        .collect();
    Ok(Tensor::from_f64(
        scores.device(),
        shape,
        scores.dtype(),
        &mask,
    )?)
}
