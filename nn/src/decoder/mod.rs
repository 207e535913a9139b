//! The decoder skeleton every family shares: a token embedding (and learned positions for
//! GPT-2), pre-norm blocks, a final norm and a vocabulary head; its parts vary by [`Family`](crate::Family).

mod quantized_weights;

use headroom_autograd::{Tensor, no_grad};
use headroom_kernels::ops::quant::Quantized;
use headroom_kernels::{DType, Device};

use crate::error::{Error, Result};
use crate::init::{Init, Initializer};
use crate::kv_cache::KvCache;
use crate::layer_kind::LayerKind;
use crate::layers::activation::{Dropout, DropoutCounter};
use crate::layers::block::Block;
use crate::layers::embedding::Embedding;
use crate::layers::linear::Linear;
use crate::layers::linear_weight::Weight;
use crate::layers::norm::Norm;
use crate::models::GptConfig;
use crate::module::{Module, visit_child, visit_child_mut};
use crate::recompute::{Recompute, recomputed, recomputed_offloaded, recomputed_streamed};
use crate::streamed_pass::Streamed;
use crate::streaming::move_to;

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
    recompute: Recompute,
    /// The host tier that recomputed blocks keep their inputs on; none: the device.
    offload: Option<Device>,
    /// The host tier the blocks' weights live on, streamed to the device block by block;
    /// none: the device.
    weights_host: Option<Device>,
    /// Whether offloaded block inputs and streamed weights come back one block ahead.
    fetch_ahead: bool,
    /// Rows per chunk of the fused head and loss in [`Gpt::loss`]; none: the logits whole.
    head_chunk: Option<usize>,
}

