//! Any model the trainer trains: a [`TrainableModel`] (its parameters, its loss on a batch, its
//! outputs for the held-out metric) built by a [`ModelFactory`] on whatever device the trainer
//! asks for. The planner builds models on meta devices to measure a step before running one,
//! so the trainer takes the factory, not one model. The factory also declares which memory
//! techniques the model offers ([`Knobs`]); the memory policy searches only those.
//!
//! The built-in GPT and MLP are one implementation among others ([`super::BuiltinModel`]): they get
//! nothing from the trainer that a user's model does not.

use std::any::Any;

use headroom_autograd::Tensor;
use headroom_collectives::SharedWorld;
use headroom_kernels::Device;
use headroom_nn::{DropoutCounter, Module, ParamShards};

use crate::config::Recompute;
use crate::data::{DataShape, DeviceBatch};
use crate::error::Result;

/// A model the trainer can train, evaluate and checkpoint.
pub trait TrainableModel: Send + Any {
    /// The model's parameters, through the module visitor (optimizers and checkpoints walk
    /// them by name).
    fn module(&self) -> &dyn Module;

    /// The same, mutably.
    fn module_mut(&mut self) -> &mut dyn Module;

    /// The mean loss of a batch: its arrays by name, `[B, ...]` each, as the dataset's
    /// [`DataShape`] names them ([`DeviceBatch::inputs`] and [`DeviceBatch::targets`] for the
    /// built-in kinds of data). The mean is over the scored targets where the batch has U32
    /// `targets`, over the samples otherwise, as a step weighs its micro-batches.
    fn loss(&self, batch: &DeviceBatch) -> Result<Tensor>;

    /// The outputs the held-out metric reads: a GPT's logits `[B, T, vocab]` for exact match,
    /// a classifier's `[B, classes]` for accuracy. A model judged by its loss alone may leave
    /// the default, which says it has none.
    fn logits(&self, inputs: &Tensor) -> Result<Tensor> {
        let _ = inputs;
        Err(crate::error::Error::config(
            "the model gives no logits: judge it by its loss",
        ))
    }

    /// The counter of the dropout masks it draws, saved with checkpoints so that a resumed
    /// run draws the same (none without dropout).
    fn dropout_counter(&self) -> Option<&DropoutCounter> {
        None
    }

    /// True when recomputing more in the backward pass would lighten its step (what an
    /// out-of-memory's diagnosis suggests); false by default.
    fn could_recompute(&self) -> bool {
        false
    }

    /// Keeps in the device's host tier what `offloads` names: what its recomputed segments
    /// save, between the forward and the backward pass ([`Knobs::offload_activations`]), and
    /// its blocks' weights, streamed to the device as they run ([`Knobs::offload_weights`]),
    /// moving there any weight that is not. The default offers nothing and ignores it.
    fn set_host_tier(&mut self, offloads: &Offloads) -> Result<()> {
        let _ = offloads;
        Ok(())
    }

    /// Cuts every tensor to this rank's chunk of `world` (`optimizer.shard_params`, ZeRO
    /// stage 3), each gathered whole where it runs. The default shards nothing and refuses.
    fn shard_params(&mut self, world: &SharedWorld) -> Result<()> {
        let _ = world;
        Err(crate::error::Error::config(
            "optimizer.shard_params: this model's tensors cannot be sharded over ranks",
        ))
    }

    /// Keeps each sharded tensor's gathered copy until its chunk changes
    /// (`optimizer.shard_grads`, ZeRO stage 2). The default refuses.
    fn keep_gathered(&mut self) -> Result<()> {
        Err(crate::error::Error::config(
            "optimizer.shard_grads: this model's gathered tensors cannot be kept",
        ))
    }

    /// How its tensors are sharded over ranks, where they are (none by default).
    fn param_shards(&self) -> Option<&ParamShards> {
        None
    }

    /// The model as [`Any`], to reach its own type.
    fn as_any(&self) -> &dyn Any;

