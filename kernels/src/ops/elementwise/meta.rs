//! Meta kernels for elementwise ops: nothing to compute.

use crate::backend::elementwise::{BinaryOp, ElementwiseKernels, UnaryOp};
use crate::buffer::Buffer;
use crate::error::Result;
use crate::meta::MetaBackend;
use crate::shape::Shape;

impl ElementwiseKernels for MetaBackend {
    fn unary(&self, _: UnaryOp, _: &Buffer, _: &mut Buffer) -> Result<()> {
        Ok(())
    }
    fn binary(
        &self,
        _: BinaryOp,
        _: (&Buffer, &[usize]),
        _: (&Buffer, &[usize]),
        _: &mut Buffer,
        _: &Shape,
    ) -> Result<()> {
        Ok(())
    }
    fn binary_assign(&self, _: BinaryOp, _: &Buffer, _: &mut Buffer) -> Result<()> {
        Ok(())
    }
}
