//! The meta backend: allocations only, so that a run's memory can be planned exactly.

use std::sync::Arc;

use headroom_alloc::{MemorySource, SourceError, VirtualMemory};

use crate::work::{Kernel, Rates, WorkLog};

/// A virtual address space that resizes regions in place only if the device it plans for can,
/// so that the allocator makes the same decisions, and reaches the same peak, as it would there.
#[derive(Debug, Clone)]
pub struct PlanningMemory {
    /// The space, its regions fixed where the planned device's are.
    inner: VirtualMemory,
}

impl PlanningMemory {
    /// `memory` bytes of virtual address space that grows and resizes as `target`'s memory
    /// does: what a meta device planning for `target` allocates from.
    pub fn for_target(target: PlanTarget, memory: u64) -> Self {
        let space = VirtualMemory::new(memory).with_growth_step(target.growth_step());
        Self::new(space, target.resizes_regions())
    }

    /// Plans over `inner`, resizing in place only if `resizable`.
    pub fn new(inner: VirtualMemory, resizable: bool) -> Self {
        let inner = if resizable {
            inner
        } else {
            inner.fixed_regions()
        };
        Self { inner }
    }
}

impl MemorySource for PlanningMemory {
    fn name(&self) -> &str {
        "meta"
    }
    fn reserve(&mut self, bytes: u64) -> Result<u64, SourceError> {
        self.inner.reserve(bytes)
    }
    fn release(&mut self, base: u64, bytes: u64) -> Result<(), SourceError> {
        self.inner.release(base, bytes)
    }
    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }
    fn can_resize(&self) -> bool {
        self.inner.can_resize()
    }
    fn growth_step(&self) -> u64 {
        self.inner.growth_step()
    }
    fn extend(&mut self, base: u64, size: u64, extra: u64) -> Result<(), SourceError> {
        self.inner.extend(base, size, extra)
    }
    fn shrink(&mut self, base: u64, size: u64, bytes: u64) -> Result<(), SourceError> {
        self.inner.shrink(base, size, bytes)
    }
}

/// The backend whose run a meta device plans. The op layer allocates alike for every backend;
/// what differs is the scratch memory each backend's kernels take from the allocator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PlanTarget {
    /// The CPU backend of this machine: half-precision products widen panels to f32 in
    /// workspace memory, except bf16 where the CPU multiplies it
    /// ([`cpu_multiplies`](crate::ops::gemm::cpu_multiplies)), whose operands are packed there.
    #[default]
    Cpu,
    /// The CUDA backend: half-precision products run in cuBLAS, each product takes a cuBLAS
    /// workspace of `gemm_workspace` bytes (16 KiB when that does not fit), and some kernels
    /// take scratch buffers (layer-norm partial sums, cross-entropy row losses, an embedding
    /// gradient's grouping of positions by id). Plans a GPU run on a machine without one.
    Cuda {
        /// cuBLAS's workspace per product: 32 MiB from Hopper on, 4 MiB before, or what
        /// `CudaOptions::gemm_workspace` sets.
        gemm_workspace: u64,
    },
}

impl PlanTarget {
    /// A CUDA device of compute capability `major`.x with cuBLAS's recommended workspace.
    pub fn cuda(major: u32) -> Self {
        PlanTarget::Cuda {
            gemm_workspace: crate::ops::gemm::kernels::preferred_blas_workspace(major),
        }
    }

    /// Whether the target's memory grows regions in place (see
    /// [`Growth`](headroom_alloc::Growth)): a CUDA device maps memory into a region's reserved
    /// addresses (every GPU CUDA 13 supports can); on Linux the CPU's host memory commits pages
    /// into reserved address space ([`HostPages`](headroom_alloc::HostPages)); elsewhere host
    /// memory cannot, so its allocator reserves region by region.
    pub fn resizes_regions(self) -> bool {
        match self {
            PlanTarget::Cuda { .. } => true,
            PlanTarget::Cpu => cfg!(target_os = "linux"),
        }
    }

    /// The step the target's memory grows and shrinks in place: CUDA's 2 MiB page
    /// ([`EXPANSION_STEP`](headroom_alloc::EXPANSION_STEP)), or a host page on Linux.
    pub fn growth_step(self) -> u64 {
        match self {
            #[cfg(target_os = "linux")]
            PlanTarget::Cpu => headroom_alloc::HostPages::new(0).growth_step(),
            _ => headroom_alloc::EXPANSION_STEP,
        }
    }

    /// The fixed rates a plan for this target prices its kernels at, round figures of the
    /// machines the project measures on: a few cores of a server CPU (f32 products about 100
    /// GFLOP/s, half products widened to f32 no faster, 10 GB/s for large arrays, ranks
    /// linked at 5 GB/s), and a data-center GPU of the H100's class (f32 products without TF32
    /// at 50 TFLOP/s, bf16 tensor cores at 400, 2.5 TB/s, 5 µs a kernel, ranks linked over
    /// PCIe at 20 GB/s).
    pub fn rates(self) -> Rates {
        match self {
            PlanTarget::Cpu => Rates {
                matrix_flops: 100e9,
                half_matrix_flops: 100e9,
                packing: 2e9,
                vector_flops: 10e9,
                bytes: 10e9,
                launch: 5e-6,
                transfer: 10e9,
                // MPI between the processes of one machine, through shared memory.
                link: 5e9,
            },
            PlanTarget::Cuda { .. } => Rates {
                matrix_flops: 50e12,
                half_matrix_flops: 400e12,
                packing: f64::INFINITY,
                vector_flops: 25e12,
                bytes: 2.5e12,
                launch: 5e-6,
                // Pinned host memory over PCIe 5.0 x16, as copies reach it in practice.
                transfer: 25e9,
                // GPUs that reach each other over PCIe 4.0 x16 alone, as NCCL's buses measure
                // it (no NVLink: the slower link, so that a plan errs on the long side).
                link: 20e9,
            },
        }
    }
}

/// Runs no kernel: every op's allocations happen in the op layer, identically for every
/// backend, and the meta kernels take the scratch memory their [`PlanTarget`]'s kernels would,
/// so a meta run allocates exactly what a real run would. Each kernel adds what it would compute
/// and move to the device's account of work ([`crate::Work`]). Each op's meta kernels live
/// beside it (`ops/<op>/meta.rs`).
#[derive(Debug, Clone)]
pub struct MetaBackend {
    /// The backend planned for.
    pub target: PlanTarget,
    /// The account of the kernels planned.
    pub(crate) work: Arc<WorkLog>,
}

impl MetaBackend {
    /// Adds a kernel's work to the account.
    pub(crate) fn record(&self, kernel: Kernel) {
        self.work.record(kernel);
    }

    /// True when planning for the CUDA backend.
    pub(crate) fn plans_cuda(&self) -> bool {
        matches!(self.target, PlanTarget::Cuda { .. })
    }
}