    /// The same, mutably.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// What a model keeps in the device's host tier ([`TrainableModel::set_host_tier`]).
#[derive(Debug, Clone, Default)]
pub struct Offloads {
    /// The host tier its recomputed segments keep their inputs on.
    pub activations: Option<Device>,
    /// The host tier its blocks' weights live on.
    pub weights: Option<Device>,
    /// Whether both come back to the device one block ahead of their use.
    pub ahead: bool,
}

/// What the planner chose for the model being built.
#[derive(Debug, Clone, Default)]
pub struct ModelSettings {
    /// Seeds the weights (the same seed, the same weights).
    pub seed: u64,
    /// What to compute again in the backward pass (only what [`Knobs`] offers).
    pub recompute: Recompute,
    /// Rows of the fused head's chunk, for a model that offers one.
    pub head_chunk: Option<usize>,
    /// The host tier to draw the blocks' weights into, where they are streamed from
    /// ([`Knobs::offload_weights`]): the device never holds them all.
    pub weights_on: Option<Device>,
    /// The world the parameters are sharded over (`optimizer.shard_params`): a model that can
    /// cuts each part to this rank's chunks as soon as it is drawn, and never holds the whole
    /// model; the others are cut once built.
    pub shards: Option<SharedWorld>,
}

impl ModelSettings {
    /// The settings a run's configuration carries (the policy and the planner write theirs
    /// there).
    pub fn of(config: &crate::config::TrainConfig) -> Self {
        Self {
            seed: config.seed,
            recompute: config.model.recompute.unwrap_or_default(),
            head_chunk: config.model.head_chunk,
            weights_on: None,
            shards: None,
        }
    }

    /// [`ModelSettings::of`], with the blocks' weights drawn into `host` where `config`
    /// streams them.
    pub fn with_host_tier(config: &crate::config::TrainConfig, host: Option<&Device>) -> Self {
        Self {
            weights_on: host.filter(|_| config.model.offloads_weights()).cloned(),
            ..Self::of(config)
        }
    }
}

/// The memory techniques a model offers the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Knobs {
    /// [`Recompute::Cheap`]: each norm's and activation's output computed again.
    pub cheap_recompute: bool,
    /// [`Recompute::CheapUp`]: a SwiGLU MLP's up projection run again too.
    pub up_recompute: bool,
    /// [`Recompute::Blocks`]: whole blocks run again (activation checkpointing).
    pub block_recompute: bool,
    /// [`Recompute::BlocksTiled`]: whole blocks, their MLPs over tiles of the sequence.
    pub tiled_mlp: bool,
    /// Its recomputed segments keep their inputs in the host tier when asked
    /// ([`TrainableModel::set_host_tier`]).
    pub offload_activations: bool,
    /// Its blocks' weights live in the host tier and stream to the device when asked
    /// ([`TrainableModel::set_host_tier`], [`ModelSettings::weights_on`]).
    pub offload_weights: bool,
    /// A head fused with its loss over this vocabulary, whose chunk the planner sizes.
    pub fused_head: Option<usize>,
    /// Its tensors can be sharded over ranks ([`TrainableModel::shard_params`]).
    pub shard_params: bool,
}

impl Knobs {
    /// The recomputations offered, from the least recomputed.
    pub fn recomputes(&self) -> Vec<Recompute> {
        let mut offered = vec![Recompute::None];
        offered.extend(self.cheap_recompute.then_some(Recompute::Cheap));
        offered.extend(self.up_recompute.then_some(Recompute::CheapUp));
        offered.extend(self.block_recompute.then_some(Recompute::Blocks));
        offered.extend(self.tiled_mlp.then_some(Recompute::BlocksTiled));
        offered
    }
}

/// Builds a model on a device: the trainer's, or a meta device for the planner.
pub trait ModelFactory: Send + Sync {
    /// The model for samples of `shape` on `device`, as `settings` ask.
    fn build(
        &self,
        device: &Device,
        shape: &DataShape,
        settings: &ModelSettings,
    ) -> Result<Box<dyn TrainableModel>>;

    /// The memory techniques the model offers for samples of `shape`; none by default.
    fn knobs(&self, shape: &DataShape) -> Knobs {
        let _ = shape;
        Knobs::default()
    }

    /// Refuses, before anything starts, samples the model cannot read; accepts any by default
    /// (then [`build`](Self::build) is the first to say).
    fn check(&self, shape: &DataShape) -> Result<()> {
        let _ = shape;
        Ok(())
    }

    /// Prepares a new run's model after it is built and before it trains (pretrained
    /// weights, say); a resumed run's model takes its checkpoint's weights instead. Nothing by
    /// default.
    fn initialize(&self, model: &mut dyn TrainableModel) -> Result<()> {
        let _ = model;
        Ok(())
    }
}
