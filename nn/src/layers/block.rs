//! The pre-norm transformer block.

use headroom_autograd::Tensor;
use headroom_kernels::Array;
use headroom_kernels::ops::quant::Quantized;

use crate::error::Result;
use crate::init::Initializer;
use crate::kv_cache::BlockKv;
use crate::layer_kind::LayerKind;
use crate::layers::activation::DropoutCounter;
use crate::layers::attention::CausalSelfAttention;
use crate::layers::block_mlp::{BlockMlp, MlpKind, each_of, products};
use crate::layers::layer_norm::LayerNorm;
use crate::layers::linear::Linear;
use crate::layers::norm::Norm;
use crate::layers::tiled_mlp::MlpSublayer;
use crate::module::{Module, visit_child, visit_child_mut};

/// `x + attn(ln1(x))`, then `+ mlp(ln2(x))`: GPT-2's pre-norm block, the Llama family's with
/// RMSNorm, grouped rotary attention and a SwiGLU MLP, and Gemma's with each sublayer's output
/// normed again (`x + post_attn(attn(ln1(x)))`).
#[derive(Debug, Clone)]
pub struct Block {
    /// Before attention.
    pub ln1: Norm,
    /// Causal self-attention.
    pub attn: CausalSelfAttention,
    /// Before the MLP.
    pub ln2: Norm,
    /// The MLP.
    pub mlp: BlockMlp,
    /// On the attention's output, where the family norms it (Gemma).
    pub post_attn: Option<Norm>,
    /// On the MLP's output, where the family norms it (Gemma).
    pub post_mlp: Option<Norm>,
    /// Rows of tokens per tile of the MLP sublayer ([`Block::set_mlp_tile`]); none: untiled.
    mlp_tile: Option<usize>,
}

impl Block {
    /// GPT-2's block of `width` features and `heads` heads; the two projections into the
    /// residual stream are initialized with std `proj_std` (GPT-2: `0.02 / sqrt(2 * layers)`).
    pub fn new(
        init: &mut Initializer,
        width: usize,
        heads: usize,
        proj_std: f64,
        dropout: (f64, &DropoutCounter),
    ) -> Result<Self> {
        let ln1 = Norm::Layer(LayerNorm::new(init, width)?);
        let attn = CausalSelfAttention::new(init, width, heads, proj_std, dropout)?;
        let ln2 = Norm::Layer(LayerNorm::new(init, width)?);
        let mlp = BlockMlp::gelu(init, width, proj_std, dropout)?;
        Ok(Self::of(ln1, attn, ln2, mlp))
    }

    /// A block of the given parts and no norms after its sublayers.
    pub fn of(ln1: Norm, attn: CausalSelfAttention, ln2: Norm, mlp: BlockMlp) -> Self {
        Self {
            ln1,
            attn,
            ln2,
            mlp,
            post_attn: None,
            post_mlp: None,
            mlp_tile: None,
        }
    }

    /// The block with norms on the outputs of its attention and its MLP, before each joins the
    /// residual stream (Gemma's `post_attention_layernorm` and `post_feedforward_layernorm`).
    pub fn with_post_norms(self, post_attn: Norm, post_mlp: Norm) -> Self {
        Self {
            post_attn: Some(post_attn),
            post_mlp: Some(post_mlp),
            ..self
        }
    }

    /// [`Module::forward`], computing the norms' outputs and the MLP's activation again in the
    /// backward pass instead of keeping them ([`Norm::linears_recomputed`],
    /// [`Tensor::gelu_linear`], [`Tensor::swiglu_linear`]): the same values and gradients, bit
    /// for bit, with an array of the width fewer kept per norm and one of the MLP's width. With
    /// `up`, a SwiGLU MLP after an RMSNorm keeps its gate alone and runs its up projection
    /// again ([`Tensor::rms_norm_swiglu`]): one array of the MLP's width fewer still.
    pub fn forward_recomputing_cheap(&self, x: &Tensor, up: bool) -> Result<Tensor> {
        self.forward_recomputing_cheap_in(x, up, None)
    }

