//! What a training step works on: the device, the model, the optimizer, the loss scaler, and
//! the settings of the run that decide how a step runs.

use headroom_alloc::Tag;
use headroom_autograd::{SavedReport, Tape, Tensor};
use headroom_collectives::Collective;
use headroom_kernels::{Array, Device};
use headroom_nn::Optimizer;

use crate::config::{PrecisionKind, TrainConfig};
use crate::data::HostBatch;
use crate::data_parallel::control::Control;
use crate::data_parallel::peers::Peers;
use crate::error::Result;
use crate::model::TrainableModel;
use crate::step::precision::LossScaler;

/// A micro-batch's forward pass, ready for its backward pass.
pub(crate) struct Forward {
    /// The tape it recorded.
    pub tape: Tape,
    /// Its loss.
    pub loss: Tensor,
    /// What it saved for the backward pass.
    pub saved: SavedReport,
    /// The loss's gradient to start the backward pass from: the micro-batch's weight times
    /// the loss scale, tagged as gradients.
    pub seed: Array,
}

/// What a step works on.
pub struct StepContext<'a> {
    /// The device.
    pub device: &'a Device,
    /// The model.
    pub model: &'a mut dyn TrainableModel,
    /// The optimizer (its learning rate already set for this step).
    pub optimizer: &'a mut dyn Optimizer,
    /// The loss scaler.
    pub scaler: &'a mut LossScaler,
    /// The precision of the products.
    pub precision: PrecisionKind,
    /// The largest gradient norm (0: no clipping).
    pub clip: f64,
    /// Update each parameter in the backward pass when the step is one micro-batch.
    pub in_backward: bool,
    /// The ranks of a data-parallel run and the buffer they agree through; neither for a run
    /// of one process.
    pub peers: Peers<'a>,
    /// The number of ranks the run was launched with. A planner's step for one rank of
    /// several has no world, and does what a rank's step does to its memory alone.
    pub ranks: usize,
}

impl<'a> StepContext<'a> {
    /// What a step of the run `config` describes works on.
    pub fn new(
        device: &'a Device,
        model: &'a mut dyn TrainableModel,
        optimizer: &'a mut dyn Optimizer,
        scaler: &'a mut LossScaler,
        config: &TrainConfig,
    ) -> Self {
        Self {
            device,
            model,
            optimizer,
            scaler,
            precision: config.compute_precision(),
            clip: config.optimizer.clip,
            in_backward: config.optimizer.in_backward.unwrap_or(false),
            peers: Peers::default(),
            ranks: config.optimizer.launched_as.map_or(1, |(_, ranks)| ranks),
        }
    }

    /// The same context, its steps shared with the other ranks of `world`, agreeing through
    /// `control` (which a world of several ranks needs).
    pub fn in_world(
        mut self,
        world: &'a mut dyn Collective,
        control: Option<&'a mut Control>,
    ) -> Self {
        self.peers = Peers {
            world: Some(world),
            control,
        };
        self
    }

    /// The forward pass of `batch` on the device, recorded on a new tape under the run's
    /// autocast policy, with the seed of its backward pass for a loss weighted by `weight`.
    pub(crate) fn forward(&self, batch: &HostBatch, weight: f64) -> Result<Forward> {
        let batch = batch.to_device(self.device)?;
        let tape = Tape::new();
        let loss = {
            let _policy = self.precision.autocast();
            tape.record(|| self.model.loss(&batch))?
        };
        let saved = tape.saved();
        let seed = {
            let _tag = self.device.scoped_tag(Tag::GRADIENTS);
            Array::full(self.device, [], loss.dtype(), weight * self.scaler.scale)?
        };
        Ok(Forward {
            tape,
            loss,
            saved,
            seed,
        })
    }
}
