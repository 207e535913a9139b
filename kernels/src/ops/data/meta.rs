//! Meta kernels for data movement: nothing to move, and nothing to read.

use crate::backend::data::{DataKernels, check_range};
use crate::buffer::Buffer;
use crate::error::{Error, Result};
use crate::meta::MetaBackend;

impl DataKernels for MetaBackend {
    fn fill(&self, _: &mut Buffer, _: f64) -> Result<()> {
        Ok(())
    }
    fn write(&self, _: &mut Buffer, _: &[u8]) -> Result<()> {
        Ok(())
    }
    fn read(&self, src: &Buffer, _: &mut [u8]) -> Result<()> {
        Err(Error::NoData {
            op: "read",
            device: src.memory().to_string(),
        })
    }
    fn copy(&self, _: &Buffer, _: &mut Buffer) -> Result<()> {
        Ok(())
    }
    fn cast(&self, _: &Buffer, _: &mut Buffer) -> Result<()> {
        Ok(())
    }
    fn cast_range(
        &self,
        src: &Buffer,
        src_at: usize,
        dst: &mut Buffer,
        dst_at: usize,
        len: usize,
    ) -> Result<()> {
        // Nothing to convert, but a bad range fails here as it would on a real device.
        check_range(src, src_at, dst, dst_at, len)
    }
}
