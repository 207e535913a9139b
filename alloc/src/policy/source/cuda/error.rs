//! Why a CUDA memory source could not be made: no driver to load, or a driver call that failed.

use cudarc::driver::DriverError;

/// Why [`CudaMemory`](crate::CudaMemory) could not be made, or the driver not loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CudaError {
    /// The driver library (`libcuda.so`) could not be loaded: the machine has no NVIDIA driver,
    /// or its folder is not on the library path.
    #[error("no CUDA driver found: {detail}")]
    NoDriver {
        /// What was looked for and what to check.
        detail: String,
    },

    /// A driver call failed.
    #[error("{call} failed with {name}: {detail}")]
    Driver {
        /// The driver function, such as `cuMemGetInfo`.
        call: &'static str,
        /// The driver's name for the error, such as `CUDA_ERROR_INVALID_CONTEXT`.
        name: String,
        /// The driver's description of it.
        detail: String,
    },
}

impl CudaError {
    /// The failure of the driver function `call` with `err`, named and described by the driver.
    pub fn driver(call: &'static str, err: DriverError) -> Self {
        let (name, detail) = describe(err);
        Self::Driver { call, name, detail }
    }
}

/// Fails with [`CudaError::NoDriver`] unless the driver library loads
/// ([`CudaMemory::require_driver`](crate::CudaMemory::require_driver)).
pub(crate) fn require_driver() -> Result<(), CudaError> {
    // SAFETY: this only tries to open the shared library by its usual names and closes it again;
    // it runs no code of the library beyond its loader's initialisers.
    if unsafe { cudarc::driver::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(CudaError::NoDriver {
            detail: "libcuda could not be loaded: install the NVIDIA driver, or add the folder \
                     holding libcuda.so to LD_LIBRARY_PATH"
                .into(),
        })
    }
}

/// The driver's name for an error (`CUDA_ERROR_OUT_OF_MEMORY`) and its description of it.
pub(crate) fn describe(err: DriverError) -> (String, String) {
    let text = |s: Result<&std::ffi::CStr, DriverError>| {
        s.map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|_| format!("CUresult {}", err.0 as i32))
    };
    (text(err.error_name()), text(err.error_string()))
}
