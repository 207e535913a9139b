//! Optimizers (fused kernels, one pass per parameter, allocating nothing once built), gradient
//! clipping, and learning-rate schedules.

mod adamw;
mod clip;
mod schedule;
mod sgd;

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

/// Updates a model's parameters from their gradients. State (moments, momentum) is allocated
/// when the optimizer is built, tagged as optimizer state, so a step allocates nothing.
pub trait Optimizer: Send {
    /// One update of every parameter of `model` that has a gradient in `grads`, each gradient
    /// multiplied by `grad_scale` first (1/loss scale, a clipping factor).
    fn step(&mut self, model: &mut dyn Module, grads: &Gradients, grad_scale: f64) -> Result<()>;

    /// The learning rate of the next step.
    fn lr(&self) -> f64;

    /// Sets the learning rate (a schedule does, each step).
    fn set_lr(&mut self, lr: f64);

    /// Updates done so far.
    fn steps(&self) -> u64;

    /// The state, named `{parameter}.{buffer}` (`blocks.0.attn.qkv.weight.exp_avg`), with the
    /// step count, for checkpoints.
    fn state(&self) -> (Vec<(String, Array)>, u64);

    /// Replaces the state with `buffers` (by name, as [`Optimizer::state`] gives them) and the
    /// step count; every buffer must be present with its shape and dtype.
    fn load_state(&mut self, buffers: &dyn Fn(&str) -> Result<Array>, steps: u64) -> Result<()>;

    /// Bytes of state held.
    fn state_bytes(&self) -> u64;
}

/// The state buffers of one parameter, as the optimizer keeps them.
#[derive(Debug)]
struct Slot {
    name: String,
    buffers: Vec<Array>,
}

/// Zeroed buffers for every parameter of `model`: `per_param` of them each, tagged as
/// optimizer state.
fn zeroed_state(model: &dyn Module, per_param: usize) -> Result<Vec<Slot>> {
    let mut params: Vec<(String, Tensor)> = Vec::new();
    model.visit(&mut |name, t| params.push((name.to_owned(), t.clone())));
    params
        .into_iter()
        .map(|(name, t)| {
            let _tag = t.device().scoped_tag(headroom_alloc::Tag::OPTIMIZER_STATE);
            let buffers = (0..per_param)
                .map(|_| Array::zeros(t.device(), t.shape().clone(), t.dtype()))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Slot { name, buffers })
        })
        .collect()
}

/// Runs `update` on each parameter that has a gradient, with its state slot. Slots follow the
/// model's visiting order. Everything is checked before anything is updated (names, shapes and
/// dtypes of parameters, gradients and state, and that no other handle shares a parameter), so
/// a refused step leaves the model as it was.
fn for_each_param(
    model: &mut dyn Module,
    grads: &Gradients,
    slots: &mut [Slot],
    mut update: impl FnMut(&mut Tensor, &Array, &mut [Array]) -> Result<()>,
) -> Result<()> {
    let mut problems = Vec::new();
    let mut count = 0;
    model.visit(&mut |name, param| {
        let problem = match slots.get(count) {
            None => Some(format!("parameter `{name}` has no state: the optimizer was built for a smaller model")),
            Some(slot) if slot.name != name => Some(format!("parameter `{name}` where the optimizer expected `{}`", slot.name)),
            Some(slot) => {
                let fits = |a: &Array| a.shape() == param.shape() && a.dtype() == param.dtype();
                if !slot.buffers.iter().all(fits) {
                    Some(format!("parameter `{name}` is {} of {}, its state is not", param.shape(), param.dtype()))
                } else if grads.get(param).is_some_and(|g| !fits(g)) {
                    Some(format!("the gradient of `{name}` does not match its {} of {}", param.shape(), param.dtype()))
                } else if grads.get(param).is_some() && param.array().is_shared() {
                    Some(format!("parameter `{name}` is shared with another handle (a live tape or a clone); drop it before stepping"))
                } else {
                    None
                }
            }
        };
        problems.extend(problem);
        count += 1;
    });
    if count != slots.len() {
        problems.push(format!(
            "the model has {count} parameters, the optimizer state {}",
            slots.len()
        ));
    }
    if let Some(problem) = problems.into_iter().next() {
        return Err(crate::Error::config("optimizer step", problem));
    }
    let mut index = 0;
    model.visit_mut(&mut |_, param| {
        let slot = &mut slots[index];
        index += 1;
        match grads.get(param) {
            Some(grad) => update(param, grad, &mut slot.buffers),
            None => Ok(()),
        }
    })
}

/// The state of `slots` named `{parameter}.{buffer name}`.
fn named_state(slots: &[Slot], names: &[&str]) -> Vec<(String, Array)> {
    slots
        .iter()
        .flat_map(|slot| {
            slot.buffers
                .iter()
                .zip(names)
                .map(move |(b, n)| (format!("{}.{n}", slot.name), b.clone()))
        })
        .collect()
}

/// Replaces each buffer of `slots` with `load(name)`, checking its shape and dtype.
fn load_named_state(
    slots: &mut [Slot],
    names: &[&str],
    load: &dyn Fn(&str) -> Result<Array>,
) -> Result<()> {
    let mut loaded = Vec::with_capacity(slots.len());
    for slot in slots.iter() {
        let mut buffers = Vec::with_capacity(slot.buffers.len());
        for (old, n) in slot.buffers.iter().zip(names) {
            let key = format!("{}.{n}", slot.name);
            let new = load(&key)?;
            if new.shape() != old.shape() || new.dtype() != old.dtype() {
                return Err(crate::Error::config(
                    "optimizer state",
                    format!(
                        "`{key}` is {} of {}, the parameter needs {} of {}",
                        new.shape(),
                        new.dtype(),
                        old.shape(),
                        old.dtype()
                    ),
                ));
            }
            buffers.push(new);
        }
        loaded.push(buffers);
    }
    for (slot, buffers) in slots.iter_mut().zip(loaded) {
        slot.buffers = buffers;
    }
    Ok(())
}

/// Bytes held by the buffers of `slots`.
fn state_bytes(slots: &[Slot]) -> u64 {
    slots
        .iter()
        .flat_map(|s| &s.buffers)
        .map(|b| b.buffer().bytes() as u64)
        .sum()
}
