//! Meta kernels: nothing to compute, and no scratch memory on any backend; each accounts for
//! its work.

use super::kernels::{SoftmaxKernels, SoftmaxSpec};
use crate::buffer::Buffer;
use crate::error::Result;
use crate::meta::MetaBackend;
use crate::ops::rows::spec::RowSpec;
use crate::work::Kernel;

impl SoftmaxKernels for MetaBackend {
    fn softmax(&self, _: SoftmaxSpec, _: RowSpec, x: &Buffer, out: &mut Buffer) -> Result<()> {
        self.record(Kernel::moving_with(&[x, out], 6.0));
        Ok(())
    }

    fn softmax_backward(
        &self,
        _: SoftmaxSpec,
        _: RowSpec,
        y: &Buffer,
        dy: &Buffer,
        out: &mut Buffer,
    ) -> Result<()> {
        self.record(Kernel::moving_with(&[y, dy, out], 3.0));
        Ok(())
    }
}
