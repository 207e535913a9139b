//! CUDA GEMMs through cuBLAS: f32 (TF32 tensor cores when [`CudaOptions::tf32`] allows), f64,
//! and f16 and bf16 with f32 accumulation, each product's workspace taken from the allocator.
//!
//! cuBLAS is column-major; a row-major `C = op(A) op(B)` is the column-major
//! `C^T = op(B)^T op(A)^T`, so the operands are passed swapped, with no copy. A single product
//! goes through `cublasGemmEx`, as `torch.matmul`'s does, batches through
//! `cublasGemmStridedBatchedEx` (one call per batch of any size).
//!
//! [`CudaOptions::tf32`]: crate::cuda::CudaOptions::tf32

use std::ffi::c_void;

use cudarc::cublas::sys::{
    cublasComputeType_t, cublasGemmAlgo_t, cublasGemmEx, cublasGemmStridedBatchedEx,
    cublasOperation_t, cublasSetWorkspace_v2, cublasStatus_t, cudaDataType,
};

use super::kernels::{GemmKernels, GemmSpec, blas_workspace};
use crate::buffer::Buffer;
use crate::cuda::CudaBackend;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::data::kernels::DataKernels;

const OP: &str = "gemm";

fn check(call: &'static str, status: cublasStatus_t) -> Result<()> {
    if status == cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(Error::Cuda {
            op: OP,
            call,
            name: format!("{status:?}"),
            detail: "see the cuBLAS documentation of this status".into(),
        })
    }
}

fn dimension(value: usize, what: &str) -> Result<i32> {
    i32::try_from(value).map_err(|_| Error::Argument {
        op: OP,
        detail: format!("{what} = {value} exceeds cuBLAS's 32-bit dimensions"),
    })
}

impl GemmKernels for CudaBackend {
    fn gemm(&self, spec: &GemmSpec, a: &Buffer, b: &Buffer, out: &mut Buffer) -> Result<()> {
        let dtype = a.dtype();
        let (data, compute) = match dtype {
            DType::F32 if self.options.tf32 => (
                cudaDataType::CUDA_R_32F,
                cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
            ),
            DType::F32 => (
                cudaDataType::CUDA_R_32F,
                cublasComputeType_t::CUBLAS_COMPUTE_32F,
            ),
            DType::F64 => (
                cudaDataType::CUDA_R_64F,
                cublasComputeType_t::CUBLAS_COMPUTE_64F,
            ),
            DType::F16 => (
                cudaDataType::CUDA_R_16F,
                cublasComputeType_t::CUBLAS_COMPUTE_32F,
            ),
            DType::BF16 => (
                cudaDataType::CUDA_R_16BF,
                cublasComputeType_t::CUBLAS_COMPUTE_32F,
            ),
            other => {
                return Err(Error::DType {
                    op: OP,
                    expected: "a float dtype".into(),
                    got: other,
                });
            }
        };
        // A half product may add into an f32 output (accumulating in f32 all the same).
        let c_data = match out.dtype() {
            DType::F32 if dtype != DType::F32 => cudaDataType::CUDA_R_32F,
            _ => data,
        };
        let &GemmSpec { batch, m, n, k, .. } = spec;
        if out.is_empty() {
            return Ok(());
        }
        if k == 0 {
            return if spec.accumulate {
                Ok(())
            } else {
                self.fill(out, 0.0)
            };
        }
        let (m_, n_, k_, batch_) = (
            dimension(m, "m")?,
            dimension(n, "n")?,
            dimension(k, "k")?,
            dimension(batch, "batch")?,
        );
        // The row-major operands seen column-major: B first, then A.
        let (op_b, ld_b) = if spec.trans_b {
            (cublasOperation_t::CUBLAS_OP_T, k_)
        } else {
            (cublasOperation_t::CUBLAS_OP_N, n_)
        };
        let (op_a, ld_a) = if spec.trans_a {
            (cublasOperation_t::CUBLAS_OP_T, m_)
        } else {
            (cublasOperation_t::CUBLAS_OP_N, k_)
        };
        let beta_one = spec.accumulate;
        // f64 products take f64 scalars; every other compute type here takes f32 ones.
        let (alpha64, beta64) = (1.0f64, if beta_one { 1.0f64 } else { 0.0 });
        let (alpha32, beta32) = (1.0f32, if beta_one { 1.0f32 } else { 0.0 });
        let (alpha, beta): (*const c_void, *const c_void) = if dtype == DType::F64 {
            (
                std::ptr::from_ref(&alpha64).cast(),
                std::ptr::from_ref(&beta64).cast(),
            )
        } else {
            (
                std::ptr::from_ref(&alpha32).cast(),
                std::ptr::from_ref(&beta32).cast(),
            )
        };
        let algo = cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT;
        let (a, b, c) = (
            a.addr() as *const c_void,
            b.addr() as *const c_void,
            out.addr() as *mut c_void,
        );
        let workspace = blas_workspace(out.memory(), self.gemm_workspace, OP)?;
        self.bind(OP)?;
        let blas = self.blas.lock();
        let handle = blas.raw();
        let name = || {
            let (ta, tb) = (spec.trans_a as u8, spec.trans_b as u8);
            format!("gemm {dtype} {batch}x{m}x{n}x{k} (trans {ta}{tb})")
        };
        self.timed(OP, name, || {
            // SAFETY: the handle is bound to this device's stream and used under its lock. The
            // workspace is a live buffer of `workspace.bytes()` on this device; it
            // returns to the allocator after the call is queued, which the stream order makes safe
            // (module docs of `cuda`). The operand pointers are live buffers the op layer sized for
            // `spec` (a: batch x m x k, b: batch x k x n, or one shared matrix with stride 0; out:
            // batch x m x n; a single product reads one of each), the leading dimensions follow
            // from the row-major layout, and the scalars live on the stack until the call returns
            // (host pointer mode).
            unsafe {
                check(
                    "cublasSetWorkspace",
                    cublasSetWorkspace_v2(
                        handle,
                        workspace.addr() as *mut c_void,
                        workspace.bytes(),
                    ),
                )?;
                if batch == 1 {
                    check(
                        "cublasGemmEx",
                        cublasGemmEx(
                            handle, op_b, op_a, n_, m_, k_, alpha, b, data, ld_b, a, data, ld_a,
                            beta, c, c_data, n_, compute, algo,
                        ),
                    )
                } else {
                    check(
                        "cublasGemmStridedBatchedEx",
                        cublasGemmStridedBatchedEx(
                            handle,
                            op_b,
                            op_a,
                            n_,
                            m_,
                            k_,
                            alpha,
                            b,
                            data,
                            ld_b,
                            spec.b_batch_stride as i64,
                            a,
                            data,
                            ld_a,
                            spec.a_batch_stride as i64,
                            beta,
                            c,
                            c_data,
                            n_,
                            (m * n) as i64,
                            batch_,
                            compute,
                            algo,
                        ),
                    )
                }
            }
        })
    }

    fn gemm_half(&self, _: DType) -> bool {
        true
    }
}
