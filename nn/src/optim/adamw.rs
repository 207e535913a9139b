//! AdamW on the fused kernel.

use headroom_autograd::Gradients;
use headroom_kernels::Array;
use headroom_kernels::ops::optim::{Update, adamw_step};

use super::{
    Optimizer, Slot, for_each_param, load_named_state, named_state, state_bytes, zeroed_state,
};
use crate::error::Result;
use crate::module::Module;

/// Names of AdamW's buffers, as PyTorch's state dict calls them.
const BUFFERS: [&str; 2] = ["exp_avg", "exp_avg_sq"];

/// AdamW (decoupled weight decay, bias correction) as `torch.optim.AdamW`, on a fused kernel:
/// two moment buffers per parameter, in its dtype.
#[derive(Debug)]
pub struct AdamW {
    config: super::AdamWConfig,
    steps: u64,
    slots: Vec<Slot>,
}

impl AdamW {
    /// AdamW for `model`'s parameters, its moments allocated now (zeros).
    pub fn new(model: &dyn Module, config: super::AdamWConfig) -> Result<Self> {
        Ok(Self {
            config,
            steps: 0,
            slots: zeroed_state(model, 2)?,
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &super::AdamWConfig {
        &self.config
    }
}

impl Optimizer for AdamW {
    fn step(&mut self, model: &mut dyn Module, grads: &Gradients, grad_scale: f64) -> Result<()> {
        let update = Update::new(self.steps + 1).scaled(grad_scale);
        let config = self.config;
        for_each_param(model, grads, &mut self.slots, |param, grad, buffers| {
            let [m, v] = buffers else {
                return Ok(());
            };
            Ok(adamw_step(&config, update, param.array_mut(), grad, m, v)?)
        })?;
        self.steps += 1;
        Ok(())
    }

    fn lr(&self) -> f64 {
        self.config.lr
    }

    fn set_lr(&mut self, lr: f64) {
        self.config.lr = lr;
    }

    fn steps(&self) -> u64 {
        self.steps
    }

    fn state(&self) -> (Vec<(String, Array)>, u64) {
        (named_state(&self.slots, &BUFFERS), self.steps)
    }

    fn load_state(&mut self, buffers: &dyn Fn(&str) -> Result<Array>, steps: u64) -> Result<()> {
        load_named_state(&mut self.slots, &BUFFERS, buffers)?;
        self.steps = steps;
        Ok(())
    }

    fn state_bytes(&self) -> u64 {
        state_bytes(&self.slots)
    }
}
