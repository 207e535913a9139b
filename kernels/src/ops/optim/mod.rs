//! Fused optimizer updates: one pass over parameters, gradients and state, in place, allocating
//! nothing (an optimizer step can never run out of memory).

mod cpu;
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
    /// One AdamW step, in place, at step number `step` (from 1); float dtypes, all four buffers
    /// of one dtype and length.
    fn adamw(
        &self,
        config: &AdamW,
        step: u64,
        param: &mut Buffer,
        grad: &Buffer,
        m: &mut Buffer,
        v: &mut Buffer,
    ) -> Result<()>;
}

/// One AdamW step on `param` with gradient `grad` and moments `m`, `v` (zeros before step 1):
/// `p -= lr * wd * p; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
/// p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)`.
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType, ops::optim::{AdamW, adamw_step}};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let mut p = Array::full(&cpu, [3], DType::F32, 1.0)?;
/// let g = Array::full(&cpu, [3], DType::F32, 0.5)?;
/// let (mut m, mut v) = (Array::zeros(&cpu, [3], DType::F32)?, Array::zeros(&cpu, [3], DType::F32)?);
/// let config = AdamW { lr: 0.1, weight_decay: 0.0, ..AdamW::default() };
/// adamw_step(&config, 1, &mut p, &g, &mut m, &mut v)?;
/// // The first step moves every parameter by about lr against the gradient's sign.
/// assert!(p.to_f64()?.iter().all(|&x| (x - 0.9).abs() < 1e-4));
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn adamw_step(
    config: &AdamW,
    step: u64,
    param: &mut Array,
    grad: &Array,
    m: &mut Array,
    v: &mut Array,
) -> Result<()> {
    const OP: &str = "adamw";
    param.check_float(OP)?;
    for other in [grad, &*m, &*v] {
        param.check_peer(other, OP)?;
        if other.shape() != param.shape() {
            return Err(Error::Shape {
                op: OP,
                detail: format!("parameter {} against {}", param.shape(), other.shape()),
            });
        }
    }
    if step == 0 {
        return Err(Error::Argument {
            op: OP,
            detail: "steps are numbered from 1".into(),
        });
    }
    let device = param.device().clone();
    device.backend().adamw(
        config,
        step,
        param.buffer_mut(OP)?,
        grad.buffer(),
        m.buffer_mut(OP)?,
        v.buffer_mut(OP)?,
    )
}
