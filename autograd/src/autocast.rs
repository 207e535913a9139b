//! The precision policy of the current thread (as inside `torch.autocast`), scoped by a guard.

use std::cell::Cell;

use headroom_kernels::DType;

thread_local! {
    static AUTOCAST: Cell<Option<DType>> = const { Cell::new(None) };
}

/// The precision policy of this thread: `Some(half)` while an [`autocast`] scope lives.
pub fn autocast_dtype() -> Option<DType> {
    AUTOCAST.with(Cell::get)
}

/// Runs matrix products in `dtype` (BF16 or F16) until the guard drops, while softmax,
/// log-softmax, layer norm, losses and reductions run in f32 (`torch.autocast`). Parameters
/// stay f32 and are cast per op; the casts are recorded, so gradients come back in f32. Any
/// other dtype switches the policy off.
///
/// ```
/// use headroom_autograd::{Tensor, autocast};
/// use headroom_kernels::{Array, DType, Device, DeviceConfig};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let x = Tensor::new(Array::full(&cpu, [2, 3], DType::F32, 0.5)?);
/// let w = Tensor::variable(Array::full(&cpu, [3, 4], DType::F32, 0.25)?);
/// let _bf16 = autocast(DType::BF16);
/// let h = x.matmul(&w)?;
/// assert_eq!(h.dtype(), DType::BF16);
/// assert_eq!(h.softmax()?.dtype(), DType::F32);
/// # Ok::<(), headroom_autograd::Error>(())
/// ```
pub fn autocast(dtype: DType) -> AutocastGuard {
    let policy = matches!(dtype, DType::BF16 | DType::F16).then_some(dtype);
    let previous = AUTOCAST.with(|a| a.replace(policy));
    AutocastGuard { previous }
}

/// Restores the previous precision policy when dropped.
#[must_use = "the policy applies only while the guard lives"]
pub struct AutocastGuard {
    previous: Option<DType>,
}

impl Drop for AutocastGuard {
    fn drop(&mut self) {
        AUTOCAST.with(|a| a.set(self.previous));
    }
}
