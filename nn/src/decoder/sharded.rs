//! A decoder whose tensors are sharded over ranks (ZeRO-3, FSDP): each block is gathered as it
//! runs and its whole copy dropped after, gathered again for the backward pass (its recomputation,
//! or each product's rule); the embeddings, final norm and head are gathered where they are used.

use std::borrow::Cow;

use headroom_autograd::Tensor;
use headroom_collectives::SharedWorld;

use super::Gpt;
use crate::error::{Error, Result};
use crate::module::Module;
use crate::sharded_params::ParamShards;

impl Gpt {
    /// Cuts every tensor of the decoder to this rank's chunk of `world` ([`ParamShards`]):
    /// its parameters, their gradients and an optimizer's state over them are 1/N of the
    /// model's on each rank. Every rank must then run the same passes in step. Not with
    /// weights streamed from a host tier or stored quantized, and once only.
    pub fn shard_params(&mut self, world: &SharedWorld) -> Result<()> {
        let refuse = |detail: &str| Err(Error::config("sharded parameters", detail.to_owned()));
        if self.placement.shards.is_some() {
            return refuse("the decoder's tensors are sharded already");
        }
        if self.placement.offload_weights.is_some() {
            return refuse("weights streamed from a host tier are not sharded over ranks yet");
        }
        self.placement.shards = Some(ParamShards::shard(self, world)?);
        Ok(())
    }

    /// How its tensors are sharded over ranks, where they are.
    pub fn param_shards(&self) -> Option<&ParamShards> {
        self.placement.shards.as_ref()
    }

    /// `part` of the decoder, named `name` in it, with its sharded tensors gathered whole
    /// (recorded) where the decoder is sharded, itself otherwise. The embeddings, the final
    /// norm and the head are gathered where they are used, each copy let go of once the ops
    /// that read it are done: the tied embedding's two uses reduce-scatter their gradients
    /// apart, so that no whole gradient of it waits through the backward pass.
    pub(super) fn whole<'a, M: Module + Clone>(
        &self,
        part: &'a M,
        name: &str,
    ) -> Result<Cow<'a, M>> {
        match &self.placement.shards {
            Some(shards) => Ok(Cow::Owned(shards.gathered(part, name)?)),
            None => Ok(Cow::Borrowed(part)),
        }
    }

    /// The head's weight ([`Gpt::head_weight`]), gathered whole where the decoder is sharded.
    pub(super) fn whole_head_weight(&self) -> Result<Tensor> {
        match &self.head {
            Some(head) => self.whole(head, "head")?.weight.dense().cloned(),
            None => self
                .whole(&self.tok_emb, "tok_emb")?
                .weight
                .dense()
                .cloned(),
        }
        .ok_or_else(|| Error::config("gpt head", "its weight is stored quantized".to_owned()))
    }
}
