//! Which tape records on the current thread (as inside `tf.GradientTape`), scoped by guards:
//! [`Tape::start`] and [`Tape::record`] make a tape the recording one, [`no_grad`] none, and
//! every op asks [`begin`] whether it is being recorded.

use std::cell::RefCell;

use crate::tape::{Recording, Tape};
use crate::tensor::Tensor;

thread_local! {
    static RECORDING: RefCell<Option<Tape>> = const { RefCell::new(None) };
}

/// The tape recording on this thread, if any.
fn recording_tape() -> Option<Tape> {
    RECORDING.with(|r| r.borrow().clone())
}

/// Makes `tape` (or none) the recording one until the guard drops.
fn set_recording(tape: Option<Tape>) -> RecordingGuard {
    let previous = RECORDING.with(|r| r.replace(tape));
    RecordingGuard { previous }
}

impl Tape {
    /// Records on this thread until the guard drops (and restores whatever recorded before).
    pub fn start(&self) -> RecordingGuard {
        set_recording(Some(self.clone()))
    }

    /// Runs `f` while this tape records (its error type is the caller's: a layer above can
    /// record its own ops).
    pub fn record<T, E>(&self, f: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
        let _recording = self.start();
        f()
    }
}

/// Starts recording an op on `inputs` on the tape recording on this thread: `None` when no tape
/// records or the tape tracks none of them (variables count as tracked), so that the op saves
/// nothing.
pub(crate) fn begin(inputs: &[&Tensor]) -> Option<Recording> {
    recording_tape()?.begin_op(inputs)
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
