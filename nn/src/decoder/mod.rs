//! The decoder skeleton every family shares: a token embedding (and learned positions for
//! GPT-2), pre-norm blocks, a final norm and a vocabulary head; its parts vary by [`Family`](crate::Family).

mod cached;
mod documents;
mod placement;
mod quantized_weights;
mod sharded;

pub use placement::{HEAD_CHUNK_LOGITS, Placement};

use std::borrow::Cow;

use headroom_autograd::Tensor;
use headroom_collectives::Collective;
use headroom_kernels::ops::quant::{QuantFormat, Quantized};
use headroom_kernels::{Array, DType, Device};

use crate::error::{Error, Result};
use crate::init::{Init, Initializer};
use crate::layer_kind::LayerKind;
use crate::layers::activation::{Dropout, DropoutCounter};
use crate::layers::block::Block;
use crate::layers::block_in_documents::BlockInDocuments;
use crate::layers::embedding::Embedding;
use crate::layers::linear::Linear;
use crate::layers::linear_weight::Weight;
use crate::layers::norm::Norm;
use crate::models::GptConfig;
use crate::module::{Module, visit_child, visit_child_mut};
use crate::recomputed_modules::{
    Recompute, recomputed, recomputed_offloaded, recomputed_sharded, recomputed_streamed,
};

/// A decoder-only transformer. `forward` maps token ids (`[B, T]`, U32, `T <= context`) to
/// logits (`[B, T, vocab]`). Parameters of GPT-2's family: `tok_emb.weight`, `pos_emb.weight`,
/// `blocks.{i}.{ln1,attn.qkv,attn.proj,ln2,mlp.fc,mlp.proj}.{weight,bias}`, `ln_f.{weight,bias}`,
/// and `head.weight` unless the head is tied to the token embedding. Of the Llama family:
/// `tok_emb.weight`, `blocks.{i}.{ln1,attn.qkv,attn.proj,ln2,mlp.gate,mlp.up,mlp.down}.weight`
/// (and `attn.qkv.bias` with q/k/v biases, `attn.{q_norm,k_norm}.weight` with query/key norms),
/// `ln_f.weight` and `head.weight` unless tied.
///
/// ```
/// use headroom_nn::{Family, Gpt, GptConfig, Initializer, Module};
/// use headroom_autograd::Tensor;
/// use headroom_kernels::{Device, DeviceConfig, DType};
/// let cpu = Device::cpu(DeviceConfig::new(64 << 20))?;
/// let config = GptConfig {
///     vocab: 16, context: 8, width: 32, heads: 4, layers: 2, dropout: 0.0, tie_embeddings: false,
///     family: Family::Gpt2,
/// };
/// let gpt = Gpt::new(&mut Initializer::new(&cpu, DType::F32, 1), config)?;
/// let ids = Tensor::from_host(&cpu, [2, 5], &[1u32, 2, 3, 4, 5, 6, 7, 8, 9, 10])?;
/// assert_eq!(gpt.forward(&ids)?.dims(), [2, 5, 16]);
/// # Ok::<(), headroom_nn::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Gpt {
    config: GptConfig,
    /// `[vocab, width]`.
    pub tok_emb: Embedding,
    /// `[context, width]`, GPT-2's learned positions; none where positions turn the heads.
    pub pos_emb: Option<Embedding>,
    /// The blocks.
    pub blocks: Vec<Block>,
    /// The final normalization.
    pub ln_f: Norm,
    /// `width -> vocab`, no bias; none when tied to `tok_emb` (whose weight has its shape).
    pub head: Option<Linear>,
    dropout: Dropout,
    counter: DropoutCounter,
    /// Where its parts live and what it keeps; the blocks' MLP tiles and the blocks' tensors'
    /// device follow it.
    pub(super) placement: Placement,
}

impl Gpt {
    /// A decoder of `config`, initialized as GPT-2: normal weights with std 0.02 (the
    /// projections into the residual stream `0.02 / sqrt(2 * layers)`), zero biases, norms'
    /// scales of 1.
    pub fn new(init: &mut Initializer, config: GptConfig) -> Result<Self> {
        Self::build(init, config, None)
    }

    /// [`Gpt::new`] with its blocks' weights drawn straight into `host`, the device's host
    /// tier, and streamed from there ([`Gpt::set_offload_weights`]): the device never holds
    /// them all, not even while the model is made. The same weights as [`Gpt::new`]'s.
    pub fn new_offloaded(init: &mut Initializer, config: GptConfig, host: &Device) -> Result<Self> {
        Self::build(init, config, Some(host))
    }

