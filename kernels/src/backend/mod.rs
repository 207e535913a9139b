//! What a backend must run, split by op category (as burn does). Ops allocate their outputs in
//! the op layer, the same way for every backend; a backend only computes into them.
//!
//! # Asynchronous backends
//!
//! A kernel call may return before its work is done: a GPU backend queues it on the device's one
//! stream and returns. Everything else is built so that this is safe:
//!
//! - Work on one stream runs in the order it was queued, so a kernel always sees the results of
//!   the kernels queued before it.
//! - A buffer's bytes go back to the allocator when it drops, possibly while queued kernels still
//!   use them. The allocator may hand them to the next op at once: that op's kernels queue behind
//!   the ones still reading the old contents, so they cannot overwrite them early (the stream
//!   order that PyTorch's caching allocator relies on too).
//! - [`DataKernels::read`] returns only once the bytes are on the host, so it waits for the
//!   stream; [`DataKernels::synchronize`] waits without reading. An error of queued work may
//!   surface at either.

use crate::buffer::Buffer;
use crate::error::Result;
use crate::ops::elementwise::{BinaryOp, UnaryOp};
use crate::ops::gemm::GemmSpec;
pub use crate::ops::index::IndexKernels;
pub use crate::ops::layout::LayoutKernels;
pub use crate::ops::norm::NormKernels;
pub use crate::ops::optim::OptimKernels;
pub use crate::ops::random::RandomKernels;
use crate::ops::reduce::{ReduceOp, ReduceSpec};
use crate::shape::Shape;

/// Moving data: fill, host transfers, copies and casts.
pub trait DataKernels {
    /// Sets every element of `out` to `value` (converted to its dtype).
    fn fill(&self, out: &mut Buffer, value: f64) -> Result<()>;
    /// Copies host bytes (exactly `out.bytes()` of them) into `out`.
    fn write(&self, out: &mut Buffer, bytes: &[u8]) -> Result<()>;
    /// Copies `src` into host bytes (exactly `src.bytes()` of them).
    fn read(&self, src: &Buffer, bytes: &mut [u8]) -> Result<()>;
    /// Copies `src` into `dst` (same dtype and length).
    fn copy(&self, src: &Buffer, dst: &mut Buffer) -> Result<()>;
    /// Converts every element of `src` into `dst`'s dtype (same length).
    fn cast(&self, src: &Buffer, dst: &mut Buffer) -> Result<()> {
        crate::ops::data::check_len("cast", src, dst)?;
        self.cast_range(src, 0, dst, 0, src.len())
    }
    /// Converts the `len` elements of `src` from index `src_at` into `dst`'s dtype, at
    /// `dst[dst_at..]`; a range past either buffer's end is an argument error.
    fn cast_range(
        &self,
        src: &Buffer,
        src_at: usize,
        dst: &mut Buffer,
        dst_at: usize,
        len: usize,
    ) -> Result<()>;
    /// Waits until every kernel queued so far has finished; a synchronous backend has nothing
    /// to wait for.
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
}

/// Elementwise arithmetic, with broadcasting for two operands.
pub trait ElementwiseKernels {
    /// `out[i] = op(x[i])`; float dtypes, same length.
    fn unary(&self, op: UnaryOp, x: &Buffer, out: &mut Buffer) -> Result<()>;
    /// `out[i] = op(a[ia], b[ib])` over `shape`, where `ia` and `ib` walk `a` and `b` with the
    /// given strides (0 along broadcast dimensions); float dtypes.
    fn binary(
        &self,
        op: BinaryOp,
        a: (&Buffer, &[usize]),
        b: (&Buffer, &[usize]),
        out: &mut Buffer,
        shape: &Shape,
    ) -> Result<()>;

    /// `b[i] = op(a[i], b[i])`, in place; float dtypes, same dtype and length.
    fn binary_assign(&self, op: BinaryOp, a: &Buffer, b: &mut Buffer) -> Result<()>;
}

/// Reductions over one axis.
pub trait ReduceKernels {
    /// Reduces `x`, seen as `[outer, axis, inner]`, over the middle axis into `out`
    /// (`[outer, inner]`).
    fn reduce(&self, op: ReduceOp, spec: ReduceSpec, x: &Buffer, out: &mut Buffer) -> Result<()>;
}

/// Matrix products.
pub trait GemmKernels {
    /// `out[b] = op(a[b]) * op(b[b])` for every batch `b`, f32 or f64, accumulating in the
    /// operands' precision; half types too when [`gemm_half`](Self::gemm_half) says so
    /// (otherwise the op layer widens them to f32 panel by panel).
    fn gemm(&self, spec: &GemmSpec, a: &Buffer, b: &Buffer, out: &mut Buffer) -> Result<()>;

    /// Whether [`gemm`](Self::gemm) takes f16 and bf16 operands itself, accumulating in f32
    /// (as cuBLAS does on tensor cores).
    fn gemm_half(&self) -> bool {
        false
    }
}

/// A compute backend: every category of kernel.
pub trait Backend:
    DataKernels
    + ElementwiseKernels
    + ReduceKernels
    + GemmKernels
    + NormKernels
    + IndexKernels
    + LayoutKernels
    + RandomKernels
    + OptimKernels
    + Send
    + Sync
{
}

impl<T> Backend for T where
    T: DataKernels
        + ElementwiseKernels
        + ReduceKernels
        + GemmKernels
        + NormKernels
        + IndexKernels
        + LayoutKernels
        + RandomKernels
        + OptimKernels
        + Send
        + Sync
{
}
