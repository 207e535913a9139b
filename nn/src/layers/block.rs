//! The pre-norm transformer block.

use headroom_autograd::Tensor;

use crate::error::Result;
use crate::init::{Init, Initializer};
use crate::kv_cache::BlockKv;
use crate::layer_kind::LayerKind;
use crate::layers::activation::{Dropout, DropoutCounter};
use crate::layers::attention::CausalSelfAttention;
use crate::layers::layer_norm::LayerNorm;
use crate::layers::linear::Linear;
use crate::module::{Module, visit_child, visit_child_mut};

/// The block's MLP: `C -> 4C`, GELU, `4C -> C`, dropout.
#[derive(Debug, Clone)]
pub struct BlockMlp {
    /// `C -> 4C`.
    pub fc: Linear,
    /// `4C -> C`.
    pub proj: Linear,
    dropout: Dropout,
}

impl Module for BlockMlp {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.fc.forward(x)?.gelu()?;
        self.dropout.forward(&self.proj.forward(&h)?)
    }

    fn visit(&self, f: &mut dyn FnMut(&str, &Tensor)) {
        visit_child(&self.fc, "fc", f);
        visit_child(&self.proj, "proj", f);
    }

    fn visit_mut(&mut self, f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>) -> Result<()> {
        visit_child_mut(&mut self.fc, "fc", f)?;
        visit_child_mut(&mut self.proj, "proj", f)
    }

    fn set_training(&mut self, training: bool) {
        self.dropout.set_training(training);
    }
}

/// `x + attn(ln1(x))`, then `+ mlp(ln2(x))` (GPT-2's pre-norm block).
#[derive(Debug, Clone)]
pub struct Block {
    /// Before attention.
    pub ln1: LayerNorm,
    /// Causal self-attention.
    pub attn: CausalSelfAttention,
    /// Before the MLP.
    pub ln2: LayerNorm,
    /// The MLP.
    pub mlp: BlockMlp,
}

impl Block {
    /// A block of `width` features and `heads` heads; the two projections into the residual
    /// stream are initialized with std `proj_std` (GPT-2: `0.02 / sqrt(2 * layers)`).
    pub fn new(
        init: &mut Initializer,
        width: usize,
        heads: usize,
        proj_std: f64,
        dropout: (f64, &DropoutCounter),
    ) -> Result<Self> {
        let ln1 = LayerNorm::new(init, width)?;
        let attn = CausalSelfAttention::new(init, width, heads, proj_std, dropout)?;
        let ln2 = LayerNorm::new(init, width)?;
        let zero = Init::Constant(0.0);
        let fc = Linear::with_init(init, width, 4 * width, true, Init::Normal(0.02), zero)?;
        let proj = Linear::with_init(init, 4 * width, width, true, Init::Normal(proj_std), zero)?;
        let (p, counter) = dropout;
        let mlp = BlockMlp {
            fc,
            proj,
            dropout: Dropout::new(p, init.next_seed(), counter.clone())?,
        };
        Ok(Self {
            ln1,
            attn,
            ln2,
            mlp,
        })
    }

    /// [`Module::forward`], computing each norm's output and the GELU's output again in the
    /// backward pass instead of keeping them ([`Tensor::layer_norm_linear`],
    /// [`Tensor::gelu_linear`]): the same values and gradients, bit for bit, with three
    /// arrays fewer kept (two of the width, one of four times it).
    pub fn forward_recomputing_cheap(&self, x: &Tensor) -> Result<Tensor> {
        fn norm(ln: &LayerNorm) -> (&Tensor, &Tensor, f64) {
            (&ln.weight, &ln.bias, ln.eps)
        }
        let device = x.device().clone();
        let qkv = &self.attn.qkv;
        let x = {
            let _attention = LayerKind::Attention.scope(&device);
            let qkv = x.layer_norm_linear(norm(&self.ln1), &qkv.weight, qkv.bias.as_ref())?;
            x.add(&self.attn.attend(&qkv)?)?
        };
        let _mlp = LayerKind::Mlp.scope(&device);
        let (fc, proj) = (&self.mlp.fc, &self.mlp.proj);
        let h = x.layer_norm_linear(norm(&self.ln2), &fc.weight, fc.bias.as_ref())?;
        let y = h.gelu_linear(&proj.weight, proj.bias.as_ref())?;
        Ok(x.add(&self.mlp.dropout.forward(&y)?)?)
    }
}

impl Block {
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
            (x.add(&y)?, kv)
        };
        let _mlp = LayerKind::Mlp.scope(&device);
        let h = self.mlp.fc.forward(&self.ln2.forward(&x)?)?.gelu()?;
        Ok((x.add(&self.mlp.proj.forward(&h)?)?, kv))
    }
}

impl Module for Block {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        // Each norm's output only feeds its sublayer's first product: cast for it right away
        // (under autocast), so the f32 output is not held through the whole sublayer.
        let device = x.device().clone();
        let h = {
            let _norm = LayerKind::Norm.scope(&device);
            self.ln1.forward(x)?.for_matmul()?
        };
        let x = {
            let _attention = LayerKind::Attention.scope(&device);
            x.add(&self.attn.forward(&h)?)?
        };
        drop(h);
        let h = {
            let _norm = LayerKind::Norm.scope(&device);
            self.ln2.forward(&x)?.for_matmul()?
        };
        let _mlp = LayerKind::Mlp.scope(&device);
        Ok(x.add(&self.mlp.forward(&h)?)?)
    }

    fn visit(&self, f: &mut dyn FnMut(&str, &Tensor)) {
        visit_child(&self.ln1, "ln1", f);
        visit_child(&self.attn, "attn", f);
        visit_child(&self.ln2, "ln2", f);
        visit_child(&self.mlp, "mlp", f);
    }

    fn visit_mut(&mut self, f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>) -> Result<()> {
        visit_child_mut(&mut self.ln1, "ln1", f)?;
        visit_child_mut(&mut self.attn, "attn", f)?;
        visit_child_mut(&mut self.ln2, "ln2", f)?;
        visit_child_mut(&mut self.mlp, "mlp", f)
    }

    fn set_training(&mut self, training: bool) {
        self.attn.set_training(training);
        self.mlp.set_training(training);
    }
}