    /// A decoder of `config`, its blocks drawn on `host` when given.
    fn build(init: &mut Initializer, config: GptConfig, host: Option<&Device>) -> Result<Self> {
        config.validate()?;
        let counter = DropoutCounter::default();
        let c = config.width;
        // Where the blocks' layers are stored quantized, so is the token embedding, unless the
        // head reads it too; the positions and the head stay tensors (the fused loss reads the
        // head in chunks).
        let quantize = init.quantize();
        let embedding = quantize.filter(|_| !config.tie_embeddings);
        let normal = Init::Normal(0.02);
        let mut tok_emb = stored(init, embedding, |init| {
            Embedding::new(init, config.vocab, c, normal)
        })?;
        init.drawn("tok_emb", &mut tok_emb)?;
        let pos_emb = match config.family.learned_positions() {
            true => {
                let mut pos_emb = stored(init, None, |init| {
                    Embedding::new(init, config.context, c, normal)
                })?;
                init.drawn("pos_emb", &mut pos_emb)?;
                Some(pos_emb)
            }
            false => None,
        };
        let (blocks, mut ln_f) =
            config
                .family
                .assemble(init, &config.block_shape(), &counter, host)?;
        init.drawn("ln_f", &mut ln_f)?;
        let head = match config.tie_embeddings {
            true => None,
            false => {
                let mut head = stored(init, None, |init| {
                    Linear::with_init(init, c, config.vocab, false, normal, Init::Constant(0.0))
                })?;
                init.drawn("head", &mut head)?;
                Some(head)
            }
        };
        let dropout = Dropout::new(config.dropout, init.next_seed(), counter.clone())?;
        Ok(Self {
            config,
            tok_emb,
            pos_emb,
            blocks,
            ln_f,
            head,
            dropout,
            counter,
            placement: Placement {
                offload_weights: host.cloned(),
                ..Placement::for_vocab(config.vocab)
            },
        })
    }

    /// Its configuration.
    pub fn config(&self) -> &GptConfig {
        &self.config
    }

    /// True while training (dropout on), false in evaluation ([`Module::set_training`]).
    pub fn is_training(&self) -> bool {
        self.dropout.is_training()
    }

    /// The dropout masks drawn so far (saved with a checkpoint so a resumed run draws the same).
    pub fn dropout_counter(&self) -> &DropoutCounter {
        &self.counter
    }

    /// The mean cross-entropy of the next tokens: `ids` (`[B, T]`) against `targets` (`[B, T]`,
    /// U32), over the positions whose target is not `ignore`. With a head chunk (the default)
    /// the head and the loss run fused.
    pub fn loss(&self, ids: &Tensor, targets: &Tensor, ignore: Option<u32>) -> Result<Tensor> {
        self.loss_of(self.hidden_in(ids, None)?, targets, ignore)
    }

    /// The mean cross-entropy of the final hidden states `h` (`[B, T, C]`) against `targets`.
    fn loss_of(&self, h: Tensor, targets: &Tensor, ignore: Option<u32>) -> Result<Tensor> {
        let _head = LayerKind::Head.scope(h.device());
        let &[b, t, c] = h.dims() else {
            unreachable!("the hidden states are [B, T, C]")
        };
        if targets.dims() != [b, t] {
            return Err(Error::config(
                "gpt loss",
                format!("targets {} for ids of shape [{b}, {t}]", targets.shape()),
            ));
        }
        let targets = targets.reshape([b * t])?;
        match self.placement.head_chunk {
            Some(chunk) => {
                let h = h.reshape([b * t, c])?;
                if let Some((weight, world, whole)) = self.sliced_head() {
                    // Each rank's logits span a slice of the vocabulary: as many rows again.
                    let chunk = chunk.saturating_mul(world.world_size());
                    let sharded = (world, whole);
                    return Ok(
                        h.sharded_linear_cross_entropy(weight, &targets, ignore, chunk, sharded)?
                    );
                }
                let weight = self.whole_head_weight()?;
                Ok(h.linear_cross_entropy(&weight, &targets, ignore, chunk)?)
            }
            None => {
                let logits = self.head(&h)?;
                let vocab = self.config.vocab;
                Ok(logits
                    .reshape([b * t, vocab])?
                    .cross_entropy(&targets, ignore)?)
            }
        }
    }

