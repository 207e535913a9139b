//! Devices: a compute backend plus the allocator every one of its bytes comes from.

use std::sync::Arc;

use headroom_alloc::{
    Allocator, AllocatorConfig, FaultInjecting, HostMemory, MemorySource, SharedAllocator, Tag,
};

use crate::backend::Backend;
use crate::buffer::Buffer;
use crate::cpu::CpuBackend;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::memory::{DeviceKind, DeviceMemory, KernelTime, TagScope, Timer};
use crate::meta::{MetaBackend, PlanTarget, PlanningMemory};
use crate::timeline::{Lane, Timeline};
use crate::work::{Kernel, Rates, Work, WorkLog};

/// How much memory a device has and how its allocator manages it.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceConfig {
    /// The device's memory in bytes: the source's capacity, and the allocator's limit unless
    /// `allocator.limit` says less.
    pub memory: u64,
    /// The allocator's configuration (limit, growth policy, ...).
    pub allocator: AllocatorConfig,
}

impl DeviceConfig {
    /// A device with `memory` bytes and the default allocator configuration.
    pub fn new(memory: u64) -> Self {
        Self {
            memory,
            allocator: AllocatorConfig::default(),
        }
    }

    /// Replaces the allocator configuration.
    pub fn with_allocator(mut self, allocator: AllocatorConfig) -> Self {
        self.allocator = allocator;
        self
    }
}

/// A memory source whose addresses are real, readable and writable host memory. Sealed: the CPU
/// backend reads and writes through these addresses.
pub trait HostSource: MemorySource + sealed::Sealed {}
impl HostSource for HostMemory {}
impl HostSource for FaultInjecting<HostMemory> {}
#[cfg(target_os = "linux")]
impl HostSource for headroom_alloc::HostPages {}
#[cfg(target_os = "linux")]
impl HostSource for FaultInjecting<headroom_alloc::HostPages> {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for headroom_alloc::HostMemory {}
    impl Sealed for headroom_alloc::FaultInjecting<headroom_alloc::HostMemory> {}
    #[cfg(target_os = "linux")]
    impl Sealed for headroom_alloc::HostPages {}
    #[cfg(target_os = "linux")]
    impl Sealed for headroom_alloc::FaultInjecting<headroom_alloc::HostPages> {}
}

/// Host memory for a CPU device of `bytes`: on Linux pages committed into reserved address
/// space, so that its allocator grows one region in place; elsewhere the global allocator's.
#[cfg(target_os = "linux")]
pub(crate) fn host_memory(bytes: u64) -> headroom_alloc::HostPages {
    headroom_alloc::HostPages::new(bytes)
}

/// Host memory for a CPU device of `bytes`: on Linux pages committed into reserved address
/// space, so that its allocator grows one region in place; elsewhere the global allocator's.
#[cfg(not(target_os = "linux"))]
pub(crate) fn host_memory(bytes: u64) -> HostMemory {
    HostMemory::new(bytes)
}

/// A handle to a device: cheap to clone, shared by every buffer made on it.
///
/// ```
/// use headroom_kernels::{Device, DeviceConfig, DType};
/// let cpu = Device::cpu(DeviceConfig::new(64 << 20))?;
/// let buffer = cpu.alloc(DType::F32, 1000, "example")?;
/// assert_eq!(cpu.allocator().stats().in_use, 4096);
/// drop(buffer);
/// assert_eq!(cpu.allocator().stats().in_use, 0);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
#[derive(Clone)]
pub struct Device(Arc<Inner>);

struct Inner {
    /// Its memory: the allocator, the current tag, its name and its kernel time.
    memory: DeviceMemory,
    /// What a meta device planning for this one mirrors.
    plan_target: PlanTarget,
    backend: Box<dyn Backend>,
    /// A meta device's account of its kernels' work.
    work: Option<Arc<WorkLog>>,
    /// A CUDA device's stream, on which all its work is queued.
    #[cfg(feature = "cuda")]
    cuda_stream: Option<Arc<cudarc::driver::CudaStream>>,
}

impl Device {
    /// A CPU device over `config.memory` bytes of real host memory, which grows in place on
    /// Linux ([`HostPages`](headroom_alloc::HostPages)).
    pub fn cpu(config: DeviceConfig) -> Result<Device> {
        Self::cpu_over(host_memory(config.memory), config.allocator)
    }

    /// A CPU device over a given host source (a fault-injecting one, in tests).
    pub fn cpu_over(source: impl HostSource + 'static, config: AllocatorConfig) -> Result<Device> {
        Self::assemble(
            DeviceKind::Cpu,
            PlanTarget::Cpu,
            Box::new(CpuBackend),
            Box::new(source),
            config,
        )
    }

    /// A meta device that plans the memory of a CPU device with the same configuration: the
    /// same allocations, sizes and peak, with no data and no arithmetic.
    pub fn meta(config: DeviceConfig) -> Result<Device> {
        Self::meta_for(PlanTarget::Cpu, config)
    }

