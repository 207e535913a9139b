//! SGD with momentum on the fused kernel.

use headroom_autograd::Tensor;
use headroom_kernels::ops::optim::{Update, sgd_step};
use headroom_kernels::{Array, Device};

use super::{Optimizer, OptimizerState, StateBuffer, StatePrecision, StateShard, UpdateRule};
use crate::error::{Error, Result};
use crate::module::Module;

/// The name of SGD's buffer, as PyTorch's state dict calls it.
const MOMENTUM: [&str; 1] = ["momentum_buffer"];

/// SGD as `torch.optim.SGD` (momentum, dampening, weight decay, Nesterov), on a fused kernel:
/// one momentum buffer per parameter when momentum is on, none otherwise.
#[derive(Debug)]
pub struct Sgd {
    config: super::SgdConfig,
    state: OptimizerState,
}

impl Sgd {
    /// SGD for `model`'s parameters, its momentum buffers (if any) allocated now.
    pub fn new(model: &dyn Module, config: super::SgdConfig) -> Result<Self> {
        Self::with_shard(model, config, StateShard::whole(model))
    }

    /// SGD that keeps the momentum buffers of the parameters `shard` gives this rank, and
    /// updates those parameters alone.
    pub fn with_shard(
        model: &dyn Module,
        config: super::SgdConfig,
        shard: StateShard,
    ) -> Result<Self> {
        Self::with_shard_on(model, config, shard, None)
    }

    /// [`Sgd::with_shard`], its buffers kept and its updates run on `host` when given (the
    /// device's host tier, [`OptimizerState::zeroed_on`]).
    pub fn with_shard_on(
        model: &dyn Module,
        config: super::SgdConfig,
        shard: StateShard,
        host: Option<&Device>,
    ) -> Result<Self> {
        if config.nesterov && (config.momentum <= 0.0 || config.dampening != 0.0) {
            return Err(Error::config(
                "sgd",
                "Nesterov momentum needs a momentum above 0 and no dampening",
            ));
        }
        let buffers: &'static [&'static str] = if config.momentum != 0.0 {
            &MOMENTUM
        } else {
            &[]
        };
        Ok(Self {
            config,
            state: OptimizerState::zeroed_on(model, buffers, StatePrecision::Full, shard, host)?,
        })
    }
}

impl Optimizer for Sgd {
    fn rule_and_state(&mut self) -> (&dyn UpdateRule, &mut OptimizerState) {
        (&self.config, &mut self.state)
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

/// One parameter's SGD update, with its momentum buffer when it has one.
impl UpdateRule for super::SgdConfig {
    fn boxed(&self) -> Box<dyn UpdateRule> {
        Box::new(*self)
    }

    fn update(
        &self,
        update: Update,
        param: &mut Tensor,
        grad: &Array,
        buffers: &mut [StateBuffer],
    ) -> Result<()> {
        let momentum = match buffers.first_mut() {
            None => None,
            Some(StateBuffer::Plain(buffer)) => Some(buffer),
            Some(StateBuffer::Quantized(_)) => {
                return Err(Error::config(
                    "sgd",
                    "SGD's momentum is kept in full precision only",
                ));
            }
        };
        Ok(sgd_step(self, update, param.array_mut(), grad, momentum)?)
    }
}
