//! Fused optimizer updates: one pass over parameters, gradients and state, in place, allocating
//! nothing (an optimizer step can never run out of memory).

mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
mod meta;

use crate::buffer::{Array, Buffer};
use crate::error::{Error, Result};

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

/// Fails unless `param` is float, every other operand has its dtype, device and shape, and the
/// update is numbered from 1.
fn check_update(op: &'static str, update: Update, param: &Array, others: &[&Array]) -> Result<()> {
    param.check_float(op)?;
    for other in others {
        param.check_peer(other, op)?;
        if other.shape() != param.shape() {
            return Err(Error::Shape {
                op,
                detail: format!("parameter {} against {}", param.shape(), other.shape()),
            });
        }
    }
    if update.step == 0 {
        return Err(Error::Argument {
            op,
            detail: "steps are numbered from 1".into(),
        });
    }
    Ok(())
}

/// One AdamW step on `param` with gradient `grad` (times `update.grad_scale`) and moments `m`,
/// `v` (zeros before step 1): `p -= lr * wd * p; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
/// p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)`.
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType};
/// use headroom_kernels::ops::optim::{AdamW, Update, adamw_step};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let mut p = Array::full(&cpu, [3], DType::F32, 1.0)?;
/// let g = Array::full(&cpu, [3], DType::F32, 0.5)?;
/// let (mut m, mut v) = (Array::zeros(&cpu, [3], DType::F32)?, Array::zeros(&cpu, [3], DType::F32)?);
/// let config = AdamW { lr: 0.1, weight_decay: 0.0, ..AdamW::default() };
/// adamw_step(&config, Update::new(1), &mut p, &g, &mut m, &mut v)?;
/// // The first step moves every parameter by about lr against the gradient's sign.
/// assert!(p.to_f64()?.iter().all(|&x| (x - 0.9).abs() < 1e-4));
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn adamw_step(
    config: &AdamW,
    update: Update,
    param: &mut Array,
    grad: &Array,
    m: &mut Array,
    v: &mut Array,
) -> Result<()> {
    const OP: &str = "adamw";
    check_update(OP, update, param, &[grad, m, v])?;
    let device = param.device().clone();
    device.backend().adamw(
        config,
        update,
        param.buffer_mut(OP)?,
        grad.buffer(),
        m.buffer_mut(OP)?,
        v.buffer_mut(OP)?,
    )
}

/// One SGD step on `param` with gradient `grad` (times `update.grad_scale`), as
/// `torch.optim.SGD`: `d = g + wd * p`; with momentum, `buf = d` at step 1 and
/// `buf = momentum * buf + (1 - dampening) * d` after, then `d = buf` (or `d + momentum * buf`
/// with Nesterov); `p -= lr * d`. `momentum` is the buffer, required exactly when
/// `config.momentum` is not 0.
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType};
/// use headroom_kernels::ops::optim::{Sgd, Update, sgd_step};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let mut p = Array::full(&cpu, [2], DType::F64, 1.0)?;
/// let g = Array::full(&cpu, [2], DType::F64, 0.5)?;
/// sgd_step(&Sgd { lr: 0.5, ..Sgd::default() }, Update::new(1), &mut p, &g, None)?;
/// assert_eq!(p.to_f64()?, [0.75, 0.75]);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn sgd_step(
    config: &Sgd,
    update: Update,
    param: &mut Array,
    grad: &Array,
    momentum: Option<&mut Array>,
) -> Result<()> {
    const OP: &str = "sgd";
    let mut others = vec![grad];
    if let Some(buffer) = &momentum {
        others.push(buffer);
    }
    check_update(OP, update, param, &others)?;
    if momentum.is_some() != (config.momentum != 0.0) {
        return Err(Error::Argument {
            op: OP,
            detail: format!(
                "a momentum of {} needs {} buffer",
                config.momentum,
                if config.momentum != 0.0 { "a" } else { "no" }
            ),
        });
    }
    let device = param.device().clone();
    let buffer = match momentum {
        Some(buffer) => Some(buffer.buffer_mut(OP)?),
        None => None,
    };
    device
        .backend()
        .sgd(config, update, param.buffer_mut(OP)?, grad.buffer(), buffer)
}
