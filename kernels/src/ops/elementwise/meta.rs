//! Meta kernels for elementwise ops: nothing to compute; each accounts for its work.

use super::kernels::{
    BinaryOp, ElementwiseKernels, SwigluBackwardOperands, SwigluOperands, UnaryOp,
};
use crate::buffer::Buffer;
use crate::error::Result;
use crate::meta::MetaBackend;
use crate::shape::Shape;
use crate::work::Kernel;

impl ElementwiseKernels for MetaBackend {
    fn unary(&self, _: UnaryOp, x: &Buffer, out: &mut Buffer) -> Result<()> {
        self.record(Kernel::moving_with(&[x, out], 4.0));
        Ok(())
    }
    fn binary(
        &self,
        _: BinaryOp,
        (a, _): (&Buffer, &[usize]),
        (b, _): (&Buffer, &[usize]),
        out: &mut Buffer,
        _: &Shape,
    ) -> Result<()> {
        self.record(Kernel::moving(&[a, b, out]));
        Ok(())
    }
    fn binary_assign(&self, _: BinaryOp, b: &Buffer, out: &mut Buffer) -> Result<()> {
        // The target is read and written.
        self.record(Kernel::moving(&[b, out, out]));
        Ok(())
    }
    fn scale_by(&self, factor: &Buffer, x: &mut Buffer) -> Result<()> {
        self.record(Kernel::moving(&[factor, x, x]));
        Ok(())
    }
    fn swiglu(&self, operands: SwigluOperands<'_>) -> Result<()> {
        let SwigluOperands { gate, up, out } = operands;
        self.record(Kernel::moving_with(&[gate, up, &*out], 6.0));
        Ok(())
    }
    fn swiglu_backward(&self, operands: SwigluBackwardOperands<'_>) -> Result<()> {
        let SwigluBackwardOperands {
            gate,
            up,
            dy,
            dgate,
            dup,
        } = operands;
        self.record(Kernel::moving_with(&[gate, up, dy, &*dgate, &*dup], 10.0));
        Ok(())
    }
}
