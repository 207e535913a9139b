//! What the current thread is doing: which tape records (as inside `tf.GradientTape`), and which
//! precision policy applies (as inside `torch.autocast`). Both are scoped by guards.

use std::cell::{Cell, RefCell};

use headroom_kernels::DType;

use crate::tape::Tape;

thread_local! {
    static RECORDING: RefCell<Option<Tape>> = const { RefCell::new(None) };
    static AUTOCAST: Cell<Option<DType>> = const { Cell::new(None) };
}

/// The tape recording on this thread, if any.
pub(crate) fn recording_tape() -> Option<Tape> {
    RECORDING.with(|r| r.borrow().clone())
}

/// Makes `tape` (or none) the recording one until the guard drops.
pub(crate) fn set_recording(tape: Option<Tape>) -> RecordingGuard {
    let previous = RECORDING.with(|r| r.replace(tape));
    RecordingGuard { previous }
}

/// Restores the previously recording tape when dropped.
#[must_use = "recording lasts only while the guard lives"]
pub struct RecordingGuard {
    previous: Option<Tape>,
}

impl Drop for RecordingGuard {
    fn drop(&mut self) {
        let previous = self.previous.take();
        RECORDING.with(|r| *r.borrow_mut() = previous);
    }
}

/// Stops recording until the guard drops: ops run, and nothing is tracked or saved
/// (`torch.no_grad`, `tape.stop_recording()`).
///
/// ```
/// use headroom_autograd::{Tape, Tensor, no_grad};
/// use headroom_kernels::{Array, DType, Device, DeviceConfig};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let w = Tensor::variable(Array::full(&cpu, [3], DType::F32, 2.0)?);
/// let tape = Tape::new();
/// let _recording = tape.start();
/// let tracked = w.scale(2.0)?;
/// let untracked = {
///     let _off = no_grad();
///     w.scale(2.0)?
/// };
/// assert!(tape.tracks(&tracked) && !tape.tracks(&untracked));
/// # Ok::<(), headroom_autograd::Error>(())
/// ```
pub fn no_grad() -> RecordingGuard {
    set_recording(None)
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
