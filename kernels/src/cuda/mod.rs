//! The CUDA backend (feature `cuda`): NVIDIA GPU memory managed by headroom-alloc, GEMMs through
//! cuBLAS, and every other op as a CUDA C kernel compiled by NVRTC. This folder holds the
//! driver, the compilation (NVRTC, the PTX cache) and the launching; each family's kernels and
//! their `.cu` source live in its folder under `ops/`.
//!
//! Nothing CUDA is needed to build or test the crate: [cudarc] loads the driver, cuBLAS and NVRTC
//! when a CUDA device is first asked for, and a machine without them gets
//! [`Error::NoCudaDriver`](crate::Error::NoCudaDriver) or
//! [`Error::NoCudaLibrary`](crate::Error::NoCudaLibrary), never a panic.
//!
//! # One stream per device for its kernels, and when memory is free
//!
//! Each CUDA device queues its kernels, cuBLAS calls and copies within the device on one stream
//! of its own, so work runs in the order it was asked for. Copies between the device and its
//! host tier run on a second stream: each waits for the kernels queued before it, and the
//! kernels wait for it (an event) only before they read what it wrote, or overwrite or reuse
//! what it reads (the pending work of the buffer it reads). A buffer's bytes go back to the
//! allocator as soon as the buffer drops, even while kernels queued before still use them: any
//! later user of those bytes is itself queued behind those kernels on the same stream, so it
//! cannot touch them early. This is the stream order PyTorch's caching allocator relies on, and
//! it costs nothing: no event per free and no synchronisation. Two things do wait for the
//! stream: host reads (the bytes must have arrived), and giving memory back to the driver
//! (headroom-alloc's [`CudaMemory`], the device's memory source, synchronises the stream before
//! `cuMemFree` of a region, or `cuMemUnmap` of an expandable region's pages, either of which
//! would otherwise free memory that queued kernels may still touch).
//!
//! # Kernels
//!
//! Each op family is one `.cu` file in its folder (`ops/norm/norm.cu`, [`Family`]), preceded by
//! this folder's `prelude.cuh`. A device compiles a family with NVRTC for its own architecture
//! the first time one of its kernels runs, and keeps the module for its lifetime. The embedding and the cross-entropy read their ids
//! (class targets) back to the host to check them against their range, as the CPU backend does,
//! so they wait for the stream.
//!
//! [`CudaMemory`]: headroom_alloc::CudaMemory

mod args;
mod backend;
mod blas;
mod compile;
mod driver;
pub(crate) mod enum_codes;
mod profile;
mod ptx_cache;
mod signature;

pub(crate) use args::{Arg, Walk};
pub(crate) use backend::{BLOCK, CudaBackend, float_kernel};
pub use compile::{Family, check_machine_code, compile_ptx};
pub(crate) use driver::source_error;
pub use driver::{CudaOptions, device_count, device_memory, is_available, memory_info};
pub(crate) use enum_codes::enum_codes;