    /// [`forward_recomputing_cheap`](Self::forward_recomputing_cheap) over packed documents
    /// where `starts` is given ([`Block::forward_in`]).
    pub fn forward_recomputing_cheap_in(
        &self,
        x: &Tensor,
        up: bool,
        starts: Option<&Array>,
    ) -> Result<Tensor> {
        let device = x.device().clone();
        let x = {
            let _attention = LayerKind::Attention.scope(&device);
            let first = |layers: &[&Linear]| self.ln1.linears_recomputed(x, layers);
            let [qkv] = products(&first, [&self.attn.qkv])?;
            x.add(&normed(
                self.post_attn.as_ref(),
                self.attn.attend_in(&qkv, starts)?,
            )?)?
        };
        let _mlp = LayerKind::Mlp.scope(&device);
        let y = match (&self.ln2, self.mlp.unbiased_swiglu()) {
            (Norm::Rms(norm), Some(weights)) if up => self
                .mlp
                .dropout
                .forward(&x.rms_norm_swiglu((&norm.scale()?, norm.eps), weights)?)?,
            _ => self
                .mlp
                .run(&|layers| self.ln2.linears_recomputed(&x, layers), true)?,
        };
        Ok(x.add(&normed(self.post_mlp.as_ref(), y)?)?)
    }
}

/// `y` normed by `norm` when there is one.
fn normed(norm: Option<&Norm>, y: Tensor) -> Result<Tensor> {
    match norm {
        Some(norm) => norm.forward(&y),
        None => Ok(y),
    }
}

impl Block {
    /// Runs [`Module::forward`]'s MLP sublayer (`mlp(ln2(x))`) over tiles of at most `rows`
    /// rows of tokens, each tile a recomputed segment (a tiled MLP): its wide intermediate
    /// exists for one tile at a time. None runs it whole.
    pub fn set_mlp_tile(&mut self, rows: Option<usize>) {
        self.mlp_tile = rows.map(|r| r.max(1));
    }

    /// Rows of tokens per tile of the MLP sublayer; none when it runs whole.
    pub fn mlp_tile(&self) -> Option<usize> {
        self.mlp_tile
    }

    /// The block at the positions that follow those of `past` (`x`: `[B, t, C]`), with the
    /// keys and values of every position seen (the attention's `forward_cached`). Inference
    /// only: no dropout.
    pub(crate) fn forward_cached(
        &self,
        x: &Tensor,
        past: Option<&BlockKv>,
    ) -> Result<(Tensor, BlockKv)> {
        let device = x.device().clone();
        let (x, kv) = {
            let _attention = LayerKind::Attention.scope(&device);
            let (y, kv) = self.attn.forward_cached(&self.ln1.forward(x)?, past)?;
            (x.add(&normed(self.post_attn.as_ref(), y)?)?, kv)
        };
        let _mlp = LayerKind::Mlp.scope(&device);
        let h = self.ln2.forward(&x)?;
        let y = self
            .mlp
            .without_dropout(&|layers| each_of(&h, layers), false)?;
        Ok((x.add(&normed(self.post_mlp.as_ref(), y)?)?, kv))
    }
}

impl Block {
    /// Its linear layers with their names under the block (`attn.qkv`, `mlp.down`), in
    /// visiting order.
    pub fn linears(&self) -> Vec<(&'static str, &Linear)> {
        let mut out = vec![("attn.qkv", &self.attn.qkv), ("attn.proj", &self.attn.proj)];
        match &self.mlp.kind {
            MlpKind::Gelu { fc, proj } => out.extend([("mlp.fc", fc), ("mlp.proj", proj)]),
            MlpKind::SwiGlu { gate, up, down } | MlpKind::GeGlu { gate, up, down } => {
                out.extend([("mlp.gate", gate), ("mlp.up", up), ("mlp.down", down)])
            }
        }
        out
    }

