//! Meta kernels: nothing to compute; each accounts for its work.

use super::kernels::{LayoutKernels, Strided};
use crate::buffer::Buffer;
use crate::error::Result;
use crate::meta::MetaBackend;
use crate::work::Kernel;

impl LayoutKernels for MetaBackend {
    fn gather_strided(&self, _: &Buffer, _: Strided<'_>, out: &mut Buffer) -> Result<()> {
        // As many elements read as written.
        self.record(Kernel::moving(&[out, out]));
        Ok(())
    }

    fn concat(&self, pieces: &[&Buffer], _: &[usize], _: usize, out: &mut Buffer) -> Result<()> {
        let mut buffers = pieces.to_vec();
        buffers.push(out);
        self.record(Kernel::moving(&buffers));
        Ok(())
    }
}
