//! Meta kernels: nothing to compute.

use super::{AdamW, OptimKernels};
use crate::buffer::Buffer;
use crate::error::Result;
use crate::meta::MetaBackend;

impl OptimKernels for MetaBackend {
    fn adamw(
        &self,
        _: &AdamW,
        _: u64,
        _: &mut Buffer,
        _: &Buffer,
        _: &mut Buffer,
        _: &mut Buffer,
    ) -> Result<()> {
        Ok(())
    }
}
