//! Fused optimizer updates: one pass over parameters, gradients and state, in place, allocating
//! nothing (an optimizer step can never run out of memory).

mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
pub mod dynamic_map;
pub(crate) mod kernels;
mod meta;
pub mod rounding;

pub use dynamic_map::QUANT_BLOCK;
pub use kernels::{AdamStep, AdamW, AdamWOperands, OptimKernels, QuantizedMut, Sgd, Update};

use crate::array::Array;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};

/// Fails unless `param` is float, every other operand has its dtype, device and shape, and the
/// update is numbered from 1.
fn check_update(op: &'static str, update: Update, param: &Array, others: &[&Array]) -> Result<()> {
    param.check_float(op)?;
    for other in others {
        param.check_peer(other, op)?;
        check_len(op, param, other)?;
    }
    check_step(op, update)
}

/// Fails unless `other` has `param`'s shape.
fn check_len(op: &'static str, param: &Array, other: &Array) -> Result<()> {
    if other.shape() == param.shape() {
        return Ok(());
    }
    Err(Error::Shape {
        op,
        detail: format!("parameter {} against {}", param.shape(), other.shape()),
    })
}

/// Fails unless the update is numbered from 1.
fn check_step(op: &'static str, update: Update) -> Result<()> {
    if update.step == 0 {
        return Err(Error::Argument {
            op,
            detail: "steps are numbered from 1".into(),
        });
    }
    Ok(())
}

/// Fails unless `param` computes in f32 (f32, f16 or bf16): state narrower than its parameter
/// is decoded to and encoded from f32.
fn check_narrow_state(op: &'static str, param: &Array) -> Result<()> {
    if matches!(param.dtype(), DType::F32 | DType::F16 | DType::BF16) {
        return Ok(());
    }
    Err(Error::DType {
        op,
        expected: "a parameter in f32, f16 or bf16 (narrow optimizer state is computed in f32)"
            .into(),
        got: param.dtype(),
    })
}

/// One optimizer moment kept block-wise in 8 bits ([`dynamic_map`]): a `u8` code per element,
/// in the parameter's shape, and an `f32` scale per block of [`QUANT_BLOCK`] elements.
#[derive(Debug, Clone)]
pub struct Quantized {
    /// The codes.
    pub codes: Array,
    /// The scales.
    pub scales: Array,
}

impl Quantized {
    /// The state of a moment of zeros for a parameter of `shape` on `device`.
    pub fn zeros(device: &Device, shape: impl Into<crate::Shape>) -> Result<Self> {
        let shape = shape.into();
        let blocks = dynamic_map::blocks(shape.numel());
        Ok(Self {
            codes: Array::zeros(device, shape, DType::U8)?,
            scales: Array::zeros(device, [blocks], DType::F32)?,
        })
    }

    /// Fails unless this is the state of a moment of `param`.
    fn check(&self, op: &'static str, param: &Array) -> Result<()> {
        param.device().check_same(self.codes.device(), op)?;
        param.device().check_same(self.scales.device(), op)?;
        check_len(op, param, &self.codes)?;
        let blocks = dynamic_map::blocks(param.numel());
        for (array, dtype, what) in [
            (&self.codes, DType::U8, "codes"),
            (&self.scales, DType::F32, "scales"),
        ] {
            if array.dtype() != dtype {
                return Err(Error::DType {
                    op,
                    expected: format!("{dtype} {what}"),
                    got: array.dtype(),
                });
            }
        }
        if self.scales.shape().dims() != [blocks] {
            return Err(Error::Shape {
                op,
                detail: format!(
                    "{} scales for a parameter of {} elements, which needs {blocks}",
                    self.scales.shape(),
                    param.numel()
                ),
            });
        }
        Ok(())
    }