    /// A meta device that plans the memory of a `target` device with the same configuration
    /// (for CUDA, `config.memory` is the GPU's memory): the same allocations, sizes and peak,
    /// with no data and no arithmetic.
    ///
    /// ```
    /// use headroom_kernels::{Array, DType, Device, DeviceConfig, PlanTarget};
    /// let h100 = Device::meta_for(PlanTarget::cuda(9), DeviceConfig::new(80 << 30))?;
    /// let a = Array::zeros(&h100, [4096, 4096], DType::BF16)?;
    /// let b = Array::zeros(&h100, [4096, 4096], DType::BF16)?;
    /// headroom_kernels::ops::gemm::matmul(&a, &b, false, false)?;
    /// // Two operands and the product, 32 MiB each, and cuBLAS's 32 MiB workspace.
    /// assert_eq!(h100.allocator().stats().peak_in_use, 4 * (32 << 20));
    /// # Ok::<(), headroom_kernels::Error>(())
    /// ```
    pub fn meta_for(target: PlanTarget, config: DeviceConfig) -> Result<Device> {
        Self::meta_with_rates(target, target.rates(), config)
    }

    /// [`Device::meta_for`] with the kernels' work priced at `rates` instead of the target's
    /// fixed ones ([`Device::planned_work`]).
    pub fn meta_with_rates(
        target: PlanTarget,
        rates: Rates,
        config: DeviceConfig,
    ) -> Result<Device> {
        let source = PlanningMemory::for_target(target, config.memory);
        Self::meta_over(target, rates, Box::new(source), config)
    }

    /// A meta device planning for `target` over `source`, its work priced at `rates`, its
    /// copies beside its kernels when it plans a GPU.
    pub(crate) fn meta_over(
        target: PlanTarget,
        rates: Rates,
        source: Box<dyn MemorySource>,
        config: DeviceConfig,
    ) -> Result<Device> {
        let beside = matches!(target, PlanTarget::Cuda { .. });
        let work = WorkLog::new(rates, Timeline::new(beside), Lane::Kernels);
        Self::meta_logged(target, work, source, config)
    }

    /// A meta device planning for `target` over `source`, its work added to `work`.
    pub(crate) fn meta_logged(
        target: PlanTarget,
        work: Arc<WorkLog>,
        source: Box<dyn MemorySource>,
        config: DeviceConfig,
    ) -> Result<Device> {
        let mut device = Self::assemble(
            DeviceKind::Meta,
            target,
            Box::new(MetaBackend {
                target,
                work: work.clone(),
            }),
            source,
            config.allocator,
        )?;
        // Nothing else holds the device yet.
        if let Some(inner) = Arc::get_mut(&mut device.0) {
            inner.work = Some(work);
        }
        Ok(device)
    }

    /// On a meta device, what its kernels so far would compute and move, and the seconds they
    /// would take at its rates; none on a device that computes.
    ///
    /// ```
    /// use headroom_kernels::{Array, DType, Device, DeviceConfig, PlanTarget};
    /// let planner = Device::meta_for(PlanTarget::Cpu, DeviceConfig::new(1 << 30))?;
    /// let a = Array::zeros(&planner, [1024, 1024], DType::F32)?;
    /// headroom_kernels::ops::gemm::matmul(&a, &a, false, false)?;
    /// let work = planner.planned_work().unwrap();
    /// assert_eq!(work.matrix_flops, 2.0 * 1024f64.powi(3));
    /// assert!(work.seconds > 0.0);
    /// # Ok::<(), headroom_kernels::Error>(())
    /// ```
    pub fn planned_work(&self) -> Option<Work> {
        self.0.work.as_ref().map(|log| log.work())
    }

    /// On a meta device, a collective that sends `bytes` to the other ranks (a planned rank's
    /// share of an all-gather, a reduce-scatter or an all-reduce), priced at the link rate in
    /// turn with the kernels; nothing elsewhere.
    pub fn plan_collective(&self, bytes: f64) {
        if let Some(log) = &self.0.work {
            log.record(Kernel::collective(bytes));
        }
    }

    /// Puts a device together from its parts (used by every constructor and by other backends).
    pub(crate) fn assemble(
        kind: DeviceKind,
        plan_target: PlanTarget,
        backend: Box<dyn Backend>,
        source: Box<dyn MemorySource>,
        config: AllocatorConfig,
    ) -> Result<Device> {
        let allocator = Allocator::from_boxed(source, config)
            .map_err(|err| Error::from_alloc("device", err))?;
        Ok(Device(Arc::new(Inner {
            memory: DeviceMemory::new(kind, SharedAllocator::new(allocator)),
            plan_target,
            backend,
            work: None,
            #[cfg(feature = "cuda")]
            cuda_stream: None,
        })))
    }

