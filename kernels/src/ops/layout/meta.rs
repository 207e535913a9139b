//! Meta kernels: nothing to compute.

use super::LayoutKernels;
use crate::buffer::Buffer;
use crate::error::Result;
use crate::meta::MetaBackend;

impl LayoutKernels for MetaBackend {
    fn gather_strided(&self, _: &Buffer, _: &[usize], _: &[usize], _: &mut Buffer) -> Result<()> {
        Ok(())
    }
}
