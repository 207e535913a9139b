//! Meta kernels: nothing to compute.

use super::LayoutKernels;
use crate::buffer::Buffer;
use crate::error::Result;
use crate::meta::MetaBackend;
use crate::shape::Shape;

impl LayoutKernels for MetaBackend {
    fn permute(&self, _: &Buffer, _: &Shape, _: &[usize], _: &mut Buffer) -> Result<()> {
        Ok(())
    }
}
