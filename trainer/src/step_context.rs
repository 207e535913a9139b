//! What a training step works on: the device, the model, the optimizer, the loss scaler, and
//! the settings of the run that decide how a step runs.

use headroom_kernels::Device;
use headroom_nn::Optimizer;

use crate::config::{PrecisionKind, TrainConfig};
use crate::model::TrainModel;
use crate::precision::LossScaler;

/// What a step works on.
pub struct StepContext<'a> {
    /// The device.
    pub device: &'a Device,
    /// The model.
    pub model: &'a mut TrainModel,
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
}

impl<'a> StepContext<'a> {
    /// What a step of the run `config` describes works on.
    pub fn new(
        device: &'a Device,
        model: &'a mut TrainModel,
        optimizer: &'a mut dyn Optimizer,
        scaler: &'a mut LossScaler,
        config: &TrainConfig,
    ) -> Self {
        Self {
            device,
            model,
            optimizer,
            scaler,
            precision: config.precision.dtype,
            clip: config.optimizer.clip,
            in_backward: config.optimizer.in_backward.unwrap_or(false),
        }
    }
}
