//! Where a decoder's parts live and what it keeps between the passes: one value, apart from
//! the architecture, each field named as the trainer's setting that fills it.

use headroom_kernels::{Array, Device};

use crate::decoder::Gpt;
use crate::error::Result;
use crate::layers::block_in_documents::BlockInDocuments;
use crate::recomputed_modules::Recompute;
use crate::sharded_params::ParamShards;
use crate::streamed_pass::Streamed;
use crate::streaming::move_to;

/// How a [`Gpt`](crate::Gpt) places its memory. The fields are the trainer's `model.recompute`,
/// `model.offload_activations`, `model.offload_weights`, `model.fetch_ahead` and
/// `model.head_chunk`; quantized storage is chosen when the weights are drawn
/// ([`Initializer::set_quantize`](crate::Initializer::set_quantize)).
#[derive(Debug, Clone)]
pub struct Placement {
    /// What the blocks compute again in the backward pass.
    pub recompute: Recompute,
    /// The host tier recomputed blocks keep their inputs on between the passes; none: the
    /// device.
    pub offload_activations: Option<Device>,
    /// The host tier the blocks' weights live on, streamed to the device block by block; none:
    /// the device.
    pub offload_weights: Option<Device>,
    /// Whether offloaded inputs and streamed weights come back one block ahead of their use.
    pub fetch_ahead: bool,
    /// Rows per chunk of the fused head and loss; none: the logits formed whole.
    pub head_chunk: Option<usize>,
    /// How the tensors are sharded over ranks ([`Gpt::shard_params`]); none: whole here.
    pub shards: Option<ParamShards>,
}

/// Logits per chunk of a new GPT's fused head (32 MiB in f32): GPT-2's vocabulary takes 166
/// rows a chunk, a small one the whole batch at once.
pub const HEAD_CHUNK_LOGITS: usize = 8 << 20;

impl Placement {
    /// A new decoder's placement over a vocabulary of `vocab`: everything on the device, nothing
    /// recomputed, fetches ahead, the head fused in chunks of [`HEAD_CHUNK_LOGITS`] logits.
    pub fn for_vocab(vocab: usize) -> Self {
        Self {
            recompute: Recompute::None,
            offload_activations: None,
            offload_weights: None,
            fetch_ahead: true,
            head_chunk: Some((HEAD_CHUNK_LOGITS / vocab.max(1)).max(1)),
            shards: None,
        }
    }

    /// The rows of tokens per tile of each block's MLP, where the blocks run it tiled.
    pub(crate) fn mlp_tile(&self) -> Option<usize> {
        match self.recompute {
            Recompute::BlocksTiledMlp { rows } => Some(rows),
            _ => None,
        }
    }
}

impl Gpt {
    /// Where its parts live and what it keeps between the passes.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// Places it as `placement` says: each block's MLP runs tiled as its `recompute` says, and
    /// the blocks' tensors (their weights stored quantized too) move to its `offload_weights`
    /// host tier, or back to the device without one. How its tensors are sharded stays as
    /// it is ([`Gpt::shard_params`]).
    pub fn set_placement(&mut self, placement: Placement) -> Result<()> {
        let to = match &placement.offload_weights {
            Some(host) => host.clone(),
            None => self.ln_f.weight().device().clone(),
        };
        for block in &mut self.blocks {
            move_to(block, &to)?;
            block.set_mlp_tile(placement.mlp_tile());
        }
        self.placement = Placement {
            head_chunk: placement.head_chunk.map(|rows| rows.max(1)),
            shards: self.placement.shards.take(),
            ..placement
        };
        Ok(())
    }

    /// Sets [`Placement::recompute`]: nothing (the default); the cheap elementwise results,
    /// each norm's and GELU's output, for no second product; or whole blocks, each run as a
    /// recomputed segment ([`recomputed`](crate::recomputed)) that keeps only its input (activation
    /// checkpointing: about half the peak for a fifth less throughput on the training bench's
    /// GPT), their MLPs tiled with [`Recompute::BlocksTiledMlp`]. The gradients are the same,
    /// bit for bit (tiles sum the weights' gradients in another order).
    pub fn set_recompute(&mut self, recompute: Recompute) {
        self.placement.recompute = recompute;
        for block in &mut self.blocks {
            block.set_mlp_tile(self.placement.mlp_tile());
        }
    }

    /// Sets [`Placement::offload_activations`]: each recomputed block's input waits on `host` from
    /// the block's forward pass until its backward pass copies it back (activation offloading,
    /// [`recomputed_offloaded`](crate::recomputed_offloaded)); with whole blocks recomputed, the
    /// device keeps no activation of the blocks between the passes.
    pub fn set_offload_activations(&mut self, host: Option<Device>) {
        self.placement.offload_activations = host;
    }

    /// Sets [`Placement::offload_weights`]: the blocks' weights live on `host` and stream to the
    /// device block by block, forward and again backward (ZeRO-Infinity's parameter offload,
    /// [`recomputed_streamed`](crate::recomputed_streamed), [`Streamed`]), their gradients arriving
    /// on the host; streamed blocks are recomputed whole. Moves every block tensor there now, and
    /// back to the device with none.
    pub fn set_offload_weights(&mut self, host: Option<Device>) -> Result<()> {
        self.set_placement(Placement {
            offload_weights: host,
            ..self.placement.clone()
        })
    }

    /// Sets [`Placement::fetch_ahead`]: offloaded inputs and streamed weights come back one
    /// block ahead of their use, their copies beside the kernels of the block before (the
    /// default), or as each block starts, a block's input and weights less on the device.
    pub fn set_fetch_ahead(&mut self, ahead: bool) {
        self.placement.fetch_ahead = ahead;
    }

    /// Sets [`Placement::head_chunk`]: [`Gpt::loss`](crate::Gpt::loss) computes the head and the
    /// loss together, `rows` rows of logits at a time
    /// ([`linear_cross_entropy`](headroom_autograd::Tensor::linear_cross_entropy)), so the `[B, T,
    /// vocab]` logits never exist whole; none forms them whole (the reference).
    pub fn set_head_chunk(&mut self, rows: Option<usize>) {
        self.placement.head_chunk = rows.map(|r| r.max(1));
    }

    /// [`Placement::recompute`].
    pub fn recompute(&self) -> Recompute {
        self.placement.recompute
    }

    /// [`Placement::offload_activations`].
    pub fn offload_activations(&self) -> Option<&Device> {
        self.placement.offload_activations.as_ref()
    }

    /// [`Placement::offload_weights`].
    pub fn offload_weights(&self) -> Option<&Device> {
        self.placement.offload_weights.as_ref()
    }

    /// [`Placement::fetch_ahead`].
    pub fn fetch_ahead(&self) -> bool {
        self.placement.fetch_ahead
    }

    /// [`Placement::head_chunk`].
    pub fn head_chunk(&self) -> Option<usize> {
        self.placement.head_chunk
    }

    /// The blocks as one pass of streamed modules, where their weights are streamed, each
    /// attending within the packed documents of `starts` where given.
    pub(super) fn streamed_pass(
        &self,
        starts: Option<&Array>,
    ) -> Option<Vec<Streamed<BlockInDocuments>>> {
        let placement = &self.placement;
        placement.offload_weights.as_ref()?;
        let blocks: Vec<BlockInDocuments> = (self.blocks.iter())
            .map(|block| BlockInDocuments {
                block: block.clone(),
                starts: starts.cloned(),
            })
            .collect();
        Some(Streamed::pass(&blocks, placement.fetch_ahead))
    }
}
