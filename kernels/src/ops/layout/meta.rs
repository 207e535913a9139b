//! Meta kernels: nothing to compute.

use crate::backend::layout::{LayoutKernels, Strided};
use crate::buffer::Buffer;
use crate::error::Result;
use crate::meta::MetaBackend;

impl LayoutKernels for MetaBackend {
    fn gather_strided(&self, _: &Buffer, _: Strided<'_>, _: &mut Buffer) -> Result<()> {
        Ok(())
    }

    fn concat(&self, _: &[&Buffer], _: &[usize], _: usize, _: &mut Buffer) -> Result<()> {
        Ok(())
    }
}
