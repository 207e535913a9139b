//! What a backend must run, split by op category (as burn does). Ops allocate their outputs in
//! the op layer, the same way for every backend; a backend only computes into them.

use crate::buffer::Buffer;
use crate::error::Result;
use crate::ops::elementwise::{BinaryOp, UnaryOp};
use crate::ops::gemm::GemmSpec;
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
    fn cast(&self, src: &Buffer, dst: &mut Buffer) -> Result<()>;
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
    /// operands' precision (half types are cast to f32 by the op layer).
    fn gemm(&self, spec: &GemmSpec, a: &Buffer, b: &Buffer, out: &mut Buffer) -> Result<()>;
}

/// A compute backend: every category of kernel.
pub trait Backend:
    DataKernels + ElementwiseKernels + ReduceKernels + GemmKernels + Send + Sync
{
}

impl<T> Backend for T where
    T: DataKernels + ElementwiseKernels + ReduceKernels + GemmKernels + Send + Sync
{
}
