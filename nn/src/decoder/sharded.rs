//! A decoder whose tensors are sharded over ranks (ZeRO-3, FSDP): each block is gathered as it
//! runs, and its whole copy dropped after (gathered again for the backward pass where whole
//! blocks are recomputed); the embeddings, final norm and head are gathered once a pass and
//! held until its backward pass, as FSDP2 holds its root module's.

use std::borrow::Cow;

use headroom_collectives::SharedWorld;

use super::Gpt;
use crate::error::{Error, Result};
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

    /// The decoder with its embeddings', final norm's and head's tensors whole: gathered
    /// (recorded) where sharded, itself otherwise. Every public pass starts here.
    pub(super) fn root_gathered(&self) -> Result<Cow<'_, Gpt>> {
        let Some(shards) = &self.placement.shards else {
            return Ok(Cow::Borrowed(self));
        };
        let mut copy = self.clone();
        copy.tok_emb = shards.gathered(&self.tok_emb, "tok_emb")?;
        if let Some(pos_emb) = &self.pos_emb {
            copy.pos_emb = Some(shards.gathered(pos_emb, "pos_emb")?);
        }
        copy.ln_f = shards.gathered(&self.ln_f, "ln_f")?;
        if let Some(head) = &self.head {
            copy.head = Some(shards.gathered(head, "head")?);
        }
        Ok(Cow::Owned(copy))
    }
}
