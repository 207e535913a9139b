//! AdamW on the fused kernel.

use headroom_autograd::Tensor;
use headroom_kernels::ops::optim::{Update, adamw_step, adamw_step_8bit};
use headroom_kernels::{Array, Device};

use super::{Optimizer, OptimizerState, StateBuffer, StatePrecision, StateShard, UpdateRule};
use crate::error::{Error, Result};
use crate::module::Module;

/// Names of AdamW's buffers, as PyTorch's state dict calls them.
const BUFFERS: [&str; 2] = ["exp_avg", "exp_avg_sq"];

/// AdamW (decoupled weight decay, bias correction) as `torch.optim.AdamW`, on a fused kernel:
/// two moment buffers per parameter, in its dtype, in bf16 or in 8 bits
/// ([`StatePrecision`]).
#[derive(Debug)]
pub struct AdamW {
    config: super::AdamWConfig,
    state: OptimizerState,
}

impl AdamW {
    /// AdamW for `model`'s parameters, its moments allocated now (zeros) in each parameter's
    /// dtype.
    pub fn new(model: &dyn Module, config: super::AdamWConfig) -> Result<Self> {
        Self::with_state(model, config, StatePrecision::Full)
    }

    /// AdamW with its moments kept in `precision`.
    pub fn with_state(
        model: &dyn Module,
        config: super::AdamWConfig,
        precision: StatePrecision,
    ) -> Result<Self> {
        Self::with_shard(model, config, precision, StateShard::whole(model))
    }

    /// AdamW that keeps, in `precision`, the moments of the parameters `shard` gives this rank,
    /// and updates those parameters alone.
    pub fn with_shard(
        model: &dyn Module,
        config: super::AdamWConfig,
        precision: StatePrecision,
        shard: StateShard,
    ) -> Result<Self> {
        Self::with_shard_on(model, config, precision, shard, None)
    }

    /// [`AdamW::with_shard`], its moments kept and its updates run on `host` when given (the
    /// device's host tier, [`OptimizerState::zeroed_on`]): the same updates, bit for bit
    /// where the host computes as the device does.
    pub fn with_shard_on(
        model: &dyn Module,
        config: super::AdamWConfig,
        precision: StatePrecision,
        shard: StateShard,
        host: Option<&Device>,
    ) -> Result<Self> {
        Ok(Self {
            config,
            state: OptimizerState::zeroed_on(model, &BUFFERS, precision, shard, host)?,
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &super::AdamWConfig {
        &self.config
    }
}

impl Optimizer for AdamW {
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

/// One parameter's AdamW update on its two moments, however they are kept.
impl UpdateRule for super::AdamWConfig {
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
        match buffers {
            [StateBuffer::Plain(m), StateBuffer::Plain(v)] => {
                Ok(adamw_step(self, update, param.array_mut(), grad, m, v)?)
            }
            [StateBuffer::Quantized(m), StateBuffer::Quantized(v)] => Ok(adamw_step_8bit(
                self,
                update,
                param.array_mut(),
                grad,
                m,
                v,
            )?),
            _ => Err(Error::config(
                "adamw",
                "a parameter's state is not two moments of one kind",
            )),
        }
    }
}