    /// The device with `stream` as its CUDA stream (right after [`Device::assemble`], while no
    /// one else holds it).
    #[cfg(feature = "cuda")]
    pub(crate) fn with_cuda_stream(mut self, stream: Arc<cudarc::driver::CudaStream>) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.0) {
            inner.cuda_stream = Some(stream);
        }
        self
    }

    /// A CUDA device's stream: every kernel, copy and product of the device is queued on it, so
    /// work queued on it by another library (a collective, say) runs in order with them. `None`
    /// for other devices.
    #[cfg(feature = "cuda")]
    pub fn cuda_stream(&self) -> Option<&Arc<cudarc::driver::CudaStream>> {
        self.0.cuda_stream.as_ref()
    }

    /// What kind of device this is.
    pub fn kind(&self) -> DeviceKind {
        self.0.memory.kind()
    }

    /// What [`Device::meta_for`] takes to plan this device's memory: a meta device made with
    /// it allocates exactly what this device would (a meta device answers with its own).
    ///
    /// ```
    /// use headroom_kernels::{Device, DeviceConfig, PlanTarget};
    /// let cpu = Device::cpu(DeviceConfig::new(1 << 30))?;
    /// assert_eq!(cpu.plan_target(), PlanTarget::Cpu);
    /// let planner = Device::meta_for(cpu.plan_target(), DeviceConfig::new(1 << 30))?;
    /// assert_eq!(planner.plan_target(), PlanTarget::Cpu);
    /// # Ok::<(), headroom_kernels::Error>(())
    /// ```
    pub fn plan_target(&self) -> PlanTarget {
        self.0.plan_target
    }

    /// The allocator: its stats, snapshots, history and OOM reports describe this device.
    pub fn allocator(&self) -> &SharedAllocator {
        self.0.memory.allocator()
    }

    /// Its memory, which its buffers hold.
    pub(crate) fn memory(&self) -> &DeviceMemory {
        &self.0.memory
    }

    /// True when both handles name the same device.
    pub fn same(&self, other: &Device) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The tag new buffers get (activations unless a [`TagScope`] says otherwise).
    pub fn tag(&self) -> Tag {
        self.0.memory.tag()
    }

    /// Tags every buffer made on this device with `tag` until the scope is dropped.
    ///
    /// ```
    /// use headroom_alloc::Tag;
    /// use headroom_kernels::{Device, DeviceConfig, DType};
    /// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
    /// {
    ///     let _scope = cpu.scoped_tag(Tag::GRADIENTS);
    ///     assert_eq!(cpu.alloc(DType::F32, 10, "example")?.tag(), Tag::GRADIENTS);
    /// }
    /// assert_eq!(cpu.tag(), Tag::ACTIVATIONS);
    /// # Ok::<(), headroom_kernels::Error>(())
    /// ```
    pub fn scoped_tag(&self, tag: Tag) -> TagScope<'_> {
        self.0.memory.scoped_tag(tag)
    }

    /// Time spent in kernels and allocations on this device so far.
    pub fn kernel_time(&self) -> KernelTime {
        self.0.memory.kernel_time()
    }

    /// Allocates room for `len` elements of `dtype`, for `op`, under the current tag. The
    /// contents are unspecified (but always valid bits for the dtype).
    pub fn alloc(&self, dtype: DType, len: usize, op: &'static str) -> Result<Buffer> {
        let memory = &self.0.memory;
        let _timer = memory.timer();
        memory.alloc(dtype, len, memory.tag(), op)
    }

    /// Waits until every kernel queued on this device has finished (a no-op on the CPU, whose
    /// kernels return when done, and on the meta device, which runs none). Time a GPU op with
    /// it, or use it to surface the errors of queued work.
    pub fn synchronize(&self) -> Result<()> {
        self.backend().synchronize()
    }

    /// The backend that runs kernels on this device, timed until the returned handle drops
    /// (at the end of the statement that calls a kernel through it).
    pub(crate) fn backend(&self) -> TimedBackend<'_> {
        TimedBackend {
            backend: &*self.0.backend,
            _timer: self.0.memory.timer(),
        }
    }

    /// A meta device's account of work (none on a device that computes).
    pub(crate) fn work_log(&self) -> Option<&Arc<WorkLog>> {
        self.0.work.as_ref()
    }

    /// On a meta device that plans a host tier's work beside its device's (an offloaded
    /// optimizer's updates on a host thread), the device's kernels wait for the host's work
    /// planned so far: where the host's results land on the device. Nothing elsewhere.
    pub fn wait_for_planned_host_work(&self) {
        if let Some(work) = &self.0.work {
            work.timeline().join(Lane::Kernels, Lane::Host);
        }
    }

    /// Fails with [`Error::Device`] unless `other` is this device.
    pub(crate) fn check_same(&self, other: &Device, op: &'static str) -> Result<()> {
        if self.same(other) {
            Ok(())
        } else {
            Err(Error::Device {
                op,
                left: self.to_string(),
                right: other.to_string(),
            })
        }
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0.memory, f)
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Device({self})")
    }
}

/// A device's backend, timed while this handle lives.
pub(crate) struct TimedBackend<'d> {
    backend: &'d (dyn Backend + 'static),
    _timer: Timer<'d>,
}

impl std::ops::Deref for TimedBackend<'_> {
    type Target = dyn Backend;
    fn deref(&self) -> &Self::Target {
        self.backend
    }
}