    /// [`linears`](Self::linears), mutably.
    pub fn linears_mut(&mut self) -> Vec<(&'static str, &mut Linear)> {
        let mut out = vec![
            ("attn.qkv", &mut self.attn.qkv),
            ("attn.proj", &mut self.attn.proj),
        ];
        match &mut self.mlp.kind {
            MlpKind::Gelu { fc, proj } => out.extend([("mlp.fc", fc), ("mlp.proj", proj)]),
            MlpKind::SwiGlu { gate, up, down } | MlpKind::GeGlu { gate, up, down } => {
                out.extend([("mlp.gate", gate), ("mlp.up", up), ("mlp.down", down)])
            }
        }
        out
    }
}

impl Module for Block {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_in(x, None)
    }

    fn visit(&self, f: &mut dyn FnMut(&str, &Tensor)) {
        visit_child(&self.ln1, "ln1", f);
        visit_child(&self.attn, "attn", f);
        if let Some(norm) = &self.post_attn {
            visit_child(norm, "post_attn", f);
        }
        visit_child(&self.ln2, "ln2", f);
        visit_child(&self.mlp, "mlp", f);
        if let Some(norm) = &self.post_mlp {
            visit_child(norm, "post_mlp", f);
        }
    }

    fn visit_mut(&mut self, f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>) -> Result<()> {
        visit_child_mut(&mut self.ln1, "ln1", f)?;
        visit_child_mut(&mut self.attn, "attn", f)?;
        if let Some(norm) = &mut self.post_attn {
            visit_child_mut(norm, "post_attn", f)?;
        }
        visit_child_mut(&mut self.ln2, "ln2", f)?;
        visit_child_mut(&mut self.mlp, "mlp", f)?;
        match &mut self.post_mlp {
            Some(norm) => visit_child_mut(norm, "post_mlp", f),
            None => Ok(()),
        }
    }

    fn visit_quantized_mut(
        &mut self,
        f: &mut dyn FnMut(&mut Quantized) -> Result<()>,
    ) -> Result<()> {
        for (_, linear) in self.linears_mut() {
            linear.visit_quantized_mut(f)?;
        }
        Ok(())
    }

    fn set_training(&mut self, training: bool) {
        self.attn.set_training(training);
        self.mlp.set_training(training);
    }
}

impl Block {
    /// [`Module::forward`] over packed documents where `starts` is given (`[B, T]`, U32; see
    /// [`headroom_kernels::ops::documents`]): each position attends only within its document.
    pub fn forward_in(&self, x: &Tensor, starts: Option<&Array>) -> Result<Tensor> {
        // Each norm's output only feeds its sublayer's first product: cast for it right away
        // (under autocast), so the f32 output is not held through the whole sublayer.
        let device = x.device().clone();
        let h = {
            let _norm = LayerKind::Norm.scope(&device);
            self.ln1.forward(x)?.for_matmul()?
        };
        let x = {
            let _attention = LayerKind::Attention.scope(&device);
            x.add(&normed(
                self.post_attn.as_ref(),
                self.attn.forward_in(&h, starts)?,
            )?)?
        };
        drop(h);
        if let Some(rows) = self.mlp_tile {
            let _mlp = LayerKind::Mlp.scope(&device);
            let sublayer = MlpSublayer {
                norm: self.ln2.clone(),
                mlp: self.mlp.clone(),
                post: self.post_mlp.clone(),
            };
            return Ok(x.add(&sublayer.tiled(&x, rows)?)?);
        }
        let h = {
            let _norm = LayerKind::Norm.scope(&device);
            self.ln2.forward(&x)?.for_matmul()?
        };
        let _mlp = LayerKind::Mlp.scope(&device);
        Ok(x.add(&normed(self.post_mlp.as_ref(), self.mlp.forward(&h)?)?)?)
    }
}
