//! The cuBLAS handle of a CUDA device, bound to the device's stream.
//!
//! cudarc's own handle type panics when destroying the handle fails (in `Drop`); this one lets
//! that failure go, as a driver context that is already gone leaves nothing to release.

use std::sync::Arc;

use cudarc::cublas::result::{create_handle, destroy_handle, set_stream};
use cudarc::cublas::sys::cublasHandle_t;
use cudarc::driver::CudaStream;

use crate::error::{Error, Result};

/// A cuBLAS handle whose calls queue on one stream; one call at a time (keep it under a lock).
pub(crate) struct BlasHandle {
    handle: cublasHandle_t,
    /// Kept alive as long as the handle that queues on it.
    stream: Arc<CudaStream>,
}

// SAFETY: a cuBLAS handle may be used from any thread as long as one thread at a time does, which
// the backend's lock ensures; the stream is `Send + Sync`.
unsafe impl Send for BlasHandle {}
// SAFETY: as above; `&BlasHandle` only hands out the raw handle, used under the lock.
unsafe impl Sync for BlasHandle {}

impl BlasHandle {
    /// A new handle queueing on `stream`, whose context must be current on this thread.
    pub(crate) fn new(stream: Arc<CudaStream>) -> Result<Self> {
        let failed = |call: &'static str, err: cudarc::cublas::result::CublasError| Error::Cuda {
            op: "cuda",
            call,
            name: format!("{:?}", err.0),
            detail: err.to_string(),
        };
        let handle = create_handle().map_err(|err| failed("cublasCreate", err))?;
        let blas = Self { handle, stream };
        // SAFETY: `handle` was just created and `stream` is a live stream of the current
        // context, kept alive by `blas` as long as the handle.
        unsafe { set_stream(blas.handle, blas.stream.cu_stream().cast()) }
            .map_err(|err| failed("cublasSetStream", err))?;
        Ok(blas)
    }

    /// The raw handle, for cuBLAS calls made under the backend's lock.
    pub(crate) fn raw(&self) -> cublasHandle_t {
        self.handle
    }
}

impl Drop for BlasHandle {
    fn drop(&mut self) {
        // Bound so that cuBLAS finds the context it was created in; if that fails, or the
        // destruction does, the context is gone and took the handle's resources with it.
        let _ = self.stream.context().bind_to_thread();
        // SAFETY: the handle was created by `new`, is destroyed once, here, and nothing uses it
        // after (the backend drops it with itself).
        let _ = unsafe { destroy_handle(self.handle) };
    }
}
