//! Meta kernels: nothing to compute.

use crate::backend::random::RandomKernels;
use crate::buffer::Buffer;
use crate::error::Result;
use crate::meta::MetaBackend;

impl RandomKernels for MetaBackend {
    fn dropout(&self, _: &Buffer, _: &mut Buffer, _: f64, _: u64) -> Result<()> {
        Ok(())
    }
}