    fn as_mut(&mut self, op: &'static str) -> Result<QuantizedMut<'_>> {
        Ok(QuantizedMut {
            codes: self.codes.buffer_mut(op)?,
            scales: self.scales.buffer_mut(op)?,
        })
    }
}

/// One AdamW step on `param` with gradient `grad` (times `update.grad_scale`) and moments `m`,
/// `v` (zeros before step 1): `p -= lr * wd * p; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
/// p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)`. The moments are in the
/// parameter's dtype, or in bf16 for a parameter computed in f32. bf16 moments and a bf16
/// parameter are rounded stochastically ([`rounding`]) on the update's stream, so that an
/// update smaller than half of bf16's spacing still moves them on average; f32 and f16 are
/// rounded to nearest.
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
    check_update(OP, update, param, &[grad])?;
    for moment in [&*m, &*v] {
        if moment.dtype() == DType::BF16 && param.dtype() != DType::BF16 {
            check_narrow_state(OP, param)?;
            param.device().check_same(moment.device(), OP)?;
        } else {
            param.check_peer(moment, OP)?;
        }
        check_len(OP, param, moment)?;
    }
    if m.dtype() != v.dtype() {
        return Err(Error::DType {
            op: OP,
            expected: format!("a second moment of {}, as the first", m.dtype()),
            got: v.dtype(),
        });
    }
    let device = param.device().clone();
    let operands = AdamWOperands {
        param: param.buffer_mut(OP)?,
        grad: grad.buffer(),
        m: m.buffer_mut(OP)?,
        v: v.buffer_mut(OP)?,
    };
    device.backend().adamw(config, update, operands)
}

/// [`adamw_step`] with the moments kept block-wise in 8 bits ([`Quantized`], zeros before step
/// 1): each block is decoded, updated in f32 and encoded again against its new largest
/// magnitude, the first moment on the signed [`dynamic_map`], the second on the unsigned one,
/// rounded stochastically on the update's stream. The parameter moves by the moments before
/// they are encoded. For a parameter computed in f32; a bf16 parameter is rounded
/// stochastically.
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType};
/// use headroom_kernels::ops::optim::{AdamW, Quantized, Update, adamw_step_8bit};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let mut p = Array::full(&cpu, [3], DType::F32, 1.0)?;
/// let g = Array::full(&cpu, [3], DType::F32, 0.5)?;
/// let (mut m, mut v) = (Quantized::zeros(&cpu, [3])?, Quantized::zeros(&cpu, [3])?);
/// let config = AdamW { lr: 0.1, weight_decay: 0.0, ..AdamW::default() };
/// adamw_step_8bit(&config, Update::new(1), &mut p, &g, &mut m, &mut v)?;
/// assert!(p.to_f64()?.iter().all(|&x| (x - 0.9).abs() < 1e-4));
/// // Every element is its block's largest: stored exactly, as code 127 of scale 0.05.
/// assert_eq!(m.codes.to_f64()?, [127.0; 3]);
/// assert!((m.scales.to_f64()?[0] - 0.05).abs() < 1e-6);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn adamw_step_8bit(
    config: &AdamW,
    update: Update,
    param: &mut Array,
    grad: &Array,
    m: &mut Quantized,
    v: &mut Quantized,
) -> Result<()> {
    const OP: &str = "adamw";
    check_update(OP, update, param, &[grad])?;
    check_narrow_state(OP, param)?;
    m.check(OP, param)?;
    v.check(OP, param)?;
    let device = param.device().clone();
    let operands = AdamWOperands {
        param: param.buffer_mut(OP)?,
        grad: grad.buffer(),
        m: m.as_mut(OP)?,
        v: v.as_mut(OP)?,
    };
    device.backend().adamw_8bit(config, update, operands)
}

/// One SGD step on `param` with gradient `grad` (times `update.grad_scale`), as
/// `torch.optim.SGD`: `d = g + wd * p`; with momentum, `buf = d` at step 1 and
/// `buf = momentum * buf + (1 - dampening) * d` after, then `d = buf` (or `d + momentum * buf`
/// with Nesterov); `p -= lr * d`. `momentum` is the buffer, required exactly when
/// `config.momentum` is not 0. A bf16 parameter is rounded stochastically on the update's
/// stream ([`rounding`]), every other dtype to nearest.
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
