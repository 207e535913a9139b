//! Activations and dropout: modules without parameters.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use headroom_autograd::Tensor;
use headroom_kernels::ops::random::uniform;

use crate::error::{Error, Result};
use crate::module::Module;

/// An activation function, as a module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `max(x, 0)`.
    Relu,
    /// GELU, tanh form.
    Gelu,
    /// `tanh x`.
    Tanh,
}

impl Activation {
    /// Applies it.
    pub fn apply(self, x: &Tensor) -> Result<Tensor> {
        Ok(match self {
            Activation::Relu => x.relu()?,
            Activation::Gelu => x.gelu()?,
            Activation::Tanh => x.tanh()?,
        })
    }
}

impl Module for Activation {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.apply(x)
    }

    fn visit(&self, _: &mut dyn FnMut(&str, &Tensor)) {}

    fn visit_mut(&mut self, _: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>) -> Result<()> {
        Ok(())
    }
}

/// Counts the dropout masks a model has drawn; every dropout layer of the model shares one, so
/// that saving and restoring the count (with a checkpoint) replays the same masks.
#[derive(Debug, Clone, Default)]
pub struct DropoutCounter(Arc<AtomicU64>);

impl DropoutCounter {
    /// Masks drawn so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Sets the count (when resuming).
    pub fn set(&self, calls: u64) {
        self.0.store(calls, Ordering::Relaxed);
    }

    fn next(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

/// Inverted dropout while training: zeroes each element with probability `p` and scales the
/// rest by `1 / (1 - p)`; the identity in evaluation or with `p = 0`. Each call draws a new mask
/// from `(seed, counter)`, so a run is reproducible from its seed and counter.
#[derive(Debug, Clone)]
pub struct Dropout {
    p: f64,
    seed: u64,
    counter: DropoutCounter,
    training: bool,
}

impl Dropout {
    /// Dropout with probability `p` in `[0, 1)`, masks drawn from `seed` and `counter`.
    pub fn new(p: f64, seed: u64, counter: DropoutCounter) -> Result<Self> {
        if !(0.0..1.0).contains(&p) {
            return Err(Error::config(
                "dropout",
                format!("probability {p} outside [0, 1)"),
            ));
        }
        Ok(Self {
            p,
            seed,
            counter,
            training: true,
        })
    }
}

impl Dropout {
    /// The probability of dropping an element.
    pub fn p(&self) -> f64 {
        self.p
    }

    /// The counter its masks are drawn from.
    pub(crate) fn counter(&self) -> &DropoutCounter {
        &self.counter
    }

    /// True while training (masks are drawn), false in evaluation.
    pub fn is_training(&self) -> bool {
        self.training
    }

    /// The seed of the next mask, drawn as [`Module::forward`] draws it (the counter moves on);
    /// none in evaluation or with `p = 0`, where nothing is dropped. For ops that drop inside
    /// a fused kernel (attention's weights).
    pub fn next_mask_seed(&self) -> Option<u64> {
        (self.training && self.p > 0.0).then(|| uniform(self.seed, self.counter.next()).to_bits())
    }
}

impl Module for Dropout {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self.next_mask_seed() {
            Some(mask_seed) => Ok(x.dropout(self.p, mask_seed)?),
            None => Ok(x.clone()),
        }
    }

    fn visit(&self, _: &mut dyn FnMut(&str, &Tensor)) {}

    fn visit_mut(&mut self, _: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>) -> Result<()> {
        Ok(())
    }

    fn set_training(&mut self, training: bool) {
        self.training = training;
    }
}
