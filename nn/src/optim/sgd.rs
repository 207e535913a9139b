//! SGD with momentum on the fused kernel.

use headroom_autograd::Gradients;
use headroom_kernels::Array;
use headroom_kernels::ops::optim::{Update, sgd_step};

use super::{
    Optimizer, Slot, for_each_param, load_named_state, named_state, state_bytes, zeroed_state,
};
use crate::error::{Error, Result};
use crate::module::Module;

/// The name of SGD's buffer, as PyTorch's state dict calls it.
const BUFFERS: [&str; 1] = ["momentum_buffer"];

/// SGD as `torch.optim.SGD` (momentum, dampening, weight decay, Nesterov), on a fused kernel:
/// one momentum buffer per parameter when momentum is on, none otherwise.
#[derive(Debug)]
pub struct Sgd {
    config: super::SgdConfig,
    steps: u64,
    slots: Vec<Slot>,
}

impl Sgd {
    /// SGD for `model`'s parameters, its momentum buffers (if any) allocated now.
    pub fn new(model: &dyn Module, config: super::SgdConfig) -> Result<Self> {
        if config.nesterov && (config.momentum <= 0.0 || config.dampening != 0.0) {
            return Err(Error::config(
                "sgd",
                "Nesterov momentum needs a momentum above 0 and no dampening",
            ));
        }
        let per_param = usize::from(config.momentum != 0.0);
        Ok(Self {
            config,
            steps: 0,
            slots: zeroed_state(model, per_param)?,
        })
    }
}

impl Optimizer for Sgd {
    fn step(&mut self, model: &mut dyn Module, grads: &Gradients, grad_scale: f64) -> Result<()> {
        let update = Update::new(self.steps + 1).scaled(grad_scale);
        let config = self.config;
        for_each_param(model, grads, &mut self.slots, |param, grad, buffers| {
            let momentum = buffers.first_mut();
            Ok(sgd_step(
                &config,
                update,
                param.array_mut(),
                grad,
                momentum,
            )?)
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
