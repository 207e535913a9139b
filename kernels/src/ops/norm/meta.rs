//! Meta kernels: nothing to compute.

use super::{NormKernels, RowSpec, SoftmaxSpec};
use crate::buffer::Buffer;
use crate::error::Result;
use crate::meta::MetaBackend;

impl NormKernels for MetaBackend {
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

    fn layer_norm(
        &self,
        _: RowSpec,
        _: f64,
        _: &Buffer,
        _: &Buffer,
        _: &Buffer,
        _: &mut Buffer,
        _: &mut Buffer,
        _: &mut Buffer,
    ) -> Result<()> {
        Ok(())
    }

    fn layer_norm_backward(
        &self,
        _: RowSpec,
        _: &Buffer,
        _: &Buffer,
        _: &Buffer,
        _: &Buffer,
        _: &Buffer,
        _: &mut Buffer,
        _: &mut Buffer,
        _: &mut Buffer,
    ) -> Result<()> {
        Ok(())
    }
}
