//! Meta kernels: nothing to compute, and no scratch memory on any backend.

use crate::backend::rows::RowSpec;
use crate::backend::softmax::{SoftmaxKernels, SoftmaxSpec};
use crate::buffer::Buffer;
use crate::error::Result;
use crate::meta::MetaBackend;

impl SoftmaxKernels for MetaBackend {
    fn softmax(&self, _: SoftmaxSpec, _: RowSpec, _: &Buffer, _: &mut Buffer) -> Result<()> {
        Ok(())
    }

    fn softmax_backward(
        &self,
        _: SoftmaxSpec,
        _: RowSpec,
        _: &Buffer,
        _: &Buffer,
        _: &mut Buffer,
    ) -> Result<()> {
        Ok(())
    }
}
