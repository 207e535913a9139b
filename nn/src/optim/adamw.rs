//! AdamW on the fused kernel.

use headroom_autograd::Gradients;
use headroom_kernels::ops::optim::adamw_step;

use super::{Optimizer, OptimizerState};
use crate::error::Result;
use crate::module::Module;

/// Names of AdamW's buffers, as PyTorch's state dict calls them.
const BUFFERS: [&str; 2] = ["exp_avg", "exp_avg_sq"];

/// AdamW (decoupled weight decay, bias correction) as `torch.optim.AdamW`, on a fused kernel:
/// two moment buffers per parameter, in its dtype.
#[derive(Debug)]
pub struct AdamW {
    config: super::AdamWConfig,
    state: OptimizerState,
}

impl AdamW {
    /// AdamW for `model`'s parameters, its moments allocated now (zeros).
    pub fn new(model: &dyn Module, config: super::AdamWConfig) -> Result<Self> {
        Ok(Self {
            config,
            state: OptimizerState::zeroed(model, &BUFFERS)?,
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &super::AdamWConfig {
        &self.config
    }
}

impl Optimizer for AdamW {
    fn step(&mut self, model: &mut dyn Module, grads: &Gradients, grad_scale: f64) -> Result<()> {
        let config = self.config;
        self.state
            .step(model, grads, grad_scale, |update, param, grad, buffers| {
                let [m, v] = buffers else {
                    return Ok(());
                };
                Ok(adamw_step(&config, update, param.array_mut(), grad, m, v)?)
            })
    }

    fn lr(&self) -> f64 {
        self.config.lr
    }

    fn set_lr(&mut self, lr: f64) {
        self.config.lr = lr;
    }

    fn buffers(&self) -> &OptimizerState {
        &self.state
    }

    fn buffers_mut(&mut self) -> &mut OptimizerState {
        &mut self.state
    }
}
