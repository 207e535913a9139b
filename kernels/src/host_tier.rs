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
use crate::timeline::{Lane, Timeline};
use crate::work::{Rates, WorkLog};

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

    /// The meta device that plans the host tier of `device`, a meta device, with the same
    /// configuration: its kernels (an offloaded optimizer's updates) priced at `rates`, the
    /// host's (a CPU's: the device's own when it plans the CPU), and queued on the host's queue
    /// of the device's timeline, beside the device's kernels and copies on a GPU; the copies
    /// between them are priced on the device.
    pub fn meta_host_tier_of(
        device: &Device,
        config: DeviceConfig,
        rates: Rates,
    ) -> Result<Device> {
        let target = PlanTarget::Cpu;
        let timeline = match device.work_log() {
            Some(log) => log.timeline().clone(),
            None => Timeline::new(false),
        };
        let source = PlanningMemory::for_target(target, config.memory);
        Self::meta_logged(
            target,
            WorkLog::new(rates, timeline, Lane::Host),
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
        let planner = Device::meta(DeviceConfig::new(1 << 20)).unwrap();
        let planned = Device::meta_host_tier_of(
            &planner,
            DeviceConfig::new(1 << 20),
            PlanTarget::Cpu.rates(),
        )
        .unwrap();
        for tier in [&host, &planned] {
            let _a = Array::zeros(tier, [1000], DType::F32).unwrap();
            assert_eq!(tier.allocator().stats().peak_in_use, 4096);
            let err = Array::zeros(tier, [1 << 20], DType::F32).unwrap_err();
            assert_eq!(err.oom_report().unwrap().source, HOST_TIER);
        }
    }

    #[test]
    fn a_planned_gpus_host_tier_works_at_the_hosts_rates_beside_the_kernels_until_they_wait() {
        let gpu = Device::meta_for(PlanTarget::cuda(9), DeviceConfig::new(1 << 30)).unwrap();
        // A host a quarter as fast as the CPU's fixed rates (calibrated, say).
        let cpu = Rates {
            bytes: PlanTarget::Cpu.rates().bytes / 4.0,
            ..PlanTarget::Cpu.rates()
        };
        let host = Device::meta_host_tier_of(&gpu, DeviceConfig::new(1 << 30), cpu).unwrap();
        let seconds = || gpu.planned_work().unwrap().seconds;
        // 64 MiB written on the host at its 2.5 GB/s, not the GPU's 2.5 TB/s.
        let _x = Array::zeros(&host, [16 << 20], DType::F32).unwrap();
        let rates = PlanTarget::cuda(9).rates();
        let on_host = cpu.launch + (64 << 20) as f64 / cpu.bytes;
        assert!((seconds() - on_host).abs() < 1e-12, "{} s", seconds());
        // The device's kernels run beside the host's work...
        let _a = Array::zeros(&gpu, [1 << 20], DType::F32).unwrap();
        assert_eq!(seconds(), on_host);
        // ...until they wait for it.
        gpu.wait_for_planned_host_work();
        let _b = Array::zeros(&gpu, [1 << 20], DType::F32).unwrap();
        let fill = rates.launch + (4 << 20) as f64 / rates.bytes;
        assert!(
            (seconds() - on_host - fill).abs() < 1e-12,
            "{} s",
            seconds()
        );
    }
}
