#![doc = include_str!("../README.md")]

mod backend;
mod buffer;
mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
mod device;
mod dtype;
mod error;
mod meta;
pub mod ops;
mod shape;
mod vector_math;

pub use backend::{
    Backend, DataKernels, ElementwiseKernels, GemmKernels, IndexKernels, LayoutKernels,
    NormKernels, OptimKernels, RandomKernels, ReduceKernels,
};
pub use buffer::{Array, Buffer};
pub use cpu::CpuBackend;
pub use device::{Device, DeviceConfig, DeviceKind, HostSource, KernelTime, TagScope};
pub use dtype::{Compute, DType, Element, Float};
pub use error::{Error, Result};
pub use meta::{MetaBackend, PlanTarget, PlanningMemory};
pub use shape::Shape;
