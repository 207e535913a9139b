//! Generation with a key/value cache: a prompt, then one token at a time, each costing its own
//! work and attention over the prefix.

use headroom_autograd::{Tensor, no_grad};
use headroom_kernels::DType;

use crate::decoder::Gpt;
use crate::error::{Error, Result};
use crate::kv_cache::KvCache;
use crate::layer_kind::LayerKind;
use crate::module::Module;

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
        let streamed = self.streamed_pass(None);
        for (i, block) in self.blocks.iter().enumerate() {
            let (y, kv) = match &streamed {
                Some(streamed) => streamed[i]
                    .fetched(&device)?
                    .block
                    .forward_cached(&x, cache.block(i))?,
                None => {
                    let block = self.whole(block, &format!("blocks.{i}"))?;
                    block.forward_cached(&x, cache.block(i))?
                }
            };
            x = y;
            kvs.push(kv);
        }
        let last = x.narrow(1, t - 1, 1)?.reshape([b, self.config.width])?;
        drop(x);
        let h = {
            let _norm = LayerKind::Norm.scope(&device);
            self.whole(&self.ln_f, "ln_f")?.forward(&last)?
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
