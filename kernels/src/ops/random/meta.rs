//! Meta kernels: nothing to compute; each accounts for its work.

use super::kernels::RandomKernels;
use crate::buffer::Buffer;
use crate::error::Result;
use crate::meta::MetaBackend;
use crate::work::Kernel;

impl RandomKernels for MetaBackend {
    fn dropout(&self, x: &Buffer, out: &mut Buffer, _: f64, _: u64) -> Result<()> {
        self.record(Kernel::moving_with(&[x, out], 8.0));
        Ok(())
    }
}
