//! What a backend runs for matrix products, and the cuBLAS workspace a product takes (which a
//! meta device planning for CUDA takes too).

use crate::buffer::Buffer;
use crate::dtype::DType;
use crate::error::Result;
use crate::memory::DeviceMemory;

/// The geometry of a batched product `out[i] = op(a[i]) * op(b[i])`, all row-major.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmSpec {
    /// Number of products.
    pub batch: usize,
    /// Rows of `op(a)` and of the output.
    pub m: usize,
    /// Columns of `op(b)` and of the output.
    pub n: usize,
    /// Columns of `op(a)`, rows of `op(b)`.
    pub k: usize,
    /// `a` is stored `[k, m]` and used transposed.
    pub trans_a: bool,
    /// `b` is stored `[n, k]` and used transposed.
    pub trans_b: bool,
    /// Elements between consecutive matrices of `a` (0: one matrix for every batch).
    pub a_batch_stride: usize,
    /// Elements between consecutive matrices of `b` (0: one matrix for every batch).
    pub b_batch_stride: usize,
    /// Add the product to what `out` holds (`out += op(a) op(b)`) instead of overwriting it.
    pub accumulate: bool,
}

impl GemmSpec {
    /// Floating-point operations of the whole product.
    pub fn flops(&self) -> f64 {
        2.0 * self.batch as f64 * self.m as f64 * self.n as f64 * self.k as f64
    }
}

/// Matrix products.
pub trait GemmKernels {
    /// `out[b] = op(a[b]) * op(b[b])` for every batch `b`, f32 or f64, accumulating in the
    /// operands' precision; half types too when [`gemm_half`](Self::gemm_half) says so
    /// (otherwise the op layer widens them to f32 panel by panel), into an output of their
    /// own type or of f32.
    fn gemm(&self, spec: &GemmSpec, a: &Buffer, b: &Buffer, out: &mut Buffer) -> Result<()>;

    /// Whether [`gemm`](Self::gemm) takes operands of the half type `dtype` itself,
    /// accumulating in f32 (as cuBLAS does on tensor cores, and a CPU with bf16 instructions).
    fn gemm_half(&self, dtype: DType) -> bool {
        let _ = dtype;
        false
    }
}

/// cuBLAS's recommended workspace on a device of compute capability `major`.x: 32 MiB from
/// Hopper on, 4 MiB before.
pub(crate) fn preferred_blas_workspace(major: u32) -> u64 {
    if major >= 9 { 32 << 20 } else { 4 << 20 }
}

/// The least cuBLAS workspace with which no cuBLAS routine fails (cuBLAS documents 16 KiB).
const MIN_BLAS_WORKSPACE: u64 = 16 << 10;

/// The cuBLAS workspace of one product in `memory`, under the workspace tag: `preferred` bytes
/// if they fit without evicting cached memory, else [`MIN_BLAS_WORKSPACE`], and an
/// out-of-memory only if even that does not fit. The CUDA backend runs its products with it;
/// a meta device planning for CUDA takes the same.
pub(crate) fn blas_workspace(
    memory: &DeviceMemory,
    preferred: u64,
    op: &'static str,
) -> Result<Buffer> {
    let words = |bytes: u64| bytes.div_ceil(4) as usize;
    match memory.try_alloc_workspace(DType::U32, words(preferred)) {
        Some(workspace) => Ok(workspace),
        None => memory.alloc_workspace(DType::U32, words(MIN_BLAS_WORKSPACE), op),
    }
}
