//! What an optimizer keeps: its step count and, per parameter in the model's visiting order,
//! its buffers (moments, momentum), named as PyTorch's state dict names them.

use headroom_autograd::{Gradients, Tensor};
use headroom_kernels::Array;
use headroom_kernels::ops::optim::Update;

use crate::error::{Error, Result};
use crate::module::Module;

/// An optimizer's state: the updates done, and each parameter's buffers.
#[derive(Debug)]
pub struct OptimizerState {
    /// Updates done so far.
    steps: u64,
    /// The names of each parameter's buffers; every slot holds this many.
    names: &'static [&'static str],
    /// One per parameter, in the model's visiting order.
    slots: Vec<Slot>,
}

/// The buffers of one parameter.
#[derive(Debug)]
struct Slot {
    name: String,
    buffers: Vec<Array>,
}

impl OptimizerState {
    /// Zeroed buffers named `names` for every parameter of `model`, each of its shape and
    /// dtype, tagged as optimizer state.
    pub fn zeroed(model: &dyn Module, names: &'static [&'static str]) -> Result<Self> {
        let mut params: Vec<(String, Tensor)> = Vec::new();
        model.visit(&mut |name, t| params.push((name.to_owned(), t.clone())));
        let slots = params
            .into_iter()
            .map(|(name, t)| {
                let _tag = t.device().scoped_tag(headroom_alloc::Tag::OPTIMIZER_STATE);
                let buffers = names
                    .iter()
                    .map(|_| Array::zeros(t.device(), t.shape().clone(), t.dtype()))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Slot { name, buffers })
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            steps: 0,
            names,
            slots,
        })
    }

    /// Updates done so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// One update: `update` runs on each parameter that has a gradient, with the step's
    /// [`Update`] (the step number, `grad_scale`) and the parameter's buffers; then the count
    /// grows by one. Everything is checked before anything is updated (names, shapes and dtypes
    /// of parameters, gradients and state, and that no other handle shares a parameter), so a
    /// refused step leaves the model as it was.
    pub fn step(
        &mut self,
        model: &mut dyn Module,
        grads: &Gradients,
        grad_scale: f64,
        mut update: impl FnMut(Update, &mut Tensor, &Array, &mut [Array]) -> Result<()>,
    ) -> Result<()> {
        self.check(model, grads)?;
        let step = Update::new(self.steps + 1).scaled(grad_scale);
        let mut index = 0;
        let slots = &mut self.slots;
        model.visit_mut(&mut |_, param| {
            let slot = &mut slots[index];
            index += 1;
            match grads.get(param) {
                Some(grad) => update(step, param, grad, &mut slot.buffers),
                None => Ok(()),
            }
        })?;
        self.steps += 1;
        Ok(())
    }

    /// The first reason a step of `model` with `grads` cannot run on this state, if any.
    fn check(&self, model: &dyn Module, grads: &Gradients) -> Result<()> {
        let slots = &self.slots;
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
        match problems.into_iter().next() {
            Some(problem) => Err(Error::config("optimizer step", problem)),
            None => Ok(()),
        }
    }

    /// Every buffer, named `{parameter}.{buffer name}`.
    pub fn named(&self) -> Vec<(String, Array)> {
        self.slots
            .iter()
            .flat_map(|slot| {
                slot.buffers
                    .iter()
                    .zip(self.names)
                    .map(move |(b, n)| (format!("{}.{n}", slot.name), b.clone()))
            })
            .collect()
    }

    /// Replaces each buffer with `load(its name)`, which must have its shape and dtype, and the
    /// count with `steps`. Nothing changes unless every buffer loads and fits.
    pub fn load(&mut self, load: &dyn Fn(&str) -> Result<Array>, steps: u64) -> Result<()> {
        let mut loaded = Vec::with_capacity(self.slots.len());
        for slot in &self.slots {
            let mut buffers = Vec::with_capacity(slot.buffers.len());
            for (old, n) in slot.buffers.iter().zip(self.names) {
                let key = format!("{}.{n}", slot.name);
                let new = load(&key)?;
                if new.shape() != old.shape() || new.dtype() != old.dtype() {
                    return Err(Error::config(
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
        for (slot, buffers) in self.slots.iter_mut().zip(loaded) {
            slot.buffers = buffers;
        }
        self.steps = steps;
        Ok(())
    }

    /// Bytes the buffers hold.
    pub fn bytes(&self) -> u64 {
        self.slots
            .iter()
            .flat_map(|s| &s.buffers)
            .map(|b| b.buffer().bytes() as u64)
            .sum()
    }
}
