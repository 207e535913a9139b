//! CUDA device memory as a memory source (feature `cuda`), over a cudarc context and stream.
//!
//! cudarc loads the driver when it is first called, so a build with this feature needs no CUDA
//! installed; a machine without a driver gets [`CudaError::NoDriver`] from
//! [`CudaMemory::require_driver`]. Modules, each above the ones it uses:
//! - `error`: why a source could not be made, and the driver's names for its errors;
//! - `pages`: a range of addresses that grows and shrinks in place, a page at a time;
//! - `driver`: the device's context and stream, and a driver error as a refusal or a fault;
//! - `memory`: [`CudaMemory`], the source itself;
//! - `clock`: [`CudaStreamClock`], CUDA streams and events for stream-aware blocks;
//! - `page_locked`: [`CudaPageLocked`], page-locked host memory of a context.

// Driver calls are foreign functions; every unsafe block says why its call is sound.
#![allow(unsafe_code)]

mod clock;
mod driver;
mod error;
mod memory;
mod page_locked;
mod pages;

pub use clock::CudaStreamClock;
pub use error::CudaError;
pub use memory::CudaMemory;
pub use page_locked::CudaPageLocked;
