//! Optimizers (fused kernels, one pass per parameter, allocating nothing once built), gradient
//! clipping, and learning-rate schedules.

mod adamw;
mod clip;
mod host_updates;
mod schedule;
mod sgd;
mod shard;
mod state;

use headroom_autograd::{Gradients, Tensor};
use headroom_kernels::Array;

use crate::error::Result;
use crate::module::Module;

pub use adamw::AdamW;
pub use clip::{GradNorm, clip_grad_norm};
pub use headroom_kernels::ops::optim::AdamW as AdamWConfig;
pub use headroom_kernels::ops::optim::Sgd as SgdConfig;
pub use schedule::LrSchedule;
pub use sgd::Sgd;
pub use shard::StateShard;
pub use state::{Landed, OptimizerState, Shared, StateBuffer, StatePrecision, UpdateRule};

/// Updates a model's parameters from their gradients. State (moments, momentum) is allocated
/// when the optimizer is built, tagged as optimizer state, so a step allocates nothing. An
/// optimizer keeps its state in an [`OptimizerState`], through which the trait gives the step
/// count, the named buffers for checkpoints and their bytes.
pub trait Optimizer: Send {
    /// The optimizer's update rule and its state, apart, so that the steps below can run the
    /// one on the other.
    fn rule_and_state(&mut self) -> (&dyn UpdateRule, &mut OptimizerState);

    /// One update of every parameter of `model` that has a gradient in `grads`, each gradient
    /// multiplied by `grad_scale` first (1/loss scale, a clipping factor).
    fn step(&mut self, model: &mut dyn Module, grads: &Gradients, grad_scale: f64) -> Result<()> {
        let (rule, state) = self.rule_and_state();
        state.step(model, grads, grad_scale, rule)
    }

    /// Updates parameter number `index` (in the model's visiting order, named `name`) as part
    /// of the next step, from its gradient times `grad_scale`, exactly as [`Optimizer::step`]
    /// would: the optimizer step in the backward pass calls it as each gradient completes.
    /// [`Optimizer::finish_step`] ends the step.
    fn step_parameter(
        &mut self,
        index: usize,
        name: &str,
        param: &mut Tensor,
        grad: &Array,
        grad_scale: f64,
    ) -> Result<()> {
        let (rule, state) = self.rule_and_state();
        state.step_one(index, name, param, grad, grad_scale, rule)
    }

    /// Ends a step made of [`Optimizer::step_parameter`] calls: updates still running on the
    /// host tier land in `model`, and the step count moves on
    /// ([`OptimizerState::finish_step`]).
    fn finish_step(&mut self, model: &mut dyn Module) -> Result<Landed> {
        self.buffers_mut().finish_step(model)
    }

    /// The learning rate of the next step.
    fn lr(&self) -> f64;

    /// Sets the learning rate (a schedule does, each step).
    fn set_lr(&mut self, lr: f64);

    /// The step count and the buffers of every parameter.
    fn buffers(&self) -> &OptimizerState;

    /// The same, to replace.
    fn buffers_mut(&mut self) -> &mut OptimizerState;

    /// Updates done so far.
    fn steps(&self) -> u64 {
        self.buffers().steps()
    }

    /// The state, named `{parameter}.{buffer}` (`blocks.0.attn.qkv.weight.exp_avg`), with the
    /// step count, for checkpoints.
    fn state(&self) -> (Vec<(String, Array)>, u64) {
        (self.buffers().named(), self.buffers().steps())
    }

    /// Replaces the state with `buffers` (by name, as [`Optimizer::state`] gives them) and the
    /// step count; every buffer must be present with its shape and dtype.
    fn load_state(&mut self, buffers: &dyn Fn(&str) -> Result<Array>, steps: u64) -> Result<()> {
        self.buffers_mut().load(buffers, steps)
    }

    /// Bytes of state held.
    fn state_bytes(&self) -> u64 {
        self.buffers().bytes()
    }
}
