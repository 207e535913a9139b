//! Fused optimizer updates: one pass over parameters, gradients and state, in place, allocating
//! nothing (an optimizer step can never run out of memory).

mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
mod meta;

pub use crate::backend::optim::{AdamW, OptimKernels, Sgd, Update};

use crate::array::Array;
use crate::error::{Error, Result};

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
