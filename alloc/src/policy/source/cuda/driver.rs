//! The device a CUDA source serves: its context and stream, through which the driver is called,
//! and how a driver error becomes a refusal or a fault.

use std::sync::Arc;

use cudarc::driver::sys::cudaError_enum;
use cudarc::driver::{CudaContext, CudaStream, DriverError};

use super::error::describe;
use crate::policy::source::SourceError;

/// The device's context and stream, its name for reports and its total memory.
pub(crate) struct Driver {
    pub(crate) context: Arc<CudaContext>,
    /// The device's stream, drained before memory goes back to the driver.
    pub(crate) stream: Arc<CudaStream>,
    pub(crate) name: String,
    pub(crate) total: u64,
}

impl Driver {
    /// Bytes free on the device now, and its total, as the driver sees them.
    pub(crate) fn free_and_total(&self) -> Result<(u64, u64), DriverError> {
        let (free, total) = self.context.mem_get_info()?;
        Ok((free as u64, total as u64))
    }

    /// A driver error of `call` for `bytes` bytes: a refusal for an out-of-memory, else a fault.
    pub(crate) fn refusal(&self, call: &str, bytes: u64, err: DriverError) -> SourceError {
        let (name, _) = describe(err);
        let free = match self.free_and_total() {
            Ok((free, total)) => format!("; the driver reports {free} of {total} bytes free"),
            Err(_) => String::new(),
        };
        if err.0 == cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY {
            SourceError::new(format!(
                "{call} of {bytes} bytes on {} refused: {name}{free}",
                self.name
            ))
        } else {
            // A device in an error state (a faulted kernel), a lost context: more memory would
            // not help, so the allocation fails at once and not as an out-of-memory.
            SourceError::fault(format!(
                "{call} of {bytes} bytes on {} failed: {name}",
                self.name
            ))
        }
    }

    /// Makes the device's context current on this thread, for a call about `bytes` bytes.
    pub(crate) fn bind(&self, bytes: u64) -> Result<(), SourceError> {
        self.context
            .bind_to_thread()
            .map_err(|err| self.refusal("cuCtxSetCurrent", bytes, err))
    }

    /// Binds the context and waits until no queued work can touch memory about to go back to
    /// the driver: neither `cuMemFree` nor `cuMemUnmap` waits for the stream.
    pub(crate) fn drain(&self, bytes: u64) -> Result<(), SourceError> {
        self.bind(bytes)?;
        self.stream
            .synchronize()
            .map_err(|err| self.refusal("cuStreamSynchronize", bytes, err))
    }
}