    /// The final normalized hidden states, `[B, T, C]`: what the head reads.
    pub fn hidden(&self, ids: &Tensor) -> Result<Tensor> {
        self.hidden_in(ids, None)
    }

    /// [`Gpt::hidden`], over packed documents where `documents` holds their starts and each
    /// token's position within its document (`[B, T]` U32 both).
    fn hidden_in(&self, ids: &Tensor, documents: Option<(&Array, &Tensor)>) -> Result<Tensor> {
        let &[_, t] = ids.dims() else {
            return Err(Error::config(
                "gpt input",
                format!("ids of shape {}: expected [batch, time]", ids.shape()),
            ));
        };
        if t == 0 || t > self.config.context {
            return Err(Error::config(
                "gpt input",
                format!("{t} positions for a context of {}", self.config.context),
            ));
        }
        let device = ids.device().clone();
        let mut x = {
            let _embedding = LayerKind::Embedding.scope(&device);
            let x = match documents {
                Some((_, positions)) => self.embedded_in_documents(ids, positions)?,
                None => self.embedded(ids, 0)?,
            };
            self.dropout.forward(&x)?
        };
        let starts = documents.map(|(starts, _)| starts);
        let streamed = self.streamed_pass(starts);
        for (i, block) in self.blocks.iter().enumerate() {
            if let Some(streamed) = &streamed {
                let offload = self.placement.offload_activations.as_ref();
                x = recomputed_streamed(&streamed[i], &self.counter, &x, offload)?;
                continue;
            }
            let shards = self.placement.shards.as_ref();
            if let Some(shards) = shards.filter(|_| self.placement.recompute.whole_blocks()) {
                let block = BlockInDocuments {
                    block: block.clone(),
                    starts: starts.cloned(),
                };
                let offload = self.placement.offload_activations.as_ref();
                let prefix = format!("blocks.{i}");
                x = recomputed_sharded(&block, (shards, &prefix), &self.counter, &x, offload)?;
                continue;
            }
            let gathered = match shards {
                // Held by nothing between the passes: gathered again for the backward pass.
                Some(shards) => {
                    let prefix = format!("blocks.{i}");
                    Cow::Owned(shards.gathered_again_in_backward(block, &prefix)?)
                }
                None => Cow::Borrowed(block),
            };
            let block = gathered.as_ref();
            x = match self.placement.recompute {
                Recompute::None => block.forward_in(&x, starts)?,
                Recompute::Cheap => block.forward_recomputing_cheap_in(&x, false, starts)?,
                Recompute::CheapUp => block.forward_recomputing_cheap_in(&x, true, starts)?,
                Recompute::Blocks | Recompute::BlocksTiledMlp { .. } => {
                    // The segment keeps the documents: its recomputation attends within them.
                    let block = BlockInDocuments {
                        block: block.clone(),
                        starts: starts.cloned(),
                    };
                    match &self.placement.offload_activations {
                        Some(host) => {
                            let ahead = self.placement.fetch_ahead;
                            recomputed_offloaded(&block, &self.counter, &x, host, ahead)?
                        }
                        None => recomputed(&block, &self.counter, &x)?,
                    }
                }
            };
        }
        let _norm = LayerKind::Norm.scope(&device);
        self.whole(&self.ln_f, "ln_f")?.forward(&x)
    }

    /// The embeddings of `ids` (`[B, t]`) at positions from `offset`: the tokens', plus the
    /// positions' where they are learned.
    fn embedded(&self, ids: &Tensor, offset: usize) -> Result<Tensor> {
        let x = self.token_embedded(ids)?;
        match &self.pos_emb {
            Some(pos_emb) => {
                let t = ids.dims().get(1).copied().unwrap_or(0);
                let pos_emb = self.whole(pos_emb, "pos_emb")?;
                Ok(x.add(&pos_emb.weight.values()?.narrow(0, offset, t)?)?)
            }
            None => Ok(x),
        }
    }

    /// The tokens' embeddings of `ids`, scaled where the family scales them.
    fn token_embedded(&self, ids: &Tensor) -> Result<Tensor> {
        let x = self.token_rows(ids)?;
        match self.config.family.embedding_scale(self.config.width) {
            Some(scale) => Ok(x.scale(rounded_to(scale, x.dtype()))?),
            None => Ok(x),
        }
    }

