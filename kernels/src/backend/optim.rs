//! What a backend runs for fused optimizer updates, and their hyper-parameters.

use crate::buffer::Buffer;
use crate::error::Result;

/// AdamW's hyper-parameters (decoupled weight decay, as `torch.optim.AdamW`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamW {
    /// Learning rate.
    pub lr: f64,
    /// Decay of the first moment.
    pub beta1: f64,
    /// Decay of the second moment.
    pub beta2: f64,
    /// Added to the root of the second moment.
    pub eps: f64,
    /// Decoupled weight decay.
    pub weight_decay: f64,
}

/// SGD's hyper-parameters (`torch.optim.SGD`: momentum, dampening, weight decay added to the
/// gradient, Nesterov).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sgd {
    /// Learning rate.
    pub lr: f64,
    /// Momentum factor (0: plain SGD, no buffer).
    pub momentum: f64,
    /// Dampening of the momentum's new term.
    pub dampening: f64,
    /// Weight decay (L2, added to the gradient).
    pub weight_decay: f64,
    /// Nesterov momentum.
    pub nesterov: bool,
}

impl Default for Sgd {
    /// lr 0.01, no momentum, no weight decay.
    fn default() -> Self {
        Self {
            lr: 0.01,
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
        }
    }
}

/// Which update this is and how to read the gradient: its number (from 1) and a factor every
/// gradient element is multiplied by first (to unscale a loss scale or clip by norm without
/// touching the gradient's memory).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Update {
    /// The update's number, from 1.
    pub step: u64,
    /// The gradient's factor.
    pub grad_scale: f64,
}

impl Update {
    /// Update number `step` with the gradient as it is.
    pub fn new(step: u64) -> Self {
        Self {
            step,
            grad_scale: 1.0,
        }
    }

    /// The same update with the gradient multiplied by `factor`.
    pub fn scaled(self, factor: f64) -> Self {
        Self {
            grad_scale: self.grad_scale * factor,
            ..self
        }
    }
}

impl Default for AdamW {
    /// PyTorch's defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.01.
    fn default() -> Self {
        Self {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
        }
    }
}

/// The kernels of this family that a backend runs.
pub trait OptimKernels {
    /// One AdamW step, in place; float dtypes, all four buffers of one dtype and length.
    fn adamw(
        &self,
        config: &AdamW,
        update: Update,
        param: &mut Buffer,
        grad: &Buffer,
        m: &mut Buffer,
        v: &mut Buffer,
    ) -> Result<()>;

    /// One SGD step, in place, with a momentum buffer when `config.momentum` is not 0; float
    /// dtypes, every buffer of one dtype and length.
    fn sgd(
        &self,
        config: &Sgd,
        update: Update,
        param: &mut Buffer,
        grad: &Buffer,
        momentum: Option<&mut Buffer>,
    ) -> Result<()>;
}
