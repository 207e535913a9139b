//! Waiting on a non-blocking communicator with a deadline.

use std::time::{Duration, Instant};

use cudarc::nccl::result::NcclError;
use cudarc::nccl::sys;

use crate::Result;

/// How a wait ended.
pub(crate) enum Outcome {
    /// What was waited for happened.
    Ready,
    /// NCCL reported an error: this rank's, or one that another rank caused.
    Failed(NcclError),
    /// The deadline passed first; how long it waited.
    TimedOut(Duration),
}

/// Waits until `ready` says so, for at most `timeout` from `start`, polling `comm`'s
/// asynchronous state meanwhile. `ready` is told whether NCCL is still busy with the last call
/// (an initialization, the queueing of a collective, a finalization); its own failure ends the
/// wait as this function's error.
///
/// # Safety
/// `comm` is a live communicator.
pub(crate) unsafe fn poll(
    comm: sys::ncclComm_t,
    start: Instant,
    timeout: Duration,
    mut ready: impl FnMut(bool) -> Result<bool>,
) -> Result<Outcome> {
    loop {
        let mut state = sys::ncclResult_t::ncclSuccess;
        // SAFETY: the caller promised a live communicator; NCCL writes `state`.
        if let Err(err) = unsafe { sys::ncclCommGetAsyncError(comm, &mut state) }.result() {
            return Ok(Outcome::Failed(err));
        }
        if let Err(err) = state.result() {
            return Ok(Outcome::Failed(err));
        }
        if ready(state == sys::ncclResult_t::ncclInProgress)? {
            return Ok(Outcome::Ready);
        }
        let waited = start.elapsed();
        if waited >= timeout {
            return Ok(Outcome::TimedOut(waited));
        }
        // Spin briefly (a collective often completes in microseconds), then sleep.
        if waited < Duration::from_millis(1) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}
