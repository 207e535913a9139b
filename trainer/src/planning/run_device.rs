//! The device a run trains on: the CPU, over a simulated device of `memory.capacity` bytes, or a
//! CUDA GPU (the `cuda` feature), its allocator configured by the run's memory budget.

use headroom_kernels::{Device, PlanTarget};

use crate::config::{DeviceChoice, TrainConfig};
use crate::error::{Error, Result};
use crate::planning::budget::Budget;

/// The memory budget of `config` on the device it names: on the CPU, of the simulated device;
/// on a GPU, of the memory its driver reports (asked without opening the device).
pub fn budget(config: &TrainConfig) -> Result<Budget> {
    match choice(config)? {
        DeviceChoice::Cpu => config.memory.budget(config.default_limit()),
        DeviceChoice::Cuda(ordinal) => config.memory.budget_on(gpu_memory(ordinal)?),
    }
}

/// Opens the device `config` names, its allocator limited to `budget` (from [`budget`]).
pub fn open(config: &TrainConfig, budget: &Budget) -> Result<Device> {
    let device_config = budget.device_config(config.memory.history);
    match choice(config)? {
        DeviceChoice::Cpu => Ok(Device::cpu(device_config)?),
        DeviceChoice::Cuda(ordinal) => open_gpu(ordinal, device_config),
    }
}

/// What the planner's meta devices allocate as, for the device `config` names: the CPU's
/// kernels, or the CUDA backend's on that GPU (opened to learn its compute capability, on which
/// cuBLAS's workspace depends).
pub fn plan_target(config: &TrainConfig, budget: &Budget) -> Result<PlanTarget> {
    match choice(config)? {
        DeviceChoice::Cpu => Ok(PlanTarget::Cpu),
        DeviceChoice::Cuda(_) => Ok(open(config, budget)?.plan_target()),
    }
}

/// What a CUDA process holds outside the allocator, for planning a GPU that is not here: the
/// context (the driver's state, the kernels' code, stacks and heaps), about 500 MiB on a Hopper
/// GPU with CUDA's lazy module loading as an idle process's footprint shows it, and cuBLAS's
/// handle (its state; its workspace is planned with each product).
pub const CUDA_CONTEXT_BYTES: u64 = 512 << 20;

/// cuBLAS's handle, beside the context.
pub const CUBLAS_HANDLE_BYTES: u64 = 8 << 20;

/// The budget and the planned device for planning the run `config` describes: the device
/// itself where it is here; for a CUDA device that is not (no GPU, or a build without CUDA), a
/// Hopper GPU (compute capability 9.0) of `memory.capacity` bytes, less the context and
/// cuBLAS's handle, with a line saying so.
pub fn planning(config: &TrainConfig) -> Result<(Budget, PlanTarget, Option<String>)> {
    if choice(config)? == DeviceChoice::Cpu {
        return Ok((
            config.memory.budget(config.default_limit())?,
            PlanTarget::Cpu,
            None,
        ));
    }
    if let Ok(budget) = budget(config)
        && let Ok(target) = plan_target(config, &budget)
    {
        return Ok((budget, target, None));
    }
    let (name, size) = config.memory.capacity_setting();
    let capacity = size.bytes();
    let usable = capacity.saturating_sub(CUDA_CONTEXT_BYTES + CUBLAS_HANDLE_BYTES);
    let note = format!(
        "planning for a CUDA device that is not here: compute capability 9.0, {} of memory \
         ({name}), of which {} for the CUDA context and {} for cuBLAS's handle",
        headroom_alloc::format_bytes(capacity),
        headroom_alloc::format_bytes(CUDA_CONTEXT_BYTES),
        headroom_alloc::format_bytes(CUBLAS_HANDLE_BYTES)
    );
    Ok((
        config.memory.budget_on(usable)?,
        PlanTarget::cuda(9),
        Some(note),
    ))
}

/// The bytes the device `config` names has free now, where other processes can change it (a
/// GPU's, as its driver reports); none on the CPU, whose simulated memory is the run's alone.
pub fn free_memory(config: &TrainConfig) -> Option<u64> {
    match choice(config).ok()? {
        DeviceChoice::Cpu => None,
        DeviceChoice::Cuda(ordinal) => gpu_free_memory(ordinal),
    }
}

fn choice(config: &TrainConfig) -> Result<DeviceChoice> {
    config.device.parse().map_err(Error::config)
}

#[cfg(feature = "cuda")]
fn gpu_memory(ordinal: u32) -> Result<u64> {
    Ok(headroom_kernels::cuda::device_memory(ordinal)?)
}

#[cfg(feature = "cuda")]
fn open_gpu(ordinal: u32, config: headroom_kernels::DeviceConfig) -> Result<Device> {
    Ok(Device::cuda(ordinal, config.allocator)?)
}

#[cfg(feature = "cuda")]
fn gpu_free_memory(ordinal: u32) -> Option<u64> {
    headroom_kernels::cuda::memory_info(ordinal)
        .ok()
        .map(|(free, _)| free)
}

#[cfg(not(feature = "cuda"))]
fn gpu_free_memory(_ordinal: u32) -> Option<u64> {
    None
}

#[cfg(not(feature = "cuda"))]
fn gpu_memory(ordinal: u32) -> Result<u64> {
    Err(no_cuda(ordinal))
}

#[cfg(not(feature = "cuda"))]
fn open_gpu(ordinal: u32, _config: headroom_kernels::DeviceConfig) -> Result<Device> {
    Err(no_cuda(ordinal))
}

#[cfg(not(feature = "cuda"))]
fn no_cuda(ordinal: u32) -> Error {
    Error::config(format!(
        "device: cuda:{ordinal} asked for, but headroom-trainer was built without its `cuda` \
         feature (cargo build --release -p headroom-trainer --features cuda)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_are_named_as_pytorch_names_them() {
        assert_eq!("cpu".parse(), Ok(DeviceChoice::Cpu));
        assert_eq!("cuda".parse(), Ok(DeviceChoice::Cuda(0)));
        assert_eq!("cuda:3".parse(), Ok(DeviceChoice::Cuda(3)));
        assert_eq!(DeviceChoice::Cuda(3).to_string(), "cuda:3");
        for bad in ["gpu", "cuda:", "cuda:-1", "cuda:x", "CPU", ""] {
            let err = bad.parse::<DeviceChoice>().unwrap_err();
            assert!(err.contains(&format!("`{bad}`")), "{err}");
        }
    }
}
