//! Meta kernels for GEMM: nothing to compute, each product's work accounted; planning for CUDA,
//! each product takes cuBLAS's workspace as the CUDA backend's does.

use super::kernels::{GemmKernels, GemmSpec, blas_workspace};
use crate::buffer::Buffer;
use crate::error::Result;
use crate::meta::{MetaBackend, PlanTarget};
use crate::work::Kernel;

impl GemmKernels for MetaBackend {
    fn gemm(&self, spec: &GemmSpec, a: &Buffer, b: &Buffer, out: &mut Buffer) -> Result<()> {
        let accumulated: &[&Buffer] = if spec.accumulate { &[out] } else { &[] };
        let mut buffers = vec![a, b, &*out];
        buffers.extend(accumulated);
        self.record(Kernel::product(spec, a.dtype(), &buffers));
        if let PlanTarget::Cuda { gemm_workspace } = self.target {
            // cuBLAS runs (and takes its workspace) only for a product with terms to sum.
            if !out.is_empty() && spec.k > 0 {
                blas_workspace(out.memory(), gemm_workspace, "gemm")?;
            }
        }
        Ok(())
    }

    fn gemm_half(&self) -> bool {
        self.plans_cuda()
    }
}
