#![doc = include_str!("../README.md")]

mod alike;
mod array;
mod backend;
mod buffer;
mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
mod device;
mod dtype;
mod error;
mod host_tier;
mod memory;
mod meta;
pub mod ops;
pub mod quantize;
mod shape;
mod timeline;
mod vector_math;
mod work;

pub use array::Array;
pub use backend::Backend;
pub use buffer::{Buffer, PendingWork};
pub use cpu::CpuBackend;
pub use device::{Device, DeviceConfig, HostSource};
pub use dtype::{Compute, DType, Element, Float};
pub use error::{Error, Result};
pub use host_tier::HOST_TIER;
pub use memory::{DeviceKind, KernelTime, TagScope};
pub use meta::{MetaBackend, PlanTarget, PlanningMemory};
pub use shape::Shape;
pub use work::{Rates, Work};
