//! A device's host tier: a second device over host memory (ordinary for the CPU, page-locked
//! for a CUDA device, so that its copies run at the link's full rate) that holds what the
//! device does not need for a while, with an allocator of its own. Its reports name their source [`HOST_TIER`], so that an
//! out-of-memory there is told apart from the device's.

use headroom_alloc::{MemorySource, SourceError};

use crate::cpu::CpuBackend;
use crate::device::{Device, DeviceConfig, host_memory};
use crate::error::Result;
use crate::memory::DeviceKind;
use crate::meta::{PlanTarget, PlanningMemory};
use crate::work::Rates;

/// The source name of a host tier's memory in its allocator's reports.
pub const HOST_TIER: &str = "host tier";

/// A memory source renamed [`HOST_TIER`].
struct HostTierMemory(Box<dyn MemorySource>);

impl MemorySource for HostTierMemory {
    fn name(&self) -> &str {
        HOST_TIER
    }
    fn reserve(&mut self, bytes: u64) -> Result<u64, SourceError> {
        self.0.reserve(bytes)
    }
    fn release(&mut self, base: u64, bytes: u64) -> Result<(), SourceError> {
        self.0.release(base, bytes)
    }
    fn capacity(&self) -> u64 {
        self.0.capacity()
    }
    fn can_resize(&self) -> bool {
        self.0.can_resize()
    }
    fn growth_step(&self) -> u64 {
        self.0.growth_step()
    }
    fn extend(&mut self, base: u64, size: u64, extra: u64) -> Result<(), SourceError> {
        self.0.extend(base, size, extra)
    }
    fn shrink(&mut self, base: u64, size: u64, bytes: u64) -> Result<(), SourceError> {
        self.0.shrink(base, size, bytes)
    }
}

impl Device {
    /// A host tier over `config.memory` bytes of host memory: a CPU device whose reports name
    /// their source [`HOST_TIER`].
    pub fn host_tier(config: DeviceConfig) -> Result<Device> {
        Self::host_tier_over(Box::new(host_memory(config.memory)), config)
    }

    /// The host tier of `device` over `config.memory` bytes: page-locked memory of its context
    /// for a CUDA device (`cuMemHostAlloc`: the copy engines reach it directly, where the
    /// driver stages pageable memory first), [`Device::host_tier`] otherwise.
    pub fn host_tier_of(device: &Device, config: DeviceConfig) -> Result<Device> {
        #[cfg(feature = "cuda")]
        if let Some(stream) = device.cuda_stream() {
            let context = stream.context().clone();
            let source = headroom_alloc::CudaPageLocked::new(context, config.memory)
                .map_err(|err| crate::cuda::source_error("host tier", err))?;
            return Self::host_tier_over(Box::new(source), config);
        }
        let _ = device;
        Self::host_tier(config)
    }

    /// A CPU device over host memory from `source`, its reports naming [`HOST_TIER`].
    fn host_tier_over(source: Box<dyn MemorySource>, config: DeviceConfig) -> Result<Device> {
        Self::assemble(
            DeviceKind::Cpu,
            PlanTarget::Cpu,
            Box::new(CpuBackend),
            Box::new(HostTierMemory(source)),
            config.allocator,
        )
    }

    /// The meta device that plans [`Device::host_tier`] of the same configuration, its copies
    /// priced at `rates`.
    pub fn meta_host_tier(rates: Rates, config: DeviceConfig) -> Result<Device> {
        let target = PlanTarget::Cpu;
        let source = PlanningMemory::for_target(target, config.memory);
        Self::meta_over(
            target,
            rates,
            Box::new(HostTierMemory(Box::new(source))),
            config,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Array, DType};

    #[test]
    fn a_host_tier_and_its_plan_allocate_alike_and_name_their_tier_when_full() {
        let host = Device::host_tier(DeviceConfig::new(1 << 20)).unwrap();
        let planned = Device::meta_host_tier(PlanTarget::Cpu.rates(), DeviceConfig::new(1 << 20));
        let planned = planned.unwrap();
        for tier in [&host, &planned] {
            let _a = Array::zeros(tier, [1000], DType::F32).unwrap();
            assert_eq!(tier.allocator().stats().peak_in_use, 4096);
            let err = Array::zeros(tier, [1 << 20], DType::F32).unwrap_err();
            assert_eq!(err.oom_report().unwrap().source, HOST_TIER);
        }
    }
}
