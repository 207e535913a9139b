//! Finding the CUDA libraries, and turning their failures into typed errors.

use cudarc::driver::DriverError;
use cudarc::driver::sys::cudaError_enum;
use headroom_alloc::{CudaError, CudaMemory};

use crate::error::{Error, Result};

/// How a CUDA device runs its products.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CudaOptions {
    /// Let f32 products run on tensor cores in TF32 (10-bit mantissa inputs, f32 accumulation):
    /// several times faster, with about 1e-3 relative error. Off by default, as PyTorch's
    /// `torch.backends.cuda.matmul.allow_tf32` is.
    pub tf32: bool,
    /// Bytes of cuBLAS workspace each product takes from the allocator (tagged as workspace),
    /// or `None` for cuBLAS's own recommendation (32 MiB on Hopper and later, 4 MiB before).
    /// A product whose workspace would not fit without evicting cached memory takes 16 KiB
    /// instead (the least with which no cuBLAS routine fails) and runs, more slowly.
    pub gemm_workspace: Option<u64>,
}

/// Fails unless the driver library can be loaded: cudarc panics when it cannot find one, so this
/// is checked before its first call.
pub(crate) fn require_driver() -> Result<()> {
    CudaMemory::require_driver().map_err(|err| source_error("cuda", err))
}

/// Fails unless cuBLAS and NVRTC can be loaded too.
pub(crate) fn require_libraries() -> Result<()> {
    require_driver()?;
    // SAFETY: this only tries to open the shared library by its usual names and closes it again;
    // it runs no code of the library beyond its loader's initialisers.
    if !unsafe { cudarc::cublas::sys::is_culib_present() } {
        return Err(missing_library("cuBLAS", "libcublas.so"));
    }
    require_nvrtc()
}

/// Fails unless NVRTC, the run-time CUDA compiler, can be loaded.
pub(crate) fn require_nvrtc() -> Result<()> {
    // SAFETY: as in `require_libraries`.
    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(missing_library("NVRTC", "libnvrtc.so"))
    }
}

fn missing_library(library: &'static str, file: &str) -> Error {
    Error::NoCudaLibrary {
        library,
        detail: format!(
            "{file} could not be loaded: install the CUDA toolkit 13 (or the `nvidia-cublas` and \
             `nvidia-cuda-nvrtc` Python packages) and add its library folder to LD_LIBRARY_PATH"
        ),
    }
}

/// The number of CUDA devices, or why there are none to count.
pub fn device_count() -> Result<usize> {
    require_driver()?;
    match cudarc::driver::result::init() {
        Ok(()) => {}
        Err(err) if err.0 == cudaError_enum::CUDA_ERROR_NO_DEVICE => return Ok(0),
        // A stub library, a driver older than the bindings, a mismatched kernel module: a
        // driver was found but cannot run anything.
        Err(err) => {
            return Err(Error::NoCudaDriver {
                detail: format!("the driver loaded but {}", CudaError::driver("cuInit", err)),
            });
        }
    }
    let count = cudarc::driver::result::device::get_count()
        .map_err(|err| driver_error("device_count", "cuDeviceGetCount", err))?;
    Ok(usize::try_from(count).unwrap_or(0))
}

/// Checks that the driver reports a device `ordinal`, for `op`: [`Error::NoCudaDriver`] when
/// it reports none at all, [`Error::Argument`] when it reports fewer.
pub(crate) fn require_device(op: &'static str, ordinal: u32) -> Result<()> {
    let count = device_count()?;
    if count == 0 {
        return Err(Error::NoCudaDriver {
            detail: "the driver loaded but reports no CUDA device".into(),
        });
    }
    if ordinal as usize >= count {
        return Err(Error::Argument {
            op,
            detail: format!("device {ordinal} asked for, the driver reports {count}"),
        });
    }
    Ok(())
}

/// The total memory of CUDA device `ordinal` in bytes (`cuDeviceTotalMem`): what an allocator
/// limit given as a fraction is a fraction of on [`Device::cuda`](crate::Device::cuda), and
/// what a run's memory budget is checked against before the device is opened.
pub fn device_memory(ordinal: u32) -> Result<u64> {
    require_device("device_memory", ordinal)?;
    let device = cudarc::driver::result::device::get(ordinal as i32)
        .map_err(|err| driver_error("device_memory", "cuDeviceGet", err))?;
    // SAFETY: `device` is a handle the driver just returned for an ordinal it reports.
    let bytes = unsafe { cudarc::driver::result::device::total_mem(device) }
        .map_err(|err| driver_error("device_memory", "cuDeviceTotalMem", err))?;
    Ok(bytes as u64)
}

/// Bytes free on CUDA device `ordinal` and its total, as the driver reports them
/// (`cuMemGetInfo`, what `torch.cuda.mem_get_info` returns): free memory counts what every
/// process holds, this one's allocator included. Opens the device's primary context if no
/// device holds it yet, which takes a moment on a GPU.
pub fn memory_info(ordinal: u32) -> Result<(u64, u64)> {
    require_device("memory_info", ordinal)?;
    let context = cudarc::driver::CudaContext::new(ordinal as usize)
        .map_err(|err| driver_error("memory_info", "cuDevicePrimaryCtxRetain", err))?;
    let (free, total) = context
        .mem_get_info()
        .map_err(|err| driver_error("memory_info", "cuMemGetInfo", err))?;
    Ok((free as u64, total as u64))
}

/// True when a CUDA device can be opened: the driver loads and reports at least one.
pub fn is_available() -> bool {
    device_count().is_ok_and(|count| count > 0)
}

/// A driver error as [`Error::Cuda`], with the driver's name and description of it.
pub(crate) fn driver_error(op: &'static str, call: &'static str, err: DriverError) -> Error {
    source_error(op, CudaError::driver(call, err))
}

/// headroom-alloc's CUDA error, for `op`, as this crate's: [`Error::NoCudaDriver`] or
/// [`Error::Cuda`].
pub(crate) fn source_error(op: &'static str, err: CudaError) -> Error {
    match err {
        CudaError::NoDriver { detail } => Error::NoCudaDriver { detail },
        CudaError::Driver { call, name, detail } => Error::Cuda {
            op,
            call,
            name,
            detail,
        },
    }
}
