//! Meta kernels for GEMM: nothing to compute; planning for CUDA, each product takes cuBLAS's
//! workspace as the CUDA backend's does.

use crate::backend::gemm::{GemmKernels, GemmSpec, blas_workspace};
use crate::buffer::Buffer;
use crate::error::Result;
use crate::meta::{MetaBackend, PlanTarget};

impl GemmKernels for MetaBackend {
    fn gemm(&self, spec: &GemmSpec, _: &Buffer, _: &Buffer, out: &mut Buffer) -> Result<()> {
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