    /// The head's weight, `[vocab, width]`: its own, or the token embedding's when tied.
    pub fn head_weight(&self) -> Result<&Tensor> {
        let weight = match &self.head {
            Some(head) => &head.weight,
            None => &self.tok_emb.weight,
        };
        weight
            .dense()
            .ok_or_else(|| Error::config("gpt head", "its weight is stored quantized".to_owned()))
    }

    /// The logits of the hidden states `h` (`[..., width]`).
    fn head(&self, h: &Tensor) -> Result<Tensor> {
        let h = h.for_matmul()?;
        match &self.head {
            Some(head) => self.whole(head, "head")?.forward(&h),
            None => Ok(h.linear(&self.whole_head_weight()?, None)?),
        }
    }

    /// Forms every block's `[B, H, T, T]` attention weights when `on`, instead of the
    /// memory-efficient kernels (see [`CausalSelfAttention::set_materialized`]): the
    /// reference the tests compare with, and what a step cost before.
    ///
    /// [`CausalSelfAttention::set_materialized`]: crate::CausalSelfAttention::set_materialized
    pub fn set_materialized_attention(&mut self, on: bool) {
        for block in &mut self.blocks {
            block.attn.set_materialized(on);
        }
    }
}

/// What `draw` draws with the initializer's weights stored as `quantize` says, the
/// initializer's own setting again after.
fn stored<T>(
    init: &mut Initializer,
    quantize: Option<QuantFormat>,
    draw: impl FnOnce(&mut Initializer) -> Result<T>,
) -> Result<T> {
    let own = init.quantize();
    init.set_quantize(quantize);
    let drawn = draw(init);
    init.set_quantize(own);
    drawn
}

/// `value` rounded to `dtype` where it is a half-precision float: a scale multiplies as the
/// model's own dtype holds it (as transformers casts Gemma's embedding scale).
fn rounded_to(value: f64, dtype: DType) -> f64 {
    match dtype {
        DType::BF16 => half::bf16::from_f64(value).to_f64(),
        DType::F16 => half::f16::from_f64(value).to_f64(),
        DType::F32 => f64::from(value as f32),
        _ => value,
    }
}

impl Module for Gpt {
    fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        let h = self.hidden_in(ids, None)?;
        let _head = LayerKind::Head.scope(ids.device());
        self.head(&h)
    }

    fn visit(&self, f: &mut dyn FnMut(&str, &Tensor)) {
        visit_child(&self.tok_emb, "tok_emb", f);
        if let Some(pos_emb) = &self.pos_emb {
            visit_child(pos_emb, "pos_emb", f);
        }
        for (i, block) in self.blocks.iter().enumerate() {
            visit_child(block, &format!("blocks.{i}"), f);
        }
        visit_child(&self.ln_f, "ln_f", f);
        if let Some(head) = &self.head {
            visit_child(head, "head", f);
        }
    }

    fn visit_mut(&mut self, f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>) -> Result<()> {
        visit_child_mut(&mut self.tok_emb, "tok_emb", f)?;
        if let Some(pos_emb) = &mut self.pos_emb {
            visit_child_mut(pos_emb, "pos_emb", f)?;
        }
        for (i, block) in self.blocks.iter_mut().enumerate() {
            visit_child_mut(block, &format!("blocks.{i}"), f)?;
        }
        visit_child_mut(&mut self.ln_f, "ln_f", f)?;
        match &mut self.head {
            Some(head) => visit_child_mut(head, "head", f),
            None => Ok(()),
        }
    }

    fn visit_quantized_mut(
        &mut self,
        f: &mut dyn FnMut(&mut Quantized) -> Result<()>,
    ) -> Result<()> {
        for (_, stored) in self.quantized_weights_mut() {
            f(stored)?;
        }
        Ok(())
    }

    fn quantized_count(&self) -> usize {
        let blocks = self.blocks.iter().flat_map(Block::linears);
        let layers = blocks.map(|(_, layer)| &layer.weight);
        std::iter::once(&self.tok_emb.weight)
            .chain(layers)
            .filter_map(Weight::quantized)
            .map(|stored| stored.numel())
            .sum()
    }

    fn set_training(&mut self, training: bool) {
        self.dropout.set_training(training);
        for block in &mut self.blocks {
            block.set_training(training);
        }
    }
}
