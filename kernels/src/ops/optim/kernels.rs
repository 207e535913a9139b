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

/// The constants of one AdamW step, computed in f64 once for every backend (each rounds them
/// to its compute type): PyTorch's update with the bias corrections folded in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamStep {
    /// The gradient's factor.
    pub grad_scale: f64,
    /// The first moment's decay.
    pub beta1: f64,
    /// The second moment's decay.
    pub beta2: f64,
    /// What the parameter is multiplied by first: `1 - lr * weight_decay`.
    pub decay: f64,
    /// The step size with the first moment's bias correction: `lr / (1 - beta1^t)`.
    pub step_size: f64,
    /// The root of the second moment's bias correction: `sqrt(1 - beta2^t)`.
    pub root_correction: f64,
    /// Added to the root of the second moment.
    pub eps: f64,
}

impl AdamW {
    /// The constants of `update` with these hyper-parameters.
    pub fn step_constants(&self, update: Update) -> AdamStep {
        let t = i32::try_from(update.step).unwrap_or(i32::MAX);
        AdamStep {
            grad_scale: update.grad_scale,
            beta1: self.beta1,
            beta2: self.beta2,
            decay: 1.0 - self.lr * self.weight_decay,
            step_size: self.lr / (1.0 - self.beta1.powi(t)),
            root_correction: (1.0 - self.beta2.powi(t)).sqrt(),
            eps: self.eps,
        }
    }
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

/// Which update this is and how to read the gradient: its number (from 1), a factor every
/// gradient element is multiplied by first (to unscale a loss scale or clip by norm without
/// touching the gradient's memory), and the stream of random numbers that rounds state kept
/// narrower than its parameter, and a bf16 parameter (one per parameter, so that no two share
/// their draws).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Update {
    /// The update's number, from 1.
    pub step: u64,
    /// The gradient's factor.
    pub grad_scale: f64,
    /// The rounding stream (the parameter's index, for an optimizer).
    pub stream: u64,
}

impl Update {
    /// Update number `step` with the gradient as it is, on stream 0.
    pub fn new(step: u64) -> Self {
        Self {
            step,
            grad_scale: 1.0,
            stream: 0,
        }
    }

    /// The same update with the gradient multiplied by `factor`.
    pub fn scaled(self, factor: f64) -> Self {
        Self {
            grad_scale: self.grad_scale * factor,
            ..self
        }
    }

    /// The same update on rounding stream `stream`.
    pub fn on_stream(self, stream: u64) -> Self {
        Self { stream, ..self }
    }

    /// The seed that rounds buffer `buffer` of this update (0 for AdamW's first moment, 1 for
    /// its second, 2 for a bf16 parameter): a pure function of the step, the stream and the
    /// buffer, so that every backend rounds alike and a resumed run draws what an unbroken one
    /// would.
    pub fn rounding_seed(&self, buffer: u64) -> u64 {
        crate::ops::random::kernels::random_bits(
            self.step ^ self.stream.wrapping_mul(0xD1B5_4A32_D192_ED03),
            buffer,
        )
    }
}

/// One moment kept block-wise in 8 bits: a code of the dynamic map per element, and per block
/// of [`QUANT_BLOCK`](crate::ops::optim::QUANT_BLOCK) elements the scale its codes are relative
/// to (the block's largest magnitude).
#[derive(Debug)]
pub struct QuantizedMut<'a> {
    /// `u8` codes, one per element.
    pub codes: &'a mut Buffer,
    /// `f32` scales, one per block.
    pub scales: &'a mut Buffer,
}

/// The operands of one AdamW step, updated in place: the parameter, its gradient, and its two
/// moments, each a buffer ([`OptimKernels::adamw`]) or kept block-wise in 8 bits
/// ([`QuantizedMut`], [`OptimKernels::adamw_8bit`]).
#[derive(Debug)]
pub struct AdamWOperands<'a, Moment> {
    /// The parameter, updated in place.
    pub param: &'a mut Buffer,
    /// Its gradient, of the parameter's dtype and length.
    pub grad: &'a Buffer,
    /// The first moment, updated in place.
    pub m: Moment,
    /// The second moment, updated in place.
    pub v: Moment,
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
    /// One AdamW step, in place; float dtypes, the gradient of the parameter's dtype and
    /// length, and the moments of its length in its dtype or in bf16 (for a parameter computed
    /// in f32). bf16 moments, and a bf16 parameter, are rounded stochastically
    /// ([`Update::rounding_seed`]); every other dtype to nearest.
    fn adamw(
        &self,
        config: &AdamW,
        update: Update,
        operands: AdamWOperands<'_, &mut Buffer>,
    ) -> Result<()>;

    /// One AdamW step with moments kept block-wise in 8 bits (the first moment on the signed
    /// dynamic map, the second on the unsigned one): each block is decoded, updated in f32,
    /// the parameter updated from the new moments, and the moments encoded again against the
    /// block's new largest magnitude, rounded stochastically. A parameter computed in f32,
    /// rounded stochastically where it is bf16.
    fn adamw_8bit(
        &self,
        config: &AdamW,
        update: Update,
        operands: AdamWOperands<'_, QuantizedMut<'_>>,
    ) -> Result<()>;

    /// One SGD step, in place, with a momentum buffer when `config.momentum` is not 0; float
    /// dtypes, every buffer of one dtype and length. A bf16 parameter is rounded
    /// stochastically ([`Update::rounding_seed`] 2), the momentum buffer to nearest.
    fn sgd(
        &self,
        config: &Sgd,
        update: Update,
        param: &mut Buffer,
        grad: &Buffer,
        momentum: Option<&mut Buffer>,
    ) -> Result<()>;
}
