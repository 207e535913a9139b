//! A decoder whose tensors are sharded over ranks (ZeRO-3, FSDP): each block is gathered as it
//! runs and its whole copy dropped after, gathered again for the backward pass (its recomputation,
//! or each product's rule); the embeddings, final norm and head are gathered where they are used.

use std::borrow::Cow;

use headroom_autograd::Tensor;
use headroom_collectives::{Collective, SharedWorld};
use headroom_kernels::Shape;

use super::Gpt;
use super::GptConfig;
use crate::error::{Error, Result};
use crate::init::Initializer;
use crate::layers::linear_weight::Weight;
use crate::module::Module;
use crate::sharded_params::{Cut, ParamShards};

impl Gpt {
    /// Cuts every tensor of the decoder to this rank's chunk of `world` ([`ParamShards`]):
    /// its parameters, their gradients and an optimizer's state over them are 1/N of the
    /// model's on each rank; weights stored quantized keep their chunks of whole blocks (QLoRA's
    /// NF4 codes sharded). Every rank must then run the same passes in step. Not with weights
    /// streamed from a host tier, and once only.
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

    /// [`Gpt::new`] sharded over `world` as it is drawn: each part (the embeddings, each block,
    /// the final norm, the head) is cut to this rank's chunks as soon as it is drawn, so that a
    /// rank never holds more of the whole model than its largest tensor. The same chunks as
    /// [`Gpt::new`] followed by [`Gpt::shard_params`].
    pub fn new_sharded(
        init: &mut Initializer,
        config: GptConfig,
        world: &SharedWorld,
    ) -> Result<Self> {
        let before = init.set_cut(Some(Cut::new(world.rank(), world.world_size())));
        let built = Self::new(init, config);
        let cut = init.set_cut(before).unwrap_or_default();
        let mut gpt = built?;
        gpt.placement.shards = Some(ParamShards::of(world, cut));
        Ok(gpt)
    }

    /// Keeps each gathered copy of its sharded tensors until the chunks change
    /// ([`ParamShards::keep_gathered`]: ZeRO-2); an error where it is not sharded.
    pub fn keep_gathered(&mut self) -> Result<()> {
        match &mut self.placement.shards {
            Some(shards) => {
                shards.keep_gathered();
                Ok(())
            }
            None => Err(Error::config(
                "sharded gradients",
                "the decoder's tensors are not sharded over ranks".to_owned(),
            )),
        }
    }

    /// How its tensors are sharded over ranks, where they are.
    pub fn param_shards(&self) -> Option<&ParamShards> {
        self.placement.shards.as_ref()
    }

    /// `part` of the decoder, named `name` in it, with its sharded tensors gathered whole
    /// (recorded) where the decoder is sharded, itself otherwise. The embeddings, the final
    /// norm and the head are gathered where they are used, each copy let go of once the ops
    /// that read it are done: the tied embedding's two uses reduce their gradients apart, so
    /// that no whole gradient of it waits through the backward pass.
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

    /// The token embedding's rows of `ids`. Where the decoder is sharded, the table is
    /// gathered for the lookup alone, and its gradient never forms the whole table's
    /// ([`Tensor::sharded_embedding`]); a table stored quantized is gathered whole.
    pub(super) fn token_rows(&self, ids: &Tensor) -> Result<Tensor> {
        let Some(shards) = &self.placement.shards else {
            return self.tok_emb.forward(ids);
        };
        let whole = shards.whole_shape("tok_emb.weight");
        match (&self.tok_emb.weight, whole) {
            (Weight::Dense(table), Some(whole)) => {
                Ok(table.sharded_embedding(ids, shards.world(), whole)?)
            }
            _ => self.whole(&self.tok_emb, "tok_emb")?.forward(ids),
        }
    }

    /// Cuts the tensors added to a decoder sharded already (adapters drawn whole over a base
    /// drawn sharded) as its others were; nothing where it is not sharded.
    pub(crate) fn shard_added(&mut self) -> Result<()> {
        match self.placement.shards.take() {
            Some(mut shards) => {
                let cut = shards.take_added(self);
                self.placement.shards = Some(shards);
                cut
            }
            None => Ok(()),
        }
    }

    /// The head's weight with the world it is sharded over and its whole shape, where the
    /// decoder is sharded and the ranks share its vocabulary by whole rows: the fused head then
    /// runs each rank's slice of the vocabulary ([`Tensor::sharded_linear_cross_entropy`]).
    pub(super) fn sliced_head(&self) -> Option<(&Tensor, &SharedWorld, &Shape)> {
        let shards = self.placement.shards.as_ref()?;
        let (weight, name) = match &self.head {
            Some(head) => (&head.weight, "head.weight"),
            None => (&self.tok_emb.weight, "tok_emb.weight"),
        };
        let whole = shards.whole_shape(name)?;
        let ranks = shards.world().world_size();
        let shared = whole.dims().first()?.is_multiple_of(ranks);
        Some((weight.dense()?, shards.world(), whole)).filter(|_| shared)
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
