//! Meta kernels for GEMM: nothing to compute, each product's work accounted; planning for CUDA,
//! each product takes cuBLAS's workspace as the CUDA backend's does.

use super::bf16;
use super::kernels::{GemmKernels, GemmSpec, blas_workspace};
use crate::buffer::Buffer;
use crate::dtype::DType;
use crate::error::Result;
use crate::meta::{MetaBackend, PlanTarget};
use crate::work::Kernel;

impl GemmKernels for MetaBackend {
    fn gemm(&self, spec: &GemmSpec, a: &Buffer, b: &Buffer, out: &mut Buffer) -> Result<()> {
        let accumulated: &[&Buffer] = if spec.accumulate { &[out] } else { &[] };
        let mut buffers = vec![a, b, &*out];
        buffers.extend(accumulated);
        // Either library runs (and takes its workspace) only for a product with terms to sum.
        let runs = !out.is_empty() && spec.k > 0;
        let packs =
            self.target == PlanTarget::Cpu && runs && bf16::takes(spec, a.dtype(), out.dtype());
        let pairs = if packs { bf16::packed_pairs(spec) } else { 0 };
        self.record(Kernel::product(spec, a.dtype(), &buffers).packing(pairs));
        match self.target {
            PlanTarget::Cuda { gemm_workspace } if runs => {
                blas_workspace(out.memory(), gemm_workspace, "gemm")?;
            }
            PlanTarget::Cpu if packs => {
                // The CPU's bf16 product packs its operands in workspace.
                let words = bf16::scratch_words(spec);
                out.memory().alloc_workspace(DType::U32, words, "gemm")?;
            }
            _ => {}
        }
        Ok(())
    }

    /// As the target multiplies: cuBLAS takes both half types, and a CPU planned on this
    /// machine takes bf16 where it has the instructions.
    fn gemm_half(&self, dtype: DType) -> bool {
        self.plans_cuda() || super::cpu_multiplies(dtype)
    }
}