/// Logits per chunk of a new GPT's fused head (32 MiB in f32): GPT-2's vocabulary takes 166
/// rows a chunk, a small one the whole batch at once.
pub const HEAD_CHUNK_LOGITS: usize = 8 << 20;

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
        if config.tie_embeddings {
            init.set_quantize(None);
        }
        let tok_emb = Embedding::new(init, config.vocab, c, Init::Normal(0.02))?;
        init.set_quantize(None);
        let pos_emb = match config.family.learned_positions() {
            true => Some(Embedding::new(init, config.context, c, Init::Normal(0.02))?),
            false => None,
        };
        init.set_quantize(quantize);
        let (blocks, ln_f) = config
            .family
            .assemble(init, &config.block_shape(), &counter, host)?;
        let zero = Init::Constant(0.0);
        init.set_quantize(None);
        let head = match config.tie_embeddings {
            true => None,
            false => Some(Linear::with_init(
                init,
                c,
                config.vocab,
                false,
                Init::Normal(0.02),
                zero,
            )?),
        };
        init.set_quantize(quantize);
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
            recompute: Recompute::None,
            offload: None,
            weights_host: host.cloned(),
            fetch_ahead: true,
            head_chunk: Some((HEAD_CHUNK_LOGITS / config.vocab.max(1)).max(1)),
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

    /// What the blocks compute again in the backward pass ([`Recompute`]): nothing (the
    /// default); the cheap elementwise results, each norm's and GELU's output (a quarter or so
    /// of a block's activations, for no second product); or whole blocks, each run as a
    /// recomputed segment ([`recomputed`]) that keeps only its input (activation
    /// checkpointing: about half the peak for a fifth less throughput on the training bench's
    /// GPT). The gradients are the same, bit for bit.
    ///
    /// [`Recompute::BlocksTiledMlp`] recomputes whole blocks and runs each block's MLP over
    /// tiles of the rows of tokens ([`Block::set_mlp_tile`]).
    pub fn set_recompute(&mut self, recompute: Recompute) {
        self.recompute = recompute;
        let tile = match recompute {
            Recompute::BlocksTiledMlp { rows } => Some(rows),
            _ => None,
        };
        for block in &mut self.blocks {
            block.set_mlp_tile(tile);
        }
    }

    /// What the blocks compute again in the backward pass.
    pub fn recompute(&self) -> Recompute {
        self.recompute
    }

    /// Keeps each recomputed block's input on `host`, the device's host tier, from the block's
    /// forward pass until its backward pass copies it back (activation offloading,
    /// [`recomputed_offloaded`]): with whole blocks recomputed, the device then keeps no
    /// activation of the blocks between the two passes. Other recomputations keep theirs on
    /// the device. None (the default) keeps every input on the device.
    pub fn set_offload_activations(&mut self, host: Option<Device>) {
        self.offload = host;
    }

    /// The host tier the recomputed blocks keep their inputs on, if any.
    pub fn offload_activations(&self) -> Option<&Device> {
        self.offload.as_ref()
    }

    /// Keeps the blocks' weights on `host`, the device's host tier, and streams each block's
    /// to the device as it runs, in the forward pass and again in the backward pass, dropping
    /// them after (ZeRO-Infinity's parameter offload, [`recomputed_streamed`]), each block's
    /// copies starting while the block before it runs (the block after it, in the backward
    /// pass: [`Streamed`]; as it starts without [`Gpt::set_fetch_ahead`]): the device holds
    /// two blocks' weights at a time (one in turn), and their gradients arrive on the host,
    /// where the optimizer updates them. Streamed blocks are recomputed whole whatever
    /// [`Gpt::set_recompute`] says (their MLPs tiled as it says). Moves every block tensor
    /// there now, and the blocks' weights stored quantized (QLoRA's base, which streams as its
    /// codes and scales), and back to the device with none.
    pub fn set_offload_weights(&mut self, host: Option<Device>) -> Result<()> {
        let to = match &host {
            Some(host) => host.clone(),
            None => self.ln_f.weight().device().clone(),
        };
        for block in &mut self.blocks {
            move_to(block, &to)?;
        }
        self.weights_host = host;
        Ok(())
    }

    /// The host tier the blocks' weights live on, if they are streamed.
    pub fn offload_weights(&self) -> Option<&Device> {
        self.weights_host.as_ref()
    }

    /// Whether the blocks' offloaded inputs and streamed weights come back one block ahead of
    /// their use, their copies beside the kernels of the block before (on by default), or as
    /// each block starts, its kernels waiting for them: a block's input and a block's weights
    /// less on the device, for the time of the copies on a GPU.
    pub fn set_fetch_ahead(&mut self, ahead: bool) {
        self.fetch_ahead = ahead;
    }

    /// Whether offloaded block inputs and streamed weights come back one block ahead.
    pub fn fetch_ahead(&self) -> bool {
        self.fetch_ahead
    }

    /// The blocks as one pass of streamed modules, where their weights are streamed.
    fn streamed_pass(&self) -> Option<Vec<Streamed<Block>>> {
        let host = self.weights_host.as_ref();
        host.map(|_| Streamed::pass(&self.blocks, self.fetch_ahead))
    }

    /// Computes the head and the loss of [`Gpt::loss`] together, `rows` rows of logits at a time
    /// ([`Tensor::linear_cross_entropy`]): the `[B, T, vocab]` logits never exist whole. None
    /// forms them whole and takes their cross-entropy (the reference). By default a chunk holds
    /// about 8M logits (32 MiB in f32).
    pub fn set_head_chunk(&mut self, rows: Option<usize>) {
        self.head_chunk = rows.map(|r| r.max(1));
    }

    /// Rows per chunk of the fused head and loss; none when the logits are formed whole.
    pub fn head_chunk(&self) -> Option<usize> {
        self.head_chunk
    }

    /// The mean cross-entropy of the next tokens: `ids` (`[B, T]`) against `targets` (`[B, T]`,
    /// U32), over the positions whose target is not `ignore`. With a head chunk (the default)
    /// the head and the loss run fused.
    pub fn loss(&self, ids: &Tensor, targets: &Tensor, ignore: Option<u32>) -> Result<Tensor> {
        let h = self.hidden(ids)?;
        let _head = LayerKind::Head.scope(ids.device());
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
        match self.head_chunk {
            Some(chunk) => {
                let weight = self.head_weight()?;
                let h = h.reshape([b * t, c])?;
                Ok(h.linear_cross_entropy(weight, &targets, ignore, chunk)?)
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
            let x = self.embedded(ids, 0)?;
            self.dropout.forward(&x)?
        };
        let streamed = self.streamed_pass();
        for (i, block) in self.blocks.iter().enumerate() {
            if let Some(streamed) = &streamed {
                x = recomputed_streamed(&streamed[i], &self.counter, &x, self.offload.as_ref())?;
                continue;
            }
            x = match self.recompute {
                Recompute::None => block.forward(&x)?,
                Recompute::Cheap => block.forward_recomputing_cheap(&x, false)?,
                Recompute::CheapUp => block.forward_recomputing_cheap(&x, true)?,
                Recompute::Blocks | Recompute::BlocksTiledMlp { .. } => match &self.offload {
                    Some(host) => {
                        recomputed_offloaded(block, &self.counter, &x, host, self.fetch_ahead)?
                    }
                    None => recomputed(block, &self.counter, &x)?,
                },
            };
        }
        let _norm = LayerKind::Norm.scope(&device);
        self.ln_f.forward(&x)
    }

    /// The embeddings of `ids` (`[B, t]`) at positions from `offset`: the tokens', plus the
    /// positions' where they are learned.
    fn embedded(&self, ids: &Tensor, offset: usize) -> Result<Tensor> {
        let mut x = self.tok_emb.forward(ids)?;
        if let Some(scale) = self.config.family.embedding_scale(self.config.width) {
            x = x.scale(rounded_to(scale, x.dtype()))?;
        }
        match &self.pos_emb {
            Some(pos_emb) => {
                let t = ids.dims().get(1).copied().unwrap_or(0);
                Ok(x.add(&pos_emb.weight.values()?.narrow(0, offset, t)?)?)
            }
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
            Some(head) => head.forward(&h),
            None => Ok(h.linear(self.head_weight()?, None)?),
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

impl Gpt {
    /// An empty key/value cache for generating `batch` sequences side by side with
    /// [`Gpt::forward_cached`].
    pub fn kv_cache(&self, batch: usize) -> KvCache {
        KvCache::new(self.blocks.len(), batch)
    }

    /// The logits (`[B, vocab]`) of the last of the tokens `ids` (`[B, t]`, U32, `B` the
    /// cache's batch) that follow the tokens of `cache`, whose keys and values it appends to
    /// the cache: a prompt on an empty cache, then one token at a time, costs each token its
    /// own work plus attention over the prefix, never the prefix again. The logits equal
    /// those of [`Module::forward`] over the whole sequence at that position.
    ///
    /// It records nothing on any tape and applies no dropout. It fails, leaving the cache as
    /// it was, when the ids are not `[cache.batch(), t]` U32 with `t >= 1`, when the cache
    /// holds another model's blocks, or when the sequence would pass the context.
    ///
    /// ```
    /// use headroom_nn::{Family, Gpt, GptConfig, Initializer};
    /// use headroom_autograd::Tensor;
    /// use headroom_kernels::{Device, DeviceConfig, DType};
    /// let cpu = Device::cpu(DeviceConfig::new(64 << 20))?;
    /// let config = GptConfig {
    ///     vocab: 16, context: 8, width: 32, heads: 4, layers: 2, dropout: 0.0, tie_embeddings: true,
    ///     family: Family::Gpt2,
    /// };
    /// let gpt = Gpt::new(&mut Initializer::new(&cpu, DType::F32, 1), config)?;
    /// let mut cache = gpt.kv_cache(1);
    /// let prompt = Tensor::from_host(&cpu, [1, 3], &[1u32, 2, 3])?;
    /// assert_eq!(gpt.forward_cached(&prompt, &mut cache)?.dims(), [1, 16]);
    /// let next = Tensor::from_host(&cpu, [1, 1], &[4u32])?;
    /// assert_eq!(gpt.forward_cached(&next, &mut cache)?.dims(), [1, 16]);
    /// assert_eq!(cache.len(), 4);
    /// # Ok::<(), headroom_nn::Error>(())
    /// ```
    pub fn forward_cached(&self, ids: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        let _off = no_grad();
        let (b, t) = self.check_cached(ids, cache)?;
        let device = ids.device().clone();
        let mut x = {
            let _embedding = LayerKind::Embedding.scope(&device);
            self.embedded(ids, cache.len())?
        };
        let mut kvs = Vec::with_capacity(self.blocks.len());
        let streamed = self.streamed_pass();
        for (i, block) in self.blocks.iter().enumerate() {
            let (y, kv) = match &streamed {
                Some(streamed) => streamed[i]
                    .fetched(&device)?
                    .forward_cached(&x, cache.block(i))?,
                None => block.forward_cached(&x, cache.block(i))?,
            };
            x = y;
            kvs.push(kv);
        }
        let last = x.narrow(1, t - 1, 1)?.reshape([b, self.config.width])?;
        drop(x);
        let h = {
            let _norm = LayerKind::Norm.scope(&device);
            self.ln_f.forward(&last)?
        };
        let logits = {
            let _head = LayerKind::Head.scope(&device);
            self.head(&h)?
        };
        cache.commit(kvs, t);
        Ok(logits)
    }

    /// The batch and the number of new tokens of `ids` for [`Gpt::forward_cached`], or why
    /// they do not fit `cache`.
    fn check_cached(&self, ids: &Tensor, cache: &KvCache) -> Result<(usize, usize)> {
        const WHAT: &str = "gpt cached input";
        let &[b, t] = ids.dims() else {
            let detail = format!("ids of shape {}: expected [batch, time]", ids.shape());
            return Err(Error::config(WHAT, detail));
        };
        if ids.dtype() != DType::U32 || t == 0 || b == 0 || b != cache.batch() {
            let detail = format!(
                "ids of shape {} and dtype {}: expected [{}, t] U32 with t >= 1 \
                 (the cache's batch)",
                ids.shape(),
                ids.dtype(),
                cache.batch()
            );
            return Err(Error::config(WHAT, detail));
        }
        if cache.blocks() != self.blocks.len() {
            let detail = format!(
                "a cache of {} blocks for a model of {}",
                cache.blocks(),
                self.blocks.len()
            );
            return Err(Error::config(WHAT, detail));
        }
        let context = self.config.context;
        if cache.len() + t > context {
            let detail = format!(
                "{t} new tokens after {} cached need {} positions, more than the context of \
                 {context}",
                cache.len(),
                cache.len() + t
            );
            return Err(Error::config(WHAT, detail));
        }
        Ok((b, t))
    }
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
        let h = self.hidden(ids)?;
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
